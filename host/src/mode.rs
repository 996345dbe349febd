//! Development or production: what a server reveals and how it behaves around project code.
//!
//! `dev` runs in [`Mode::Development`] (detailed error pages, hot reload, the log at info
//! level); `run` in [`Mode::Production`] (opaque 500s, warnings and errors only). Here only
//! the distinction lives; each module that behaves differently reads it.

/// Development shows detailed error pages; production reveals nothing about the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Development,
    Production,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Development => "development",
            Mode::Production => "production",
        }
    }
}
