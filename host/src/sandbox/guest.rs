//! The guest component that `build.rs` made from `guest-python/` and `wit/`, and the meaning
//! of its traps.

use super::{Limits, SandboxError};
use crate::scheduler::{Budget, Limit, Overrun};

/// The guest component, zstd-compressed, as `build.rs` produced it.
pub const COMPRESSED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/guest.wasm.zst"));

/// SHA-256 of the uncompressed guest component.
pub const SHA256: &str = env!("FILEROUTER_GUEST_SHA256");

/// The guest component, uncompressed.
pub fn wasm() -> Result<Vec<u8>, String> {
    zstd::decode_all(COMPRESSED).map_err(|e| format!("decompress the built-in guest: {e}"))
}

/// Turn a wasmtime error from a guest call into the sandbox error it stands for.
/// `memory_refused` says whether the memory limiter refused a grow during the call: only then
/// is the memory cap blamed. `budget` says which time limit an interrupt enforced.
pub fn classify_trap(
    error: wasmtime::Error,
    limits: &Limits,
    budget: &Budget,
    memory_refused: bool,
) -> SandboxError {
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return SandboxError::Exited(exit.0);
    }
    let reason = match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => {
            // Not tripped by the budget: a plugin reached the wall-clock deadline of its store.
            return SandboxError::Timeout(budget.overrun().unwrap_or(Overrun {
                limit: Limit::Wall,
                allowed: limits.wall,
                used: limits.wall,
            }));
        }
        Some(wasmtime::Trap::StackOverflow) if !memory_refused => {
            return SandboxError::StackExhausted(wasmtime::Trap::StackOverflow.to_string());
        }
        Some(trap) => trap.to_string(),
        None => format!("{error:#}"),
    };
    if memory_refused {
        SandboxError::MemoryCap(format!(
            "{reason} (after a memory grow past the cap of {} MiB was refused)",
            limits.memory_bytes / (1024 * 1024)
        ))
    } else {
        SandboxError::Trap(reason)
    }
}

#[cfg(test)]
mod tests {
    /// What build.rs shipped is the statically linked guest: a handful of module
    /// instantiations instead of fourteen, a function table of the code module's own that
    /// wasmtime fills lazily (every segment at a constant offset) instead of thousands of
    /// entries written into an imported table at every instantiation, and no code that can
    /// write a table, so no request can leave a table entry for a later one to find.
    #[test]
    fn the_shipped_guest_is_statically_linked_with_a_lazily_filled_table() {
        let wasm = super::wasm().expect("the built-in guest decompresses");
        let shape = filerouter_guest_link::Shape::of(&wasm).expect("the guest parses");
        assert!(shape.instantiations <= 6, "{shape:?}");
        assert!(shape.core_imports < 400, "{shape:?}");
        assert!(shape.eager_table_entries < 200, "{shape:?}");
        assert!(shape.lazy_table_entries > 5_000, "{shape:?}");
        assert_eq!(shape.modules_writing_tables, 0, "{shape:?}");
    }
}
