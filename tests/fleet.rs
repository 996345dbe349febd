//! A fleet with real parts (issue 45, point 7): three `filerouter run` processes of one project
//! behind Debian's HAProxy, which health-checks each on its readiness path, sharing a real
//! PostgreSQL and Redis (started as `tests/backends.rs` starts them), under steady load while
//! all three are restarted one after another (SIGTERM, wait for the exit, start again on the
//! same port). Every request must succeed and every write that was answered must be in the
//! database; each process's metrics must show what it served. All three export their traces to
//! one OTLP receiver (`support::otlp`): every request answered carries a `traceparent`, and its
//! server span, continuing that trace, must arrive with the status the client got (the spans of
//! the processes restarted are flushed as they drain).
//!
//! Without HAProxy, PostgreSQL or Redis the test prints why and passes, unless `CI` is set:
//! then it fails (`.ci/run` installs `haproxy`, `postgresql` and `redis-server`).

use crate::{backends, support};

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

use support::{Project, Server, eventually, free_port, otlp::Receiver, run_with_env};

/// Seconds a stopping process keeps serving after SIGTERM, readiness already 503: several of
/// HAProxy's check intervals ([`CHECK_INTERVAL_MS`]).
const DRAIN_DELAY: &str = "2";

/// How often HAProxy asks each process's readiness.
const CHECK_INTERVAL_MS: u32 = 200;

/// Client threads writing through HAProxy.
const CLIENTS: usize = 4;

/// The project: one table (a migration), written with a key each and counted.
fn project() -> Project {
    Project::dedented(&[
        (
            "migrations/0001_items.sql",
            "CREATE TABLE items (\n    key TEXT PRIMARY KEY,\n    at TIMESTAMPTZ NOT NULL DEFAULT now()\n);\n",
        ),
        (
            "routes/items/route.py",
            r#"
            import sqlite3

            def GET(request):
                conn = sqlite3.connect("app.db")
                (count,) = conn.execute("SELECT count(*) FROM items").fetchone()
                return {"count": count}

            def POST(request, key: str):
                conn = sqlite3.connect("app.db")
                with conn:
                    # Idempotent: a request a balancer retried writes its row once.
                    conn.execute("INSERT INTO items (key) VALUES (?) ON CONFLICT DO NOTHING", (key,))
                return {"key": key}, 201
            "#,
        ),
    ])
}

/// HAProxy on `port`, balancing over `backends` (ports), each checked at `/healthz`.
struct Balancer {
    _server: backends::Guarded,
    _dir: tempfile::TempDir,
    port: u16,
}

impl Balancer {
    fn start(program: &Path, backends: &[u16]) -> Balancer {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, p)| format!("    server run{i} 127.0.0.1:{p} check\n"))
            .collect();
        let config = format!(
            "global\n    maxconn 512\n\n\
             defaults\n    mode http\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\n\
             \x20   retries 3\n    option redispatch\n    retry-on conn-failure empty-response response-timeout\n\n\
             frontend web\n    bind 127.0.0.1:{port}\n    default_backend app\n\n\
             backend app\n    balance roundrobin\n    option httpchk GET /healthz\n    http-check expect status 200\n\
             \x20   default-server inter {CHECK_INTERVAL_MS} fastinter {CHECK_INTERVAL_MS} downinter {CHECK_INTERVAL_MS} fall 1 rise 2\n\
             {servers}"
        );
        let file = dir.path().join("haproxy.cfg");
        std::fs::write(&file, config).unwrap();
        let checked = Command::new(program)
            .args(["-c", "-f"])
            .arg(&file)
            .output()
            .expect("haproxy -c");
        assert!(
            checked.status.success(),
            "haproxy refused its configuration: {}",
            String::from_utf8_lossy(&checked.stderr)
        );
        // Its own folder, which the watchdog removes when it stops.
        let folder = dir.path().join("run");
        std::fs::create_dir(&folder).unwrap();
        let server = backends::Guarded::start(
            &[
                program.to_str().unwrap(),
                "-db",
                "-f",
                file.to_str().unwrap(),
            ],
            "TERM",
            &dir.path().join("haproxy.log"),
            &folder,
        );
        let up = eventually(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "haproxy did not listen");
        Balancer {
            _server: server,
            _dir: dir,
            port,
        }
    }
}

/// HAProxy, if installed; `None` (after saying why) when it is not and this is not CI.
fn haproxy() -> Option<PathBuf> {
    let found = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "haproxy is not installed: CI must run the fleet test (.ci/run installs haproxy)"
        );
        eprintln!("skipping: haproxy is not installed (apt-get install haproxy)");
    }
    found
}

/// One `run` process of the fleet, on a fixed port so that the balancer finds its restart.
fn start(
    project: &Path,
    port: u16,
    (database, kv): (&str, &str),
    traces: &Receiver,
    migrate: bool,
) -> Server {
    let mut command = Command::new(support::binary());
    command.envs(traces.env("fleet"));
    command
        .arg("run")
        .arg("--project")
        .arg(project)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--database-url", database, "--kv-url", kv])
        .args(["--admin", "127.0.0.1:0", "--health-path", "/healthz"])
        .args(["--drain-delay", DRAIN_DELAY, "--graceful-timeout", "10"])
        .env_remove("RUST_LOG")
        .env_remove("FILEROUTER_CACHE_KEY")
        .env_remove("FILEROUTER_DATABASE_URL")
        .env_remove("FILEROUTER_KV_URL");
    if migrate {
        command.arg("--migrate");
    }
    let server = Server::launch_as_given(command, Duration::from_secs(120));
    let admin = support::admin::admin_address(&server);
    assert!(
        eventually(Duration::from_secs(20), || support::client()
            .get(format!("http://{admin}/readyz"))
            .send()
            .is_ok_and(|r| r.status() == 200)),
        "not ready:\n{}",
        server.log()
    );
    server
}

/// What the clients saw: keys written (answered 201) with the trace each request named, and
/// failures.
#[derive(Default)]
struct Outcome {
    written: Vec<String>,
    traces: Vec<String>,
    failures: Vec<String>,
}

#[test]
fn a_rolling_restart_behind_haproxy_fails_no_request_and_loses_no_write() {
    let Some(haproxy) = haproxy() else { return };
    let Some(servers) = backends::servers() else {
        return;
    };
    let database = servers.pg.create_app("fleet");
    let kv = servers.redis.url();
    let project = project();
    let (code, stdout, stderr) = run_with_env(&["build", "--project", "."], project.path(), &[]);
    assert_eq!(code, 0, "build:\n{stdout}\n{stderr}");

    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    // The first applies the migration; the other two start beside it.
    let traces = Receiver::start();
    let mut fleet = vec![start(
        project.path(),
        ports[0],
        (&database, &kv),
        &traces,
        true,
    )];
    for port in &ports[1..] {
        fleet.push(start(
            project.path(),
            *port,
            (&database, &kv),
            &traces,
            false,
        ));
    }
    let balancer = Balancer::start(&haproxy, &ports);
    let front = format!("http://127.0.0.1:{}", balancer.port);
    assert!(
        eventually(Duration::from_secs(10), || support::client()
            .get(format!("{front}/items"))
            .send()
            .is_ok_and(|r| r.status() == 200)),
        "the balancer does not answer"
    );

    // Steady load: each client writes one key after another through the balancer.
    let stop = Arc::new(AtomicBool::new(false));
    let outcome = Arc::new(Mutex::new(Outcome::default()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (stop, outcome, front) = (stop.clone(), outcome.clone(), front.clone());
            thread::spawn(move || {
                let client = support::client();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("c{c}-{n}");
                    n += 1;
                    let trace = format!("{:032x}", ((c as u128 + 1) << 64) | n as u128);
                    let answer = client
                        .post(format!("{front}/items?key={key}"))
                        .header("traceparent", format!("00-{trace}-{n:016x}-01"))
                        .send()
                        .map_err(|e| e.to_string())
                        .and_then(|r| {
                            if r.status() == 201 {
                                Ok(())
                            } else {
                                Err(format!("{} {}", r.status(), r.text().unwrap_or_default()))
                            }
                        });
                    let mut outcome = outcome.lock().unwrap();
                    match answer {
                        Ok(()) => {
                            outcome.written.push(key);
                            outcome.traces.push(trace);
                        }
                        Err(why) => outcome.failures.push(format!("{key}: {why}")),
                    }
                    drop(outcome);
                    thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    let written = || outcome.lock().unwrap().written.len();
    assert!(
        eventually(Duration::from_secs(10), || written() >= 20),
        "no load"
    );

    // Rolling restart: each in turn is stopped (it drains), then started again on its port.
    let mut logs = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let before = written();
        let code = fleet[i].terminate();
        logs.push(fleet[i].log());
        assert_eq!(code, Some(0), "run{i} did not exit 0:\n{}", fleet[i].log());
        fleet[i] = start(project.path(), *port, (&database, &kv), &traces, false);
        // The fleet kept serving while this one was away.
        assert!(
            eventually(Duration::from_secs(10), || written() >= before + 20),
            "no progress while run{i} restarted"
        );
        // The balancer sees the new one up (two checks) before the next goes down.
        thread::sleep(Duration::from_millis(u64::from(CHECK_INTERVAL_MS) * 4));
    }
    let before = written();
    assert!(eventually(Duration::from_secs(10), || written() >= before + 20));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }

    let outcome = outcome.lock().unwrap();
    assert!(
        outcome.failures.is_empty(),
        "{} of {} requests failed during the rolling restart: {:?}\n{}",
        outcome.failures.len(),
        outcome.failures.len() + outcome.written.len(),
        &outcome.failures[..outcome.failures.len().min(10)],
        logs.join("\n---\n")
    );
    // No lost writes: every key answered 201 is in the database, and nothing else is.
    let stored = servers.pg.psql("fleet", &["SELECT count(*) FROM items"]);
    assert_eq!(
        stored,
        outcome.written.len().to_string(),
        "rows in the database against writes answered"
    );
    for key in outcome.written.iter().step_by(50) {
        let found = servers.pg.psql(
            "fleet",
            &[&format!("SELECT count(*) FROM items WHERE key = '{key}'")],
        );
        assert_eq!(found, "1", "{key} is missing");
    }
    eprintln!(
        "fleet: {} writes through haproxy during a rolling restart of 3 processes, none failed",
        outcome.written.len()
    );

    // Each new process counted what it served, by route pattern.
    let mut served = 0.0;
    for server in &fleet {
        let admin = support::admin::admin_address(server);
        let text = support::client()
            .get(format!("http://{admin}/metrics"))
            .send()
            .unwrap()
            .text()
            .unwrap();
        assert!(!text.contains(r#"status="5"#), "{text}");
        if text.contains(r#"http_requests_total{method="POST",route="/items",status="201"}"#) {
            served += support::admin::metric(
                &text,
                r#"http_requests_total{method="POST",route="/items",status="201"}"#,
            );
        }
    }
    assert!(served > 0.0, "the restarted processes served nothing");
    backends::assert_no_password("the fleet's output", &logs.join("\n"));

    // Every answered request's trace arrived, with its status: the last three processes
    // flush theirs as they stop (in parallel, each draining for the delay).
    thread::scope(|s| {
        for server in fleet.iter_mut() {
            s.spawn(move || assert_eq!(server.terminate(), Some(0), "{}", server.log()));
        }
    });
    let spans = traces.spans();
    let answered: std::collections::BTreeSet<&str> = spans
        .iter()
        .filter(|s| {
            s.kind == 2
                && s.name == "POST /items"
                && s.attribute("http.route") == Some("/items")
                && s.attribute("http.response.status_code") == Some("201")
        })
        .map(|s| s.trace_id.as_str())
        .collect();
    let missing: Vec<&String> = outcome
        .traces
        .iter()
        .filter(|t| !answered.contains(t.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} answered requests have no server span with status 201 (of {} spans, {} exports), e.g. {:?}",
        missing.len(),
        outcome.traces.len(),
        spans.len(),
        traces.exports(),
        &missing[..missing.len().min(5)]
    );
    assert!(spans.iter().all(|s| s.service == "fleet"));
    assert!(
        !spans.iter().any(|s| s
            .attribute("http.response.status_code")
            .is_some_and(|c| c.starts_with('5'))),
        "a 5xx in the traces"
    );
}
