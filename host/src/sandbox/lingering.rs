//! The calls that go on after their response was sent (background tasks, streamed bodies,
//! WebSockets): counted, so that a stopping server can wait for them within its drain time,
//! and, for those whose client can go away, given a short grace to end before they are dropped.
//!
//! Not here: what those calls do or how they end (`super::background`, `super::stream`,
//! `super::socket`).

use std::{
    future::Future,
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

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

/// How long a call whose client went away (a stream's, a socket's: gone, idle, shutdown) may
/// take to end on its own (its `finally`) before it is dropped with its instance.
pub const DISCONNECT_GRACE: Duration = Duration::from_secs(1);

/// `call`'s outcome; when `over` resolves first (its client went away), the outcome only if
/// the call ends within [`DISCONNECT_GRACE`] after that, else None (the caller drops it).
pub async fn end_or_grace<F: Future + Unpin>(
    call: &mut F,
    over: impl Future<Output = ()>,
) -> Option<F::Output> {
    tokio::select! {
        outcome = &mut *call => Some(outcome),
        () = over => {
            tokio::select! {
                outcome = &mut *call => Some(outcome),
                () = tokio::time::sleep(DISCONNECT_GRACE) => None,
            }
        }
    }
}
