//! TLS to the data servers, and the Postgres pool's settings, against real servers.
//!
//! A second PostgreSQL cluster (tests/backends.rs starts it the same way) runs with `ssl = on`,
//! a server certificate for `localhost` only signed by a test CA (rcgen), and a pg_hba.conf
//! whose only TCP line is `hostssl`; a Redis server speaks only TLS (`--port 0 --tls-port`).
//! Both start once for the test binary. The pool's tests use tests/backends.rs's plain
//! servers. Projects are tests/backends.rs's fixture, built once by the real `filerouter build`.

use crate::backends::{self, PASSWORD, Postgres};
use crate::support;

use std::{
    net::TcpStream,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::OnceLock,
    thread,
    time::{Duration, Instant},
};

use support::{eventually, free_port, json, remote::TestCa};

/// The TLS cluster, and the CA that signed its certificate.
pub(crate) struct TlsPostgres {
    pub(crate) pg: Postgres,
    pub(crate) ca_file: PathBuf,
    /// A CA that signed nothing the servers use.
    wrong_ca_file: PathBuf,
    _files: tempfile::TempDir,
}

/// The TLS cluster, started on first use; `None` when the servers are not installed (as
/// [`backends::servers`] decides).
pub(crate) fn tls_postgres() -> Option<&'static TlsPostgres> {
    backends::servers()?;
    static STARTED: OnceLock<TlsPostgres> = OnceLock::new();
    Some(STARTED.get_or_init(|| {
        let (bin, _) = backends::binaries().expect("the servers are installed");
        let ca = TestCa::for_names(&["localhost"]);
        let files = tempfile::tempdir().unwrap();
        let ca_file = ca.write_ca(files.path());
        let wrong_dir = files.path().join("wrong");
        std::fs::create_dir(&wrong_dir).unwrap();
        let wrong_ca_file = TestCa::new().write_ca(&wrong_dir);
        let pg = Postgres::start_with(&bin, |dir| {
            let tls = dir.join("tls");
            std::fs::create_dir(&tls).unwrap();
            std::fs::write(tls.join("server.crt"), &ca.server_cert_pem).unwrap();
            let key = tls.join("server.key");
            std::fs::write(&key, &ca.server_key_pem).unwrap();
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
            let hba = tls.join("pg_hba.conf");
            std::fs::write(
                &hba,
                "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhostssl all all ::1/128 scram-sha-256\n",
            )
            .unwrap();
            let file = |name: &str| tls.join(name).display().to_string();
            [
                "ssl=on".to_string(),
                format!("ssl_cert_file={}", file("server.crt")),
                format!("ssl_key_file={}", file("server.key")),
                format!("hba_file={}", hba.display()),
            ]
            .into_iter()
            .flat_map(|setting| ["-c".to_string(), setting])
            .collect()
        });
        TlsPostgres {
            pg,
            ca_file,
            wrong_ca_file,
            _files: files,
        }
    }))
}

impl TlsPostgres {
    /// The URL of database `name` on host `host` with these TLS options.
    pub(crate) fn url(&self, name: &str, host: &str, options: &str) -> String {
        format!(
            "postgres://{name}:{PASSWORD}@{host}:{}/{name}?{options}",
            self.pg.port
        )
    }
}

/// `filerouter db status` of a copy of the fixture against `url`: exit code and output.
fn db_status(project: &Path, url: &str) -> (Option<i32>, String) {
    backends::finish(
        &[
            "db",
            "status",
            "--project",
            project.to_str().unwrap(),
            "--database-url",
            url,
        ],
        Duration::from_secs(60),
    )
}

#[test]
fn postgres_verify_full_with_the_right_ca_serves_every_connection_over_tls() {
    let Some(tls) = tls_postgres() else { return };
    tls.pg.create_app("tlsok");
    let project = tempfile::tempdir().unwrap();
    backends::copy_built(project.path());
    let ca = tls.ca_file.display().to_string();
    let url = tls.url(
        "tlsok",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let server = backends::run(project.path(), &["--database-url", &url, "--migrate"]);
    assert_eq!(backends::post(&server, "over tls").status(), 201);
    assert_eq!(
        backends::posts(&server)["titles"],
        serde_json::json!(["over tls"])
    );
    // Every connection of both roles (the host's and route code's) is encrypted.
    let by_ssl = tls.pg.psql(
        "postgres",
        &["SELECT string_agg(DISTINCT s.ssl::text, ',') || ' ' || count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename IN ('tlsok', 'tlsok_route')"],
    );
    let (kinds, count) = by_ssl.split_once(' ').unwrap();
    assert_eq!(kinds, "true", "connections without TLS: {by_ssl}");
    assert!(count.parse::<u32>().unwrap() >= 2, "{by_ssl}");
    backends::assert_no_password("run's log", &server.log());
}

#[test]
fn postgres_tls_settings_that_do_not_fit_the_server_stop_the_start_with_the_reason() {
    let Some(tls) = tls_postgres() else { return };
    tls.pg.create_app("tlsbad");
    let project = tempfile::tempdir().unwrap();
    backends::copy_built(project.path());
    let port = tls.pg.port;
    let (ca, wrong) = (tls.ca_file.display(), tls.wrong_ca_file.display());
    let refused = |host: &str, options: String, reason: &[&str]| {
        let url = tls.url("tlsbad", host, &options);
        let (code, output) = db_status(project.path(), &url);
        assert_ne!(code, Some(0), "{options}: {output}");
        assert!(
            output.contains(&format!("{host}:{port}/tlsbad")),
            "{options}: the message names no server: {output}"
        );
        for words in reason {
            assert!(
                output.contains(words),
                "{options}: no {words:?} in: {output}"
            );
        }
        backends::assert_no_password(&options, &output);
    };
    // A CA that did not sign the server's certificate.
    refused(
        "localhost",
        format!("sslmode=verify-full&sslrootcert={wrong}"),
        &["not signed by a CA in the CA file", "wrong/ca.pem"],
    );
    refused(
        "localhost",
        format!("sslmode=verify-ca&sslrootcert={wrong}"),
        &["not signed by a CA"],
    );
    // The right CA, but the certificate is for localhost, not 127.0.0.1.
    refused(
        "127.0.0.1",
        format!("sslmode=verify-full&sslrootcert={ca}"),
        &["not for the host name"],
    );
    // No TLS against a server that accepts only TLS.
    refused(
        "localhost",
        "sslmode=disable".into(),
        &["no encryption", "accepts only TLS"],
    );
    // A CA file that is not there, or not one.
    refused(
        "localhost",
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem".into(),
        &["the CA file /nonexistent/ca.pem"],
    );
    let (code, output) = db_status(
        project.path(),
        &tls.url("tlsbad", "localhost", "sslmode=verify-everything"),
    );
    assert_ne!(code, Some(0));
    assert!(output.contains("verify-everything"), "{output}");

    // What passes: the chain without the name, and encryption alone.
    for (host, options) in [
        ("127.0.0.1", format!("sslmode=verify-ca&sslrootcert={ca}")),
        ("127.0.0.1", "sslmode=require".to_string()),
        ("localhost", "sslmode=prefer".to_string()),
    ] {
        let (code, output) = db_status(project.path(), &tls.url("tlsbad", host, &options));
        assert_eq!(code, Some(0), "{options}: {output}");
    }

    // `run` stops the same way, before serving.
    let url = tls.url(
        "tlsbad",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={wrong}"),
    );
    let (code, output) = backends::finish(
        &[
            "run",
            "--project",
            project.path().to_str().unwrap(),
            "--port",
            "0",
            "--database-url",
            &url,
        ],
        Duration::from_secs(60),
    );
    assert_ne!(code, Some(0), "{output}");
    assert!(
        output.contains("not signed by a CA in the CA file"),
        "{output}"
    );
    backends::assert_no_password("run", &output);
}

/// A Redis server that speaks only TLS, with `ca`'s certificate; its port.
struct TlsRedis {
    _server: backends::Guarded,
    port: u16,
    _dir: tempfile::TempDir,
}

fn tls_redis(ca: &TestCa) -> TlsRedis {
    let (_, program) = backends::binaries().expect("the servers are installed");
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (cert, key, ca_file) = (
        file("server.crt", &ca.server_cert_pem),
        file("server.key", &ca.server_key_pem),
        file("ca.pem", &ca.ca_pem),
    );
    let port = free_port();
    let port_s = port.to_string();
    let server = backends::Guarded::start(
        &[
            program.to_str().unwrap(),
            "--port",
            "0",
            "--tls-port",
            &port_s,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca_file,
            "--tls-auth-clients",
            "no",
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
    let listening = eventually(Duration::from_secs(20), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(
        listening,
        "Redis with TLS did not start:\n{}",
        std::fs::read_to_string(dir.path().join("redis.log")).unwrap_or_default()
    );
    TlsRedis {
        _server: server,
        port,
        _dir: dir,
    }
}

#[test]
fn redis_over_tls_keeps_kv_and_a_wrong_ca_stops_the_start() {
    let Some(tls) = tls_postgres() else { return };
    let Some(servers) = backends::servers() else {
        return;
    };
    // The fixture's migration is Postgres's.
    let database = servers.pg.create_app("tlskv");
    let ca = TestCa::new();
    let redis = tls_redis(&ca);
    let files = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca(files.path());
    let project = tempfile::tempdir().unwrap();
    backends::copy_built(project.path());
    let data = tempfile::tempdir().unwrap();
    let url = format!(
        "rediss://:{PASSWORD}@localhost:{}/0?ssl_ca_certs={}",
        redis.port,
        ca_file.display()
    );
    let server = backends::run(
        project.path(),
        &[
            "--kv-url",
            &url,
            "--database-url",
            &database,
            "--data-dir",
            data.path().to_str().unwrap(),
            "--migrate",
        ],
    );
    for expected in 1..=2 {
        let response = server.request("POST", "/hits").send().unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(json(response)["hits"], expected);
    }
    assert_eq!(json(server.get("/hits"))["hits"], 2);
    drop(server);

    // `run` with the kv store at `url`, to its end: (exit code, output).
    let run_with_kv = |url: &str| {
        backends::finish(
            &[
                "run",
                "--project",
                project.path().to_str().unwrap(),
                "--port",
                "0",
                "--data-dir",
                data.path().to_str().unwrap(),
                "--database-url",
                &database,
                "--kv-url",
                url,
            ],
            Duration::from_secs(60),
        )
    };
    // The same server, and a CA that did not sign its certificate: the start stops.
    let wrong = tls.wrong_ca_file.display();
    let url = format!(
        "rediss://:{PASSWORD}@localhost:{}/0?ssl_ca_certs={wrong}",
        redis.port
    );
    let (code, output) = run_with_kv(&url);
    assert_ne!(code, Some(0), "{output}");
    for words in [
        &format!("rediss://:***@localhost:{}/0", redis.port),
        "not signed by a CA in the CA file",
        "wrong/ca.pem",
    ] {
        assert!(output.contains(words), "no {words:?} in: {output}");
    }
    backends::assert_no_password("run", &output);
    // A CA file that is not there is named before anything connects.
    let url = format!(
        "rediss://:{PASSWORD}@localhost:{}/0?ssl_ca_certs=/nonexistent/ca.pem",
        redis.port
    );
    let (code, output) = run_with_kv(&url);
    assert_ne!(code, Some(0), "{output}");
    assert!(output.contains("/nonexistent/ca.pem"), "{output}");
}

/// Connections of role `role` open now, and how many of them are running a statement (a
/// connection the pool is closing may still be listed for a moment, never as active).
fn connections(pg: &Postgres, role: &str) -> (u32, u32) {
    let counts = pg.psql(
        "postgres",
        &[&format!(
            "SELECT count(*) || ' ' || count(*) FILTER (WHERE state = 'active') FROM pg_stat_activity WHERE usename = '{role}'"
        )],
    );
    let (open, active) = counts.split_once(' ').unwrap();
    (open.parse().unwrap(), active.parse().unwrap())
}

#[test]
fn the_pool_size_caps_open_connections_and_the_checkout_timeout_bounds_the_wait() {
    let Some(servers) = backends::servers() else {
        return;
    };
    let url = servers.pg.create_app("poolcap");
    let project = tempfile::tempdir().unwrap();
    backends::copy_built(project.path());
    let server = backends::run(
        project.path(),
        &["--database-url", &url, "--migrate", "--db-pool-size", "3"],
    );
    // Six requests that each hold a connection for 0.4 s, at once; the connections counted
    // while they run.
    let most = thread::scope(|s| {
        let requests: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    let response = server.get("/pgsleep?s=0.4");
                    assert_eq!(
                        response.status(),
                        200,
                        "{}",
                        response.text().unwrap_or_default()
                    );
                })
            })
            .collect();
        let mut most = 0;
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until && !requests.iter().all(|r| r.is_finished()) {
            most = most.max(connections(&servers.pg, "poolcap_route").1);
            thread::sleep(Duration::from_millis(20));
        }
        for request in requests {
            request.join().unwrap();
        }
        most
    });
    assert_eq!(most, 3, "route code's connections in use at most");
    // Once the burst is over, in use and idle together.
    thread::sleep(Duration::from_millis(300));
    let (open, _) = connections(&servers.pg, "poolcap_route");
    assert!((1..=3).contains(&open), "{open} connections open");
    drop(server);

    // One connection, and a request that waits longer than the checkout timeout for it.
    let server = backends::run(
        project.path(),
        &[
            "--database-url",
            &url,
            "--db-pool-size",
            "1",
            "--db-checkout-timeout",
            "0.2",
        ],
    );
    let answers: Vec<(u16, String)> = thread::scope(|s| {
        let first = s.spawn(|| server.get("/pgsleep?s=1"));
        thread::sleep(Duration::from_millis(300));
        let second = s.spawn(|| server.get("/pgsleep?s=1"));
        [first, second]
            .into_iter()
            .map(|h| {
                let response = h.join().unwrap();
                (
                    response.status().as_u16(),
                    response.text().unwrap_or_default(),
                )
            })
            .collect()
    });
    // The second fails at `connect()`, outside the route's `try`: a 500, the reason in the log.
    assert_eq!(answers[0].0, 200, "{answers:?}");
    assert_eq!(answers[1].0, 500, "{answers:?}");
    let log = server.log();
    assert!(
        log.contains("all 1 connections to the database at")
            && log.contains("were in use for 0.2s"),
        "{log}"
    );
}

#[test]
fn bad_pool_settings_are_refused_by_name() {
    let project = tempfile::tempdir().unwrap();
    let path = project.path().to_str().unwrap();
    for (flag, value, words) in [
        ("--db-pool-size", "0", "must be from 1 to 10000"),
        ("--db-pool-size", "lots", "must be from 1 to 10000"),
        (
            "--db-connect-timeout",
            "0",
            "must be a number of seconds above 0",
        ),
        ("--db-checkout-timeout", "-1", "must be a number of seconds"),
        ("--db-checkout-timeout", "5000", "at most 3600"),
    ] {
        let (code, output) = backends::finish(
            &["run", "--project", path, &format!("{flag}={value}")],
            Duration::from_secs(30),
        );
        assert_eq!(code, Some(2), "{flag} {value}: {output}");
        assert!(
            output.contains(flag) && output.contains(words),
            "{flag} {value}: {output}"
        );
    }
    let site = project.path().join("site");
    std::fs::create_dir(&site).unwrap();
    let tenants = project.path().join("tenants.toml");
    std::fs::write(
        &tenants,
        "[tenant.a]\nproject = \"site\"\nhosts = [\"a.test\"]\n\ndb_pool_size = 0\n",
    )
    .unwrap();
    let (code, output) = backends::finish(
        &["run", "--tenants", tenants.to_str().unwrap(), "--port", "0"],
        Duration::from_secs(30),
    );
    assert_ne!(code, Some(0), "{output}");
    assert!(
        output.contains("tenants.toml:5: `db_pool_size` must be from 1 to 10000, not 0"),
        "{output}"
    );
}
