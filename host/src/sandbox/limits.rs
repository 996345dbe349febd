//! Per-call limits of the sandbox: memory cap, time limit, request body size.

use std::time::Duration;

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
