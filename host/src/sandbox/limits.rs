//! Per-call limits of the sandbox: memory cap, CPU time, wall-clock cap, request body size;
//! and the memory limiter that enforces the cap (shared by a request's route and plugin
//! instances) and remembers whether it had to.

use std::time::Duration;

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use wasmtime::ResourceLimiter;

use crate::scheduler::TimeLimits;

/// The limits one call into the guest runs under (DECISIONS.md, "Sandbox guarantees").
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// The most linear memory one instance may grow to.
    pub memory_bytes: usize,
    /// The CPU time one call may use (`sandbox.cpu_ms`); time spent waiting is not counted.
    pub cpu: Duration,
    /// The wall-clock time one call may take (`sandbox.wall_s`): its CPU time plus the time it
    /// is blocked in host calls; time spent queued or waiting for a thread is not counted.
    pub wall: Duration,
    /// The largest request body the host accepts (larger bodies get 413).
    pub max_body_bytes: usize,
}

impl Limits {
    /// The time limits, as the scheduler enforces them.
    pub fn time(&self) -> TimeLimits {
        TimeLimits {
            cpu: self.cpu,
            wall: self.wall,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 256 * 1024 * 1024,
            cpu: Duration::from_secs(30),
            wall: Duration::from_secs(30),
            max_body_bytes: 10 * 1024 * 1024,
        }
    }
}

/// The memory limiter of one instance, drawing on its request's memory cap: the route guest's
/// instance and those of the plugins it calls share one budget (`share`), so a request cannot
/// exceed the cap by spreading memory over plugins. A growth past the cap is refused (the
/// guest sees `memory.grow` fail: Python raises `MemoryError`), and the limiter remembers it,
/// so that a trap can be blamed on the memory cap only when the cap was hit.
pub struct MemoryLimiter {
    cap: usize,
    /// Bytes of linear memory held by all of the request's instances.
    used: Arc<AtomicUsize>,
    /// Bytes held by this instance, given back to the budget when it is dropped.
    mine: usize,
    refused: bool,
}

impl MemoryLimiter {
    /// The limiter of a request's first instance, with a cap of `memory_bytes`.
    pub fn new(memory_bytes: usize) -> Self {
        Self {
            cap: memory_bytes,
            used: Arc::default(),
            mine: 0,
            refused: false,
        }
    }

    /// A limiter for another instance of the same request, drawing on the same budget.
    pub fn share(&self) -> Self {
        Self {
            cap: self.cap,
            used: self.used.clone(),
            mine: 0,
            refused: false,
        }
    }

    /// The request's cap, in bytes.
    pub fn cap(&self) -> usize {
        self.cap
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
        let delta = desired.saturating_sub(current);
        let granted = maximum.is_none_or(|max| desired <= max)
            && self
                .used
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                    used.checked_add(delta).filter(|total| *total <= self.cap)
                })
                .is_ok();
        if granted {
            self.mine += delta;
        } else {
            self.refused = true;
        }
        Ok(granted)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.refused = true;
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(maximum.is_none_or(|max| desired <= max))
    }
}

impl Drop for MemoryLimiter {
    fn drop(&mut self) {
        self.used.fetch_sub(self.mine, Ordering::SeqCst);
    }
}
