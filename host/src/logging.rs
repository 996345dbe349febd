//! Log output through `tracing`: info and access lines in development, warnings and errors
//! in production (SPEC.md, "Modes"). `RUST_LOG` overrides the level.

use tracing_subscriber::EnvFilter;

use crate::app::Mode;

/// Install the global subscriber. `level` is a `tracing` filter such as `info` or `warn`.
pub fn init(mode: Mode, level: Option<&str>) {
    let default = level.unwrap_or(match mode {
        Mode::Development => "info",
        Mode::Production => "warn",
    });
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(default))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .compact()
        .try_init();
}
