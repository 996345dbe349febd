//! What an operator runs a single-project `filerouter run` with (issue 45, points 1, 2 and 4):
//! liveness and readiness on the admin address and on the public port, the drain on SIGTERM,
//! Prometheus metrics by route pattern, and one access line per request, in text or JSON.
//!
//! Each test builds a small project with the real `filerouter build` and serves it with the
//! real `filerouter run`; nothing here is timed beyond "eventually" deadlines of seconds.

use crate::support;

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
    thread,
    time::Duration,
};

use support::{Project, Server, eventually, json, run_with_env};

/// A project with a route pattern, a slow route and a database, built once for the run.
fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let project = Project::dedented(&[
                (
                    "routes/index.py",
                    r#"
                    def GET(request):
                        return {"ok": True}
                    "#,
                ),
                (
                    "routes/users/[id]/route.py",
                    r#"
                    def GET(request, id: int):
                        total = sum(range(20000))
                        return {"id": id, "total": total}
                    "#,
                ),
                (
                    "routes/slow/route.py",
                    r#"
                    import time

                    def GET(request, seconds: float = 2.0):
                        time.sleep(seconds)
                        return {"slow": True}
                    "#,
                ),
            ]);
            let (code, stdout, stderr) =
                run_with_env(&["build", "--project", "."], project.path(), &[]);
            assert_eq!(code, 0, "build:\n{stdout}\n{stderr}");
            project.for_the_whole_run()
        })
        .as_path()
}

/// `filerouter run` of a copy of the built project with `extra` arguments.
fn run(extra: &[&str]) -> (Project, Server) {
    let project = Project::new(&[]);
    support::copy_all(built(), project.path());
    let mut args = vec!["run", "--project", project.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    let server = Server::start(&args, &[], Duration::from_secs(120));
    (project, server)
}

/// The admin address's base URL, from the line `run` prints.
fn admin_url(server: &Server) -> String {
    format!("http://{}", support::admin::admin_address(server))
}

fn get(url: &str) -> reqwest::blocking::Response {
    support::client().get(url).send().expect("GET")
}

#[test]
fn admin_serves_liveness_readiness_and_metrics_by_route_pattern_for_one_project() {
    let (_project, server) = run(&["--admin", "127.0.0.1:0", "--health-path", "/healthz"]);
    let admin = admin_url(&server);

    let live = get(&format!("{admin}/livez"));
    assert_eq!(live.status(), 200);
    let ready = get(&format!("{admin}/readyz"));
    assert_eq!(ready.status(), 200);
    assert_eq!(json(ready)["status"], "ready");
    assert_eq!(json(get(&format!("{admin}/healthz")))["status"], "ok");
    // Readiness on the public port too, at the path asked for, never routed to the project.
    let public = server.get("/healthz");
    assert_eq!(public.status(), 200);
    assert_eq!(json(public)["status"], "ready");

    for id in [1, 2, 3] {
        assert_eq!(server.get(&format!("/users/{id}")).status(), 200);
    }
    assert_eq!(server.get("/").status(), 200);
    assert_eq!(server.get("/nowhere/at/all").status(), 404);
    assert_eq!(server.request("BREW", "/").send().unwrap().status(), 405);

    let metrics = get(&format!("{admin}/metrics"));
    assert_eq!(metrics.status(), 200);
    assert!(
        metrics.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"),
        "{:?}",
        metrics.headers()
    );
    let text = metrics.text().unwrap();
    for line in [
        r#"http_requests_total{method="GET",route="/users/{id}",status="200"} 3"#,
        r#"http_requests_total{method="GET",route="/",status="200"} 1"#,
        r#"http_requests_total{method="GET",route="unmatched",status="404"} 1"#,
        r#"http_requests_total{method="OTHER",route="/",status="405"} 1"#,
        r#"http_request_duration_seconds_count{method="GET",route="/users/{id}"} 3"#,
        "# TYPE http_request_duration_seconds histogram",
        "# TYPE http_requests_in_progress gauge",
        "# TYPE filerouter_queue_wait_seconds histogram",
        "# TYPE filerouter_database_statement_duration_seconds histogram",
        "process_resident_memory_bytes",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    // Four requests ran in the sandbox, and used CPU there.
    assert_eq!(
        support::admin::metric(&text, "filerouter_request_cpu_seconds_count"),
        4.0,
        "{text}"
    );
    assert!(support::admin::metric(&text, "filerouter_request_cpu_seconds_sum") > 0.0);
    // Raw paths never become labels, and the probes are not counted.
    for raw in ["/users/1", "/nowhere", "/healthz", "BREW"] {
        assert!(!text.contains(raw), "{raw} in\n{text}");
    }
    // No tenant label for a single project.
    assert!(!text.contains("tenant="), "{text}");

    // Access lines are on by default in `run` (text): pattern, status and CPU.
    assert!(
        server.log_shows("GET /users/2 200"),
        "no access line:\n{}",
        server.log()
    );
    let line = server
        .log()
        .lines()
        .find(|l| l.contains("GET /users/2 200"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("route=/users/{id}") && line.contains("cpu="),
        "{line}"
    );
}

#[test]
fn json_access_lines_carry_route_status_duration_and_cpu() {
    let (_project, server) = run(&["--log-format", "json"]);
    assert_eq!(server.get("/users/7").status(), 200);
    assert!(
        server.log_shows(r#""path":"/users/7""#),
        "no JSON access line:\n{}",
        server.log()
    );
    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains(r#""path":"/users/7""#))
        .unwrap();
    let access: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert_eq!(access["target"], "access", "{access}");
    assert_eq!(access["level"], "INFO", "{access}");
    assert_eq!(access["method"], "GET", "{access}");
    assert_eq!(access["route"], "/users/{id}", "{access}");
    assert_eq!(access["status"], 200, "{access}");
    assert_eq!(access["tenant"], "", "{access}");
    assert_eq!(access["trace_id"], "", "{access}");
    assert!(access["duration_ms"].as_f64().unwrap() > 0.0, "{access}");
    assert!(access["cpu_ms"].as_f64().unwrap() > 0.0, "{access}");
    // Traces are not exported, but a client's traceparent names the trace.
    let traced = server
        .request("GET", "/users/9")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .send()
        .unwrap();
    assert_eq!(traced.status(), 200);
    assert!(
        server.log_shows(r#""trace_id":"0af7651916cd43dd8448eb211c80319c""#),
        "{}",
        server.log()
    );
    // The query never reaches the log.
    assert_eq!(server.get("/users/8?token=s3cret").status(), 200);
    assert!(server.log_shows(r#""path":"/users/8""#), "{}", server.log());
    assert!(!server.log().contains("s3cret"), "{}", server.log());
}

#[test]
fn sigterm_turns_readiness_off_serves_through_the_delay_drains_and_exits_0() {
    let (_project, mut server) = run(&[
        "--admin",
        "127.0.0.1:0",
        "--health-path",
        "/healthz",
        "--drain-delay",
        "6",
        "--graceful-timeout",
        "20",
    ]);
    let admin = admin_url(&server);
    assert_eq!(get(&format!("{admin}/readyz")).status(), 200);

    // A request in flight when SIGTERM comes, finishing after the delay's start.
    let url = server.url("/slow?seconds=3");
    let slow = thread::spawn(move || support::client().get(url).send());
    assert!(
        eventually(Duration::from_secs(10), || {
            let metrics = get(&format!("{admin}/metrics")).text().unwrap();
            support::admin::metric(&metrics, "http_requests_in_progress") >= 1.0
        }),
        "the slow request never started"
    );
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status();

    // Readiness turns 503 at once, on both addresses; liveness stays.
    assert!(
        eventually(Duration::from_secs(3), || get(&format!("{admin}/readyz"))
            .status()
            == 503),
        "{}",
        server.log()
    );
    assert_eq!(json(get(&format!("{admin}/readyz")))["status"], "draining");
    assert_eq!(server.get("/healthz").status(), 503);
    assert_eq!(get(&format!("{admin}/livez")).status(), 200);
    // New connections are still served during the delay, told not to keep the connection.
    let fresh = support::client()
        .get(server.url("/users/5"))
        .send()
        .unwrap();
    assert_eq!(fresh.status(), 200);
    assert_eq!(fresh.headers()["connection"], "close");

    // The request in flight finishes; then the process exits 0.
    let slow = slow.join().unwrap().expect("the request in flight failed");
    assert_eq!(slow.status(), 200);
    assert_eq!(server.terminate(), Some(0), "{}", server.log());
    assert!(server.log().contains("stopped"), "{}", server.log());
}

#[test]
fn run_refuses_a_health_path_that_is_not_a_path() {
    let (code, _stdout, stderr) = run_with_env(
        &["run", "--project", ".", "--health-path", "healthz"],
        built(),
        &[],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("--health-path"), "{stderr}");
}
