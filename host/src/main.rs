//! The `filerouter` command: parse the command line and run it (see the library's [`cli`]).

use std::process::ExitCode;

use filerouter::cli;

fn main() -> ExitCode {
    // Before anything opens files: the soft open-file limit up to the hard one. How the files
    // are then shared out between connections and the rest is `server::FileBudget`, logged
    // when a server starts.
    filerouter::server::raise_open_file_limit();
    let cli = cli::parse();
    match cli::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
