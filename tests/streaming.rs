//! Streamed responses from sandboxed route code (issue 42, phase one): `StreamingResponse`,
//! handlers that `yield` (JSON Lines), Server-Sent Events with FastAPI's names, and the limits of
//! streams, with a real HTTP client reading the body as it arrives.

use crate::support;

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpListener,
    time::{Duration, Instant},
};

use support::{Project, Server, client, eventually};

/// A client that waits long enough for the slowest stream of these tests.
fn slow_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

/// Read from `body` until what was read contains `wanted` (or the body ends); what was read.
fn read_until(body: &mut impl Read, wanted: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(wanted) {
        match body.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// Read `body` to its end: what was read, and whether it ended cleanly (else it was cut off).
fn read_all(body: &mut impl Read) -> (String, bool) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match body.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&seen).into_owned(), true),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&seen).into_owned(), false),
        }
    }
}

const COUNT_ROUTE: &str = r#"
    from filerouter import kv

    def GET(request, key: str):
        return {"value": kv.get(key, 0)}
"#;

fn kv_value(server: &Server, key: &str) -> i64 {
    let body: serde_json::Value = client()
        .get(server.url(&format!("/count?key={key}")))
        .send()
        .expect("GET /count")
        .json()
        .expect("json");
    body["value"].as_i64().unwrap_or(-1)
}

#[test]
fn the_first_chunk_arrives_while_the_handler_still_sleeps_and_middleware_wraps_the_head() {
    let project = Project::dedented(&[
        (
            "routes/slow/route.py",
            r#"
            import asyncio
            from filerouter import StreamingResponse

            async def chunks():
                yield "first\n"
                await asyncio.sleep(2)
                yield b"second\n"

            def GET(request):
                return StreamingResponse(chunks(), media_type="text/plain", headers={"x-own": "1"})
            "#,
        ),
        (
            "middleware.py",
            r#"
            async def middleware(request, call_next):
                response = await call_next(request)
                response.headers["x-middleware"] = type(response).__name__ + " " + str(response.status_code)
                return response
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let started = Instant::now();
    let mut response = slow_client()
        .get(server.url("/slow"))
        .send()
        .expect("GET /slow");
    let head_after = started.elapsed();
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["x-middleware"], "StreamingResponse 200");
    assert_eq!(headers["x-own"], "1");
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    assert!(headers.get("content-length").is_none(), "{headers:?}");
    let first = read_until(&mut response, "first\n");
    let first_after = started.elapsed();
    assert_eq!(first, "first\n");
    assert!(
        head_after < Duration::from_millis(1500) && first_after < Duration::from_millis(1500),
        "head after {head_after:?}, first chunk after {first_after:?}: not before the handler's 2 s sleep"
    );
    let (rest, clean) = read_all(&mut response);
    assert!(clean, "the body was cut off: {rest:?}");
    assert_eq!(rest, "second\n");
    assert!(started.elapsed() >= Duration::from_secs(2));
}

#[test]
fn a_yielding_handler_streams_json_lines_and_sync_iterators_stream_too() {
    let project = Project::dedented(&[
        (
            "routes/lines/route.py",
            r#"
            import asyncio
            from dataclasses import dataclass

            @dataclass
            class Item:
                name: str
                price: float

            async def GET(request):
                for n in range(3):
                    yield Item(name=f"item {n}", price=n + 0.5)
                    await asyncio.sleep(0.01)
                yield {"done": True, "nan": float("nan")}
            "#,
        ),
        (
            "routes/sync/route.py",
            r#"
            from filerouter import StreamingResponse

            def GET(request):
                return StreamingResponse(iter(["a", b"b", "c" * 100000]), media_type="application/octet-stream")
            "#,
        ),
        (
            "routes/gen/route.py",
            r#"
            def GET(request):
                for n in range(2):
                    yield [n]
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let response = server.get("/lines");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/jsonl");
    assert_eq!(
        response.text().unwrap(),
        "{\"name\": \"item 0\", \"price\": 0.5}\n{\"name\": \"item 1\", \"price\": 1.5}\n{\"name\": \"item 2\", \"price\": 2.5}\n{\"done\": true, \"nan\": null}\n"
    );
    let text = server.get("/sync").text().unwrap();
    assert_eq!(text.len(), 2 + 100_000);
    assert!(text.starts_with("abccc"));
    assert_eq!(server.get("/gen").text().unwrap(), "[0]\n[1]\n");
}

#[test]
fn streamed_items_are_checked_against_the_return_annotation_as_fastapi_does() {
    let project = Project::dedented(&[
        (
            "routes/items/route.py",
            r#"
            from collections.abc import AsyncIterable
            from dataclasses import dataclass

            @dataclass
            class Item:
                name: str
                price: float

            async def GET(request, bad: bool = False) -> AsyncIterable[Item]:
                yield {"name": "a", "price": 1, "secret": "not in the model"}
                yield Item(name="b", price=2.5)
                if bad:
                    yield {"name": "c", "price": "not a number"}
                yield {"name": "d", "price": 4}
            "#,
        ),
        (
            "routes/events/route.py",
            r#"
            from collections.abc import Iterable
            from pydantic import BaseModel
            from filerouter import route
            from filerouter.sse import EventSourceResponse, ServerSentEvent

            class Priced(BaseModel):
                name: str
                price: float = 0

            @route(response_class=EventSourceResponse)
            def GET(request) -> Iterable[Priced]:
                yield {"name": "x", "price": 3, "extra": 1}
                yield ServerSentEvent(data={"free": "form"}, event="raw")
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let response = server.get("/items");
    assert_eq!(response.headers()["content-type"], "application/jsonl");
    assert_eq!(
        response.text().unwrap(),
        "{\"name\":\"a\",\"price\":1.0}\n{\"name\":\"b\",\"price\":2.5}\n{\"name\":\"d\",\"price\":4.0}\n"
    );
    // An item that does not fit cuts the stream off after the items before it.
    let mut response = slow_client()
        .get(server.url("/items?bad=true"))
        .send()
        .expect("GET");
    let (text, complete) = read_all(&mut response);
    assert!(!complete, "the stream ended cleanly: {text}");
    assert!(text.contains("\"b\""), "{text}");
    assert!(!text.contains("\"d\""), "{text}");
    assert!(
        server.log_shows("ResponseValidationError"),
        "{}",
        server.log()
    );
    let events = server.get("/events").text().unwrap();
    assert!(
        events.contains("data: {\"name\":\"x\",\"price\":3.0}\n\n"),
        "{events}"
    );
    assert!(
        events.contains("event: raw\ndata: {\"free\": \"form\"}\n\n"),
        "{events}"
    );
}

#[test]
fn server_sent_events_follow_fastapi_and_the_spec() {
    let project = Project::dedented(&[(
        "routes/events/route.py",
        r#"
        import asyncio
        from filerouter import Request, route
        from filerouter import sse
        from filerouter.sse import EventSourceResponse, ServerSentEvent

        sse._PING_INTERVAL = 0.3

        @route(response_class=EventSourceResponse)
        async def GET(request: Request):
            yield {"last": request.headers.get("last-event-id")}
            yield ServerSentEvent(data="hi", event="greet", id="1", retry=1000)
            yield ServerSentEvent(raw_data="line one\nline two")
            yield ServerSentEvent(comment="just a comment")
            await asyncio.sleep(0.5)
            yield "end"
        "#,
    )]);
    let server = Server::dev(&project);
    let response = client()
        .get(server.url("/events"))
        .header("last-event-id", "41")
        .send()
        .expect("GET /events");
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/event-stream; charset=utf-8");
    assert_eq!(headers["cache-control"], "no-cache");
    assert_eq!(headers["x-accel-buffering"], "no");
    let body = response.text().unwrap();
    let expected_start = "data: {\"last\": \"41\"}\n\n\
        event: greet\ndata: \"hi\"\nid: 1\nretry: 1000\n\n\
        data: line one\ndata: line two\n\n\
        : just a comment\n\n";
    assert!(body.starts_with(expected_start), "{body:?}");
    let rest = &body[expected_start.len()..];
    assert!(
        rest.starts_with(": ping\n\n") && rest.ends_with("data: \"end\"\n\n"),
        "a keep-alive comment while the generator slept, then the last event: {rest:?}"
    );
}

#[test]
fn a_client_that_goes_away_stops_the_handler_and_frees_the_instance() {
    let project = Project::dedented(&[
        (
            "config.py",
            "server = {\"workers\": 2}\nsandbox = {\"max_streams\": 1}\n",
        ),
        ("routes/count/route.py", COUNT_ROUTE),
        (
            "routes/endless/route.py",
            r#"
            import asyncio
            from filerouter import kv

            async def GET(request, pause: str = "0.05"):
                try:
                    while True:
                        yield "tick"
                        await asyncio.sleep(float(pause))
                finally:
                    kv.incr(f"closed-{pause}")
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    for pause in ["0.05", "30"] {
        let mut response = slow_client()
            .get(server.url(&format!("/endless?pause={pause}")))
            .send()
            .expect("GET /endless");
        assert_eq!(read_until(&mut response, "\"tick\"\n"), "\"tick\"\n");
        let gone = Instant::now();
        drop(response);
        assert!(
            eventually(Duration::from_secs(3), || kv_value(
                &server,
                &format!("closed-{pause}")
            ) == 1),
            "the generator's finally did not run after the client went away (pause {pause}):\n{}",
            server.log()
        );
        assert!(
            gone.elapsed() < Duration::from_secs(3),
            "{:?}",
            gone.elapsed()
        );
    }
    // The one stream allowed is free again: another one is served.
    let mut response = slow_client()
        .get(server.url("/endless"))
        .send()
        .expect("GET /endless");
    assert_eq!(response.status(), 200);
    assert_eq!(read_until(&mut response, "\"tick\"\n"), "\"tick\"\n");
}

#[test]
fn open_streams_are_capped_per_project() {
    let project = Project::dedented(&[
        (
            "config.py",
            "server = {\"workers\": 4}\nsandbox = {\"max_streams\": 1}\n",
        ),
        (
            "routes/endless/route.py",
            r#"
            import asyncio

            async def GET(request):
                while True:
                    yield "tick"
                    await asyncio.sleep(0.05)
            "#,
        ),
        (
            "routes/plain/route.py",
            "def GET(request):\n    return {\"ok\": True}\n",
        ),
    ]);
    let server = Server::dev(&project);
    let mut first = slow_client()
        .get(server.url("/endless"))
        .send()
        .expect("GET /endless");
    assert_eq!(read_until(&mut first, "\"tick\"\n"), "\"tick\"\n");
    let second = server.get("/endless");
    assert_eq!(second.status(), 503);
    assert_eq!(second.headers()["retry-after"], "1");
    assert_eq!(
        second.json::<serde_json::Value>().unwrap(),
        serde_json::json!({"detail": "Too many open streams"})
    );
    assert!(server.log_shows("max_streams"), "{}", server.log());
    // Ordinary requests are still served beside the stream.
    assert_eq!(server.get("/plain").status(), 200);
    drop(first);
    assert!(eventually(Duration::from_secs(3), || {
        let mut again = slow_client()
            .get(server.url("/endless"))
            .send()
            .expect("GET /endless");
        again.status() == 200 && read_until(&mut again, "\"tick\"\n") == "\"tick\"\n"
    }));
}

#[test]
fn a_stream_idle_past_its_limit_is_cut_off_and_its_handler_stopped() {
    let project = Project::dedented(&[
        ("config.py", "sandbox = {\"stream_idle_s\": 1}\n"),
        ("routes/count/route.py", COUNT_ROUTE),
        (
            "routes/idle/route.py",
            r#"
            import asyncio
            from filerouter import kv

            async def GET(request):
                try:
                    yield "one"
                    await asyncio.sleep(10)
                    yield "two"
                finally:
                    kv.incr("idle-closed")
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let started = Instant::now();
    let mut response = slow_client()
        .get(server.url("/idle"))
        .send()
        .expect("GET /idle");
    let (body, clean) = read_all(&mut response);
    assert!(!clean, "the body should be cut off, not end: {body:?}");
    assert_eq!(body, "\"one\"\n");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(eventually(Duration::from_secs(3), || kv_value(
        &server,
        "idle-closed"
    ) == 1));
}

#[test]
fn a_stream_runs_under_its_own_duration_and_cpu_limits_not_the_requests() {
    let project = Project::dedented(&[
        (
            "config.py",
            "sandbox = {\"wall_s\": 1, \"cpu_ms\": 200, \"stream_duration_s\": 3, \"stream_cpu_ms\": 1500}\n",
        ),
        (
            "routes/long/route.py",
            r#"
            import asyncio

            async def GET(request, seconds: float):
                for _ in range(int(seconds * 10)):
                    yield "."
                    await asyncio.sleep(0.1)
                yield "done"
            "#,
        ),
        (
            "routes/busy/route.py",
            r#"
            def GET(request):
                while True:
                    n = 0
                    for i in range(200000):
                        n += i
                    yield "x"
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    // Longer than the request's wall_s, shorter than the stream's duration: complete.
    let mut response = slow_client()
        .get(server.url("/long?seconds=1.8"))
        .send()
        .expect("GET /long");
    let (body, clean) = read_all(&mut response);
    assert!(
        clean && body.ends_with("\"done\"\n"),
        "{body:?}\n{}",
        server.log()
    );
    // Past the stream's duration: cut off at about 3 s.
    let started = Instant::now();
    let mut response = slow_client()
        .get(server.url("/long?seconds=20"))
        .send()
        .expect("GET /long");
    let (body, clean) = read_all(&mut response);
    assert!(!clean && !body.ends_with("\"done\"\n"), "{body:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(8),
        "{took:?}"
    );
    assert!(server.log_shows("stream_duration_s"), "{}", server.log());
    // Past the stream's CPU time: cut off.
    let mut response = slow_client()
        .get(server.url("/busy"))
        .send()
        .expect("GET /busy");
    let (body, clean) = read_all(&mut response);
    assert!(!clean && body.starts_with("\"x\"\n"), "{body:?}");
    assert!(server.log_shows("stream_cpu_ms"), "{}", server.log());
}

#[test]
fn a_client_that_never_reads_slows_the_generator_and_holds_little_memory() {
    let project = Project::dedented(&[
        ("config.py", "server = {\"write_timeout_s\": 60}\n"),
        ("routes/count/route.py", COUNT_ROUTE),
        (
            "routes/flood/route.py",
            r#"
            from filerouter import kv

            CHUNK = b"z" * 65536

            def GET(request):
                n = 0
                while True:
                    yield CHUNK
                    n += 1
                    if n % 16 == 0:
                        kv.set("produced", n)
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    server.wait_for_snapshot();
    let before = support::files::rss(server.pid()).expect("rss");
    // Ask, read the head, then read nothing more.
    let address = server.base.trim_start_matches("http://").to_string();
    let mut socket = std::net::TcpStream::connect(&address).expect("connect");
    socket
        .write_all(b"GET /flood HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("send");
    let mut reader = BufReader::new(socket.try_clone().expect("clone"));
    let mut status = String::new();
    reader.read_line(&mut status).expect("status line");
    assert!(status.contains("200"), "{status}");
    std::thread::sleep(Duration::from_secs(3));
    let produced = kv_value(&server, "produced");
    let after = support::files::rss(server.pid()).expect("rss");
    // Without back-pressure the generator would have made gigabytes in 3 s.
    assert!(
        produced > 0 && produced * 65536 < 64 * 1024 * 1024,
        "produced {produced} chunks of 64 KiB"
    );
    assert!(
        after < before + 64 * 1024 * 1024,
        "RSS grew from {before} to {after} bytes"
    );
    drop(reader);
    drop(socket);
}

#[test]
fn shutdown_ends_open_streams_within_the_drain_time() {
    let project = Project::dedented(&[(
        "routes/endless/route.py",
        r#"
        import asyncio

        async def GET(request):
            while True:
                yield "tick"
                await asyncio.sleep(0.05)
        "#,
    )]);
    let mut server = Server::dev(&project);
    let mut response = slow_client()
        .get(server.url("/endless"))
        .send()
        .expect("GET /endless");
    assert_eq!(read_until(&mut response, "\"tick\"\n"), "\"tick\"\n");
    let started = Instant::now();
    let code = server.terminate();
    assert!(code.is_some(), "the server did not stop");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopping took {:?}",
        started.elapsed()
    );
    let (_, clean) = read_all(&mut response);
    assert!(!clean, "the stream should be cut off by the shutdown");
}

/// A local upstream that answers `GET /tokens` with five chunked lines, 300 ms apart.
fn token_upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n",
                );
                for n in 0..5 {
                    let text = format!("token {n}\n");
                    let _ = stream.write_all(format!("{:x}\r\n{text}\r\n", text.len()).as_bytes());
                    let _ = stream.flush();
                    std::thread::sleep(Duration::from_millis(300));
                }
                let _ = stream.write_all(b"0\r\n\r\n");
            });
        }
    });
    port
}

#[test]
fn the_sse_proxy_example_passes_an_outbound_stream_on_as_events() {
    let port = token_upstream();
    let project = Project::copy_of(&support::tools::workspace().join("examples/sse-proxy"));
    project.write(
        "config.py",
        &format!(
            "outbound = {{\"allow\": [\"http://127.0.0.1:{port}\"]}}\nsettings = {{\"upstream\": \"http://127.0.0.1:{port}/tokens\"}}\n"
        ),
    );
    let server = Server::dev(&project);
    let started = Instant::now();
    let mut response = slow_client()
        .get(server.url("/events"))
        .send()
        .expect("GET /events");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    let first = read_until(&mut response, "\n\n");
    assert!(
        first.starts_with("event: token\ndata: \"token 0\"\nid: 0\n\n"),
        "{first:?}\n{}",
        server.log()
    );
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "the first event came after {:?}: not before the upstream's end",
        started.elapsed()
    );
    let (rest, clean) = read_all(&mut response);
    assert!(clean, "{rest:?}");
    assert!(
        rest.contains("data: \"token 4\"\nid: 4\n\n") && rest.ends_with("event: done\ndata: 5\n\n"),
        "{rest:?}"
    );
}

#[test]
fn under_run_tenants_each_tenants_streams_count_against_its_own_cap() {
    let built = support::admin::built(
        "streams",
        &[
            (
                "routes/endless/route.py",
                r#"
                import asyncio
                from filerouter.sse import EventSourceResponse
                from filerouter import route

                @route(response_class=EventSourceResponse)
                async def GET(request):
                    n = 0
                    while True:
                        yield {"n": n}
                        n += 1
                        await asyncio.sleep(0.05)
                "#,
            ),
            (
                "routes/plain/route.py",
                "def GET(request):\n    return {\"ok\": True}\n",
            ),
        ],
    );
    let site = support::admin::Site::new(
        &[("alpha", &built), ("beta", &built)],
        r#"
        [defaults]
        concurrency = 4

        [tenant.alpha]
        hosts = ["alpha.test"]
        project = "alpha"
        max_streams = 1

        [tenant.beta]
        hosts = ["beta.test"]
        project = "beta"
        "#,
    );
    let server = site.start_with(&["--workers", "6"], None, &[]);
    let open = |host: &str| {
        slow_client()
            .get(server.url("/endless"))
            .header("host", host)
            .send()
            .expect("GET /endless")
    };
    let mut alpha = open("alpha.test");
    assert_eq!(alpha.status(), 200);
    assert_eq!(read_until(&mut alpha, "\n\n"), "data: {\"n\": 0}\n\n");
    // alpha is at its cap of one; beta (its default: half its concurrency of 4) is not.
    let refused = open("alpha.test");
    assert_eq!(refused.status(), 503, "{:?}", refused.text());
    let mut betas = Vec::new();
    for _ in 0..2 {
        let mut beta = open("beta.test");
        assert_eq!(beta.status(), 200);
        assert_eq!(read_until(&mut beta, "\n\n"), "data: {\"n\": 0}\n\n");
        betas.push(beta);
    }
    assert_eq!(open("beta.test").status(), 503);
    // Both still answer ordinary requests beside their streams.
    for host in ["alpha.test", "beta.test"] {
        let (status, _) = support::admin::get(&server, host, "/plain").expect("an answer");
        assert_eq!(status, 200, "{host}");
    }
}
