//! config.py: every setting takes effect, flags win over it, and mistakes name the line.

use crate::support;

use std::time::Duration;

use support::{Project, Server, eventually, free_port, json, run};

#[test]
fn server_settings_apply_and_flags_win() {
    let port = free_port();
    let project = Project::new(&[
        (
            "config.py",
            &format!("server = {{'host': '127.0.0.1', 'port': {port}, 'workers': 2}}\n"),
        ),
        ("routes/index.py", "def GET(request):\n    return {}\n"),
    ]);
    // Without --port, config.py's port is used (the harness passes --port 0: start by hand).
    let mut child = std::process::Command::new(support::binary())
        .args(["dev", "--project"])
        .arg(project.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/");
    let up = eventually(Duration::from_secs(60), || {
        support::client()
            .get(&url)
            .send()
            .is_ok_and(|r| r.status() == 200)
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(up, "config.py's port {port} was not used");
    // The flag wins over config.py.
    let server = Server::dev(&project);
    assert!(!server.base.ends_with(&format!(":{port}")));
    assert_eq!(server.get("/").status(), 200);
}

#[test]
fn logging_docs_info_debug_and_limits_take_effect() {
    let project = Project::new(&[
        (
            "config.py",
            r#"
            app_name = "inventory"
            title = "Inventory API"
            description = "Counts things."
            version = "2.3.4"
            debug = False
            docs_enabled = False
            logging = {"level": "WARNING", "production_level": "ERROR"}
            sandbox = {"memory_mb": 64, "timeout_s": 1, "max_body_bytes": 100}
            "#,
        ),
        (
            "routes/index.py",
            r#"
            import time

            def GET(request):
                return {}

            def POST(request):
                return {"ok": True}

            def PUT(request):
                time.sleep(5)

            def PATCH(request):
                return len(bytearray(200 * 1024 * 1024))

            def DELETE(request):
                raise ValueError("secret detail")
            "#,
        ),
        (
            "not-found.py",
            r#"
            def handler(request, context):
                info = context.get_project_info()
                return {k: info[k] for k in ("title", "description", "version", "app_name")}
            "#,
        ),
    ]);
    // The harness sets RUST_LOG for dev servers; an empty one leaves the level to config.py.
    let mut server = Server::dev_with_env(&project, &[("RUST_LOG", "")]);
    // docs off: /docs and /openapi.json are plain 404s (here: not-found.py's answer).
    let docs = server.get("/docs");
    assert_eq!(docs.status(), 404);
    assert_eq!(
        json(docs),
        serde_json::json!({"title": "Inventory API", "description": "Counts things.",
                           "version": "2.3.4", "app_name": "inventory"})
    );
    assert_eq!(server.get("/openapi.json").status(), 404);
    // Limits.
    let big = server
        .request("POST", "/")
        .body("x".repeat(101))
        .send()
        .unwrap();
    assert_eq!(big.status(), 413);
    assert_eq!(
        server
            .request("POST", "/")
            .body("x".repeat(100))
            .send()
            .unwrap()
            .status(),
        200
    );
    let slow = server.request("PUT", "/").send().unwrap();
    assert_eq!(slow.status(), 504);
    assert_eq!(
        json(slow),
        serde_json::json!({"detail": "Handler timed out"})
    );
    assert_eq!(server.request("PATCH", "/").send().unwrap().status(), 500);
    // debug = False: even dev reveals nothing.
    let failed = server.request("DELETE", "/").send().unwrap();
    assert_eq!(failed.status(), 500);
    assert!(failed.headers().contains_key("x-request-id"));
    assert_eq!(
        failed.text().unwrap(),
        r#"{"detail":"Internal Server Error"}"#
    );
    // logging.level = WARNING: no access lines for successful requests.
    assert!(server.is_running());
    assert!(!server.log().contains("GET /docs 404"), "{}", server.log());
    let _ = server.terminate();
}

#[test]
fn config_mistakes_name_the_line_and_dev_recovers() {
    for (source, line, needle) in [
        ("title = 'x'\nport = 8000\n", 2, "unknown setting 'port'"),
        (
            "title = 'x'\n\nserver = {'port': 'eighty'}\n",
            3,
            "'server['port']' must be of type int",
        ),
        ("debug = 'yes'\n", 1, "'debug' must be of type bool"),
        ("title = 'x'\ndocs_enabled = (\n", 2, "SyntaxError"),
        ("logging = {'level': 'LOUD'}\n", 1, "must be one of DEBUG"),
        ("commands = {'x': 1}\n", 1, "'commands' must be a dict"),
        (
            "sandbox = {'memory_mb': 64, 'cpus': 2}\n",
            1,
            "unknown key 'cpus'",
        ),
    ] {
        let project = Project::new(&[
            ("config.py", source),
            ("routes/index.py", "def GET(request):\n    return {}\n"),
        ]);
        let (code, _, stderr) = run(&["dev", "--project", ".", "--port", "0"], project.path());
        assert_ne!(code, 0, "{source}");
        assert!(
            stderr.contains(&format!("config.py:{line}")) && stderr.contains(needle),
            "{source:?}: {stderr}"
        );
        let (code, _, stderr) = run(&["build", "--project", "."], project.path());
        assert_ne!(code, 0);
        assert!(
            stderr.contains(&format!("config.py:{line}")),
            "build: {stderr}"
        );
    }

    // While dev runs: a broken edit keeps the last good settings and shows the error until fixed.
    let project = Project::new(&[
        ("config.py", "sandbox = {'max_body_bytes': 10}\n"),
        ("routes/index.py", "def POST(request):\n    return {}\n"),
    ]);
    let server = Server::dev(&project);
    let post = |n: usize| {
        server
            .request("POST", "/")
            .body("x".repeat(n))
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(post(11), 413);
    project.write("config.py", "sandbox = {'max_body_bytes': 10}\nbogus = 1\n");
    assert!(eventually(Duration::from_secs(10), || post(1) == 500));
    let error = json(server.request("POST", "/").send().unwrap());
    assert_eq!(error["error"]["file"], "config.py");
    assert_eq!(error["error"]["line"], 2);
    project.write("config.py", "sandbox = {'max_body_bytes': 20}\n");
    assert!(eventually(Duration::from_secs(10), || post(15) == 200));
    assert_eq!(post(21), 413);
}

#[test]
fn build_settings_choose_the_cache_folder_and_level() {
    let project = Project::new(&[
        (
            "config.py",
            "build = {'cache_dir': 'build-cache', 'compression_level': 2}\n",
        ),
        (
            "routes/index.py",
            "def GET(request):\n    return {'built': True}\n",
        ),
    ]);
    let (code, _, stderr) = run(&["build", "--project", "."], project.path());
    assert_eq!(code, 0, "{stderr}");
    let manifest = std::fs::read_to_string(project.path().join("build-cache/manifest.json"))
        .expect("the cache is in build.cache_dir");
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(manifest["compression_level"], 2);
    assert!(!project.path().join(".cache").exists());
    let (code, stdout, stderr) = run(&["status", "--project", "."], project.path());
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("build-cache"), "{stdout}");
    let server = Server::run(&project, &[]);
    assert_eq!(json(server.get("/")), serde_json::json!({"built": true}));
    drop(server);
    let (code, _, stderr) = run(&["clean", "--project", "."], project.path());
    assert_eq!(code, 0, "{stderr}");
    assert!(!project.path().join("build-cache").exists());
}

#[test]
fn server_workers_bounds_how_many_requests_run_at_once() {
    let project = Project::new(&[
        ("config.py", "server = {'workers': 1}\n"),
        (
            "routes/slow/route.py",
            r#"
            import time
            from filerouter import kv

            def GET(request):
                running = kv.incr("running")
                kv.set("most", max(kv.get("most", 0), running))
                time.sleep(0.3)
                kv.incr("running", -1)
                return {"running": running}

            def DELETE(request):
                return {"most": kv.get("most")}
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| assert_eq!(server.get("/slow").status(), 200));
        }
    });
    let most = json(server.request("DELETE", "/slow").send().unwrap());
    assert_eq!(most, serde_json::json!({"most": 1}));
}
