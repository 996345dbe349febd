//! `filerouter db backup` and `db restore` on the SQLite backend, and the pg_dump/pg_restore
//! way on Postgres, each checked by a restore that the real `filerouter run` serves.
//!
//! The SQLite project writes orders of five items each in one transaction, from eight threads
//! at once while backups are taken: a backup holds every item of an order or none of it, and
//! the migrations' record. Postgres uses tests/backends.rs's server and fixture.

use crate::backends;
use crate::support;

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
    thread,
    time::{Duration, Instant},
};

use support::{Project, Server, json, run_with_env};

/// Orders of five items, written in one transaction; what is there, counted.
fn app() -> Project {
    Project::new(&[
        (
            "migrations/0001_orders.sql",
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, writer INTEGER NOT NULL);\nCREATE TABLE items (order_id INTEGER NOT NULL REFERENCES orders(id), k INTEGER NOT NULL);\n",
        ),
        (
            "routes/orders/route.py",
            r#"
            import sqlite3
            from filerouter import kv

            def GET(request):
                conn = sqlite3.connect("app.db")
                orders = conn.execute("SELECT count(*) FROM orders").fetchone()[0]
                items = conn.execute("SELECT count(*) FROM items").fetchone()[0]
                partial = conn.execute(
                    "SELECT count(*) FROM orders o WHERE (SELECT count(*) FROM items i WHERE i.order_id = o.id) != 5"
                ).fetchone()[0]
                return {"orders": orders, "items": items, "partial": partial, "kv": kv.get("orders")}

            def POST(request, writer: int):
                conn = sqlite3.connect("app.db")
                with conn:
                    cur = conn.execute("INSERT INTO orders (writer) VALUES (?)", (writer,))
                    for k in range(5):
                        conn.execute("INSERT INTO items (order_id, k) VALUES (?, ?)", (cur.lastrowid, k))
                kv.incr("orders")
                return {"id": cur.lastrowid}, 201
            "#,
        ),
    ])
}

/// The fixture, built once by the real `filerouter build`.
fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let project = app();
        let (code, stdout, stderr) =
            run_with_env(&["build", "--project", "."], project.path(), &[]);
        assert_eq!(code, 0, "build:\n{stdout}\n{stderr}");
        project.for_the_whole_run()
    })
}

/// `filerouter db VERB ARGS --project P --data-dir D`: exit code and output.
fn db(verb: &str, args: &[&str], data: &Path) -> (Option<i32>, String) {
    let mut all = vec!["db", verb];
    all.extend_from_slice(args);
    all.extend([
        "--project",
        built().to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    backends::finish(&all, Duration::from_secs(60))
}

fn serve(data: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--data-dir", data.to_str().unwrap()];
    args.extend_from_slice(extra);
    backends::run(built(), &args)
}

/// (orders, items, orders without their five items) in a database file, read directly.
fn counted(file: &Path) -> (i64, i64, i64) {
    let conn =
        rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |row| row.get::<_, i64>(0)).unwrap();
    (
        count("SELECT count(*) FROM orders"),
        count("SELECT count(*) FROM items"),
        count(
            "SELECT count(*) FROM orders o WHERE (SELECT count(*) FROM items i WHERE i.order_id = o.id) != 5",
        ),
    )
}

/// The kv counter of orders in a backup file (its kv entries travel in it).
fn kv_orders(file: &Path) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let value: String = conn
        .query_row(
            "SELECT value FROM _filerouter_kv WHERE key = 'orders'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    value.parse().unwrap()
}

fn served(server: &Server) -> (i64, i64, i64) {
    let body = json(server.get("/orders"));
    (
        body["orders"].as_i64().unwrap(),
        body["items"].as_i64().unwrap(),
        body["partial"].as_i64().unwrap(),
    )
}

#[test]
fn backups_taken_under_concurrent_writes_restore_whole_and_are_served() {
    let data = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    let server = serve(data.path(), &["--migrate"]);
    // Eight writers for three seconds; two backups while they write.
    let (written, taken) = thread::scope(|s| {
        let until = Instant::now() + Duration::from_secs(3);
        let writers: Vec<_> = (0..8)
            .map(|writer| {
                let server = &server;
                s.spawn(move || {
                    let mut ok = 0;
                    while Instant::now() < until {
                        let response = server
                            .request("POST", &format!("/orders?writer={writer}"))
                            .send()
                            .unwrap();
                        assert_eq!(response.status(), 201);
                        ok += 1;
                    }
                    ok
                })
            })
            .collect();
        let mut taken = Vec::new();
        for name in ["one.sqlite3", "two.sqlite3"] {
            thread::sleep(Duration::from_millis(1000));
            let file = backups.path().join(name);
            let (code, output) = db("backup", &[file.to_str().unwrap()], data.path());
            assert_eq!(code, Some(0), "{output}");
            assert!(
                output.contains("1 migration(s) (last 0001_orders.sql)"),
                "{output}"
            );
            taken.push(file);
        }
        let written: i64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
        (written, taken)
    });
    assert_eq!(served(&server), (written, written * 5, 0));
    drop(server);

    // Each backup: whole orders only, some but not all of them, the record intact.
    let mut counts = Vec::new();
    for file in &taken {
        let (orders, items, partial) = counted(file);
        assert_eq!((items, partial), (orders * 5, 0), "{}", file.display());
        assert!(orders > 0 && orders < written, "{orders} of {written}");
        assert!(!PathBuf::from(format!("{}-wal", file.display())).exists());
        counts.push((orders, items, partial));
    }
    assert!(counts[0].0 < counts[1].0, "{counts:?}");

    // Restored into a new data folder, served by `run` as it was backed up.
    let restored = tempfile::tempdir().unwrap();
    let into = restored.path().join("data");
    let (code, output) = db("restore", &[taken[0].to_str().unwrap()], &into);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("replaced: nothing"), "{output}");
    let (code, output) = db("status", &[], &into);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("up to date (1 applied)"), "{output}");
    let server = serve(&into, &[]);
    assert_eq!(served(&server), counts[0]);
    // The kv store came along (kv writes are not part of the SQL transaction: its own count).
    let kv = kv_orders(&taken[0]);
    assert!(kv > 0);
    assert_eq!(json(server.get("/orders"))["kv"], kv);

    // Not over a database a running server has open.
    let (code, output) = db("restore", &[taken[1].to_str().unwrap()], &into);
    assert_ne!(code, Some(0), "{output}");
    assert!(output.contains("is open in another process"), "{output}");
    assert_eq!(served(&server), counts[0]);
    drop(server);

    // Stopped, it is replaced, and what it replaced is kept.
    let (code, output) = db("restore", &[taken[1].to_str().unwrap()], &into);
    assert_eq!(code, Some(0), "{output}");
    let replaced = "replaced: 2 table(s), 1 migration(s) (last 0001_orders.sql)";
    assert!(output.contains(replaced), "{output}");
    let kept = output
        .split("kept as ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .expect("where the replaced database is kept");
    assert_eq!(counted(Path::new(kept)), counts[0]);
    assert!(output.contains("1 kv key(s)"), "{output}");
    let server = serve(&into, &[]);
    assert_eq!(served(&server), counts[1]);
    assert_eq!(json(server.get("/orders"))["kv"], kv_orders(&taken[1]));
}

#[test]
fn files_that_are_not_whole_project_databases_are_refused_and_nothing_changes() {
    let data = tempfile::tempdir().unwrap();
    let (code, output) = db("migrate", &[], data.path());
    assert_eq!(code, Some(0), "{output}");
    let files = tempfile::tempdir().unwrap();
    let good = files.path().join("good.sqlite3");
    let (code, output) = db("backup", &[good.to_str().unwrap()], data.path());
    assert_eq!(code, Some(0), "{output}");
    // A backup never overwrites a file.
    let (code, output) = db("backup", &[good.to_str().unwrap()], data.path());
    assert_ne!(code, Some(0), "{output}");
    assert!(output.contains("exists already"), "{output}");

    let text = files.path().join("notes.txt");
    std::fs::write(&text, "these are notes, not a database\n".repeat(200)).unwrap();
    // A backup with its table pages overwritten.
    let corrupt = files.path().join("corrupt.sqlite3");
    let mut bytes = std::fs::read(&good).unwrap();
    assert!(bytes.len() >= 3 * 4096, "{} bytes", bytes.len());
    for byte in &mut bytes[4096..3 * 4096] {
        *byte = 0x5a;
    }
    std::fs::write(&corrupt, bytes).unwrap();
    // A SQLite database of something else.
    let foreign = files.path().join("foreign.sqlite3");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    for (file, words) in [
        (&text, "is not a SQLite database"),
        (&corrupt, "is damaged"),
        (
            &foreign,
            "not a filerouter project's: it has no _filerouter_migrations table",
        ),
        (&files.path().join("missing.sqlite3"), "no such file"),
    ] {
        let (code, output) = db("restore", &[file.to_str().unwrap()], data.path());
        assert_ne!(code, Some(0), "{output}");
        assert!(
            output.contains(words) && output.contains(file.to_str().unwrap()),
            "{}: {output}",
            file.display()
        );
    }
    // The database is as it was, and nothing was set aside.
    let (code, output) = db("status", &[], data.path());
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("up to date (1 applied)"), "{output}");
    let names: Vec<String> = std::fs::read_dir(data.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.contains("before-restore")),
        "{names:?}"
    );
}

#[test]
fn on_postgres_pg_dump_and_pg_restore_restore_a_database_that_serves_the_same_rows() {
    let Some(servers) = backends::servers() else {
        return;
    };
    let pg = &servers.pg;
    let url = pg.create_app("dumped");
    let project = tempfile::tempdir().unwrap();
    backends::copy_built(project.path());
    let path = project.path().to_str().unwrap();
    let server = backends::run(project.path(), &["--database-url", &url, "--migrate"]);
    for title in ["first", "second", "third"] {
        assert_eq!(backends::post(&server, title).status(), 201);
    }
    let before = backends::posts(&server);
    drop(server);

    // The commands say what to use instead, without the password.
    for verb in ["backup", "restore"] {
        let (code, output) = backends::finish(
            &[
                "db",
                verb,
                "x.dump",
                "--project",
                path,
                "--database-url",
                &url,
            ],
            Duration::from_secs(30),
        );
        assert_ne!(code, Some(0), "{output}");
        let tool = if verb == "backup" {
            "pg_dump"
        } else {
            "pg_restore"
        };
        assert!(output.contains(tool), "{output}");
        backends::assert_no_password(verb, &output);
    }

    // As the docs say: pg_dump as the URL's role; a new database of the same owner; filerouter
    // prepares it; pg_restore.
    let dump = project.path().join("app.dump");
    let tool = |name: &str, args: &[&str]| {
        let output = std::process::Command::new(pg.bin.join(name))
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    tool(
        "pg_dump",
        &[
            "--format=custom",
            &format!("--file={}", dump.display()),
            &url,
        ],
    );
    pg.psql(
        "postgres",
        &[
            "CREATE DATABASE dumped_restored OWNER dumped",
            "REVOKE CONNECT ON DATABASE dumped_restored FROM PUBLIC",
        ],
    );
    let restored = pg.url("dumped", "dumped_restored");
    let (code, output) = backends::finish(
        &[
            "db",
            "status",
            "--project",
            path,
            "--database-url",
            &restored,
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{output}");
    tool(
        "pg_restore",
        &[
            "--clean",
            "--if-exists",
            "--exit-on-error",
            &format!("--dbname={restored}"),
            dump.to_str().unwrap(),
        ],
    );
    // Served without --migrate: the record came along.
    let server = backends::run(project.path(), &["--database-url", &restored]);
    let after = backends::posts(&server);
    assert_eq!(after["titles"], before["titles"]);
    assert_eq!(after["first_at"], before["first_at"]);
    // Route code owns its tables there too: it writes, and ids go on.
    let created = json(backends::post(&server, "fourth"));
    assert_eq!(created["id"], 4);
}
