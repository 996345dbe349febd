//! Shared backends: the project's database in a real PostgreSQL server and `filerouter.kv` on a
//! real Redis server, so that several `filerouter run` processes serve one project's data.
//!
//! One PostgreSQL cluster (Debian's binaries, `initdb` into a temporary folder, run as the
//! `postgres` user, listening on 127.0.0.1 only, password logins over TCP) and one Redis server
//! (no persistence, a password) start once for this test binary and stop with it; each test
//! makes the roles and databases it needs with `psql`, and its own kv prefix. Projects are
//! built with the real `filerouter build` and served by the real `filerouter run` (and `dev`).
//!
//! Without the server binaries the tests print why and pass, unless `CI` is set: then they
//! fail (`.ci/run` installs `postgresql` and `redis-server`).

use crate::support;

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    thread,
    time::{Duration, Instant},
};

use support::{Project, Server, eventually, free_port, json, run_with_env};

/// The password of every role and of Redis: it must never show in any output.
pub(crate) const PASSWORD: &str = "pw-Zq8-never-shown";

/// A server process kept alive by a small shell that also stops it (SIGQUIT to Postgres,
/// SIGTERM to Redis) when this test binary exits however it exits, or when dropped, and then
/// removes the server's folder (the servers live in a `static`, which is never dropped: their
/// folders would outlive the run).
pub(crate) struct Guarded {
    child: Child,
}

impl Guarded {
    /// Run `command` (program and arguments) under the watchdog, its output in `log`; `folder`
    /// is removed once the server stopped.
    pub(crate) fn start(command: &[&str], stop_signal: &str, log: &Path, folder: &Path) -> Guarded {
        let script = format!(
            "watched=$1; folder=$2; shift 2; \"$@\" & server=$!; \
             stop() {{ kill -{stop_signal} $server 2>/dev/null; wait $server; rm -rf \"$folder\"; }}; \
             trap 'stop; exit 0' TERM INT; \
             while kill -0 $watched 2>/dev/null && kill -0 $server 2>/dev/null; do sleep 0.2; done; \
             stop"
        );
        let log = std::fs::File::create(log).expect("server log");
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(std::process::id().to_string())
            .arg(folder)
            .args(command)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start the server's watchdog");
        Guarded { child }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A PostgreSQL cluster of its own.
pub(crate) struct Postgres {
    _server: Guarded,
    pub(crate) bin: PathBuf,
    pub(crate) port: u16,
    socket: PathBuf,
    pub(crate) dir: tempfile::TempDir,
}

impl Postgres {
    fn start(bin: &Path) -> Postgres {
        Postgres::start_with(bin, |_| Vec::new())
    }

    /// A cluster started with the server options `options` returns, given the cluster's
    /// folder (for files such as certificates, which it may write there; when this runs as
    /// root, the server reads them as `postgres`).
    pub(crate) fn start_with(bin: &Path, options: impl FnOnce(&Path) -> Vec<String>) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("filerouter-pg-")
            .tempdir()
            .expect("tempdir");
        // The server runs as `postgres`: it must reach its folders.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = dir.path().join("data");
        let socket = dir.path().join("socket");
        for folder in [&data, &socket] {
            std::fs::create_dir(folder).unwrap();
        }
        // PostgreSQL refuses to run as root: then it runs as the `postgres` user.
        let root = is_root();
        if root {
            let owned = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&data)
                .arg(&socket)
                .status()
                .expect("chown");
            assert!(owned.success(), "chown to postgres failed");
        }
        let as_postgres: Vec<&str> = if root {
            vec![
                "setpriv",
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "--",
            ]
        } else {
            vec![]
        };
        let command = |program: &Path| {
            let mut command = match as_postgres.split_first() {
                Some((first, rest)) => {
                    let mut command = Command::new(first);
                    command.args(rest).arg(program);
                    command
                }
                None => Command::new(program),
            };
            command.env("LC_ALL", "C").current_dir(dir.path());
            command
        };
        let initdb = command(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-sync",
                "--no-instructions",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .output()
            .expect("run initdb");
        assert!(
            initdb.status.success(),
            "initdb failed:\n{}{}",
            String::from_utf8_lossy(&initdb.stdout),
            String::from_utf8_lossy(&initdb.stderr)
        );
        let port = free_port();
        let postgres = bin.join("postgres");
        let (data_s, socket_s, port_s) = (
            data.display().to_string(),
            socket.display().to_string(),
            port.to_string(),
        );
        let extra = options(dir.path());
        if root {
            // What `options` wrote, readable by the server (a key file must be its own).
            let owned = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(owned.success(), "chown to postgres failed");
        }
        let mut server_command = as_postgres.clone();
        server_command.extend([
            postgres.to_str().unwrap(),
            "-D",
            &data_s,
            "-p",
            &port_s,
            "-k",
            &socket_s,
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=300",
        ]);
        server_command.extend(extra.iter().map(String::as_str));
        let server = Guarded::start(
            &server_command,
            "QUIT",
            &dir.path().join("postgres.log"),
            dir.path(),
        );
        let pg = Postgres {
            _server: server,
            bin: bin.to_path_buf(),
            port,
            socket,
            dir,
        };
        let ready = eventually(Duration::from_secs(30), || {
            pg.try_psql("postgres", &["SELECT 1"]).is_ok()
        });
        assert!(
            ready,
            "PostgreSQL did not start:\n{}",
            std::fs::read_to_string(pg.dir.path().join("postgres.log")).unwrap_or_default()
        );
        pg
    }

    /// Run `statements` (each on its own) in database `db` as the superuser, over the socket.
    pub(crate) fn try_psql(&self, db: &str, statements: &[&str]) -> Result<String, String> {
        let mut command = Command::new(self.bin.join("psql"));
        command
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.socket)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-d", db]);
        for statement in statements {
            command.args(["-c", statement]);
        }
        let output = command.output().map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    pub(crate) fn psql(&self, db: &str, statements: &[&str]) -> String {
        self.try_psql(db, statements)
            .unwrap_or_else(|e| panic!("psql {statements:?}: {e}"))
    }

    /// A role `name` that logs in with the password, may create roles (filerouter makes
    /// route code's role `NAME_route`) and owns database `name`, which nobody else may connect
    /// to; its URL.
    pub(crate) fn create_app(&self, name: &str) -> String {
        self.psql(
            "postgres",
            &[
                &format!("CREATE ROLE {name} LOGIN CREATEROLE PASSWORD '{PASSWORD}'"),
                &format!("CREATE DATABASE {name} OWNER {name}"),
                &format!("REVOKE CONNECT ON DATABASE {name} FROM PUBLIC"),
            ],
        );
        self.url(name, name)
    }

    pub(crate) fn url(&self, role: &str, db: &str) -> String {
        format!("postgres://{role}:{PASSWORD}@127.0.0.1:{}/{db}", self.port)
    }
}

/// A Redis server of its own, with a password and no persistence.
pub(crate) struct Redis {
    _server: Guarded,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    fn start(program: &Path) -> Redis {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let port_s = port.to_string();
        let server = Guarded::start(
            &[
                program.to_str().unwrap(),
                "--port",
                &port_s,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--requirepass",
                PASSWORD,
                "--dir",
                dir.path().to_str().unwrap(),
            ],
            "TERM",
            &dir.path().join("redis.log"),
            dir.path(),
        );
        let redis = Redis {
            _server: server,
            port,
            _dir: dir,
        };
        let ready = eventually(Duration::from_secs(20), || {
            redis.command(&["PING"]).is_ok_and(|r| r == ["PONG"])
        });
        assert!(ready, "Redis did not start");
        redis
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://:{PASSWORD}@127.0.0.1:{}/0", self.port)
    }

    /// Send one command (after AUTH); the reply's strings (an array's items, or the one).
    fn command(&self, args: &[&str]) -> Result<Vec<String>, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        let mut send = |args: &[&str]| -> Result<Vec<String>, String> {
            let mut request = format!("*{}\r\n", args.len());
            for arg in args {
                request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
            }
            stream
                .write_all(request.as_bytes())
                .map_err(|e| e.to_string())?;
            read_reply(&mut reader)
        };
        send(&["AUTH", PASSWORD])?;
        send(args)
    }
}

fn read_reply(reader: &mut impl BufRead) -> Result<Vec<String>, String> {
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| e.to_string())?;
    let line = line.trim_end();
    let (kind, rest) = line.split_at(1.min(line.len()));
    match kind {
        "+" | ":" => Ok(vec![rest.to_string()]),
        "-" => Err(rest.to_string()),
        "$" => {
            let len: i64 = rest.parse().map_err(|_| line.to_string())?;
            if len < 0 {
                return Ok(vec![]);
            }
            let mut data = vec![0; len as usize + 2];
            reader.read_exact(&mut data).map_err(|e| e.to_string())?;
            data.truncate(len as usize);
            Ok(vec![String::from_utf8_lossy(&data).into_owned()])
        }
        "*" => {
            let count: i64 = rest.parse().map_err(|_| line.to_string())?;
            let mut items = Vec::new();
            for _ in 0..count.max(0) {
                items.extend(read_reply(reader)?);
            }
            Ok(items)
        }
        _ => Err(format!("unexpected reply {line:?}")),
    }
}

pub(crate) struct Servers {
    pub(crate) pg: Postgres,
    pub(crate) redis: Redis,
}

/// The newest Debian PostgreSQL's bin folder, and redis-server, if installed.
pub(crate) fn binaries() -> Result<(PathBuf, PathBuf), String> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| "PostgreSQL is not installed (no /usr/lib/postgresql)".to_string())?
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    let (_, pg) = versions
        .pop()
        .ok_or("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin")?;
    let redis = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("redis-server"))
                .find(|p| p.is_file())
        })
        .unwrap_or_default()
        .ok_or("redis-server is not installed")?;
    Ok((pg, redis))
}

/// The servers, started on first use; `None` (after saying why) when they are not installed
/// and this is not CI. Installed servers that fail to start fail every test.
pub(crate) fn servers() -> Option<&'static Servers> {
    enum Started {
        Up(Servers),
        Missing(String),
        Failed(String),
    }
    static SERVERS: OnceLock<Started> = OnceLock::new();
    let started = SERVERS.get_or_init(|| {
        let (pg, redis) = match binaries() {
            Ok(found) => found,
            Err(why) => return Started::Missing(why),
        };
        let (pg, redis) = thread::scope(|s| {
            let pg = s.spawn(|| Postgres::start(&pg));
            let redis = s.spawn(|| Redis::start(&redis));
            (pg.join(), redis.join())
        });
        match (pg, redis) {
            (Ok(pg), Ok(redis)) => Started::Up(Servers { pg, redis }),
            (Err(_), _) => Started::Failed("PostgreSQL failed to start (see above)".into()),
            (_, Err(_)) => Started::Failed("Redis failed to start (see above)".into()),
        }
    });
    match started {
        Started::Up(servers) => Some(servers),
        Started::Failed(why) => panic!("{why}"),
        Started::Missing(why) if std::env::var_os("CI").is_some() => {
            panic!(
                "{why}: CI must run the backend tests (.ci/run installs postgresql and redis-server)"
            )
        }
        Started::Missing(why) => {
            eprintln!("skipping: {why}");
            None
        }
    }
}

/// The fixture project ([`app`]), built once by the real `filerouter build`; tests serve
/// copies of it.
fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let project = app();
            let (code, stdout, stderr) =
                run_with_env(&["build", "--project", "."], project.path(), &[]);
            assert_eq!(code, 0, "build:\n{stdout}\n{stderr}");
            project.for_the_whole_run()
        })
        .as_path()
}

/// A copy of the built fixture project in `to` (a new folder).
pub(crate) fn copy_built(to: &Path) {
    support::copy_all(built(), to);
}

/// `filerouter run` of `project` with `extra` arguments, on a free port.
pub(crate) fn run(project: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["run", "--project", project.to_str().unwrap()];
    args.extend_from_slice(extra);
    Server::start(&args, &[], Duration::from_secs(120))
}

/// Run `filerouter ARGS` to completion within `wait`; (exit code, stdout and stderr).
pub(crate) fn finish(args: &[&str], wait: Duration) -> (Option<i32>, String) {
    let mut child = Command::new(support::binary())
        .args(args)
        .env_remove("FILEROUTER_CACHE_KEY")
        .env_remove("FILEROUTER_DATABASE_URL")
        .env_remove("FILEROUTER_KV_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start filerouter");
    let deadline = Instant::now() + wait;
    let code = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let mut output = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut output);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut output);
    }
    (code, output)
}

pub(crate) fn assert_no_password(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD),
        "{what} shows the password:\n{text}"
    );
}

/// A blog over Postgres: a migration, posts (`?` placeholders, `import sqlite3`), kv hits,
/// requests that fail after writing, any table read by name, and kv keys named by the host.
fn app() -> Project {
    Project::new(&[
        ("config.py", "sandbox = {\"wall_s\": 2}\n"),
        (
            "migrations/0001_posts.sql",
            "CREATE TABLE posts (\n    id BIGSERIAL PRIMARY KEY,\n    title TEXT NOT NULL,\n    created_at TIMESTAMPTZ NOT NULL DEFAULT now()\n);\n",
        ),
        (
            "routes/posts/route.py",
            r#"
            import sqlite3

            def GET(request):
                conn = sqlite3.connect("app.db")
                rows = conn.execute("SELECT id, title, created_at FROM posts ORDER BY id").fetchall()
                return {"count": len(rows), "titles": [r[1] for r in rows], "first_at": rows[0][2] if rows else None}

            async def POST(request):
                body = await request.json()
                conn = sqlite3.connect("app.db")
                with conn:
                    cur = conn.execute("INSERT INTO posts (title) VALUES (?) RETURNING id", (body["title"],))
                    (new_id,) = cur.fetchone()
                return {"id": new_id, "lastrowid": cur.lastrowid}, 201
            "#,
        ),
        (
            "routes/hits/route.py",
            r#"
            from filerouter import kv

            def GET(request):
                return {"hits": kv.get("hits", 0)}

            def POST(request):
                return {"hits": kv.incr("hits")}
            "#,
        ),
        (
            "routes/fail/[how]/route.py",
            r#"
            import sqlite3, time

            def POST(request, how: str):
                conn = sqlite3.connect("app.db")
                conn.execute("INSERT INTO posts (title) VALUES (?)", (f"uncommitted-{how}",))
                if how == "raise":
                    raise RuntimeError("after the insert")
                if how == "sleep":
                    time.sleep(30)
                return {"returned": "without commit"}
            "#,
        ),
        (
            "routes/read/[table]/route.py",
            r#"
            import sqlite3

            def GET(request, table: str):
                conn = sqlite3.connect("app.db")
                try:
                    return {"rows": [list(r) for r in conn.execute(f"SELECT * FROM {table}")]}
                except sqlite3.Error as e:
                    return {"error": type(e).__name__, "message": str(e)}, 400
            "#,
        ),
        (
            "routes/kvkey/route.py",
            r#"
            from filerouter import kv

            def GET(request, key: str):
                return {"value": kv.get(key)}

            def POST(request, key: str, value: str):
                kv.set(key, value)
                return {"set": key}
            "#,
        ),
        (
            "routes/sql/route.py",
            r#"
            import sqlite3

            async def POST(request):
                body = await request.json()
                conn = sqlite3.connect("app.db")
                try:
                    if body.get("script"):
                        conn.executescript(body["sql"])
                        return {"rows": None}
                    rows = conn.execute(body["sql"]).fetchall()
                    conn.commit()
                    return {"rows": [list(r) for r in rows]}
                except sqlite3.Error as e:
                    return {"error": type(e).__name__, "message": str(e)}, 400
            "#,
        ),
        (
            "routes/kv/route.py",
            r#"
            from filerouter import kv

            def GET(request):
                return {"secret": kv.get("secret"), "count": kv.get("count")}

            def POST(request):
                kv.set("secret", request.headers.get("host"))
                return {"count": kv.incr("count")}
            "#,
        ),
        (
            "routes/pgsleep/route.py",
            r#"
            import sqlite3

            def GET(request, s: float = 10.0):
                conn = sqlite3.connect("app.db")
                try:
                    conn.execute("SELECT pg_sleep(?)", (s,)).fetchall()
                except sqlite3.OperationalError as e:
                    return {"error": type(e).__name__, "message": str(e)}, 503
                return {"slept": s}
            "#,
        ),
    ])
}

pub(crate) fn post(server: &Server, title: &str) -> support::Response {
    server
        .request("POST", "/posts")
        .json(&serde_json::json!({ "title": title }))
        .send()
        .expect("POST /posts")
}

pub(crate) fn posts(server: &Server) -> serde_json::Value {
    json(server.get("/posts"))
}

#[test]
fn two_run_processes_share_one_database_and_kv_store() {
    let Some(servers) = servers() else { return };
    let url = servers.pg.create_app("shared");
    let kv = servers.redis.url();
    let project = tempfile::tempdir().unwrap();
    copy_built(project.path());
    let flags = [
        "--database-url",
        url.as_str(),
        "--kv-url",
        kv.as_str(),
        "--migrate",
    ];
    // Both start at once with --migrate: the migration is applied once.
    let (a, b) = thread::scope(|s| {
        let a = s.spawn(|| run(project.path(), &flags));
        let b = s.spawn(|| run(project.path(), &flags));
        (a.join().unwrap(), b.join().unwrap())
    });
    let applied = [&a, &b]
        .iter()
        .filter(|s| s.log().contains("applied migration 0001_posts.sql"))
        .count();
    assert_eq!(applied, 1, "{}\n---\n{}", a.log(), b.log());

    // Written through one, read through the other.
    let created = post(&a, "hello");
    assert_eq!(created.status(), 201);
    let created = json(created);
    assert_eq!(created["id"], 1);
    assert_eq!(created["lastrowid"], serde_json::Value::Null);
    let seen = posts(&b);
    assert_eq!(seen["count"], 1);
    assert_eq!(seen["titles"], serde_json::json!(["hello"]));
    assert!(
        seen["first_at"]
            .as_str()
            .is_some_and(|t| t.ends_with("+00:00")),
        "{seen}"
    );

    // kv: increments through both, at once, sum exactly.
    let counts: Vec<i64> = thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let server = if i % 2 == 0 { &a } else { &b };
                s.spawn(move || {
                    let response = server.request("POST", "/hits").send().unwrap();
                    assert_eq!(response.status(), 200);
                    json(response)["hits"].as_i64().unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut sorted = counts.clone();
    sorted.sort();
    assert_eq!(sorted, (1..=20).collect::<Vec<_>>());
    assert_eq!(json(a.get("/hits"))["hits"], 20);
    assert_eq!(json(b.get("/hits"))["hits"], 20);

    // 50 creates at once, through both: 50 more rows.
    thread::scope(|s| {
        for i in 0..50 {
            let server = if i % 2 == 0 { &a } else { &b };
            s.spawn(move || {
                let response = post(server, &format!("post {i}"));
                assert_eq!(response.status(), 201, "{:?}", response.text());
            });
        }
    });
    assert_eq!(posts(&a)["count"], 51);

    // Uncommitted work is rolled back: after an exception, and past the time limit.
    for (how, status) in [("raise", 500), ("sleep", 504), ("return", 200)] {
        let response = a.request("POST", &format!("/fail/{how}")).send().unwrap();
        assert_eq!(response.status().as_u16(), status, "{how}");
    }
    assert!(
        eventually(Duration::from_secs(20), || posts(&b)["count"] == 51),
        "{}",
        posts(&b)
    );

    // A statement longer than the request's time limit is stopped; both keep serving and no
    // statement is left running in Postgres.
    let started = Instant::now();
    let slow = b.get("/pgsleep?s=30");
    assert!(started.elapsed() < Duration::from_secs(10));
    let status = slow.status().as_u16();
    let body = slow.text().unwrap();
    eprintln!("pg_sleep past the limit: {status} {body}");
    assert!(
        status == 504 || (status == 503 && body.contains("time limit")),
        "{status} {body}"
    );
    assert_eq!(posts(&b)["count"], 51);
    let quick = json(b.get("/pgsleep?s=0.01"));
    assert_eq!(quick["slept"], 0.01, "{quick}");
    assert!(
        eventually(Duration::from_secs(10), || {
            servers.pg.psql(
                "postgres",
                &["SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active'"],
            ) == "0"
        }),
        "pg_sleep still runs"
    );

    // Both restarted: everything is still there.
    let logs = format!("{}\n{}", a.log(), b.log());
    drop((a, b));
    let (a, b) = (
        run(project.path(), &flags[..4]),
        run(project.path(), &flags[..4]),
    );
    assert_eq!(posts(&a)["count"], 51);
    assert_eq!(json(b.get("/hits"))["hits"], 20);
    assert_eq!(post(&b, "after restart").status(), 201);
    assert_eq!(posts(&a)["count"], 52);
    assert_no_password(
        "the servers' output",
        &format!("{logs}\n{}\n{}", a.log(), b.log()),
    );
}

#[test]
fn run_refuses_a_database_behind_its_migrations_until_migrate() {
    let Some(servers) = servers() else { return };
    let url = servers.pg.create_app("behind");
    let project = tempfile::tempdir().unwrap();
    copy_built(project.path());
    let path = project.path().to_str().unwrap();

    let (code, output) = finish(
        &[
            "run",
            "--project",
            path,
            "--database-url",
            &url,
            "--port",
            "0",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains("is behind the build's migrations (1 pending: 0001_posts.sql)"),
        "{output}"
    );
    assert!(output.contains("127.0.0.1"), "{output}");
    assert_no_password("run's refusal", &output);

    // `db status` and `db migrate` take the URL from the environment.
    let env = [("FILEROUTER_DATABASE_URL", url.as_str())];
    let (code, stdout, stderr) =
        run_with_env(&["db", "status", "--project", path], project.path(), &env);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("pending:   0001_posts.sql"), "{stdout}");
    assert!(
        stdout.contains(&format!("postgres at 127.0.0.1:{}/behind", servers.pg.port)),
        "{stdout}"
    );
    assert_no_password("db status", &format!("{stdout}{stderr}"));

    // A wrong password is an error at start that names the server, not the password.
    let wrong = servers
        .pg
        .url("behind", "behind")
        .replace(PASSWORD, "wrong-pw");
    let (code, stdout, stderr) = run_with_env(
        &["db", "status", "--project", path, "--database-url", &wrong],
        project.path(),
        &[],
    );
    assert_ne!(code, 0);
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );
    assert!(
        !format!("{stdout}{stderr}").contains("wrong-pw"),
        "{stderr}"
    );

    let server = run(project.path(), &["--database-url", &url, "--migrate"]);
    assert!(
        server.log().contains("applied migration 0001_posts.sql"),
        "{}",
        server.log()
    );
    assert_eq!(post(&server, "migrated").status(), 201);
    assert_eq!(posts(&server)["count"], 1);
    drop(server);

    // A broken migration names its file and line, and changes nothing.
    std::fs::write(
        project.path().join("migrations/0002_broken.sql"),
        "ALTER TABLE posts ADD COLUMN body TEXT;\n\n-- a typo:\nINSERT INTO postz (title) VALUES ('x');\n",
    )
    .unwrap();
    let (code, stdout, stderr) =
        run_with_env(&["db", "migrate", "--project", path], project.path(), &env);
    assert_ne!(code, 0, "{stdout}");
    assert!(
        stderr.contains("migrations/0002_broken.sql:4:") && stderr.contains("postz"),
        "{stderr}"
    );
    let columns = servers.pg.psql(
        "behind",
        &["SELECT count(*) FROM information_schema.columns WHERE table_name = 'posts' AND column_name = 'body'"],
    );
    assert_eq!(columns, "0");
}

#[test]
fn tenants_have_their_own_roles_databases_and_kv_keys() {
    let Some(servers) = servers() else { return };
    let site = tempfile::tempdir().unwrap();
    let kv = servers.redis.url();
    let mut config = String::new();
    for name in ["alpha", "beta"] {
        let project = site.path().join(name);
        copy_built(&project);
        let role = format!("tenant_{name}");
        let url = servers.pg.create_app(&role);
        let (code, stdout, stderr) = run_with_env(
            &["db", "migrate", "--project", ".", "--database-url", &url],
            &project,
            &[],
        );
        assert_eq!(code, 0, "{stdout}{stderr}");
        // A table only this tenant has, owned by its role.
        servers.pg.psql(
            &role,
            &[
                &format!("CREATE TABLE secrets_{name} (value TEXT NOT NULL)"),
                &format!("INSERT INTO secrets_{name} VALUES ('{name}-only')"),
                &format!("ALTER TABLE secrets_{name} OWNER TO {role}"),
            ],
        );
        config.push_str(&format!(
            "[tenant.{name}]\nhosts = [\"{name}.test\"]\nproject = \"{name}\"\ndatabase_url = \"{url}\"\nkv_url = \"{kv}\"\n\n"
        ));
    }
    let file = site.path().join("tenants.toml");
    std::fs::write(&file, &config).unwrap();
    let server = Server::start(
        &["run", "--tenants", file.to_str().unwrap()],
        &[],
        Duration::from_secs(120),
    );
    let get = |host: &str, path: &str| {
        json(
            server
                .request("GET", path)
                .header("host", host)
                .send()
                .expect("GET"),
        )
    };

    // Each reads its own table; the other's is an error, never rows.
    assert_eq!(
        get("alpha.test", "/read/secrets_alpha")["rows"],
        serde_json::json!([["alpha-only"]])
    );
    let peek = get("alpha.test", "/read/secrets_beta");
    assert_eq!(peek["rows"], serde_json::Value::Null, "{peek}");
    assert_eq!(peek["error"], "OperationalError", "{peek}");
    let peek = get("beta.test", "/read/secrets_alpha");
    assert_eq!(peek["rows"], serde_json::Value::Null, "{peek}");
    assert_eq!(
        get("beta.test", "/read/secrets_beta")["rows"],
        serde_json::json!([["beta-only"]])
    );
    // The host's record is not route code's to read.
    let record = get("alpha.test", "/read/_filerouter_migrations");
    assert_eq!(record["error"], "NotAllowed", "{record}");
    // Nor can one tenant's role log in to the other's database.
    let crossed = Command::new(servers.pg.bin.join("psql"))
        .args(["-X", "-c", "SELECT 1"])
        .arg(servers.pg.url("tenant_alpha", "tenant_beta"))
        .output()
        .unwrap();
    assert!(!crossed.status.success());
    assert!(
        String::from_utf8_lossy(&crossed.stderr).contains("permission denied"),
        "{}",
        String::from_utf8_lossy(&crossed.stderr)
    );

    // kv: the same keys, never the same entries.
    for (host, times) in [("alpha.test", 3), ("beta.test", 1)] {
        for _ in 0..times {
            let response = server
                .request("POST", "/kv")
                .header("host", host)
                .send()
                .unwrap();
            assert_eq!(response.status(), 200);
        }
    }
    assert_eq!(
        get("alpha.test", "/kv"),
        serde_json::json!({"secret": "alpha.test", "count": 3})
    );
    assert_eq!(
        get("beta.test", "/kv"),
        serde_json::json!({"secret": "beta.test", "count": 1})
    );
    let keys = servers.redis.command(&["KEYS", "filerouter:t:*"]).unwrap();
    assert!(
        keys.iter().any(|k| k.starts_with("filerouter:t:alpha:"))
            && keys.iter().any(|k| k.starts_with("filerouter:t:beta:")),
        "{keys:?}"
    );
    // Route code's role of one tenant may not connect to the other's database either, and
    // has no privilege beyond its own database.
    for (route, other) in [
        ("tenant_alpha_route", "tenant_beta"),
        ("tenant_beta_route", "tenant_alpha"),
    ] {
        let facts = servers.pg.psql(
            "postgres",
            &[&format!(
                "SELECT has_database_privilege('{route}', '{other}', 'CONNECT'), rolcreaterole, rolcreatedb, rolsuper,
                        (SELECT count(*) FROM pg_auth_members WHERE member = r.oid)
                   FROM pg_roles r WHERE rolname = '{route}'"
            )],
        );
        assert_eq!(facts, "f|f|f|f|0", "{route}");
    }
    assert_no_password("the tenants server's output", &server.log());
}

/// Route code's `sqlite3` API over Postgres, in `dev` (the URL from the environment; kv stays
/// in the data folder).
#[test]
fn the_sqlite3_api_works_the_same_on_postgres() {
    let Some(servers) = servers() else { return };
    let url = servers.pg.create_app("api");
    let project = Project::new(&[
        (
            "migrations/0001_items.sql",
            "CREATE TABLE items (\n    id SERIAL PRIMARY KEY,\n    title TEXT NOT NULL UNIQUE,\n    qty INTEGER NOT NULL CHECK (qty >= 0)\n);\n",
        ),
        (
            "routes/check/route.py",
            r#"
            import sqlite3
            from filerouter import db

            def attempt(conn, sql, params=()):
                try:
                    conn.execute(sql, params).fetchall()
                    return "ok"
                except sqlite3.Error as e:
                    return f"{type(e).__name__}: {e}"

            def GET(request):
                conn = db.connect()
                out = {}
                cur = conn.execute(
                    "SELECT 1 AS one, 2.5::float8 AS half, 'x'::text AS t, true AS yes, NULL AS nothing, "
                    "12.30::numeric(5,2) AS money, '2024-01-31 13:45:00.5'::timestamp AS ts, "
                    "'2024-01-31'::date AS day, decode('00ff', 'hex') AS bin, '{\"a\": 1}'::jsonb AS doc, "
                    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS id, 9007199254740993::int8 AS big"
                )
                row = list(cur.fetchone())
                row[8] = row[8].hex()
                out["row"] = row
                out["description"] = [d[0] for d in cur.description]
                empty = conn.execute("SELECT id, title FROM items WHERE id < 0")
                out["empty"] = [[d[0] for d in empty.description], empty.fetchall()]

                conn.execute("INSERT INTO items (title, qty) VALUES (:t, :q)", {"t": "a", "q": 1})
                out["in_transaction"] = conn.in_transaction
                # A failed statement does not spoil the transaction (as in SQLite).
                out["duplicate"] = attempt(conn, "INSERT INTO items (title, qty) VALUES (?, ?)", ("a", 2))
                out["negative"] = attempt(conn, "INSERT INTO items (title, qty) VALUES (@t, $q)", {"t": "n", "q": -1})
                conn.execute("INSERT INTO items (title, qty) VALUES (?, ?)", ("b", 2))
                conn.commit()
                out["after_commit"] = conn.in_transaction
                cur = conn.executemany("UPDATE items SET qty = qty + ? WHERE title = ?", [(10, "a"), (20, "b")])
                out["many"] = cur.rowcount
                conn.commit()
                out["qty"] = conn.execute("SELECT title, qty FROM items ORDER BY title").fetchall()
                cur = conn.execute("INSERT INTO items (title, qty) VALUES ('c', 3) RETURNING id")
                out["lastrowid"] = cur.lastrowid
                out["rowcount"] = cur.rowcount
                conn.rollback()
                out["after_rollback"] = conn.execute("SELECT count(*) FROM items").fetchone()[0]
                conn.executescript("INSERT INTO items (title, qty) VALUES ('s1', 1); INSERT INTO items (title, qty) VALUES ('s2', 1);")
                out["after_script"] = conn.execute("SELECT count(*) FROM items").fetchone()[0]

                out["errors"] = {
                    "count": attempt(conn, "SELECT ?", (1, 2)),
                    "name": attempt(conn, "SELECT :missing", {"other": 1}),
                    "two": attempt(conn, "SELECT 1; SELECT 2"),
                    "zero": attempt(conn, "SELECT 1/0"),
                    "syntax": attempt(conn, "SELEC 1"),
                    "inet": attempt(conn, "SELECT '127.0.0.1'::inet AS addr"),
                    "record": attempt(conn, "SELECT * FROM _filerouter_migrations"),
                    "copy": attempt(conn, "COPY items TO STDOUT"),
                }
                memory = sqlite3.connect(":memory:")
                out["memory"] = memory.execute("SELECT sqlite_version() IS NOT NULL").fetchone()[0]
                return out
            "#,
        ),
    ]);
    let server = Server::dev_with_env(&project, &[("FILEROUTER_DATABASE_URL", url.as_str())]);
    let out = json(server.get("/check"));
    assert_eq!(
        out["row"],
        serde_json::json!([
            1,
            2.5,
            "x",
            1,
            null,
            "12.30",
            "2024-01-31 13:45:00.500",
            "2024-01-31",
            "00ff",
            "{\"a\": 1}",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            9007199254740993i64
        ]),
        "{out}"
    );
    assert_eq!(out["description"][0], "one");
    assert_eq!(out["empty"], serde_json::json!([["id", "title"], []]));
    assert_eq!(out["in_transaction"], true);
    assert!(
        out["duplicate"]
            .as_str()
            .unwrap()
            .starts_with("IntegrityError: duplicate key"),
        "{out}"
    );
    assert!(
        out["negative"]
            .as_str()
            .unwrap()
            .starts_with("IntegrityError:"),
        "{out}"
    );
    assert_eq!(out["after_commit"], false);
    assert_eq!(out["many"], 2);
    assert_eq!(out["qty"], serde_json::json!([["a", 11], ["b", 22]]));
    assert_eq!(out["lastrowid"], serde_json::Value::Null);
    assert_eq!(out["rowcount"], 1);
    assert_eq!(out["after_rollback"], 2);
    assert_eq!(out["after_script"], 4);
    let errors = &out["errors"];
    let starts = |key: &str, prefix: &str| {
        assert!(
            errors[key].as_str().unwrap().starts_with(prefix),
            "{key}: {}",
            errors[key]
        );
    };
    starts(
        "count",
        "ProgrammingError: Incorrect number of bindings supplied. The current statement uses 1, and there are 2 supplied.",
    );
    starts(
        "name",
        "ProgrammingError: You did not supply a value for binding parameter :missing.",
    );
    starts(
        "two",
        "ProgrammingError: You can only execute one statement",
    );
    starts("zero", "DataError: division by zero");
    starts("syntax", "OperationalError: syntax error");
    starts(
        "inet",
        "OperationalError: column 'addr' has the Postgres type inet",
    );
    starts("record", "NotAllowed:");
    starts("copy", "NotAllowed: COPY");
    assert_eq!(out["memory"], 1);
    // kv stays in the data folder, and the log says what that means.
    assert!(
        server
            .log()
            .contains("filerouter.kv stays in the SQLite file"),
        "{}",
        server.log()
    );
    assert_no_password("dev's output", &server.log());
    // The record is in Postgres, with the migration.
    assert_eq!(
        servers
            .pg
            .psql("api", &["SELECT name FROM _filerouter.migrations"]),
        "0001_items.sql"
    );
}

/// POST /sql: run `sql` as route code (`executescript` if `script`); (status, body).
fn route_sql(server: &Server, sql: &str, script: bool) -> (u16, serde_json::Value) {
    let response = server
        .request("POST", "/sql")
        .json(&serde_json::json!({ "sql": sql, "script": script }))
        .send()
        .expect("POST /sql");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or_default())
}

/// The record's rows, as the superuser sees them.
fn record(servers: &Servers, db: &str) -> String {
    servers.pg.psql(
        db,
        &["SELECT name FROM _filerouter.migrations ORDER BY name"],
    )
}

/// Issue 40: the host's record is out of route code's reach because route code logs in as a
/// role without rights on it, not because its SQL is read: every spelling that got past the
/// old lexical guard, and their neighbours, is refused by Postgres, and a restart still finds
/// the migration applied.
#[test]
fn route_code_cannot_reach_the_hosts_record_by_any_spelling() {
    let Some(servers) = servers() else { return };
    let url = servers.pg.create_app("hostile");
    let project = tempfile::tempdir().unwrap();
    copy_built(project.path());
    let server = run(project.path(), &["--database-url", &url, "--migrate"]);
    assert_eq!(record(servers, "hostile"), "0001_posts.sql");
    assert_eq!(post(&server, "before").status(), 201);

    let attacks: &[(&str, bool)] = &[
        // The three spellings of the report.
        (r#"DELETE FROM U&"\005ffilerouter".migrations"#, false),
        (r#"DELETE FROM U&"\005ffilerouter_migrations""#, false),
        (
            "SELECT query_to_xml('DELETE FROM _filerouter.migrations RETURNING name', true, true, '')",
            false,
        ),
        (
            "SELECT query_to_xml('SELECT * FROM _filerouter.migrations', true, true, '')",
            false,
        ),
        (
            "DO $$ BEGIN EXECUTE 'DELETE FROM ' || '_filer' || 'outer.migrations'; END $$",
            false,
        ),
        // A function of route code's, even SECURITY DEFINER, runs as route code's role.
        (
            "CREATE FUNCTION public.wipe() RETURNS void SECURITY DEFINER LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'DELETE FROM _filerouter.migrations'; END $$; SELECT public.wipe();",
            true,
        ),
        ("ALTER TABLE _filerouter.migrations RENAME TO gone", false),
        ("DROP SCHEMA _filerouter CASCADE", false),
        // Becoming the owner.
        ("RESET ROLE; DELETE FROM _filerouter.migrations;", true),
        ("SET ROLE hostile", false),
        ("SELECT set_config('role', 'hostile', false)", false),
        ("SET SESSION AUTHORIZATION hostile", false),
        ("GRANT hostile TO current_user", false),
        ("GRANT USAGE ON SCHEMA _filerouter TO current_user", false),
        ("ALTER ROLE current_user CREATEROLE", false),
        // Search path games.
        (
            "SELECT set_config('search_path', '_filerouter, public', false); DELETE FROM migrations;",
            true,
        ),
    ];
    for (sql, script) in attacks {
        let (status, body) = route_sql(&server, sql, *script);
        assert_eq!(status, 400, "{sql}: {body}");
        assert_eq!(
            record(servers, "hostile"),
            "0001_posts.sql",
            "{sql}: {body}"
        );
    }
    // What route code may do with names like the host's hurts nobody: a table of its own named
    // like the old record, in public.
    let (status, body) = route_sql(
        &server,
        "DO $$ BEGIN EXECUTE 'CREATE TABLE public.' || '_filerouter' || '_migrations (name TEXT, checksum TEXT, applied_at TEXT)'; END $$",
        false,
    );
    assert_eq!(status, 200, "{body}");
    // Its own role's password and settings are its own to change; the host puts them back.
    let (status, body) = route_sql(&server, "ALTER ROLE current_user PASSWORD 'mine'", false);
    assert_eq!(status, 200, "{body}");
    let (status, body) = route_sql(
        &server,
        "ALTER ROLE current_user SET role = 'hostile'",
        false,
    );
    assert_eq!(status, 200, "{body}");
    let before = server.log();
    drop(server);

    // A restart finds the migration applied (no --migrate: a record it could not read would
    // make the database "behind"), and route code logs in again. (The first server may have
    // put the password back already: a request that found no idle connection logged in anew.)
    let server = run(project.path(), &["--database-url", &url]);
    assert_eq!(posts(&server)["count"], 1);
    assert_eq!(post(&server, "after").status(), 201);
    let logs = format!("{before}\n{}", server.log());
    assert!(logs.contains("were put back"), "{logs}");
    assert_eq!(record(servers, "hostile"), "0001_posts.sql");
    assert_no_password("the server's output", &server.log());
}

/// A URL whose role cannot create route code's role is an error at start that names the
/// missing privilege and the SQL that grants it, never a silent fallback.
#[test]
fn a_role_without_createrole_stops_the_start_with_the_sql_to_fix_it() {
    let Some(servers) = servers() else { return };
    servers.pg.psql(
        "postgres",
        &[
            &format!("CREATE ROLE plain LOGIN PASSWORD '{PASSWORD}'"),
            "CREATE DATABASE plain OWNER plain",
        ],
    );
    let url = servers.pg.url("plain", "plain");
    let project = tempfile::tempdir().unwrap();
    copy_built(project.path());
    let path = project.path().to_str().unwrap();
    let (code, output) = finish(
        &[
            "run",
            "--project",
            path,
            "--database-url",
            &url,
            "--migrate",
            "--port",
            "0",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains("lacks CREATEROLE") && output.contains("ALTER ROLE plain CREATEROLE"),
        "{output}"
    );
    assert_no_password("the refusal", &output);
    // Nothing was made: no role, no record.
    assert_eq!(
        servers.pg.psql(
            "plain",
            &["SELECT count(*) FROM pg_roles WHERE rolname = 'plain_route'"]
        ),
        "0"
    );

    // Once the operator grants it, the same start works.
    servers
        .pg
        .psql("postgres", &["ALTER ROLE plain CREATEROLE"]);
    let server = run(project.path(), &["--database-url", &url, "--migrate"]);
    assert_eq!(post(&server, "granted").status(), 201);
}

/// A database an earlier version served: its record in `public._filerouter_migrations` and
/// its tables owned by the URL's role. The record moves into `_filerouter` once, the tables
/// become route code's, and a later migration may alter them.
#[test]
fn an_earlier_versions_record_and_tables_move_once() {
    let Some(servers) = servers() else { return };
    servers.pg.create_app("earlier");
    let project = tempfile::tempdir().unwrap();
    copy_built(project.path());
    let migration =
        std::fs::read_to_string(project.path().join("migrations/0001_posts.sql")).unwrap();
    let quoted = migration.replace('\'', "''");
    // What the earlier version left, made as the owner.
    let owner = Command::new(servers.pg.bin.join("psql"))
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(servers.pg.url("earlier", "earlier"))
        .args([
            "-c",
            "CREATE TABLE _filerouter_migrations (name TEXT PRIMARY KEY NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL)",
            "-c",
            &format!(
                "INSERT INTO _filerouter_migrations VALUES ('0001_posts.sql', encode(sha256(convert_to('{quoted}', 'UTF8')), 'hex'), '2026-01-01T00:00:00.000Z')"
            ),
            "-c",
            &migration,
            "-c",
            "INSERT INTO posts (title) VALUES ('from before')",
        ])
        .output()
        .unwrap();
    assert!(
        owner.status.success(),
        "{}",
        String::from_utf8_lossy(&owner.stderr)
    );
    let url = servers.pg.url("earlier", "earlier");
    let server = run(project.path(), &["--database-url", &url]);
    assert_eq!(posts(&server)["titles"], serde_json::json!(["from before"]));
    assert_eq!(post(&server, "after").status(), 201);
    drop(server);
    assert_eq!(record(servers, "earlier"), "0001_posts.sql");
    assert_eq!(
        servers.pg.psql(
            "earlier",
            &["SELECT to_regclass('public._filerouter_migrations') IS NULL, pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'posts'"]
        ),
        "t|earlier_route"
    );
    // A later migration alters the earlier table: route code's role owns it now.
    std::fs::write(
        project.path().join("migrations/0002_body.sql"),
        "ALTER TABLE posts ADD COLUMN body TEXT;\n",
    )
    .unwrap();
    let (code, stdout, stderr) = run_with_env(
        &[
            "db",
            "migrate",
            "--project",
            project.path().to_str().unwrap(),
            "--database-url",
            &url,
        ],
        project.path(),
        &[],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(record(servers, "earlier"), "0001_posts.sql\n0002_body.sql");
}

/// Issue 40: a project served alone from a folder named `tenant` had the kv prefix
/// `filerouter:tenant:`, which begins tenant `v`'s `filerouter:tenant:v:`, so the project's
/// key `v:secret` was tenant v's `secret`. Projects and tenants now live in spaces no name
/// can reach out of; an operator's prefix may not enter them.
#[test]
fn a_project_named_tenant_cannot_reach_tenant_vs_keys() {
    let Some(servers) = servers() else { return };
    let kv = servers.redis.url();
    // One database for all of them (the fixture's migration is Postgres SQL): the kv store is
    // what is tested.
    let db = servers.pg.create_app("kvspaces");
    let site = tempfile::tempdir().unwrap();
    copy_built(&site.path().join("v"));
    let file = site.path().join("tenants.toml");
    std::fs::write(
        &file,
        format!(
            "[tenant.v]\nhosts = [\"v.test\"]\nproject = \"v\"\nkv_url = \"{kv}\"\ndatabase_url = \"{db}\"\nmigrate = true\n"
        ),
    )
    .unwrap();
    let tenants = Server::start(
        &["run", "--tenants", file.to_str().unwrap()],
        &[],
        Duration::from_secs(120),
    );
    // `host` empty: the single project's server, which any host reaches.
    let request = |server: &Server, method: &str, host: &str| {
        let request = server.request(method, "/kvkey");
        if host.is_empty() {
            request
        } else {
            request.header("host", host)
        }
    };
    let set = |server: &Server, host: &str, key: &str, value: &str| {
        let response = request(server, "POST", host)
            .query(&[("key", key), ("value", value)])
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
    };
    let get = |server: &Server, host: &str, key: &str| {
        json(
            request(server, "GET", host)
                .query(&[("key", key)])
                .send()
                .unwrap(),
        )["value"]
            .clone()
    };
    set(&tenants, "v.test", "secret", "tenant-v-only");

    let folder = tempfile::tempdir().unwrap();
    let project = folder.path().join("tenant");
    copy_built(&project);
    let single = run(
        &project,
        &["--kv-url", &kv, "--database-url", &db, "--migrate"],
    );
    let host = "";
    for key in ["v:secret", "secret", "v%3Asecret", ":v:secret"] {
        assert_eq!(get(&single, host, key), serde_json::Value::Null, "{key}");
        set(&single, host, key, "overwritten");
    }
    assert_eq!(get(&tenants, "v.test", "secret"), "tenant-v-only");
    drop(single);

    // Folders whose names hold `:` and the escape character stay apart too.
    let mut stores = Vec::new();
    for name in ["a:b", "a%3Ab", "a"] {
        let project = folder.path().join(name);
        copy_built(&project);
        let server = run(
            &project,
            &["--kv-url", &kv, "--database-url", &db, "--migrate"],
        );
        set(&server, host, "b:k", name);
        set(&server, host, "k", name);
        stores.push((name, server));
    }
    for (name, server) in &stores {
        assert_eq!(get(server, host, "b:k"), *name);
        assert_eq!(get(server, host, "k"), *name);
    }
    drop(stores);
    for key in servers.redis.command(&["KEYS", "*"]).unwrap() {
        assert!(
            key.starts_with("filerouter:p:") || key.starts_with("filerouter:t:"),
            "{key}"
        );
    }

    // An operator's prefix that imitates a tenant's (or any of filerouter's) is refused.
    for prefix in ["filerouter:t:v:", "filerouter:tenant:", "filerouter:", ""] {
        let (code, output) = finish(
            &[
                "run",
                "--project",
                project.to_str().unwrap(),
                "--kv-url",
                &kv,
                "--kv-prefix",
                prefix,
                "--database-url",
                &db,
                "--port",
                "0",
            ],
            Duration::from_secs(60),
        );
        assert_eq!(code, Some(1), "{prefix}: {output}");
        assert!(
            output.contains("overlaps filerouter's own keys"),
            "{prefix}: {output}"
        );
        assert_no_password("the refusal", &output);
    }
    // Any other is used as given.
    let single = run(
        &project,
        &[
            "--kv-url",
            &kv,
            "--kv-prefix",
            "myapp:",
            "--database-url",
            &db,
        ],
    );
    set(&single, host, "k", "mine");
    assert_eq!(
        servers.redis.command(&["GET", "myapp:v:k"]).unwrap(),
        ["\"mine\""]
    );
    assert_eq!(get(&tenants, "v.test", "secret"), "tenant-v-only");
}

/// One project with SQLAlchemy models (`create_engine(db.url())`), relationships and the
/// types people keep in them (UUID, `DateTime(timezone=True)`, an `Enum`, `Boolean`,
/// `Numeric`, JSON), SQLModel's tutorial heroes, and one migration history whose first step
/// has a Postgres variant (`0001_users.postgres.sql` beside `0001_users.sql`), whose second is
/// shared, and whose third has a variant for each.
fn orm_project() -> Project {
    Project::new(&[
        ("requirements.txt", "SQLAlchemy==2.0.58\nsqlmodel==0.0.50\n"),
        (
            "migrations/0001_users.sql",
            "CREATE TABLE users (\n    id INTEGER PRIMARY KEY,\n    name VARCHAR(100) NOT NULL UNIQUE,\n    key CHAR(32) NOT NULL,\n    created DATETIME NOT NULL,\n    status VARCHAR(6) NOT NULL,\n    admin BOOLEAN NOT NULL,\n    balance NUMERIC(10, 2) NOT NULL,\n    prefs JSON NOT NULL\n);\nCREATE TABLE posts (\n    id INTEGER PRIMARY KEY,\n    author_id INTEGER NOT NULL REFERENCES users (id),\n    title VARCHAR(200) NOT NULL\n);\n",
        ),
        (
            "migrations/0001_users.postgres.sql",
            "CREATE TYPE status AS ENUM ('active', 'banned');\nCREATE TABLE users (\n    id SERIAL PRIMARY KEY,\n    name VARCHAR(100) NOT NULL UNIQUE,\n    key UUID NOT NULL,\n    created TIMESTAMPTZ NOT NULL,\n    status status NOT NULL,\n    admin BOOLEAN NOT NULL,\n    balance NUMERIC(10, 2) NOT NULL,\n    prefs JSONB NOT NULL\n);\nCREATE TABLE posts (\n    id SERIAL PRIMARY KEY,\n    author_id INTEGER NOT NULL REFERENCES users (id),\n    title VARCHAR(200) NOT NULL\n);\n",
        ),
        (
            "migrations/0002_post_titles.sql",
            "CREATE INDEX posts_by_title ON posts (title);\n",
        ),
        (
            "migrations/0003_heroes.sqlite.sql",
            "CREATE TABLE hero (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, age INTEGER);\n",
        ),
        (
            "migrations/0003_heroes.postgres.sql",
            "CREATE TABLE hero (id SERIAL PRIMARY KEY, name VARCHAR NOT NULL, age INTEGER);\n",
        ),
        (
            "routes/heroes/route.py",
            r#"
            from sqlmodel import Field, Session, SQLModel, create_engine, select

            from filerouter import db

            engine = create_engine(db.url())

            class Hero(SQLModel, table=True):
                id: int | None = Field(default=None, primary_key=True)
                name: str
                age: int | None = None

            async def POST(request):
                with Session(engine) as session:
                    hero = Hero.model_validate(await request.json())
                    session.add(hero)
                    session.commit()
                    session.refresh(hero)
                    return hero.model_dump(), 201

            def GET(request):
                with Session(engine) as session:
                    return [h.model_dump() for h in session.exec(select(Hero).where(Hero.age >= 18).order_by(Hero.id))]
            "#,
        ),
        (
            "routes/_lib/models.py",
            r#"
            import datetime
            import decimal
            import enum
            import uuid

            from sqlalchemy import JSON, DateTime, Enum, ForeignKey, Numeric, String, Uuid, create_engine
            from sqlalchemy.dialects.postgresql import JSONB
            from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

            from filerouter import db

            engine = create_engine(db.url())

            class Status(enum.Enum):
                active = "active"
                banned = "banned"

            class Base(DeclarativeBase):
                pass

            class User(Base):
                __tablename__ = "users"
                id: Mapped[int] = mapped_column(primary_key=True)
                name: Mapped[str] = mapped_column(String(100), unique=True)
                key: Mapped[uuid.UUID] = mapped_column(Uuid, default=uuid.uuid4)
                created: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True))
                status: Mapped[Status] = mapped_column(Enum(Status, name="status"), default=Status.active)
                admin: Mapped[bool] = mapped_column(default=False)
                balance: Mapped[decimal.Decimal] = mapped_column(Numeric(10, 2), default=decimal.Decimal(0))
                prefs: Mapped[dict] = mapped_column(JSON().with_variant(JSONB(), "postgresql"), default=dict)
                posts: Mapped[list["Post"]] = relationship(back_populates="author", order_by="Post.id")

            class Post(Base):
                __tablename__ = "posts"
                id: Mapped[int] = mapped_column(primary_key=True)
                author_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
                title: Mapped[str] = mapped_column(String(200))
                author: Mapped[User] = relationship(back_populates="posts")

            def shown(user):
                return {
                    "id": user.id,
                    "name": user.name,
                    "key": type(user.key).__name__ + ":" + str(len(str(user.key))),
                    "created": user.created.replace(tzinfo=None).isoformat(),
                    "created_zone": str(user.created.tzinfo),
                    "status": user.status.value,
                    "admin": user.admin,
                    "balance": repr(user.balance),
                    "prefs": user.prefs,
                    "posts": [p.title for p in user.posts],
                }
            "#,
        ),
        (
            "routes/users/route.py",
            r#"
            import datetime
            import decimal

            from sqlalchemy import select
            from sqlalchemy.exc import IntegrityError
            from sqlalchemy.orm import Session, selectinload

            from _lib.models import Post, Status, User, engine, shown

            async def POST(request):
                body = await request.json()
                with Session(engine) as session:
                    user = User(
                        name=body["name"],
                        created=datetime.datetime(2026, 11, 29, 12, 30, 15, 123456, tzinfo=datetime.timezone.utc),
                        status=Status(body.get("status", "active")),
                        admin=body.get("admin", False),
                        balance=decimal.Decimal(body.get("balance", "0")),
                        prefs=body.get("prefs", {}),
                        posts=[Post(title=t) for t in body.get("posts", [])],
                    )
                    session.add(user)
                    try:
                        session.commit()
                    except IntegrityError:
                        return {"detail": "taken"}, 409
                    return shown(user), 201

            def GET(request):
                with Session(engine) as session:
                    users = session.scalars(select(User).options(selectinload(User.posts)).order_by(User.id)).all()
                    return [shown(u) for u in users]
            "#,
        ),
        (
            "routes/users/[id]/route.py",
            r#"
            from sqlalchemy.orm import Session

            from _lib.models import User, engine, shown

            def GET(request, id: int):
                with Session(engine) as session:
                    user = session.get(User, id)
                    return shown(user) if user else ({"detail": "no such user"}, 404)
            "#,
        ),
        (
            "routes/core/route.py",
            r#"
            from sqlalchemy import func, insert, select, update

            from _lib.models import Post, User, engine

            def POST(request):
                with engine.begin() as conn:
                    first = conn.execute(select(User.id).order_by(User.id).limit(1)).scalar_one()
                    new = conn.execute(insert(Post).values(author_id=first, title="core").returning(Post.id, Post.title)).one()
                    balance = conn.execute(
                        update(User).where(User.id == first).values(balance=User.balance + 1).returning(User.balance)
                    ).scalar_one()
                    posts = conn.execute(select(func.count()).select_from(Post)).scalar_one()
                    dark = conn.execute(select(User.name).where(User.prefs["theme"].as_string() == "dark")).scalars().all()
                    admins = conn.execute(select(User.name).where(User.admin.is_(True))).scalars().all()
                return {"returned": list(new), "balance": repr(balance), "posts": posts, "dark": dark, "admins": admins}
            "#,
        ),
        (
            "routes/dialect/route.py",
            r#"
            from _lib.models import engine

            def GET(request):
                with engine.connect():
                    return {"dialect": engine.dialect.name}
            "#,
        ),
    ])
}

/// The requests of [`sqlalchemy_and_sqlmodel_run_unchanged_on_sqlite_and_on_postgres`]: writes through
/// `write`, reads through `read` (two processes on Postgres); the answers, in order.
fn orm_answers(write: &Server, read: &Server) -> Vec<serde_json::Value> {
    let post = |body: serde_json::Value, status: u16| {
        let response = write.request("POST", "/users").json(&body).send().unwrap();
        assert_eq!(response.status(), status, "{}", write.log());
        json(response)
    };
    let mut answers = vec![
        post(
            serde_json::json!({"name": "ann", "admin": true, "balance": "12.50",
                "prefs": {"theme": "dark", "tags": [1, 2]}, "posts": ["a", "b"], "status": "banned"}),
            201,
        ),
        post(serde_json::json!({"name": "bob"}), 201),
        post(serde_json::json!({"name": "ann"}), 409),
    ];
    answers.push(json(read.get("/users/1")));
    let core = write.request("POST", "/core").send().unwrap();
    assert_eq!(core.status(), 200, "{}", write.log());
    answers.push(json(core));
    answers.push(json(read.get("/users")));
    for hero in [
        serde_json::json!({"name": "Deadpond", "age": 30}),
        serde_json::json!({"name": "Spider-Boy", "age": 16}),
        serde_json::json!({"name": "Rusty-Man", "age": 48}),
    ] {
        let response = write.request("POST", "/heroes").json(&hero).send().unwrap();
        assert_eq!(response.status(), 201, "{}", write.log());
        answers.push(json(response));
    }
    answers.push(json(read.get("/heroes")));
    answers
}

#[test]
fn sqlalchemy_and_sqlmodel_run_unchanged_on_sqlite_and_on_postgres() {
    const TEST: &str = "sqlalchemy_and_sqlmodel_run_unchanged_on_sqlite_and_on_postgres";
    let Some(servers) = servers() else { return };
    let venv = match support::tools::python_venv() {
        Ok(venv) => venv,
        Err(why) => {
            return support::tools::missing(TEST, &why, "python3 and python3-venv, and reach PyPI");
        }
    };
    let project = orm_project();
    let python = venv.join("bin/python");
    let (code, stdout, stderr) = run_with_env(
        &[
            "packages",
            "install",
            "--project",
            ".",
            "--python",
            python.to_str().unwrap(),
        ],
        project.path(),
        &[],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");

    // SQLite, in dev.
    let dev = Server::dev(&project);
    assert_eq!(json(dev.get("/dialect"))["dialect"], "sqlite");
    let on_sqlite = orm_answers(&dev, &dev);
    drop(dev);

    // Postgres, the same build in two `run` processes.
    let (code, stdout, stderr) = run_with_env(&["build", "--project", "."], project.path(), &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let url = servers.pg.create_app("orm");
    let flags = ["--database-url", url.as_str(), "--migrate"];
    let a = run(project.path(), &flags);
    let b = run(project.path(), &flags);
    assert_eq!(json(a.get("/dialect"))["dialect"], "postgresql");
    let on_postgres = orm_answers(&a, &b);

    // The same answers, but for the time zone SQLite does not keep.
    let zones = |answers: &mut Vec<serde_json::Value>| -> Vec<String> {
        let mut zones = Vec::new();
        for answer in answers.iter_mut() {
            let users = match answer {
                serde_json::Value::Array(users) => users.iter_mut().collect::<Vec<_>>(),
                user => vec![user],
            };
            for user in users {
                if let Some(zone) = user.as_object_mut().and_then(|u| u.remove("created_zone")) {
                    zones.push(zone.as_str().unwrap_or_default().to_string());
                }
            }
        }
        zones
    };
    let (mut on_sqlite, mut on_postgres) = (on_sqlite, on_postgres);
    let (sqlite_zones, postgres_zones) = (zones(&mut on_sqlite), zones(&mut on_postgres));
    assert_eq!(on_sqlite, on_postgres);
    assert!(sqlite_zones.iter().all(|z| z == "None"), "{sqlite_zones:?}");
    assert!(
        !postgres_zones.is_empty() && postgres_zones.iter().all(|z| z == "UTC"),
        "{postgres_zones:?}"
    );
    assert_eq!(
        on_postgres[0],
        serde_json::json!({"id": 1, "name": "ann", "key": "UUID:36", "created": "2026-11-29T12:30:15.123456",
            "status": "banned", "admin": true, "balance": "Decimal('12.50')",
            "prefs": {"theme": "dark", "tags": [1, 2]}, "posts": ["a", "b"]})
    );
    assert_eq!(
        on_postgres[4],
        serde_json::json!({"returned": [3, "core"], "balance": "Decimal('13.50')", "posts": 3,
            "dark": ["ann"], "admins": ["ann"]})
    );

    // One history on both: the Postgres variant ran there, under the shared step's name.
    let columns = servers.pg.psql(
        "orm",
        &["SELECT data_type FROM information_schema.columns WHERE table_name = 'users' AND column_name = 'key'"],
    );
    assert!(columns.contains("uuid"), "{columns}");
    let (code, stdout, stderr) = run_with_env(
        &["db", "status", "--project", ".", "--database-url", &url],
        project.path(),
        &[],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (code, sqlite_status, stderr) =
        run_with_env(&["db", "status", "--project", "."], project.path(), &[]);
    assert_eq!(code, 0, "{sqlite_status}{stderr}");
    for status in [&stdout, &sqlite_status] {
        for step in ["0001_users.sql", "0002_post_titles.sql", "0003_heroes.sql"] {
            assert!(status.contains(step), "{status}");
        }
        assert!(!status.contains("postgres.sql"), "{status}");
    }
    assert_eq!(
        on_postgres.last(),
        Some(
            &serde_json::json!([{"id": 1, "name": "Deadpond", "age": 30}, {"id": 3, "name": "Rusty-Man", "age": 48}])
        )
    );
    assert_no_password("db status", &stdout);
}
