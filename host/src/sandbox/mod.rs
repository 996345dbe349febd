//! The WebAssembly sandbox: every call into project Python runs in a fresh guest instance.
//!
//! [`Sandbox`] owns the wasmtime engine (set up in [`engine`]), the compiled guest and one
//! `InstancePre`. Each call ([`Sandbox::handle`], [`Sandbox::inspect_route`],
//! [`Sandbox::load_config`]) makes a new `Store` and instance with the project's `routes/`
//! preopened read-only (in development; production instances see no files at all), runs one
//! export, and drops the instance: nothing survives a call. [`snapshot`] bakes the project's
//! modules into the guest for production.
//! Limits (memory, time) are enforced per call; see [`Limits`].
//!
//! This module knows nothing about HTTP routing; it only runs the guest.

mod bindings;
pub mod engine;
mod guest;
mod limits;
pub mod snapshot;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use wasmtime::{Store, StoreLimits, StoreLimitsBuilder, UpdateDeadline, component::ResourceTable};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

pub use bindings::filerouter::sandbox::types::{
    HandlerInfo, HttpRequest, HttpResponse, ParamValue, PathParam, ProjectError, RouteTarget,
};
pub use guest::SHA256 as GUEST_SHA256;
pub use limits::Limits;

use bindings::RouterPre;

/// Why a call into the guest produced no answer from project code.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Project code raised, or a route file failed to import.
    #[error("{}: {}", .0.kind, .0.message)]
    Project(Box<ProjectError>),
    /// The call ran past its time limit and was stopped.
    #[error("the handler ran longer than the time limit of {0:?}")]
    Timeout(Duration),
    /// The guest trapped (for example when it could not grow its memory past the cap).
    #[error("the sandbox stopped the guest: {0}")]
    Trap(String),
    /// No instance could be made (the pool is exhausted or the component does not link).
    #[error("could not start a sandbox instance: {0}")]
    Instantiate(String),
    /// The sandbox could not be set up for this call (the routes folder is missing, ...).
    #[error("could not prepare the sandbox: {0}")]
    Setup(String),
}

/// What a [`Store`] holds for one call: WASI state and the memory limiter.
struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The guest component, compiled and linked, ready to be instantiated once per call.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    engine: engine::SandboxEngine,
    pre: RouterPre<CallState>,
    /// Preopened read-only as `/routes` in development; `None` in production, where the route
    /// modules are in the baked guest and instances see no files.
    routes_dir: Option<PathBuf>,
    limits: Limits,
}

impl Sandbox {
    /// Link the guest for the project whose route files live in `routes_dir` (`None`: a
    /// baked guest that needs no files).
    pub fn new(
        engine: engine::SandboxEngine,
        routes_dir: Option<&Path>,
        limits: Limits,
    ) -> Result<Self, SandboxError> {
        let pre = engine
            .instance_pre::<CallState>()
            .map_err(|e| SandboxError::Setup(e.to_string()))?;
        let pre = RouterPre::new(pre).map_err(|e| SandboxError::Setup(format!("{e:#}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                pre,
                routes_dir: routes_dir.map(Path::to_path_buf),
                limits,
            }),
        })
    }

    /// The same guest and project with other limits (after `config.py` changed).
    pub fn with_limits(&self, limits: Limits) -> Result<Self, SandboxError> {
        Self::new(
            self.inner.engine.clone(),
            self.inner.routes_dir.as_deref(),
            limits,
        )
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Serve one request with the handler `target` names.
    pub async fn handle(
        &self,
        request: HttpRequest,
        target: RouteTarget,
    ) -> Result<HttpResponse, SandboxError> {
        self.call(async move |router, store| {
            router
                .filerouter_sandbox_guest()
                .call_handle(store, &request, &target)
                .await
        })
        .await
    }

    /// Import a route file in the guest and describe its handlers.
    pub async fn inspect_route(&self, file: &str) -> Result<Vec<HandlerInfo>, SandboxError> {
        let file = file.to_string();
        self.call(async move |router, store| {
            router
                .filerouter_sandbox_guest()
                .call_inspect_route(store, &file)
                .await
        })
        .await
    }

    /// Evaluate `config.py`'s source in the guest; the settings come back as JSON text.
    pub async fn load_config(&self, source: &str) -> Result<String, SandboxError> {
        let source = source.to_string();
        self.call(async move |router, store| {
            router
                .filerouter_sandbox_guest()
                .call_load_config(store, &source)
                .await
        })
        .await
    }

    /// Make a fresh store and instance, run `f` in it under the limits, and map the outcome.
    async fn call<T, F>(&self, f: F) -> Result<T, SandboxError>
    where
        F: AsyncFnOnce(
            bindings::Router,
            &mut Store<CallState>,
        ) -> wasmtime::Result<Result<T, ProjectError>>,
    {
        let inner = &self.inner;
        let limits = &inner.limits;
        let _slot = inner.engine.slot().await;
        let mut wasi = WasiCtxBuilder::new();
        if let Some(dir) = &inner.routes_dir {
            wasi.preopened_dir(dir, "/routes", FsPerms::ReadOnly)
                .map_err(|e| SandboxError::Setup(format!("open {}: {e}", dir.display())))?;
        }
        wasi.inherit_stdout().inherit_stderr();
        let state = CallState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .trap_on_grow_failure(false)
                .build(),
        };
        let mut store = Store::new(inner.engine.engine(), state);
        store.limiter(|state| &mut state.limits);

        // CPU-bound guests are stopped by the epoch: every tick they yield to the executor,
        // and once the deadline has passed they trap.
        let deadline = Instant::now() + limits.timeout;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });

        let run = async {
            let router = inner
                .pre
                .instantiate_async(&mut store)
                .await
                .map_err(|e| SandboxError::Instantiate(format!("{e:#}")))?;
            match f(router, &mut store).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(error)) => Err(SandboxError::Project(Box::new(error))),
                Err(trap) => Err(guest::classify_trap(trap, limits)),
            }
        };
        // A guest blocked in a host call (a long `time.sleep`) never reaches an epoch check:
        // the wall-clock timeout drops the whole call, instance and all.
        match tokio::time::timeout(limits.timeout, run).await {
            Ok(result) => result,
            Err(_) => Err(SandboxError::Timeout(limits.timeout)),
        }
    }
}
