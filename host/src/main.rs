//! `filerouter`: serve a folder of Python route files as an HTTP API, every line of the Python
//! running in a WebAssembly sandbox.
//!
//! A request goes: [`server`] (socket, HTTP) → [`router`] (limits, redirect, route lookup,
//! method) → [`sandbox`] (a fresh guest instance runs the handler) → back through [`router`].
//! [`routes`] turns the `routes/` folder into a route table; [`project`] asks the guest what
//! each route file defines; [`reload`] keeps it current in `dev`; [`cli`] has one module per
//! command.

mod app;
mod cache;
mod cli;
mod config;
mod error_page;
mod logging;
mod project;
mod reload;
mod router;
mod routes;
mod sandbox;
mod server;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
