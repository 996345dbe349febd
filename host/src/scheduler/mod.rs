//! The scheduler: which guest calls run now, which wait, which are turned away, and how
//! long each may run. Once per process.
//!
//! Three lifetimes, three types:
//!
//! - **Once per process**, a [`Scheduler`]: at most `workers` guest instances exist at once
//!   (the engine's permits and memory slots are sized to match), and they run on one guest thread per core,
//!   apart from the async threads that accept connections and read requests.
//! - **Once per tenant** (in `dev` and single-project `run`: once), a [`Queue`] from
//!   [`Scheduler::queue`], with its [`QueueConfig`]: how many of its calls may run at once
//!   (`concurrency`) and how many may wait (`capacity`, a bounded FIFO). A call that finds the
//!   queue full is [`Rejected`] at once; the server answers 503 with `Retry-After`.
//!   [`Queue::stats`] gives what an admin endpoint shows: CPU used, running, queued,
//!   rejected. [`Scheduler::tooling`] is the queue for the server's own calls into the guest
//!   (inspecting route files, evaluating `config.py`): same scheduler, unbounded, its own limits.
//! - **Once per call**, a [`Turn`] from [`Queue::turn`]: the right to run one instance.
//!   [`Turn::run`] runs the call's future on a guest thread under [`TimeLimits`] and gives
//!   the future a [`Budget`], which the sandbox's epoch callback asks at every tick
//!   ([`Budget::tick`]): continue, yield, or stop. The turn is given back when the call ends.
//!
//! ```ignore
//! let scheduler = Scheduler::new(scheduler::default_workers());         // per process
//! let queue = scheduler.queue("acme", QueueConfig { concurrency: 4, capacity: 64 }); // per tenant
//! let turn = queue.turn().await?;                       // waits in FIFO; Err(Rejected) when full
//! let answer = turn.run(limits, move |budget| async move {
//!     // make the Store; epoch callback: match budget.tick() { Continue, Yield, Stop }
//!     // on a trap after Stop, budget.overrun() says which limit and how much was used
//! }).await;                                             // Err(Stopped::Overrun) past the wall cap
//! ```
//!
//! **Fairness.** Each queue has an account of the CPU its calls used, charged as they run
//! (not when they end). When an instance is free, the waiting call of the queue with the
//! smallest account goes first (a queue that was idle starts from the scheduler's virtual clock,
//! the smallest active account, never going back, less 10 ms: idling banks no credit, and a
//! light tenant's request still counts as poorer than a busy tenant's at once); within a queue, strictly first in, first out.
//! Likewise for the threads: a call that becomes ready (admitted, or woken from a host call)
//! starts its queue from the smallest account among the queues using or waiting for a thread,
//! less the same 10 ms, so a queue whose calls slept in host calls while others computed banks
//! no credit by it either (else a tenant could sleep its way ahead, then hold the threads). A free guest
//! thread likewise takes the ready call of the poorest queue, and a running guest yields at
//! its next epoch tick when a call of a queue that used clearly less CPU (5 ms) is waiting for
//! a thread. Calls of one queue never preempt each other: they run to completion, giving up
//! the thread only while they wait on the host.
//!
//! **Reserve.** CPU fairness alone cannot help a queue that finds every instance held by calls
//! blocked in host calls (`time.sleep`, a slow database): those free nothing for seconds. So
//! the last few free instances go only to queues with nothing running, one for each such queue
//! up to a bound ([`Scheduler::set_reserve`]): a busy queue takes another instance only while
//! more are free than there are idle queues to keep them for. A tenant with nothing running
//! so finds an instance at once, whatever the busy ones hold, while no more tenants are idle
//! than the bound.
//!
//! **Time.** The CPU limit counts the CPU time the call actually ran (its thread's CPU clock,
//! read around every poll and at every epoch tick), never time spent queued or waiting for a
//! thread. The wall-clock limit is for guests blocked in host calls (`time.sleep(60)`); it
//! too leaves out time spent queued or waiting for a thread. So no call is stopped for time
//! it spent waiting.
//!
//! **The async threads' class.** While every guest call is short, the async threads are in
//! the kernel's batch class, so that waking one never takes the core from a running guest; a
//! call seen past 2 ms of CPU at an epoch tick puts them back in the normal class until calls
//! are short again (`async_class`).
//!
//! Not here: what a guest is or how it traps (`sandbox`), HTTP statuses (`router`), which
//! tenant a request belongs to (`tenants`).

mod async_class;
mod budget;
mod threads;

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use tokio::sync::oneshot;

use budget::Meter;
pub(crate) use budget::thread_cpu_ns;
pub use budget::{Budget, Limit, Overrun, TimeLimits, Verdict};
use threads::Threads;

pub use async_class::{async_thread_started, async_thread_stopped, prompt_thread_started};

/// Guest instances per core when nothing says otherwise: one running, one waiting on the host.
pub const WORKERS_PER_CORE: usize = 2;

/// The machine's cores (at least 1).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How many guest instances exist at once by default: [`WORKERS_PER_CORE`] per core.
pub fn default_workers() -> usize {
    cores() * WORKERS_PER_CORE
}

/// One queue's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// How many of its calls may run at once (also bounded by the scheduler's `workers`).
    pub concurrency: usize,
    /// How many of its calls may wait; one more is [`Rejected`]. 0: none wait.
    pub capacity: usize,
}

impl QueueConfig {
    /// No bound of its own: only the scheduler's `workers` limit it.
    pub const UNBOUNDED: QueueConfig = QueueConfig {
        concurrency: usize::MAX,
        capacity: usize::MAX,
    };
}

/// A queue's figures, for logs and the admin endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStats {
    pub name: String,
    pub config: QueueConfig,
    /// Calls running now.
    pub running: usize,
    /// Calls waiting now.
    pub queued: usize,
    /// Calls admitted since the queue was made.
    pub admitted: u64,
    /// Calls turned away because the queue was full.
    pub rejected: u64,
    /// CPU time its calls used.
    pub cpu: Duration,
}

/// A call turned away because its queue was full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many requests are waiting (try again in {}s)", retry_after.as_secs())]
pub struct Rejected {
    /// When trying again is likely to succeed: the queue's expected drain time, 1 to 60 s.
    pub retry_after: Duration,
}

/// Why [`Turn::run`] has no result from the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    /// It passed its wall-clock limit while blocked outside the guest's code.
    #[error("{0}")]
    Overrun(Overrun),
    /// It panicked, or the scheduler shut down.
    #[error("the call was lost (it panicked or the server is stopping)")]
    Lost,
}

/// Once per process: admits guest calls, runs them on the guest threads.
#[derive(Clone)]
pub struct Scheduler {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    threads: Arc<Threads>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.threads.close();
    }
}

struct State {
    /// How many instances may exist at once.
    workers: usize,
    /// How many of them only a queue with nothing running may take (see [`Scheduler::set_reserve`]).
    reserve: usize,
    running: usize,
    /// Admissions so far (FIFO order on the threads).
    seq: u64,
    next_id: u64,
    next_waiter: u64,
    queues: HashMap<u64, Entry>,
    /// The scheduler's virtual time: the smallest account among the active queues, never
    /// going back, and kept while none is active. A queue that wakes starts from it (less
    /// [`WAKE_CREDIT`]), so time spent idle banks no credit, whoever else ran meanwhile.
    clock: u64,
}

/// How far behind the virtual clock a waking queue starts: enough that a light tenant's
/// request is "clearly poorer" than a busy tenant's at once (and takes a thread at once),
/// too little to matter as banked credit.
const WAKE_CREDIT: Duration = Duration::from_millis(10);

struct Entry {
    shared: Arc<QueueShared>,
    config: QueueConfig,
    running: usize,
    waiters: VecDeque<Waiter>,
    admitted: u64,
    completed: u64,
    rejected: u64,
}

struct Waiter {
    id: u64,
    tx: oneshot::Sender<Turn>,
}

/// What a queue's running calls update without the scheduler's lock.
pub(crate) struct QueueShared {
    name: String,
    /// The fairness account: CPU used, raised to the virtual clock (less the wake credit) when
    /// the queue wakes.
    vtime: AtomicU64,
    /// CPU used, in nanoseconds.
    cpu: AtomicU64,
}

impl QueueShared {
    pub(crate) fn vtime(&self) -> u64 {
        self.vtime.load(Relaxed)
    }

    pub(crate) fn charge(&self, ns: u64) {
        self.vtime.fetch_add(ns, Relaxed);
        self.cpu.fetch_add(ns, Relaxed);
    }
}

/// The queue of the scheduler's own calls (route inspection, `config.py`).
const TOOLING: u64 = 0;

impl Scheduler {
    /// A scheduler for at most `workers` guest instances at once, with one guest thread per
    /// core. Make it inside the Tokio runtime the guests' timers should use.
    pub fn new(workers: usize) -> Scheduler {
        let mut queues = HashMap::new();
        queues.insert(TOOLING, Entry::new("filerouter", QueueConfig::UNBOUNDED));
        Scheduler {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    workers: workers.max(1),
                    reserve: 0,
                    running: 0,
                    seq: 0,
                    next_id: TOOLING + 1,
                    next_waiter: 0,
                    queues,
                    clock: 0,
                }),
                threads: Threads::start(cores()),
            }),
        }
    }

    /// A new queue (a tenant's); it is removed when its last handle is dropped.
    pub fn queue(&self, name: &str, config: QueueConfig) -> Queue {
        let mut state = self.shared.lock();
        let id = state.next_id;
        state.next_id += 1;
        let entry = Entry::new(name, config);
        let shared = entry.shared.clone();
        state.queues.insert(id, entry);
        Queue {
            handle: Arc::new(QueueHandle {
                id,
                scheduler: self.shared.clone(),
                shared,
            }),
        }
    }

    /// The queue of the server's own calls into the guest (route inspection, `config.py`).
    pub fn tooling(&self) -> Queue {
        let shared = self.shared.lock().queues[&TOOLING].shared.clone();
        Queue {
            handle: Arc::new(QueueHandle {
                id: TOOLING,
                scheduler: self.shared.clone(),
                shared,
            }),
        }
    }

    /// Give the scheduler a way to make running guests check their budget at once (the
    /// sandbox advances its engine's epoch): used when a call becomes ready while every guest
    /// thread is busy, so a call of a queue that used less CPU gets a thread within
    /// microseconds instead of at the next regular tick. The first setting stays.
    pub fn set_preemption(&self, nudge: impl Fn() + Send + Sync + 'static) {
        self.shared.threads.set_nudge(Box::new(nudge));
    }

    /// How many instances may exist at once.
    pub fn workers(&self) -> usize {
        self.shared.lock().workers
    }

    /// Change how many instances may exist at once (the engine must allow as many).
    pub fn set_workers(&self, workers: usize) {
        let mut state = self.shared.lock();
        state.workers = workers.max(1);
        state.dispatch(&self.shared);
    }

    /// Keep up to `reserve` free instances for queues with nothing running: one for each such
    /// queue, at most `reserve`, never all of them (0, the default, keeps none). A queue that
    /// has calls running takes another instance only while more than that are free; a queue
    /// with nothing running takes any free one. So whatever the busy queues do, a queue with
    /// nothing running finds an instance at once, as long as no more than `reserve` queues are
    /// idle (and all of them, if `reserve` is at least the number of queues and `workers`
    /// more). Meant for many tenants in one process; a single project has no neighbour.
    pub fn set_reserve(&self, reserve: usize) {
        let mut state = self.shared.lock();
        state.reserve = reserve;
        state.dispatch(&self.shared);
    }

    /// The bound given to [`Scheduler::set_reserve`].
    pub fn reserve_setting(&self) -> usize {
        self.shared.lock().reserve
    }

    /// How many instances are kept for queues with nothing running now.
    pub fn reserve(&self) -> usize {
        let state = self.shared.lock();
        state.reserve_now()
    }

    /// Instances running now, all queues together.
    pub fn running(&self) -> usize {
        self.shared.lock().running
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements; a panic elsewhere cannot break it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Entry {
    fn new(name: &str, config: QueueConfig) -> Entry {
        Entry {
            shared: Arc::new(QueueShared {
                name: name.to_string(),
                vtime: AtomicU64::new(0),
                cpu: AtomicU64::new(0),
            }),
            config,
            running: 0,
            waiters: VecDeque::new(),
            admitted: 0,
            completed: 0,
            rejected: 0,
        }
    }

    fn active(&self) -> bool {
        self.running > 0 || !self.waiters.is_empty()
    }

    fn retry_after(&self, workers: usize) -> Duration {
        let per_call = match self.completed {
            0 => Duration::from_millis(10),
            n => Duration::from_nanos(self.shared.cpu.load(Relaxed) / n),
        };
        let lanes = self.config.concurrency.min(workers).max(1) as u32;
        let backlog = (self.waiters.len() + self.running) as u32;
        let drain = per_call.saturating_mul(backlog) / lanes;
        Duration::from_secs(drain.as_secs_f64().ceil().clamp(1.0, 60.0) as u64)
    }
}

impl State {
    /// The reserve in force: the instances kept for queues with nothing running. As many as
    /// there are such queues (a tenant's queue exists while it is loaded), at most the
    /// configured reserve, and never all the instances.
    fn reserve_now(&self) -> usize {
        let resting = self
            .queues
            .iter()
            .filter(|(id, e)| **id != TOOLING && e.running == 0)
            .count();
        self.reserve.min(resting).min(self.workers - 1)
    }

    /// Whether a queue with `running` calls running may take a free instance now, `reserve`
    /// being [`State::reserve_now`]: a queue with none running while any is free, a busy one
    /// only while more than the reserve is.
    fn may_take(&self, running: usize, reserve: usize) -> bool {
        let free = self.workers.saturating_sub(self.running);
        free > 0 && (running == 0 || free > reserve)
    }

    /// Admit `id`'s next call: count it and make its turn.
    fn admit(&mut self, id: u64, scheduler: &Arc<Shared>) -> Option<Turn> {
        let entry = self.queues.get_mut(&id)?;
        entry.running += 1;
        entry.admitted += 1;
        self.running += 1;
        self.seq += 1;
        Some(Turn {
            scheduler: scheduler.clone(),
            queue: entry.shared.clone(),
            id,
            seq: self.seq,
            armed: true,
        })
    }

    /// Undo [`State::admit`] for a turn that was never used.
    fn unadmit(&mut self, mut turn: Turn) {
        turn.armed = false;
        if let Some(entry) = self.queues.get_mut(&turn.id) {
            entry.running -= 1;
            entry.admitted -= 1;
        }
        self.running -= 1;
    }

    /// Hand free instances to waiting calls, poorest queue first.
    fn dispatch(&mut self, scheduler: &Arc<Shared>) {
        while self.running < self.workers {
            let reserve = self.reserve_now();
            let next = self
                .queues
                .iter()
                .filter(|(_, e)| {
                    !e.waiters.is_empty()
                        && e.running < e.config.concurrency
                        && self.may_take(e.running, reserve)
                })
                .min_by_key(|(_, e)| (e.shared.vtime(), e.waiters.front().map(|w| w.id)))
                .map(|(id, _)| *id);
            let Some(id) = next else { break };
            let Some(waiter) = self.queues.get_mut(&id).and_then(|e| e.waiters.pop_front()) else {
                break;
            };
            let Some(turn) = self.admit(id, scheduler) else {
                break;
            };
            if let Err(turn) = waiter.tx.send(turn) {
                // The caller gave up between being chosen and receiving its turn.
                self.unadmit(turn);
            }
        }
    }

    /// Move the virtual clock up to the smallest account among the active queues.
    fn advance_clock(&mut self) {
        if let Some(least) = self
            .queues
            .values()
            .filter(|e| e.active())
            .map(|e| e.shared.vtime())
            .min()
        {
            self.clock = self.clock.max(least);
        }
    }

    /// The account a waking queue starts from (at least): the virtual clock, less the credit.
    fn floor(&mut self) -> u64 {
        self.advance_clock();
        self.clock.saturating_sub(WAKE_CREDIT.as_nanos() as u64)
    }
}

/// Once per tenant: a bounded FIFO of calls with a concurrency cap. Cheap to clone.
#[derive(Clone)]
pub struct Queue {
    handle: Arc<QueueHandle>,
}

struct QueueHandle {
    id: u64,
    scheduler: Arc<Shared>,
    shared: Arc<QueueShared>,
}

impl Drop for QueueHandle {
    fn drop(&mut self) {
        if self.id != TOOLING {
            self.scheduler.lock().queues.remove(&self.id);
        }
    }
}

impl Queue {
    /// Wait for this queue's turn to run one call: at once if an instance is free and the
    /// queue is under its cap, else after the calls before it. `Err` when the queue is full.
    /// Dropping the future gives up the place.
    pub async fn turn(&self) -> Result<Turn, Rejected> {
        let handle = &self.handle;
        let scheduler = &handle.scheduler;
        let (rx, waiter) = {
            let mut state = scheduler.lock();
            let floor = state.floor();
            let workers = state.workers;
            let next_waiter = state.next_waiter;
            let Some(running) = state.queues.get(&handle.id).map(|e| e.running) else {
                return Err(Rejected {
                    retry_after: Duration::from_secs(1),
                });
            };
            let free = state.may_take(running, state.reserve_now());
            let Some(entry) = state.queues.get_mut(&handle.id) else {
                return Err(Rejected {
                    retry_after: Duration::from_secs(1),
                });
            };
            if !entry.active() {
                // Waking up: start from the virtual clock, not with credit saved while idle.
                entry.shared.vtime.fetch_max(floor, Relaxed);
            }
            if free
                && entry.running < entry.config.concurrency
                && entry.waiters.is_empty()
                && let Some(turn) = state.admit(handle.id, scheduler)
            {
                return Ok(turn);
            }
            let Some(entry) = state.queues.get_mut(&handle.id) else {
                return Err(Rejected {
                    retry_after: Duration::from_secs(1),
                });
            };
            if entry.waiters.len() >= entry.config.capacity {
                entry.rejected += 1;
                return Err(Rejected {
                    retry_after: entry.retry_after(workers),
                });
            }
            let (tx, rx) = oneshot::channel();
            entry.waiters.push_back(Waiter {
                id: next_waiter,
                tx,
            });
            state.next_waiter += 1;
            (rx, next_waiter)
        };
        let place = Place {
            queue: self,
            waiter,
        };
        let waiting = std::time::Instant::now();
        let turn = rx.await;
        crate::request_record::add_queue_wait(waiting.elapsed());
        drop(place);
        turn.map_err(|_| Rejected {
            retry_after: Duration::from_secs(1),
        })
    }

    /// Change the queue's bounds; waiting calls beyond a smaller capacity keep their place.
    pub fn reconfigure(&self, config: QueueConfig) {
        let scheduler = &self.handle.scheduler;
        let mut state = scheduler.lock();
        if let Some(entry) = state.queues.get_mut(&self.handle.id) {
            entry.config = config;
        }
        state.dispatch(scheduler);
    }

    /// The queue's figures now.
    pub fn stats(&self) -> QueueStats {
        let state = self.handle.scheduler.lock();
        let shared = &self.handle.shared;
        let entry = state.queues.get(&self.handle.id);
        QueueStats {
            name: shared.name.clone(),
            config: entry.map_or(QueueConfig::UNBOUNDED, |e| e.config),
            running: entry.map_or(0, |e| e.running),
            queued: entry.map_or(0, |e| e.waiters.len()),
            admitted: entry.map_or(0, |e| e.admitted),
            rejected: entry.map_or(0, |e| e.rejected),
            cpu: Duration::from_nanos(shared.cpu.load(Relaxed)),
        }
    }

    /// The scheduler this queue belongs to.
    pub fn scheduler(&self) -> Scheduler {
        Scheduler {
            shared: self.handle.scheduler.clone(),
        }
    }
}

/// A waiting call's place in its queue; dropping it before the turn arrives leaves the queue.
struct Place<'a> {
    queue: &'a Queue,
    waiter: u64,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let handle = &self.queue.handle;
        let mut state = handle.scheduler.lock();
        if let Some(entry) = state.queues.get_mut(&handle.id) {
            entry.waiters.retain(|w| w.id != self.waiter);
        }
    }
}

/// Once per call: the right to run one guest instance, given back when dropped.
pub struct Turn {
    scheduler: Arc<Shared>,
    queue: Arc<QueueShared>,
    id: u64,
    seq: u64,
    armed: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut state = self.scheduler.lock();
        // Before this queue may go idle: the clock keeps up with it if it ran alone.
        state.advance_clock();
        state.running -= 1;
        if let Some(entry) = state.queues.get_mut(&self.id) {
            entry.running -= 1;
            entry.completed += 1;
        }
        state.dispatch(&self.scheduler);
    }
}

impl Turn {
    /// Run the call that `work` makes on a guest thread, under `limits`, and give its output.
    ///
    /// `work` gets the call's [`Budget`]; the guest's epoch callback must ask
    /// [`Budget::tick`] at every tick, which enforces the CPU limit (and the wall limit while
    /// guest code runs). A call blocked outside guest code past its wall limit is dropped
    /// here: `Err(Stopped::Overrun)`. Dropping the returned future drops the call too. The
    /// turn is given back when the call has really ended, not before.
    pub async fn run<T, F, Fut>(self, limits: TimeLimits, work: F) -> Result<T, Stopped>
    where
        F: FnOnce(Budget) -> Fut,
        Fut: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let threads = self.scheduler.threads.clone();
        let meter = Arc::new(Meter::new(limits, self.queue.clone()));
        let future = work(Budget {
            meter: meter.clone(),
            threads: threads.clone(),
        });
        let (tx, mut rx) = oneshot::channel();
        let seq = self.seq;
        let turn = self;
        let spent_by = meter.clone();
        let task = threads.spawn(meter.clone(), seq, async move {
            let output = future.await;
            // On the guest thread, in the call's last poll: all the CPU it used.
            let spent = spent_by.spent_in_poll();
            let _ = tx.send((output, spent));
            drop(turn);
        });
        let _cancel = CancelOnDrop(task.clone());
        loop {
            let left = meter.wall_left();
            if left.is_zero() {
                crate::request_record::add_cpu(meter.spent());
                meter.trip(Limit::Wall, meter.wall());
                task.cancel();
                return Err(meter.overrun().map_or(Stopped::Lost, Stopped::Overrun));
            }
            tokio::select! {
                output = &mut rx => {
                    let (output, spent) = output.map_err(|_| Stopped::Lost)?;
                    // The request's record (`crate::request_record`): what its call used.
                    crate::request_record::add_cpu(spent);
                    return Ok(output);
                }
                () = tokio::time::sleep(left) => {}
            }
        }
    }
}

struct CancelOnDrop(Arc<threads::Task>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

#[cfg(test)]
mod tests;
