//! Every black-box test, in one test binary: each file of `tests/` is a module here, so the
//! suite links once and its tests share the test threads (one binary a file linked forty
//! times and ran them one after another). Run one file's tests with a filter:
//! `cargo test --release --test suite routing::`.

mod support;

mod alembic;
mod backends;
mod backups;
mod bodies;
mod cli;
mod config;
mod container;
mod data;
mod data_tls;
mod docs;
mod docs_site;
mod environment;
mod errors;
mod fleet;
mod handlers;
mod helm;
mod hostile;
mod hostile_admin;
mod hostile_data;
mod hostile_files;
mod hostile_guest;
mod images;
mod isolation;
mod layering;
mod lifecycle;
mod middleware;
mod models;
mod operations;
mod outbound;
mod packages;
mod params;
mod passwords;
mod plugins;
mod port;
mod production;
mod pydantic;
mod pydantic_oracle;
mod replay;
mod routing;
mod sandbox;
mod scheduler;
mod security;
mod static_files;
mod stdlib;
mod streaming;
mod tenant_isolation;
mod tenants;
mod traces;
mod typing;
mod websockets;
mod wheel;
