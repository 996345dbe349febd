//! The wasmtime engine plugins run on: one per process, apart from the route guest's.
//!
//! Plugins get an engine of their own so that their instances never take a slot of the guest's
//! instance pool (a request with a plugin call holds two instances at once) and so that their
//! compiled code does not depend on the guest's pool settings. Instances are allocated on
//! demand: a plugin is small next to the Python guest, and most requests call none.
//! Compiled plugins are cached in the same folder as the compiled guest, by the component's
//! hash and the engine's settings (`crate::sandbox::artifacts`), and checked before every
//! mapping (`crate::sandbox::checked_code`). A build's plugins are not files: their native code
//! comes from the verified build cache, in memory ([`load_native`]).

use std::sync::OnceLock;

use wasmtime::{Config, Engine, OptLevel, component::Component};

use crate::sandbox::{artifacts::cache_dir, checked_code, engine::EPOCH_TICK};

/// The process's plugin engine, made (and its epoch ticker started) on first use.
pub fn shared() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .cranelift_opt_level(OptLevel::Speed);
        // The configuration is fixed and valid; wasmtime rejects only contradictory settings.
        let engine = Engine::new(&config).expect("the plugin engine's fixed configuration");
        start_epoch_ticker(&engine);
        engine
    })
}

/// Compile `wasm` to this machine's native code, in the form [`load_native`] reads (for the
/// build cache).
pub fn precompile(wasm: &[u8]) -> Result<Vec<u8>, String> {
    shared()
        .precompile_component(wasm)
        .map_err(|e| format!("{e:#}"))
}

/// A component from `native` (a build cache's precompiled code) if it fits this machine and
/// filerouter build, else compiled here from `wasm`.
pub fn load_native(native: &[u8], wasm: &[u8]) -> Result<Component, String> {
    let engine = shared();
    // SAFETY: `native` comes from a build cache whose checksum (and, if encrypted, its
    // authentication tag) was verified, written by `precompile` of a filerouter build; wasmtime
    // also checks its header against this engine and refuses a mismatch.
    match unsafe { Component::deserialize(engine, native) } {
        Ok(component) => Ok(component),
        Err(e) => {
            tracing::debug!("a cached plugin's native code does not fit here: {e:#}");
            Component::new(engine, wasm).map_err(|e| format!("{e:#}"))
        }
    }
}

/// Compile `wasm`, or map its compiled form from the on-disk cache
/// (`plugin-<component hash>-<engine settings>-<checksum>.cwasm`), checked by
/// `crate::sandbox::checked_code::load_named` on every load: a file that this user's filerouter
/// did not write as it is is refused, removed and compiled again.
pub fn compile_cached(wasm: &[u8]) -> Result<Component, String> {
    let engine = shared();
    let stem = checked_code::stem("plugin", &blake3::hash(wasm).to_hex()[..32], engine);
    let compile = || {
        engine
            .precompile_component(wasm)
            .map_err(|e| format!("{e:#}"))
    };
    // Earlier versions of plugins, unused for a while, go when a new one is written.
    checked_code::load_named(engine, &cache_dir(), &stem, "plugin-", compile)
        .map(|(component, _)| component)
        .map_err(|e| e.to_string())
}

fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("filerouter-plugin-epoch".into())
        .spawn(move || {
            crate::scheduler::prompt_thread_started();
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        });
    if let Err(e) = spawned {
        tracing::error!("could not start the plugin epoch thread: {e}");
    }
}
