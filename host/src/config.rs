//! Settings: defaults, then the project's `config.py` (evaluated in the sandbox), then flags.
//!
//! The guest checks names and types and reports errors with the line (`settings.py` in the
//! guest); this module turns the guest's JSON into typed [`Settings`] and derives the values
//! the host uses.

use std::{collections::BTreeMap, path::Path, time::Duration};

use serde::{Deserialize, Serialize};

use crate::{
    environment::{Environment, EnvironmentError, Gathered, Sources},
    regular_file::{self, FileError},
    sandbox::{Limits, ProjectError, Sandbox, SandboxError},
};

/// Everything `config.py` may set (DECISIONS.md, "Project files"). Absent means default.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub app_name: Option<String>,
    pub debug: Option<bool>,
    pub docs_enabled: Option<bool>,
    pub title: Option<String>,
    pub description: Option<String>,
    pub version: Option<String>,
    pub server: ServerSettings,
    pub logging: LoggingSettings,
    pub build: BuildSettings,
    pub commands: BTreeMap<String, String>,
    pub sandbox: SandboxSettings,
    /// The project's plugins by the name route code imports them under (`crate::plugins`).
    pub plugins: BTreeMap<String, PluginSettings>,
    /// The bounds of the project's database (`crate::db`).
    pub database: DatabaseSettings,
    /// The names route code reads from the operator's environment, and where their values are
    /// (`crate::environment`).
    pub environment: crate::environment::EnvironmentSettings,
    /// The project's own settings (`settings = {...}`: `filerouter.settings` in route code).
    #[serde(rename = "settings")]
    pub project: Option<serde_json::Map<String, serde_json::Value>>,
    /// Descriptions and order of the OpenAPI tags (`openapi_tags = [{"name": ..., "description":
    /// ...}]`, FastAPI's `FastAPI(openapi_tags=...)`), for `/docs` and `/openapi.json`.
    pub openapi_tags: Option<Vec<serde_json::Value>>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// The database file's size, in MiB.
    pub max_size_mb: Option<u64>,
    /// Rows one request's statements may return together.
    pub max_rows: Option<u64>,
    /// MiB one request's statements may return together.
    pub max_result_mb: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub workers: Option<u32>,
    /// Open connections at once (see `server::ServerLimits`).
    pub max_connections: Option<u32>,
    /// Seconds to send a request head; also the keep-alive idle time.
    pub header_timeout_s: Option<f64>,
    /// Seconds to send a request body.
    pub body_timeout_s: Option<f64>,
    /// Request bodies held in memory at once, across all requests.
    pub max_buffered_body_bytes: Option<u64>,
    /// Response bodies held in memory at once, across all connections, until written
    /// (`crate::response_body`).
    pub max_buffered_response_bytes: Option<u64>,
    /// Seconds a response write may make no progress before the connection is closed
    /// (`crate::write_timeout`).
    pub write_timeout_s: Option<f64>,
    /// Requests that may wait for a turn in the scheduler (503 beyond).
    pub queue: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LoggingSettings {
    pub level: Option<String>,
    pub production_level: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BuildSettings {
    pub cache_dir: Option<String>,
    pub compression_level: Option<u8>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSettings {
    pub memory_mb: Option<u64>,
    /// Sets both `cpu_ms` and `wall_s` where they are not given.
    pub timeout_s: Option<f64>,
    pub cpu_ms: Option<u64>,
    pub wall_s: Option<f64>,
    pub max_body_bytes: Option<u64>,
}

/// How many requests may wait for a turn when `server.queue` does not say.
pub const DEFAULT_QUEUE: u32 = 256;

/// One entry of `plugins`: the component, its WIT, and what it is granted (nothing by default).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PluginSettings {
    /// The component file, relative to the project.
    pub component: String,
    /// The WIT folder, relative to the project [default: `wit/` beside the component].
    #[serde(default)]
    pub wit: Option<String>,
    /// A project folder the plugin may read, mounted read-only at `/files`.
    #[serde(default)]
    pub files: Option<String>,
    /// Whether it may use the project's key-value store (`filerouter:sandbox/kv`).
    #[serde(default)]
    pub kv: bool,
    /// Whether it sees the host's clocks (else clocks stopped at zero).
    #[serde(default)]
    pub clocks: bool,
}

impl ServerSettings {
    /// Where to listen: the flags, else config.py, else `127.0.0.1:8000`.
    pub fn address(&self, host: Option<String>, port: Option<u16>) -> (String, u16) {
        (
            host.or_else(|| self.host.clone())
                .unwrap_or_else(|| "127.0.0.1".to_string()),
            port.or(self.port).unwrap_or(8000),
        )
    }
}

impl ServerSettings {
    /// The project's queue in the scheduler: as many running at once as there are
    /// `workers`, `queue` (default [`DEFAULT_QUEUE`]) waiting.
    pub fn queue_config(&self, workers: usize) -> crate::scheduler::QueueConfig {
        crate::scheduler::QueueConfig {
            concurrency: workers,
            capacity: self.queue.unwrap_or(DEFAULT_QUEUE) as usize,
        }
    }
}

impl BuildSettings {
    /// The build cache of the project at `root`: `cache_dir` (relative to it), else `.cache`.
    pub fn cache_dir(&self, root: &Path) -> std::path::PathBuf {
        root.join(self.cache_dir.as_deref().unwrap_or(".cache"))
    }
}

/// Why `config.py` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config.py:{line}: {kind}: {message}", line = .0.line.unwrap_or(1), kind = .0.kind, message = .0.message)]
    Project(Box<ProjectError>),
    #[error("config.py: {0}")]
    Invalid(String),
    #[error(transparent)]
    Read(crate::regular_file::FileError),
    #[error("config.py: {0}")]
    Sandbox(SandboxError),
}

impl Settings {
    /// Evaluate `root/config.py` in the sandbox; no file means all defaults. The file is read
    /// on a blocking thread, and only if it is a regular file of a sane size.
    pub async fn load(sandbox: &Sandbox, root: &Path) -> Result<Settings, ConfigError> {
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
        let json = sandbox.load_config(&source).await.map_err(|e| match e {
            SandboxError::Project(error) => ConfigError::Project(error),
            other => ConfigError::Sandbox(other),
        })?;
        // The guest checked names, types and ranges with their lines; this is a backstop, and
        // the JSON's own line and column would mean nothing to the user.
        let settings: Settings = serde_json::from_str(&json).map_err(|e| {
            let text = e.to_string();
            let reason = text.split(" at line ").next().unwrap_or(&text);
            ConfigError::Invalid(format!("a setting has a value out of range: {reason}"))
        })?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.sandbox.memory_mb == Some(0) {
            return Err(ConfigError::Invalid(
                "sandbox['memory_mb'] must be at least 1".into(),
            ));
        }
        for (name, value) in [
            ("timeout_s", self.sandbox.timeout_s),
            ("wall_s", self.sandbox.wall_s),
        ] {
            if let Some(t) = value
                && !(t > 0.0 && t.is_finite() && t <= 86_400.0)
            {
                return Err(ConfigError::Invalid(format!(
                    "sandbox['{name}'] must be a positive number of seconds (at most 86400)"
                )));
            }
        }
        if let Some(ms) = self.sandbox.cpu_ms
            && !(1..=86_400_000).contains(&ms)
        {
            return Err(ConfigError::Invalid(
                "sandbox['cpu_ms'] must be from 1 to 86400000".into(),
            ));
        }
        if self.server.workers == Some(0) {
            return Err(ConfigError::Invalid(
                "server['workers'] must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// The database bounds these settings ask for.
    pub fn db_bounds(&self) -> crate::db::Bounds {
        const MIB: u64 = 1024 * 1024;
        let default = crate::db::Bounds::default();
        let database = &self.database;
        crate::db::Bounds {
            max_size_bytes: database
                .max_size_mb
                .map_or(default.max_size_bytes, |mb| mb.saturating_mul(MIB)),
            max_rows: database.max_rows.map_or(default.max_rows, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
            max_bytes: database.max_result_mb.map_or(default.max_bytes, |mb| {
                usize::try_from(mb.saturating_mul(MIB)).unwrap_or(usize::MAX)
            }),
        }
    }

    /// What `config.py` declares for route code, without values (builds, route inspections).
    pub fn declared_environment(&self) -> Environment {
        Environment::declared(&self.environment, self.project.as_ref())
    }

    /// The declarations with their values from `sources` and the project's env file (blocking:
    /// it reads files).
    pub fn gather_environment(
        &self,
        root: &Path,
        sources: &Sources,
    ) -> Result<Gathered, EnvironmentError> {
        Environment::gather(&self.environment, self.project.as_ref(), root, sources)
    }

    /// For one project (`dev`, `run`): the values from the server's environment, else the
    /// project's env file, read on a blocking thread.
    pub async fn project_environment(&self, root: &Path) -> Result<Gathered, EnvironmentError> {
        let settings = self.clone();
        let root = root.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let sources = Sources {
                process: true,
                ..Sources::default()
            };
            settings.gather_environment(&root, &sources)
        })
        .await
        .unwrap_or_else(|e| Err(EnvironmentError::Failed(e.to_string())))
    }

    /// The per-call sandbox limits these settings ask for.
    pub fn limits(&self) -> Limits {
        let default = Limits::default();
        Limits {
            memory_bytes: self
                .sandbox
                .memory_mb
                .map(|mb| (mb as usize).saturating_mul(1024 * 1024))
                .unwrap_or(default.memory_bytes),
            cpu: self
                .sandbox
                .cpu_ms
                .map(Duration::from_millis)
                .or(self.sandbox.timeout_s.map(Duration::from_secs_f64))
                .unwrap_or(default.cpu),
            wall: self
                .sandbox
                .wall_s
                .or(self.sandbox.timeout_s)
                .map(Duration::from_secs_f64)
                .unwrap_or(default.wall),
            max_body_bytes: self
                .sandbox
                .max_body_bytes
                .map(|b| b as usize)
                .unwrap_or(default.max_body_bytes),
        }
    }
}
