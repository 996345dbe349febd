//! What one guest call may spend, and what it has spent: CPU time and wall-clock time.
//!
//! A [`Meter`] belongs to one call. The guest threads ([`super::threads`]) read the calling
//! thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`) before and after every poll of the call's
//! future, so the CPU it counts is the time this call's code (guest and host side) actually
//! ran, never the time it waited. The wall-clock time it counts is the call's own: its CPU
//! time plus the time it was blocked in host calls (a timer, say), that is everything
//! since it started except the time it was ready to run but waited, for a guest thread or
//! for the machine's CPU. So a busy server never makes a call look slow. [`Budget`] is the
//! view the sandbox's epoch callback checks every tick.
//!
//! Not here: who runs when (the [`super::Scheduler`]), or what a guest is (the sandbox).

use std::{
    sync::{
        Arc,
        atomic::{
            AtomicU8, AtomicU64,
            Ordering::{Relaxed, SeqCst},
        },
    },
    time::{Duration, Instant},
};

use super::QueueShared;

/// The time a call may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeLimits {
    /// CPU time the call's code may use (`cpu_ms`).
    pub cpu: Duration,
    /// The call's own wall-clock time (`wall_s`): its CPU time plus the time it is blocked in
    /// host calls such as `time.sleep`. Time spent queued, or ready but waiting for a thread
    /// or for the CPU, is not counted.
    pub wall: Duration,
}

/// Which limit stopped a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Cpu,
    Wall,
}

/// A call that went past one of its [`TimeLimits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overrun {
    pub limit: Limit,
    /// The limit that was passed.
    pub allowed: Duration,
    /// What the call had used when it was stopped (CPU or counted wall time).
    pub used: Duration,
}

impl std::fmt::Display for Overrun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.limit {
            Limit::Cpu => write!(
                f,
                "the handler used {:.2}s of CPU time, over its limit of {:.2}s",
                self.used.as_secs_f64(),
                self.allowed.as_secs_f64()
            ),
            Limit::Wall => write!(
                f,
                "the handler ran and waited on the host for {:.2}s, over its wall-clock limit of {:.2}s",
                self.used.as_secs_f64(),
                self.allowed.as_secs_f64()
            ),
        }
    }
}

/// What the guest should do at an epoch tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Keep running.
    Continue,
    /// Let a guest of a tenant that used less CPU run first, then continue.
    Yield,
    /// Stop: a limit was passed ([`Budget::overrun`] says which).
    Stop,
}

const NOT_READY: u64 = u64::MAX;

/// `duration` in nanoseconds, saturating.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The CPU time this thread has used, in nanoseconds.
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_THREAD_CPUTIME_ID exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// What one call has spent so far. Only the thread that polls the call writes the CPU
/// fields, and only while it polls.
pub(crate) struct Meter {
    started: Instant,
    /// The CPU limit, in nanoseconds: `TimeLimits::cpu`, raised when the call becomes a stream
    /// ([`Budget::extend`]).
    cpu_limit: AtomicU64,
    /// The wall-clock limit, in nanoseconds, likewise.
    wall_limit: AtomicU64,
    queue: Arc<QueueShared>,
    /// CPU of finished polls.
    cpu_done: AtomicU64,
    /// CPU the call's host work used on other threads (its SQL statements), which the call
    /// waited for while blocked: counted against the CPU limit and charged to the tenant,
    /// never counted twice in the wall-clock time.
    host_cpu: AtomicU64,
    /// The thread's CPU clock when the current poll began.
    poll_start: AtomicU64,
    /// When the current poll began (ns since `started`), or `NOT_READY` between polls.
    poll_start_wall: AtomicU64,
    /// Wall-clock time of finished polls.
    polled_wall: AtomicU64,
    /// CPU already added to the queue's account.
    charged: AtomicU64,
    /// Time spent ready to run but waiting for a thread (finished waits).
    waited: AtomicU64,
    /// When the current wait for a thread began (ns since `started`), or `NOT_READY`.
    ready_at: AtomicU64,
    /// 0: within limits; 1: CPU passed; 2: wall passed.
    tripped: AtomicU8,
    /// What had been used of the limit that was passed, in nanoseconds.
    used_at_trip: AtomicU64,
}

impl Meter {
    pub(crate) fn new(limits: TimeLimits, queue: Arc<QueueShared>) -> Meter {
        Meter {
            started: Instant::now(),
            cpu_limit: AtomicU64::new(nanos(limits.cpu)),
            wall_limit: AtomicU64::new(nanos(limits.wall)),
            queue,
            cpu_done: AtomicU64::new(0),
            host_cpu: AtomicU64::new(0),
            poll_start: AtomicU64::new(0),
            poll_start_wall: AtomicU64::new(NOT_READY),
            polled_wall: AtomicU64::new(0),
            charged: AtomicU64::new(0),
            waited: AtomicU64::new(0),
            ready_at: AtomicU64::new(NOT_READY),
            tripped: AtomicU8::new(0),
            used_at_trip: AtomicU64::new(0),
        }
    }

    /// The limits in force now.
    pub(crate) fn limits(&self) -> TimeLimits {
        TimeLimits {
            cpu: Duration::from_nanos(self.cpu_limit.load(SeqCst)),
            wall: Duration::from_nanos(self.wall_limit.load(SeqCst)),
        }
    }

    pub(crate) fn queue(&self) -> &Arc<QueueShared> {
        &self.queue
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// The call is ready to run and waits for a thread.
    pub(crate) fn mark_ready(&self) {
        let now = self.now_ns();
        let _ = self
            .ready_at
            .compare_exchange(NOT_READY, now, SeqCst, SeqCst);
    }

    /// A guest thread starts polling the call.
    pub(crate) fn poll_started(&self) {
        // Totals first, then the markers: a reader on another thread may count a moment
        // twice as not blocked (and stop a call a little later), never not at all.
        let now = self.now_ns();
        let ready_at = self.ready_at.load(SeqCst);
        if ready_at != NOT_READY {
            self.waited.fetch_add(now.saturating_sub(ready_at), SeqCst);
        }
        self.poll_start_wall.store(now, SeqCst);
        self.ready_at.store(NOT_READY, SeqCst);
        self.poll_start.store(thread_cpu_ns(), Relaxed);
    }

    /// The poll that [`Meter::poll_started`] began has returned, on the same thread.
    pub(crate) fn poll_ended(&self) {
        let used = thread_cpu_ns().saturating_sub(self.poll_start.load(Relaxed));
        self.cpu_done.fetch_add(used, Relaxed);
        let began = self.poll_start_wall.load(SeqCst);
        if began != NOT_READY {
            self.polled_wall
                .fetch_add(self.now_ns().saturating_sub(began), SeqCst);
        }
        self.poll_start_wall.store(NOT_READY, SeqCst);
        self.charge(self.cpu_done.load(Relaxed) + self.host_cpu.load(Relaxed));
    }

    /// CPU the call used in finished polls and in host work (what another thread can know).
    pub(crate) fn spent(&self) -> Duration {
        Duration::from_nanos(self.cpu_done.load(Relaxed) + self.host_cpu.load(Relaxed))
    }

    /// CPU the call used so far, the running poll included: exact on the polling thread
    /// during a poll, so all of it when asked at the end of the call's last poll.
    pub(crate) fn spent_in_poll(&self) -> Duration {
        Duration::from_nanos(self.cpu_in_poll() + self.host_cpu.load(Relaxed))
    }

    /// CPU used so far; exact on the polling thread during a poll.
    fn cpu_in_poll(&self) -> u64 {
        self.cpu_done.load(Relaxed) + thread_cpu_ns().saturating_sub(self.poll_start.load(Relaxed))
    }

    /// Add the CPU not yet charged to the queue's account.
    fn charge(&self, total: u64) {
        let before = self.charged.fetch_max(total, Relaxed);
        if total > before {
            self.queue.charge(total - before);
        }
    }

    /// Wall-clock time counted against the limit, given the call's CPU time so far: the CPU
    /// plus the time spent blocked in host calls (neither polled nor waiting for a thread).
    fn wall_with(&self, cpu: u64) -> Duration {
        // The markers first, then the totals (see `poll_started`).
        let ready_at = self.ready_at.load(SeqCst);
        let polling_since = self.poll_start_wall.load(SeqCst);
        let now = self.now_ns();
        let mut not_blocked = self.waited.load(SeqCst) + self.polled_wall.load(SeqCst);
        if ready_at != NOT_READY {
            not_blocked += now.saturating_sub(ready_at);
        }
        if polling_since != NOT_READY {
            not_blocked += now.saturating_sub(polling_since);
        }
        Duration::from_nanos(now.saturating_sub(not_blocked).saturating_add(cpu))
    }

    /// [`Meter::wall_with`] the CPU of finished polls: what another thread can know. A poll
    /// that is running is counted by its own epoch ticks.
    pub(crate) fn wall(&self) -> Duration {
        self.wall_with(self.cpu_done.load(Relaxed))
    }

    /// Record that `limit` was passed after `used` of it (the first one recorded stays).
    pub(crate) fn trip(&self, limit: Limit, used: Duration) {
        let code = match limit {
            Limit::Cpu => 1,
            Limit::Wall => 2,
        };
        if self
            .tripped
            .compare_exchange(0, code, Relaxed, Relaxed)
            .is_ok()
        {
            self.used_at_trip.store(used.as_nanos() as u64, Relaxed);
        }
    }

    pub(crate) fn overrun(&self) -> Option<Overrun> {
        let used = Duration::from_nanos(self.used_at_trip.load(Relaxed));
        match self.tripped.load(Relaxed) {
            1 => Some(Overrun {
                limit: Limit::Cpu,
                allowed: self.limits().cpu,
                used,
            }),
            2 => Some(Overrun {
                limit: Limit::Wall,
                allowed: self.limits().wall,
                used,
            }),
            _ => None,
        }
    }

    /// The wall-clock time left before the limit.
    pub(crate) fn wall_left(&self) -> Duration {
        self.limits().wall.saturating_sub(self.wall())
    }
}

/// The limits of one running call, as its guest checks them at every epoch tick.
#[derive(Clone)]
pub struct Budget {
    pub(crate) meter: Arc<Meter>,
    pub(crate) threads: Arc<super::threads::Threads>,
}

impl Budget {
    /// Call at every epoch tick, on the thread running the guest: stop past a limit, yield
    /// when a guest of a tenant that used less CPU is waiting for a thread, else continue.
    pub fn tick(&self) -> Verdict {
        let meter = &self.meter;
        let cpu = meter.cpu_in_poll();
        super::async_class::call_seen(Duration::from_nanos(cpu));
        let all_cpu = cpu + meter.host_cpu.load(Relaxed);
        meter.charge(all_cpu);
        if all_cpu >= meter.cpu_limit.load(SeqCst) {
            meter.trip(Limit::Cpu, Duration::from_nanos(all_cpu));
            return Verdict::Stop;
        }
        let wall = meter.wall_with(cpu);
        if wall >= meter.limits().wall {
            meter.trip(Limit::Wall, wall);
            return Verdict::Stop;
        }
        if self.threads.someone_poorer_waits(&meter.queue) {
            return Verdict::Yield;
        }
        Verdict::Continue
    }

    /// Count `used` of CPU that the call's host work spent on another thread while the call
    /// waited for it (a SQL statement on a database thread): charged to the tenant and held
    /// against the call's CPU limit. False once the call is past its CPU or wall-clock limit,
    /// and the work should stop.
    pub fn charge_host_cpu(&self, used: Duration) -> bool {
        let meter = &self.meter;
        let host =
            meter.host_cpu.fetch_add(used.as_nanos() as u64, Relaxed) + used.as_nanos() as u64;
        let done = meter.cpu_done.load(Relaxed);
        meter.charge(done + host);
        if done + host >= meter.cpu_limit.load(SeqCst) {
            meter.trip(Limit::Cpu, Duration::from_nanos(done + host));
            return false;
        }
        let wall = meter.wall();
        if wall >= meter.limits().wall {
            meter.trip(Limit::Wall, wall);
            return false;
        }
        true
    }

    /// From now on, the call runs under `limits` instead of the ones it started with, counted
    /// from its start (what it used so far counts against them): a request's call that became
    /// a streamed response takes the stream's limits. A call already stopped stays stopped.
    pub fn extend(&self, limits: TimeLimits) {
        self.meter.cpu_limit.store(nanos(limits.cpu), SeqCst);
        self.meter.wall_limit.store(nanos(limits.wall), SeqCst);
    }

    /// The CPU the call used so far, its own and its host work's (exact on the thread polling
    /// it, as a host function is).
    pub fn cpu_used(&self) -> Duration {
        Duration::from_nanos(self.meter.cpu_in_poll() + self.meter.host_cpu.load(Relaxed))
    }

    /// The limits the call runs under now.
    pub fn limits(&self) -> TimeLimits {
        self.meter.limits()
    }

    /// Which limit stopped the call, once [`Budget::tick`] said [`Verdict::Stop`].
    pub fn overrun(&self) -> Option<Overrun> {
        self.meter.overrun()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_clock_counts_work_not_sleep() {
        let start = thread_cpu_ns();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu_ns() - start;
        let start = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - start < 30_000_000 {
            x = x.wrapping_add(1);
        }
        assert!(x > 0);
        assert!(slept < 30_000_000, "sleeping used {slept} ns of CPU");
    }
}
