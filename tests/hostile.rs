//! Hostile input and hostile neighbours (issue 14): files that are not what they seem, clients
//! that hold connections or memory, route code that prints, traps or sends text that is not
//! Unicode. Each test reproduces one attack and its neighbours against the real binary; none
//! may hang the server, grow its memory without bound, or take down another request.

use crate::support;

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use support::{Project, Server, eventually, run_with_env};

const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success());
}

/// A client whose requests give up after `secs` (a hang fails the test instead of blocking it).
fn client(secs: u64) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(secs))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// `filerouter ARGS` in `cwd`, killed after `limit`: (exit code or None if killed, stderr).
fn run_within(
    args: &[&str],
    cwd: &Path,
    env: &[(&str, &str)],
    limit: Duration,
) -> (Option<i32>, String) {
    let mut child = Command::new(support::binary())
        .args(args)
        .current_dir(cwd)
        .env_remove("FILEROUTER_CACHE_KEY")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start filerouter");
    let deadline = Instant::now() + limit;
    let code = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    (code, stderr)
}

/// Send `raw` bytes on a fresh connection and return the status of the answer (or 0 if the
/// connection closed without one).
fn raw_status(server: &Server, raw: &str) -> u16 {
    let address = server.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(raw.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn error_of(response: reqwest::blocking::Response) -> Value {
    let body: Value = response.json().expect("JSON");
    body["error"].clone()
}

// Row 1: a FIFO (or a device) where a static file should be hangs nothing.
#[test]
fn special_files_in_public_are_not_served_and_block_nothing() {
    let project = Project::new(&[
        (
            "routes/index.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
        ("public/real.txt", "real"),
    ]);
    mkfifo(&project.path().join("public/f.txt"));
    mkfifo(&project.path().join("public/folder/index.html"));
    std::os::unix::fs::symlink("/dev/zero", project.path().join("public/zero.bin")).unwrap();
    std::os::unix::fs::symlink("/dev/urandom", project.path().join("public/random.bin")).unwrap();
    let server = Server::dev(&project);
    let paths = [
        "/f.txt",
        "/f.txt",
        "/folder",
        "/folder/index.html",
        "/zero.bin",
        "/random.bin",
    ];
    let workers: Vec<_> = paths
        .iter()
        .map(|path| {
            let url = server.url(path);
            std::thread::spawn(move || client(15).get(url).send().map(|r| r.status().as_u16()))
        })
        .collect();
    for (path, worker) in paths.iter().zip(workers) {
        let status = worker.join().unwrap();
        assert_eq!(status.ok(), Some(404), "{path}");
    }
    let index = client(15)
        .get(server.url("/"))
        .send()
        .expect("the server hangs");
    assert_eq!(index.status(), 200);
    assert_eq!(
        client(15)
            .get(server.url("/real.txt"))
            .send()
            .unwrap()
            .text()
            .unwrap()
            .trim(),
        "real"
    );
}

// Row 1's class: config.py and route files that are FIFOs fail with a message, never hang.
#[test]
fn special_files_for_project_sources_fail_clearly() {
    let project = Project::new(&[("routes/index.py", "def GET(request):\n    return {}\n")]);
    mkfifo(&project.path().join("config.py"));
    let (code, stderr) = run_within(
        &["dev", "--port", "0"],
        project.path(),
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(1), "dev did not exit: {stderr}");
    assert!(
        stderr.contains("config.py") && stderr.contains("FIFO"),
        "{stderr}"
    );
    let (code, stderr) = run_within(&["build"], project.path(), &[], Duration::from_secs(60));
    assert_eq!(code, Some(1), "build did not exit: {stderr}");
    assert!(stderr.contains("FIFO"), "{stderr}");

    let project = Project::new(&[("routes/index.py", "def GET(request):\n    return {}\n")]);
    mkfifo(&project.path().join("routes/pipe/route.py"));
    let server = Server::dev(&project);
    let response = client(30).get(server.url("/")).send().expect("hangs");
    assert_eq!(response.status(), 500);
    assert!(
        error_of(response)
            .to_string()
            .contains("not a regular file")
    );
    let (code, stderr) = run_within(&["build"], project.path(), &[], Duration::from_secs(60));
    assert_eq!(code, Some(1), "build did not exit: {stderr}");
}

// Row 2: slow and silent clients are cut off; the connection cap holds and says so.
#[test]
fn slow_and_idle_connections_are_closed_and_connections_are_capped() {
    let project = Project::new(&[
        (
            "routes/index.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
        (
            "config.py",
            "server = {'header_timeout_s': 1, 'max_connections': 4}\n",
        ),
    ]);
    let server = Server::dev(&project);
    let address = server.base.trim_start_matches("http://").to_string();

    // Slowloris: a header line every 300 ms never completes the head.
    let mut slow = TcpStream::connect(&address).unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(300));
        if slow.write_all(b"X-Slow: 1\r\n").is_err() {
            closed = true;
            break;
        }
        slow.set_read_timeout(Some(Duration::from_millis(1)))
            .unwrap();
        let mut buf = [0u8; 64];
        if matches!(slow.read(&mut buf), Ok(0)) {
            closed = true;
            break;
        }
    }
    assert!(closed, "a slowloris connection was kept open");

    // Idle: a connection that sends nothing is closed.
    let mut idle = TcpStream::connect(&address).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let mut buf = [0u8; 16];
    assert!(matches!(idle.read(&mut buf), Ok(0) | Err(_)));
    drop(idle);
    std::thread::sleep(Duration::from_millis(200));

    // The cap: four open connections, the fifth waits until one closes.
    let held: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(&address).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fifth = TcpStream::connect(&address).unwrap();
    fifth
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    fifth
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut answer = [0u8; 64];
    assert!(
        fifth.read(&mut answer).is_err(),
        "a fifth connection was served past max_connections = 4"
    );
    assert!(
        eventually(Duration::from_secs(20), || server
            .log()
            .contains("connection limit reached")),
        "{}",
        server.log()
    );
    drop(held);
    // The held connections time out (or are dropped): the fifth is served.
    fifth
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let n = fifth.read(&mut answer).unwrap();
    assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 200"));
}

// Row 2: out of file descriptors, accept backs off instead of spinning, and recovers.
#[test]
fn running_out_of_file_descriptors_does_not_spin() {
    let project = Project::new(&[
        (
            "routes/index.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
        (
            "config.py",
            "server = {'max_connections': 10000, 'header_timeout_s': 30}\n",
        ),
    ]);
    let server = Server::dev_with_nofile(&project, 96);
    let address = server.base.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for _ in 0..150 {
        match TcpStream::connect(&address) {
            Ok(stream) => held.push(stream),
            Err(_) => break,
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let log = server.log();
    let failures = log.matches("accept failed").count();
    assert!(
        failures >= 1,
        "no accept failure with 150 connections and 96 files: {log}"
    );
    assert!(
        failures <= 2,
        "accept failures logged {failures} times in 2 s: it spins"
    );
    drop(held);
    let ok = eventually(Duration::from_secs(15), || {
        client(5)
            .get(server.url("/"))
            .send()
            .is_ok_and(|r| r.status() == 200)
    });
    assert!(ok, "the server did not recover: {}", server.log());
}

// Row 3: request bodies held in memory at once are bounded across requests.
#[test]
fn buffered_request_bodies_are_bounded_across_requests() {
    let project = Project::new(&[
        (
            "routes/slow/route.py",
            "import time\ndef GET(request):\n    time.sleep(3)\n    return {}\n",
        ),
        (
            "routes/upload/route.py",
            "async def POST(request):\n    return {'n': len(await request.body())}\n",
        ),
        (
            "config.py",
            "server = {'workers': 1, 'max_buffered_body_bytes': 16 * 1024 * 1024}\nsandbox = {'max_body_bytes': 8 * 1024 * 1024}\n",
        ),
    ]);
    let server = Server::dev(&project);
    let slow = {
        let url = server.url("/slow");
        std::thread::spawn(move || client(60).get(url).send().map(|r| r.status().as_u16()))
    };
    std::thread::sleep(Duration::from_millis(500));
    let body = std::sync::Arc::new(vec![b'x'; 4 * 1024 * 1024]);
    let uploads: Vec<_> = (0..12)
        .map(|i| {
            let url = server.url("/upload");
            let body = body.clone();
            std::thread::spawn(move || {
                let request = client(60).post(url);
                let request = if i % 2 == 0 {
                    request.body(body.to_vec())
                } else {
                    // Chunked: no length is declared; the bound applies as the bytes arrive.
                    request.body(reqwest::blocking::Body::new(std::io::Cursor::new(
                        body.to_vec(),
                    )))
                };
                // Refused while still sending, a client may see the connection close before
                // it reads the 503: that counts as refused (0).
                request.send().map(|r| r.status().as_u16()).unwrap_or(0)
            })
        })
        .collect();
    let statuses: Vec<u16> = uploads.into_iter().map(|u| u.join().unwrap()).collect();
    assert_eq!(slow.join().unwrap().unwrap(), 200);
    let busy = statuses.iter().filter(|s| **s == 503 || **s == 0).count();
    let served = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(busy + served, 12, "{statuses:?}");
    assert!(statuses.contains(&503), "{statuses:?}");
    // 16 MiB hold at most four 4 MiB bodies while the slot is busy.
    assert!(busy >= 6, "{statuses:?}");
    assert!(served >= 1, "{statuses:?}");
    // Afterwards the budget is free again.
    let after = client(60)
        .post(server.url("/upload"))
        .body(body.to_vec())
        .send()
        .unwrap();
    assert_eq!(after.status(), 200);
}

/// The resident memory of process `pid`, in MiB (`VmRSS` of `/proc/PID/status`).
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024
}

/// A connection that sends `GET path` and then reads nothing: what it is sent fills the
/// kernel's buffers (a few MiB), and the server's writes stop there.
fn never_reading(address: &str, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    stream
}

/// Read `stream` to its end: the bytes read, and whether the server closed it (end of stream
/// or reset) before `limit` passed.
fn drain(mut stream: TcpStream, limit: Duration) -> (usize, bool) {
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let deadline = Instant::now() + limit;
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return (total, true),
            Ok(n) => total += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (total, true),
        }
    }
    (total, false)
}

// Issue 30, point 1: clients that ask for large responses and never read them. Before, the
// host kept every whole response (RSS + N x 64 MiB, and more with every such client); now
// what it holds is bounded by `max_buffered_response_bytes` (a response that does not fit is a
// 503), other requests keep being answered, and `write_timeout_s` closes the connections and
// gives the memory back. Static files stream and are cut off the same way.
#[test]
fn slow_readers_of_large_responses_are_bounded_and_cut_off() {
    const N: usize = 16;
    const STATIC: usize = 8;
    let project = Project::new(&[
        (
            "routes/big/route.py",
            "from filerouter import PlainTextResponse\ndef GET(request):\n    return PlainTextResponse('B' * (64 << 20))\n",
        ),
        (
            "routes/small/route.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
        (
            "config.py",
            "server = {'max_buffered_response_bytes': 160 << 20, 'write_timeout_s': 5, 'header_timeout_s': 3, 'workers': 2}\n",
        ),
    ]);
    std::fs::create_dir_all(project.path().join("public")).unwrap();
    let file = std::fs::File::create(project.path().join("public/big.bin")).unwrap();
    file.set_len(64 << 20).unwrap(); // sparse: no disk, no page cache to speak of
    drop(file);
    let server = Server::dev(&project);
    let address = server.base.trim_start_matches("http://").to_string();

    // A client that reads gets every byte, of a route and of a static file; two at once, so
    // that both sandbox slots have run the route before the baseline is taken.
    let readers: Vec<_> = ["/big", "/big", "/big.bin"]
        .into_iter()
        .map(|path| {
            let url = server.url(path);
            std::thread::spawn(move || {
                let body = client(120).get(url).send().unwrap();
                assert_eq!(body.status(), 200, "{path}");
                let bytes = body.bytes().unwrap();
                assert_eq!(bytes.len(), 64 << 20, "{path}");
                let expected = if path == "/big" { b'B' } else { 0 };
                assert!(bytes.iter().all(|b| *b == expected), "{path}");
            })
        })
        .collect();
    for reader in readers {
        reader.join().unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    let baseline = rss_mib(server.pid());

    let big: Vec<TcpStream> = (0..N).map(|_| never_reading(&address, "/big")).collect();
    let files: Vec<TcpStream> = (0..STATIC)
        .map(|_| never_reading(&address, "/big.bin"))
        .collect();
    let answered = || {
        let log = server.log();
        log.matches("GET /big 200").count() + log.matches("GET /big 503").count()
    };
    assert!(
        eventually(Duration::from_secs(120), || answered() >= N + 2),
        "{}",
        server.log()
    );
    // While they hold what they may, the server's memory stays within the bound, and other
    // requests are answered at once.
    let mut peak = 0;
    for _ in 0..10 {
        let started = Instant::now();
        let response = client(30).get(server.url("/small")).send().unwrap();
        assert_eq!(response.status(), 200);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        peak = peak.max(rss_mib(server.pid()));
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("RSS: {baseline} MiB before, {peak} MiB at most while {N} slow readers wait");
    // Without the bound this grows by N x 64 MiB (1 GiB); with it, by at most the 160 MiB
    // budget and the static files' small buffers (and generous slack).
    assert!(
        peak < baseline + 384,
        "RSS went from {baseline} MiB to {peak} MiB with {N} slow readers of 64 MiB"
    );

    // Of the N, those that fit were answered 200, the others 503 at once. (160 MiB hold two
    // 64 MiB bodies at once; on a slow machine the first two may already have been cut off
    // by the write timeout while the last handlers ran, making room for more.)
    let log = server.log();
    let held = log.matches("GET /big 200").count() - 2; // two were the reading clients'
    let refused = log.matches("GET /big 503").count();
    assert_eq!(held + refused, N, "{log}");
    assert!(
        held >= 1 && refused >= N / 2,
        "{held} held, {refused} refused:\n{log}"
    );

    // After the write timeout (5 s without progress; reading any sooner would be progress)
    // every one of them is closed, short of its body.
    std::thread::sleep(Duration::from_secs(7));
    for (i, stream) in big.into_iter().chain(files).enumerate() {
        let (read, closed) = drain(stream, Duration::from_secs(30));
        assert!(
            closed,
            "never-reading connection {i} (of {N} to /big, then {STATIC} to /big.bin) is still open after reading {read} bytes"
        );
        assert!(
            read < 64 << 20,
            "{read} bytes reached a client that never read"
        );
    }
    // And the memory is given back.
    let settled = eventually(Duration::from_secs(20), || {
        rss_mib(server.pid()) < baseline + 96
    });
    let after = rss_mib(server.pid());
    eprintln!("RSS: {after} MiB after they were cut off");
    assert!(
        settled,
        "RSS {after} MiB after the slow readers were cut off (baseline {baseline} MiB)"
    );
    assert_eq!(server.get("/small").status(), 200);
}

// Issue 30, point 1: a response larger than the whole response budget can never be sent: the
// route's failure, 500 naming the setting; one that fits is sent whole.
#[test]
fn a_response_larger_than_the_response_budget_is_a_500_naming_it() {
    let project = Project::new(&[
        (
            "routes/sized/[kib]/route.py",
            "from filerouter import Response\ndef GET(request, kib: int):\n    return Response(b'x' * (kib * 1024))\n",
        ),
        (
            "config.py",
            "server = {'max_buffered_response_bytes': 1024 * 1024}\n",
        ),
    ]);
    let server = Server::dev(&project);
    let fits = server.get("/sized/1024");
    assert_eq!(fits.status(), 200);
    assert_eq!(fits.bytes().unwrap().len(), 1 << 20);
    let refused = server.get("/sized/1025");
    assert_eq!(refused.status(), 500);
    let error = error_of(refused);
    assert_eq!(error["type"], "ResponseTooLarge", "{error}");
    assert!(
        error.to_string().contains("max_buffered_response_bytes"),
        "{error}"
    );
    assert!(
        server.log_shows("max_buffered_response_bytes"),
        "{}",
        server.log()
    );
    assert_eq!(server.get("/sized/1").status(), 200);
}

fn build(project: &Path, args: &[&str], env: &[(&str, &str)]) {
    let mut all = vec!["build", "--compression", "1"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = run_with_env(&all, project, env);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
}

// Row 4: with a key set, a plain cache is refused; `status` says what the file is.
#[test]
fn a_plain_cache_is_refused_when_a_key_is_set() {
    let a = Project::new(&[(
        "routes/index.py",
        "def GET(request):\n    return {'project': 'A'}\n",
    )]);
    let b = Project::new(&[(
        "routes/index.py",
        "def GET(request):\n    return {'project': 'B'}\n",
    )]);
    let key = [("FILEROUTER_CACHE_KEY", KEY)];
    build(a.path(), &["--encrypt"], &key);
    build(b.path(), &[], &[]);
    std::fs::copy(
        b.path().join(".cache/bundle.bin"),
        a.path().join(".cache/bundle.bin"),
    )
    .unwrap();
    // Before the fix `run` served project B here, forever: bounded, it fails instead.
    let (code, stderr) = run_within(
        &["run", "--port", "0"],
        a.path(),
        &key,
        Duration::from_secs(60),
    );
    assert_eq!(
        code,
        Some(1),
        "a plain cache was served with a key set: {stderr}"
    );
    assert!(stderr.contains("not encrypted"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let (_, stdout, _) = run_with_env(&["status"], a.path(), &[]);
    assert!(stdout.contains("encrypted:   no"), "{stdout}");
    assert!(stdout.contains("manifest.json says it is"), "{stdout}");
}

// Row 5: text that is not Unicode never reaches a WIT string; a trap is never the outcome.
#[test]
fn lone_surrogates_are_refused_where_they_cross_to_the_host() {
    let project = Project::new(&[
        (
            "routes/echo/route.py",
            r#"
            from filerouter import HTTPException
            async def POST(request):
                v = (await request.json())["v"]
                raise HTTPException(400, v)
            "#,
        ),
        (
            "routes/header/route.py",
            "from filerouter import Response\ndef GET(request):\n    return Response('x', headers={'x-v': 'a\\udc80'})\n",
        ),
        (
            "routes/media/route.py",
            "from filerouter import Response\ndef GET(request):\n    return Response('x', media_type='text/\\udc80')\n",
        ),
        (
            "routes/raise/route.py",
            "def GET(request):\n    raise ValueError('bad \\udc80 text')\n",
        ),
        (
            "routes/kvkey/route.py",
            r#"
            from filerouter import kv
            from filerouter.kv import KVError
            def GET(request):
                caught = []
                for call in (lambda: kv.set("k\udc80", 1), lambda: kv.get("k\udc80"), lambda: kv.incr("\udc80")):
                    try:
                        call()
                    except KVError as exc:
                        caught.append(str(exc))
                kv.set("v", "a\udc80b")
                return {"caught": len(caught), "stored": kv.get("v") == "a\udc80b"}
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let response = server
        .request("POST", "/echo")
        .header("content-type", "application/json")
        .body(r#"{"v":"a\udc80b"}"#)
        .send()
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("surrogate"),
        "{body}"
    );

    for path in ["/header", "/media", "/raise"] {
        let response = server.get(path);
        assert_eq!(response.status(), 500, "{path}");
        let error = error_of(response);
        let kind = error["type"].as_str().unwrap_or("");
        assert!(!kind.starts_with("Sandbox"), "{path}: {error}");
        assert!(!error.to_string().contains("memory_mb"), "{path}: {error}");
    }
    let error = error_of(server.get("/raise"));
    assert_eq!(error["type"], "ValueError");
    assert!(
        error["message"].as_str().unwrap().contains("\\udc80"),
        "{error}"
    );
    let body: Value = server.get("/kvkey").json().unwrap();
    assert_eq!(body, json!({"caught": 3, "stored": true}));
    assert!(!server.log().contains("trap"), "{}", server.log());
}

// Rows 6 and 7: kv refuses what it cannot hold at the call, with the reason.
#[test]
fn kv_refuses_bad_ttls_values_and_too_many_bytes() {
    let project = Project::new(&[
        (
            "routes/bad/route.py",
            r#"
            from filerouter import kv
            from filerouter.kv import KVError
            def GET(request):
                reasons = []
                for call in (
                    lambda: kv.set("k", 1, ttl=10**30),
                    lambda: kv.incr("k", ttl=10**20),
                    lambda: kv.set("k", 1, ttl=float("inf")),
                    lambda: kv.set("k", 1, ttl=float("nan")),
                    lambda: kv.set("x", float("nan")),
                    lambda: kv.set("x", {"a": float("inf")}),
                    lambda: kv.set("x", object()),
                    lambda: kv.incr("k", 2**70),
                ):
                    try:
                        call()
                        reasons.append(None)
                    except KVError as exc:
                        reasons.append(str(exc))
                return {"reasons": reasons, "x": kv.get("x", "absent")}
            "#,
        ),
        (
            "routes/fill/[n]/route.py",
            r#"
            from filerouter import kv
            from filerouter.kv import KVError
            def GET(request, n: int):
                value = "v" * (1024 * 1024 - 2)
                for i in range(10):
                    try:
                        kv.set(f"big:{n}:{i}", value)
                    except KVError as exc:
                        return {"stored": i, "error": str(exc)}
                return {"stored": 10}
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let body: Value = server.get("/bad").json().unwrap();
    let reasons = body["reasons"].as_array().unwrap();
    assert!(reasons.iter().all(Value::is_string), "{body}");
    assert!(reasons[0].as_str().unwrap().contains("ttl"), "{body}");
    assert!(reasons[4].as_str().unwrap().contains("JSON"), "{body}");
    assert_eq!(body["x"], "absent");

    let mut stored = 0;
    let mut error = None;
    for n in 0..10 {
        let body: Value = server.get(&format!("/fill/{n}")).json().unwrap();
        stored += body["stored"].as_u64().unwrap();
        if let Some(e) = body["error"].as_str() {
            error = Some(e.to_string());
            break;
        }
    }
    let error = error.expect("100 MiB of kv values were accepted");
    assert!(error.contains("bytes"), "{error}");
    assert!(
        (60..=64).contains(&stored),
        "{stored} values of 1 MiB stored"
    );
}

// Row 8: a cache that is not a regular file, or too large, stops `run` at once.
#[test]
fn special_or_huge_cache_files_stop_run_at_once() {
    let project = Project::new(&[("routes/index.py", "def GET(request):\n    return {}\n")]);
    build(project.path(), &[], &[]);
    let bundle = project.path().join(".cache/bundle.bin");
    let fifo = project.path().join("fifo");
    mkfifo(&fifo);
    for (target, expect) in [
        (fifo.as_path(), "FIFO"),
        (Path::new("/dev/zero"), "character device"),
    ] {
        std::fs::remove_file(&bundle).unwrap();
        std::os::unix::fs::symlink(target, &bundle).unwrap();
        let (code, stderr) = run_within(
            &["run", "--port", "0"],
            project.path(),
            &[],
            Duration::from_secs(30),
        );
        assert_eq!(code, Some(1), "run did not stop: {stderr}");
        assert!(
            stderr.contains(expect) && stderr.contains("not a regular file"),
            "{stderr}"
        );
        let (code, stderr) = run_within(&["status"], project.path(), &[], Duration::from_secs(30));
        assert!(code.is_some(), "status hangs: {stderr}");
    }
    std::fs::remove_file(&bundle).unwrap();
    let file = std::fs::File::create(&bundle).unwrap();
    file.set_len(64 << 30).unwrap(); // sparse
    let (code, stderr) = run_within(
        &["run", "--port", "0"],
        project.path(),
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("bytes allowed"), "{stderr}");
}

fn inotify_watches(pid: u32) -> usize {
    let mut count = 0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(fd.path()) {
            count += text
                .lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count();
        }
    }
    count
}

// Row 9: links out of the project are never followed by the watcher.
#[test]
fn the_watcher_never_follows_links_out_of_the_project() {
    let project = Project::new(&[
        (
            "routes/index.py",
            "def GET(request):\n    return {'v': 1}\n",
        ),
        ("routes/_lib/helper.py", "X = 1\n"),
        ("public/a.txt", "a"),
    ]);
    std::os::unix::fs::symlink("/", project.path().join("public/rootdir")).unwrap();
    std::os::unix::fs::symlink("/usr", project.path().join("public/u")).unwrap();
    std::os::unix::fs::symlink("/", project.path().join("routes/_lib/root")).unwrap();
    // A route folder that links out of routes/ is not followed either: a scan error names it.
    std::os::unix::fs::symlink("/usr", project.path().join("routes/usr")).unwrap();
    let server = Server::dev(&project);
    let watches = inotify_watches(server.pid());
    assert!(
        watches < 50,
        "{watches} inotify watches for a project of 5 folders"
    );
    let response = server.get("/");
    assert_eq!(response.status(), 500);
    assert!(response.text().unwrap().contains("routes/usr"));
    // Hot reload still works, and the project recovers once the link is gone.
    std::fs::remove_file(project.path().join("routes/usr")).unwrap();
    project.write(
        "routes/index.py",
        "def GET(request):\n    return {'v': 2}\n",
    );
    assert!(eventually(Duration::from_secs(10), || {
        server.get("/").json::<Value>().is_ok_and(|b| b["v"] == 2)
    }));
}

// Row 10: what route code prints is escaped, prefixed with the route and capped.
#[test]
fn guest_output_is_escaped_prefixed_and_capped() {
    let project = Project::new(&[(
        "routes/noisy/route.py",
        r#"
        import sys
        def GET(request):
            print("\x1b[31mred\x1b[0m")
            print("ok\n2026-01-01T00:00:00Z  INFO access: GET /admin 200 forged", file=sys.stderr)
            chunk = "z" * 65536
            for _ in range(80):
                sys.stdout.write(chunk)
            return {"ok": True}
        "#,
    )]);
    let server = Server::dev(&project);
    for _ in 0..3 {
        assert_eq!(server.get("/noisy").status(), 200);
    }
    std::thread::sleep(Duration::from_millis(300));
    let log = server.log();
    // (The server's own log lines may be coloured; the guest's escapes must not pass.)
    assert!(
        !log.contains("\x1b[31mred"),
        "a raw escape from the guest reached the log"
    );
    assert!(
        log.contains("\\u{1b}[31mred"),
        "{}",
        &log[..log.len().min(2000)]
    );
    for line in log.lines().filter(|l| l.contains("forged")) {
        assert!(
            line.starts_with("GET /noisy routes/noisy/route.py | "),
            "{line}"
        );
    }
    assert!(log.contains("more bytes of output dropped"));
    assert!(
        log.len() < 3 * 200 * 1024,
        "{} bytes of log for 3 requests",
        log.len()
    );
}

// Row 11: RFC 9112's refusals, and 1xx statuses from a handler.
#[test]
fn rfc_9112_heads_and_informational_statuses() {
    let project = Project::new(&[
        (
            "routes/index.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
        (
            "routes/status/[code]/route.py",
            "def GET(request, code: int):\n    return {}, code\n",
        ),
    ]);
    let server = Server::dev(&project);
    for code in [100, 101, 103, 199] {
        let response = client(30)
            .get(server.url(&format!("/status/{code}")))
            .send()
            .unwrap();
        assert_eq!(response.status(), 500, "{code}");
    }
    assert_eq!(
        client(30)
            .get(server.url("/status/204"))
            .send()
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        raw_status(&server, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        200
    );
    assert_eq!(
        raw_status(&server, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        400
    );
    assert_eq!(raw_status(&server, "GET / HTTP/1.1\r\n\r\n"), 400);
    assert_eq!(raw_status(&server, "GET / HTTP/1.0\r\n\r\n"), 200);
    for coding in ["gzip, chunked", "deflate", "gzip"] {
        let raw =
            format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {coding}\r\n\r\n0\r\n\r\n");
        let status = raw_status(&server, &raw);
        assert!(
            status == 501
                || (coding == "gzip" || coding == "deflate") && status == 400
                || status == 501,
            "{coding}: {status}"
        );
    }
    assert_eq!(
        raw_status(
            &server,
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"
        ),
        501
    );
}

// Row 12: the memory hint only where the memory cap was the cause.
#[test]
fn traps_blame_memory_only_when_the_cap_was_hit() {
    let project = Project::new(&[
        (
            "routes/exit/route.py",
            "import os\ndef GET(request):\n    os._exit(3)\n",
        ),
        (
            "routes/abort/route.py",
            "import os\ndef GET(request):\n    os.abort()\n",
        ),
        (
            "routes/hog/route.py",
            "def GET(request):\n    data = []\n    while True:\n        data.append(bytearray(1 << 20))\n",
        ),
        ("config.py", "sandbox = {'memory_mb': 64}\n"),
    ]);
    let server = Server::dev(&project);
    for path in ["/exit", "/abort"] {
        let response = server.get(path);
        assert_eq!(response.status(), 500, "{path}");
        let error = error_of(response);
        assert!(!error.to_string().contains("memory_mb"), "{path}: {error}");
    }
    let error = error_of(server.get("/hog"));
    assert!(error.to_string().contains("memory_mb"), "{error}");
    assert_eq!(server.get("/exit").status(), 500);
}

// Row 13: one message, no doubling; config.py values named with their line.
#[test]
fn errors_are_said_once_and_config_values_name_their_line() {
    let project = Project::new(&[
        ("routes/index.py", "def GET(request):\n    return {}\n"),
        (
            "config.py",
            "app_name = 'x'\n\nsandbox = {\n    'max_body_bytes': -1,\n}\n",
        ),
    ]);
    let (code, stderr) = run_within(
        &["dev", "--port", "0"],
        project.path(),
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("config.py:3"), "{stderr}");
    assert!(stderr.contains("max_body_bytes"), "{stderr}");
    assert!(!stderr.contains("column"), "{stderr}");
    for bad in [
        "server = {'port': 70000}",
        "server = {'workers': 0}",
        "sandbox = {'memory_mb': 0}",
        "sandbox = {'timeout_s': -1}",
        "sandbox = {'max_body_bytes': 2**64}",
        "server = {'max_connections': 0}",
        "server = {'header_timeout_s': float('nan')}",
    ] {
        project.write("config.py", &format!("app_name = 'x'\n{bad}\n"));
        let (code, stderr) = run_within(
            &["dev", "--port", "0"],
            project.path(),
            &[],
            Duration::from_secs(60),
        );
        assert_eq!(code, Some(1), "{bad}: {stderr}");
        assert!(stderr.contains("config.py:2"), "{bad}: {stderr}");
        assert!(!stderr.contains("column"), "{bad}: {stderr}");
    }

    project.write("config.py", "app_name = 'x'\n");
    build(project.path(), &[], &[]);
    std::fs::write(project.path().join(".cache/bundle.bin"), b"hello").unwrap();
    let (code, stderr) = run_within(
        &["run", "--port", "0"],
        project.path(),
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.matches("not a filerouter build cache").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn route_code_opening_a_fifo_socket_or_loop_blocks_no_host_thread() {
    let project = Project::new(&[
        (
            "routes/open/route.py",
            "import os\n\n\
             def GET(request, path: str):\n    \
                 try:\n        \
                     with open(path) as f:\n            \
                         return {'read': f.read(12)}\n    \
                 except OSError as e:\n        \
                     return {'error': type(e).__name__, 'errno': e.errno}\n",
        ),
        (
            "routes/list/route.py",
            "import os\n\ndef GET(request):\n    return sorted(os.listdir('/routes')) + sorted(os.listdir('/packages'))\n",
        ),
        ("config.py", "sandbox = {'cpu_ms': 2000, 'wall_s': 3}\n"),
        (".packages/ok.txt", "packaged ok\n"),
    ]);
    let routes = project.path().join("routes");
    mkfifo(&routes.join("pipe"));
    mkfifo(&project.path().join(".packages/pipe"));
    let _socket = std::os::unix::net::UnixListener::bind(routes.join("sock")).unwrap();
    std::os::unix::fs::symlink("loop", routes.join("loop")).unwrap();
    std::os::unix::fs::symlink("pipe", routes.join("to-pipe")).unwrap();
    let mut server = Server::dev(&project);
    let http = client(10);
    let open = |path: &str| -> Value {
        let response = http
            .get(server.url(&format!("/open?path={path}")))
            .send()
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(response.status(), 200, "{path}");
        response.json().unwrap()
    };
    // Regular files and folders read as before.
    assert_eq!(
        open("/routes/open/route.py"),
        json!({"read": "import os\n\nd"})
    );
    assert_eq!(open("/packages/ok.txt"), json!({"read": "packaged ok\n"}));
    let listed = http
        .get(server.url("/list"))
        .send()
        .unwrap()
        .json::<Value>()
        .unwrap();
    assert!(
        listed.as_array().unwrap().contains(&json!("pipe")),
        "{listed}"
    );
    // A FIFO (directly, through a symlink, in .packages/) is refused at once: without the
    // check each open would wait for a writer forever, holding a host thread.
    for _ in 0..20 {
        for path in ["/routes/pipe", "/routes/to-pipe", "/packages/pipe"] {
            assert_eq!(
                open(path),
                json!({"error": "PermissionError", "errno": 2}), // EACCES is 2 in WASI
                "{path}"
            );
        }
    }
    let socket = open("/routes/sock");
    assert!(socket.get("error").is_some(), "{socket}");
    let looped = open("/routes/loop");
    assert!(looped.get("error").is_some(), "{looped}");
    assert!(server.log_shows("a FIFO: refused"), "{}", server.log());
    // Nothing is left blocked: SIGTERM stops the server at once.
    let started = Instant::now();
    assert_eq!(server.terminate(), Some(0), "{}", server.log());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
