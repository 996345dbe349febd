//! The `filerouter` command: parse the command line and run it (see the library's [`cli`]).

use std::process::ExitCode;

use filerouter::cli;

fn main() -> ExitCode {
    quiet_on_a_closed_pipe();
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

/// Writing to a closed pipe (`filerouter status | head -1`) ends the command quietly, as it ends
/// a Unix tool (ripgrep exits 0 so too). Rust ignores `SIGPIPE`, so a `println!` to a closed
/// pipe panics with "failed printing to stdout: Broken pipe" instead; this hook turns that one
/// panic, from any command or thread, into a quiet exit. Every other panic is reported as
/// before. Not `SIGPIPE`'s default action: a server would then die of a client's closed socket.
fn quiet_on_a_closed_pipe() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to std") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        report(info);
    }));
}
