//! Log output through `tracing`: info and access lines in development, warnings and errors
//! in production (SPEC.md, "Modes"), plus one access line per request in `run` unless
//! `--no-access-log` (`crate::access_log`); config.py's `logging` sets the levels, and a
//! non-empty `RUST_LOG` overrides them (access lines included). Text by default, one JSON
//! object per line with `--log-format json`. Colours only on a terminal, and never with
//! `NO_COLOR` set.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::{access_log::LogFormat, mode::Mode};

/// Install the global subscriber. `level` is a `tracing` filter such as `info` or `warn`.
/// Python's level names (`WARNING`, `CRITICAL`, any case) are accepted too.
pub fn init(mode: Mode, level: Option<&str>) {
    init_with(mode, level, LogFormat::Text, false);
}

/// [`init`] in `format`; with `access`, access lines (target `access`, level info) are kept
/// whatever `level` says.
pub fn init_with(mode: Mode, level: Option<&str>, format: LogFormat, access: bool) {
    let level = level.map(|l| match l.to_ascii_lowercase().as_str() {
        "warning" => "warn".to_string(),
        "critical" | "fatal" => "error".to_string(),
        other => other.to_string(),
    });
    let mut default = level
        .as_deref()
        .unwrap_or(match mode {
            Mode::Development => "info",
            Mode::Production => "warn",
        })
        .to_string();
    if access {
        default.push_str(",access=info");
    }
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let filter = from_env
        .map(EnvFilter::try_new)
        .unwrap_or_else(|| EnvFilter::try_new(&default))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    crate::access_log::set_format(format);
    let _ = match format {
        LogFormat::Json => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_target(true)
            .try_init(),
        LogFormat::Text => {
            // A log piped to a file or a collector gets no escape codes.
            let colour = std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(colour)
                .with_target(false)
                .compact()
                .try_init()
        }
    };
}
