//! Many projects in one server: `filerouter run --tenants tenants.toml`.
//!
//! What lives where:
//! - once per process: the wasmtime engine, its memory slots and the one compiled guest
//!   ([`SandboxEngine`]), the [`Tenants`] directory (the checked [`config`] and host → tenant)
//!   and its [`watch`]er;
//! - once per tenant ([`Tenant`]): its configuration, its `filerouter.kv` store and its
//!   [`metrics`], which outlive loads and unloads; and, while it is loaded, one version of its
//!   project ([`load`]): the route table from its build cache, its memory image (the shared
//!   guest's memory, mapped from the image file) and `InstancePre`, its `public/` folder, its
//!   limits;
//! - once per request: the version it started on, held until it is answered, so a reload or an
//!   unload never changes a request in flight.
//!
//! A request is matched to a tenant by its host ([`hosts`]); an unknown host gets 404
//! `{"detail":"Unknown host"}` unless a default tenant is named. Tenants load on their first
//! request; beyond `max_loaded` the least recently used is unloaded, and an idle one after
//! `idle_unload_s`. A tenant whose cache cannot be used (read, and refused: corrupt, tampered
//! with, wrong key, another version; or missing), or whose database is behind its build's
//! migrations, is refused (503) while the others keep serving; it is tried again after a
//! back-off ([`REFUSED_RETRY_MIN`] doubling up to [`REFUSED_RETRY_MAX`]) and at once when its
//! cache changes. A load that fails for a reason of the moment (out of file descriptors or
//! memory, interrupted, a database that cannot be opened now) refuses nothing: that request
//! gets 503 with `Retry-After`, and a later one tries again ([`LoadFailure`]). A loaded tenant
//! whose new cache cannot be loaded keeps serving its last good version, and the new one is
//! tried again after the same back-offs.

pub mod config;
pub mod hosts;
pub mod load;
pub mod metrics;
pub mod watch;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use arc_swap::{ArcSwap, ArcSwapOption};
use hyper::{Request, Response, StatusCode, body::Incoming, header};
use tracing::Instrument;

use crate::{
    app::App,
    cache::CacheKey,
    data::Data,
    db::migrations::MigrationError,
    environment::{EnvironmentError, Sources},
    regular_file::FileError,
    request_body::BodyBudget,
    response::{self, Body},
    router,
    sandbox::{Limits, engine::SandboxEngine},
    scheduler::{Queue, QueueConfig, Scheduler},
};
use config::{TenantConfig, TenantsConfig};
use load::CacheStamp;
use metrics::TenantMetrics;

/// A refused tenant (see [`LoadFailure::Refused`]) is tried again on a request this long after
/// the refusal; each new refusal of the same cache doubles the pause, up to
/// [`REFUSED_RETRY_MAX`]. A change of its cache tries it again at once.
pub const REFUSED_RETRY_MIN: Duration = Duration::from_secs(1);

/// The longest pause between two tries of a refused tenant.
pub const REFUSED_RETRY_MAX: Duration = Duration::from_secs(60);

/// After a load that could not be done now ([`LoadFailure::Unavailable`]), the tenant's
/// requests get 503 at once for this long instead of each trying a load, so that a flood of
/// requests during a shortage of files or memory is not a flood of loads; each further such
/// failure doubles it, up to [`UNAVAILABLE_RETRY_MAX`].
pub const UNAVAILABLE_RETRY_MIN: Duration = Duration::from_millis(250);

/// The longest pause after loads that could not be done.
pub const UNAVAILABLE_RETRY_MAX: Duration = Duration::from_secs(5);

/// Why a tenant's load failed, by what it means for the tenant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadFailure {
    /// The cache was read and cannot be used (its checksum, key, format, version or sections
    /// are wrong), or there is none, or the tenant's database is behind its build's
    /// migrations: the tenant is refused until a try after [`REFUSED_RETRY_MIN`]..
    /// [`REFUSED_RETRY_MAX`] succeeds or its cache changes.
    #[error("{0}")]
    Refused(String),
    /// The load could not be done now: reading failed (out of file descriptors, out of memory,
    /// interrupted, any other I/O error), or the database could not be opened. It says nothing
    /// about the cache: the tenant is not refused, the request gets 503 with `Retry-After`, and
    /// a request after [`UNAVAILABLE_RETRY_MIN`]..[`UNAVAILABLE_RETRY_MAX`] tries again.
    #[error("{0}")]
    Unavailable(String),
}

impl LoadFailure {
    /// Sorted by [`load::LoadError::is_transient`].
    fn of(error: load::LoadError) -> LoadFailure {
        if error.is_transient() {
            LoadFailure::Unavailable(error.to_string())
        } else {
            LoadFailure::Refused(error.to_string())
        }
    }

    pub fn is_refused(&self) -> bool {
        matches!(self, LoadFailure::Refused(_))
    }

    pub fn reason(&self) -> &str {
        match self {
            LoadFailure::Refused(reason) | LoadFailure::Unavailable(reason) => reason,
        }
    }

    /// The first pause after such a failure, and the longest.
    fn pauses(&self) -> (Duration, Duration) {
        match self {
            LoadFailure::Refused(_) => (REFUSED_RETRY_MIN, REFUSED_RETRY_MAX),
            LoadFailure::Unavailable(_) => (UNAVAILABLE_RETRY_MIN, UNAVAILABLE_RETRY_MAX),
        }
    }
}

/// What a tenant's last failed load left behind: why, and when a load may be tried again.
#[derive(Debug, Clone)]
struct Setback {
    failure: LoadFailure,
    /// No load is tried before this (unless the cache changes).
    retry_at: Instant,
    /// The pause that ends at `retry_at`; the next failure of the same kind doubles it.
    pause: Duration,
    /// The same failure happened on the try before (its log line is then shorter).
    repeated: bool,
}

/// One tenant: its configuration and state that outlives loads; its project while loaded.
pub struct Tenant {
    pub config: TenantConfig,
    /// The loaded version, if any. Requests clone the `Arc` and keep it until answered.
    current: ArcSwapOption<Version>,
    /// Why the last load failed and when to try again, until a load succeeds or the cache
    /// changes.
    setback: Mutex<Option<Setback>>,
    /// One load at a time; requests arriving meanwhile wait for it.
    loading: tokio::sync::Mutex<()>,
    /// The cache stamp the watcher saw last.
    watched: Mutex<Option<CacheStamp>>,
    /// Its database and kv store, opened at its first load and kept across loads.
    data: Mutex<Option<Data>>,
    /// Where its requests wait for a turn in the process's scheduler: its concurrency cap,
    /// its bounded queue and its CPU account. Outlives loads, like the store.
    queue: Queue,
    /// Milliseconds since the process started, at the last request.
    last_used: AtomicU64,
    pub metrics: Arc<TenantMetrics>,
    span: tracing::Span,
}

/// A loaded version of a tenant's project.
struct Version {
    app: App,
    stamp: Option<CacheStamp>,
}

impl Tenant {
    fn new(
        config: TenantConfig,
        data: Option<Data>,
        metrics: Arc<TenantMetrics>,
        queue: Queue,
    ) -> Tenant {
        let span = tracing::warn_span!("tenant", name = %config.name);
        Tenant {
            config,
            current: ArcSwapOption::empty(),
            setback: Mutex::new(None),
            loading: tokio::sync::Mutex::new(()),
            watched: Mutex::new(None),
            data: Mutex::new(data),
            queue,
            last_used: AtomicU64::new(0),
            metrics,
            span,
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Its database and kv store, opened (in its `data_dir`, or on its servers) on first use.
    /// Blocking.
    fn data(&self) -> Result<Data, crate::data::DataError> {
        let mut data = self.data.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(data) = &*data {
            return Ok(data.clone());
        }
        let opened = Data::open_with(
            &self.config.data_dir,
            self.config.limits.kv,
            self.config.limits.db,
            &self.config.servers,
        )?;
        *data = Some(opened.clone());
        Ok(opened)
    }

    /// Whether a version is loaded.
    pub fn is_loaded(&self) -> bool {
        self.current.load().is_some()
    }

    /// Why the tenant is refused, if it is: no version is loaded and its last load found its
    /// cache unusable (or its database behind). A load that could not be done now is no refusal.
    pub fn refusal(&self) -> Option<String> {
        if self.is_loaded() {
            return None;
        }
        self.setback()
            .filter(|s| s.failure.is_refused())
            .map(|s| s.failure.reason().to_string())
    }

    fn setback(&self) -> Option<Setback> {
        self.setback
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How long until a load may be tried again, while the last one's back-off runs.
    fn waiting(&self) -> Option<Duration> {
        self.setback()
            .map(|s| s.retry_at.saturating_duration_since(Instant::now()))
            .filter(|wait| !wait.is_zero())
    }

    /// Record a failed load: the next try waits the first pause for its kind, or twice the
    /// last one after a failure of the same kind.
    fn failed(&self, failure: LoadFailure) -> Setback {
        let mut slot = self.setback.lock().unwrap_or_else(|e| e.into_inner());
        let (first, longest) = failure.pauses();
        let previous = slot.take();
        let pause = match &previous {
            Some(p) if p.failure.is_refused() == failure.is_refused() => {
                (p.pause * 2).clamp(first, longest)
            }
            _ => first,
        };
        let setback = Setback {
            repeated: previous.is_some_and(|p| p.failure == failure),
            failure,
            retry_at: Instant::now() + pause,
            pause,
        };
        *slot = Some(setback.clone());
        setback
    }

    /// Forget the last failure (a load succeeded, or the cache changed); returns it.
    fn clear_setback(&self) -> Option<Setback> {
        self.setback
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    fn limits(&self) -> Limits {
        let limits = &self.config.limits;
        Limits {
            memory_bytes: limits.memory_bytes,
            cpu: limits.cpu,
            wall: limits.wall,
            max_body_bytes: limits.max_body_bytes,
            stream: limits.stream,
        }
    }

    /// Its streamed responses and WebSockets open now (0 while it is not loaded).
    pub fn open_streams(&self) -> usize {
        self.current
            .load()
            .as_ref()
            .map_or(0, |version| version.app.current().sandbox.open_streams())
    }

    /// Its queue's figures now: running, waiting, rejected, CPU used.
    pub fn queue_stats(&self) -> crate::scheduler::QueueStats {
        self.queue.stats()
    }
}

/// A tenant's bounds in the scheduler.
fn queue_config(config: &TenantConfig) -> QueueConfig {
    QueueConfig {
        concurrency: config.limits.concurrency as usize,
        capacity: config.limits.queue as usize,
    }
}

/// Where a tenant's kept traces live: its data folder's `traces/`.
fn trace_store(config: &TenantConfig) -> crate::replay::store::TraceStore {
    let settings = crate::replay::RecordSettings::default();
    crate::replay::store::TraceStore::new(
        config.data_dir.join("traces"),
        settings.max_traces,
        settings.max_bytes,
    )
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (blake3::hash(a.as_bytes()), blake3::hash(b.as_bytes()));
    a == b
}

/// The tenants a server serves, shared by every connection.
#[derive(Clone)]
pub struct Tenants {
    inner: Arc<Shared>,
}

struct Shared {
    engine: SandboxEngine,
    /// Runs every tenant's calls: one queue per tenant, fair between them on CPU time.
    scheduler: Scheduler,
    /// The tenants file, watched for edits.
    file: PathBuf,
    key: Option<CacheKey>,
    directory: ArcSwap<Directory>,
    started: Instant,
}

/// The tenants as configured now.
struct Directory {
    config: TenantsConfig,
    /// In `config.tenants` order.
    tenants: Vec<Arc<Tenant>>,
}

impl Directory {
    fn find(&self, host: &str) -> Option<&Arc<Tenant>> {
        self.tenants
            .iter()
            .find(|t| t.config.hosts.iter().any(|p| p.matches(host)))
            .or_else(|| {
                let name = self.config.default_tenant.as_deref()?;
                self.tenants.iter().find(|t| t.name() == name)
            })
    }
}

impl Tenants {
    /// Serve the tenants of `config` (read from `file`) with `engine`, their calls run by
    /// `scheduler`; `key` opens encrypted caches.
    pub fn new(
        engine: SandboxEngine,
        scheduler: Scheduler,
        file: &Path,
        config: TenantsConfig,
        key: Option<CacheKey>,
    ) -> Tenants {
        let tenants = config
            .tenants
            .iter()
            .map(|c| {
                Arc::new(Tenant::new(
                    c.clone(),
                    None,
                    Arc::default(),
                    scheduler.queue(&c.name, queue_config(c)),
                ))
            })
            .collect();
        let tenants = Tenants {
            inner: Arc::new(Shared {
                engine,
                scheduler,
                file: file.to_path_buf(),
                key,
                directory: ArcSwap::from_pointee(Directory { config, tenants }),
                started: Instant::now(),
            }),
        };
        for tenant in tenants.all() {
            *tenant.watched.lock().unwrap_or_else(|e| e.into_inner()) =
                CacheStamp::of(&tenant.config.cache_dir);
        }
        tenants
    }

    /// Every configured tenant, in file order.
    pub fn all(&self) -> Vec<Arc<Tenant>> {
        self.inner.directory.load().tenants.clone()
    }

    /// Tenant `name`'s kept traces, for a client that shows its `traces_token`; None when the
    /// token is not that tenant's (or it has none, or there is no such tenant: the answer does
    /// not tell which).
    pub fn traces(
        &self,
        name: &str,
        token: Option<&str>,
    ) -> Option<Arc<crate::replay::store::TraceStore>> {
        let directory = self.inner.directory.load();
        let tenant = directory.tenants.iter().find(|t| t.name() == name)?;
        let own = tenant.config.traces_token.as_deref()?;
        same_secret(own, token?).then(|| Arc::new(trace_store(&tenant.config)))
    }

    /// The configuration in force.
    pub fn config(&self) -> TenantsConfig {
        self.inner.directory.load().config.clone()
    }

    /// The tenants file.
    pub fn file(&self) -> &Path {
        &self.inner.file
    }

    /// What the engine's memory slots did so far, all tenants together.
    pub fn slot_counts(&self) -> crate::sandbox::slots::SlotCounts {
        self.inner.engine.slot_counts()
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Answer one request: find its tenant by host, load it if needed, and route it there.
    pub async fn respond(
        &self,
        mut request: Request<Incoming>,
        peer: SocketAddr,
        budget: &BodyBudget,
        body_timeout: Duration,
    ) -> Response<Body> {
        let host = match hosts::request_host(request.uri(), request.headers()) {
            Ok(host) => host,
            Err(e) => {
                tracing::debug!("refused a request from {peer}: {e}");
                return response::json(StatusCode::BAD_REQUEST, r#"{"detail":"Bad Request"}"#);
            }
        };
        let directory = self.inner.directory.load_full();
        let Some(tenant) = directory.find(&host).cloned() else {
            return response::json(StatusCode::NOT_FOUND, r#"{"detail":"Unknown host"}"#);
        };
        drop(directory);
        // An absolute-form target decided the tenant: the handler sees that host, never the
        // ignored Host header naming another.
        if let Some(authority) = request.uri().authority()
            && let Ok(value) = header::HeaderValue::from_str(authority.as_str())
        {
            request.headers_mut().insert(header::HOST, value);
        }
        let started = Instant::now();
        crate::request_record::set_tenant(Arc::from(tenant.name()));
        tenant.last_used.store(self.now_ms(), Ordering::Relaxed);
        let span = tenant.span.clone();
        let response = match self.version(&tenant).instrument(span.clone()).await {
            Ok(version) => {
                router::respond(&version.app, request, peer, budget, body_timeout)
                    .instrument(span)
                    .await
            }
            Err(wait) => {
                let mut response = response::json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    r#"{"detail":"Service Unavailable"}"#,
                );
                // Whole seconds until the next try, at least 1.
                let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    header::HeaderValue::from(seconds.max(1)),
                );
                response
            }
        };
        tenant
            .metrics
            .record(response.status().as_u16(), started.elapsed());
        response
    }

    /// The tenant's loaded version, loading it first if needed; else how long until a load is
    /// tried again (while it is refused, or after a load that could not be done now).
    async fn version(&self, tenant: &Arc<Tenant>) -> Result<Arc<Version>, Duration> {
        if let Some(version) = tenant.current.load_full() {
            return Ok(version);
        }
        if let Some(wait) = tenant.waiting() {
            return Err(wait);
        }
        let _loading = tenant.loading.lock().await;
        // Another request may have loaded it (or failed to) while this one waited.
        if let Some(version) = tenant.current.load_full() {
            return Ok(version);
        }
        if let Some(wait) = tenant.waiting() {
            return Err(wait);
        }
        match self.load(tenant).await {
            Ok(version) => {
                if let Some(setback) = tenant.clear_setback() {
                    let reason = setback.failure.reason();
                    if setback.failure.is_refused() {
                        tracing::warn!("loaded: no longer refused (it was: {reason})");
                    } else {
                        tracing::warn!("loaded (an earlier try could not be done: {reason})");
                    }
                }
                let version = Arc::new(version);
                tenant.current.store(Some(version.clone()));
                self.unload_beyond_bound(tenant);
                Ok(version)
            }
            Err(failure) => {
                // A change of the cache from what was just tried tries it again at once.
                let dir = tenant.config.cache_dir.clone();
                *tenant.watched.lock().unwrap_or_else(|e| e.into_inner()) =
                    watch::cache_stamps(vec![dir]).await.pop().flatten();
                tenant.metrics.load_failures.fetch_add(1, Ordering::Relaxed);
                let setback = tenant.failed(failure);
                let dir = tenant.config.cache_dir.display();
                let (reason, pause) = (setback.failure.reason(), setback.pause);
                match (&setback.failure, setback.repeated) {
                    (LoadFailure::Refused(_), false) => tracing::error!(
                        "cannot load {dir}: {reason}; refusing its requests, trying again in {pause:?} or once its cache changes"
                    ),
                    (LoadFailure::Refused(_), true) => tracing::warn!(
                        "still cannot load {dir}: {reason}; trying again in {pause:?} or once its cache changes"
                    ),
                    (LoadFailure::Unavailable(_), _) => tracing::warn!(
                        "cannot load {dir} now: {reason}; its requests get 503 (nothing is refused), trying again in {pause:?}"
                    ),
                }
                Err(pause)
            }
        }
    }

    /// Load `tenant`'s project from its cache, off the async threads.
    async fn load(&self, tenant: &Arc<Tenant>) -> Result<Version, LoadFailure> {
        let engine = self.inner.engine.clone();
        let key = self.inner.key.clone();
        let config = tenant.config.clone();
        let limits = tenant.limits();
        let queue = tenant.queue.clone();
        let started = Instant::now();
        let owner = tenant.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            // A database that cannot be opened now (out of files, a server away) is no
            // verdict on the cache.
            let data = owner
                .data()
                .map_err(|e| LoadFailure::Unavailable(e.to_string()))?;
            let (opened, stamp) =
                load::open(&config.cache_dir, key.as_ref()).map_err(LoadFailure::of)?;
            // A database behind the build's migrations is not served, unless the tenant's
            // section says `migrate = true` (then they are applied now).
            let ensured = tokio::runtime::Handle::current().block_on(
                crate::db::migrations::ensure(&data.db, &opened.metadata.migrations, config.migrate),
            );
            match ensured {
                Ok(applied) => {
                    for name in applied {
                        tracing::warn!("applied migration {name}");
                    }
                }
                Err(
                    e @ (MigrationError::Behind(_)
                    | MigrationError::Changed(_)
                    | MigrationError::Failed { .. }),
                ) => {
                    return Err(LoadFailure::Refused(format!(
                        "{e}: run `filerouter db migrate --project {}` for it, or set `migrate = true` in its section",
                        config.project.display()
                    )));
                }
                Err(e) => return Err(LoadFailure::Unavailable(e.to_string())),
            }
            // Its Alembic history, if its build has one, is applied by `filerouter db migrate`
            // alone: a database not at the build's heads is not served.
            let heads = opened.metadata.alembic_heads.as_deref();
            match tokio::runtime::Handle::current()
                .block_on(crate::alembic::ensure(&data.db, heads))
            {
                Ok(()) => {}
                Err(e @ crate::alembic::AlembicError::Behind { .. }) => {
                    return Err(LoadFailure::Refused(format!(
                        "{e} (for it: `filerouter db migrate --project {}` with its data)",
                        config.project.display()
                    )));
                }
                Err(e) => return Err(LoadFailure::Unavailable(e.to_string())),
            }
            // The values of the names its config.py declares: the tenant's section of the
            // tenants file, else its project's env file; never the server's environment.
            let sources = Sources {
                process: false,
                operator: Some(&config.env.0),
                operator_file: config.env_file.as_deref(),
            };
            let gathered = opened
                .metadata
                .settings
                .gather_environment(&config.project, &sources)
                .map_err(|e| match &e {
                    EnvironmentError::File(FileError::Io { .. }) => {
                        LoadFailure::Unavailable(e.to_string())
                    }
                    _ => LoadFailure::Refused(e.to_string()),
                })?;
            if let Some(missing) = gathered.missing_message(true) {
                return Err(LoadFailure::Refused(missing));
            }
            let outbound_metrics = owner.metrics.outbound.clone();
            load::serve_from(
                &engine,
                &config.project,
                &opened,
                stamp,
                |_| limits,
                |settings| {
                    settings
                        .outbound
                        .gate(Some(&config.outbound), outbound_metrics)
                },
                data,
                queue,
                gathered.environment,
            )
            .map_err(LoadFailure::of)
            .map(|loaded| {
                (
                    loaded,
                    opened.bundle_blake3.clone(),
                    opened.metadata.settings.record.clone(),
                )
            })
        })
        .await
        .map_err(|e| LoadFailure::Refused(format!("loading panicked: {e}")))??;
        let (loaded, bundle, project_record) = loaded;
        // `record = true` (or, unless `record = false`, its project's config.py `record`): its
        // requests taped, its traces kept in its own data folder, within the default bounds.
        let recording = match tenant.config.record {
            Some(sample) => Some(crate::replay::RecordSettings {
                sample,
                ..Default::default()
            }),
            None if !tenant.config.record_refused && project_record.enabled == Some(true) => {
                Some(crate::replay::RecordSettings::from_project(&project_record).within_defaults())
            }
            None => None,
        };
        if let Some(settings) = recording {
            let store = crate::replay::store::TraceStore::new(
                tenant.config.data_dir.join("traces"),
                settings.max_traces,
                settings.max_bytes,
            );
            let recorder = crate::replay::Recorder::new(
                settings,
                bundle,
                Some(tenant.config.name.clone()),
                Arc::new(store),
            );
            let current = loaded.app.current();
            let recorded = current.sandbox.with_recorder(Some(Arc::new(recorder)));
            loaded.app.upgrade(&current, recorded);
        }
        // The project's start-up hook (`startup.py`), at every load, before its first request.
        let current = loaded.app.current();
        match crate::startup::run(&current.sandbox, &current.project.root_files).await {
            Ok(_) => {}
            Err(crate::sandbox::SandboxError::Busy(rejected)) => {
                return Err(LoadFailure::Unavailable(format!("startup.py: {rejected}")));
            }
            Err(error) => {
                let failure = crate::startup::failure_of(error);
                crate::startup::log(&failure);
                return Err(LoadFailure::Refused(crate::startup::describe(&failure)));
            }
        }
        drop(current);
        tenant.metrics.loads.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            "loaded {} routes (build of {}) in {:.0} ms",
            loaded.routes,
            loaded.created_at,
            started.elapsed().as_secs_f64() * 1000.0
        );
        Ok(Version {
            app: loaded.app,
            stamp: loaded.stamp,
        })
    }

    /// Keep at most `max_loaded` tenants loaded: unload the least recently used others.
    fn unload_beyond_bound(&self, keep: &Arc<Tenant>) {
        let directory = self.inner.directory.load();
        let max = directory.config.server.max_loaded;
        let mut loaded: Vec<&Arc<Tenant>> =
            directory.tenants.iter().filter(|t| t.is_loaded()).collect();
        if loaded.len() <= max {
            return;
        }
        loaded.sort_by_key(|t| t.last_used.load(Ordering::Relaxed));
        let excess = loaded.len() - max;
        for tenant in loaded
            .into_iter()
            .filter(|t| !Arc::ptr_eq(t, keep))
            .take(excess)
        {
            tenant.current.store(None);
            let _entered = tenant.span.enter();
            tracing::info!("unloaded (least recently used; max_loaded = {max})");
        }
    }
}

impl Tenants {
    /// Read the tenants file again; apply it if it is good, else log why and keep the last good.
    pub async fn reload_config(&self) {
        let file = self.inner.file.clone();
        let checked = tokio::task::spawn_blocking(move || TenantsConfig::load(&file)).await;
        match checked {
            // Off the async threads: a tenant whose data moved opens it again (it may connect
            // to a database server).
            Ok(Ok(config)) => {
                let tenants = self.clone();
                if let Err(e) = tokio::task::spawn_blocking(move || tenants.apply(config)).await {
                    tracing::error!("applying {} panicked: {e}", self.inner.file.display());
                }
            }
            Ok(Err(e)) => tracing::error!("{e} (keeping the last good configuration)"),
            Err(e) => tracing::error!("reading {} panicked: {e}", self.inner.file.display()),
        }
    }

    /// Make `config` the one in force: add, remove and reconfigure tenants.
    fn apply(&self, config: TenantsConfig) {
        let old = self.inner.directory.load_full();
        if old.config == config {
            return;
        }
        let mut tenants = Vec::with_capacity(config.tenants.len());
        for wanted in &config.tenants {
            let previous = old.tenants.iter().find(|t| t.name() == wanted.name);
            let tenant = match previous {
                Some(previous) if previous.config == *wanted => previous.clone(),
                Some(previous) => {
                    let tenant = Arc::new(self.reconfigured(previous, wanted.clone()));
                    let _entered = tenant.span.enter();
                    tracing::warn!("reconfigured");
                    drop(_entered);
                    tenant
                }
                None => {
                    let tenant = Arc::new(Tenant::new(
                        wanted.clone(),
                        None,
                        Arc::default(),
                        self.inner
                            .scheduler
                            .queue(&wanted.name, queue_config(wanted)),
                    ));
                    *tenant.watched.lock().unwrap_or_else(|e| e.into_inner()) =
                        CacheStamp::of(&wanted.cache_dir);
                    let _entered = tenant.span.enter();
                    tracing::warn!("added (hosts: {})", host_list(wanted));
                    drop(_entered);
                    tenant
                }
            };
            tenants.push(tenant);
        }
        for gone in old
            .tenants
            .iter()
            .filter(|t| !config.tenants.iter().any(|c| c.name == t.name()))
        {
            let _entered = gone.span.enter();
            tracing::warn!("removed; its requests in flight finish");
        }
        if config.server.reserved_instances != old.config.server.reserved_instances {
            let scheduler = &self.inner.scheduler;
            let workers = scheduler.workers();
            match config.server.reserve(workers) {
                Ok(reserve) => scheduler.set_reserve(reserve),
                Err(e) => tracing::error!(
                    "{}: {e}; keeping {} instances for tenants with nothing running",
                    self.inner.file.display(),
                    scheduler.reserve_setting()
                ),
            }
        }
        self.inner
            .directory
            .store(Arc::new(Directory { config, tenants }));
    }

    /// `previous` with the configuration `wanted`: the same store (if its bounds did not change)
    /// and statistics; a loaded version stays loaded, with the new limits, if the project and its
    /// cache are the same.
    fn reconfigured(&self, previous: &Tenant, wanted: TenantConfig) -> Tenant {
        // The same data (in new bounds), unless it moved to another folder.
        let data = previous
            .data
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|_| {
                previous.config.data_dir == wanted.data_dir
                    && previous.config.servers == wanted.servers
            })
            .and_then(|data| {
                data.with_bounds(wanted.limits.kv, wanted.limits.db)
                    .map_err(|e| tracing::error!("{e}"))
                    .ok()
            });
        // New values for route code load the project again, as a new build does.
        let same_project = previous.config.project == wanted.project
            && previous.config.cache_dir == wanted.cache_dir
            && previous.config.env == wanted.env
            && previous.config.env_file == wanted.env_file
            && previous.config.outbound == wanted.outbound;
        // The same queue (its waiting requests and CPU account stay), with the new bounds.
        previous.queue.reconfigure(queue_config(&wanted));
        let tenant = Tenant::new(
            wanted,
            data,
            previous.metrics.clone(),
            previous.queue.clone(),
        );
        tenant.last_used.store(
            previous.last_used.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        if same_project {
            *tenant.watched.lock().unwrap_or_else(|e| e.into_inner()) =
                *previous.watched.lock().unwrap_or_else(|e| e.into_inner());
            *tenant.setback.lock().unwrap_or_else(|e| e.into_inner()) = previous.setback();
            if let Some(version) = previous.current.load_full() {
                match tenant.data() {
                    Ok(data) => tenant
                        .current
                        .store(Some(Arc::new(version.with(tenant.limits(), data)))),
                    Err(e) => tracing::error!(
                        "tenant {}: {e}; it loads again on its next request",
                        tenant.name()
                    ),
                }
            }
        } else {
            *tenant.watched.lock().unwrap_or_else(|e| e.into_inner()) =
                CacheStamp::of(&tenant.config.cache_dir);
        }
        tenant
    }

    /// Pick up new builds: reload loaded tenants whose cache changed (or whose new build
    /// failed to load and whose back-off is over), and let refused ones be tried again at once.
    pub async fn check_caches(&self) {
        let tenants = self.all();
        let stamps =
            watch::cache_stamps(tenants.iter().map(|t| t.config.cache_dir.clone()).collect()).await;
        for (tenant, stamp) in tenants.into_iter().zip(stamps) {
            let changed = {
                let mut watched = tenant.watched.lock().unwrap_or_else(|e| e.into_inner());
                let changed = *watched != stamp;
                *watched = stamp;
                changed
            };
            if changed {
                if let Some(setback) = tenant.clear_setback()
                    && setback.failure.is_refused()
                    && !tenant.is_loaded()
                {
                    let _entered = tenant.span.enter();
                    tracing::warn!("its cache changed: trying it again on its next request");
                }
                if tenant.is_loaded() && stamp.is_some() {
                    self.reload_in_background(tenant);
                }
            } else if tenant.is_loaded()
                && stamp.is_some()
                && tenant
                    .setback()
                    .is_some_and(|s| s.retry_at <= Instant::now())
            {
                // A new build that failed to load, tried again after its back-off.
                self.reload_in_background(tenant);
            }
        }
    }

    /// Load a new version of a loaded tenant beside the running one, and swap it in.
    fn reload_in_background(&self, tenant: Arc<Tenant>) {
        let this = self.clone();
        let span = tenant.span.clone();
        tokio::spawn(
            async move {
                let _loading = tenant.loading.lock().await;
                let Some(running) = tenant.current.load_full() else {
                    return; // unloaded meanwhile: the next request loads the new build
                };
                let dir = tenant.config.cache_dir.clone();
                let now = watch::cache_stamps(vec![dir]).await.pop().flatten();
                if running.stamp.is_some() && running.stamp == now {
                    tenant.clear_setback();
                    return; // already serving this build
                }
                if tenant.waiting().is_some() {
                    return; // a try that just failed set when the next one is
                }
                match this.load(&tenant).await {
                    Ok(version) => {
                        tenant.clear_setback();
                        tenant.current.store(Some(Arc::new(version)));
                        tracing::warn!("new build picked up");
                    }
                    Err(failure) => {
                        tenant.metrics.load_failures.fetch_add(1, Ordering::Relaxed);
                        let setback = tenant.failed(failure);
                        let (reason, pause) = (setback.failure.reason(), setback.pause);
                        match (&setback.failure, setback.repeated) {
                            (LoadFailure::Refused(_), false) => tracing::error!(
                                "the new build cannot be used: {reason}; still serving the last good one, trying it again in {pause:?} or once the cache changes"
                            ),
                            (LoadFailure::Refused(_), true) => tracing::warn!(
                                "the new build still cannot be used: {reason}; still serving the last good one, trying it again in {pause:?}"
                            ),
                            (LoadFailure::Unavailable(_), _) => tracing::warn!(
                                "the new build cannot be loaded now: {reason}; still serving the last good one, trying it again in {pause:?}"
                            ),
                        }
                    }
                }
            }
            .instrument(span),
        );
    }

    /// Unload tenants that served nothing for `idle_unload_s`.
    pub fn unload_idle(&self) {
        let directory = self.inner.directory.load();
        let idle = directory.config.server.idle_unload;
        let now = self.now_ms();
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        for tenant in directory.tenants.iter().filter(|t| t.is_loaded()) {
            if now.saturating_sub(tenant.last_used.load(Ordering::Relaxed)) >= idle_ms {
                tenant.current.store(None);
                let _entered = tenant.span.enter();
                tracing::info!("unloaded (idle for {idle:?})");
            }
        }
    }
}

fn host_list(config: &TenantConfig) -> String {
    config
        .hosts
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Version {
    /// The same project and guest under other limits and store.
    fn with(&self, limits: Limits, data: Data) -> Version {
        let current = self.app.current();
        let sandbox = current.sandbox.reconfigured(limits, data);
        let loaded = crate::app::Loaded::new(
            current.project.clone(),
            sandbox,
            current.settings.clone(),
            None,
        );
        Version {
            app: App::new(self.app.root.clone(), self.app.mode, loaded),
            stamp: self.stamp,
        }
    }
}
