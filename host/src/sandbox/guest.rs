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
