//! The wasmtime engine, set up in one place (once per process), and the guests compiled for it
//! (once per project: the built-in guest, with its on-disk cache, or a build's baked snapshot).
//!
//! Compiling the guest with Cranelift takes seconds, so the compiled form is cached in
//! `$FILEROUTER_CACHE_DIR` (default: the user's cache folder, `~/.cache/filerouter`) under a
//! name derived from the guest's hash and the engine's settings. Later starts load it with
//! `Component::deserialize_file` (an mmap, a few milliseconds).

use std::{
    collections::hash_map::DefaultHasher,
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
    component::{Component, InstancePre, Linker},
};

use super::{
    artifacts::{self, cache_dir},
    compiled_functions::{self, CompiledFunctions},
    guest,
};

/// How often the epoch advances: the granularity of the time limit and of CPU-bound yields.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Things that can go wrong while setting up the engine or the compiled guest.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("configure wasmtime: {0}")]
    Config(String),
    #[error("compile the guest component: {0}")]
    Compile(String),
    #[error("link the guest component: {0}")]
    Link(String),
    #[error("store the native code: {0}")]
    Native(String),
}

/// The wasmtime engine and its instance pool: once per process, shared by every project (every
/// tenant) the process serves. Each project's code is a [`Guest`] made from it.
#[derive(Clone)]
pub struct SandboxEngine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    engine: Engine,
    /// One permit per pooling-allocator slot: a call waits here rather than fail to allocate.
    slots: tokio::sync::Semaphore,
    /// How many instances may be live at once (the number of permits).
    max_instances: usize,
}

/// One project's guest: a component compiled for a [`SandboxEngine`] (the built-in guest, or a
/// build's baked snapshot). Cheap to clone; its native code is shared, and mapped from a file
/// where it came from one.
#[derive(Clone)]
pub struct Guest {
    engine: SandboxEngine,
    component: Component,
}

impl SandboxEngine {
    /// Set up wasmtime for at most `max_instances` live instances, all projects together.
    pub fn new(max_instances: u32) -> Result<Self, EngineError> {
        let engine = new_engine(max_instances)?;
        if let Ok(policy) = super::reset::policy() {
            tracing::info!("sandbox memory reset: {policy}");
        }
        start_epoch_ticker(&engine);
        Ok(Self {
            inner: Arc::new(EngineInner {
                engine,
                slots: tokio::sync::Semaphore::new(max_instances.max(1) as usize),
                max_instances: max_instances.max(1) as usize,
            }),
        })
    }

    /// A new engine with the built-in guest: the one-project case (`dev`, `build`, commands).
    pub fn load(max_instances: u32) -> Result<Guest, EngineError> {
        Self::new(max_instances)?.builtin_guest()
    }

    /// The built-in guest, compiled for this engine (and cached on disk) if this machine has
    /// not done so yet.
    pub fn builtin_guest(&self) -> Result<Guest, EngineError> {
        let component = load_component(&self.inner.engine)?;
        Ok(self.guest(component))
    }

    /// A baked guest from a build cache: its precompiled form `native` if it fits this machine
    /// and filerouter build, else `wasm()` compiled here. Returns whether it was recompiled.
    pub fn baked_guest(
        &self,
        native: &[u8],
        wasm: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<(Guest, bool), EngineError> {
        // SAFETY: `native` comes from a build cache whose checksum (and, if encrypted, its
        // authentication tag) was verified, and was written by `precompile` of a filerouter
        // build; wasmtime also checks its header against this engine and refuses a mismatch.
        let loaded = unsafe { Component::deserialize(&self.inner.engine, native) };
        self.baked_or_recompiled(loaded, wasm)
    }

    /// [`SandboxEngine::baked_guest`] with the native code in a file, which is mapped rather
    /// than read: its pages are shared and can be dropped by the kernel, not anonymous memory.
    /// The file must not change while the guest lives (write a new file and rename it over).
    pub fn baked_guest_file(
        &self,
        native: &Path,
        wasm: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<(Guest, bool), EngineError> {
        // SAFETY: as in `baked_guest`; `native` was written by `native_file` from a verified
        // cache and is only ever replaced by renaming, never changed in place.
        let loaded = unsafe { Component::deserialize_file(&self.inner.engine, native) };
        self.baked_or_recompiled(loaded, wasm)
    }

    fn baked_or_recompiled(
        &self,
        loaded: wasmtime::Result<Component>,
        wasm: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<(Guest, bool), EngineError> {
        let (component, recompiled) = match loaded {
            Ok(component) => (component, false),
            Err(e) => {
                tracing::debug!("precompiled guest unusable here: {e:#}");
                let wasm = wasm().map_err(EngineError::Compile)?;
                let component = Component::new(&self.inner.engine, &wasm)
                    .map_err(|e| EngineError::Compile(format!("{e:#}")))?;
                (component, true)
            }
        };
        Ok((self.guest(component), recompiled))
    }

    fn guest(&self, component: Component) -> Guest {
        Guest {
            engine: self.clone(),
            component,
        }
    }

    /// Compile a guest component to this machine's native code, in the form
    /// [`SandboxEngine::baked_guest`] reads.
    pub fn precompile(wasm: &[u8]) -> Result<Vec<u8>, EngineError> {
        let engine = new_engine(1)?;
        let compiled = engine
            .precompile_component(wasm)
            .map_err(|e| EngineError::Compile(format!("{e:#}")));
        prune_compiled_functions();
        compiled
    }

    /// Something that makes every running guest of this engine reach its epoch check now (and
    /// ask its budget whether to go on); it does nothing once the engine is gone. For
    /// [`crate::scheduler::Scheduler::set_preemption`].
    pub fn preemption(&self) -> impl Fn() + Send + Sync + 'static {
        let weak = self.inner.engine.weak();
        move || {
            if let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
            }
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// How many instances may be live at once, all projects together.
    pub fn max_instances(&self) -> usize {
        self.inner.max_instances
    }

    /// Wait for a free instance slot; the slot is released when the permit is dropped.
    pub async fn slot(&self) -> tokio::sync::SemaphorePermit<'_> {
        // The semaphore is never closed, so acquiring cannot fail.
        match self.inner.slots.acquire().await {
            Ok(permit) => permit,
            Err(_) => unreachable!("the instance semaphore is never closed"),
        }
    }
}

impl Guest {
    /// The engine this guest was compiled for.
    pub fn engine(&self) -> &SandboxEngine {
        &self.engine
    }

    /// Link the guest for a store holding `T`, with the imports `link` adds.
    pub fn instance_pre<T: 'static>(
        &self,
        link: impl FnOnce(&mut Linker<T>) -> wasmtime::Result<()>,
    ) -> Result<InstancePre<T>, EngineError> {
        let mut linker = Linker::<T>::new(self.engine.engine());
        link(&mut linker).map_err(|e| EngineError::Link(format!("{e:#}")))?;
        linker
            .instantiate_pre(&self.component)
            .map_err(|e| EngineError::Link(format!("{e:#}")))
    }
}

/// The native code of a build, as a file that [`SandboxEngine::baked_guest_file`] maps: written
/// once (by `bytes()`) under `$FILEROUTER_CACHE_DIR/native/`, named by `id`, a hash of the
/// verified cache section it comes from, so identical builds share one file (and its pages).
pub fn native_file(
    id: &str,
    bytes: impl FnOnce() -> Result<Vec<u8>, String>,
) -> Result<PathBuf, EngineError> {
    let dir = cache_dir().join("native");
    let path = dir.join(format!("{id}.cwasm"));
    if path.is_file() {
        artifacts::mark_used(&path);
        return Ok(path);
    }
    let bytes = bytes().map_err(EngineError::Compile)?;
    artifacts::store_atomically(&path, &bytes)
        .map_err(|e| EngineError::Native(format!("write {}: {e}", path.display())))?;
    artifacts::prune_unused(&dir, "", &path, artifacts::UNUSED_AGE);
    Ok(path)
}

fn new_engine(max_instances: u32) -> Result<Engine, EngineError> {
    Engine::new(&config(max_instances)?).map_err(|e| EngineError::Config(format!("{e:#}")))
}

fn config(max_instances: u32) -> Result<Config, EngineError> {
    let n = max_instances.max(1);
    let mut pool = PoolingAllocationConfig::default();
    // componentize-py's component links 14 core modules; leave headroom for growth.
    pool.total_component_instances(n)
        .total_core_instances(n * 24)
        .max_core_instances_per_component(24)
        .total_memories(n * 4)
        .max_memories_per_component(4)
        .max_memories_per_module(2)
        .total_tables(n * 8)
        .max_tables_per_component(8)
        .table_elements(64 * 1024)
        .max_memory_size(4 << 30)
        .max_component_instance_size(4 << 20)
        .max_core_instance_size(4 << 20)
        .total_stacks(n);
    // How a used slot is made fresh again (PAGEMAP_SCAN or a copy): see `reset`.
    super::reset::policy()
        .map_err(|e| EngineError::Config(e.to_string()))?
        .apply(&mut pool);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .cranelift_opt_level(OptLevel::Speed)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
        .enable_incremental_compilation(Arc::new(compiled_functions()))
        .map_err(|e| EngineError::Config(format!("{e:#}")))?;
    Ok(config)
}

/// Cranelift's store of compiled functions (see [`CompiledFunctions`]).
fn compiled_functions() -> CompiledFunctions {
    CompiledFunctions::new(cache_dir().join("functions"))
}

/// Keep the store of compiled functions within its bound after a compilation.
fn prune_compiled_functions() {
    let removed = compiled_functions().prune(compiled_functions::LIMIT_BYTES);
    if removed > 0 {
        tracing::debug!("removed {removed} least recently used compiled functions");
    }
}

fn load_component(engine: &Engine) -> Result<Component, EngineError> {
    let mut hasher = DefaultHasher::new();
    guest::SHA256.hash(&mut hasher);
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let dir = cache_dir();
    let path = dir.join(format!(
        "guest-{}-{:016x}.cwasm",
        &guest::SHA256[..16],
        hasher.finish()
    ));
    if path.exists() {
        // SAFETY: the file was written by `Engine::precompile_component` of this same
        // filerouter build (its name carries the guest hash and engine settings); wasmtime
        // checks the header and refuses an incompatible artifact.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => {
                artifacts::mark_used(&path);
                return Ok(component);
            }
            Err(e) => tracing::warn!("ignoring unusable compiled guest {}: {e}", path.display()),
        }
    }
    eprintln!(
        "filerouter: compiling the sandbox guest for this machine (first start only, a few seconds)..."
    );
    let wasm =
        zstd::decode_all(guest::COMPRESSED).map_err(|e| EngineError::Compile(e.to_string()))?;
    let compiled = engine
        .precompile_component(&wasm)
        .map_err(|e| EngineError::Compile(format!("{e:#}")))?;
    prune_compiled_functions();
    match artifacts::store_atomically(&path, &compiled) {
        // Other filerouter builds' guests, unused for a while, go.
        Ok(()) => {
            artifacts::prune_unused(&dir, "guest-", &path, artifacts::UNUSED_AGE);
        }
        Err(e) => tracing::warn!(
            "could not cache the compiled guest in {}: {e}",
            dir.display()
        ),
    }
    // SAFETY: `compiled` was produced just above by this engine.
    unsafe { Component::deserialize(engine, &compiled) }
        .map_err(|e| EngineError::Compile(format!("{e:#}")))
}

/// Advance the engine's epoch every [`EPOCH_TICK`] until the engine is dropped.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("filerouter-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map(|_| ())
        .unwrap_or_else(|e| tracing::error!("could not start the epoch thread: {e}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_code_that_does_not_fit_is_recompiled_from_the_component() {
        let engine = SandboxEngine::new(1).unwrap();
        let (_, recompiled) = engine
            .baked_guest(b"not native code for this machine", guest::wasm)
            .unwrap();
        assert!(recompiled);
    }
}
