//! Log output through `tracing`: info and access lines in development, warnings and errors
//! in production (SPEC.md, "Modes"); config.py's `logging` sets the levels, and a non-empty
//! `RUST_LOG` overrides them. Colours only on a terminal, and never with `NO_COLOR` set.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::mode::Mode;

/// Install the global subscriber. `level` is a `tracing` filter such as `info` or `warn`.
/// Python's level names (`WARNING`, `CRITICAL`, any case) are accepted too.
pub fn init(mode: Mode, level: Option<&str>) {
    let level = level.map(|l| match l.to_ascii_lowercase().as_str() {
        "warning" => "warn".to_string(),
        "critical" | "fatal" => "error".to_string(),
        other => other.to_string(),
    });
    let default = level.as_deref().unwrap_or(match mode {
        Mode::Development => "info",
        Mode::Production => "warn",
    });
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let filter = from_env
        .map(EnvFilter::try_new)
        .unwrap_or_else(|| EnvFilter::try_new(default))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // A log piped to a file or a collector gets no escape codes.
    let colour = std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_target(false)
        .compact()
        .try_init();
}
