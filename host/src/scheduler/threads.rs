//! The guest threads: one per core, each running admitted guest calls one poll at a time.
//!
//! A call runs on one of these threads, not on the async threads that accept connections
//! and read requests, so CPU-bound guests never slow those down. When a thread is free it
//! takes the ready call whose queue has used the least CPU (FIFO within a queue), and runs
//! it until it completes or waits on the host (a timer, say). The only other way a guest
//! gives up its thread is [`super::Budget::tick`] answering [`super::Verdict::Yield`]: a
//! call of another queue that used less CPU is waiting. Each poll is timed with the
//! thread's CPU clock ([`super::budget::Meter`]). So that such a call need not wait for the
//! next regular tick, a call that becomes ready while every thread is busy fires the
//! [`Threads::set_nudge`] hook (the sandbox advances its engine's epoch), and the running guests
//! ask their budget at once.
//!
//! The threads enter the Tokio runtime the scheduler was made in, so guest timers and
//! blocking work use it. They stop when the scheduler is dropped.

use std::{
    future::Future,
    panic::AssertUnwindSafe,
    pin::Pin,
    sync::{
        Arc, Condvar, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
    time::Duration,
};

use super::{QueueShared, WAKE_CREDIT, budget::Meter};

type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How much more CPU a queue must have used than a waiting one before its guest yields.
const SLICE: Duration = Duration::from_millis(5);

const IDLE: u8 = 0;
const SCHEDULED: u8 = 1;
const RUNNING: u8 = 2;
const NOTIFIED: u8 = 4;
const DONE: u8 = 8;

pub(crate) struct Threads {
    ready: Mutex<Vec<Arc<Task>>>,
    ready_count: AtomicUsize,
    signal: Condvar,
    closed: AtomicBool,
    /// Threads waiting for work.
    idle: AtomicUsize,
    /// Makes running guests check their budget now (see [`Threads::set_nudge`]).
    nudge: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The queue each thread is running a call of now (by thread number).
    running: Mutex<Vec<Option<Arc<QueueShared>>>>,
    /// The CPU clock: the smallest account among the queues that want a thread (running or
    /// ready), never going back. A call that becomes ready starts its queue from it, less the
    /// wake credit (see [`Threads::push`]).
    clock: AtomicU64,
}

/// One admitted call: its future, its meter, and where it is in its life.
pub(crate) struct Task {
    work: Mutex<Option<Work>>,
    state: AtomicU8,
    cancelled: AtomicBool,
    meter: Arc<Meter>,
    /// Admission order: FIFO among calls of one queue.
    seq: u64,
    threads: Arc<Threads>,
}

impl Threads {
    /// Start `count` guest threads inside the current Tokio runtime, if any.
    pub(crate) fn start(count: usize) -> Arc<Threads> {
        let threads = Arc::new(Threads {
            ready: Mutex::new(Vec::new()),
            ready_count: AtomicUsize::new(0),
            signal: Condvar::new(),
            closed: AtomicBool::new(false),
            idle: AtomicUsize::new(0),
            nudge: OnceLock::new(),
            running: Mutex::new(vec![None; count.max(1)]),
            clock: AtomicU64::new(0),
        });
        let runtime = tokio::runtime::Handle::try_current().ok();
        for n in 0..count.max(1) {
            let threads = threads.clone();
            let runtime = runtime.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("filerouter-guest-{n}"))
                .spawn(move || {
                    let _entered = runtime.as_ref().map(|r| r.enter());
                    super::prompt_thread_started();
                    threads.work(n);
                });
            if let Err(e) = spawned {
                tracing::error!("could not start a guest thread: {e}");
            }
        }
        threads
    }

    /// Set what makes running guests check their budget at once (the first setting stays).
    pub(crate) fn set_nudge(&self, nudge: Box<dyn Fn() + Send + Sync>) {
        let _ = self.nudge.set(nudge);
    }

    /// Stop the threads once they finish what they are polling; drop the waiting calls.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let waiting = match self.ready.lock() {
            Ok(mut ready) => std::mem::take(&mut *ready),
            Err(_) => Vec::new(),
        };
        self.signal.notify_all();
        drop(waiting);
    }

    /// Run `work` for the call measured by `meter`.
    pub(crate) fn spawn(
        self: &Arc<Self>,
        meter: Arc<Meter>,
        seq: u64,
        work: impl Future<Output = ()> + Send + 'static,
    ) -> Arc<Task> {
        let task = Arc::new(Task {
            work: Mutex::new(Some(Box::pin(work))),
            state: AtomicU8::new(SCHEDULED),
            cancelled: AtomicBool::new(false),
            meter,
            seq,
            threads: self.clone(),
        });
        self.push(task.clone());
        task
    }

    /// Make `task` ready to run. Its queue's account is first raised to the CPU clock less
    /// the wake credit: a queue whose calls waited on the host (asleep, or blocked on a
    /// database) while others used the threads banks no CPU credit by it, just as an idle
    /// queue banks none (see the scheduler's virtual clock), so a tenant cannot sleep its way
    /// to the front and then hold the threads with CPU-bound calls.
    fn push(&self, task: Arc<Task>) {
        task.meter.mark_ready();
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(mut ready) = self.ready.lock() {
            let clock = self.advance_clock(&ready);
            if clock > 0 {
                let floor = clock.saturating_sub(WAKE_CREDIT.as_nanos() as u64);
                task.meter.queue().vtime.fetch_max(floor, Ordering::Relaxed);
            }
            ready.push(task);
            self.ready_count.fetch_add(1, Ordering::SeqCst);
        }
        // A thread counts itself idle under the ready list's lock before it waits, and the
        // wait lets go of the lock and sleeps as one step: a thread not counted here has yet
        // to look at the list and will find this call. So a busy pool is not woken (a system
        // call per call, under load).
        if self.idle.load(Ordering::SeqCst) > 0 {
            self.signal.notify_one();
        } else if let Some(nudge) = self.nudge.get() {
            // No thread free: the running guests decide now whether this call goes first.
            nudge();
        }
    }

    /// Move the CPU clock up to the smallest account among the queues with a call ready (in
    /// `ready`) or running on a thread; it never goes back. Returns it.
    fn advance_clock(&self, ready: &[Arc<Task>]) -> u64 {
        let running = self.running.lock().map(|r| {
            r.iter()
                .flatten()
                .map(|q| q.vtime())
                .min()
                .unwrap_or(u64::MAX)
        });
        let least = ready
            .iter()
            .map(|t| t.meter.queue().vtime())
            .min()
            .unwrap_or(u64::MAX)
            .min(running.unwrap_or(u64::MAX));
        if least == u64::MAX {
            return self.clock.load(Ordering::Relaxed);
        }
        self.clock.fetch_max(least, Ordering::Relaxed).max(least)
    }

    /// The ready call whose queue used the least CPU; the oldest of that queue. It is marked
    /// as thread `n`'s before the ready list is let go, so the CPU clock always sees it.
    fn next(&self, n: usize) -> Option<Arc<Task>> {
        let mut ready = self.ready.lock().ok()?;
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return None;
            }
            if !ready.is_empty() {
                break;
            }
            self.idle.fetch_add(1, Ordering::SeqCst);
            let woken = self.signal.wait(ready);
            self.idle.fetch_sub(1, Ordering::SeqCst);
            ready = woken.ok()?;
        }
        let best = ready
            .iter()
            .enumerate()
            .min_by_key(|(_, t)| (t.meter.queue().vtime(), t.seq))
            .map(|(i, _)| i)?;
        self.ready_count.fetch_sub(1, Ordering::SeqCst);
        let task = ready.swap_remove(best);
        self.set_running(n, Some(task.meter.queue().clone()));
        Some(task)
    }

    /// Whether a call of another queue, one that used clearly less CPU than `mine`, is
    /// waiting for a thread.
    pub(crate) fn someone_poorer_waits(&self, mine: &Arc<QueueShared>) -> bool {
        if self.ready_count.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let Ok(ready) = self.ready.lock() else {
            return false;
        };
        let threshold = mine.vtime().saturating_sub(SLICE.as_nanos() as u64);
        ready
            .iter()
            .any(|t| !Arc::ptr_eq(t.meter.queue(), mine) && t.meter.queue().vtime() < threshold)
    }

    fn work(&self, n: usize) {
        while let Some(task) = self.next(n) {
            task.run();
            self.set_running(n, None);
            super::async_class::call_ended();
        }
    }

    fn set_running(&self, n: usize, queue: Option<Arc<QueueShared>>) {
        if let Ok(mut running) = self.running.lock()
            && let Some(slot) = running.get_mut(n)
        {
            *slot = queue;
        }
    }
}

impl Task {
    fn run(self: Arc<Self>) {
        self.state.store(RUNNING, Ordering::SeqCst);
        let Ok(mut slot) = self.work.lock() else {
            return;
        };
        if self.cancelled.load(Ordering::SeqCst) {
            self.state.store(DONE, Ordering::SeqCst);
            let work = slot.take();
            drop(slot);
            drop(work);
            return;
        }
        let Some(work) = slot.as_mut() else {
            self.state.store(DONE, Ordering::SeqCst);
            return;
        };
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        self.meter.poll_started();
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(&mut cx)));
        self.meter.poll_ended();
        match polled {
            Ok(Poll::Pending) => {}
            Ok(Poll::Ready(())) | Err(_) => {
                if polled.is_err() {
                    tracing::error!("a guest call panicked; its request gets an error");
                }
                self.state.store(DONE, Ordering::SeqCst);
                let work = slot.take();
                drop(slot);
                drop(work);
                return;
            }
        }
        drop(slot);
        // Woken while it ran (a yield, or a host call that finished at once): queue it again.
        if let Err(state) =
            self.state
                .compare_exchange(RUNNING, IDLE, Ordering::SeqCst, Ordering::SeqCst)
            && state & NOTIFIED != 0
        {
            self.state.store(SCHEDULED, Ordering::SeqCst);
            self.threads.push(self.clone());
        }
    }

    fn schedule(self: &Arc<Self>) {
        let mut state = self.state.load(Ordering::SeqCst);
        loop {
            if state & (SCHEDULED | NOTIFIED | DONE) != 0 {
                return;
            }
            let next = if state & RUNNING != 0 {
                state | NOTIFIED
            } else {
                SCHEDULED
            };
            match self
                .state
                .compare_exchange(state, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    if next == SCHEDULED {
                        self.threads.push(self.clone());
                    }
                    return;
                }
                Err(actual) => state = actual,
            }
        }
    }

    /// Drop the call at the next chance (it is stopped where it waits, or after its poll).
    pub(crate) fn cancel(self: &Arc<Self>) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.schedule();
    }
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.schedule();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.schedule();
    }
}
