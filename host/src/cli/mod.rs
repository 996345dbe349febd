//! The command line: one module per command, like wasmtime's own CLI.
//!
//! `init` creates a project, `dev` serves one with hot reload.

mod dev;
mod init;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Turn a folder of Python route files into an HTTP API, run in a WebAssembly sandbox.
#[derive(Debug, Parser)]
#[command(name = "filerouter", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a new project folder NAME with routes/, config.py, public/ and .gitignore.
    Init {
        /// The folder to create.
        name: PathBuf,
    },
    /// Serve the project with hot reload and detailed error pages.
    Dev(ServeArgs),
}

/// Where to find the project and where to listen.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The project folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// The address to listen on [default: config.py's server.host, else 127.0.0.1].
    #[arg(long)]
    pub host: Option<String>,
    /// The port to listen on; 0 picks a free one [default: config.py's server.port, else 8000].
    #[arg(long)]
    pub port: Option<u16>,
}

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Init { name } => init::run(&name),
        Command::Dev(args) => dev::run(args),
    }
}
