//! The `filerouter` command: parse the command line and run it (see the library's [`cli`]).

use std::process::ExitCode;

use filerouter::cli;

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
