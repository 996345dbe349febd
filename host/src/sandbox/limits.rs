//! The memory limiter that enforces a call's memory cap (from the [`crate::config::Limits`] of
//! the project or tenant), shared by a request's route and plugin instances, and remembers
//! whether it had to. For a guest instance it also announces the project's memory image to the
//! engine's memory slots (`slots`) as wasmtime asks it to grant the new memory.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use wasmtime::ResourceLimiter;

use super::{image::Image, slots};

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
    /// The project's memory image, for a guest instance's limiter (see [`MemoryLimiter::for_guest`]).
    image: Option<Arc<Image>>,
    /// Told where the guest instance's memory is, for a live snapshot ([`MemoryLimiter::watched`]).
    watch: Option<Arc<slots::MemoryWatch>>,
}

impl MemoryLimiter {
    /// The limiter of a request's first instance, with a cap of `memory_bytes`.
    pub fn new(memory_bytes: usize) -> Self {
        Self {
            cap: memory_bytes,
            used: Arc::default(),
            mine: 0,
            refused: false,
            image: None,
            watch: None,
        }
    }

    /// The limiter of a request's guest instance, whose memory starts as `image`: the image
    /// counts against the cap from the start, and is announced to the memory slots when
    /// wasmtime creates the memory.
    pub fn for_guest(memory_bytes: usize, image: Arc<Image>) -> Self {
        let mut limiter = Self::new(memory_bytes);
        limiter.image = Some(image);
        limiter
    }

    /// A limiter for another instance of the same request, drawing on the same budget.
    pub fn share(&self) -> Self {
        Self {
            cap: self.cap,
            used: self.used.clone(),
            mine: 0,
            refused: false,
            image: None,
            watch: None,
        }
    }

    /// This guest instance's limiter, with `watch` told where its memory is once it is made.
    pub fn watched(mut self, watch: Arc<slots::MemoryWatch>) -> Self {
        self.watch = Some(watch);
        self
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
        // A new memory (wasmtime asks for it from 0 bytes): it will start as the image.
        let mut desired = desired;
        if current == 0
            && let Some(image) = &self.image
        {
            desired = desired.max(image.size());
            slots::announce(image, self.watch.as_ref());
        }
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
