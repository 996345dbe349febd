//! Work around a request and around the server's start (issue 25, point 3): FastAPI's
//! `BackgroundTasks`, run after the response is sent in the request's own instance and limits,
//! and the project's start-up hook, `startup()` in `startup.py`.
//!
//! - background tasks run after the client has its response (the task writes kv after a
//!   delay: the response came first, a later request sees the write), sync and async, from
//!   the handler, a dependency and a response's own `background`, in `dev` and `run`;
//! - a task that raises is logged with its traceback, the tasks after it do not run, and the
//!   response stands; a task past the request's CPU or wall-clock limit is stopped and logged,
//!   and the server goes on serving; `run` finishes background tasks before it exits;
//! - `startup()` runs at `dev`'s start and after every reload, against the project's data and
//!   with the operator's values; a failing one is the error page of every request, naming
//!   `startup.py` and the line, until a fix; `build` refuses a `startup.py` that does not
//!   import or defines no `startup()`, naming the file and line; `run` runs it once at start
//!   against the real data and refuses to start when it fails.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{Project, Server, eventually, json, run_with_env};

/// A route whose POST leaves work for after its response: a sync task that sleeps, then
/// writes kv; an async one that does the same; one from a dependency; one of a response's own.
const TASKS: &str = r#"
    import asyncio
    import time

    from filerouter import BackgroundTasks, Depends, JSONResponse, kv
    from filerouter.background import BackgroundTask

    def note(key: str, value: object, delay: float = 0.0) -> None:
        time.sleep(delay)
        kv.set(key, value)
        kv.set("order", (kv.get("order") or []) + [key])

    async def anote(key: str, *, value: object) -> None:
        await asyncio.sleep(0.05)
        kv.set(key, value)
        kv.set("order", (kv.get("order") or []) + [key])

    def audit(tasks: BackgroundTasks) -> str:
        tasks.add_task(note, "audit", "from the dependency")
        return "audited"

    def POST(request, tasks: BackgroundTasks, who: str = Depends(audit), own: bool = False):
        tasks.add_task(note, "slow", "written later", delay=1.5)
        tasks.add_task(anote, "async", value=who)
        if own:
            return JSONResponse({"sent": True}, background=BackgroundTask(note, "own", 1))
        return {"sent": True, "slow": kv.get("slow")}

    def GET(request):
        return {k: kv.get(k) for k in ("slow", "async", "audit", "own", "order")}
"#;

/// POST `/tasks` and check that the answer came before the slow task's write, and that a
/// later request sees every task's write, in the order they were added.
fn check_tasks_run_after_the_response(server: &Server) {
    let started = Instant::now();
    let response = server.request("POST", "/tasks").send().unwrap();
    let answered = started.elapsed();
    assert_eq!(response.status(), 200);
    assert_eq!(json(response), json!({"sent": true, "slow": null}));
    assert!(
        answered < Duration::from_millis(1200),
        "the response waited for the background task: {answered:?}"
    );
    // Right after the response, the slow task has not written yet.
    let now = json(server.get("/tasks"));
    assert_eq!(now["slow"], json!(null), "{now}");
    let mut seen = serde_json::Value::Null;
    // Each task writes its value, then appends to "order": wait for the last append, not for
    // the last value (a read between the two saw the value without its place in the order).
    assert!(
        eventually(Duration::from_secs(10), || {
            seen = json(server.get("/tasks"));
            seen["order"].as_array().map_or(0, Vec::len) == 3
        }),
        "the background tasks never ran: {seen}\n{}",
        server.log()
    );
    assert_eq!(seen["async"], json!("audited"), "{seen}");
    assert_eq!(seen["slow"], json!("written later"));
    // The dependency's task was added first, then the handler's, in order.
    assert_eq!(seen["order"], json!(["audit", "slow", "async"]), "{seen}");
}

#[test]
fn background_tasks_run_after_the_response_is_sent() {
    let project = Project::new(&[("routes/tasks/route.py", TASKS)]);
    let server = Server::dev(&project);
    check_tasks_run_after_the_response(&server);

    // A response's own `background` runs first, then the parameter's tasks.
    let response = server.request("POST", "/tasks?own=true").send().unwrap();
    assert_eq!(json(response), json!({"sent": true}));
    let mut seen = serde_json::Value::Null;
    assert!(eventually(Duration::from_secs(10), || {
        seen = json(server.get("/tasks"));
        seen["order"].as_array().map_or(0, Vec::len) == 7
    }));
    assert_eq!(seen["own"], json!(1));
    assert_eq!(
        seen["order"],
        json!(["audit", "slow", "async", "own", "audit", "slow", "async"]),
        "{seen}"
    );
}

#[test]
fn a_failing_background_task_is_logged_and_the_response_stands() {
    let project = Project::new(&[(
        "routes/fail/route.py",
        r#"
        from filerouter import BackgroundTasks, kv

        def first() -> None:
            kv.set("first", True)

        def explode(n: int) -> None:
            kv.set("exploding", n)
            raise ZeroDivisionError(f"task {n} divided by zero")

        def after() -> None:
            kv.set("after", True)

        def POST(request, tasks: BackgroundTasks):
            tasks.add_task(first)
            tasks.add_task(explode, 7)
            tasks.add_task(after)
            return {"created": 1}, 201, {"X-Kept": "yes"}

        def GET(request):
            return {k: kv.get(k) for k in ("first", "exploding", "after")}
        "#,
    )]);
    let server = Server::dev(&project);
    let response = server.request("POST", "/fail").send().unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["x-kept"], "yes");
    assert_eq!(json(response), json!({"created": 1}));
    assert!(
        eventually(Duration::from_secs(10), || server
            .log()
            .contains("task 7 divided by zero")),
        "{}",
        server.log()
    );
    let log = server.log();
    assert!(
        log.contains("POST /fail routes/fail/route.py: a background task failed"),
        "{log}"
    );
    assert!(
        log.contains("ZeroDivisionError: task 7 divided by zero at routes/fail/route.py:8"),
        "{log}"
    );
    // With its traceback, down to the task's own line.
    assert!(log.contains("Traceback (most recent call last)"), "{log}");
    assert!(log.contains("line 8, in explode"), "{log}");
    // The tasks before it ran; the ones after it did not (as in FastAPI).
    assert_eq!(
        json(server.get("/fail")),
        json!({"first": true, "exploding": 7, "after": null})
    );
    // The failure was the background's alone: no 500 was answered, and requests go on.
    assert!(!log.contains("POST /fail 500"), "{log}");
    assert_eq!(
        server.request("POST", "/fail").send().unwrap().status(),
        201
    );
}

#[test]
fn a_runaway_background_task_is_stopped_and_logged() {
    let project = Project::new(&[
        ("config.py", "sandbox = {\"cpu_ms\": 400, \"wall_s\": 2}\n"),
        (
            "routes/runaway/route.py",
            r#"
            import time
            from filerouter import BackgroundTasks, kv

            def spin() -> None:
                kv.set("spinning", True)
                while True:
                    pass

            def nap() -> None:
                kv.set("napping", True)
                time.sleep(30)
                kv.set("woke", True)

            def POST(request, tasks: BackgroundTasks, kind: str = "spin"):
                tasks.add_task(spin if kind == "spin" else nap)
                return {"ok": kind}

            def GET(request):
                return {k: kv.get(k) for k in ("spinning", "napping", "woke")}
            "#,
        ),
    ]);
    let server = Server::dev(&project);

    // Over the CPU limit: the response is sent at once, the task is stopped at 400 ms.
    let started = Instant::now();
    let response = server.request("POST", "/runaway").send().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(json(response), json!({"ok": "spin"}));
    assert!(started.elapsed() < Duration::from_millis(1500));
    assert!(
        eventually(Duration::from_secs(10), || server
            .log()
            .contains("background tasks stopped")),
        "{}",
        server.log()
    );
    let log = server.log();
    assert!(
        log.contains("POST /runaway routes/runaway/route.py: background tasks stopped (the response was sent already): the handler used"),
        "{log}"
    );
    assert!(log.contains("\"cpu_ms\""), "{log}");

    // Blocked past the wall-clock limit: stopped at 2 s, never woke.
    let response = server.request("POST", "/runaway?kind=nap").send().unwrap();
    assert_eq!(json(response), json!({"ok": "nap"}));
    assert!(
        eventually(Duration::from_secs(10), || server
            .log()
            .contains("\"wall_s\"")),
        "{}",
        server.log()
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        json(server.get("/runaway")),
        json!({"spinning": true, "napping": true, "woke": null})
    );
    // The server goes on serving.
    assert_eq!(server.get("/runaway").status(), 200);
}

/// A start-up hook that seeds data, counts its runs and sees the operator's values.
const STARTUP: &str = r#"
    import sqlite3
    from filerouter import env, kv, settings

    def startup():
        runs = kv.incr("startup-runs")
        conn = sqlite3.connect("app.db")
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS books (title TEXT PRIMARY KEY)")
            conn.execute("INSERT OR IGNORE INTO books VALUES ('Dune')")
        kv.set("seen", {"secret": len(env["ADMIN_TOKEN"]), "greeting": settings["greeting"], "runs": runs})
"#;

const STARTUP_ROUTE: &str = r#"
    import sqlite3
    from filerouter import kv

    def GET(request):
        titles = [row[0] for row in sqlite3.connect("app.db").execute("SELECT title FROM books")]
        return {"runs": kv.get("startup-runs"), "seen": kv.get("seen"), "titles": titles}
"#;

const STARTUP_CONFIG: &str = r#"
    environment = {"names": ["ADMIN_TOKEN"]}
    settings = {"greeting": "hello"}
"#;

#[test]
fn startup_runs_at_dev_start_and_after_every_reload() {
    let project = Project::new(&[
        ("config.py", STARTUP_CONFIG),
        ("startup.py", STARTUP),
        ("routes/books/route.py", STARTUP_ROUTE),
    ]);
    let server = Server::dev_with_env(&project, &[("ADMIN_TOKEN", "s3cret-token")]);
    assert_eq!(
        json(server.get("/books")),
        json!({
            "runs": 1,
            "seen": {"secret": 12, "greeting": "hello", "runs": 1},
            "titles": ["Dune"],
        })
    );
    assert!(server.log().contains("startup.py: startup() ran"));
    // A reload (any edit) runs it again: it must be idempotent, as with uvicorn --reload.
    project.write(
        "routes/books/route.py",
        &format!("{STARTUP_ROUTE}    # edited\n"),
    );
    assert!(
        eventually(
            Duration::from_secs(10),
            || json(server.get("/books"))["runs"] == json!(2)
        ),
        "{}",
        server.log()
    );
    assert_eq!(json(server.get("/books"))["titles"], json!(["Dune"]));
}

#[test]
fn a_failing_startup_is_the_error_page_of_every_request_until_fixed() {
    let project = Project::new(&[
        (
            "startup.py",
            r#"
            from filerouter import settings

            def startup():
                if "mail_host" not in settings:
                    raise RuntimeError("settings['mail_host'] is not set in config.py")
            "#,
        ),
        (
            "routes/index.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
    ]);
    let server = Server::dev(&project);
    for path in ["/", "/docs", "/nowhere"] {
        let response = server.get(path);
        assert_eq!(response.status(), 500, "{path}");
        let body = json(response);
        assert_eq!(body["error"]["type"], "StartupError", "{body}");
        assert_eq!(body["error"]["file"], "startup.py", "{body}");
        assert_eq!(body["error"]["line"], 5, "{body}");
        assert_eq!(
            body["error"]["message"],
            "startup() raised RuntimeError: settings['mail_host'] is not set in config.py",
            "{body}"
        );
    }
    // The browser's page names it too.
    let page = support::client()
        .get(server.url("/"))
        .header("Accept", "text/html")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(page.contains("startup.py"), "{page}");
    assert!(
        server
            .log()
            .contains("startup.py:5: StartupError: startup() raised RuntimeError"),
        "{}",
        server.log()
    );

    // A fix is picked up by itself.
    project.write("config.py", "settings = {\"mail_host\": \"localhost\"}\n");
    assert!(
        eventually(Duration::from_secs(10), || server.get("/").status() == 200),
        "{}",
        server.log()
    );
    assert_eq!(json(server.get("/")), json!({"ok": true}));

    // A startup.py without a startup() says so, at its line 1.
    project.write("startup.py", "def start():\n    pass\n");
    assert!(eventually(Duration::from_secs(10), || server
        .get("/")
        .status()
        == 500));
    let body = json(server.get("/"));
    assert_eq!(
        body["error"]["message"], "startup.py defines no `startup` function",
        "{body}"
    );
    assert_eq!(body["error"]["file"], "startup.py");
    assert_eq!(body["error"]["line"], 1);
}

#[test]
fn build_refuses_a_startup_py_that_fails_to_import_or_has_no_startup() {
    let project = Project::new(&[
        ("routes/index.py", "def GET(request):\n    return {}\n"),
        ("startup.py", "import json\n\ndef startup(:\n    pass\n"),
    ]);
    let (code, _, stderr) = run_with_env(&["build"], project.path(), &[]);
    assert_ne!(code, 0);
    assert!(stderr.contains("startup.py:3: SyntaxError"), "{stderr}");

    project.write("startup.py", "def setup():\n    pass\n");
    let (code, _, stderr) = run_with_env(&["build"], project.path(), &[]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("startup.py:1: ProjectCodeError: startup.py defines no `startup` function"),
        "{stderr}"
    );

    project.write("startup.py", "def startup(app):\n    pass\n");
    let (code, _, stderr) = run_with_env(&["build"], project.path(), &[]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains(
            "startup.py:1: ProjectCodeError: startup() must be callable without arguments"
        ),
        "{stderr}"
    );
    assert!(!project.path().join(".cache").exists());
}

#[test]
fn run_runs_startup_once_against_the_real_data_and_finishes_background_tasks() {
    let project = Project::new(&[
        ("config.py", STARTUP_CONFIG),
        ("startup.py", STARTUP),
        ("routes/books/route.py", STARTUP_ROUTE),
        ("routes/tasks/route.py", TASKS),
    ]);
    let (code, _, stderr) = run_with_env(&["build"], project.path(), &[]);
    assert_eq!(code, 0, "{stderr}");
    // The build ran no hook: it has no data of the project's.
    assert!(!project.path().join(".data").exists());

    let env = [("ADMIN_TOKEN", "s3cret-token")];
    let mut server = Server::run(&project, &env);
    assert_eq!(
        json(server.get("/books")),
        json!({
            "runs": 1,
            "seen": {"secret": 12, "greeting": "hello", "runs": 1},
            "titles": ["Dune"],
        })
    );
    // Background tasks in production, from the snapshot's modules.
    check_tasks_run_after_the_response(&server);

    // A stopping server finishes the background tasks of requests it answered.
    let response = server.request("POST", "/tasks").send().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(server.terminate(), Some(0));
    drop(server);

    // Started again, it runs the hook once more, on the same data.
    let server = Server::run(&project, &env);
    let books = json(server.get("/books"));
    assert_eq!(books["runs"], json!(2), "{books}");
    assert_eq!(books["titles"], json!(["Dune"]));
    let tasks = json(server.get("/tasks"));
    assert_eq!(
        tasks["order"],
        json!(["audit", "slow", "async", "audit", "slow", "async"]),
        "the stopping server did not finish the background tasks: {tasks}"
    );
    drop(server);

    // A failing hook stops `run`, naming the file and line.
    project.write(
        "startup.py",
        "from filerouter import kv\n\ndef startup():\n    kv.get('x')['missing']\n",
    );
    let (code, _, stderr) = run_with_env(&["build"], project.path(), &[]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = run_with_env(&["run", "--port", "0"], project.path(), &env);
    assert_ne!(code, 0, "{stdout}");
    assert!(
        stderr.contains("startup.py:4: StartupError: startup() raised TypeError"),
        "{stderr}"
    );
    assert!(stderr.contains("the server did not start"), "{stderr}");
}

#[test]
fn run_tenants_runs_each_tenants_startup_when_it_loads_and_refuses_one_that_fails() {
    let site = tempfile::tempdir().unwrap();
    let route =
        "from filerouter import kv\n\ndef GET(request):\n    return {'seeded': kv.get('seeded')}\n";
    let good = site.path().join("good");
    let bad = site.path().join("bad");
    for (dir, startup) in [
        (
            &good,
            "from filerouter import kv\n\ndef startup():\n    kv.set('seeded', kv.incr('runs'))\n",
        ),
        // It fails only when it runs: the build does not run it.
        (
            &bad,
            "def startup():\n    raise RuntimeError('no admin user')\n",
        ),
    ] {
        std::fs::create_dir_all(dir.join("routes")).unwrap();
        std::fs::write(dir.join("routes/index.py"), route).unwrap();
        std::fs::write(dir.join("startup.py"), startup).unwrap();
        let (code, _, stderr) = run_with_env(&["build", "--project", "."], dir, &[]);
        assert_eq!(code, 0, "{stderr}");
    }
    std::fs::write(
        site.path().join("tenants.toml"),
        "[tenant.good]\nhosts = [\"good.test\"]\nproject = \"good\"\n\n[tenant.bad]\nhosts = [\"bad.test\"]\nproject = \"bad\"\n",
    )
    .unwrap();
    let config = site.path().join("tenants.toml");
    let server = Server::start(
        &["run", "--tenants", config.to_str().unwrap()],
        &[],
        Duration::from_secs(120),
    );
    let get = |host: &str| {
        server
            .request("GET", "/")
            .header("host", host)
            .send()
            .unwrap()
    };
    let response = get("good.test");
    assert_eq!(response.status(), 200);
    assert_eq!(json(response), json!({"seeded": 1}));
    // Loaded once: the hook does not run again per request.
    assert_eq!(json(get("good.test")), json!({"seeded": 1}));
    assert_eq!(get("bad.test").status(), 503);
    assert!(
        eventually(Duration::from_secs(20), || server.log().contains(
            "startup.py:2: StartupError: startup() raised RuntimeError: no admin user"
        )),
        "{}",
        server.log()
    );
    // The other tenant goes on serving.
    assert_eq!(get("good.test").status(), 200);
}
