//! `filerouter`: serve a folder of Python route files as an HTTP API, every line of the Python
//! running in a WebAssembly sandbox.
//!
//! A request goes: [`server`] (socket, HTTP) → [`router`] (redirect, route lookup, method,
//! docs, [`public`] static files, 404) → [`sandbox`] (a fresh guest instance runs
//! `middleware.py` around the handler) → back through [`router`]. [`routes`] turns the
//! `routes/` folder into a route table; [`project`] asks the guest what each route file
//! defines; [`catalog`] describes the API for [`docs`]; [`kv`] is the state that outlives a
//! request; [`reload`] keeps it all current in `dev`; [`cli`] has one module per command.

mod app;
mod cache;
mod catalog;
mod cli;
mod config;
mod docs;
mod error_page;
mod kv;
mod logging;
mod project;
mod public;
mod reload;
mod router;
mod routes;
mod sandbox;
mod server;

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::parse();
    match cli::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
