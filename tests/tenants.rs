//! Multi-tenant `filerouter run --tenants`: three projects built with the real `filerouter build`,
//! served by one process; routing by host, isolation attempts between tenants, per-tenant caps,
//! changes without a restart, a tampered cache, and the admin endpoint.

use crate::support;

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    sync::OnceLock,
    thread,
    time::Duration,
};

use support::{Server, eventually, json, run_with_env};

/// One route set, built once per tenant name; `NAME` is replaced by the tenant's name.
const ROUTES: &[(&str, &str)] = &[
    (
        "routes/index.py",
        "def GET(request):\n    return {'tenant': 'NAME'}\n",
    ),
    (
        "routes/only-NAME/route.py",
        "def GET(request):\n    return {'only': 'NAME'}\n",
    ),
    (
        "routes/kv/route.py",
        r#"
        from filerouter import kv

        def GET(request):
            return {"tenant": "NAME", "secret": kv.get("secret"), "count": kv.get("count")}

        async def POST(request):
            kv.set("secret", "NAME-secret")
            return {"count": kv.incr("count")}
        "#,
    ),
    (
        "routes/who/route.py",
        r#"
        def GET(request):
            return {"tenant": "NAME", "host": request.headers.get("host")}
        "#,
    ),
    (
        "routes/cpu/route.py",
        r#"
        import time

        def GET(request, ms: int = 100):
            end = time.monotonic() + ms / 1000
            n = 0
            while time.monotonic() < end:
                n += 1
            return {"tenant": "NAME", "spins": n}
        "#,
    ),
    (
        "routes/mem/route.py",
        r#"
        def GET(request, mb: int = 1):
            block = bytearray(mb * 1024 * 1024)
            return {"tenant": "NAME", "bytes": len(block)}
        "#,
    ),
    (
        "routes/slow/route.py",
        r#"
        import asyncio

        VERSION = "v1"

        async def GET(request, s: float = 1.0):
            await asyncio.sleep(s)
            return {"tenant": "NAME", "version": VERSION}
        "#,
    ),
    (
        "routes/peak/route.py",
        r#"
        import asyncio
        from filerouter import kv

        async def GET(request, s: float = 1.0):
            now = kv.incr("running")
            kv.incr(f"seen-{now}")
            await asyncio.sleep(s)
            kv.incr("running", -1)
            return {"peak": max(n for n in range(1, 64) if kv.get(f"seen-{n}"))}
        "#,
    ),
    ("public/hello.txt", "NAME file\n"),
];

/// The names of the built fixture tenants.
const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

/// The fixture tenants, each built once by the real `filerouter build` into a shared folder;
/// tests copy them.
fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = support::lasting_tempdir();
            let builds: Vec<_> = NAMES
                .iter()
                .map(|name| {
                    let project = dir.join(name);
                    write_project(&project, name);
                    thread::spawn(move || build(&project))
                })
                .collect();
            for build in builds {
                build.join().unwrap();
            }
            dir
        })
        .as_path()
}

fn write_project(project: &Path, name: &str) {
    for (rel, content) in ROUTES {
        let path = project.join(rel.replace("NAME", name));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, support::dedent(&content.replace("NAME", name))).unwrap();
    }
}

fn build(project: &Path) {
    let (code, stdout, stderr) = run_with_env(&["build", "--project", "."], project, &[]);
    assert_eq!(
        code,
        0,
        "build of {}:\n{stdout}\n{stderr}",
        project.display()
    );
}

/// A folder holding copies of the built tenants (with their caches) and a tenants file.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new(toml: &str) -> Site {
        let dir = tempfile::tempdir().unwrap();
        for name in NAMES {
            support::copy_all(&built().join(name), &dir.path().join(name));
        }
        let site = Site { dir };
        site.write_config(toml);
        site
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn config(&self) -> PathBuf {
        self.path().join("tenants.toml")
    }

    /// Replace the tenants file the way an editor does: a new file renamed over the old one.
    fn write_config(&self, toml: &str) {
        let tmp = self.path().join("tenants.toml.tmp");
        std::fs::write(&tmp, support::dedent(toml)).unwrap();
        std::fs::rename(tmp, self.config()).unwrap();
    }

    fn start(&self, extra: &[&str]) -> Server {
        let config = self.config();
        let mut args = vec!["run", "--tenants", config.to_str().unwrap()];
        args.extend_from_slice(extra);
        Server::start(&args, &[], Duration::from_secs(120))
    }
}

const THREE: &str = r#"
    [defaults]
    memory_mb = 256
    cpu_ms = 5000

    [tenant.alpha]
    hosts = ["alpha.test", "*.alpha.test"]
    project = "alpha"

    [tenant.beta]
    hosts = ["beta.test"]
    project = "beta"

    [tenant.gamma]
    hosts = ["gamma.test"]
    project = "gamma"
"#;

/// GET `path` on `server` as host `host`.
fn get(server: &Server, host: &str, path: &str) -> support::Response {
    server
        .request("GET", path)
        .header("host", host)
        .send()
        .expect("GET")
}

/// Send raw bytes and read the whole answer (the request should close the connection).
fn raw(server: &Server, request: &str) -> String {
    let address = server.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[test]
fn requests_are_routed_by_host_with_wildcards_and_unknown_hosts_get_404() {
    let site = Site::new(THREE);
    let server = site.start(&[]);
    for (host, tenant) in [
        ("alpha.test", "alpha"),
        ("ALPHA.test:8080", "alpha"),
        ("www.alpha.test", "alpha"),
        ("a.b.alpha.test", "alpha"),
        ("beta.test", "beta"),
        ("beta.test.", "beta"),
        ("gamma.test", "gamma"),
    ] {
        let response = get(&server, host, "/");
        assert_eq!(response.status(), 200, "{host}");
        assert_eq!(json(response)["tenant"], tenant, "{host}");
    }
    for host in [
        "unknown.test",
        "alpha.test.evil",
        "xalpha.test",
        "www.beta.test",
        "127.0.0.1",
    ] {
        let response = get(&server, host, "/");
        assert_eq!(response.status(), 404, "{host}");
        assert_eq!(
            response.text().unwrap(),
            r#"{"detail":"Unknown host"}"#,
            "{host}"
        );
    }

    // With a default tenant, unknown hosts go there instead.
    site.write_config(&format!(
        "default_tenant = \"gamma\"\n{}",
        support::dedent(THREE)
    ));
    assert!(
        eventually(Duration::from_secs(10), || {
            get(&server, "unknown.test", "/").status() == 200
        }),
        "{}",
        server.log()
    );
    assert_eq!(json(get(&server, "unknown.test", "/"))["tenant"], "gamma");
    assert_eq!(json(get(&server, "alpha.test", "/"))["tenant"], "alpha");
}

#[test]
fn no_tenant_reaches_another_tenants_routes_files_or_kv() {
    let site = Site::new(THREE);
    let server = site.start(&[]);

    // kv: each tenant has its own store.
    let response = server
        .request("POST", "/kv")
        .header("host", "alpha.test")
        .send()
        .unwrap();
    assert_eq!(json(response)["count"], 1);
    let beta = json(get(&server, "beta.test", "/kv"));
    assert_eq!(beta["secret"], serde_json::Value::Null, "{beta}");
    assert_eq!(beta["count"], serde_json::Value::Null, "{beta}");
    let alpha = json(get(&server, "alpha.test", "/kv"));
    assert_eq!(alpha["secret"], "alpha-secret");
    let response = server
        .request("POST", "/kv")
        .header("host", "beta.test")
        .send()
        .unwrap();
    assert_eq!(
        json(response)["count"],
        1,
        "beta's counter starts at its own zero"
    );

    // Routes: another tenant's route does not exist here.
    assert_eq!(get(&server, "alpha.test", "/only-alpha").status(), 200);
    assert_eq!(get(&server, "beta.test", "/only-alpha").status(), 404);

    // Files: each tenant sees its own public/, and no path leads into another's.
    assert_eq!(
        get(&server, "beta.test", "/hello.txt").text().unwrap(),
        "beta file\n"
    );
    for path in [
        "/../alpha/public/hello.txt",
        "/%2e%2e/alpha/public/hello.txt",
        "/..%2falpha%2fpublic%2fhello.txt",
        "/%2e%2e%2f%2e%2e%2falpha%2fpublic%2fhello.txt",
        "//alpha/public/hello.txt",
    ] {
        let response = get(&server, "beta.test", path);
        let status = response.status().as_u16();
        let body = response.text().unwrap();
        assert!(!body.contains("alpha"), "{path}: {status} {body}");
    }

    // Headers that name another host are not routing: Host decides.
    for header in ["x-forwarded-host", "forwarded", "x-host", "x-original-host"] {
        let value = if header == "forwarded" {
            "host=alpha.test"
        } else {
            "alpha.test"
        };
        let response = server
            .request("GET", "/who")
            .header("host", "beta.test")
            .header(header, value)
            .send()
            .unwrap();
        assert_eq!(json(response)["tenant"], "beta", "{header}");
    }

    // Absolute-form target: its authority wins over Host (RFC 9112, 3.2.2).
    let answer = raw(
        &server,
        "GET http://alpha.test/who HTTP/1.1\r\nHost: beta.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert!(
        answer.contains(r#""tenant": "alpha""#) || answer.contains(r#""tenant":"alpha""#),
        "{answer}"
    );
    assert!(!answer.contains("beta"), "{answer}");

    // Requests naming two hosts at once, or none, reach no tenant.
    for request in [
        "GET /who HTTP/1.1\r\nHost: alpha.test\r\nHost: beta.test\r\nConnection: close\r\n\r\n",
        "GET /who HTTP/1.1\r\nHost: alpha.test, beta.test\r\nConnection: close\r\n\r\n",
        "GET /who HTTP/1.1\r\nHost: alpha.test beta.test\r\nConnection: close\r\n\r\n",
        "GET http://alpha.test@beta.test/who HTTP/1.1\r\nHost: beta.test\r\nConnection: close\r\n\r\n",
        "GET /who HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET /who HTTP/1.0\r\n\r\n",
    ] {
        let answer = raw(&server, request);
        let status = status_of(&answer);
        assert!(status == 400, "{request:?} -> {answer}");
        assert!(
            !answer.contains("alpha") && !answer.contains("beta"),
            "{request:?} -> {answer}"
        );
    }
}

#[test]
fn limits_are_per_tenant() {
    let site = Site::new(
        r#"
        [defaults]
        memory_mb = 256
        cpu_ms = 10000

        [tenant.alpha]
        hosts = ["alpha.test"]
        project = "alpha"
        memory_mb = 48
        cpu_ms = 300
        max_body_bytes = 1000

        [tenant.beta]
        hosts = ["beta.test"]
        project = "beta"
        "#,
    );
    let server = site.start(&[]);

    // Memory: alpha's cap stops 100 MB; beta's larger one allows it.
    assert_eq!(get(&server, "alpha.test", "/mem?mb=100").status(), 500);
    let response = get(&server, "beta.test", "/mem?mb=100");
    assert_eq!(response.status(), 200);
    assert_eq!(json(response)["bytes"], 100 * 1024 * 1024);

    // CPU: alpha's 300 ms stops a 3 s loop with the usual 504; beta runs 1 s of it.
    let response = get(&server, "alpha.test", "/cpu?ms=3000");
    assert_eq!(response.status(), 504);
    assert_eq!(
        response.text().unwrap(),
        r#"{"detail":"Handler timed out"}"#
    );
    assert_eq!(get(&server, "beta.test", "/cpu?ms=1000").status(), 200);

    // Body size: alpha's 1000 bytes, beta's default.
    let big = "x".repeat(5000);
    let response = server
        .request("POST", "/kv")
        .header("host", "alpha.test")
        .body(big.clone())
        .send()
        .unwrap();
    assert_eq!(response.status(), 413);
    let response = server
        .request("POST", "/kv")
        .header("host", "beta.test")
        .body(big)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[test]
fn each_tenant_has_its_own_concurrency_cap_and_bounded_queue() {
    let site = Site::new(
        r#"
        [tenant.alpha]
        hosts = ["alpha.test"]
        project = "alpha"
        concurrency = 1
        queue = 1

        [tenant.beta]
        hosts = ["beta.test"]
        project = "beta"
        concurrency = 2
        queue = 16
        "#,
    );
    let server = site.start(&["--workers", "8", "--admin", "127.0.0.1:0"]);
    let admin = admin_url(&server);
    assert_eq!(get(&server, "alpha.test", "/").status(), 200);
    assert_eq!(get(&server, "beta.test", "/").status(), 200);

    // Alpha: one runs, one waits, the other four are turned away at once.
    let flood: Vec<_> = (0..6)
        .map(|_| {
            let base = server.base.clone();
            thread::spawn(move || {
                let response = support::client()
                    .get(format!("{base}/slow?s=3"))
                    .header("host", "alpha.test")
                    .send()
                    .unwrap();
                let retry = response.headers().get("retry-after").cloned();
                (response.status().as_u16(), retry, response.text().unwrap())
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(500));
    // Meanwhile beta is not behind alpha's queue: four requests, two at a time.
    let started = std::time::Instant::now();
    let beta: Vec<_> = (0..4)
        .map(|_| {
            let base = server.base.clone();
            thread::spawn(move || {
                let response = support::client()
                    .get(format!("{base}/peak?s=1"))
                    .header("host", "beta.test")
                    .send()
                    .unwrap();
                (response.status().as_u16(), json(response))
            })
        })
        .collect();
    let beta: Vec<_> = beta.into_iter().map(|t| t.join().unwrap()).collect();
    let beta_took = started.elapsed();
    let peaks: Vec<_> = beta.iter().map(|(_, body)| body["peak"].clone()).collect();
    assert!(beta.iter().all(|(status, _)| *status == 200), "{beta:?}");
    assert!(peaks.contains(&serde_json::json!(2)), "{peaks:?}");
    assert!(
        peaks.iter().all(|p| p.as_u64() <= Some(2)),
        "beta ran more than its concurrency of 2 at once: {peaks:?}"
    );
    // Four 1 s requests two at a time cannot finish in under 2 s.
    assert!(beta_took >= Duration::from_millis(1900), "{beta_took:?}");

    let alpha: Vec<_> = flood.into_iter().map(|t| t.join().unwrap()).collect();
    let ok = alpha.iter().filter(|(status, ..)| *status == 200).count();
    let busy: Vec<_> = alpha.iter().filter(|(status, ..)| *status == 503).collect();
    assert_eq!((ok, busy.len()), (2, 4), "{alpha:?}");
    for (_, retry, body) in busy {
        assert_eq!(body, r#"{"detail":"Service Unavailable"}"#);
        let seconds: u64 = retry
            .as_ref()
            .expect("Retry-After")
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&seconds), "{seconds}");
    }

    let text = support::client()
        .get(format!("{admin}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    for line in [
        r#"filerouter_tenant_rejected_total{tenant="alpha"} 4"#,
        r#"filerouter_tenant_rejected_total{tenant="beta"} 0"#,
        r#"filerouter_tenant_queue_depth{tenant="alpha"} 0"#,
        r#"filerouter_requests_total{tenant="alpha",status="503"} 4"#,
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    let cpu = support::admin::metric(
        &text,
        r#"filerouter_tenant_cpu_seconds_total{tenant="beta"}"#,
    );
    assert!(cpu > 0.0, "{text}");
}

#[test]
fn a_group_of_busy_tenants_cannot_fill_the_instance_pool() {
    // Eight instances, two kept for tenants with nothing running (a quarter). Alpha and beta
    // hold every instance they may with handlers asleep for 4 s, and queue more behind them:
    // without the reserve they would hold all eight, and gamma would wait 4 s for one.
    let site = Site::new(
        r#"
        [defaults]
        concurrency = 4
        queue = 16

        [tenant.alpha]
        hosts = ["alpha.test"]
        project = "alpha"

        [tenant.beta]
        hosts = ["beta.test"]
        project = "beta"

        [tenant.gamma]
        hosts = ["gamma.test"]
        project = "gamma"
        "#,
    );
    let server = site.start(&["--workers", "8", "--admin", "127.0.0.1:0"]);
    let admin = admin_url(&server);
    for host in ["alpha.test", "beta.test", "gamma.test"] {
        assert_eq!(get(&server, host, "/").status(), 200, "{host}");
    }
    let sleepers: Vec<_> = ["alpha.test", "beta.test"]
        .into_iter()
        .flat_map(|host| std::iter::repeat_n(host, 6))
        .map(|host| {
            let base = server.base.clone();
            thread::spawn(move || {
                support::client()
                    .get(format!("{base}/slow?s=4"))
                    .header("host", host)
                    .send()
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    let running = |tenant: &str| -> u64 {
        let text = support::client()
            .get(format!("{admin}/metrics"))
            .send()
            .unwrap()
            .text()
            .unwrap();
        let prefix = format!("filerouter_tenant_running{{tenant=\"{tenant}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    assert!(
        eventually(Duration::from_secs(3), || running("alpha")
            + running("beta")
            >= 7),
        "the sleepers did not start"
    );
    // Gamma has nothing running: it finds an instance at once, every time.
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let response = get(&server, "gamma.test", "/");
        assert_eq!(response.status(), 200);
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "gamma waited {took:?} behind alpha's and beta's sleepers"
        );
    }
    // The busy tenants together held no more than the instances not kept for gamma.
    assert!(running("alpha") + running("beta") <= 7);
    let statuses: Vec<u16> = sleepers.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
}

#[test]
fn tenants_file_edits_add_remove_and_reconfigure_without_a_restart() {
    let site = Site::new(
        r#"
        [tenant.alpha]
        hosts = ["alpha.test"]
        project = "alpha"

        [tenant.beta]
        hosts = ["beta.test"]
        project = "beta"
        "#,
    );
    let server = site.start(&[]);
    assert_eq!(get(&server, "beta.test", "/").status(), 200);
    assert_eq!(get(&server, "gamma.test", "/").status(), 404);
    server
        .request("POST", "/kv")
        .header("host", "alpha.test")
        .send()
        .unwrap();

    // Add gamma, remove beta, give alpha another host.
    site.write_config(
        r#"
        [tenant.alpha]
        hosts = ["alpha.test", "alpha.example"]
        project = "alpha"

        [tenant.gamma]
        hosts = ["gamma.test"]
        project = "gamma"
        "#,
    );
    assert!(
        eventually(Duration::from_secs(10), || get(&server, "gamma.test", "/")
            .status()
            == 200),
        "{}",
        server.log()
    );
    assert_eq!(json(get(&server, "gamma.test", "/"))["tenant"], "gamma");
    let response = get(&server, "beta.test", "/");
    assert_eq!(response.status(), 404);
    assert_eq!(response.text().unwrap(), r#"{"detail":"Unknown host"}"#);
    assert_eq!(json(get(&server, "alpha.example", "/"))["tenant"], "alpha");
    // Reconfiguring alpha kept its kv store.
    assert_eq!(
        json(get(&server, "alpha.example", "/kv"))["secret"],
        "alpha-secret"
    );

    // A broken edit is logged with its line, and the last good configuration keeps serving.
    site.write_config(
        r#"
        [tenant.alpha]
        hosts = ["alpha.test"]
        project = "alpha"
        colour = "blue"
        "#,
    );
    assert!(
        eventually(Duration::from_secs(10), || server
            .log()
            .contains("tenants.toml:4")),
        "{}",
        server.log()
    );
    assert!(server.log_shows("colour"), "{}", server.log());
    assert_eq!(json(get(&server, "gamma.test", "/"))["tenant"], "gamma");
    assert_eq!(json(get(&server, "alpha.example", "/"))["tenant"], "alpha");
}

#[test]
fn a_new_build_is_picked_up_while_requests_in_flight_finish_on_theirs() {
    let site = Site::new(THREE);
    let server = site.start(&[]);
    assert_eq!(
        json(get(&server, "alpha.test", "/slow?s=0"))["version"],
        "v1"
    );

    // Clients keep slow requests in flight the whole time.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let url = server.url("/slow?s=0.7");
            let stop = stop.clone();
            thread::spawn(move || {
                let mut seen = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let response = support::client()
                        .get(&url)
                        .header("host", "alpha.test")
                        .send()
                        .unwrap();
                    let status = response.status().as_u16();
                    let body = json(response);
                    seen.push((status, body["version"].as_str().unwrap_or("?").to_string()));
                }
                seen
            })
        })
        .collect();

    let project = site.path().join("alpha");
    let route = project.join("routes/slow/route.py");
    let source = std::fs::read_to_string(&route)
        .unwrap()
        .replace("\"v1\"", "\"v2\"");
    std::fs::write(&route, source).unwrap();
    build(&project);
    assert!(
        eventually(Duration::from_secs(30), || json(get(
            &server,
            "alpha.test",
            "/slow?s=0"
        ))["version"]
            == "v2"),
        "{}",
        server.log()
    );
    thread::sleep(Duration::from_millis(1500));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for client in clients {
        let seen = client.join().unwrap();
        assert!(seen.iter().all(|(status, _)| *status == 200), "{seen:?}");
        // Each answer came whole from one version, and once v2 answered, v1 never did again.
        let first_v2 = seen
            .iter()
            .position(|(_, v)| v == "v2")
            .unwrap_or(seen.len());
        assert!(seen[..first_v2].iter().all(|(_, v)| v == "v1"), "{seen:?}");
        assert!(seen[first_v2..].iter().all(|(_, v)| v == "v2"), "{seen:?}");
    }
    // The other tenants never noticed.
    assert_eq!(
        json(get(&server, "beta.test", "/slow?s=0"))["version"],
        "v1"
    );
}

#[test]
fn a_tampered_cache_is_refused_while_the_other_tenants_keep_serving() {
    let site = Site::new(THREE);
    let server = site.start(&[]);
    assert_eq!(get(&server, "alpha.test", "/").status(), 200);

    let tamper = |name: &str| {
        let bundle = site.path().join(name).join(".cache/bundle.bin");
        let mut bytes = std::fs::read(&bundle).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x55;
        let tmp = bundle.with_extension("tampered");
        std::fs::write(&tmp, &bytes).unwrap();
        std::fs::rename(&tmp, &bundle).unwrap();
    };

    // gamma, not loaded yet, is tampered with: refused, and the others serve on.
    tamper("gamma");
    let response = get(&server, "gamma.test", "/");
    assert_eq!(response.status(), 503);
    assert_eq!(
        response.text().unwrap(),
        r#"{"detail":"Service Unavailable"}"#
    );
    assert_eq!(json(get(&server, "alpha.test", "/"))["tenant"], "alpha");
    assert_eq!(json(get(&server, "beta.test", "/"))["tenant"], "beta");
    assert!(server.log_shows("checksum"), "{}", server.log());

    // alpha, loaded, gets a tampered cache: it keeps serving its last good build.
    tamper("alpha");
    assert!(
        eventually(Duration::from_secs(10), || server
            .log()
            .contains("last good")),
        "{}",
        server.log()
    );
    assert_eq!(json(get(&server, "alpha.test", "/"))["tenant"], "alpha");

    // A good cache again (a real build) and gamma serves.
    let (code, stdout, stderr) = run_with_env(
        &["build", "--force", "--project", "."],
        &site.path().join("gamma"),
        &[],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        eventually(Duration::from_secs(30), || get(&server, "gamma.test", "/")
            .status()
            == 200),
        "{}",
        server.log()
    );
}

#[test]
fn admin_endpoint_serves_metrics_and_health_and_is_not_on_the_public_port() {
    let site = Site::new(
        r#"
        [server]
        max_loaded = 1

        [tenant.alpha]
        hosts = ["alpha.test"]
        project = "alpha"

        [tenant.beta]
        hosts = ["beta.test"]
        project = "beta"

        [tenant.gamma]
        hosts = ["gamma.test"]
        project = "gamma"
        "#,
    );
    let server = site.start(&["--admin", "127.0.0.1:0"]);
    let admin = admin_url(&server);
    for _ in 0..3 {
        assert_eq!(get(&server, "alpha.test", "/").status(), 200);
    }
    assert_eq!(get(&server, "alpha.test", "/nowhere").status(), 404);
    server
        .request("POST", "/kv")
        .header("host", "alpha.test")
        .send()
        .unwrap();
    assert_eq!(get(&server, "beta.test", "/").status(), 200);

    let metrics = support::client()
        .get(format!("{admin}/metrics"))
        .send()
        .unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(
        metrics.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = metrics.text().unwrap();
    for line in [
        r#"filerouter_requests_total{tenant="alpha",status="200"} 4"#,
        r#"filerouter_requests_total{tenant="alpha",status="404"} 1"#,
        r#"filerouter_requests_total{tenant="beta",status="200"} 1"#,
        r#"filerouter_request_duration_seconds_count{tenant="alpha"} 5"#,
        // max_loaded = 1: beta's load unloaded alpha.
        r#"filerouter_tenant_loaded{tenant="alpha"} 0"#,
        r#"filerouter_tenant_loaded{tenant="beta"} 1"#,
        r#"filerouter_tenant_loaded{tenant="gamma"} 0"#,
        // A histogram (the prometheus-client crate has no summaries): every request is in
        // the last bucket.
        "# TYPE filerouter_request_duration_seconds histogram",
        r#"filerouter_request_duration_seconds_bucket{tenant="alpha",le="+Inf"} 5"#,
        // The process's HTTP metrics, by tenant and route pattern.
        r#"http_requests_total{tenant="alpha",method="GET",route="/",status="200"} 3"#,
        r#"http_requests_total{tenant="alpha",method="GET",route="unmatched",status="404"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    for needle in [
        r#"filerouter_request_duration_seconds_bucket{tenant="alpha",le="0.5"}"#,
        r#"filerouter_request_duration_seconds_sum{tenant="alpha"}"#,
        "process_resident_memory_bytes",
    ] {
        assert!(text.contains(needle), "{needle} missing from\n{text}");
    }
    // An unloaded tenant loads again on its next request, its kv store intact.
    assert_eq!(
        json(get(&server, "alpha.test", "/kv"))["secret"],
        "alpha-secret"
    );

    let health = support::client()
        .get(format!("{admin}/healthz"))
        .send()
        .unwrap();
    assert_eq!(health.status(), 200);
    let health = json(health);
    assert_eq!(health["status"], "ok");
    assert_eq!(health["tenants"], 3);

    // Not on the public port, whatever the host.
    for host in ["alpha.test", "unknown.test", "127.0.0.1"] {
        for path in ["/metrics", "/healthz"] {
            let response = get(&server, host, path);
            assert_eq!(response.status(), 404, "{host}{path}");
            let body = response.text().unwrap();
            assert!(
                !body.contains("filerouter_") && !body.contains("\"status\""),
                "{host}{path}: {body}"
            );
        }
    }
    // And the admin port serves no tenant.
    let response = support::client()
        .get(format!("{admin}/"))
        .header("host", "alpha.test")
        .send()
        .unwrap();
    assert_eq!(response.status(), 404);
}

fn admin_url(server: &Server) -> String {
    let mut url = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            url = server
                .log()
                .lines()
                .find(|l| l.contains("admin"))
                .and_then(|l| l.split_whitespace().find(|w| w.starts_with("http://")))
                .map(|w| w.trim_end_matches("/metrics").to_string());
            url.is_some()
        }),
        "{}",
        server.log()
    );
    url.unwrap()
}

#[test]
fn bad_tenants_files_stop_run_with_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("a/routes")).unwrap();
    std::fs::create_dir_all(dir.path().join("b/routes")).unwrap();
    let cases: &[(&str, &str)] = &[
        (
            "[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\nbogus = 1\n",
            "tenants.toml:4:",
        ),
        (
            "[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\ncpu_ms = \"fast\"\n",
            "tenants.toml:4:",
        ),
        ("[defaults]\nmemory_mb = -1\n", "tenants.toml:2:"),
        (
            "[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\n\n[tenant.b]\nproject = \"b\"\nhosts = [\"A.test\"]\n",
            "tenants.toml:7:",
        ),
        (
            "[tenant.a]\nproject = \"a\"\nhosts = [\"*.a.test\"]\n\n[tenant.b]\nproject = \"b\"\nhosts = [\"x.a.test\"]\n",
            "tenants.toml:7:",
        ),
        ("[tenant.a]\nhosts = [\"a.test\"]\n", "project"),
        (
            "[tenant.a]\nproject = \"nowhere\"\nhosts = [\"a.test\"]\n",
            "tenants.toml:2:",
        ),
        (
            "default_tenant = \"zzz\"\n[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"]\n",
            "tenants.toml:1:",
        ),
        (
            "[tenant.a]\nproject = \"a\"\nhosts = [\"http://a.test\"]\n",
            "tenants.toml:3:",
        ),
        (
            "[tenant.a]\nproject = \"a\"\nhosts = [\"a.test\"\n",
            "tenants.toml:",
        ),
        (
            "[tenant.A]\nproject = \"a\"\nhosts = [\"a.test\"]\n",
            "tenants.toml:1:",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(dir.path().join("tenants.toml"), text).unwrap();
        let (code, stdout, stderr) = run_with_env(
            &["run", "--tenants", "tenants.toml", "--port", "0"],
            dir.path(),
            &[],
        );
        assert_ne!(code, 0, "{text}\n{stdout}");
        assert!(
            stderr.contains(expected),
            "{text}\nexpected {expected}:\n{stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}
