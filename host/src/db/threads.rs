//! The threads SQLite runs on: route code's statements, the host's migrations and kv, and the
//! connections' roll-backs when a request ends. (Route code's reads that cannot wait run on
//! the guest's own thread instead: `crate::db::sqlite::Connection::execute_here` says when.)
//!
//! SQLite blocks (on disk, on another writer's lock) and recurses (a `LIKE` pattern is matched
//! by a recursive function, one level per `%`; expressions, JSON and the parser recurse by
//! nesting), so it runs here rather than on an async thread: on threads of
//! its own with a large stack ([`STACK_BYTES`], reserved address space, only the pages a
//! recursion touches are ever backed by memory), so that no statement within SQLite's limits
//! (`crate::db::sqlite` sets them) can overflow a stack and abort the process.
//!
//! A statement that has used more than [`HEAVY_AFTER`] of CPU is *heavy*: its thread lowers
//! itself to the idle scheduling class for the rest of the job, so the CPU it takes is only
//! what no guest, async or light SQL thread wants, and a neighbour's requests are not slowed by
//! it. A thread that cannot return to normal priority afterwards (that needs `CAP_SYS_NICE`)
//! ends after its job; the pool starts another when one is needed.
//!
//! Not here: what a statement may do or how long it may run (`crate::db::sqlite` and its
//! guard), or the async runtime's own blocking pool, which SQLite no longer uses.

use std::{
    cell::Cell,
    collections::VecDeque,
    sync::{Condvar, Mutex, OnceLock},
    time::Duration,
};

use crate::scheduler::thread_cpu_ns;

/// Each database thread's stack: address space reserved, touched only as deep as a job goes.
pub const STACK_BYTES: usize = 32 * 1024 * 1024;

/// CPU a job may use at normal priority; past it the thread runs in the idle class.
pub const HEAVY_AFTER: Duration = Duration::from_millis(20);

/// At most this many database threads at once; further jobs wait in the queue.
const MAX_THREADS: usize = 512;

/// An idle thread ends after this long without a job.
const IDLE_FOR: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    idle: usize,
    threads: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
    })
}

/// Why a job did not give its answer.
#[derive(Debug, thiserror::Error)]
pub enum ThreadError {
    #[error("the database thread could not be started: {0}")]
    Spawn(std::io::Error),
    #[error("the database thread failed while running the statement")]
    Panicked,
}

/// Run `job` on a database thread and wait for its answer without blocking the caller's
/// thread.
pub async fn run<T, F>(job: F) -> Result<T, ThreadError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (send, answer) = tokio::sync::oneshot::channel();
    submit(Box::new(move || {
        let _ = send.send(job());
    }))?;
    // A job that panicked dropped its sender.
    answer.await.map_err(|_| ThreadError::Panicked)
}

/// Run `job` on a database thread and block the calling thread until it is done (for callers
/// that are not async: tests, the fuzz targets).
pub fn run_blocking<T, F>(job: F) -> Result<T, ThreadError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (send, answer) = std::sync::mpsc::sync_channel(1);
    submit(Box::new(move || {
        let _ = send.send(job());
    }))?;
    answer.recv().map_err(|_| ThreadError::Panicked)
}

/// Run `job` on a database thread and do not wait for it.
pub fn spawn(job: impl FnOnce() + Send + 'static) {
    // Only a failure to start a thread when none runs is lost; it is logged.
    if let Err(e) = submit(Box::new(job)) {
        tracing::warn!("{e}: a connection is closed without its roll-back being waited for");
    }
}

fn submit(job: Job) -> Result<(), ThreadError> {
    let pool = pool();
    let mut state = pool.state.lock().unwrap_or_else(|e| e.into_inner());
    state.queue.push_back(job);
    if state.idle >= state.queue.len() || state.threads >= MAX_THREADS {
        pool.wake.notify_one();
        return Ok(());
    }
    state.threads += 1;
    drop(state);
    if let Err(e) = start_thread() {
        let mut state = pool.state.lock().unwrap_or_else(|e| e.into_inner());
        state.threads -= 1;
        // With no thread at all the job would wait for ever: take it back.
        if state.threads == 0 {
            state.queue.pop_back();
            return Err(ThreadError::Spawn(e));
        }
        pool.wake.notify_one();
    }
    Ok(())
}

/// Start one more database thread (the caller has counted it in `State::threads`).
fn start_thread() -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("filerouter-db".into())
        .stack_size(STACK_BYTES)
        .spawn(|| {
            // The normal class, whichever thread started this one (an async thread may be
            // in the batch class: `scheduler::async_thread_started`).
            set_idle_class(false);
            work()
        })
        .map(drop)
}

/// One database thread: jobs until it has been idle for [`IDLE_FOR`], or until a heavy job
/// left it at a priority it cannot leave.
fn work() {
    let pool = pool();
    loop {
        let job = {
            let mut state = pool.state.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(job) = state.queue.pop_front() {
                    break Some(job);
                }
                state.idle += 1;
                let (next, timeout) = pool
                    .wake
                    .wait_timeout(state, IDLE_FOR)
                    .unwrap_or_else(|e| e.into_inner());
                state = next;
                state.idle -= 1;
                if timeout.timed_out() && state.queue.is_empty() {
                    break None;
                }
            }
        };
        let Some(job) = job else { break };
        let now = thread_cpu_ns();
        JOB_STARTED_CPU.set(now);
        JOB_CHARGED_CPU.set(now);
        // A panic in a job must not take the thread's bookkeeping with it.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        if DEMOTED.get() && !restore_priority() {
            break;
        }
    }
    let mut state = pool.state.lock().unwrap_or_else(|e| e.into_inner());
    state.threads -= 1;
    // Jobs queued while this thread was leaving need a thread.
    if !state.queue.is_empty() && state.idle == 0 {
        state.threads += 1;
        drop(state);
        if start_thread().is_err() {
            pool.state.lock().unwrap_or_else(|e| e.into_inner()).threads -= 1;
        }
    }
}

thread_local! {
    /// The thread's CPU clock when its current job began.
    static JOB_STARTED_CPU: Cell<u64> = const { Cell::new(0) };
    /// The thread's CPU clock when [`take_cpu`] was last called in the current job.
    static JOB_CHARGED_CPU: Cell<u64> = const { Cell::new(0) };
    /// Whether the current job made its thread idle-class.
    static DEMOTED: Cell<bool> = const { Cell::new(false) };
}

/// CPU the current job has used on this thread (zero outside a database thread's job).
pub fn job_cpu() -> Duration {
    let started = JOB_STARTED_CPU.get();
    if started == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(thread_cpu_ns().saturating_sub(started))
}

/// CPU the current job has used since the last call (since it began, at the first), to be
/// charged to the request it works for; zero outside a database thread's job.
pub fn take_cpu() -> Duration {
    let charged = JOB_CHARGED_CPU.get();
    if charged == 0 {
        return Duration::ZERO;
    }
    let now = thread_cpu_ns();
    JOB_CHARGED_CPU.set(now);
    Duration::from_nanos(now.saturating_sub(charged))
}

/// Called as a job runs (SQLite's progress handler, the host's long functions): past
/// [`HEAVY_AFTER`] of CPU, the rest of the job runs in the idle scheduling class.
pub fn pace() {
    if DEMOTED.get() || job_cpu() < HEAVY_AFTER {
        return;
    }
    DEMOTED.set(true);
    set_idle_class(true);
}

/// Back to normal priority after a heavy job; false when the kernel refuses.
fn restore_priority() -> bool {
    let restored = set_idle_class(false);
    if restored {
        DEMOTED.set(false);
    }
    restored
}

/// Put this thread into (or take it out of) `SCHED_IDLE`.
fn set_idle_class(idle: bool) -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_on_threads_with_a_deep_stack() {
        fn depth(n: u32) -> u32 {
            let pad = std::hint::black_box([n as u8; 1024]);
            if n == 0 {
                pad[0] as u32
            } else {
                depth(n - 1) + 1
            }
        }
        // 16 MiB of frames: more than an async or blocking thread has (2 MiB).
        let got = run_blocking(|| depth(16 * 1024)).unwrap();
        assert_eq!(got, 16 * 1024);
    }

    #[test]
    fn a_panicking_job_is_an_error_and_the_pool_goes_on() {
        assert!(matches!(
            run_blocking(|| panic!("boom")),
            Err(ThreadError::Panicked)
        ));
        assert_eq!(run_blocking(|| 7).unwrap(), 7);
    }

    #[test]
    fn a_heavy_job_is_moved_to_the_idle_class_and_the_thread_comes_back_or_ends() {
        let (policy_during, cpu) = run_blocking(|| {
            while job_cpu() < HEAVY_AFTER + Duration::from_millis(5) {
                std::hint::black_box(0u64);
            }
            pace();
            // SAFETY: querying the calling thread's policy.
            (unsafe { libc::sched_getscheduler(0) }, job_cpu())
        })
        .unwrap();
        assert_eq!(policy_during, libc::SCHED_IDLE, "after {cpu:?} of CPU");
        // The next job never runs in the idle class, on whichever thread it gets.
        let policy_after = run_blocking(|| unsafe { libc::sched_getscheduler(0) }).unwrap();
        assert_eq!(policy_after, libc::SCHED_OTHER);
    }
}
