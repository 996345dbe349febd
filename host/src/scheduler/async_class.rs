//! The kernel scheduling class of the async threads, following what the guests run: the batch
//! class while every guest call is short, the normal class while one runs long.
//!
//! Under load on a machine with few cores, each request wakes an async thread twice (its bytes
//! arrive; its guest's answer is ready). In the normal class (`SCHED_OTHER`) each wake takes the
//! core from the running guest at once: about 3.4 context switches a request on 2 cores. In the
//! batch class (`SCHED_BATCH`) a woken thread is not run before the running guest blocks or its
//! time slice ends, and then handles everything that became ready meanwhile at once: about 1.2
//! switches a request, and a tenth less CPU for a trivial one (`bench/README.md`). It keeps its
//! fair share of the CPU; only the preemption on wake-up goes. But while a guest burns CPU for
//! one tenant, another tenant's light request would wait for that guest's slice before its bytes
//! were even read (`bench/neighbours.sh`: p50 4.0 ms instead of 1.0).
//!
//! So the class follows the calls. The async threads start in the batch class; the first epoch
//! tick that finds a guest call past [`LONG_CALL`] of CPU ([`super::Budget::tick`]) puts them in
//! the normal class, and they go back once no call has been seen past it for [`CALM`] (checked
//! as guest calls end, so an idle server makes no system call for it). A light request then
//! waits at most about [`LONG_CALL`] plus one epoch tick for a guest that has just started to
//! burn CPU, once, and not at all while one keeps burning. Threads that must run as soon as they
//! wake (guest threads, epoch tickers, database threads) take the normal class for themselves
//! ([`prompt_thread_started`]), since a thread inherits its creator's class.
//!
//! A kernel that refuses a change leaves the thread as it was: a matter of speed only.
//!
//! Not here: which call runs on which thread (`threads`), what a call may use (`budget`).

use std::{
    sync::{
        LazyLock, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

/// A guest call that has used this much CPU at an epoch tick runs long: the async threads
/// go to the normal class, so that other requests are read and answered beside it.
pub const LONG_CALL: Duration = Duration::from_millis(2);

/// How long no call must have been seen running long before the async threads go back to
/// the batch class.
pub const CALM: Duration = Duration::from_secs(1);

/// The async threads, by thread id. A switch changes [`BATCH`] under this lock, so a thread
/// that starts during a switch gets the class the switch ends in.
static ASYNC_THREADS: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());

/// Whether the async threads are in the batch class now.
static BATCH: AtomicBool = AtomicBool::new(true);

/// When a long call was last seen, in milliseconds since [`START`].
static LONG_SEEN_MS: AtomicU64 = AtomicU64::new(0);

static START: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Called on each async thread (and each of Tokio's blocking threads) as it starts: it joins
/// the async threads, in their class of the moment.
pub fn async_thread_started() {
    // SAFETY: gettid has no preconditions.
    let id = unsafe { libc::gettid() };
    if let Ok(mut threads) = ASYNC_THREADS.lock() {
        set_class(0, BATCH.load(Relaxed));
        threads.push(id);
    }
}

/// Called on each async thread as it stops: its id may be given to another thread.
pub fn async_thread_stopped() {
    // SAFETY: gettid has no preconditions.
    let id = unsafe { libc::gettid() };
    if let Ok(mut threads) = ASYNC_THREADS.lock() {
        threads.retain(|&known| known != id);
    }
}

/// Called on each thread that must run as soon as it wakes (the guest threads, the epoch
/// tickers, database threads) as it starts: the normal class, whatever its creator's.
pub fn prompt_thread_started() {
    set_class(0, false);
}

/// A guest call has used `cpu` so far, seen at an epoch tick.
pub(super) fn call_seen(cpu: Duration) {
    if cpu < LONG_CALL {
        return;
    }
    LONG_SEEN_MS.store(now_ms(), Relaxed);
    if BATCH.load(Relaxed) {
        switch(false);
    }
}

/// A guest call has ended or given up its thread: back to the batch class once it is calm.
pub(super) fn call_ended() {
    if BATCH.load(Relaxed) {
        return;
    }
    let since = now_ms().saturating_sub(LONG_SEEN_MS.load(Relaxed));
    if since >= CALM.as_millis() as u64 {
        switch(true);
    }
}

fn switch(batch: bool) {
    let Ok(threads) = ASYNC_THREADS.lock() else {
        return;
    };
    if BATCH.load(Relaxed) == batch {
        return;
    }
    for &id in threads.iter() {
        set_class(id, batch);
    }
    BATCH.store(batch, Relaxed);
    tracing::trace!(batch, "async threads changed scheduling class");
}

fn now_ms() -> u64 {
    START.elapsed().as_millis() as u64
}

/// Put thread `id` (0: the calling one) in the batch class or the normal one.
fn set_class(id: libc::pid_t, batch: bool) {
    let policy = if batch {
        libc::SCHED_BATCH
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; an id that names no thread only fails.
    let _ = unsafe { libc::sched_setscheduler(id, policy, &param) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_batch_class() -> bool {
        BATCH.load(Relaxed)
    }

    /// The calling thread's policy.
    fn policy() -> libc::c_int {
        // SAFETY: 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn the_class_follows_long_calls_and_calm() {
        // One test for the process-wide state: the steps depend on each other.
        std::thread::spawn(|| {
            async_thread_started();
            assert_eq!(policy(), libc::SCHED_BATCH);
            call_seen(LONG_CALL / 2);
            assert!(in_batch_class(), "a short call changes nothing");
            call_seen(LONG_CALL);
            assert!(!in_batch_class());
            assert_eq!(
                policy(),
                libc::SCHED_OTHER,
                "the registered thread was switched"
            );
            call_ended();
            assert!(!in_batch_class(), "not calm yet");
            // Calm: the last long call seen longer ago than CALM.
            LONG_SEEN_MS.store(1, Relaxed);
            std::thread::sleep(Duration::from_millis(2) + CALM.saturating_sub(START.elapsed()));
            call_ended();
            assert!(in_batch_class());
            assert_eq!(policy(), libc::SCHED_BATCH);
            async_thread_stopped();
            prompt_thread_started();
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
