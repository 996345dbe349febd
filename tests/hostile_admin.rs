//! `run --tenants --admin` under hostile load (issue 30, point 3): the admin port is bounded like
//! the public one (a header timeout, a connection cap), a flood of the public port leaves the
//! descriptors the admin port and a tenant's load need, running out of files during a load
//! refuses no tenant, and a refused tenant is tried again after a back-off even if its cache
//! did not change.

use crate::support;

use std::{
    net::TcpStream,
    os::unix::fs::FileExt,
    path::Path,
    thread,
    time::{Duration, Instant},
};

use support::{
    admin::{
        Site, admin_address, built, closed_before, exchange, get, healthz, open_files,
        public_address, refused, set_soft_nofile, sockets,
    },
    eventually, run_with_env,
};

/// The admin port's header timeout (`admin::HEADER_TIMEOUT`).
const ADMIN_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The admin port's connection cap (`admin::MAX_CONNECTIONS`).
const ADMIN_MAX_CONNECTIONS: usize = 64;

fn plain() -> &'static Path {
    static PLAIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PLAIN.get_or_init(|| {
        built(
            "plain",
            &[(
                "routes/index.py",
                "def GET(request):\n    return {'ok': True}\n",
            )],
        )
    })
}

fn migrated() -> &'static Path {
    static MIGRATED: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    MIGRATED.get_or_init(|| {
        built(
            "migrated",
            &[
                (
                    "migrations/0001_items.sql",
                    "CREATE TABLE items (id INTEGER PRIMARY KEY);\n",
                ),
                (
                    "routes/index.py",
                    "def GET(request):\n    return {'ok': True}\n",
                ),
            ],
        )
    })
}

/// One tenant `t` (host `t.test`), the plain project.
const ONE: &str = r#"
    [tenant.t]
    hosts = ["t.test"]
    project = "t"
"#;

fn one_tenant() -> Site {
    Site::new(&[("t", plain())], ONE)
}

fn connect(address: &str) -> TcpStream {
    TcpStream::connect(address).unwrap()
}

#[test]
fn idle_admin_connections_are_closed_after_the_header_timeout() {
    let site = one_tenant();
    let server = site.start(None, &[]);
    let admin = admin_address(&server);

    // One that asked once and keeps the connection alive, one that sends half a head a bit at
    // a time, and some that never send a byte.
    let mut kept = connect(&admin);
    let (status, _, body) = exchange(&mut kept, "GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n");
    assert_eq!(status, 200, "{body}");
    let opened = Instant::now();
    let mut slow = connect(&admin);
    let mut silent: Vec<TcpStream> = (0..8).map(|_| connect(&admin)).collect();
    {
        use std::io::Write;
        slow.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
        for _ in 0..3 {
            thread::sleep(Duration::from_millis(500));
            if slow.write_all(b"X-Slow: 1\r\n").is_err() {
                break;
            }
        }
    }

    let deadline = opened + ADMIN_HEADER_TIMEOUT + Duration::from_secs(4);
    assert!(
        closed_before(&mut kept, deadline),
        "an idle keep-alive connection to the admin port stayed open"
    );
    assert!(
        closed_before(&mut slow, deadline),
        "a slow request head on the admin port kept its connection open"
    );
    for (i, stream) in silent.iter_mut().enumerate() {
        assert!(
            closed_before(stream, deadline),
            "silent admin connection {i} stayed open past the header timeout"
        );
    }
    // Closed by the timeout, not at once.
    assert!(
        opened.elapsed() >= ADMIN_HEADER_TIMEOUT - Duration::from_millis(500),
        "closed after {:?}",
        opened.elapsed()
    );
    // The port still serves.
    assert!(healthz(&server, Duration::from_secs(5)).is_some());
}

#[test]
fn admin_connections_beyond_the_cap_wait_and_hold_no_descriptors() {
    let site = one_tenant();
    let server = site.start(None, &[]);
    let admin = admin_address(&server);
    let pid = server.pid();
    let before = sockets(pid);

    let held: Vec<TcpStream> = (0..200).map(|_| connect(&admin)).collect();
    thread::sleep(Duration::from_millis(1500));
    let during = sockets(pid) - before;
    assert!(
        during <= ADMIN_MAX_CONNECTIONS,
        "200 connections to the admin port hold {during} sockets in the server (cap {ADMIN_MAX_CONNECTIONS})"
    );
    assert!(
        during >= ADMIN_MAX_CONNECTIONS / 2,
        "only {during} admin connections were accepted"
    );
    assert!(
        eventually(Duration::from_secs(20), || server
            .log()
            .contains("admin connection limit reached")),
        "{}",
        server.log()
    );

    // Once they go, the port answers again at once, and holds no more than before.
    drop(held);
    assert!(
        healthz(&server, Duration::from_secs(5)).is_some(),
        "{}",
        server.log()
    );
    assert!(
        eventually(Duration::from_secs(20), || sockets(pid) <= before + 1),
        "{} sockets, {before} before",
        sockets(pid)
    );
}

#[test]
fn health_and_tenant_loads_go_on_while_the_public_port_is_flooded() {
    // 56 files: a cap of three quarters (42) plus what the process holds anyway would take
    // them all; the public port must leave room for the admin port and for a tenant's load.
    let site = one_tenant();
    let server = site.start(Some(56), &[]);
    let public = public_address(&server);

    // A connection accepted before the flood, to ask for the tenant during it.
    let mut early = connect(&public);
    thread::sleep(Duration::from_millis(300));
    let flood: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect(&public).ok())
        .collect();
    thread::sleep(Duration::from_millis(700));

    let health = healthz(&server, Duration::from_secs(4));
    assert!(
        health.is_some(),
        "/healthz did not answer while the public port was flooded:\n{}",
        server.log()
    );
    let (status, _, body) = exchange(&mut early, "GET / HTTP/1.1\r\nHost: t.test\r\n\r\n");
    assert_eq!(
        status,
        200,
        "the tenant's first load during the flood: {body}\n{}",
        server.log()
    );
    assert!(
        !server.log().contains("Too many open files"),
        "{}",
        server.log()
    );
    drop(flood);
}

#[test]
fn running_out_of_files_during_a_first_load_refuses_nothing() {
    let site = one_tenant();
    let server = site.start(None, &[]);
    let public = public_address(&server);
    let pid = server.pid();

    // Connections accepted before the files run out: one for the tenant, one for /healthz.
    let mut early = connect(&public);
    let mut admin = connect(&admin_address(&server));
    thread::sleep(Duration::from_millis(300));

    // The process may open no more files than it has; a flood takes whatever is left.
    let limit = set_soft_nofile(pid, open_files(pid) as u64);
    let flood: Vec<TcpStream> = (0..64)
        .filter_map(|_| TcpStream::connect(&public).ok())
        .collect();
    assert!(
        eventually(Duration::from_secs(3), || server
            .log()
            .contains("accept failed")),
        "{}",
        server.log()
    );

    // The tenant's first load cannot open its files: 503, try again later.
    let (status, head, _) = exchange(&mut early, "GET / HTTP/1.1\r\nHost: t.test\r\n\r\n");
    assert_eq!(status, 503, "{}", server.log());
    assert!(head.contains("retry-after:"), "{head}");
    // ... and it is not refused.
    let (status, _, body) = exchange(&mut admin, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refused(&health), Vec::<String>::new(), "{}", server.log());

    // The flood ends and files are back: the tenant serves, its cache untouched.
    drop(flood);
    set_soft_nofile(pid, limit);
    assert!(
        eventually(Duration::from_secs(10), || get(&server, "t.test", "/")
            .is_some_and(|(status, _)| status == 200)),
        "{}",
        server.log()
    );
    let log = server.log();
    assert!(log.contains("Too many open files"), "{log}");
    assert!(log.contains("cannot load") && log.contains("now"), "{log}");
    let health = healthz(&server, Duration::from_secs(5)).unwrap();
    assert_eq!(refused(&health), Vec::<String>::new());
}

#[test]
fn a_refused_tenant_is_tried_again_after_a_back_off_though_its_cache_looks_the_same() {
    let site = one_tenant();
    let bundle = site.path().join("t/.cache/bundle.bin");
    let stamp = |path: &Path| {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).unwrap();
        (meta.modified().unwrap(), meta.len(), meta.ino())
    };
    let before = stamp(&bundle);
    // One byte damaged in place, the file's time put back: the same size, inode and time.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&bundle)
        .unwrap();
    let middle = before.1 / 2;
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, middle).unwrap();
    file.write_all_at(&[byte[0] ^ 0x55], middle).unwrap();
    file.set_modified(before.0).unwrap();
    assert_eq!(stamp(&bundle), before);

    let server = site.start(None, &[]);
    assert_eq!(get(&server, "t.test", "/").unwrap().0, 503);
    assert!(server.log_shows("checksum"), "{}", server.log());
    let health = healthz(&server, Duration::from_secs(5)).unwrap();
    assert_eq!(refused(&health), vec!["t".to_string()]);

    // Mended the same way: nothing the watcher can see changes.
    file.write_all_at(&byte, middle).unwrap();
    file.set_modified(before.0).unwrap();
    assert_eq!(stamp(&bundle), before);
    assert!(
        eventually(Duration::from_secs(10), || get(&server, "t.test", "/")
            .is_some_and(|(status, _)| status == 200)),
        "{}",
        server.log()
    );
    let health = healthz(&server, Duration::from_secs(5)).unwrap();
    assert_eq!(refused(&health), Vec::<String>::new());
}

#[test]
fn a_tenant_behind_its_migrations_serves_once_they_are_applied() {
    let site = Site::new(
        &[("m", migrated())],
        r#"
        [tenant.m]
        hosts = ["m.test"]
        project = "m"
        data_dir = "m-data"
        "#,
    );
    let server = site.start(None, &[]);
    let (status, _) = get(&server, "m.test", "/").unwrap();
    assert_eq!(status, 503);
    // The server's log is read from its stderr by a thread of the test: the line can arrive
    // after the answer does.
    assert!(
        eventually(Duration::from_secs(10), || server
            .log()
            .contains("the database is behind the build's migrations")),
        "{}",
        server.log()
    );
    let health = healthz(&server, Duration::from_secs(5)).unwrap();
    assert_eq!(refused(&health), vec!["m".to_string()]);

    let data = site.path().join("m-data");
    let (code, stdout, stderr) = run_with_env(
        &[
            "db",
            "migrate",
            "--project",
            ".",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &site.path().join("m"),
        &[],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    // Its cache did not change; the back-off brings it back.
    assert!(
        eventually(Duration::from_secs(15), || get(&server, "m.test", "/")
            .is_some_and(|(status, _)| status == 200)),
        "{}",
        server.log()
    );
    let health = healthz(&server, Duration::from_secs(5)).unwrap();
    assert_eq!(refused(&health), Vec::<String>::new());
}
