//! Many projects in one server: `filerouter run --tenants tenants.toml`.
//!
//! What lives where:
//! - once per process: the wasmtime engine and its instance pool ([`SandboxEngine`]), the
//!   [`Tenants`] directory (the checked [`config`] and host → tenant) and its [`watch`]er;
//! - once per tenant ([`Tenant`]): its configuration, its `filerouter.kv` store and its
//!   [`metrics`], which outlive loads and unloads; and, while it is loaded, one version of its
//!   project ([`load`]): the route table from its build cache, its own guest component and
//!   `InstancePre`, its `public/` folder, its limits;
//! - once per request: the version it started on, held until it is answered, so a reload or an
//!   unload never changes a request in flight.
//!
//! A request is matched to a tenant by its host ([`hosts`]); an unknown host gets 404
//! `{"detail":"Unknown host"}` unless a default tenant is named. Tenants load on their first
//! request; beyond `max_loaded` the least recently used is unloaded, and an idle one after
//! `idle_unload_s`. A tenant whose cache cannot be used is refused (503) until its cache
//! changes, while the others keep serving; a loaded tenant whose new cache is bad keeps serving
//! its last good version.

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
    request_body::BodyBudget,
    router::{self, Body},
    sandbox::{Limits, engine::SandboxEngine},
    scheduler::{Queue, QueueConfig, Scheduler},
};
use config::{TenantConfig, TenantsConfig};
use load::CacheStamp;
use metrics::TenantMetrics;

/// One tenant: its configuration and state that outlives loads; its project while loaded.
pub struct Tenant {
    pub config: TenantConfig,
    /// The loaded version, if any. Requests clone the `Arc` and keep it until answered.
    current: ArcSwapOption<Version>,
    /// Why the last load failed, while the cache has not changed since.
    refused: Mutex<Option<String>>,
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
            refused: Mutex::new(None),
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

    /// Why the tenant is refused, if it is.
    pub fn refusal(&self) -> Option<String> {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn limits(&self) -> Limits {
        let limits = &self.config.limits;
        Limits {
            memory_bytes: limits.memory_bytes,
            cpu: limits.cpu,
            wall: limits.wall,
            max_body_bytes: limits.max_body_bytes,
        }
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

    /// The configuration in force.
    pub fn config(&self) -> TenantsConfig {
        self.inner.directory.load().config.clone()
    }

    /// The tenants file.
    pub fn file(&self) -> &Path {
        &self.inner.file
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
                return router::json(StatusCode::BAD_REQUEST, r#"{"detail":"Bad Request"}"#);
            }
        };
        let directory = self.inner.directory.load_full();
        let Some(tenant) = directory.find(&host).cloned() else {
            return router::json(StatusCode::NOT_FOUND, r#"{"detail":"Unknown host"}"#);
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
        tenant.last_used.store(self.now_ms(), Ordering::Relaxed);
        let span = tenant.span.clone();
        let response = match self.version(&tenant).instrument(span.clone()).await {
            Some(version) => {
                router::respond(&version.app, request, peer, budget, body_timeout)
                    .instrument(span)
                    .await
            }
            None => {
                let mut response = router::json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    r#"{"detail":"Service Unavailable"}"#,
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
                response
            }
        };
        tenant
            .metrics
            .record(response.status().as_u16(), started.elapsed());
        response
    }

    /// The tenant's loaded version, loading it first if needed; `None` while it is refused.
    async fn version(&self, tenant: &Arc<Tenant>) -> Option<Arc<Version>> {
        if let Some(version) = tenant.current.load_full() {
            return Some(version);
        }
        if tenant.refusal().is_some() {
            return None;
        }
        let _loading = tenant.loading.lock().await;
        // Another request may have loaded it (or failed to) while this one waited.
        if let Some(version) = tenant.current.load_full() {
            return Some(version);
        }
        if tenant.refusal().is_some() {
            return None;
        }
        match self.load(tenant).await {
            Ok(version) => {
                let version = Arc::new(version);
                tenant.current.store(Some(version.clone()));
                self.unload_beyond_bound(tenant);
                Some(version)
            }
            Err(reason) => {
                // The watcher tries again once the cache changes from what was just tried.
                let dir = tenant.config.cache_dir.clone();
                *tenant.watched.lock().unwrap_or_else(|e| e.into_inner()) =
                    watch::cache_stamps(vec![dir]).await.pop().flatten();
                tracing::error!(
                    "cannot load {}: {reason}; refusing its requests until its cache changes",
                    tenant.config.cache_dir.display()
                );
                *tenant.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
                tenant.metrics.load_failures.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Load `tenant`'s project from its cache, off the async threads.
    async fn load(&self, tenant: &Arc<Tenant>) -> Result<Version, String> {
        let engine = self.inner.engine.clone();
        let key = self.inner.key.clone();
        let config = tenant.config.clone();
        let limits = tenant.limits();
        let queue = tenant.queue.clone();
        let started = Instant::now();
        let owner = tenant.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            let data = owner.data().map_err(|e| e.to_string())?;
            let (opened, stamp) =
                load::open(&config.cache_dir, key.as_ref()).map_err(|e| e.to_string())?;
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
                Err(e) => {
                    return Err(format!(
                        "{e}: run `filerouter db migrate --project {}` for it, or set `migrate = true` in its section",
                        config.project.display()
                    ));
                }
            }
            load::serve_from(
                &engine,
                &config.project,
                &opened,
                stamp,
                |_| limits,
                data,
                queue,
            )
            .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| format!("loading panicked: {e}"))??;
        if loaded.recompiled {
            tracing::warn!(
                "the cache's native code does not fit this machine; recompiled it from the baked component"
            );
        }
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
        let same_project = previous.config.project == wanted.project
            && previous.config.cache_dir == wanted.cache_dir;
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
            *tenant.refused.lock().unwrap_or_else(|e| e.into_inner()) = previous.refusal();
            if let Some(version) = previous.current.load_full() {
                match tenant.data().map_err(|e| e.to_string()).and_then(|data| {
                    version
                        .with(tenant.limits(), data)
                        .map_err(|e| e.to_string())
                }) {
                    Ok(version) => tenant.current.store(Some(Arc::new(version))),
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

    /// Pick up new builds: reload loaded tenants whose cache changed, forgive refused ones.
    pub async fn check_caches(&self) {
        let tenants = self.all();
        let stamps =
            watch::cache_stamps(tenants.iter().map(|t| t.config.cache_dir.clone()).collect()).await;
        for (tenant, stamp) in tenants.into_iter().zip(stamps) {
            {
                let mut watched = tenant.watched.lock().unwrap_or_else(|e| e.into_inner());
                if *watched == stamp {
                    continue;
                }
                *watched = stamp;
            }
            if tenant
                .refused
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .is_some()
            {
                let _entered = tenant.span.enter();
                tracing::warn!("its cache changed: trying it again on its next request");
            }
            if tenant.is_loaded() && stamp.is_some() {
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
                    return; // already serving this build
                }
                match this.load(&tenant).await {
                    Ok(version) => {
                        tenant.current.store(Some(Arc::new(version)));
                        tracing::warn!("new build picked up");
                    }
                    Err(reason) => tracing::error!(
                        "the new build cannot be used: {reason}; still serving the last good one"
                    ),
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
    fn with(&self, limits: Limits, data: Data) -> Result<Version, crate::sandbox::SandboxError> {
        let current = self.app.current();
        let sandbox = current.sandbox.reconfigured(limits, data)?;
        let loaded = crate::app::Loaded::new(
            current.project.clone(),
            sandbox,
            current.settings.clone(),
            None,
        );
        Ok(Version {
            app: App::new(self.app.root.clone(), self.app.mode, loaded),
            stamp: self.stamp,
        })
    }
}
