//! Per-call limits of the sandbox: memory cap, time limit, request body size; and the memory
//! limiter that enforces the cap and remembers whether it had to.

use std::time::Duration;

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// The limits one call into the guest runs under (DECISIONS.md, "Sandbox guarantees").
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// The most linear memory one instance may grow to.
    pub memory_bytes: usize,
    /// The longest one call may run, on the wall clock.
    pub timeout: Duration,
    /// The largest request body the host accepts (larger bodies get 413).
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 256 * 1024 * 1024,
            timeout: Duration::from_secs(30),
            max_body_bytes: 10 * 1024 * 1024,
        }
    }
}

/// The memory limiter of one call: wasmtime's [`StoreLimits`], remembering whether it refused
/// a memory grow, so that a trap can be blamed on the memory cap only when the cap was hit.
pub struct MemoryLimiter {
    limits: StoreLimits,
    refused: bool,
}

impl MemoryLimiter {
    pub fn new(memory_bytes: usize) -> Self {
        Self {
            limits: StoreLimitsBuilder::new()
                .memory_size(memory_bytes)
                .trap_on_grow_failure(false)
                .build(),
            refused: false,
        }
    }

    /// Whether a memory grow was refused during the call.
    pub fn refused(&self) -> bool {
        self.refused
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.refused = true;
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}
