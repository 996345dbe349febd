//! Production: `filerouter build` writes the cache, `filerouter run` serves only from it, with
//! opaque error answers; every way a cache can be wrong is refused with one line.

use crate::support;

use std::{fs, thread, time::Duration};

use serde_json::json;
use support::{Project, Server, json, run, run_with_env};

const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const OTHER_KEY: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

fn shop() -> Project {
    Project::new(&[
        (
            "routes/index.py",
            "def GET(request):\n    return {'message': 'hello'}\n",
        ),
        (
            "routes/users/[user_id]/route.py",
            r#"
            from _lib.names import name_for

            COUNTER = [0]

            def GET(request, user_id: int):
                COUNTER[0] += 1
                return {"id": user_id, "name": name_for(user_id), "seen": COUNTER[0]}
            "#,
        ),
        (
            "routes/_lib/names.py",
            "def name_for(n):\n    return f'user{n}'\n",
        ),
        (
            "routes/items/route.py",
            "async def POST(request):\n    return {'received': await request.json()}, 201\n",
        ),
        (
            "routes/files/[...path]/route.py",
            "def GET(request, path: list):\n    return {'segments': path}\n",
        ),
        (
            "routes/boom/route.py",
            "SECRET = 'hunter2'\n\ndef GET(request):\n    raise RuntimeError('<b>leaked ' + SECRET + '</b>')\n",
        ),
        (
            "routes/slow/route.py",
            "import asyncio\n\nasync def GET(request):\n    await asyncio.sleep(1.5)\n    return {'slow': True}\n",
        ),
        (
            "routes/missing/route.py",
            "from filerouter import HTTPException\n\ndef GET(request):\n    raise HTTPException(404, 'no such thing')\n",
        ),
        ("config.py", "title = 'shop'\n"),
    ])
}

/// Requests whose answers must not depend on the mode.
const SAME_IN_BOTH: &[(&str, &str, Option<&str>)] = &[
    ("GET", "/", None),
    ("GET", "/users/42", None),
    ("GET", "/users/x", None),
    ("POST", "/items", Some(r#"{"name": "pen", "price": 2}"#)),
    ("GET", "/files/a/b/c.txt", None),
    ("GET", "/missing", None),
    ("GET", "/nowhere", None),
    ("DELETE", "/", None),
    ("GET", "/users/42/", None),
];

fn answers(server: &Server) -> Vec<(u16, String)> {
    SAME_IN_BOTH
        .iter()
        .map(|(method, path, body)| {
            let mut request = server.request(method, path);
            if let Some(body) = body {
                request = request
                    .header("content-type", "application/json")
                    .body(*body);
            }
            let response = request.send().unwrap();
            (response.status().as_u16(), response.text().unwrap())
        })
        .collect()
}

fn build(project: &Project, extra: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut args = vec!["build", "--project", "."];
    args.extend_from_slice(extra);
    run_with_env(&args, project.path(), env)
}

#[test]
fn build_then_run_serves_what_dev_serves_and_nothing_newer() {
    let project = shop();
    let dev_answers = {
        let dev = Server::dev(&project);
        answers(&dev)
    };

    let (code, stdout, stderr) = build(&project, &[], &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("[2/4]") && stderr.contains("[4/4]"),
        "{stderr}"
    );
    assert!(project.path().join(".cache/bundle.bin").is_file());
    let manifest: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(project.path().join(".cache/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["format"], 2);
    assert_eq!(manifest["compression_level"], 6);
    assert_eq!(manifest["routes"]["files"], 7);
    for section in manifest["sections"].as_array().unwrap() {
        assert!(
            section["compressed"].as_u64() < section["raw"].as_u64(),
            "{section}"
        );
    }

    // Unchanged sources: nothing to do without --force.
    let (code, _, stderr) = build(&project, &[], &[]);
    assert_eq!(code, 0);
    assert!(stderr.contains("up to date"), "{stderr}");

    // Edits, additions and even deleting routes/ after the build change nothing in `run`.
    project.write(
        "routes/index.py",
        "def GET(request):\n    return {'message': 'edited'}\n",
    );
    project.write(
        "routes/added/route.py",
        "def GET(request):\n    return {'added': True}\n",
    );
    let mut server = Server::run(&project, &[]);
    assert_eq!(answers(&server), dev_answers);
    assert_eq!(server.get("/added").status(), 404);
    assert!(server.log().contains("production"), "{}", server.log());

    // Module state is fresh for every request in production too.
    for _ in 0..3 {
        assert_eq!(json(server.get("/users/1"))["seen"], 1);
    }

    // Errors reveal nothing: not the file, the code, the message or the exception type.
    let response = server.get("/boom");
    assert_eq!(response.status(), 500);
    let id = response
        .headers()
        .get("x-request-id")
        .expect("x-request-id")
        .to_str()
        .unwrap()
        .to_string();
    let headers = format!("{:?}", response.headers());
    let body = response.text().unwrap();
    assert_eq!(body, r#"{"detail":"Internal Server Error"}"#);
    for secret in [
        "hunter2",
        "boom",
        "route.py",
        "RuntimeError",
        "leaked",
        "line",
    ] {
        assert!(!headers.contains(secret), "{secret} in {headers}");
    }
    // Browsers get the same opaque answer.
    let page = server
        .request("GET", "/boom")
        .header("accept", "text/html")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(page, r#"{"detail":"Internal Server Error"}"#);
    // The operator finds the traceback in the log under the id.
    assert!(
        support::eventually(Duration::from_secs(20), || {
            let log = server.log();
            log.contains(&id)
                && log.contains("RuntimeError")
                && log.contains("routes/boom/route.py")
        }),
        "{}",
        server.log()
    );
    // Production logs warnings and errors, and one access line per request (issue 45).
    assert!(
        server.log_shows("GET /users/1 200"),
        "no access line:\n{}",
        server.log()
    );

    // SIGTERM: stop accepting, finish the request in flight, exit 0.
    let url = server.url("/slow");
    let slow = thread::spawn(move || support::client().get(url).send().unwrap());
    thread::sleep(Duration::from_millis(400));
    assert_eq!(server.terminate(), Some(0), "{}", server.log());
    let response = slow.join().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(json(response), json!({"slow": true}));

    // The cache alone is a deployable artifact: another folder without routes/ serves it.
    let elsewhere = Project::new(&[]);
    fs::remove_dir(elsewhere.path().join("routes")).unwrap();
    fs::create_dir(elsewhere.path().join(".cache")).unwrap();
    for file in ["bundle.bin", "manifest.json"] {
        fs::copy(
            project.path().join(".cache").join(file),
            elsewhere.path().join(".cache").join(file),
        )
        .unwrap();
    }
    let copied = Server::run(&elsewhere, &[]);
    assert_eq!(answers(&copied), dev_answers);

    // status and clean.
    let (code, stdout, _) = run(&["status"], project.path());
    assert_eq!(code, 0);
    assert!(
        stdout.contains("7 files") && stdout.contains("encrypted:   no"),
        "{stdout}"
    );
    let (code, stdout, _) = run(&["clean"], project.path());
    assert_eq!(code, 0, "{stdout}");
    assert!(!project.path().join(".cache").exists());
    let (_, stdout, _) = run(&["status"], project.path());
    assert!(stdout.contains("no build"), "{stdout}");
    let (code, _, stderr) = run(&["run", "--port", "0"], project.path());
    assert_ne!(code, 0);
    assert!(stderr.contains("no build cache"), "{stderr}");
}

#[test]
fn broken_caches_are_refused_with_one_line() {
    let project = Project::new(&[(
        "routes/index.py",
        "def GET(request):\n    return {'ok': True}\n",
    )]);
    let (code, stdout, stderr) = build(&project, &["--encrypt", "--compression", "1"], &[]);
    assert_ne!(code, 0, "{stdout}");
    assert!(stderr.contains("FILEROUTER_CACHE_KEY"), "{stderr}");
    let (code, _, stderr) = build(&project, &["--encrypt"], &[("FILEROUTER_CACHE_KEY", "abc")]);
    assert_ne!(code, 0);
    assert!(stderr.contains("64 hexadecimal"), "{stderr}");
    for level in ["0", "10"] {
        let (code, _, stderr) = build(&project, &["--compression", level], &[]);
        assert_ne!(code, 0, "level {level} accepted");
        assert!(stderr.contains("compression"), "{stderr}");
    }
    assert!(!project.path().join(".cache").exists());

    let key = [("FILEROUTER_CACHE_KEY", KEY)];
    let (code, stdout, stderr) = build(&project, &["--encrypt", "--compression", "1"], &key);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("encrypted"), "{stdout}");
    let bundle = project.path().join(".cache/bundle.bin");
    let good = fs::read(&bundle).unwrap();
    assert!(
        !good.windows(7).any(|w| w == b"GET(req"),
        "the cache is not encrypted"
    );

    // With the key it serves.
    let server = Server::run(&project, &key);
    assert_eq!(json(server.get("/")), json!({"ok": true}));
    drop(server);

    let refused = |env: &[(&str, &str)], expect: &str| {
        let (code, stdout, stderr) = run_with_env(&["run", "--port", "0"], project.path(), env);
        assert_ne!(code, 0, "{stdout}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expect), "expected {expect:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    };
    refused(&[], "set FILEROUTER_CACHE_KEY");
    refused(
        &[("FILEROUTER_CACHE_KEY", OTHER_KEY)],
        "wrong FILEROUTER_CACHE_KEY",
    );
    refused(&[("FILEROUTER_CACHE_KEY", "not-hex")], "64 hexadecimal");

    // One flipped byte anywhere is refused; so is a truncated file or another format.
    for position in [20, good.len() / 2, good.len() - 40, good.len() - 1] {
        let mut bad = good.clone();
        bad[position] ^= 0x20;
        fs::write(&bundle, &bad).unwrap();
        refused(&key, "modified");
    }
    fs::write(&bundle, &good[..good.len() / 3]).unwrap();
    refused(&key, "cache");
    let mut other = good.clone();
    other[8] = 7;
    fs::write(&bundle, &other).unwrap();
    refused(&key, "format 7");
    fs::write(&bundle, b"hello").unwrap();
    refused(&key, "not a filerouter build cache");
    fs::write(&bundle, &good).unwrap();
    let server = Server::run(&project, &key);
    assert_eq!(json(server.get("/")), json!({"ok": true}));
    drop(server);

    // `build` checks the bundle itself, not the readable manifest.json beside it: a damaged
    // bundle, or one sealed with another key, is built again rather than called up to date.
    let rebuilt = |env: &[(&str, &str)], expect: &str| {
        let (code, stdout, stderr) = build(&project, &["--encrypt", "--compression", "1"], env);
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        assert!(!stderr.contains("up to date"), "{stderr}");
        assert!(stderr.contains(expect), "expected {expect:?}: {stderr}");
        assert!(stderr.contains("[4/4]"), "{stderr}");
        let server = Server::run(&project, env);
        assert_eq!(json(server.get("/")), json!({"ok": true}));
    };
    let mut bad = good.clone();
    let middle = bad.len() / 2;
    bad[middle] ^= 0x20;
    fs::write(&bundle, &bad).unwrap();
    rebuilt(&key, "modified");
    let other_key = [("FILEROUTER_CACHE_KEY", OTHER_KEY)];
    rebuilt(&other_key, "wrong FILEROUTER_CACHE_KEY");
    let (code, _, stderr) = build(&project, &["--encrypt", "--compression", "1"], &other_key);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("up to date"), "{stderr}");
}

#[test]
fn failing_builds_name_the_problem_and_keep_the_old_cache() {
    let project = Project::new(&[
        (
            "routes/index.py",
            "def GET(request):\n    return {'v': 1}\n",
        ),
        (
            "routes/other/route.py",
            "def GET(request):\n    return {}\n",
        ),
    ]);
    let (code, _, stderr) = build(&project, &["--compression", "1"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let bundle = project.path().join(".cache/bundle.bin");
    let good = fs::read(&bundle).unwrap();

    project.write("routes/other/route.py", "def GET(request):\n    return {\n");
    let (code, _, stderr) = build(&project, &["--force"], &[]);
    assert_ne!(code, 0);
    assert!(stderr.contains("routes/other/route.py:2"), "{stderr}");
    assert!(stderr.contains("SyntaxError"), "{stderr}");

    project.write(
        "routes/other/route.py",
        "def GET(request):\n    return {}\n",
    );
    project.write(
        "routes/other/index.py",
        "def GET(request):\n    return {}\n",
    );
    let (code, _, stderr) = build(&project, &["--force"], &[]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("routes/other/index.py") && stderr.contains("routes/other/route.py"),
        "{stderr}"
    );
    project.remove("routes/other/index.py");

    project.write("config.py", "server = {'workers': 'many'}\n");
    let (code, _, stderr) = build(&project, &["--force"], &[]);
    assert_ne!(code, 0);
    assert!(stderr.contains("config.py:1"), "{stderr}");

    assert_eq!(
        fs::read(&bundle).unwrap(),
        good,
        "a failed build touched the cache"
    );
    let server = Server::run(&project, &[]);
    assert_eq!(json(server.get("/")), json!({"v": 1}));
}

#[test]
fn production_errors_reveal_nothing() {
    let project = Project::new(&[
        (
            "routes/raise/route.py",
            "def GET(request):\n    raise ValueError('<script>secret_value</script>')\n",
        ),
        (
            "routes/name/[user_id]/route.py",
            "def GET(request, user_id: int):\n    return {'id': userid}\n",
        ),
        (
            "routes/shape/[user_id]/route.py",
            "def GET(request):\n    return {}\n",
        ),
        (
            "routes/serialize/route.py",
            "class Secret:\n    pass\n\ndef GET(request):\n    return {'x': Secret()}\n",
        ),
        (
            "routes/spin/route.py",
            "def GET(request):\n    while True:\n        pass\n",
        ),
        (
            "routes/hog/route.py",
            "def GET(request):\n    data = []\n    while True:\n        data.append(bytearray(1 << 20))\n",
        ),
        (
            "routes/dep/route.py",
            "from filerouter import Depends\n\ndef db():\n    raise RuntimeError('dep_secret')\n\ndef GET(request, conn=Depends(db)):\n    return {}\n",
        ),
        (
            "middleware.py",
            "async def middleware(request, call_next):\n    if request.path == '/mw':\n        raise KeyError('mw_secret')\n    return await call_next(request)\n",
        ),
        (
            "docs.py",
            "def handler(request, context):\n    raise ValueError('docs_secret')\n",
        ),
        (
            "not-found.py",
            "def handler(request, context):\n    return 1 / 0\n",
        ),
        ("config.py", "sandbox = {'timeout_s': 1, 'memory_mb': 64}\n"),
    ]);
    let (code, _, stderr) = build(&project, &["--compression", "1"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let server = Server::run(&project, &[]);
    let cases = [
        ("/dep", 500),
        ("/mw", 500),
        ("/docs", 500),
        ("/nowhere", 500),
        ("/raise", 500),
        ("/name/3", 500),
        ("/shape/3", 500),
        ("/serialize", 500),
        ("/spin", 504),
        ("/hog", 500),
    ];
    for (path, status) in cases {
        for accept in ["application/json", "text/html"] {
            let response = server
                .request("GET", path)
                .header("accept", accept)
                .send()
                .unwrap();
            assert_eq!(response.status(), status, "{path}");
            let mut names: Vec<String> = response
                .headers()
                .keys()
                .map(|k| k.as_str().to_string())
                .collect();
            names.sort();
            assert_eq!(
                names,
                ["content-length", "content-type", "date", "x-request-id"],
                "{path}"
            );
            let body = response.text().unwrap();
            let expected = if status == 504 {
                r#"{"detail":"Handler timed out"}"#
            } else {
                r#"{"detail":"Internal Server Error"}"#
            };
            assert_eq!(body, expected, "{path}");
        }
    }
    // Everything is in the log for the operator.
    let log = server.log();
    for needle in [
        "secret_value",
        "routes/name/[user_id]/route.py",
        "Secret",
        "dep_secret",
        "mw_secret",
        "docs_secret",
        "not-found.py",
    ] {
        assert!(log.contains(needle), "{needle} not logged:\n{log}");
    }
}

#[test]
fn build_says_when_public_files_must_be_deployed_beside_the_cache() {
    let project = Project::new(&[(
        "routes/index.py",
        "def GET(request):\n    return {'v': 1}\n",
    )]);
    // No public/: nothing is said.
    let (code, _, stderr) = build(&project, &["--compression", "1"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("public/"), "{stderr}");

    // Only names `run` never serves (.gitkeep, names starting with a dot): nothing either.
    fs::create_dir_all(project.path().join("public/css")).unwrap();
    fs::write(project.path().join("public/.gitkeep"), "").unwrap();
    fs::write(project.path().join("public/css/.hidden"), "x").unwrap();
    let (code, _, stderr) = build(&project, &["--force", "--compression", "1"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("public/"), "{stderr}");

    // Files it serves: counted with their size, after a build and when the cache is up to date.
    fs::write(project.path().join("public/logo.svg"), vec![b'x'; 1000]).unwrap();
    fs::write(project.path().join("public/css/site.css"), vec![b'y'; 1048]).unwrap();
    let note = "note: public/ (2 files, 2.0 KiB) is not in .cache/: `filerouter run` serves it from the project folder, so deploy public/ beside .cache/ (the Dockerfile does)\n";
    for (extra, up_to_date) in [
        (&["--force", "--compression", "1"][..], false),
        (&["--compression", "1"][..], true),
    ] {
        let (code, stdout, stderr) = build(&project, extra, &[]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stderr.contains("up to date"), up_to_date, "{stderr}");
        assert_eq!(stderr.matches("note: public/").count(), 1, "{stderr}");
        assert!(stderr.contains(note), "{stderr}");
        assert!(!stdout.contains("public/"), "{stdout}");
    }
}
