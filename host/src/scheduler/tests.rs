//! Admission, fairness and limits, without a guest: the futures stand in for guest calls.

use std::time::{Duration, Instant};

use super::*;

const TWO: QueueConfig = QueueConfig {
    concurrency: 2,
    capacity: 2,
};

fn now_or_never<F: std::future::Future>(future: F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_queue_rejects_and_a_freed_turn_goes_to_the_first_waiter() {
    let scheduler = Scheduler::new(8);
    let queue = scheduler.queue("a", TWO);
    let first = queue.turn().await.unwrap();
    let second = queue.turn().await.unwrap();
    // Two run (the cap), two may wait, the fifth is turned away.
    let mut third = Box::pin(queue.turn());
    let mut fourth = Box::pin(queue.turn());
    assert!(now_or_never(&mut third).is_none());
    assert!(now_or_never(&mut fourth).is_none());
    let rejected = queue.turn().await.err().unwrap();
    assert!(rejected.retry_after >= Duration::from_secs(1));
    let stats = queue.stats();
    assert_eq!((stats.running, stats.queued, stats.rejected), (2, 2, 1));
    drop(first);
    let third = third.await.unwrap();
    assert!(
        now_or_never(&mut fourth).is_none(),
        "FIFO: the fourth waits"
    );
    drop(second);
    let fourth = fourth.await.unwrap();
    drop((third, fourth));
    let stats = queue.stats();
    assert_eq!((stats.running, stats.queued, stats.admitted), (0, 0, 4));
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_bound_all_queues_together_and_a_waiter_that_leaves_frees_its_place() {
    let scheduler = Scheduler::new(1);
    let a = scheduler.queue("a", TWO);
    let b = scheduler.queue("b", TWO);
    let running = a.turn().await.unwrap();
    {
        let mut leaving = Box::pin(b.turn());
        assert!(now_or_never(&mut leaving).is_none());
        assert_eq!(b.stats().queued, 1);
    }
    assert_eq!(b.stats().queued, 0);
    let mut waiting = Box::pin(b.turn());
    assert!(now_or_never(&mut waiting).is_none());
    drop(running);
    let turn = waiting.await.unwrap();
    assert_eq!(scheduler.running(), 1);
    drop(turn);
    assert_eq!(scheduler.running(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_queue_that_used_less_cpu_goes_first() {
    let scheduler = Scheduler::new(1);
    let heavy = scheduler.queue("heavy", TWO);
    let light = scheduler.queue("light", TWO);
    let running = heavy.turn().await.unwrap();
    // Both wait, heavy first; then the heavy queue's running call uses a second of CPU.
    let mut heavy_next = Box::pin(heavy.turn());
    assert!(now_or_never(&mut heavy_next).is_none());
    let mut light_next = Box::pin(light.turn());
    assert!(now_or_never(&mut light_next).is_none());
    heavy.handle.shared.charge(1_000_000_000);
    drop(running);
    let turn = light_next.await.unwrap();
    assert!(now_or_never(&mut heavy_next).is_none());
    drop(turn);
    heavy_next.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_queue_banks_no_credit() {
    let scheduler = Scheduler::new(4);
    let busy = scheduler.queue("busy", TWO);
    let idle = scheduler.queue("idle", TWO);
    let _running = busy.turn().await.unwrap();
    busy.handle.shared.charge(5_000_000_000);
    let _turn = idle.turn().await.unwrap();
    // Level with the busy one, less the small wake credit.
    assert_eq!(
        idle.handle.shared.vtime(),
        busy.handle.shared.vtime() - WAKE_CREDIT.as_nanos() as u64
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queue_that_slept_while_another_ran_alone_starts_from_the_clock() {
    let scheduler = Scheduler::new(4);
    let a = scheduler.queue("a", TWO);
    let b = scheduler.queue("b", TWO);
    // A runs alone for five seconds of CPU, then goes idle: nobody is active.
    let running = a.turn().await.unwrap();
    a.handle.shared.charge(5_000_000_000);
    drop(running);
    // B, idle all along, must not get five seconds of priority over A for it.
    let _turn = b.turn().await.unwrap();
    let credit = WAKE_CREDIT.as_nanos() as u64;
    assert_eq!(b.handle.shared.vtime(), 5_000_000_000 - credit);
    // And A waking now keeps its own account (it is ahead of the clock less the credit).
    let _again = a.turn().await.unwrap();
    assert_eq!(a.handle.shared.vtime(), 5_000_000_000);
}

async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check()
}

fn spin(cpu: Duration) {
    let start = budget::thread_cpu_ns();
    while budget::thread_cpu_ns() - start < cpu.as_nanos() as u64 {
        std::hint::black_box(0u64);
    }
}

const LIMITS: TimeLimits = TimeLimits {
    cpu: Duration::from_millis(200),
    wall: Duration::from_secs(30),
};

#[tokio::test(flavor = "multi_thread")]
async fn a_call_is_charged_the_cpu_it_used() {
    let scheduler = Scheduler::new(2);
    let queue = scheduler.queue("a", TWO);
    let turn = queue.turn().await.unwrap();
    let answer = turn
        .run(LIMITS, |budget| async move {
            spin(Duration::from_millis(30));
            budget.tick()
        })
        .await;
    assert_eq!(answer, Ok(Verdict::Continue));
    assert!(queue.stats().cpu >= Duration::from_millis(30));
    assert!(eventually(|| queue.stats().running == 0).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn past_the_cpu_limit_the_budget_says_stop() {
    let scheduler = Scheduler::new(2);
    let queue = scheduler.queue("a", TWO);
    let turn = queue.turn().await.unwrap();
    let (verdict, overrun) = turn
        .run(LIMITS, |budget| async move {
            loop {
                spin(Duration::from_millis(10));
                let verdict = budget.tick();
                if verdict == Verdict::Stop {
                    return (verdict, budget.overrun());
                }
            }
        })
        .await
        .unwrap();
    assert_eq!(verdict, Verdict::Stop);
    let overrun = overrun.unwrap();
    assert_eq!(overrun.limit, Limit::Cpu);
    assert!(overrun.used >= LIMITS.cpu);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_blocked_past_the_wall_limit_is_dropped_and_its_turn_given_back() {
    let scheduler = Scheduler::new(1);
    let queue = scheduler.queue("a", TWO);
    let turn = queue.turn().await.unwrap();
    let limits = TimeLimits {
        cpu: Duration::from_secs(10),
        wall: Duration::from_millis(200),
    };
    let started = Instant::now();
    let answer = turn
        .run(limits, |_| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
        })
        .await;
    assert!(started.elapsed() < Duration::from_secs(30));
    match answer {
        Err(Stopped::Overrun(overrun)) => assert_eq!(overrun.limit, Limit::Wall),
        other => panic!("{other:?}"),
    }
    assert!(eventually(|| scheduler.running() == 0).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn time_spent_waiting_for_a_thread_is_not_counted() {
    // Twelve calls per guest thread, each holding its thread for 50 ms: the last waits about
    // 550 ms for a thread, more than the wall limit, and is not stopped for it. (Blocking
    // sleeps rather than CPU work, so that a loaded machine cannot stretch them much.)
    let calls_count = cores() * 12;
    let scheduler = Scheduler::new(calls_count);
    let queue = scheduler.queue("a", QueueConfig::UNBOUNDED);
    let limits = TimeLimits {
        cpu: Duration::from_secs(5),
        wall: Duration::from_millis(300),
    };
    let mut calls = Vec::new();
    for _ in 0..calls_count {
        let turn = queue.turn().await.unwrap();
        calls.push(tokio::spawn(turn.run(limits, |_| async {
            std::thread::sleep(Duration::from_millis(50));
        })));
    }
    for call in calls {
        assert_eq!(call.await.unwrap(), Ok(()));
    }
}

/// Gives up the thread once, as wasmtime does for `UpdateDeadline::Yield`.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// A stand-in for a CPU-bound guest: `cpu` of work in 5 ms slices, asking the budget at
/// every slice as the epoch callback does.
async fn guest(budget: Budget, cpu: Duration) -> Verdict {
    let slices = cpu.as_millis() / 5;
    for _ in 0..slices {
        spin(Duration::from_millis(5));
        match budget.tick() {
            Verdict::Continue => {}
            Verdict::Yield => YieldOnce(false).await,
            Verdict::Stop => return Verdict::Stop,
        }
    }
    Verdict::Continue
}

#[tokio::test(flavor = "multi_thread")]
async fn a_light_queue_preempts_a_heavy_one_that_fills_every_thread() {
    let scheduler = Scheduler::new(64);
    let heavy = scheduler.queue("heavy", QueueConfig::UNBOUNDED);
    let light = scheduler.queue("light", QueueConfig::UNBOUNDED);
    let limits = TimeLimits {
        cpu: Duration::from_secs(30),
        wall: Duration::from_secs(60),
    };
    // One long call per guest thread: every thread is busy for 600 ms of CPU.
    let mut long = Vec::new();
    for _ in 0..cores() {
        let turn = heavy.turn().await.unwrap();
        long.push(tokio::spawn(
            turn.run(limits, |b| guest(b, Duration::from_millis(600))),
        ));
    }
    assert!(eventually(|| heavy.stats().cpu >= Duration::from_millis(20)).await);
    // A short call of another queue runs before any of the long ones ends.
    let turn = light.turn().await.unwrap();
    let short = turn
        .run(limits, |b| guest(b, Duration::from_millis(20)))
        .await;
    assert_eq!(short, Ok(Verdict::Continue));
    assert_eq!(heavy.stats().running, cores(), "a long call ended first");
    for call in long {
        assert_eq!(call.await.unwrap(), Ok(Verdict::Continue));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_of_one_queue_run_to_completion_in_order() {
    // Within a queue there is no preemption: with every thread busy, a later call of the
    // same queue waits until an earlier one ends.
    let scheduler = Scheduler::new(64);
    let queue = scheduler.queue("one", QueueConfig::UNBOUNDED);
    let limits = TimeLimits {
        cpu: Duration::from_secs(30),
        wall: Duration::from_secs(60),
    };
    let mut long = Vec::new();
    for _ in 0..cores() {
        let turn = queue.turn().await.unwrap();
        long.push(tokio::spawn(
            turn.run(limits, |b| guest(b, Duration::from_millis(300))),
        ));
    }
    assert!(eventually(|| queue.stats().cpu >= Duration::from_millis(20)).await);
    let turn = queue.turn().await.unwrap();
    let short = turn
        .run(limits, |b| guest(b, Duration::from_millis(20)))
        .await;
    assert_eq!(short, Ok(Verdict::Continue));
    let finished = long.iter().filter(|c| c.is_finished()).count();
    assert!(finished >= 1, "the short call overtook every long one");
    for call in long {
        assert_eq!(call.await.unwrap(), Ok(Verdict::Continue));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reserve_is_kept_for_queues_with_nothing_running() {
    let scheduler = Scheduler::new(4);
    scheduler.set_reserve(2);
    let wide = QueueConfig {
        concurrency: 4,
        capacity: 8,
    };
    let heavy = scheduler.queue("heavy", wide);
    let other_heavy = scheduler.queue("other-heavy", wide);
    let light = scheduler.queue("light", wide);
    // Two queues rest: the heavy one takes instances while more than two are free.
    let h1 = heavy.turn().await.unwrap();
    let h2 = heavy.turn().await.unwrap();
    let mut h3 = Box::pin(heavy.turn());
    assert!(now_or_never(&mut h3).is_none(), "the last two are reserved");
    // A queue with nothing running may take a reserved one, but only its first.
    let o1 = other_heavy.turn().await.unwrap();
    let mut o2 = Box::pin(other_heavy.turn());
    assert!(now_or_never(&mut o2).is_none());
    // The light queue wakes and is served at once, although busy queues are waiting.
    let l1 = light.turn().await.unwrap();
    assert_eq!(scheduler.running(), 4);
    // A freed instance goes to a waiting busy queue only while more than the reserve is free.
    drop(l1);
    assert!(now_or_never(&mut h3).is_none() && now_or_never(&mut o2).is_none());
    drop(o1);
    // Two free, two queues resting: other-heavy has nothing running, so it may take one.
    let o2 = o2.await.unwrap();
    assert!(now_or_never(&mut h3).is_none());
    drop(h1);
    // Two free and only the light queue resting: one is kept for it, heavy gets the other.
    let h3 = h3.await.unwrap();
    assert_eq!(scheduler.reserve(), 1);
    drop((h2, h3, o2));
    assert_eq!(scheduler.running(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reserve_is_for_neighbours_and_never_every_instance() {
    let scheduler = Scheduler::new(2);
    scheduler.set_reserve(10);
    let alone = scheduler.queue("alone", TWO);
    // No neighbour to keep an instance for: the only queue may use them all.
    let first = alone.turn().await.unwrap();
    let second = alone.turn().await.unwrap();
    drop((first, second));
    let neighbour = scheduler.queue("neighbour", TWO);
    assert_eq!(scheduler.reserve(), 1, "never all the instances");
    let first = alone.turn().await.unwrap();
    let mut second = Box::pin(alone.turn());
    assert!(
        now_or_never(&mut second).is_none(),
        "one kept for the neighbour"
    );
    let theirs = neighbour.turn().await.unwrap();
    drop(theirs);
    assert!(now_or_never(&mut second).is_none());
    scheduler.set_reserve(0);
    let second = second.await.unwrap();
    drop((first, second));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_slept_while_another_used_the_threads_banks_no_credit() {
    let scheduler = Scheduler::new(4);
    let sleeper = scheduler.queue("sleeper", TWO);
    let worker = scheduler.queue("worker", TWO);
    // Both admitted at once, with equal accounts.
    let sleeping = sleeper.turn().await.unwrap();
    let working = worker.turn().await.unwrap();
    let worker_account = worker.handle.shared.clone();
    let slept = sleeping.run(LIMITS, |_| async {
        tokio::time::sleep(Duration::from_millis(100)).await;
    });
    // Meanwhile the worker uses the threads: five seconds of CPU (charged at once here) and
    // still running when the sleeper wakes.
    let worked = working.run(LIMITS, move |_| async move {
        worker_account.charge(5_000_000_000);
        spin(Duration::from_millis(150));
    });
    let (slept, worked) = tokio::join!(slept, worked);
    slept.unwrap();
    worked.unwrap();
    // Waking, the sleeper starts from the CPU clock less the credit, not five seconds behind.
    let credit = WAKE_CREDIT.as_nanos() as u64;
    assert!(
        sleeper.handle.shared.vtime() >= 5_000_000_000 - credit,
        "{}",
        sleeper.handle.shared.vtime()
    );
}
