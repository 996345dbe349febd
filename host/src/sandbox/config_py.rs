//! Running `config.py`: it is project code, so it runs in the sandbox like a route, and what it
//! sets comes back as JSON that [`crate::config::Settings`] (below the sandbox) reads and
//! checks. Not the settings themselves, nor where they are used.

use std::path::Path;

use crate::{
    config::Settings,
    regular_file::{self, FileError},
};

use super::{ProjectError, Sandbox, SandboxError};

/// Why `config.py` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config.py:{line}: {kind}: {message}", line = .0.line.unwrap_or(1), kind = .0.kind, message = .0.message)]
    Project(Box<ProjectError>),
    #[error("config.py: {0}")]
    Invalid(String),
    #[error(transparent)]
    Read(FileError),
    #[error("config.py: {0}")]
    Sandbox(SandboxError),
}

impl Sandbox {
    /// Evaluate `root/config.py` in this sandbox; no file means all defaults. The file is read
    /// on a blocking thread, and only if it is a regular file of a sane size.
    pub async fn load_settings(&self, root: &Path) -> Result<Settings, ConfigError> {
        let path = root.join("config.py");
        let read = tokio::task::spawn_blocking(move || {
            regular_file::read_to_string(&path, regular_file::MAX_SOURCE_BYTES)
        })
        .await
        .map_err(|e| ConfigError::Invalid(format!("reading config.py failed: {e}")))?;
        let source = match read {
            Ok(source) => source,
            Err(FileError::NotFound(_)) => return Ok(Settings::default()),
            Err(e) => return Err(ConfigError::Read(e)),
        };
        let json = self.load_config(&source).await.map_err(|e| match e {
            SandboxError::Project(error) => ConfigError::Project(error),
            other => ConfigError::Sandbox(other),
        })?;
        Settings::from_json(&json).map_err(ConfigError::Invalid)
    }
}
