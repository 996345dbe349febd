//! The command line: one module per command, like wasmtime's own CLI.
//!
//! `init` creates a project, `dev` serves one with hot reload, `build` writes the build cache
//! that `run` serves from in production, `status` and `clean` report on and remove it.

mod build;
mod clean;
mod dev;
mod init;
mod run;
mod status;

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
    /// Import and snapshot every route once, and write the compressed build cache.
    Build(BuildArgs),
    /// Serve the project from its build cache, in production mode.
    Run(RunArgs),
    /// Report whether a build cache exists, when it was made and what it holds.
    Status(CacheArgs),
    /// Remove the build cache.
    Clean(CacheArgs),
}

/// Options of `filerouter build`.
#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The project folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// zstd level, 1 (fastest) to 9 (smallest) [default: config.py's build.compression_level, else 6].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=9))]
    pub compression: Option<u8>,
    /// Encrypt the cache with AES-256-GCM under the key in FILEROUTER_CACHE_KEY (64 hex characters).
    #[arg(long)]
    pub encrypt: bool,
    /// Build even if the cache is up to date.
    #[arg(long)]
    pub force: bool,
}

/// Options of `filerouter run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The project folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// The address to listen on [default: the build's server.host, else 127.0.0.1].
    #[arg(long)]
    pub host: Option<String>,
    /// The port to listen on; 0 picks a free one [default: the build's server.port, else 8000].
    #[arg(long)]
    pub port: Option<u16>,
    /// How many requests run in the sandbox at once [default: the build's server.workers, else 64].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub workers: Option<u32>,
    /// The build cache, relative to the project.
    #[arg(long, default_value = ".cache")]
    pub cache_dir: PathBuf,
}

/// Options of `filerouter status` and `filerouter clean`.
#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    /// The project folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// The build cache, relative to the project.
    #[arg(long, default_value = ".cache")]
    pub cache_dir: PathBuf,
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
        Command::Build(args) => build::run(args),
        Command::Run(args) => run::run(args),
        Command::Status(args) => status::run(args),
        Command::Clean(args) => clean::run(args),
    }
}
