//! Settings: defaults, then the project's `config.py` (evaluated in the sandbox), then flags.
//!
//! The guest checks names and types and reports errors with the line (`settings.py` in the
//! guest); this module turns the guest's JSON into typed [`Settings`] and derives the values
//! the host uses, the sandbox's [`Limits`] among them. It is the bottom of the sandbox's
//! layer: it imports neither the sandbox nor the plugins; running `config.py` is the
//! sandbox's (`Sandbox::load_settings`), loading plugins is `crate::plugins`'.

use std::{collections::BTreeMap, path::Path, time::Duration};

use serde::{Deserialize, Serialize};

use crate::{
    environment::{Environment, EnvironmentError, Gathered, Sources},
    scheduler::TimeLimits,
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
    /// What route code may call over HTTP (`crate::outbound`); nothing by default.
    pub outbound: OutboundSettings,
    /// Descriptions and order of the OpenAPI tags (`openapi_tags = [{"name": ..., "description":
    /// ...}]`, FastAPI's `FastAPI(openapi_tags=...)`), for `/docs` and `/openapi.json`.
    pub openapi_tags: Option<Vec<serde_json::Value>>,
    /// Recording requests for `filerouter replay` (`crate::replay`): on in `run` and `dev`
    /// when `enabled`, with these bounds; `run`'s `--record*` flags override them.
    pub record: RecordConfig,
}

/// `record = {...}` in `config.py`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RecordConfig {
    pub enabled: Option<bool>,
    /// The fraction (0 to 1) of requests that did not answer 5xx or 499 whose traces are kept.
    pub sample: Option<f64>,
    /// Traces kept at most.
    pub max_traces: Option<u64>,
    /// MiB the kept traces take at most together.
    pub max_mb: Option<u64>,
    /// Request headers whose values are never recorded (instead of the default list).
    pub redact_headers: Option<Vec<String>>,
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
    /// MiB the database's temporary files may hold at once (all requests together).
    pub max_temp_mb: Option<u64>,
    /// MiB one request's private `:memory:` databases may hold together.
    pub max_memory_mb: Option<u64>,
}

/// `outbound = {...}`: the origins route code may call, and the bounds of its calls.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OutboundSettings {
    /// Origins (`https://api.stripe.com`, `https://*.example.com`, `http://127.0.0.1:9000`).
    pub allow: Vec<String>,
    /// Calls one request may make (each redirect hop counts).
    pub max_calls: Option<u32>,
    /// Calls one request may have open at once.
    pub max_concurrent: Option<u32>,
    /// MiB one request's calls may receive together.
    pub max_received_mb: Option<u64>,
    /// Connections the project may have open at once over all its requests.
    pub max_connections: Option<u32>,
    /// Seconds each step of a call may take when the call names no timeout.
    pub timeout_s: Option<f64>,
}

impl OutboundSettings {
    /// The project's allow-list; an error names the bad entry.
    pub fn allow_list(&self) -> Result<crate::outbound::AllowList, String> {
        crate::outbound::AllowList::parse(&self.allow, crate::outbound::Source::Project)
    }

    /// The project's gate: its list, narrowed by `operator`'s under `run --tenants`, its
    /// bounds (the operator's connections if fewer), counting into `metrics`.
    pub fn gate(
        &self,
        operator: Option<&crate::outbound::OperatorGrant>,
        metrics: std::sync::Arc<crate::outbound::Metrics>,
    ) -> Result<std::sync::Arc<crate::outbound::Gate>, String> {
        let project = self.allow_list()?;
        let mut bounds = self.bounds();
        if let Some(connections) = operator.and_then(|grant| grant.connections) {
            bounds.connections = bounds.connections.min(connections);
        }
        let rules = crate::outbound::Rules::new(project, operator.map(|grant| grant.allow.clone()));
        Ok(std::sync::Arc::new(crate::outbound::Gate::new(
            rules, bounds, metrics,
        )))
    }

    /// The bounds these settings ask for.
    pub fn bounds(&self) -> crate::outbound::Bounds {
        let default = crate::outbound::Bounds::default();
        crate::outbound::Bounds {
            calls: self.max_calls.unwrap_or(default.calls),
            concurrent: self.max_concurrent.unwrap_or(default.concurrent),
            received: self
                .max_received_mb
                .map_or(default.received, |mb| mb.saturating_mul(1024 * 1024)),
            connections: self.max_connections.unwrap_or(default.connections),
            timeout: self
                .timeout_s
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .unwrap_or(default.timeout),
        }
    }
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
    /// CPU time one streamed response may use over its whole life (`crate::sandbox::stream`).
    pub stream_cpu_ms: Option<u64>,
    /// Seconds one streamed response may last, from the request's start.
    pub stream_duration_s: Option<f64>,
    /// Seconds a streamed response may go without sending a chunk before it is cut off.
    pub stream_idle_s: Option<f64>,
    /// Streamed responses and WebSockets the project (under `run --tenants`: the tenant) may
    /// have open at once.
    pub max_streams: Option<u32>,
    /// CPU time a WebSocket handler may use for each message it receives
    /// (`crate::sandbox::socket`).
    pub websocket_message_cpu_ms: Option<u64>,
    /// The largest WebSocket message, either way, in bytes.
    pub websocket_max_message_bytes: Option<u64>,
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

impl Settings {
    /// The settings from the JSON that the guest made of `config.py` (the sandbox's
    /// `load_settings` runs it), checked again here. `Err` says what is wrong, for
    /// `config.py: ...`.
    pub fn from_json(json: &str) -> Result<Settings, String> {
        // The guest checked names, types and ranges with their lines; this is a backstop, and
        // the JSON's own line and column would mean nothing to the user.
        let settings: Settings = serde_json::from_str(json).map_err(|e| {
            let text = e.to_string();
            let reason = text.split(" at line ").next().unwrap_or(&text).to_string();
            format!("a setting has a value out of range: {reason}")
        })?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), String> {
        if self.sandbox.memory_mb == Some(0) {
            return Err("sandbox['memory_mb'] must be at least 1".to_string());
        }
        for (name, value) in [
            ("timeout_s", self.sandbox.timeout_s),
            ("wall_s", self.sandbox.wall_s),
            ("stream_duration_s", self.sandbox.stream_duration_s),
            ("stream_idle_s", self.sandbox.stream_idle_s),
        ] {
            if let Some(t) = value
                && !(t > 0.0 && t.is_finite() && t <= 86_400.0)
            {
                return Err(format!(
                    "sandbox['{name}'] must be a positive number of seconds (at most 86400)"
                ));
            }
        }
        if let Some(ms) = self.sandbox.cpu_ms
            && !(1..=86_400_000).contains(&ms)
        {
            return Err("sandbox['cpu_ms'] must be from 1 to 86400000".to_string());
        }
        if let Some(ms) = self.sandbox.stream_cpu_ms
            && !(1..=86_400_000).contains(&ms)
        {
            return Err("sandbox['stream_cpu_ms'] must be from 1 to 86400000".to_string());
        }
        if let Some(ms) = self.sandbox.websocket_message_cpu_ms
            && !(1..=86_400_000).contains(&ms)
        {
            return Err(
                "sandbox['websocket_message_cpu_ms'] must be from 1 to 86400000".to_string(),
            );
        }
        if let Some(bytes) = self.sandbox.websocket_max_message_bytes
            && !(MIN_WEBSOCKET_MESSAGE..=MAX_WEBSOCKET_MESSAGE).contains(&bytes)
        {
            return Err(format!(
                "sandbox['websocket_max_message_bytes'] must be from {MIN_WEBSOCKET_MESSAGE} to {MAX_WEBSOCKET_MESSAGE}"
            ));
        }
        if self.sandbox.max_streams == Some(0) {
            return Err("sandbox['max_streams'] must be at least 1".to_string());
        }
        if let Some(sample) = self.record.sample
            && !(0.0..=1.0).contains(&sample)
        {
            return Err("record['sample'] must be from 0 to 1".to_string());
        }
        if self.server.workers == Some(0) {
            return Err("server['workers'] must be at least 1".to_string());
        }
        self.outbound.allow_list()?;
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
            max_temp_bytes: database
                .max_temp_mb
                .map_or(default.max_temp_bytes, |mb| mb.saturating_mul(MIB)),
            max_memory_bytes: database
                .max_memory_mb
                .map_or(default.max_memory_bytes, |mb| mb.saturating_mul(MIB)),
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
            stream: StreamLimits {
                cpu: self
                    .sandbox
                    .stream_cpu_ms
                    .map(Duration::from_millis)
                    .unwrap_or(default.stream.cpu),
                duration: self
                    .sandbox
                    .stream_duration_s
                    .map(Duration::from_secs_f64)
                    .unwrap_or(default.stream.duration),
                idle: self
                    .sandbox
                    .stream_idle_s
                    .map(Duration::from_secs_f64)
                    .unwrap_or(default.stream.idle),
                max_open: self.sandbox.max_streams.map(|n| n as usize),
                message_cpu: self
                    .sandbox
                    .websocket_message_cpu_ms
                    .map(Duration::from_millis)
                    .unwrap_or(default.stream.message_cpu),
                max_message_bytes: self
                    .sandbox
                    .websocket_max_message_bytes
                    .map(|n| n as usize)
                    .unwrap_or(default.stream.max_message_bytes),
            },
        }
    }
}

/// The limits one call into the guest runs under (DECISIONS.md, "Sandbox guarantees"), from
/// `config.py`'s `sandbox` (or a tenant's section). The sandbox enforces them
/// (`crate::sandbox::MemoryLimiter`, the scheduler's budgets).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// The most linear memory one instance may grow to.
    pub memory_bytes: usize,
    /// The CPU time one call may use (`sandbox.cpu_ms`); time spent waiting is not counted.
    pub cpu: Duration,
    /// The wall-clock time one call may take (`sandbox.wall_s`): its CPU time plus the time it
    /// is blocked in host calls; time spent queued or waiting for a thread is not counted.
    pub wall: Duration,
    /// The largest request body the host accepts (larger bodies get 413).
    pub max_body_bytes: usize,
    /// What a request's call may use once it streams its response (`crate::sandbox::stream`).
    pub stream: StreamLimits,
}

/// The limits of a long connection, a streamed response or a WebSocket (`sandbox["stream_*"]`,
/// `sandbox["max_streams"]`, `sandbox["websocket_*"]`): they replace the request's `cpu_ms` and
/// `wall_s` once the handler's stream starts or its socket is accepted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamLimits {
    /// CPU time the whole call may use, the part before the stream started included.
    pub cpu: Duration,
    /// How long the call may last in all, counted as `wall_s` is (time queued or waiting for a
    /// thread is not counted).
    pub duration: Duration,
    /// How long the stream may go without a chunk (an SSE keep-alive comment is one).
    pub idle: Duration,
    /// Streams and sockets open at once in the project (a tenant, under `run --tenants`); None:
    /// half the instances its requests may use at once, at least one.
    pub max_open: Option<usize>,
    /// CPU time a WebSocket handler may use from one received message to the next `receive`
    /// (within `cpu`, which still bounds the whole connection).
    pub message_cpu: Duration,
    /// The largest WebSocket message, received or sent (a client's larger one closes the
    /// connection with 1009).
    pub max_message_bytes: usize,
}

/// The bounds of `sandbox["websocket_max_message_bytes"]`.
pub const MIN_WEBSOCKET_MESSAGE: u64 = 125;
pub const MAX_WEBSOCKET_MESSAGE: u64 = 64 * 1024 * 1024;

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            cpu: Duration::from_secs(30),
            duration: Duration::from_secs(3600),
            idle: Duration::from_secs(60),
            max_open: None,
            message_cpu: Duration::from_secs(5),
            max_message_bytes: 1024 * 1024,
        }
    }
}

impl Limits {
    /// The time limits, as the scheduler enforces them.
    pub fn time(&self) -> TimeLimits {
        TimeLimits {
            cpu: self.cpu,
            wall: self.wall,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 256 * 1024 * 1024,
            cpu: Duration::from_secs(30),
            wall: Duration::from_secs(30),
            max_body_bytes: 10 * 1024 * 1024,
            stream: StreamLimits::default(),
        }
    }
}
