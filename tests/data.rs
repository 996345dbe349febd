//! Data that lasts: the project's SQLite database (`import sqlite3`, `filerouter.db`), its
//! migrations, and the durable kv store, through the real binary, real HTTP and a real file.

use crate::support;

use std::time::Duration;

use support::{Project, Server, client, eventually, json, run_with_env};

/// A migration and routes over a `posts` table: list, create (kv counts creates), and a few
/// that fail in ways the request cannot recover from.
fn blog() -> Project {
    Project::new(&[
        (
            "migrations/0001_posts.sql",
            "CREATE TABLE posts (\n    id INTEGER PRIMARY KEY,\n    title TEXT NOT NULL UNIQUE\n);\n",
        ),
        ("config.py", "sandbox = {\"wall_s\": 2}\n"),
        (
            "routes/_lib/db.py",
            r#"
            import sqlite3

            def get_db():
                conn = sqlite3.connect("app.db")
                conn.row_factory = sqlite3.Row
                try:
                    yield conn
                finally:
                    conn.close()
            "#,
        ),
        (
            "routes/posts/route.py",
            r#"
            import sqlite3
            from filerouter import Depends, HTTPException, kv
            from _lib.db import get_db

            def GET(request, skip: int = 0, limit: int = 100, conn=Depends(get_db)):
                rows = conn.execute("SELECT id, title FROM posts ORDER BY id LIMIT ? OFFSET ?", (limit, skip))
                return [dict(row) for row in rows]

            async def POST(request, conn=Depends(get_db)):
                body = await request.json()
                try:
                    with conn:
                        cur = conn.execute("INSERT INTO posts (title) VALUES (:title)", {"title": body["title"]})
                except sqlite3.IntegrityError as e:
                    raise HTTPException(409, str(e))
                kv.incr("creates")
                return {"id": cur.lastrowid}, 201
            "#,
        ),
        (
            "routes/count/route.py",
            r#"
            import sqlite3
            from filerouter import kv

            def GET(request):
                conn = sqlite3.connect("app.db")
                (n,) = conn.execute("SELECT count(*) FROM posts").fetchone()
                return {"rows": n, "creates": kv.get("creates", 0)}
            "#,
        ),
        (
            "routes/fail/[how]/route.py",
            r#"
            import asyncio, os, sqlite3, time

            async def POST(request, how: str):
                conn = sqlite3.connect("app.db")
                conn.execute("INSERT INTO posts (title) VALUES (?)", (f"uncommitted-{how}",))
                if how == "raise":
                    raise RuntimeError("after the insert")
                if how == "sleep":
                    time.sleep(30)
                if how == "abort":
                    os.abort()
                if how == "hold":
                    await asyncio.sleep(1.5)
                return {"returned": "without commit"}
            "#,
        ),
        (
            "routes/sql/route.py",
            r#"
            import sqlite3
            from filerouter import db

            def GET(request, q: str, script: bool = False):
                conn = db.connect()
                try:
                    if script:
                        conn.executescript(q)
                        return {"rows": []}
                    return {"rows": [list(r) for r in conn.execute(q).fetchall()]}
                except sqlite3.Error as e:
                    return {"error": type(e).__name__, "bases": [c.__name__ for c in type(e).__mro__], "message": str(e)}, 400
            "#,
        ),
    ])
}

fn count(server: &Server) -> serde_json::Value {
    json(server.get("/count"))
}

fn post(server: &Server, title: &str) -> reqwest::blocking::Response {
    server
        .request("POST", "/posts")
        .json(&serde_json::json!({ "title": title }))
        .send()
        .expect("POST /posts")
}

/// `GET /sql?q=...`: the rows, or the exception's type and message.
fn sql(server: &Server, q: &str) -> serde_json::Value {
    json(
        client()
            .get(server.url("/sql"))
            .query(&[("q", q)])
            .send()
            .expect("GET /sql"),
    )
}

#[test]
fn committed_rows_and_kv_survive_a_restart() {
    let project = blog();
    let mut server = Server::dev(&project);
    for title in ["one", "two", "three"] {
        assert_eq!(post(&server, title).status(), 201);
    }
    let duplicate = post(&server, "two");
    assert_eq!(duplicate.status(), 409);
    assert!(
        json(duplicate)["detail"]
            .as_str()
            .unwrap()
            .contains("UNIQUE constraint failed: posts.title")
    );
    assert_eq!(count(&server), serde_json::json!({"rows": 3, "creates": 3}));
    server.terminate();

    // A new process on the same data folder: the same rows, the same kv.
    let server = Server::dev(&project);
    assert_eq!(count(&server), serde_json::json!({"rows": 3, "creates": 3}));
    let titles = json(server.get("/posts?skip=1&limit=5"));
    assert_eq!(
        titles,
        serde_json::json!([{"id": 2, "title": "two"}, {"id": 3, "title": "three"}])
    );
    assert!(project.path().join(".data/db.sqlite3").is_file());
}

#[test]
fn fifty_concurrent_creates_keep_fifty() {
    let project = blog();
    let server = Server::dev(&project);
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..50)
            .map(|i| {
                let server = &server;
                scope.spawn(move || post(server, &format!("post {i}")).status().as_u16())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(statuses.iter().all(|&s| s == 201), "{statuses:?}");
    assert_eq!(
        count(&server),
        serde_json::json!({"rows": 50, "creates": 50})
    );
}

#[test]
fn uncommitted_work_is_rolled_back_however_the_request_ends() {
    let project = blog();
    let server = Server::dev(&project);
    assert_eq!(post(&server, "kept").status(), 201);
    for (how, status) in [
        ("raise", 500),
        ("sleep", 504),
        ("abort", 500),
        ("return", 200),
    ] {
        let response = server
            .request("POST", &format!("/fail/{how}"))
            .send()
            .unwrap();
        assert_eq!(
            response.status(),
            status,
            "{how}: {}",
            response.text().unwrap()
        );
        assert_eq!(count(&server)["rows"], 1, "{how} left its row behind");
    }
    // While one request holds an uncommitted row, another does not see it.
    std::thread::scope(|scope| {
        let holder = scope.spawn(|| server.request("POST", "/fail/hold").send().unwrap());
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(count(&server)["rows"], 1);
        assert_eq!(holder.join().unwrap().status(), 200);
    });
    assert_eq!(count(&server)["rows"], 1);
    // And the server took every new request meanwhile.
    assert_eq!(post(&server, "after").status(), 201);
}

#[test]
fn hostile_statements_get_a_clear_error_and_change_nothing() {
    let project = blog();
    let server = Server::dev(&project);
    assert_eq!(post(&server, "a").status(), 201);
    let outside = project.path().join("outside.db");
    let outside = outside.display();
    let cases = [
        (
            format!("ATTACH DATABASE '{outside}' AS x"),
            "NotAllowed",
            "ATTACH",
        ),
        ("ATTACH ':memory:' AS m".to_string(), "NotAllowed", "ATTACH"),
        ("DETACH DATABASE main".to_string(), "NotAllowed", "DETACH"),
        ("VACUUM".to_string(), "NotAllowed", "VACUUM"),
        (format!("VACUUM INTO '{outside}'"), "NotAllowed", "VACUUM"),
        (
            "/* hidden */ vacuum main INTO '/tmp/x.db'".to_string(),
            "NotAllowed",
            "VACUUM",
        ),
        (
            "SELECT load_extension('/usr/lib/x.so')".to_string(),
            "NotAllowed",
            "load_extension",
        ),
        (
            "PRAGMA journal_mode = OFF".to_string(),
            "NotAllowed",
            "PRAGMA journal_mode",
        ),
        (
            "PRAGMA synchronous = OFF".to_string(),
            "NotAllowed",
            "PRAGMA synchronous",
        ),
        (
            "PRAGMA writable_schema = ON".to_string(),
            "NotAllowed",
            "PRAGMA writable_schema",
        ),
        (
            "PRAGMA database_list".to_string(),
            "NotAllowed",
            "PRAGMA database_list",
        ),
        (
            "PRAGMA temp_store_directory = '/tmp'".to_string(),
            "NotAllowed",
            "temp_store_directory",
        ),
        (
            "PRAGMA mmap_size = 1000000000".to_string(),
            "NotAllowed",
            "mmap_size",
        ),
        (
            "PRAGMA max_page_count = 1000000000".to_string(),
            "NotAllowed",
            "max_page_count",
        ),
        (
            "PRAGMA busy_timeout = 100000".to_string(),
            "NotAllowed",
            "busy_timeout",
        ),
        (
            "SELECT * FROM _filerouter_migrations".to_string(),
            "NotAllowed",
            "_filerouter_migrations",
        ),
        (
            "DELETE FROM _FILEROUTER_MIGRATIONS".to_string(),
            "NotAllowed",
            "_filerouter_migrations",
        ),
        (
            "DROP TABLE _filerouter_migrations".to_string(),
            "NotAllowed",
            "_filerouter_migrations",
        ),
        (
            "CREATE TABLE _filerouter_mine (x)".to_string(),
            "NotAllowed",
            "_filerouter_mine",
        ),
        (
            "UPDATE sqlite_master SET sql = 'x'".to_string(),
            "OperationalError",
            "sqlite_master",
        ),
        (
            "SELECT 1; SELECT 2".to_string(),
            "ProgrammingError",
            "one statement at a time",
        ),
    ];
    for (q, kind, says) in &cases {
        let answer = sql(&server, q);
        assert_eq!(answer["error"], *kind, "{q}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(says),
            "{q}: {answer}"
        );
    }
    // The guard's refusals are OperationalErrors, so DB-API code that catches those works.
    let refused = sql(&server, "VACUUM");
    assert!(
        refused["bases"]
            .as_array()
            .unwrap()
            .contains(&"OperationalError".into())
    );
    // Through a view and a trigger (compiled into the statement that uses them): refused too.
    sql(
        &server,
        "CREATE VIEW peek AS SELECT * FROM _filerouter_migrations",
    );
    assert_eq!(sql(&server, "SELECT * FROM peek")["error"], "NotAllowed");
    // A trigger is refused when it is created or, at the latest, when a statement fires it.
    let trigger = sql(
        &server,
        "CREATE TRIGGER wipe AFTER INSERT ON posts BEGIN DELETE FROM _filerouter_migrations; END",
    );
    let mut posts = 1;
    if trigger["error"].is_null() {
        assert_ne!(post(&server, "b").status(), 201);
        sql(&server, "DROP TRIGGER wipe");
    } else {
        assert_eq!(trigger["error"], "NotAllowed", "{trigger}");
    }
    // A script is checked statement by statement.
    let script = json(
        client()
            .get(server.url("/sql"))
            .query(&[
                ("q", "CREATE TABLE ok (x); ATTACH ':memory:' AS m;"),
                ("script", "true"),
            ])
            .send()
            .unwrap(),
    );
    assert_eq!(script["error"], "NotAllowed", "{script}");
    // Nothing reached outside, and the data and the kv are whole.
    assert!(!project.path().join("outside.db").exists());
    assert!(!std::path::Path::new("/tmp/x.db").exists());
    assert_eq!(
        count(&server),
        serde_json::json!({"rows": posts, "creates": posts})
    );
    assert_eq!(post(&server, "c").status(), 201);
    posts += 1;
    assert_eq!(
        count(&server),
        serde_json::json!({"rows": posts, "creates": posts})
    );
}

#[test]
fn a_pooled_connection_carries_nothing_to_the_next_request() {
    let project = blog();
    let server = Server::dev(&project);
    // The same statements again and again: a connection's statement cache must not let a
    // repeated PRAGMA slip past the guard (and so past the reset).
    for round in 0..20 {
        // What one request may change on its connection...
        let mut changes = vec![
            "PRAGMA foreign_keys = ON",
            "PRAGMA query_only = ON",
            "PRAGMA recursive_triggers = ON",
        ];
        // (A temporary table closes its connection instead: only every fifth round.)
        if round % 5 == 4 {
            changes.push("CREATE TEMP TABLE leftover (secret)");
        }
        for q in changes {
            sql(&server, q);
        }
        // ...the next one does not find.
        assert_eq!(
            sql(&server, "PRAGMA foreign_keys")["rows"],
            serde_json::json!([[0]]),
            "round {round}"
        );
        assert_eq!(
            sql(&server, "PRAGMA query_only")["rows"],
            serde_json::json!([[0]])
        );
        assert_eq!(
            sql(&server, "SELECT count(*) FROM temp.sqlite_master")["rows"],
            serde_json::json!([[0]])
        );
        // A write still works (query_only did not stay on).
        assert_eq!(
            sql(&server, "INSERT INTO posts (title) VALUES (random())")["rows"],
            serde_json::json!([])
        );
    }
}

#[test]
fn limits_give_a_clear_error_and_the_server_goes_on() {
    let project = blog();
    project.write(
        "config.py",
        "sandbox = {\"wall_s\": 2}\ndatabase = {\"max_rows\": 100, \"max_result_mb\": 1, \"max_size_mb\": 2}\n",
    );
    let server = Server::dev(&project);
    let many = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) SELECT i FROM n";
    let answer = sql(&server, many);
    assert_eq!(answer["error"], "LimitExceeded", "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("max_rows"));
    let wide = "SELECT zeroblob(600000) UNION ALL SELECT zeroblob(600001)";
    let answer = sql(&server, wide);
    assert_eq!(answer["error"], "LimitExceeded", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("max_result_mb")
    );
    // The database stops growing at its size limit, and keeps what it had. (A script runs
    // in autocommit mode: each insert is committed.)
    let script = |q: &str| {
        json(
            client()
                .get(server.url("/sql"))
                .query(&[("q", q), ("script", "true")])
                .send()
                .unwrap(),
        )
    };
    script("CREATE TABLE blobs (b BLOB)");
    let mut full = serde_json::Value::Null;
    let mut stored = 0;
    for _ in 0..10 {
        full = script("INSERT INTO blobs VALUES (zeroblob(500000))");
        if !full["error"].is_null() {
            break;
        }
        stored += 1;
    }
    assert_eq!(full["error"], "LimitExceeded", "{full}");
    assert!(full["message"].as_str().unwrap().contains("max_size_mb"));
    assert!(stored >= 2, "{stored}");
    assert_eq!(
        sql(&server, "SELECT count(*) FROM blobs")["rows"],
        serde_json::json!([[stored]])
    );
    // A statement that never ends is stopped at the request's time limit.
    let started = std::time::Instant::now();
    let endless = client()
        .get(server.url("/sql"))
        .query(&[("q", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n")])
        .send()
        .unwrap();
    assert!(
        matches!(endless.status().as_u16(), 400 | 504),
        "{}",
        endless.status()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(post(&server, "still serving").status(), 201);
    assert_eq!(count(&server)["rows"], 1);
}

#[test]
fn the_build_imports_routes_without_a_database() {
    let project = blog();
    project.write(
        "routes/eager/route.py",
        r#"
        import sqlite3
        conn = sqlite3.connect("app.db")   # at import time: refused during the build

        def GET(request):
            return {}
        "#,
    );
    let stderr = failed_build(&project);
    assert!(
        stderr.contains("the database is not open while the server imports route modules"),
        "{stderr}"
    );
}

/// `filerouter build` of `project`, which must fail: what it printed on stderr.
fn failed_build(project: &Project) -> String {
    let (code, stdout, stderr) = run_with_env(&["build", "--project", "."], project.path(), &[]);
    assert_ne!(code, 0, "{stdout}\n{stderr}");
    stderr
}

/// Route code that runs its indented last lines only in the build's snapshot import (the one
/// whose stack has the guest's `bake`), not in the route inspection's, where the host refuses
/// every database itself.
const IN_THE_SNAPSHOT_IMPORT: &str = r#"
import sys
import sqlite3
from sqlite3 import _host

frame = sys._getframe()
while frame is not None and frame.f_code.co_name != "bake":
    frame = frame.f_back
if frame is not None:
"#;

/// The build opens private `:memory:` databases for its own warm-up, after the import; a route
/// module's, at import time, is still refused with the route's line, and one opened past the
/// `sqlite3` module's refusal and left open fails the build: its handle would be stale in every
/// request.
#[test]
fn the_build_refuses_an_in_memory_database_at_import_and_one_left_open() {
    let project = blog();
    let route = |lines: &str| {
        format!("{IN_THE_SNAPSHOT_IMPORT}{lines}\ndef GET(request):\n    return {{}}\n")
    };
    project.write(
        "routes/eager/route.py",
        &route("    conn = sqlite3.connect(\":memory:\")\n"),
    );
    let stderr = failed_build(&project);
    assert!(
        stderr.contains("the database is not open while the server imports route modules"),
        "{stderr}"
    );
    assert!(stderr.contains("routes/eager/route.py:9"), "{stderr}");

    project.write(
        "routes/eager/route.py",
        &route(
            "    _host.importing = False             # past the module's own refusal...\n    \
             conn = sqlite3.connect(\":memory:\")  # ...and never closed\n",
        ),
    );
    let stderr = failed_build(&project);
    assert!(
        stderr.contains(
            "database connection(s) opened while the build imported route modules are still open"
        ),
        "{stderr}"
    );

    // `dev`'s snapshot refuses it the same way, and `dev` serves the routes from source.
    let server = Server::dev(&project);
    server.wait_for_snapshot();
    let log = server.log();
    assert!(
        log.contains(
            "database connection(s) opened while the snapshot imported route modules are still open"
        ),
        "{log}"
    );
    assert!(
        log.contains("every request imports the routes from source"),
        "{log}"
    );
    assert_eq!(server.get("/eager").status(), 200);
}

#[test]
fn migrations_in_dev_apply_on_change_and_a_broken_one_is_an_error_page() {
    let project = blog();
    let server = Server::dev(&project);
    assert_eq!(post(&server, "first").status(), 201);
    // A broken migration: every request shows it, with its file and line; the database keeps
    // its last good state (the file's first statement is not applied either).
    project.write(
        "migrations/0002_tags.sql",
        "ALTER TABLE posts ADD COLUMN tag TEXT;\n\n-- a typo:\nCREATE INDEX posts_tag ON postz (tag);\n",
    );
    assert!(eventually(Duration::from_secs(10), || {
        server.get("/count").status() == 500
    }));
    let page = server
        .request("GET", "/count")
        .header("accept", "application/json")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(page.contains("MigrationError"), "{page}");
    assert!(page.contains("migrations/0002_tags.sql:4"), "{page}");
    assert!(
        page.contains("no such table: main.postz") || page.contains("postz"),
        "{page}"
    );
    // Fixed: applied, served again.
    project.write(
        "migrations/0002_tags.sql",
        "ALTER TABLE posts ADD COLUMN tag TEXT;\n\n-- fixed:\nCREATE INDEX posts_tag ON posts (tag);\n",
    );
    assert!(eventually(Duration::from_secs(10), || {
        server.get("/count").status() == 200
    }));
    assert_eq!(
        sql(
            &server,
            "SELECT name FROM pragma_table_info('posts') ORDER BY cid"
        )["rows"],
        serde_json::json!([["id"], ["title"], ["tag"]])
    );
    assert_eq!(count(&server)["rows"], 1);
}

#[test]
fn run_refuses_a_database_behind_its_migrations_unless_told() {
    let project = blog();
    let (code, _, stderr) = run_with_env(&["build", "--project", "."], project.path(), &[]);
    assert_eq!(code, 0, "{stderr}");
    let data = project.path().join("data-elsewhere");
    let data_arg = data.to_str().unwrap();
    let (code, stdout, stderr) = run_with_env(
        &[
            "run",
            "--project",
            ".",
            "--port",
            "0",
            "--data-dir",
            data_arg,
        ],
        project.path(),
        &[],
    );
    assert_ne!(code, 0, "{stdout}");
    assert!(
        stderr.contains("is behind the build's migrations (1 pending: 0001_posts.sql)")
            && stderr.contains("filerouter run --migrate"),
        "{stderr}"
    );
    // `db status` and `db migrate` say where it stands, and apply.
    let (code, stdout, _) = run_with_env(
        &["db", "status", "--project", ".", "--data-dir", data_arg],
        project.path(),
        &[],
    );
    assert_eq!(code, 0);
    assert!(stdout.contains("pending:   0001_posts.sql"), "{stdout}");
    let server = Server::start(
        &[
            "run",
            "--project",
            project.path().to_str().unwrap(),
            "--data-dir",
            data_arg,
            "--migrate",
        ],
        &[],
        Duration::from_secs(120),
    );
    assert!(
        server.log().contains("applied migration 0001_posts.sql"),
        "{}",
        server.log()
    );
    assert_eq!(post(&server, "from run").status(), 201);
    assert_eq!(count(&server)["rows"], 1);
    let (code, stdout, _) = run_with_env(
        &["db", "migrate", "--project", ".", "--data-dir", data_arg],
        project.path(),
        &[],
    );
    assert_eq!(code, 0);
    assert!(
        stdout.contains("0 migration(s) applied now, 1 in all"),
        "{stdout}"
    );
    assert!(data.join("db.sqlite3").is_file());
    assert!(!project.path().join(".data").exists());
}

#[test]
fn kv_compare_and_set_keys_and_many_keys_at_once() {
    let project = Project::new(&[(
        "routes/kv/route.py",
        r#"
        from filerouter import kv

        def GET(request):
            kv.set_many({f"user:{i:02}": {"n": i} for i in range(25)} | {"other": 1})
            first = kv.keys("user:", limit=10)
            rest = kv.keys("user:", limit=100, after=first[-1])
            swapped = kv.compare_and_set("user:03", {"n": 3}, {"n": 33})
            stale = kv.compare_and_set("user:03", {"n": 3}, {"n": 0})
            created = kv.compare_and_set("fresh", None, "new")
            value = kv.get("user:03")
            kv.delete_many([f"user:{i:02}" for i in range(20)])
            return {
                "first": first,
                "rest": len(rest),
                "swapped": swapped,
                "stale": stale,
                "value": value,
                "created": created,
                "left": list(kv.scan("user:", page_size=2)),
            }
        "#,
    )]);
    let server = Server::dev(&project);
    let answer = json(server.get("/kv"));
    assert_eq!(answer["first"].as_array().unwrap().len(), 10);
    assert_eq!(answer["first"][0], "user:00");
    assert_eq!(answer["rest"], 15);
    assert_eq!(answer["swapped"], true);
    assert_eq!(answer["stale"], false);
    assert_eq!(answer["value"], serde_json::json!({"n": 33}));
    assert_eq!(answer["created"], true);
    assert_eq!(
        answer["left"],
        serde_json::json!(["user:20", "user:21", "user:22", "user:23", "user:24"])
    );
}

#[test]
fn the_blog_example_keeps_posts_with_comments() {
    let project = Project::copy_of(&support::tools::workspace().join("examples/blog"));
    let server = Server::dev(&project);
    let create = |title: &str| {
        server
            .request("POST", "/posts")
            .json(&serde_json::json!({"title": title, "body": "text"}))
            .send()
            .unwrap()
    };
    for i in 0..12 {
        assert_eq!(create(&format!("post {i}")).status(), 201);
    }
    let taken = create("post 3");
    assert_eq!(taken.status(), 409);
    assert_eq!(
        json(taken)["detail"],
        "A post with this title already exists"
    );
    // Pagination, bounded.
    let page = json(server.get("/posts?skip=10&limit=5"));
    let titles: Vec<&str> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["post 10", "post 11"]);
    assert_eq!(server.get("/posts?limit=1000").status(), 422);
    // Comments, PATCH, 404, and DELETE cascading to the comments.
    let comment = server
        .request("POST", "/posts/1/comments")
        .json(&serde_json::json!({"author": "ann", "body": "first!"}))
        .send()
        .unwrap();
    assert_eq!(comment.status(), 201);
    assert_eq!(json(server.get("/posts/1/comments"))[0]["author"], "ann");
    let patched = server
        .request("PATCH", "/posts/1")
        .json(&serde_json::json!({"body": "edited"}))
        .send()
        .unwrap();
    assert_eq!(patched.status(), 200);
    let patched = json(patched);
    assert_eq!(
        (patched["title"].as_str(), patched["body"].as_str()),
        (Some("post 0"), Some("edited"))
    );
    assert_eq!(server.get("/posts/999").status(), 404);
    assert_eq!(json(server.get("/posts/999"))["detail"], "Post not found");
    // A rename onto a taken title: the IntegrityError escapes (500) and nothing changes.
    let clash = server
        .request("PATCH", "/posts/2")
        .json(&serde_json::json!({"title": "post 0"}))
        .send()
        .unwrap();
    assert_eq!(clash.status(), 500);
    assert_eq!(json(server.get("/posts/2"))["title"], "post 1");
    assert_eq!(
        server
            .request("DELETE", "/posts/1")
            .send()
            .unwrap()
            .status(),
        204
    );
    assert_eq!(server.get("/posts/1/comments").status(), 404);
    let (code, stdout, _) = run_with_env(&["db", "status", "--project", "."], project.path(), &[]);
    assert_eq!(code, 0);
    assert!(stdout.contains("applied:   0001_posts.sql"), "{stdout}");
    // The other posts take comments as before.
    let conn_check = server
        .request("POST", "/posts/2/comments")
        .json(&serde_json::json!({"author": "bob", "body": "still here"}))
        .send()
        .unwrap();
    assert_eq!(conn_check.status(), 201);
    assert_eq!(
        json(server.get("/posts/2/comments"))
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn each_tenant_has_its_own_database_and_migrations_are_applied_only_when_asked() {
    let project = blog();
    let (code, _, stderr) = run_with_env(&["build", "--project", "."], project.path(), &[]);
    assert_eq!(code, 0, "{stderr}");
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("tenants.toml");
    let path = project.path().display();
    std::fs::write(
        &file,
        format!(
            "[tenant.a]\nhosts = [\"a.test\"]\nproject = \"{path}\"\ndata_dir = \"a-data\"\nmigrate = true\n\n\
             [tenant.b]\nhosts = [\"b.test\"]\nproject = \"{path}\"\ndata_dir = \"b-data\"\nmigrate = true\n\n\
             [tenant.c]\nhosts = [\"c.test\"]\nproject = \"{path}\"\ndata_dir = \"c-data\"\n"
        ),
    )
    .unwrap();
    let server = Server::start(
        &["run", "--tenants", file.to_str().unwrap()],
        &[],
        Duration::from_secs(120),
    );
    let on = |host: &str, method: &str, path: &str| {
        client()
            .request(method.parse().unwrap(), server.url(path))
            .header("host", host)
            .json(&serde_json::json!({"title": "only in a"}))
            .send()
            .unwrap()
    };
    assert_eq!(on("a.test", "POST", "/posts").status(), 201);
    assert_eq!(json(on("a.test", "GET", "/count"))["rows"], 1);
    // b runs the same project on its own data: it sees none of a's rows or kv.
    assert_eq!(
        json(on("b.test", "GET", "/count")),
        serde_json::json!({"rows": 0, "creates": 0})
    );
    // c's database is behind the build's migrations and its section does not say migrate.
    assert_eq!(on("c.test", "GET", "/count").status(), 503);
    assert!(
        eventually(Duration::from_secs(20), || server.log().contains(
            "the database is behind the build's migrations (1 pending: 0001_posts.sql)"
        )),
        "{}",
        server.log()
    );
    assert!(home.path().join("a-data/db.sqlite3").is_file());
    assert!(home.path().join("b-data/db.sqlite3").is_file());
}
