//! The guest component that `build.rs` made from `guest-python/` and `wit/`, and the meaning
//! of its traps.

use super::{Limits, SandboxError};

/// The guest component, zstd-compressed, as `build.rs` produced it.
pub const COMPRESSED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/guest.wasm.zst"));

/// SHA-256 of the uncompressed guest component.
pub const SHA256: &str = env!("FILEROUTER_GUEST_SHA256");

/// The guest component, uncompressed.
pub fn wasm() -> Result<Vec<u8>, String> {
    zstd::decode_all(COMPRESSED).map_err(|e| format!("decompress the built-in guest: {e}"))
}

/// Turn a wasmtime error from a guest call into the sandbox error it stands for.
pub fn classify_trap(error: wasmtime::Error, limits: &Limits) -> SandboxError {
    if let Some(trap) = error.downcast_ref::<wasmtime::Trap>() {
        if *trap == wasmtime::Trap::Interrupt {
            return SandboxError::Timeout(limits.timeout);
        }
        return SandboxError::Trap(format!(
            "{trap} (the memory cap is {} MiB)",
            limits.memory_bytes / (1024 * 1024)
        ));
    }
    SandboxError::Trap(format!("{error:#}"))
}
