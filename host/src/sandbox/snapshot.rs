//! Baking the project into the guest for `filerouter build`: one instance imports every route
//! module, and component-init-transform snapshots its memory into a new component.
//!
//! Production instances are made from that component, so they start with the route modules
//! already imported, and still fresh: each request gets its own copy of the snapshot.
//! Before the memory is taken, the objects `bake` lists become immortal ([`make_immortal`]),
//! so that requests reading them no longer write their reference counts (pages a request
//! writes are copied back after it: `reset`).
//! This runs once per build, never while serving.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use component_init_transform::Invoker;
use wasmtime::{
    Config, Engine, Store,
    component::{Component, Instance, Linker},
};
use wasmtime_wasi::WasiCtxBuilder;

use super::{
    CallState, ProjectError,
    artifacts::cache_dir,
    bindings::Router,
    guest,
    plugin_calls::{PluginCall, PluginSet},
};

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
    plugins: Option<Arc<dyn PluginSet>>,
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
                keep_compiled: false,
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
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Every `.py` file under `routes/`, as path (relative to it) and source.
    pub files: Vec<(String, String)>,
    /// The route files to import (relative to `routes/`).
    pub routes: Vec<String>,
    /// The project's root Python files (`middleware.py`, ...), as name and source.
    pub root_files: Vec<(String, String)>,
    /// Every file of `.packages/`, as path (relative to it) and bytes.
    pub packages: Vec<(String, Vec<u8>)>,
    /// Compile every module of `packages` too, and keep the code (`dev`'s snapshot of the
    /// packages alone: see `wit/filerouter.wit`); a build never does.
    pub keep_compiled: bool,
}

/// Instantiate the instrumented guest (no files, no network: sources arrive as arguments)
/// and run its `bake` export.
async fn run_bake(
    instrumented: Vec<u8>,
    sources: Sources,
    memory_bytes: usize,
    plugins: Option<Arc<dyn PluginSet>>,
    declared: crate::environment::Environment,
    report: Arc<Mutex<Option<ProjectError>>>,
) -> anyhow::Result<Snapshotter> {
    let wt = |e: wasmtime::Error| anyhow::anyhow!("{e:#}");
    let mut config = Config::new();
    config.wasm_component_model(true);
    config
        .enable_incremental_compilation(Arc::new(super::engine::compiled_functions()))
        .map_err(wt)?;
    let engine = Engine::new(&config).map_err(wt)?;
    let component = instrumented_component(&engine, &instrumented)?;
    let mut linker = Linker::<CallState>::new(&engine);
    super::link(&mut linker).map_err(wt)?;
    // The bake runs no request: its key-value store is a throwaway, and its only databases
    // are private in-memory ones (the guest's warm-up uses one).
    let mut state = CallState::new(
        WasiCtxBuilder::new().build(),
        super::MemoryLimiter::new(memory_bytes),
        &crate::data::Data::for_build(),
        std::time::Instant::now(),
    );
    // A route that calls a plugin at import time calls it here (with a throwaway store too);
    // the bake has no time limit of its own beyond the build's.
    let far = std::time::Instant::now() + std::time::Duration::from_secs(600);
    state.plugins = plugins.map(|plugins| {
        plugins.open(PluginCall {
            memory: state.limits.share(),
            deadline: far,
            kv: Arc::default(),
            time: None,
            output: None,
        })
    });
    // What config.py declares, without values: module-level code that reads a secret fails
    // here, naming its line, instead of baking a value into the snapshot.
    state.environment = declared.without_values();
    // What `bake` sends to `snapshot.immortal` is kept here.
    state.immortal = Some(Vec::new());
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
            sources.keep_compiled,
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
    // A connection the snapshot kept would be a stale handle in every request.
    let open = store.data().db.open_connections();
    if open > 0 {
        anyhow::bail!(connections_left_open(open, "the build"));
    }
    let immortal = store.data_mut().immortal.take().unwrap_or_default();
    Ok(Snapshotter {
        store,
        instance,
        immortal,
    })
}

/// Why a snapshot whose import (by `who`: the build, `dev`'s snapshot) left `open` database
/// connections open is refused: each would be a stale handle in every request.
pub(super) fn connections_left_open(open: usize, who: &str) -> String {
    format!(
        "{open} database connection(s) opened while {who} imported route modules are still \
         open: close them before the import ends, or connect inside a handler or a dependency"
    )
}

/// The instrumented guest compiled for `engine`. It is the same for every project (the
/// built-in guest with component-init-transform's accessors), so it is compiled once per
/// machine and filerouter build and kept whole in the cache folder
/// (`bake-<fingerprint>-<engine settings>-<checksum>.cwasm`, checked as the compiled guest is,
/// `checked_code::load_named`): a build maps it in milliseconds instead of translating every
/// function again to find it in the compiled-function store (seconds of CPU per build).
///
/// The bytes themselves are no key: component-init-transform 0.3.1 lists the accessors it adds
/// in a hash map's order, so two instrumentations of one guest differ in the order of their
/// exports and nothing else. What the snapshot depends on is the guest and the accessors' names
/// (it calls them by name): [`instrumented_fingerprint`].
fn instrumented_component(engine: &Engine, instrumented: &[u8]) -> anyhow::Result<Component> {
    let stem = super::checked_code::stem(
        "bake",
        &instrumented_fingerprint(instrumented)?.to_hex()[..32],
        engine,
    );
    let compile = || {
        let compiled = engine
            .precompile_component(instrumented)
            .map_err(|e| format!("{e:#}"));
        super::engine::prune_compiled_functions();
        compiled
    };
    super::checked_code::load_named(engine, &cache_dir(), &stem, "bake-", compile)
        .map(|(component, _)| component)
        .map_err(|e| anyhow::anyhow!("compile the instrumented guest: {e}"))
}

/// What identifies an instrumentation of the built-in guest: the guest's hash, the pinned
/// component-init-transform, and the component's export names, sorted.
fn instrumented_fingerprint(instrumented: &[u8]) -> anyhow::Result<blake3::Hash> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(instrumented) {
        match payload.map_err(|e| anyhow::anyhow!("read the instrumented guest: {e}"))? {
            wasmparser::Payload::Version { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            wasmparser::Payload::ComponentExportSection(exports) if depth == 1 => {
                for export in exports {
                    let export =
                        export.map_err(|e| anyhow::anyhow!("read the instrumented guest: {e}"))?;
                    names.push(export.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    names.sort();
    let mut hasher = blake3::Hasher::new();
    hasher.update(super::guest::SHA256.as_bytes());
    hasher.update(b"\0component-init-transform 0.3.1\0");
    for name in &names {
        hasher.update(name.as_bytes());
        hasher.update(b"\0");
    }
    Ok(hasher.finalize())
}

/// Reads the baked instance's state for component-init-transform.
struct Snapshotter {
    store: Store<CallState>,
    instance: Instance,
    /// What `bake` listed to make immortal (see [`make_immortal`]).
    immortal: Vec<u32>,
}

/// The export through which component-init-transform reads the instance's linear memory.
const GET_MEMORY: &str = "component-init-get-memory";

/// CPython 3.14's reference count for an object made immortal at run time on a 32-bit target
/// (`_Py_IMMORTAL_INITIAL_REFCNT` in `Include/refcount.h`): any count from 2^30 up is immortal.
const IMMORTAL_REFCNT: u32 = 5 << 28;

/// The reference counts taken for a live object's. A block the allocator (dlmalloc) freed holds
/// its free-list pointers where the count was: addresses in the heap, above the 1 MiB stack, or
/// zero. No object of a snapshot is referenced a million times.
const PLAUSIBLE_REFCNT: std::ops::RangeInclusive<u32> = 1..=(1 << 20) - 1;

/// How many of the listed objects [`make_immortal`] changed, and how many it left alone.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Immortalized {
    pub written: usize,
    /// Not where the list said (out of memory, misaligned, another type there now, or a count
    /// no live object has): left as they were.
    pub skipped: usize,
}

/// Write CPython's immortal reference count into every object `objects` lists ((object
/// address, type address) pairs, flat; `guest-python/sandbox/immortal.py`) in `memory`, the baked
/// instance's linear memory as the snapshot will hold it. Each object is checked first: its
/// type pointer (the word after the count) must still be the listed type and its count one a
/// live object has, so a stale entry can never turn a freed block's free-list pointer into a
/// count.
pub fn make_immortal(memory: &mut [u8], objects: &[u32]) -> Immortalized {
    let mut done = Immortalized::default();
    let word = |memory: &[u8], at: usize| -> Option<u32> {
        let bytes = memory.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(bytes.try_into().ok()?))
    };
    for pair in objects.chunks_exact(2) {
        let (address, kind) = (pair[0] as usize, pair[1]);
        let live = address % 4 == 0
            && word(memory, address + 4) == Some(kind)
            && word(memory, address).is_some_and(|count| PLAUSIBLE_REFCNT.contains(&count));
        if live {
            memory[address..address + 4].copy_from_slice(&IMMORTAL_REFCNT.to_le_bytes());
            done.written += 1;
        } else {
            done.skipped += 1;
        }
    }
    done
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
        let mut bytes: Vec<u8> = self.call(function).await?;
        if function == GET_MEMORY {
            let done = make_immortal(&mut bytes, &std::mem::take(&mut self.immortal));
            tracing::debug!(
                "snapshot: {} objects made immortal, {} left as they were",
                done.written,
                done.skipped
            );
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The instrumented guest as component-init-transform makes it (the bake is not run).
    async fn instrumentation() -> Vec<u8> {
        let wasm = guest::wasm().unwrap();
        let kept: Arc<Mutex<Vec<u8>>> = Arc::default();
        let keep = kept.clone();
        let outcome = component_init_transform::initialize(&wasm, move |instrumented| {
            Box::pin(async move {
                *keep.lock().unwrap() = instrumented;
                Err(anyhow::anyhow!("only the instrumentation was wanted"))
            })
        })
        .await;
        assert!(outcome.is_err());
        let bytes = kept.lock().unwrap().clone();
        assert!(!bytes.is_empty());
        bytes
    }

    #[tokio::test]
    async fn every_instrumentation_of_the_guest_has_one_fingerprint() {
        let first = instrumentation().await;
        let second = instrumentation().await;
        assert_eq!(
            instrumented_fingerprint(&first).unwrap(),
            instrumented_fingerprint(&second).unwrap()
        );
        // Another component (the guest itself, without the accessors) has another one.
        assert_ne!(
            instrumented_fingerprint(&first).unwrap(),
            instrumented_fingerprint(&guest::wasm().unwrap()).unwrap()
        );
    }

    /// A memory with one "object" at `at`: its count, then its type pointer.
    fn memory_with(at: usize, count: u32, kind: u32) -> Vec<u8> {
        let mut memory = vec![0u8; 4096];
        memory[at..at + 4].copy_from_slice(&count.to_le_bytes());
        memory[at + 4..at + 8].copy_from_slice(&kind.to_le_bytes());
        memory
    }

    fn count_at(memory: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(memory[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn a_live_object_gets_the_immortal_count_and_nothing_else_changes() {
        let mut memory = memory_with(64, 3, 0x0010_2030);
        let before = memory.clone();
        let done = make_immortal(&mut memory, &[64, 0x0010_2030]);
        assert_eq!(
            done,
            Immortalized {
                written: 1,
                skipped: 0
            }
        );
        assert_eq!(count_at(&memory, 64), 5 << 28);
        // CPython's test on a 32-bit target: a count from 2^30 up is immortal.
        assert!(count_at(&memory, 64) >= 1 << 30);
        assert_eq!(memory[..64], before[..64]);
        assert_eq!(memory[68..], before[68..]);
    }

    #[test]
    fn stale_or_impossible_entries_are_left_alone() {
        let kind = 0x0010_2030;
        for (what, memory, objects) in [
            // The block was freed: its first word is now the allocator's free-list pointer.
            (
                "a free-list pointer",
                memory_with(64, 0x0012_3450, kind),
                vec![64, kind],
            ),
            ("a zero count", memory_with(64, 0, kind), vec![64, kind]),
            (
                "already immortal",
                memory_with(64, 7 << 28, kind),
                vec![64, kind],
            ),
            (
                "another type there now",
                memory_with(64, 2, 0x0010_4000),
                vec![64, kind],
            ),
            ("misaligned", memory_with(64, 2, kind), vec![66, kind]),
            (
                "past the memory",
                memory_with(64, 2, kind),
                vec![4092, kind],
            ),
            (
                "far past the memory",
                memory_with(64, 2, kind),
                vec![u32::MAX, kind],
            ),
        ] {
            let mut after = memory.clone();
            let done = make_immortal(&mut after, &objects);
            assert_eq!(done.written, 0, "{what}");
            assert_eq!(done.skipped, 1, "{what}");
            assert_eq!(after, memory, "{what}: memory changed");
        }
    }

    #[test]
    fn an_odd_trailing_number_is_ignored() {
        let mut memory = memory_with(64, 1, 9 << 12);
        let done = make_immortal(&mut memory, &[64, 9 << 12, 128]);
        assert_eq!(done.written, 1);
        assert_eq!(done.skipped, 0);
    }
}
