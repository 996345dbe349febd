//! Counting the calls that go on after their response was sent (background tasks, streamed
//! bodies), so that a stopping server can wait for them within its drain time.
//!
//! Not here: what those calls do or how they end (`super::background`, `super::stream`).

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// One kind of lingering call, counted process-wide (a `static`).
pub struct Lingering {
    running: AtomicUsize,
    /// Woken whenever `running` drops to zero.
    idle: Notify,
}

impl Lingering {
    pub const fn new() -> Self {
        Lingering {
            running: AtomicUsize::new(0),
            idle: Notify::const_new(),
        }
    }

    /// How many such calls are running now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Resolves once none is running (at once if none is).
    pub async fn drained(&self) {
        loop {
            let idle = self.idle.notified();
            if self.running() == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Count one call for as long as the guard lives, however its task ends.
    pub fn enter(&'static self) -> Entered {
        self.running.fetch_add(1, Ordering::SeqCst);
        Entered(self)
    }
}

/// A call counted in its [`Lingering`] until dropped.
pub struct Entered(&'static Lingering);

impl Drop for Entered {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
