//! Baking the project into the guest for `filerouter build`: one instance imports every route
//! module, and component-init-transform snapshots its memory into a new component.
//!
//! Production instances are made from that component, so they start with the route modules
//! already imported, and still fresh: each request gets its own copy of the snapshot.
//! This runs once per build, never while serving.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use component_init_transform::Invoker;
use wasmtime::{
    Config, Engine, Store,
    component::{Component, Instance, Linker},
};
use wasmtime_wasi::WasiCtxBuilder;

use super::{CallState, ProjectError, bindings::Router, guest};

/// Why a bake produced no snapshot.
#[derive(Debug, thiserror::Error)]
pub enum BakeError {
    /// A route file (or a helper it imports) raised while being imported.
    #[error("{}: {}", .0.kind, .0.message)]
    Project(Box<ProjectError>),
    #[error("snapshot the guest: {0}")]
    Snapshot(String),
}

/// Import `routes` (from `files`: every `.py` under `routes/`, as path and source), the
/// project's root Python files `root_files` and its `packages` (every file of `.packages/`)
/// in a guest instance and return the snapshotted component.
pub async fn bake(
    files: Vec<(String, String)>,
    routes: Vec<String>,
    root_files: Vec<(String, String)>,
    packages: Vec<(String, Vec<u8>)>,
    memory_bytes: usize,
    plugins: crate::plugins::Plugins,
    declared: crate::environment::Environment,
) -> Result<Vec<u8>, BakeError> {
    let wasm = guest::wasm().map_err(BakeError::Snapshot)?;
    let failed: Arc<Mutex<Option<ProjectError>>> = Arc::default();
    let report = failed.clone();
    let snapshot = component_init_transform::initialize(&wasm, move |instrumented| {
        Box::pin(async move {
            let sources = Sources {
                files,
                routes,
                root_files,
                packages,
            };
            let invoker = run_bake(
                instrumented,
                sources,
                memory_bytes,
                plugins,
                declared,
                report,
            )
            .await?;
            Ok(Box::new(invoker) as Box<dyn Invoker>)
        })
    })
    .await;
    match snapshot {
        Ok(component) => Ok(component),
        Err(e) => match failed.lock().ok().and_then(|mut f| f.take()) {
            Some(project) => Err(BakeError::Project(Box::new(project))),
            None => Err(BakeError::Snapshot(format!("{e:#}"))),
        },
    }
}

/// What the guest's `bake` export is given: the project's Python and its packages.
struct Sources {
    files: Vec<(String, String)>,
    routes: Vec<String>,
    root_files: Vec<(String, String)>,
    packages: Vec<(String, Vec<u8>)>,
}

/// Instantiate the instrumented guest (no files, no network: sources arrive as arguments)
/// and run its `bake` export.
async fn run_bake(
    instrumented: Vec<u8>,
    sources: Sources,
    memory_bytes: usize,
    plugins: crate::plugins::Plugins,
    declared: crate::environment::Environment,
    report: Arc<Mutex<Option<ProjectError>>>,
) -> anyhow::Result<Snapshotter> {
    let wt = |e: wasmtime::Error| anyhow::anyhow!("{e:#}");
    let engine = Engine::new(Config::new().wasm_component_model(true)).map_err(wt)?;
    let component = Component::new(&engine, &instrumented).map_err(wt)?;
    let mut linker = Linker::<CallState>::new(&engine);
    super::link(&mut linker).map_err(wt)?;
    // The bake runs no request: its key-value store is a throwaway.
    let mut state = CallState::new(
        WasiCtxBuilder::new().build(),
        memory_bytes,
        &crate::data::Data::default(),
        std::time::Instant::now(),
    );
    // A route that calls a plugin at import time calls it here (with a throwaway store too);
    // the bake has no time limit of its own beyond the build's.
    let far = std::time::Instant::now() + std::time::Duration::from_secs(600);
    state.plugins =
        crate::plugins::Session::new(plugins, state.limits.share(), far, Arc::default());
    // What config.py declares, without values: module-level code that reads a secret fails
    // here, naming its line, instead of baking a value into the snapshot.
    state.environment = declared.without_values();
    let mut store = Store::new(&engine, state);
    store.limiter(|state| &mut state.limits);
    let instance = linker
        .instantiate_async(&mut store, &component)
        .await
        .map_err(wt)?;
    let router = Router::new(&mut store, &instance).map_err(wt)?;
    let outcome = router
        .filerouter_sandbox_guest()
        .call_bake(
            &mut store,
            &sources.files,
            &sources.routes,
            &sources.root_files,
            &sources.packages,
        )
        .await
        .map_err(wt)?;
    if let Err(error) = outcome {
        let message = format!("{}: {}", error.kind, error.message);
        if let Ok(mut slot) = report.lock() {
            *slot = Some(error);
        }
        anyhow::bail!(message);
    }
    Ok(Snapshotter { store, instance })
}

/// Reads the baked instance's state for component-init-transform.
struct Snapshotter {
    store: Store<CallState>,
    instance: Instance,
}

impl Snapshotter {
    async fn call<R>(&mut self, function: &str) -> anyhow::Result<R>
    where
        R: wasmtime::component::Lift + Send + Sync + 'static,
    {
        let func = self
            .instance
            .get_typed_func::<(), (R,)>(&mut self.store, function)
            .map_err(|e| anyhow::anyhow!("{function}: {e:#}"))?;
        let (value,) = func
            .call_async(&mut self.store, ())
            .await
            .map_err(|e| anyhow::anyhow!("{function}: {e:#}"))?;
        Ok(value)
    }
}

#[async_trait]
impl Invoker for Snapshotter {
    async fn call_s32(&mut self, function: &str) -> anyhow::Result<i32> {
        self.call(function).await
    }
    async fn call_s64(&mut self, function: &str) -> anyhow::Result<i64> {
        self.call(function).await
    }
    async fn call_f32(&mut self, function: &str) -> anyhow::Result<f32> {
        self.call(function).await
    }
    async fn call_f64(&mut self, function: &str) -> anyhow::Result<f64> {
        self.call(function).await
    }
    async fn call_list_u8(&mut self, function: &str) -> anyhow::Result<Vec<u8>> {
        self.call(function).await
    }
}
