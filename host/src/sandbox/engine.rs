//! The wasmtime engine, set up in one place (once per process), and the guests compiled for it
//! (once per project: the built-in guest, with its on-disk cache, or a build's baked snapshot).
//!
//! Compiling the guest with Cranelift takes seconds, so the compiled form is cached in
//! `$FILEROUTER_CACHE_DIR` (default: the user's cache folder, `~/.cache/filerouter`) under a
//! name derived from the guest's hash and the engine's settings. Later starts map it
//! (`Component::deserialize_file`, a few milliseconds), once `checked_code` has checked that
//! its bytes are the ones this user's filerouter wrote; a build's native code likewise, against
//! the hash its verified build cache records.

use std::{
    collections::hash_map::DefaultHasher,
    hash::{Hash, Hasher},
    path::Path,
    sync::Arc,
    time::Duration,
};

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
    component::{Component, InstancePre, Linker},
};

use super::{
    artifacts::{self, cache_dir},
    checked_code::{self, Refusal},
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

    /// [`SandboxEngine::baked_guest`] with the native code of a build in a file,
    /// `$FILEROUTER_CACHE_DIR/native/<id>.cwasm`, which is mapped rather than read: its pages
    /// are shared and can be dropped by the kernel, not anonymous memory. `id` names the build's
    /// native code (identical builds share one file); `expected` is the BLAKE3 hash of its bytes
    /// that the verified build cache records. On every load the file is checked against
    /// `expected` before it is mapped (`checked_code`); a missing file is written from
    /// `native()`, and a substituted or damaged one is refused (logged), removed and written
    /// again. `native()` must give bytes hashing to `expected`, or the load fails.
    pub fn baked_guest_cached(
        &self,
        id: &str,
        expected: &blake3::Hash,
        native: impl FnOnce() -> Result<Vec<u8>, String>,
        wasm: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<(Guest, bool), EngineError> {
        let dir = cache_dir().join("native");
        let loaded = native_component(&self.inner.engine, &dir, id, expected, native)?;
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

/// A build's native code from `dir/<id>.cwasm`, checked against `expected` and mapped; see
/// [`SandboxEngine::baked_guest_cached`]. The outer error is a load that cannot go on; the
/// inner one is wasmtime's refusal of code that does not fit this machine (then the component
/// is compiled here instead).
fn native_component(
    engine: &Engine,
    dir: &Path,
    id: &str,
    expected: &blake3::Hash,
    native: impl FnOnce() -> Result<Vec<u8>, String>,
) -> Result<wasmtime::Result<Component>, EngineError> {
    let path = dir.join(format!("{id}.cwasm"));
    match checked_code::open(&path).and_then(|code| code.expect(expected)) {
        Ok(code) => {
            artifacts::mark_used(&path);
            return Ok(code.component(engine));
        }
        Err(Refusal::Missing) => {}
        Err(refusal) => checked_code::discard(&path, &refusal),
    }
    let bytes = native().map_err(EngineError::Compile)?;
    if blake3::hash(&bytes) != *expected {
        return Err(EngineError::Native(
            "the build cache's native code does not hash to what its manifest records: run `filerouter build` again".into(),
        ));
    }
    match artifacts::store_atomically(&path, &bytes) {
        Ok(()) => {
            artifacts::prune_unused(dir, "", &path, artifacts::UNUSED_AGE);
        }
        Err(e) => tracing::warn!("could not write {}: {e}", path.display()),
    }
    // The file just written is checked like any other: it is what will be mapped.
    match checked_code::open(&path).and_then(|code| code.expect(expected)) {
        Ok(code) => Ok(code.component(engine)),
        Err(refusal) => {
            tracing::warn!(
                "{}: {refusal}; using the build cache's native code from memory instead",
                path.display()
            );
            // SAFETY: `bytes` come from the verified build cache and hash to what it records.
            Ok(unsafe { Component::deserialize(engine, &bytes) })
        }
    }
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

/// The built-in guest compiled for `engine`: mapped from the cache folder if this user's
/// filerouter compiled it there before (`guest-<guest hash>-<engine settings>-<checksum>.cwasm`,
/// checked by `checked_code::load_named`), else compiled now and kept there.
fn load_component(engine: &Engine) -> Result<Component, EngineError> {
    let mut hasher = DefaultHasher::new();
    guest::SHA256.hash(&mut hasher);
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let stem = format!("guest-{}-{:016x}", &guest::SHA256[..16], hasher.finish());
    let compile = || {
        eprintln!(
            "filerouter: compiling the sandbox guest for this machine (first start only, a few seconds)..."
        );
        let wasm = guest::wasm()?;
        let compiled = engine
            .precompile_component(&wasm)
            .map_err(|e| format!("{e:#}"));
        prune_compiled_functions();
        compiled
    };
    // Other filerouter builds' guests, unused for a while, go when a new one is written.
    checked_code::load_named(engine, &cache_dir(), &stem, "guest-", compile)
        .map(|(component, _)| component)
        .map_err(|e| EngineError::Compile(e.to_string()))
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

    /// Two different components, compiled for `engine`: an empty one, and one holding an empty
    /// core module.
    fn two_compiled(engine: &Engine) -> (Vec<u8>, Vec<u8>) {
        const HEADER: &[u8] = b"\0asm\x0d\0\x01\0";
        let mut with_module = HEADER.to_vec();
        with_module.extend_from_slice(b"\x01\x08\0asm\x01\0\0\0");
        let a = engine.precompile_component(HEADER).unwrap();
        let b = engine.precompile_component(&with_module).unwrap();
        assert_ne!(a, b);
        (a, b)
    }

    #[test]
    fn native_code_under_another_builds_name_is_refused_and_written_again() {
        let engine = new_engine(1).unwrap();
        let (a, b) = two_compiled(&engine);
        let dir = tempfile::tempdir().unwrap();
        let expected = blake3::hash(&b);
        let path = dir.path().join("b.cwasm");
        let load = |native: Result<Vec<u8>, String>| {
            native_component(&engine, dir.path(), "b", &expected, || native)
                .unwrap()
                .unwrap()
        };
        load(Ok(b.clone()));
        assert_eq!(std::fs::read(&path).unwrap(), b);
        // The right file is mapped without asking for the build cache's bytes.
        load(Err("not needed".into()));

        // Another build's code, the file cut short, garbage: each is refused, removed and
        // written again from the build cache.
        for bad in [&a[..], &b[..b.len() / 2], b"garbage"] {
            artifacts::store_atomically(&path, bad).unwrap();
            load(Ok(b.clone()));
            assert_eq!(std::fs::read(&path).unwrap(), b);
        }
    }

    #[test]
    fn native_code_that_does_not_hash_as_the_cache_says_is_not_loaded() {
        let engine = new_engine(1).unwrap();
        let (a, b) = two_compiled(&engine);
        let dir = tempfile::tempdir().unwrap();
        let error = native_component(&engine, dir.path(), "b", &blake3::hash(&b), || Ok(a))
            .err()
            .unwrap();
        assert!(matches!(error, EngineError::Native(_)), "{error}");
        assert!(!dir.path().join("b.cwasm").exists());
    }

    #[test]
    fn native_code_that_cannot_be_written_is_used_from_memory() {
        let engine = new_engine(1).unwrap();
        let (_, b) = two_compiled(&engine);
        let dir = tempfile::tempdir().unwrap();
        // A file where the folder should be: nothing can be written under it.
        let blocked = dir.path().join("native");
        std::fs::write(&blocked, b"").unwrap();
        let loaded = native_component(&engine, &blocked, "b", &blake3::hash(&b), || Ok(b));
        assert!(loaded.unwrap().is_ok());
    }
}
