//! The scheduler, black-box: CPU-time limits that ignore waiting, the wall-clock cap, the
//! bounded queue (503 with Retry-After), the concurrency cap, and route inspection that
//! does not depend on the request time limit.
//!
//! Nothing here asserts how fast anything is: statuses and counts only.

use crate::support;

use std::{thread, time::Duration};

use serde_json::json;
use support::{Project, Server, json, run};

/// About 150 ms of CPU in the guest on this machine kind (a plain Python loop).
const BUSY: &str = r#"
def GET(request):
    total = 0
    for i in range(LOOPS):
        total += i * i
    return {"total": total}
"#;

const LOOPS: u32 = 700_000;

fn busy_route() -> String {
    BUSY.replace("LOOPS", &LOOPS.to_string())
}

/// Send `count` requests for `path` at once; the statuses, and the responses' bodies.
fn burst(server: &Server, path: &str, count: usize) -> Vec<(u16, Option<String>, String)> {
    thread::scope(|scope| {
        let handles: Vec<_> = (0..count)
            .map(|_| {
                scope.spawn(|| {
                    let response = server.get(path);
                    let status = response.status().as_u16();
                    let retry = response
                        .headers()
                        .get("retry-after")
                        .map(|v| v.to_str().unwrap().to_string());
                    (status, retry, response.text().unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn forty_cpu_heavy_requests_at_once_all_answer_200_under_a_two_second_limit() {
    // 40 requests of ~150 ms CPU: about 3 s of work for 2 cores, more than the limit. Time
    // spent waiting for a turn does not count, so none of them times out.
    let project = Project::new(&[
        ("routes/work/route.py", &busy_route()),
        ("config.py", "sandbox = {'timeout_s': 2}\n"),
    ]);
    let (code, _, stderr) = run(
        &["build", "--project", ".", "--compression", "1"],
        project.path(),
    );
    assert_eq!(code, 0, "{stderr}");
    let server = Server::run(&project, &[]);
    let answers = burst(&server, "/work", 40);
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
}

#[test]
fn a_runaway_loop_is_stopped_by_the_cpu_limit_with_the_plain_504_body() {
    let project = Project::new(&[
        (
            "routes/spin/route.py",
            "def GET(request):\n    while True:\n        pass\n",
        ),
        (
            "routes/ok/route.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
        ("config.py", "sandbox = {'cpu_ms': 500, 'wall_s': 60}\n"),
    ]);
    let server = Server::dev(&project);
    let response = server.get("/spin");
    assert_eq!(response.status(), 504);
    // API clients get exactly the documented body, in dev too.
    assert_eq!(
        response.text().unwrap(),
        r#"{"detail":"Handler timed out"}"#
    );
    // The browser's error page and the terminal say which limit, and how to raise it.
    let page = server
        .request("GET", "/spin")
        .header("accept", "text/html")
        .send()
        .unwrap();
    assert_eq!(page.status(), 504);
    let page = page.text().unwrap();
    assert!(page.contains("CPU time"), "{page}");
    assert!(page.contains("cpu_ms"), "{page}");
    assert!(
        support::eventually(Duration::from_secs(20), || server
            .log()
            .contains("of CPU time")),
        "{}",
        server.log()
    );
    assert_eq!(json(server.get("/ok")), json!({"ok": true}));
}

#[test]
fn a_handler_blocked_in_a_host_call_is_stopped_by_the_wall_cap() {
    let project = Project::new(&[
        (
            "routes/sleep/route.py",
            "import time\n\ndef GET(request):\n    time.sleep(60)\n    return {}\n",
        ),
        (
            "routes/asleep/route.py",
            "import asyncio\n\nasync def GET(request):\n    await asyncio.sleep(60)\n    return {}\n",
        ),
        (
            "routes/ok/route.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
        ("config.py", "sandbox = {'cpu_ms': 10000, 'wall_s': 1}\n"),
    ]);
    let (code, _, stderr) = run(
        &["build", "--project", ".", "--compression", "1"],
        project.path(),
    );
    assert_eq!(code, 0, "{stderr}");
    let server = Server::run(&project, &[]);
    for path in ["/sleep", "/asleep"] {
        let started = std::time::Instant::now();
        let response = server.get(path);
        assert_eq!(response.status(), 504, "{path}");
        assert_eq!(
            response.text().unwrap(),
            r#"{"detail":"Handler timed out"}"#
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{path} was not stopped"
        );
    }
    assert!(
        support::eventually(Duration::from_secs(20), || server
            .log()
            .contains("wall-clock limit")),
        "{}",
        server.log()
    );
    assert_eq!(json(server.get("/ok")), json!({"ok": true}));
}

#[test]
fn a_full_queue_answers_503_with_retry_after_and_the_queued_ones_are_served() {
    // One instance at once, one waiting: of eight requests at once, one runs, one waits,
    // the others are turned away at once.
    let project = Project::new(&[
        (
            "routes/slow/route.py",
            "import time\n\ndef GET(request):\n    time.sleep(2)\n    return {'done': True}\n",
        ),
        ("config.py", "server = {'workers': 1, 'queue': 1}\n"),
    ]);
    let server = Server::dev(&project);
    // Once first: `dev`'s own calls into the guest (inspecting the route file) take the one
    // instance too, and one of them during the burst would leave room for one request only.
    // (Seen twice in full runs on a loaded machine: seven 503s and one 200.) The snapshot of
    // the routes that `dev` takes in the background is such a call: wait for it too.
    assert_eq!(server.get("/slow").status(), 200);
    server.wait_for_snapshot();
    let answers = burst(&server, "/slow", 8);
    let served = answers.iter().filter(|a| a.0 == 200).count();
    let rejected: Vec<_> = answers.iter().filter(|a| a.0 == 503).collect();
    assert_eq!(served + rejected.len(), 8, "{answers:?}");
    assert!(served >= 2, "{answers:?}");
    assert!(!rejected.is_empty(), "{answers:?}");
    for (_, retry_after, body) in rejected {
        let seconds: u64 = retry_after.as_deref().unwrap().parse().unwrap();
        assert!((1..=60).contains(&seconds), "{retry_after:?}");
        assert_eq!(body, r#"{"detail":"Service Unavailable"}"#);
    }
    // Once the burst is over, the server serves again.
    assert_eq!(server.get("/slow").status(), 200);
}

#[test]
fn no_more_than_workers_requests_run_at_once() {
    let project = Project::new(&[
        (
            "routes/slow/route.py",
            r#"
            import time
            from filerouter import kv

            def GET(request):
                running = kv.incr("running")
                time.sleep(2)
                kv.incr("running", -1)
                return {"running": running}
            "#,
        ),
        ("config.py", "server = {'workers': 2}\n"),
    ]);
    let server = Server::dev(&project);
    // Started at once, each request sleeps long enough that two overlap even when a busy
    // machine staggers their starts (and dev's background snapshot is not competing).
    server.wait_for_snapshot();
    let answers = burst(&server, "/slow", 6);
    let most = answers
        .iter()
        .map(|(status, _, body)| {
            assert_eq!(*status, 200, "{body}");
            serde_json::from_str::<serde_json::Value>(body).unwrap()["running"]
                .as_i64()
                .unwrap()
        })
        .max();
    assert_eq!(most, Some(2));
}

#[test]
fn sixty_eight_route_files_with_a_two_second_limit_start_in_dev_and_reload() {
    let mut files: Vec<(String, String)> = (0..68)
        .map(|n| {
            (
                format!("routes/r{n}/route.py"),
                format!(
                    "import json, decimal, datetime\n\ndef GET(request):\n    return {{'n': {n}}}\n\ndef POST(request):\n    return {{'n': {n}}}\n"
                ),
            )
        })
        .collect();
    files.push(("config.py".into(), "sandbox = {'timeout_s': 2}\n".into()));
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let project = Project::new(&borrowed);
    let server = Server::dev(&project);
    let log = server.log();
    assert!(log.contains("serving 68 routes"), "{log}");
    assert!(!log.contains("could not inspect"), "{log}");
    assert!(!log.contains("fails to import"), "{log}");
    assert_eq!(json(server.get("/r67")), json!({"n": 67}));
    // Every file changes at once: all 68 are inspected again, none fails.
    for n in 0..68 {
        project.write(
            &format!("routes/r{n}/route.py"),
            &format!("def GET(request):\n    return {{'v': 2, 'n': {n}}}\n"),
        );
    }
    assert!(
        support::eventually(Duration::from_secs(60), || {
            server.get("/r0").status() == 200
                && json(server.get("/r0")) == json!({"v": 2, "n": 0})
                && json(server.get("/r67")) == json!({"v": 2, "n": 67})
        }),
        "{}",
        server.log()
    );
    assert!(support::eventually(Duration::from_secs(30), || {
        server.log().contains("reloaded: 68 routes")
    }));
    assert!(
        !server.log().contains("could not inspect"),
        "{}",
        server.log()
    );
}

#[test]
fn scheduling_settings_are_checked_with_the_line() {
    for (config, message) in [
        (
            "sandbox = {'cpu_ms': 0}",
            "'sandbox['cpu_ms']' must be from 1 and at most 86400000",
        ),
        (
            "sandbox = {'wall_s': -1}",
            "'sandbox['wall_s']' must be more than 0 and at most 86400",
        ),
        (
            "sandbox = {'cpu_ms': 1.5}",
            "'sandbox['cpu_ms']' must be of type int",
        ),
        (
            "server = {'queue': -1}",
            "'server['queue']' must be from 0 and at most 1000000",
        ),
        (
            "server = {'workers': 0}",
            "'server['workers']' must be from 1 and at most 4096",
        ),
    ] {
        let project = Project::new(&[
            ("routes/index.py", "def GET(request):\n    return {}\n"),
            ("config.py", &format!("app_name = 'x'\n{config}\n")),
        ]);
        let (code, _, stderr) = run(&["dev", "--project", ".", "--port", "0"], project.path());
        assert_ne!(code, 0);
        assert!(
            stderr.contains(&format!("config.py:2: ConfigError: {message}")),
            "{stderr}"
        );
    }
}

const SCHED_OTHER: i64 = 0;
const SCHED_BATCH: i64 = 3;

/// Each thread of `pid`: its name and its scheduling policy (`/proc/<pid>/task/<tid>/stat`).
fn threads_of(pid: u32) -> Vec<(String, i64)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let (Ok(name), Ok(stat)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        // After the name in parentheses, field 3 (the state) onwards; the policy is field 41.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        threads.push((name.trim().to_string(), fields[41 - 3].parse().unwrap()));
    }
    threads
}

/// The policies of `pid`'s threads whose names start with `prefix` (at least one).
fn policies(pid: u32, prefix: &str) -> Vec<i64> {
    let threads = threads_of(pid);
    let found: Vec<i64> = threads
        .iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(_, policy)| *policy)
        .collect();
    assert!(!found.is_empty(), "no thread {prefix}*: {threads:?}");
    found
}

/// Ask for `/hi` every 100 ms, up to 60 s (`dev` builds its snapshot meanwhile: long calls),
/// until every async thread of `server` is in the batch class; their policies.
fn async_threads_calm_down(server: &Server) -> Vec<i64> {
    let mut seen = Vec::new();
    for _ in 0..600 {
        assert_eq!(server.get("/hi").status(), 200);
        seen = policies(server.pid(), "tokio-r");
        if seen.iter().all(|p| *p == SCHED_BATCH) {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    seen
}

#[test]
fn async_threads_are_in_the_batch_class_only_while_every_guest_call_is_short() {
    let project = Project::new(&[
        (
            "routes/hi/route.py",
            "import sqlite3\n\ndef GET(request):\n    sqlite3.connect('data.db').execute('select 1')\n    return 'hi'\n",
        ),
        ("routes/busy/route.py", &busy_route()),
    ]);
    let server = Server::dev(&project);
    let pid = server.pid();
    // Short calls only: a woken async thread does not take the core from a running guest.
    let seen = async_threads_calm_down(&server);
    assert!(seen.iter().all(|p| *p == SCHED_BATCH), "{seen:?}");
    // The threads that must run when they wake never are, though some are started from one.
    for prompt in ["filerouter-gues", "filerouter-epoc", "filerouter-db"] {
        let seen = policies(pid, prompt);
        assert!(seen.iter().all(|p| *p == SCHED_OTHER), "{prompt}: {seen:?}");
    }

    // A call that burns CPU: other requests must be read and answered beside it at once.
    assert_eq!(server.get("/busy").status(), 200);
    let seen = policies(pid, "tokio-r");
    assert!(seen.iter().all(|p| *p == SCHED_OTHER), "{seen:?}");

    // A second and more of short calls only: back to the batch class.
    let seen = async_threads_calm_down(&server);
    assert!(seen.iter().all(|p| *p == SCHED_BATCH), "{seen:?}");
    for prompt in ["filerouter-gues", "filerouter-epoc", "filerouter-db"] {
        let seen = policies(pid, prompt);
        assert!(seen.iter().all(|p| *p == SCHED_OTHER), "{prompt}: {seen:?}");
    }
}
