//! `tenants.toml`: which projects one `filerouter run` serves, under which host names, with which
//! limits.
//!
//! ```toml
//! default_tenant = "blog"        # optional: unknown hosts go here instead of a 404
//!
//! [server]
//! max_loaded = 64                # tenants kept loaded; the least recently used is unloaded
//! idle_unload_s = 600            # a tenant idle this long is unloaded
//! reserved_instances = 4         # instances kept for tenants with nothing running [default: a quarter of --workers]
//!
//! [defaults]                     # every tenant's limits, unless its own section says otherwise
//! memory_mb = 128
//! cpu_ms = 200
//! max_streams = 2                # streamed responses and WebSockets open at once [default: half its concurrency]
//!
//! [tenant.acme]
//! hosts = ["acme.example.com", "*.acme.example.com"]
//! project = "sites/acme"         # relative to this file
//! data_dir = "data/acme"         # its database and kv store [default: .data/ in the project]
//! database_url = "postgres://acme:PASSWORD@db.internal:5432/acme"  # optional: its database
//! kv_url = "redis://cache.internal:6379"                           # optional: its kv store
//! migrate = true                 # apply its build's pending migrations when it loads
//! env_file = "secrets/acme.env"  # values for the names its config.py declares (KEY=value lines)
//! outbound = ["https://api.stripe.com", "https://*.acme.example.com"]  # what it may call
//! outbound_connections = 32      # its outbound connections open at once
//! cpu_ms = 500
//!
//! record = true                 # tape its requests; keep 5xx traces in data_dir/traces/
//! record_sample = 0.01           # and this fraction of the others [default: 0]
//! traces_token = "..."           # its bearer token for /tenants/acme/traces on the admin address
//!
//! [tenant.acme.env]              # the same, written here (these come first)
//! JWT_SECRET = "..."
//! ```
//!
//! `database_url` puts the tenant's database in Postgres instead of its data folder: give each
//! tenant a role of its own that owns its database and nothing else (`CREATE ROLE acme LOGIN
//! PASSWORD '...'; CREATE DATABASE acme OWNER acme; REVOKE CONNECT ON DATABASE acme FROM
//! PUBLIC;`). `kv_url` puts its kv store on a Redis server, under the keys
//! `filerouter:t:NAME:`. Both are the operator's settings (with passwords: keep the file
//! private); no message shows a password. `env` and `env_file` give the values of the names the
//! tenant's `config.py` declares in `environment` (`crate::environment`); a tenant never sees
//! the server's own environment.
//!
//! Parsing is strict: unknown keys, wrong types, bad names, duplicate or overlapping hosts, a
//! missing `project` or project folder are errors that name the file and line. This module only
//! reads and checks the file; serving the tenants is the parent module's job.

use std::{
    collections::BTreeMap,
    ops::Range,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::Deserialize;
use toml::Spanned;

use super::hosts::HostPattern;
use crate::environment::{self, OperatorValues};

/// Why a tenants file could not be used: one line naming the file and the line.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{file}:{line}: {message}")]
pub struct TenantsError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

/// Limits as written in `[defaults]` or a tenant's section; absent means "not said here".
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory_mb: Option<Spanned<u64>>,
    cpu_ms: Option<Spanned<u64>>,
    wall_s: Option<Spanned<f64>>,
    concurrency: Option<Spanned<u64>>,
    queue: Option<Spanned<u64>>,
    max_body_bytes: Option<Spanned<u64>>,
    kv_keys: Option<Spanned<u64>>,
    kv_key_bytes: Option<Spanned<u64>>,
    kv_value_bytes: Option<Spanned<u64>>,
    db_max_size_mb: Option<Spanned<u64>>,
    db_max_rows: Option<Spanned<u64>>,
    db_max_result_mb: Option<Spanned<u64>>,
    db_max_temp_mb: Option<Spanned<u64>>,
    db_max_memory_mb: Option<Spanned<u64>>,
    db_pool_size: Option<Spanned<u64>>,
    db_connect_timeout_s: Option<Spanned<f64>>,
    db_checkout_timeout_s: Option<Spanned<f64>>,
    max_streams: Option<Spanned<u64>>,
    stream_cpu_ms: Option<Spanned<u64>>,
    stream_duration_s: Option<Spanned<f64>>,
    stream_idle_s: Option<Spanned<f64>>,
    websocket_message_cpu_ms: Option<Spanned<u64>>,
    websocket_max_message_bytes: Option<Spanned<u64>>,
}

/// A `[tenant.NAME]` section as written: the tenant's own keys and any limit.
///
/// The limit fields repeat [`RawLimits`] on purpose: `#[serde(flatten)]` would drop
/// `deny_unknown_fields` (serde supports no combination of the two) and buffer the values,
/// losing the spans that `Spanned` needs for the line numbers in errors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    #[serde(default)]
    hosts: Vec<Spanned<String>>,
    project: Spanned<String>,
    cache_dir: Option<Spanned<String>>,
    data_dir: Option<Spanned<String>>,
    database_url: Option<Spanned<String>>,
    kv_url: Option<Spanned<String>>,
    migrate: Option<Spanned<bool>>,
    env: Option<Spanned<BTreeMap<String, String>>>,
    env_file: Option<Spanned<String>>,
    record: Option<Spanned<bool>>,
    record_sample: Option<Spanned<f64>>,
    traces_token: Option<Spanned<String>>,
    outbound: Option<Spanned<Vec<String>>>,
    outbound_connections: Option<Spanned<u32>>,
    memory_mb: Option<Spanned<u64>>,
    cpu_ms: Option<Spanned<u64>>,
    wall_s: Option<Spanned<f64>>,
    concurrency: Option<Spanned<u64>>,
    queue: Option<Spanned<u64>>,
    max_body_bytes: Option<Spanned<u64>>,
    kv_keys: Option<Spanned<u64>>,
    kv_key_bytes: Option<Spanned<u64>>,
    kv_value_bytes: Option<Spanned<u64>>,
    db_max_size_mb: Option<Spanned<u64>>,
    db_max_rows: Option<Spanned<u64>>,
    db_max_result_mb: Option<Spanned<u64>>,
    db_max_temp_mb: Option<Spanned<u64>>,
    db_max_memory_mb: Option<Spanned<u64>>,
    db_pool_size: Option<Spanned<u64>>,
    db_connect_timeout_s: Option<Spanned<f64>>,
    db_checkout_timeout_s: Option<Spanned<f64>>,
    max_streams: Option<Spanned<u64>>,
    stream_cpu_ms: Option<Spanned<u64>>,
    stream_duration_s: Option<Spanned<f64>>,
    stream_idle_s: Option<Spanned<f64>>,
    websocket_message_cpu_ms: Option<Spanned<u64>>,
    websocket_max_message_bytes: Option<Spanned<u64>>,
}

impl RawTenant {
    fn limits(&self) -> RawLimits {
        RawLimits {
            memory_mb: self.memory_mb.clone(),
            cpu_ms: self.cpu_ms.clone(),
            wall_s: self.wall_s.clone(),
            concurrency: self.concurrency.clone(),
            queue: self.queue.clone(),
            max_body_bytes: self.max_body_bytes.clone(),
            kv_keys: self.kv_keys.clone(),
            kv_key_bytes: self.kv_key_bytes.clone(),
            kv_value_bytes: self.kv_value_bytes.clone(),
            db_max_size_mb: self.db_max_size_mb.clone(),
            db_max_rows: self.db_max_rows.clone(),
            db_max_result_mb: self.db_max_result_mb.clone(),
            db_max_temp_mb: self.db_max_temp_mb.clone(),
            db_max_memory_mb: self.db_max_memory_mb.clone(),
            db_pool_size: self.db_pool_size.clone(),
            db_connect_timeout_s: self.db_connect_timeout_s.clone(),
            db_checkout_timeout_s: self.db_checkout_timeout_s.clone(),
            max_streams: self.max_streams.clone(),
            stream_cpu_ms: self.stream_cpu_ms.clone(),
            stream_duration_s: self.stream_duration_s.clone(),
            stream_idle_s: self.stream_idle_s.clone(),
            websocket_message_cpu_ms: self.websocket_message_cpu_ms.clone(),
            websocket_max_message_bytes: self.websocket_max_message_bytes.clone(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    max_loaded: Option<Spanned<u64>>,
    idle_unload_s: Option<Spanned<f64>>,
    reserved_instances: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    default_tenant: Option<Spanned<String>>,
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    defaults: RawLimits,
    #[serde(default)]
    tenant: BTreeMap<Spanned<String>, RawTenant>,
}

/// One tenant's limits, every value decided (the tenant's, else `[defaults]`, else built in).
#[derive(Debug, Clone, PartialEq)]
pub struct TenantLimits {
    pub memory_bytes: usize,
    pub cpu: Duration,
    pub wall: Duration,
    pub concurrency: u32,
    pub queue: u32,
    pub max_body_bytes: usize,
    pub kv: crate::kv::Bounds,
    pub db: crate::db::Bounds,
    /// Its Postgres pool (`db_pool_size`, `db_connect_timeout_s`, `db_checkout_timeout_s`),
    /// when it has a `database_url`.
    pub db_pool: crate::db::postgres::PoolSettings,
    /// Its streamed responses' limits (`max_streams`, `stream_cpu_ms`, `stream_duration_s`,
    /// `stream_idle_s`).
    pub stream: crate::config::StreamLimits,
}

impl Default for TenantLimits {
    fn default() -> Self {
        let sandbox = crate::sandbox::Limits::default();
        Self {
            memory_bytes: sandbox.memory_bytes,
            cpu: sandbox.cpu,
            wall: sandbox.wall,
            concurrency: 8,
            queue: 64,
            max_body_bytes: sandbox.max_body_bytes,
            kv: crate::kv::Bounds::default(),
            db: crate::db::Bounds::default(),
            db_pool: crate::db::postgres::PoolSettings::default(),
            stream: sandbox.stream,
        }
    }
}

/// One tenant as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantConfig {
    pub name: String,
    pub hosts: Vec<HostPattern>,
    /// The project folder (absolute).
    pub project: PathBuf,
    /// The project's build cache folder (absolute).
    pub cache_dir: PathBuf,
    /// Where its database and kv store live (absolute): `data_dir`, else `.data/` in the project.
    pub data_dir: PathBuf,
    /// Whether its build's pending migrations are applied when it loads (`migrate = true`);
    /// else a database behind them refuses the tenant.
    pub migrate: bool,
    /// The servers that keep them instead, if any (`database_url`, `kv_url`; the kv prefix is
    /// always `filerouter:t:NAME:`).
    pub servers: crate::data::Servers,
    /// Values for the names its `config.py` declares (`env`), and the operator's env file
    /// (`env_file`, absolute), read when the tenant loads (`crate::environment`).
    pub env: OperatorValues,
    pub env_file: Option<PathBuf>,
    /// The origins it may call (`outbound`, nothing when absent) and its connections at once
    /// (`outbound_connections`): its project's `config.py` can only narrow them.
    pub outbound: crate::outbound::OperatorGrant,
    pub limits: TenantLimits,
    /// `record = true`: its requests are taped, and the traces of 5xx answers (and
    /// `record_sample` of the others, the value here) kept in `data_dir/traces/`
    /// (`crate::replay`); None: not recorded.
    pub record: Option<f64>,
    /// `record = false`, said outright: not recorded even when its project's `config.py` asks
    /// for it (`record = {"enabled": True}`).
    pub record_refused: bool,
    /// `traces_token`: the bearer token that opens its traces, and only its, on the admin
    /// address (`/tenants/NAME/traces`); None: they are not served.
    pub traces_token: Option<String>,
}

/// Process-wide settings of a multi-tenant server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// At most this many tenants are loaded at once; the least recently used is unloaded.
    pub max_loaded: usize,
    /// A tenant that served nothing for this long is unloaded.
    pub idle_unload: Duration,
    /// Instances kept for tenants with nothing running (`crate::scheduler::Scheduler::set_reserve`);
    /// `None`: [`ServerConfig::reserve`]'s default.
    pub reserved_instances: Option<usize>,
}

impl ServerConfig {
    /// The instances to keep for tenants with nothing running, of `workers`: the file's
    /// `reserved_instances`, else a quarter of them (at least 1). `Err` names the problem when
    /// the file asks for as many as there are or more.
    pub fn reserve(&self, workers: usize) -> Result<usize, String> {
        match self.reserved_instances {
            None => Ok((workers / 4).max(1).min(workers.saturating_sub(1))),
            Some(n) if n < workers => Ok(n),
            Some(n) => Err(format!(
                "`reserved_instances` is {n}, but there are only {workers} instances (--workers): it must be fewer"
            )),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_loaded: 64,
            idle_unload: Duration::from_secs(600),
            reserved_instances: None,
        }
    }
}

/// A checked tenants file.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantsConfig {
    pub server: ServerConfig,
    /// In file order (sorted by name).
    pub tenants: Vec<TenantConfig>,
    /// The tenant unknown hosts go to, if any.
    pub default_tenant: Option<String>,
}

impl TenantsConfig {
    /// Read and check the tenants file at `path`: a regular file (never a FIFO, a device or
    /// a socket, which could block the watcher or feed it forever) of at most
    /// [`MAX_TENANTS_BYTES`](crate::regular_file::MAX_TENANTS_BYTES). Blocking, but never for
    /// long: call it off the async threads.
    pub fn load(path: &Path) -> Result<TenantsConfig, TenantsError> {
        let text =
            crate::regular_file::read_to_string(path, crate::regular_file::MAX_TENANTS_BYTES)
                .map_err(|e| TenantsError {
                    file: path.display().to_string(),
                    line: 1,
                    message: format!("cannot read: {}", e.reason()),
                })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&path.display().to_string(), &text, base)
    }

    /// Check the text of a tenants file named `file`; relative paths are relative to `base`.
    pub fn parse(file: &str, text: &str, base: &Path) -> Result<TenantsConfig, TenantsError> {
        let at = |span: Option<Range<usize>>, message: String| TenantsError {
            file: file.to_string(),
            line: span.map_or(1, |s| line_of(text, s.start)),
            message,
        };
        let raw: RawFile =
            toml::from_str(text).map_err(|e| at(e.span(), e.message().trim().to_string()))?;

        let server = ServerConfig {
            max_loaded: match &raw.server.max_loaded {
                None => ServerConfig::default().max_loaded,
                Some(n) if *n.get_ref() >= 1 => *n.get_ref() as usize,
                Some(n) => {
                    return Err(at(Some(n.span()), "`max_loaded` must be at least 1".into()));
                }
            },
            idle_unload: match &raw.server.idle_unload_s {
                None => ServerConfig::default().idle_unload,
                Some(s) => {
                    seconds(s).map_err(|m| at(Some(s.span()), format!("`idle_unload_s` {m}")))?
                }
            },
            reserved_instances: match &raw.server.reserved_instances {
                None => None,
                Some(n) if *n.get_ref() <= 4096 => Some(*n.get_ref() as usize),
                Some(n) => {
                    return Err(at(
                        Some(n.span()),
                        "`reserved_instances` must be at most 4096".into(),
                    ));
                }
            },
        };
        let defaults = resolve(&raw.defaults, &TenantLimits::default())
            .map_err(|(span, m)| at(Some(span), m))?;

        let mut tenants: Vec<TenantConfig> = Vec::new();
        // Every host pattern with the tenant that claimed it and where.
        let mut claimed: Vec<(HostPattern, String, Range<usize>)> = Vec::new();
        for (name, section) in &raw.tenant {
            let name_span = name.span();
            let name = name.get_ref();
            if !valid_name(name) {
                return Err(at(
                    Some(name_span),
                    format!(
                        "tenant name {name:?} must be 1 to 63 characters of a-z, 0-9, '-' and '_', starting with a letter or digit"
                    ),
                ));
            }
            let limits =
                resolve(&section.limits(), &defaults).map_err(|(span, m)| at(Some(span), m))?;
            let mut hosts = Vec::new();
            for host in &section.hosts {
                let pattern = HostPattern::parse(host.get_ref())
                    .map_err(|m| at(Some(host.span()), format!("tenant {name}: {m}")))?;
                for (other, owner, span) in &claimed {
                    // Overlaps inside one tenant are harmless; only other tenants' claims matter.
                    if owner != name && pattern.overlaps(other) {
                        let what = if pattern == *other {
                            "is also"
                        } else {
                            "overlaps"
                        };
                        return Err(at(
                            Some(host.span()),
                            format!(
                                "tenant {name}: host {pattern} {what} {other} of tenant {owner} (line {}): a host must belong to one tenant",
                                line_of(text, span.start)
                            ),
                        ));
                    }
                }
                claimed.push((pattern.clone(), name.clone(), host.span()));
                hosts.push(pattern);
            }
            let project = base.join(section.project.get_ref());
            if !project.is_dir() {
                return Err(at(
                    Some(section.project.span()),
                    format!(
                        "tenant {name}: project folder {} not found",
                        project.display()
                    ),
                ));
            }
            let project = project.canonicalize().unwrap_or(project);
            let cache_dir = match &section.cache_dir {
                Some(dir) => project.join(dir.get_ref()),
                None => project.join(".cache"),
            };
            let data_dir = match &section.data_dir {
                Some(dir) => base.join(dir.get_ref()),
                None => project.join(crate::data::DEFAULT_DIR),
            };
            let database_url = match &section.database_url {
                Some(url) => {
                    crate::db::postgres::check_url(url.get_ref()).map_err(|m| {
                        at(
                            Some(url.span()),
                            format!("tenant {name}: `database_url`: {m}"),
                        )
                    })?;
                    Some(crate::data::ServerUrl::new(url.get_ref()))
                }
                None => None,
            };
            let kv_prefix = crate::data::tenant_kv_prefix(name);
            let kv_url = match &section.kv_url {
                Some(url) => {
                    let prefix = kv_prefix.key_prefix().map_err(|e| {
                        at(Some(url.span()), format!("tenant {name}: `kv_url`: {e}"))
                    })?;
                    crate::kv::KvStore::redis(url.get_ref(), &prefix, limits.kv).map_err(|e| {
                        at(Some(url.span()), format!("tenant {name}: `kv_url`: {e}"))
                    })?;
                    Some(crate::data::ServerUrl::new(url.get_ref()))
                }
                None => None,
            };
            let env = match &section.env {
                Some(table) => {
                    if let Some(bad) = table.get_ref().keys().find(|k| !environment::valid_name(k))
                    {
                        return Err(at(
                            Some(table.span()),
                            format!(
                                "tenant {name}: `env`: {bad:?} is not a variable name (letters, digits and _, not starting with a digit)"
                            ),
                        ));
                    }
                    OperatorValues(table.get_ref().clone())
                }
                None => OperatorValues::default(),
            };
            let env_file = match &section.env_file {
                Some(file) => {
                    let path = base.join(file.get_ref());
                    if !path.is_file() {
                        return Err(at(
                            Some(file.span()),
                            format!("tenant {name}: `env_file` {} is not a file", path.display()),
                        ));
                    }
                    Some(path)
                }
                None => None,
            };
            let outbound = crate::outbound::OperatorGrant {
                allow: match &section.outbound {
                    Some(list) => crate::outbound::AllowList::parse(
                        list.get_ref(),
                        crate::outbound::Source::Operator(name.clone()),
                    )
                    .map_err(|e| at(Some(list.span()), format!("tenant {name}: {e}")))?,
                    None => crate::outbound::AllowList::parse(
                        &[],
                        crate::outbound::Source::Operator(name.clone()),
                    )
                    .map_err(|e| at(None, e))?,
                },
                connections: match &section.outbound_connections {
                    Some(n) if *n.get_ref() == 0 => {
                        return Err(at(
                            Some(n.span()),
                            format!("tenant {name}: `outbound_connections` must be at least 1"),
                        ));
                    }
                    Some(n) => Some(*n.get_ref()),
                    None => None,
                },
            };
            let record = match (&section.record, &section.record_sample) {
                (Some(on), sample) if *on.get_ref() => match sample {
                    None => Some(0.0),
                    Some(s) if (0.0..=1.0).contains(s.get_ref()) => Some(*s.get_ref()),
                    Some(s) => {
                        return Err(at(
                            Some(s.span()),
                            format!("tenant {name}: `record_sample` must be from 0 to 1"),
                        ));
                    }
                },
                (_, Some(s)) => {
                    return Err(at(
                        Some(s.span()),
                        format!("tenant {name}: `record_sample` needs `record = true`"),
                    ));
                }
                _ => None,
            };
            let traces_token = match &section.traces_token {
                Some(token) if token.get_ref().len() < 16 => {
                    return Err(at(
                        Some(token.span()),
                        format!("tenant {name}: `traces_token` must be at least 16 characters"),
                    ));
                }
                Some(token) => Some(token.get_ref().clone()),
                None => None,
            };
            tenants.push(TenantConfig {
                name: name.clone(),
                hosts,
                project,
                cache_dir,
                data_dir,
                migrate: section.migrate.as_ref().is_some_and(|m| *m.get_ref()),
                servers: crate::data::Servers {
                    database_url,
                    kv_url,
                    kv_prefix,
                    pool: limits.db_pool,
                },
                env,
                env_file,
                outbound,
                limits,
                record,
                record_refused: section.record.as_ref().is_some_and(|on| !*on.get_ref()),
                traces_token,
            });
        }
        let default_tenant = match &raw.default_tenant {
            None => None,
            Some(name) if tenants.iter().any(|t| &t.name == name.get_ref()) => {
                Some(name.get_ref().clone())
            }
            Some(name) => {
                return Err(at(
                    Some(name.span()),
                    format!(
                        "default_tenant {:?} is not a [tenant.NAME] section of this file",
                        name.get_ref()
                    ),
                ));
            }
        };
        for (tenant, (name, _)) in tenants.iter().zip(&raw.tenant) {
            if tenant.hosts.is_empty() && default_tenant.as_deref() != Some(&tenant.name) {
                return Err(at(
                    Some(name.span()),
                    format!(
                        "tenant {}: no hosts: give it `hosts = [\"...\"]` (or make it the default_tenant)",
                        tenant.name
                    ),
                ));
            }
        }
        Ok(TenantsConfig {
            server,
            tenants,
            default_tenant,
        })
    }
}

/// Fill in `raw` over `base`, checking ranges; an error carries the offending value's span.
fn resolve(raw: &RawLimits, base: &TenantLimits) -> Result<TenantLimits, (Range<usize>, String)> {
    let mut limits = base.clone();
    let positive =
        |v: &Option<Spanned<u64>>, key: &str| -> Result<Option<u64>, (Range<usize>, String)> {
            match v {
                None => Ok(None),
                Some(n) if *n.get_ref() >= 1 => Ok(Some(*n.get_ref())),
                Some(n) => Err((n.span(), format!("`{key}` must be at least 1"))),
            }
        };
    if let Some(mb) = positive(&raw.memory_mb, "memory_mb")? {
        if mb > 4096 {
            return Err((
                raw.memory_mb.as_ref().map_or(0..0, |s| s.span()),
                "`memory_mb` must be at most 4096".into(),
            ));
        }
        limits.memory_bytes = (mb as usize) * 1024 * 1024;
    }
    if let Some(ms) = positive(&raw.cpu_ms, "cpu_ms")? {
        limits.cpu = Duration::from_millis(ms.min(86_400_000));
    }
    if let Some(n) = positive(&raw.max_streams, "max_streams")? {
        limits.stream.max_open = Some(usize::try_from(n).unwrap_or(usize::MAX).min(1_000_000));
    }
    if let Some(ms) = positive(&raw.stream_cpu_ms, "stream_cpu_ms")? {
        limits.stream.cpu = Duration::from_millis(ms.min(86_400_000));
    }
    if let Some(s) = &raw.stream_duration_s {
        limits.stream.duration =
            seconds(s).map_err(|m| (s.span(), format!("`stream_duration_s` {m}")))?;
    }
    if let Some(s) = &raw.stream_idle_s {
        limits.stream.idle = seconds(s).map_err(|m| (s.span(), format!("`stream_idle_s` {m}")))?;
    }
    if let Some(ms) = positive(&raw.websocket_message_cpu_ms, "websocket_message_cpu_ms")? {
        limits.stream.message_cpu = Duration::from_millis(ms.min(86_400_000));
    }
    if let Some(n) = &raw.websocket_max_message_bytes {
        let bytes = *n.get_ref();
        if !(crate::config::MIN_WEBSOCKET_MESSAGE..=crate::config::MAX_WEBSOCKET_MESSAGE)
            .contains(&bytes)
        {
            return Err((
                n.span(),
                format!(
                    "`websocket_max_message_bytes` must be from {} to {}",
                    crate::config::MIN_WEBSOCKET_MESSAGE,
                    crate::config::MAX_WEBSOCKET_MESSAGE
                ),
            ));
        }
        limits.stream.max_message_bytes = bytes as usize;
    }
    if let Some(s) = &raw.wall_s {
        limits.wall = seconds(s).map_err(|m| (s.span(), format!("`wall_s` {m}")))?;
    }
    if let Some(n) = positive(&raw.concurrency, "concurrency")? {
        limits.concurrency = u32::try_from(n).unwrap_or(u32::MAX).min(4096);
    }
    if let Some(n) = &raw.queue {
        limits.queue = u32::try_from(*n.get_ref())
            .unwrap_or(u32::MAX)
            .min(1_000_000);
    }
    if let Some(n) = positive(&raw.max_body_bytes, "max_body_bytes")? {
        limits.max_body_bytes = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(n) = positive(&raw.kv_keys, "kv_keys")? {
        limits.kv.max_keys = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(n) = positive(&raw.kv_key_bytes, "kv_key_bytes")? {
        limits.kv.max_key_bytes = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(n) = positive(&raw.kv_value_bytes, "kv_value_bytes")? {
        limits.kv.max_value_bytes = usize::try_from(n).unwrap_or(usize::MAX);
    }
    const MIB: u64 = 1024 * 1024;
    if let Some(n) = positive(&raw.db_max_size_mb, "db_max_size_mb")? {
        limits.db.max_size_bytes = n.saturating_mul(MIB);
    }
    if let Some(n) = positive(&raw.db_max_rows, "db_max_rows")? {
        limits.db.max_rows = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(n) = positive(&raw.db_max_result_mb, "db_max_result_mb")? {
        limits.db.max_bytes = usize::try_from(n.saturating_mul(MIB)).unwrap_or(usize::MAX);
    }
    if let Some(n) = positive(&raw.db_max_temp_mb, "db_max_temp_mb")? {
        limits.db.max_temp_bytes = n.saturating_mul(MIB);
    }
    if let Some(n) = positive(&raw.db_max_memory_mb, "db_max_memory_mb")? {
        limits.db.max_memory_bytes = n.saturating_mul(MIB);
    }
    use crate::db::postgres::PoolSettings;
    if let Some(n) = &raw.db_pool_size {
        limits.db_pool.size = PoolSettings::size(&n.get_ref().to_string())
            .map_err(|e| (n.span(), format!("`db_pool_size` {e}")))?;
    }
    if let Some(s) = &raw.db_connect_timeout_s {
        limits.db_pool.connect_timeout = PoolSettings::timeout(&s.get_ref().to_string())
            .map_err(|e| (s.span(), format!("`db_connect_timeout_s` {e}")))?;
    }
    if let Some(s) = &raw.db_checkout_timeout_s {
        limits.db_pool.checkout_timeout = PoolSettings::timeout(&s.get_ref().to_string())
            .map_err(|e| (s.span(), format!("`db_checkout_timeout_s` {e}")))?;
    }
    Ok(limits)
}

fn seconds(value: &Spanned<f64>) -> Result<Duration, String> {
    let s = *value.get_ref();
    if s > 0.0 && s.is_finite() && s <= 86_400.0 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err("must be a positive number of seconds (at most 86400)".into())
    }
}

/// Tenant names appear in log prefixes and metric labels: keep them plain.
fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'_')
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TenantsConfig, TenantsError> {
        let dir = std::env::temp_dir().join(format!("filerouter-tenants-{}", std::process::id()));
        for name in ["a", "b"] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
        }
        TenantsConfig::parse("tenants.toml", text, &dir)
    }

    #[test]
    fn defaults_then_tenant_sections_override() {
        let config = parse(
            "default_tenant = \"b\"\n[server]\nmax_loaded = 3\n[defaults]\ncpu_ms = 200\nmemory_mb = 64\nkv_keys = 10\n\n[tenant.a]\nhosts = [\"a.test\", \"*.a.test\"]\nproject = \"a\"\ncpu_ms = 500\n\n[tenant.b]\nproject = \"b\"\n",
        )
        .unwrap();
        assert_eq!(config.server.max_loaded, 3);
        assert_eq!(config.default_tenant.as_deref(), Some("b"));
        let a = &config.tenants[0];
        assert_eq!(a.name, "a");
        assert_eq!(a.limits.cpu, Duration::from_millis(500));
        assert_eq!(a.limits.memory_bytes, 64 << 20);
        assert_eq!(a.limits.kv.max_keys, 10);
        assert_eq!(a.hosts.len(), 2);
        assert!(a.cache_dir.ends_with("a/.cache"));
        let b = &config.tenants[1];
        assert_eq!(b.limits.cpu, Duration::from_millis(200));
        assert!(b.hosts.is_empty());
    }

    #[test]
    fn pool_settings_from_defaults_and_sections_and_bad_ones_name_key_and_line() {
        let config = parse(
            "[defaults]\ndb_pool_size = 8\n[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\ndb_connect_timeout_s = 2.5\ndb_checkout_timeout_s = 1\n[tenant.b]\nproject = \"b\"\nhosts = [\"b.test\"]\ndb_pool_size = 3\n",
        )
        .unwrap();
        let (a, b) = (&config.tenants[0], &config.tenants[1]);
        assert_eq!(a.servers.pool.size, 8);
        assert_eq!(a.servers.pool.connect_timeout, Duration::from_millis(2500));
        assert_eq!(a.servers.pool.checkout_timeout, Duration::from_secs(1));
        assert_eq!(b.servers.pool.size, 3);
        assert_eq!(b.servers.pool.connect_timeout, Duration::from_secs(10));
        for (text, line, key) in [
            (
                "[defaults]\n\ndb_pool_size = 0\n",
                3,
                "`db_pool_size` must be from 1 to",
            ),
            (
                "[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\ndb_pool_size = 100000\n",
                4,
                "`db_pool_size` must be from 1 to 10000, not 100000",
            ),
            (
                "[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\ndb_checkout_timeout_s = 0\n",
                4,
                "`db_checkout_timeout_s` must be a number of seconds above 0",
            ),
            (
                "[defaults]\ndb_connect_timeout_s = -1.0\n",
                2,
                "`db_connect_timeout_s`",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert_eq!(error.line, line, "{text}: {error}");
            assert!(error.message.contains(key), "{text}: {error}");
        }
    }

    #[test]
    fn errors_name_the_line() {
        let line = |text: &str| parse(text).unwrap_err().line;
        assert_eq!(
            line("[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\nbogus = 1\n"),
            4
        );
        assert_eq!(line("[defaults]\n\ncpu_ms = \"fast\"\n"), 3);
        assert_eq!(line("[defaults]\nconcurrency = 0\n"), 2);
        assert_eq!(
            line(
                "[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\n[tenant.b]\nproject = \"b\"\nhosts = [\"A.TEST.\"]\n"
            ),
            6
        );
        assert_eq!(
            line(
                "[tenant.a]\nproject = \"a\"\nhosts = [\"*.a.test\"]\n[tenant.b]\nproject = \"b\"\nhosts = [\"*.x.a.test\"]\n"
            ),
            6
        );
        assert_eq!(
            line("[tenant.a]\nproject = \"zzz\"\nhosts = [\"a.test\"]\n"),
            2
        );
        assert_eq!(line("[tenant.a]\nproject = \"a\"\n"), 1);
        assert_eq!(
            line("\n[tenant.Bad]\nproject = \"a\"\nhosts = [\"a.test\"]\n"),
            2
        );
        let error = parse("[tenant.a]\nhosts = [\"a.test\"]\n").unwrap_err();
        assert!(error.message.contains("project"), "{error}");
        // A tenant's own overlapping hosts are fine.
        parse("[tenant.a]\nproject = \"a\"\nhosts = [\"*.a.test\", \"x.a.test\"]\n").unwrap();
        // A bad server URL names its line, never its password.
        let error = parse(
            "[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\ndatabase_url = \"postgres://a:s3cret@db:port/a\"\n",
        )
        .unwrap_err();
        assert_eq!(error.line, 4);
        assert!(!error.message.contains("s3cret"), "{error}");
        assert_eq!(
            line("[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\nkv_url = \"http://x\"\n"),
            4
        );
        assert_eq!(
            line("[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\ndatabase = \"x\"\n"),
            4
        ); // A bad outbound entry or bound names its line and what is wrong.
        let error = parse(
            "[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\noutbound = [\"https://x.com/v1\"]\n",
        )
        .unwrap_err();
        assert_eq!(error.line, 4);
        assert!(error.message.contains("not an origin"), "{error}");
        assert_eq!(
            line("[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\noutbound_connections = 0\n"),
            4
        );
        assert_eq!(
            line("[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\noutbound = \"*\"\n"),
            4
        );
    }

    #[test]
    fn the_file_itself_must_be_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tenants.toml");
        let message = |path: &Path| TenantsConfig::load(path).unwrap_err().to_string();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let error = message(&path);
        assert!(
            error.starts_with(&format!("{}:1: ", path.display())),
            "{error}"
        );
        assert!(
            error.contains("not a regular file (a character device)"),
            "{error}"
        );
        std::fs::remove_file(&path).unwrap();
        std::fs::File::create(&path)
            .unwrap()
            .set_len(3 << 30)
            .unwrap();
        let error = message(&path);
        assert!(
            error.contains("3221225472 bytes, more than the 1048576 bytes allowed"),
            "{error}"
        );
    }

    #[test]
    fn servers_are_per_tenant_with_a_forced_kv_prefix() {
        let config = parse(
            "[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\ndatabase_url = \"postgres://a:s3cret@db:5432/a\"\nkv_url = \"redis://:s3cret@cache:6379/0\"\n[tenant.b]\nproject = \"b\"\nhosts = [\"b.test\"]\n",
        )
        .unwrap();
        let a = &config.tenants[0].servers;
        assert_eq!(
            a.database_url.as_ref().map(|u| u.expose()),
            Some("postgres://a:s3cret@db:5432/a")
        );
        assert_eq!(a.kv_prefix.key_prefix().unwrap(), "filerouter:t:a:");
        assert!(!format!("{config:?}").contains("s3cret"));
        assert_eq!(config.tenants[1].servers.database_url, None);
    }
}
