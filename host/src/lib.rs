//! `filerouter` as a library: serve a folder of Python route files as an HTTP API, every line
//! of the Python running in a WebAssembly sandbox.
//!
//! A request goes: [`server`] (socket, HTTP, connection bounds) → [`http_checks`] (RFC 9112
//! refusals) → [`site`] (one project, or the [`tenants`] tenant its host names) → [`router`]
//! (redirect, route lookup, method,
//! docs, [`public`] static files, 404) → [`sandbox`] (a fresh guest instance runs
//! `middleware.py` around the handler, after [`request_body`] read the body within its
//! bounds) → back through [`router`], whose answer [`response_body`] bounds in memory and
//! [`write_timeout`] in time. These import one way: each builds its answers from [`response`],
//! none imports a module that imports it back; [`mode`] is development or production.
//! [`regular_file`] reads every file a project holds without trusting its kind or size. [`routes`] turns the
//! `routes/` folder into a route table; [`project`] asks the guest what each route file
//! defines; [`catalog`] describes the API for [`docs`]; [`data`] is the state that outlives a
//! request ([`db`], the project's SQL database, and [`kv`], its key-value store; [`server_tls`] is their TLS to the operator's servers; [`alembic`] runs the project's Alembic history in the sandbox); [`plugins`] are the project's own WebAssembly components that route code calls;
//! [`passwords`] hashes route code's passwords on the host, at native speed; [`outbound`] is
//! route code's HTTP calls to other services, through the project's allow-list; [`environment`] gives
//! it the settings and secrets the operator keeps outside the source;
//! [`reload`] keeps it all current in `dev`, and [`imported`] keeps the project imported there in
//! snapshots, as a build does for `run`; [`admin`] serves `run`'s [`metrics`] and [`health`] (readiness) on the admin address, and
//! [`access_log`] writes a line per request from its [`request_record`];
//! [`cli`] has one module per command.
//!
//! The binary (`main.rs`) is a thin entry point over [`cli`]; the library form exists so that
//! the fuzz targets in `fuzz/` and the benchmarks can reach the parsers directly.

pub mod access_log;
pub mod admin;
pub mod alembic;
pub mod app;
pub mod cache;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod data;
pub mod db;
pub mod docs;
pub mod environment;
pub mod error_page;
pub mod health;
pub mod http_checks;
pub mod imported;
pub mod kv;
pub mod logging;
pub mod metrics;
pub mod mode;
pub mod outbound;
pub mod packages;
pub mod passwords;
pub mod plugins;
pub mod project;
pub mod public;
pub mod read_only_files;
pub mod redaction;
pub mod regular_file;
pub mod reload;
pub mod replay;
pub mod request_body;
pub mod request_record;
pub mod response;
pub mod response_body;
pub mod router;
pub mod routes;
pub mod sandbox;
pub mod scheduler;
pub mod server;
pub mod server_tls;
pub mod site;
pub mod startup;
pub mod tenants;
pub mod traces;
pub mod write_timeout;
