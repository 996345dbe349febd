//! The wasmtime engine, set up in one place (once per process), and the one compiled guest
//! every project of the process shares (once per process and engine settings).
//!
//! The guest's code is the built-in guest with its memory module emptied (`image`): the same
//! for every project, whether it runs from `routes/` in `dev` or from a build's snapshot.
//! What a project adds is its memory image, which the engine's memory slots map into its
//! instances (`slots`). So `filerouter build` compiles nothing, and a process serving a
//! thousand tenants holds one copy of the machine code.
//!
//! Compiling the guest with Cranelift takes seconds, so the compiled form is cached in
//! `$FILEROUTER_CACHE_DIR` (default: the user's cache folder, `~/.cache/filerouter`) under a
//! name derived from the guest's hash and the engine's settings. Later starts map it
//! (`Component::deserialize_file`, a few milliseconds), once `checked_code` has checked that
//! its bytes are the ones this user's filerouter wrote.

use std::{sync::Arc, time::Duration};

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, OptLevel,
    component::{Component, InstancePre, Linker},
};

use super::{
    artifacts::cache_dir,
    checked_code,
    compiled_functions::{self, CompiledFunctions},
    guest,
    image::{self, Image},
    slots::{SlotCounts, Slots, Stacks},
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
    #[error("{0}")]
    Image(#[from] image::ImageError),
}

/// The wasmtime engine and its memory slots: once per process, shared by every project (every
/// tenant) the process serves, with the one compiled guest. Each project is a [`Guest`]: that
/// code and the project's memory image.
#[derive(Clone)]
pub struct SandboxEngine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    engine: Engine,
    /// One permit per live instance: a call waits here rather than start past the limit.
    permits: tokio::sync::Semaphore,
    /// How many instances may be live at once (the number of permits).
    max_instances: usize,
    /// The linear memories of every instance (wasmtime holds another handle).
    slots: Slots,
    /// The guest's code compiled for `engine`, made on first use.
    code: std::sync::Mutex<Option<Component>>,
}

/// One project's guest: the engine's compiled code and the project's memory image (the built-in
/// guest's own, or a build's snapshot). Cheap to clone.
#[derive(Clone)]
pub struct Guest {
    engine: SandboxEngine,
    component: Component,
    image: Arc<Image>,
}

impl SandboxEngine {
    /// Set up wasmtime for at most `max_instances` live instances, all projects together.
    pub fn new(max_instances: u32) -> Result<Self, EngineError> {
        let max_instances = max_instances.max(1) as usize;
        let policy = super::reset::policy().map_err(|e| EngineError::Config(e.to_string()))?;
        tracing::info!("sandbox memory reset: {policy}");
        // As many slots as live instances: each holds its project's pages resident (shared
        // page cache and the pages its calls wrote), so more would cost memory for calls that
        // may never come; a busy project keeps its slots, the least recently used go to others.
        let slots = Slots::new(max_instances, policy);
        let engine = new_engine(&slots, max_instances)?;
        start_epoch_ticker(&engine);
        Ok(Self {
            inner: Arc::new(EngineInner {
                engine,
                permits: tokio::sync::Semaphore::new(max_instances),
                max_instances,
                slots,
                code: std::sync::Mutex::new(None),
            }),
        })
    }

    /// A new engine with the built-in guest: the one-project case (`dev`, `build`, commands).
    pub fn load(max_instances: u32) -> Result<Guest, EngineError> {
        Self::new(max_instances)?.builtin_guest()
    }

    /// The built-in guest: the shared code with the built-in guest's own memory (CPython's
    /// static data, no project), for `dev`, `build` and project commands.
    pub fn builtin_guest(&self) -> Result<Guest, EngineError> {
        let component = self.code()?;
        Ok(self.guest(component, builtin_image()?))
    }

    /// A build's guest: the shared code with the memory image whose bytes hash to `expected`
    /// (from the verified build cache), mapped from the cache folder (`images/`), where it is
    /// written from `image()` first if it is missing or refused (see [`Image::load`]).
    pub fn baked_guest(
        &self,
        expected: &blake3::Hash,
        image: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<Guest, EngineError> {
        let component = self.code()?;
        let image = Image::load(&image::images_dir(), expected, image)?;
        Ok(self.guest(component, image))
    }

    /// Map (or, on this machine's first start, compile) the guest's code now rather than for
    /// the first project loaded: a server of tenants, which loads them on their first requests,
    /// does this at start so that no tenant's first answer pays for it.
    pub fn prepare(&self) -> Result<(), EngineError> {
        self.code().map(drop)
    }

    fn guest(&self, component: Component, image: Arc<Image>) -> Guest {
        Guest {
            engine: self.clone(),
            component,
            image,
        }
    }

    /// The guest's code compiled for this engine: mapped from the cache folder, or compiled
    /// (and kept there) on this machine's first start; once per process.
    fn code(&self) -> Result<Component, EngineError> {
        let mut code =
            self.inner.code.lock().map_err(|_| {
                EngineError::Compile("the compiled guest's lock is poisoned".into())
            })?;
        if let Some(component) = code.as_ref() {
            return Ok(component.clone());
        }
        let component = load_component(&self.inner.engine)?;
        *code = Some(component.clone());
        Ok(component)
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

    /// Unmap the idle memory slots of images no project uses any more (see
    /// [`Slots::forget_unused_images`]).
    pub fn forget_unused_images(&self) -> usize {
        self.inner.slots.forget_unused_images()
    }

    /// What the memory slots did so far (for tests and benchmarks).
    pub fn slot_counts(&self) -> SlotCounts {
        self.inner.slots.counts()
    }

    /// Wait for a turn to have a live instance; it ends when the permit is dropped.
    pub async fn slot(&self) -> tokio::sync::SemaphorePermit<'_> {
        // The semaphore is never closed, so acquiring cannot fail.
        match self.inner.permits.acquire().await {
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

    /// The project's memory image, which the store's memory limiter announces (`slots`).
    pub fn image(&self) -> &Arc<Image> {
        &self.image
    }

    /// The same compiled code with another memory image (`dev`'s live snapshots).
    pub fn with_image(&self, image: Arc<Image>) -> Guest {
        self.engine.guest(self.component.clone(), image)
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

/// The most stack a guest call's compiled code may use (wasmtime's default is 512 KiB).
///
/// CPython 3.14 raises `RecursionError` for a deep C recursion (`json.dumps`, `json.loads`,
/// `repr`, `==` of a structure nested thousands deep) by where its stack pointer is: the
/// guest's shadow stack in linear memory, of which it allows itself about 1 MiB. The compiled
/// code's own frames are on this stack instead, and use up to about 30 times more per level
/// than the shadow stack: with 512 KiB, `json.dumps` of a 2,000-deep list ran out of this stack
/// first and trapped the instance. Measured (`tests/hostile_guest.rs`): with 8 MiB
/// `json.loads`, `==` and `str` of a dict still trapped before Python's check, with 16 MiB
/// `==`; with 32 MiB every checked path raises. Code that checks nothing (freeing a structure
/// nested about 150,000 deep, `hash` of such a tuple) still runs out, and gets
/// [`SandboxError::StackExhausted`](super::SandboxError::StackExhausted). Only the pages a call
/// touches are mapped, and a pooled stack gives back what a deep call touched
/// (`slots::Stacks`): a shallow call costs what it did.
pub const MAX_WASM_STACK: usize = 32 << 20;

/// The fiber stack a guest call runs on: its wasm stack, and room for the host calls made
/// from the deepest wasm frame: as much as a database thread has
/// ([`crate::db::threads::STACK_BYTES`]), since reads of the project's SQLite database run
/// in the host call itself (`crate::db::sqlite::Connection::execute_here`), and 1 MiB for
/// the host's own frames. Address space only: the pages a call never touches are never
/// backed by memory.
pub const FIBER_STACK: usize = MAX_WASM_STACK + crate::db::threads::STACK_BYTES + (1 << 20);

fn new_engine(slots: &Slots, max_instances: usize) -> Result<Engine, EngineError> {
    let mut config = Config::new();
    config
        .max_wasm_stack(MAX_WASM_STACK)
        .async_stack_size(FIBER_STACK)
        .wasm_component_model(true)
        .epoch_interruption(true)
        .cranelift_opt_level(OptLevel::Speed)
        // Memories and stacks are ours (`slots`): instances are otherwise made on demand.
        .allocation_strategy(InstanceAllocationStrategy::OnDemand)
        .with_host_memory(Arc::new(slots.handle()))
        .with_host_stack(Arc::new(Stacks::new(max_instances)))
        // The guest's memory module has no data; nothing else may ask wasmtime for a
        // copy-on-write image of a host memory (it cannot make one).
        .memory_init_cow(false);
    config
        .enable_incremental_compilation(Arc::new(compiled_functions()))
        .map_err(|e| EngineError::Config(format!("{e:#}")))?;
    Engine::new(&config).map_err(|e| EngineError::Config(format!("{e:#}")))
}

/// Cranelift's store of compiled functions (see [`CompiledFunctions`]).
pub(super) fn compiled_functions() -> CompiledFunctions {
    CompiledFunctions::new(cache_dir().join("functions"))
}

/// Keep the store of compiled functions within its bound after a compilation.
pub(super) fn prune_compiled_functions() {
    let removed = compiled_functions().prune(compiled_functions::LIMIT_BYTES);
    if removed > 0 {
        tracing::debug!("removed {removed} least recently used compiled functions");
    }
}

/// The built-in guest's memory image, split from the guest inside the binary and mapped once
/// per process: `dev` sets up two engines, and each would otherwise decompress, split and hash
/// the guest again.
fn builtin_image() -> Result<Arc<Image>, EngineError> {
    static IMAGE: std::sync::Mutex<Option<Arc<Image>>> = std::sync::Mutex::new(None);
    let mut kept = IMAGE
        .lock()
        .map_err(|_| EngineError::Compile("the built-in image's lock is poisoned".into()))?;
    if let Some(image) = kept.as_ref() {
        return Ok(image.clone());
    }
    let split = image::split(&guest::wasm().map_err(EngineError::Compile)?)?;
    let hash = blake3::hash(&split.image);
    let image = Image::load(&image::images_dir(), &hash, move || Ok(split.image))?;
    *kept = Some(image.clone());
    Ok(image)
}

/// The guest's code (the built-in guest split from its memory, see `image`) compiled for
/// `engine`: mapped from the cache folder if this user's filerouter compiled it there before
/// (`guest-<guest hash>-<engine settings>-<checksum>.cwasm`, checked by
/// `checked_code::load_named`), else compiled now and kept there.
fn load_component(engine: &Engine) -> Result<Component, EngineError> {
    let stem = checked_code::stem("guest", &guest::SHA256[..32], engine);
    let compile = || {
        eprintln!(
            "filerouter: compiling the sandbox guest for this machine (first start only, a few seconds)..."
        );
        let code = image::split(&guest::wasm()?)
            .map_err(|e| e.to_string())?
            .code;
        let compiled = engine
            .precompile_component(&code)
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
            crate::scheduler::prompt_thread_started();
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
    fn the_built_in_guest_splits_into_code_and_its_static_data() {
        let wasm = guest::wasm().unwrap();
        let split = image::split(&wasm).unwrap();
        assert!(split.code.len() < wasm.len() / 2, "{}", split.code.len());
        assert!(split.image.len() > 16 << 20, "{}", split.image.len());
        assert_eq!(split.image.len() % image::WASM_PAGE, 0);
    }
}
