//! The command line: `init`, `dev`'s banner and errors, config.py, and hot reload.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::{Project, Server, eventually, json, run};

#[test]
fn init_creates_a_project_that_dev_serves() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run(&["init", "shop"], dir.path());
    assert_eq!(code, 0, "{stdout}{stderr}");
    let shop = dir.path().join("shop");
    for file in [
        "routes/index.py",
        "config.py",
        ".gitignore",
        "tests/test_routes.py",
        "pyproject.toml",
    ] {
        assert!(shop.join(file).is_file(), "{file} missing");
    }
    // A test that pytest runs with filerouter's TestClient, and filerouter as a development
    // dependency (tests/wheel.rs runs that test from the wheel).
    let pyproject = std::fs::read_to_string(shop.join("pyproject.toml")).unwrap();
    assert!(
        pyproject.contains("name = \"shop\"")
            && pyproject.contains("[dependency-groups]\ndev = [\"filerouter\", \"pytest\"]")
            && pyproject.contains("testpaths = [\"tests\"]"),
        "{pyproject}"
    );
    let test = std::fs::read_to_string(shop.join("tests/test_routes.py")).unwrap();
    assert!(
        test.contains("from filerouter.testing import TestClient"),
        "{test}"
    );
    assert!(shop.join("public").is_dir());
    let ignored = std::fs::read_to_string(shop.join(".gitignore")).unwrap();
    // The build cache, the project's data (its database and kv store) and its secrets (the
    // env file) stay out of git.
    assert!(
        ignored.contains(".cache/") && ignored.contains(".data/") && ignored.contains(".env\n"),
        "{ignored}"
    );
    let index = std::fs::read_to_string(shop.join("routes/index.py")).unwrap();
    assert!(index.contains("def GET") && index.contains("def POST") && index.contains("\"\"\""));

    // Serve it (the project folder is a tempdir owned by the test).
    let project = Project::new(&[]);
    for entry in ["routes/index.py", "config.py"] {
        project.write(entry, &std::fs::read_to_string(shop.join(entry)).unwrap());
    }
    let server = Server::dev(&project);
    assert_eq!(json(server.get("/")), json!({"message": "Hello, world!"}));
    assert_eq!(
        json(server.get("/?name=ann")),
        json!({"message": "Hello, ann!"})
    );
    let posted = server
        .request("POST", "/")
        .json(&json!({"x": 1}))
        .send()
        .unwrap();
    assert_eq!(posted.status(), 201);
    assert_eq!(json(posted), json!({"received": {"x": 1}}));

    // Never overwrites a non-empty folder.
    let (code, _, stderr) = run(&["init", "shop"], dir.path());
    assert_ne!(code, 0);
    assert!(stderr.contains("not empty"), "{stderr}");
}

#[test]
fn dev_banner_shows_url_mode_and_reload_state() {
    let project = Project::new(&[("routes/index.py", "def GET(request):\n    return {}\n")]);
    let server = Server::dev(&project);
    let log = server.log();
    let banner = log.lines().find(|l| l.contains("http://")).unwrap();
    assert!(
        banner.contains("development") && banner.contains("hot reload: on"),
        "{banner}"
    );
    assert!(
        !banner.contains(":0 "),
        "the banner must show the real port: {banner}"
    );
    assert_eq!(server.get("/").status(), 200);
    assert!(
        eventually(Duration::from_secs(20), || server
            .log()
            .contains("GET / 200")),
        "no access line:\n{}",
        server.log()
    );
    // Piped output (a file, a log collector) carries no colour escape codes.
    assert!(!server.log().contains('\u{1b}'), "{:?}", server.log());
}

/// `TOKIO_WORKER_THREADS` sets how many async threads a command runs; a value that is not a
/// whole number of threads, 1 or more, stops the command with a message naming it (Tokio's
/// own reading of it panicked).
#[test]
fn a_bad_async_thread_count_is_named_and_a_good_one_is_used() {
    let project = Project::new(&[("routes/route.py", "def GET(request):\n    return {}\n")]);
    for bad in ["abc", "0", "-1", "", "1.5", "99999999999999999999999"] {
        let (code, _, stderr) = support::run_with_env(
            &["build", "--project", "."],
            project.path(),
            &[("TOKIO_WORKER_THREADS", bad)],
        );
        assert_eq!(code, 1, "{bad:?}: {stderr}");
        assert!(
            stderr.contains("TOKIO_WORKER_THREADS must be a whole number of threads, 1 or more"),
            "{bad:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{bad:?}: {stderr}");
    }
    let (code, _, stderr) = support::run_with_env(
        &["build", "--project", "."],
        project.path(),
        &[("TOKIO_WORKER_THREADS", "3")],
    );
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn dev_without_routes_folder_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(
        &[
            "dev",
            "--project",
            dir.path().to_str().unwrap(),
            "--port",
            "0",
        ],
        dir.path(),
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("no routes/ folder"), "{stderr}");
}

#[test]
fn a_bad_config_stops_dev_with_file_and_line() {
    for (config, expected) in [
        ("title = 'x'\nbogus_setting = 1\n", "config.py:2"),
        ("title = 'x'\nserver = {'port': 'eighty'}\n", "config.py:2"),
        ("title = 'x'\n\ndebug = (\n", "config.py:3"),
    ] {
        let project = Project::new(&[
            ("routes/index.py", "def GET(request):\n    return {}\n"),
            ("config.py", config),
        ]);
        let (code, _, stderr) = run(
            &[
                "dev",
                "--project",
                project.path().to_str().unwrap(),
                "--port",
                "0",
            ],
            project.path(),
        );
        assert_ne!(code, 0, "{config}");
        assert!(stderr.contains(expected), "{config}: {stderr}");
    }
}

#[test]
fn hot_reload_picks_up_edits_additions_and_removals() {
    let project = Project::new(&[
        (
            "routes/index.py",
            "def GET(request):\n    return {'v': 1}\n",
        ),
        (
            "routes/gone/route.py",
            "def GET(request):\n    return {'here': True}\n",
        ),
    ]);
    let server = Server::dev(&project);
    assert_eq!(json(server.get("/")), json!({"v": 1}));

    project.write(
        "routes/index.py",
        "def GET(request):\n    return {'v': 2}\n",
    );
    assert!(eventually(Duration::from_secs(20), || json(
        server.get("/")
    ) == json!({"v": 2})));

    project.write(
        "routes/new/[id]/route.py",
        "def GET(request, id: int):\n    return {'id': id}\n",
    );
    assert!(eventually(Duration::from_secs(20), || server
        .get("/new/3")
        .status()
        == 200));
    assert_eq!(json(server.get("/new/3")), json!({"id": 3}));

    project.remove("routes/gone/route.py");
    assert!(eventually(Duration::from_secs(20), || server
        .get("/gone")
        .status()
        == 404));

    // A method added to a file is served; one removed is a 405.
    project.write(
        "routes/index.py",
        "def POST(request):\n    return {'posted': True}\n",
    );
    // Editors write in steps (truncate, then write): wait for the final state.
    assert!(eventually(Duration::from_secs(20), || {
        server.get("/").status() == 405
            && server.request("POST", "/").send().unwrap().status() == 200
    }));
    assert_eq!(
        json(server.request("POST", "/").send().unwrap()),
        json!({"posted": true})
    );

    // A broken edit affects only its file, and recovers when fixed.
    project.write("routes/index.py", "def POST(request:\n");
    assert!(eventually(Duration::from_secs(20), || server
        .request("POST", "/")
        .send()
        .unwrap()
        .status()
        == 500));
    assert_eq!(json(server.get("/new/4")), json!({"id": 4}));
    project.write(
        "routes/index.py",
        "def GET(request):\n    return {'v': 3}\n",
    );
    assert!(eventually(Duration::from_secs(20), || server
        .get("/")
        .status()
        == 200));
    assert_eq!(json(server.get("/")), json!({"v": 3}));
}

/// Hot reload follows imports (issue 25): a route that failed because a helper under
/// `routes/_lib/` failed to import recovers within a second of the helper's fix, without the
/// route file being touched; and an edit of a helper a working route imports (one level down
/// or two) reloads what `/openapi.json` says of the route.
#[test]
fn hot_reload_follows_the_files_a_route_imported() {
    let project = Project::new(&[
        ("routes/_lib/greeting.py", "def greet(:\n"),
        (
            "routes/hello/route.py",
            "from _lib.greeting import greet\n\ndef GET(request):\n    return {'message': greet()}\n",
        ),
        ("routes/_lib/__init__.py", ""),
        ("routes/_lib/paging.py", "from _lib.limits import page\n"),
        (
            "routes/_lib/limits.py",
            "def page(page: int = 1):\n    return page\n",
        ),
        (
            "routes/items/route.py",
            "from filerouter import Depends\nfrom _lib.paging import page\n\ndef GET(request, p=Depends(page)):\n    return {'page': p}\n",
        ),
    ]);
    // Helpers edited long before `dev` starts: their stamps are trusted, not re-inspected anyway.
    for helper in ["paging.py", "limits.py"] {
        let file = std::fs::File::options()
            .write(true)
            .open(project.path().join("routes/_lib").join(helper))
            .unwrap();
        file.set_modified(std::time::SystemTime::now() - Duration::from_secs(60))
            .unwrap();
    }
    let server = Server::dev(&project);
    assert_eq!(server.get("/hello").status(), 500);
    let query_names = |server: &Server| -> Vec<String> {
        json(server.get("/openapi.json"))["paths"]["/items"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(query_names(&server), ["page"]);

    // The helper is fixed; the route file is not touched.
    let fixed = std::time::Instant::now();
    project.write("routes/_lib/greeting.py", "def greet():\n    return 'hi'\n");
    assert!(
        eventually(Duration::from_secs(10), || server.get("/hello").status()
            == 200),
        "{}",
        server.log()
    );
    let took = fixed.elapsed();
    assert!(took < Duration::from_secs(1), "recovered after {took:?}");
    assert_eq!(json(server.get("/hello")), json!({"message": "hi"}));

    // A dependency two imports away gains a query parameter: /openapi.json shows it.
    project.write(
        "routes/_lib/limits.py",
        "def page(page: int = 1, size: int = 10):\n    return page\n",
    );
    assert!(
        eventually(Duration::from_secs(10), || query_names(&server)
            == ["page", "size"]),
        "{:?}",
        query_names(&server)
    );
}

#[test]
fn scan_errors_recover_when_fixed() {
    let project = Project::new(&[
        (
            "routes/a/index.py",
            "def GET(request):\n    return {'a': 1}\n",
        ),
        (
            "routes/b/route.py",
            "def GET(request):\n    return {'b': 1}\n",
        ),
    ]);
    let server = Server::dev(&project);
    assert_eq!(server.get("/b").status(), 200);
    project.write(
        "routes/a/route.py",
        "def GET(request):\n    return {'a': 2}\n",
    );
    assert!(eventually(Duration::from_secs(20), || server
        .get("/b")
        .status()
        == 500));
    project.remove("routes/a/index.py");
    assert!(eventually(Duration::from_secs(20), || server
        .get("/b")
        .status()
        == 200));
    assert_eq!(json(server.get("/a")), json!({"a": 2}));
}

#[test]
fn config_edits_apply_without_restart() {
    let project = Project::new(&[
        (
            "routes/upload/route.py",
            "async def POST(request):\n    return {'n': len(await request.body())}\n",
        ),
        ("config.py", "sandbox = {'max_body_bytes': 100}\n"),
    ]);
    let server = Server::dev(&project);
    let post = |n: usize| {
        server
            .request("POST", "/upload")
            .body(vec![b'x'; n])
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(post(200), 413);
    project.write("config.py", "sandbox = {'max_body_bytes': 1000}\n");
    assert!(eventually(Duration::from_secs(20), || post(200) == 200));
    // A broken edit answers every request with the error, naming config.py and the line...
    project.write("config.py", "sandbox = {'max_body_bytes': \n");
    assert!(eventually(Duration::from_secs(20), || post(200) == 500));
    let body = server.get("/upload").text().unwrap();
    assert!(body.contains("config.py"), "{body}");
    assert!(body.contains("\"line\":1"), "{body}");
    assert!(server.log_shows("config.py:1"), "{}", server.log());
    // ...and the fix is picked up without a restart.
    project.write("config.py", "sandbox = {'max_body_bytes': 1000}\n");
    assert!(eventually(Duration::from_secs(20), || post(200) == 200));
    assert_eq!(post(2000), 413);
}

#[test]
fn project_commands_run_with_host_and_port_and_are_listed_in_help() {
    let project = Project::new(&[
        (
            "config.py",
            r#"
            server = {"host": "0.0.0.0", "port": 9123}
            commands = {
                "where": "echo serving on {host}:{port}",
                "args": "printf '[%s]' ",
                "fail": "exit 7",
            }
            "#,
        ),
        ("routes/index.py", "def GET(request):\n    return {}\n"),
    ]);
    let (code, stdout, stderr) = run(&["where"], project.path());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), "serving on 0.0.0.0:9123");
    // Extra arguments are appended, quoted: no shell injection through them.
    let (code, stdout, _) = run(&["args", "a b", "$(echo hacked)", "c;d"], project.path());
    assert_eq!(code, 0);
    assert_eq!(stdout, "[a b][$(echo hacked)][c;d]");
    let (code, _, _) = run(&["fail"], project.path());
    assert_eq!(code, 7);
    let (code, _, stderr) = run(&["nope"], project.path());
    assert_ne!(code, 0);
    assert!(stderr.contains("unknown command `nope`"), "{stderr}");
    assert!(
        stderr.contains("where") && stderr.contains("args"),
        "{stderr}"
    );
    let (code, stdout, _) = run(&["--help"], project.path());
    assert_eq!(code, 0);
    assert!(stdout.contains("Project commands"), "{stdout}");
    assert!(stdout.contains("echo serving on {host}:{port}"), "{stdout}");
    assert!(
        stdout.contains("dev") && stdout.contains("build"),
        "{stdout}"
    );
    // Outside a project, help lists the built-in commands only.
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, stdout, _) = run(&["--help"], elsewhere.path());
    assert_eq!(code, 0);
    assert!(!stdout.contains("Project commands"), "{stdout}");
    let (code, _, stderr) = run(&["where"], elsewhere.path());
    assert_ne!(code, 0);
    assert!(stderr.contains("not a filerouter project"), "{stderr}");
}

/// `dev --overrides FILE` (the TestClient's `dependency_overrides=`): the file's
/// `dependency_overrides` replace the project's dependencies, a replacement's own parameters
/// are resolved; a file without the dict is named in the error; a missing file stops `dev`;
/// `run` has no such flag.
#[test]
fn dev_overrides_replace_dependencies_and_name_a_bad_file() {
    let project = Project::new(&[
        ("routes/_lib/__init__.py", ""),
        (
            "routes/_lib/deps.py",
            "def current_user():\n    return 'real'\n",
        ),
        (
            "routes/me/route.py",
            "from filerouter import Depends\nfrom _lib.deps import current_user\n\n\
             def GET(request, user: str = Depends(current_user)):\n    return {'user': user}\n",
        ),
        (
            "tests/overrides.py",
            "from _lib.deps import current_user\n\n\
             def fake(name: str = 'fake'):\n    return name\n\n\
             dependency_overrides = {current_user: fake}\n",
        ),
        (
            "tests/bad.py",
            "dependency_overrides = ['not', 'a', 'dict']\n",
        ),
    ]);
    let plain = Server::dev(&project);
    assert_eq!(json(plain.get("/me")), json!({"user": "real"}));
    drop(plain);

    let file = project.path().join("tests/overrides.py");
    let server = Server::dev_with_args(&project, &["--overrides", file.to_str().unwrap()]);
    assert_eq!(json(server.get("/me")), json!({"user": "fake"}));
    assert_eq!(json(server.get("/me?name=ann")), json!({"user": "ann"}));
    assert!(
        server
            .log()
            .contains("dependencies are overridden by tests/overrides.py")
    );
    drop(server);

    let bad = project.path().join("tests/bad.py");
    let server = Server::dev_with_args(&project, &["--overrides", bad.to_str().unwrap()]);
    let response = server.get("/me");
    assert_eq!(response.status(), 500);
    let body = json(response);
    assert_eq!(body["error"]["file"], "tests/bad.py", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("must define `dependency_overrides`, a dict"),
        "{body}"
    );
    drop(server);

    let (code, _, stderr) = run(
        &["dev", "--port", "0", "--overrides", "nowhere.py"],
        project.path(),
    );
    assert_ne!(code, 0);
    assert!(
        stderr.contains("--overrides: cannot read nowhere.py"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["run", "--overrides", "x.py"], project.path());
    assert_ne!(code, 0);
    assert!(stderr.contains("--overrides"), "{stderr}");
}

/// `dev` keeps the project imported, as a build does for `run`: the packages in one snapshot,
/// the routes in another on top of it, so that a request pays no import. The proof that a
/// request ran from the snapshot: a module-level random token, drawn once at import, is the
/// same in two requests (imported from source, each instance draws its own). Every request is
/// still a fresh instance (module-level lists start empty), and an edit of a helper or of a
/// package shows at once and is never served from a stale snapshot.
#[test]
fn dev_serves_from_a_snapshot_of_the_imported_project_and_never_a_stale_one() {
    let project = Project::dedented(&[
        (
            ".packages/counterpkg/__init__.py",
            r#"
            import os
            HITS = []
            VERSION = "1"
            TOKEN = os.urandom(8).hex()
            "#,
        ),
        ("routes/_lib/helper.py", "WORD = 'alpha'\n"),
        (
            "routes/index.py",
            r#"
            import os
            import counterpkg
            from _lib import helper

            LOCAL = []
            TOKEN = os.urandom(8).hex()

            def GET(request):
                counterpkg.HITS.append(1)
                LOCAL.append(1)
                return {
                    "hits": len(counterpkg.HITS),
                    "local": len(LOCAL),
                    "word": helper.WORD,
                    "version": counterpkg.VERSION,
                    "token": TOKEN,
                    "package_token": counterpkg.TOKEN,
                }
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let snapshots = |server: &Server, what: &str| server.log().matches(what).count();
    let taken = |server: &Server, what: &str, count: usize| {
        eventually(Duration::from_secs(60), || snapshots(server, what) >= count)
    };
    assert!(
        taken(&server, "packages imported once for every request", 1),
        "{}",
        server.log()
    );
    assert!(
        taken(&server, "routes imported once for every request", 1),
        "{}",
        server.log()
    );
    let first = json(server.get("/"));
    let second = json(server.get("/"));
    for answer in [&first, &second] {
        assert_eq!(answer["hits"], 1, "a request saw another's state: {answer}");
        assert_eq!(
            answer["local"], 1,
            "a request saw another's state: {answer}"
        );
        assert_eq!(answer["word"], "alpha");
        assert_eq!(answer["version"], "1");
    }
    assert_eq!(
        first["token"], second["token"],
        "the route was imported again by a request"
    );
    assert_eq!(first["package_token"], second["package_token"]);

    // A helper's edit shows at once (the reload serves from the packages' snapshot and
    // imports the routes from source), then from a new snapshot of the routes.
    project.write("routes/_lib/helper.py", "WORD = 'beta'\n");
    assert!(
        eventually(Duration::from_secs(30), || json(server.get("/"))["word"]
            == "beta"),
        "{}",
        server.log()
    );
    assert!(
        taken(&server, "routes imported once for every request", 2),
        "{}",
        server.log()
    );
    let third = json(server.get("/"));
    let fourth = json(server.get("/"));
    assert_eq!(third["word"], "beta", "a stale snapshot was served");
    assert_eq!(third["token"], fourth["token"]);
    assert_ne!(
        third["token"], first["token"],
        "the old snapshot is still served"
    );
    // The packages were not imported again for a route's edit.
    assert_eq!(third["package_token"], first["package_token"]);
    assert_eq!(
        snapshots(&server, "packages imported once for every request"),
        1
    );

    // A package's edit (`filerouter packages install` replaces the folder) takes the
    // packages' snapshot again.
    project.write(
        ".packages/counterpkg/__init__.py",
        "import os\nHITS = []\nVERSION = '2'\nTOKEN = os.urandom(8).hex()\n",
    );
    assert!(
        eventually(Duration::from_secs(60), || json(server.get("/"))["version"]
            == "2"),
        "{}",
        server.log()
    );
    assert!(
        taken(&server, "routes imported once for every request", 3),
        "{}",
        server.log()
    );
    let fifth = json(server.get("/"));
    assert_eq!(
        (fifth["version"].clone(), fifth["hits"].clone()),
        (json!("2"), json!(1))
    );
    assert_ne!(fifth["package_token"], first["package_token"]);
}

/// A command whose output goes to a pipe that is already closed (`filerouter status | true`)
/// exits quietly with status 0, whatever the command: no "Broken pipe" panic (status 101).
#[test]
fn every_command_writing_to_a_closed_pipe_exits_quietly() {
    let project = Project::new(&[("routes/index.py", "def GET(request):\n    return {}\n")]);
    let (code, _, stderr) = run(&["build", "--project", "."], project.path());
    assert_eq!(code, 0, "{stderr}");
    let commands: &[&[&str]] = &[
        &["--help"],
        &["--version"],
        &["status", "--project", "."],
        &["build", "--project", "."],
        &["build", "--project", ".", "--force"],
        &["db", "status", "--project", "."],
        &["packages", "--help"],
        &["init", "fresh"],
        &["help", "dev"],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = std::process::Command::new(support::binary())
            .args(*args)
            .current_dir(project.path())
            .env_remove("FILEROUTER_CACHE_KEY")
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
    }
}

/// A route that connects to the database at import time cannot be kept in a snapshot (the
/// connection would be stale in every later request), as `build` refuses it: `dev` serves that
/// project from source, as before, and says why once.
#[test]
fn dev_serves_a_route_that_connects_at_import_from_source() {
    let project = Project::dedented(&[(
        "routes/index.py",
        r#"
        import sqlite3

        connection = sqlite3.connect("app.db")
        connection.execute("select 1")

        def GET(request):
            return {"answer": connection.execute("select 42").fetchone()[0]}
        "#,
    )]);
    let server = Server::dev(&project);
    assert!(
        eventually(Duration::from_secs(60), || server
            .log()
            .contains("every request imports the routes from source")),
        "{}",
        server.log()
    );
    assert!(
        server
            .log()
            .contains("the database is not open while the server imports route modules"),
        "{}",
        server.log()
    );
    assert_eq!(json(server.get("/")), json!({"answer": 42}));
    assert_eq!(json(server.get("/")), json!({"answer": 42}));
}
