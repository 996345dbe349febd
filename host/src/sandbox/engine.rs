//! The wasmtime engine, set up in one place, and the compiled guest with its on-disk cache.
//!
//! Compiling the guest with Cranelift takes seconds, so the compiled form is cached in
//! `$FILEROUTER_CACHE_DIR` (default: the user's cache folder, `~/.cache/filerouter`) under a
//! name derived from the guest's hash and the engine's settings. Later starts load it with
//! `Component::deserialize_file` (an mmap, a few milliseconds).

use std::{
    collections::hash_map::DefaultHasher,
    fs,
    hash::{Hash, Hasher},
    io::Write,
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
    component::{Component, InstancePre, Linker},
};

use super::guest;

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
}

/// The engine and the compiled guest component, shared by every sandbox of the process.
#[derive(Clone)]
pub struct SandboxEngine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    engine: Engine,
    component: Component,
    /// One permit per pooling-allocator slot: a call waits here rather than fail to allocate.
    slots: tokio::sync::Semaphore,
}

impl SandboxEngine {
    /// Set up wasmtime for at most `max_instances` live instances and load the built-in guest,
    /// compiling it (and caching the result) if this machine has not done so yet.
    pub fn load(max_instances: u32) -> Result<Self, EngineError> {
        let engine = new_engine(max_instances)?;
        let component = load_component(&engine)?;
        Ok(Self::assemble(engine, component, max_instances))
    }

    /// Set up wasmtime with a baked guest from a build cache: its precompiled form `native`
    /// if it fits this machine and filerouter build, else `wasm()` compiled here.
    /// Returns whether it had to be recompiled.
    pub fn load_baked(
        max_instances: u32,
        native: &[u8],
        wasm: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<(Self, bool), EngineError> {
        let engine = new_engine(max_instances)?;
        // SAFETY: `native` comes from a build cache whose checksum (and, if encrypted, its
        // authentication tag) was verified, and was written by `precompile` of a filerouter
        // build; wasmtime also checks its header against this engine and refuses a mismatch.
        let (component, recompiled) = match unsafe { Component::deserialize(&engine, native) } {
            Ok(component) => (component, false),
            Err(e) => {
                tracing::debug!("precompiled guest unusable here: {e:#}");
                let wasm = wasm().map_err(EngineError::Compile)?;
                let component = Component::new(&engine, &wasm)
                    .map_err(|e| EngineError::Compile(format!("{e:#}")))?;
                (component, true)
            }
        };
        Ok((Self::assemble(engine, component, max_instances), recompiled))
    }

    /// Compile a guest component to this machine's native code, in the form
    /// [`SandboxEngine::load_baked`] reads.
    pub fn precompile(wasm: &[u8]) -> Result<Vec<u8>, EngineError> {
        let engine = new_engine(1)?;
        engine
            .precompile_component(wasm)
            .map_err(|e| EngineError::Compile(format!("{e:#}")))
    }

    fn assemble(engine: Engine, component: Component, max_instances: u32) -> Self {
        if let Ok(policy) = super::reset::policy() {
            tracing::info!("sandbox memory reset: {policy}");
        }
        start_epoch_ticker(&engine);
        Self {
            inner: Arc::new(EngineInner {
                engine,
                component,
                slots: tokio::sync::Semaphore::new(max_instances as usize),
            }),
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Wait for a free instance slot; the slot is released when the permit is dropped.
    pub async fn slot(&self) -> tokio::sync::SemaphorePermit<'_> {
        // The semaphore is never closed, so acquiring cannot fail.
        match self.inner.slots.acquire().await {
            Ok(permit) => permit,
            Err(_) => unreachable!("the instance semaphore is never closed"),
        }
    }

    /// Link the guest for a store holding `T`, with the imports `link` adds.
    pub fn instance_pre<T: 'static>(
        &self,
        link: impl FnOnce(&mut Linker<T>) -> wasmtime::Result<()>,
    ) -> Result<InstancePre<T>, EngineError> {
        let mut linker = Linker::<T>::new(&self.inner.engine);
        link(&mut linker).map_err(|e| EngineError::Link(format!("{e:#}")))?;
        linker
            .instantiate_pre(&self.inner.component)
            .map_err(|e| EngineError::Link(format!("{e:#}")))
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
    Ok(config)
}

/// Where compiled guests are cached.
fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FILEROUTER_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("filerouter")
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
            Ok(component) => return Ok(component),
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
    if let Err(e) = store_atomically(&dir, &path, &compiled) {
        tracing::warn!(
            "could not cache the compiled guest in {}: {e}",
            dir.display()
        );
    }
    // SAFETY: `compiled` was produced just above by this engine.
    unsafe { Component::deserialize(engine, &compiled) }
        .map_err(|e| EngineError::Compile(format!("{e:#}")))
}

fn store_atomically(dir: &PathBuf, path: &PathBuf, bytes: &[u8]) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".tmp-{}-{}", std::process::id(), rand_suffix()));
    let mut file = fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

fn rand_suffix() -> u64 {
    let mut hasher = DefaultHasher::new();
    std::time::SystemTime::now().hash(&mut hasher);
    std::thread::current().id().hash(&mut hasher);
    hasher.finish()
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
        let (_, recompiled) =
            SandboxEngine::load_baked(1, b"not native code for this machine", guest::wasm).unwrap();
        assert!(recompiled);
    }
}
