//! WebSockets from sandboxed route code (issue 42): a route file's `WEBSOCKET` handler with
//! Starlette's `WebSocket`, against real clients: tungstenite's (the Rust one), Python's
//! `websockets` (in `tests/.venv`), and hand-made frames for what no polite client sends.

use crate::support;

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

use support::{Project, Server, client, dedent, eventually};
use tungstenite::{Message, WebSocket, client::IntoClientRequest, http::HeaderValue};

type Socket = WebSocket<TcpStream>;

/// Open a WebSocket to `path` on `server` with extra `headers`: the socket, or the handshake's
/// HTTP status when the server refused it.
fn try_connect(server: &Server, path: &str, headers: &[(&str, &str)]) -> Result<Socket, u16> {
    let url = server.url(path).replace("http://", "ws://");
    let mut request = url.into_client_request().expect("request");
    for (name, value) in headers {
        request.headers_mut().insert(
            tungstenite::http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            HeaderValue::from_str(value).expect("value"),
        );
    }
    let address = server.base.trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(&address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    match tungstenite::client::client(request, stream) {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            Err(response.status().as_u16())
        }
        Err(e) => panic!("handshake to {path}: {e}"),
    }
}

/// `attempt` again while it fails with what `busy` recognizes (the project's sockets all open,
/// one perhaps still ending), every 200 ms for up to 20 s, as a client told `Retry-After`
/// would: on a machine of two cores a project may have one socket open, and the one before may
/// still be ending (its handler's `finally` running, or the server waiting for a close frame a
/// raw client never sends) when a test asks for the next. The last result otherwise.
fn while_busy<T, E>(
    mut attempt: impl FnMut() -> Result<T, E>,
    busy: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let started = std::time::Instant::now();
    loop {
        match attempt() {
            Err(e) if busy(&e) && started.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// A socket on `path`, a 503 tried again (`while_busy`).
fn connect(server: &Server, path: &str) -> Socket {
    while_busy(|| try_connect(server, path, &[]), |status| *status == 503)
        .unwrap_or_else(|status| panic!("{path}: refused with {status}"))
}

/// The next text message, skipping control frames.
fn text(socket: &mut Socket) -> String {
    loop {
        match socket.read().expect("read") {
            Message::Text(text) => return text.to_string(),
            Message::Binary(bytes) => return format!("<{} bytes>", bytes.len()),
            Message::Close(frame) => panic!("closed: {frame:?}"),
            _ => continue,
        }
    }
}

/// Read until the server closes: its close code (None: the socket ended without one).
fn close_code(socket: &mut Socket) -> Option<u16> {
    loop {
        match socket.read() {
            Ok(Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

fn kv_value(server: &Server, key: &str) -> serde_json::Value {
    let body: serde_json::Value = client()
        .get(server.url(&format!("/kv?key={key}")))
        .send()
        .expect("GET /kv")
        .json()
        .expect("json");
    body["value"].clone()
}

const KV_ROUTE: &str = r#"
    from filerouter import kv

    def GET(request, key: str):
        return {"value": kv.get(key)}
"#;

#[test]
fn a_websocket_handler_echoes_with_path_query_header_and_dependency_parameters() {
    let project = Project::dedented(&[
        (
            "routes/rooms/[room]/route.py",
            r#"
            from filerouter import Depends, Header, WebSocket, WebSocketDisconnect

            def user(x_user: str = Header("anonymous")):
                return x_user

            SEEN = []  # module state: each connection's instance starts without any

            async def WEBSOCKET(websocket: WebSocket, room: str, times: int = 1, who: str = Depends(user)):
                offered = websocket.headers.get("sec-websocket-protocol", "")
                chosen = "chat.v1" if "chat.v1" in offered else None
                await websocket.accept(subprotocol=chosen, headers=[(b"x-room", room.encode())])
                await websocket.send_json({"room": room, "who": who, "state": websocket.state.tag, "seen": len(SEEN)})
                try:
                    while True:
                        message = await websocket.receive()
                        if message["type"] == "websocket.disconnect":
                            break
                        if "bytes" in message:
                            await websocket.send_bytes(message["bytes"][::-1])
                            continue
                        SEEN.append(message["text"])
                        await websocket.send_text(" ".join([message["text"]] * times))
                except WebSocketDisconnect:
                    pass

            def GET(request, room: str):
                return {"room": room, "http": True}
            "#,
        ),
        (
            "routes/secured/route.py",
            r#"
            from filerouter import Depends, HTTPAuthorizationCredentials, HTTPBearer, WebSocket

            bearer = HTTPBearer()

            async def WEBSOCKET(websocket: WebSocket, credentials: HTTPAuthorizationCredentials = Depends(bearer)):
                await websocket.accept()
                await websocket.send_text(f"token {credentials.credentials}")
                await websocket.close()
            "#,
        ),
        (
            "middleware.py",
            r#"
            from filerouter import JSONResponse

            async def middleware(request, call_next):
                if request.headers.get("x-token") == "bad":
                    return JSONResponse({"detail": "no entry"}, status_code=401)
                request.state.tag = "from middleware"
                response = await call_next(request)
                response.headers["x-wrapped"] = "yes"
                return response
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let mut socket = try_connect(
        &server,
        "/rooms/lobby?times=2",
        &[
            ("x-user", "ann"),
            ("sec-websocket-protocol", "chat.v0, chat.v1"),
        ],
    )
    .expect("accepted");
    let hello: serde_json::Value = serde_json::from_str(&text(&mut socket)).expect("json");
    assert_eq!(
        hello,
        serde_json::json!({"room": "lobby", "who": "ann", "state": "from middleware", "seen": 0})
    );
    socket.send(Message::text("hi")).expect("send");
    assert_eq!(text(&mut socket), "hi hi");
    socket.send(Message::text("again")).expect("send");
    assert_eq!(text(&mut socket), "again again");
    socket.send(Message::binary(vec![1u8, 2, 3])).expect("send");
    match socket.read().expect("read") {
        Message::Binary(bytes) => assert_eq!(&bytes[..], &[3, 2, 1]),
        other => panic!("expected bytes, got {other:?}"),
    }
    socket.close(None).expect("close");
    // A second connection is a fresh instance: the first one's messages are not in `SEEN`.
    let mut second = try_connect(&server, "/rooms/kitchen", &[])
        .unwrap_or_else(|status| panic!("refused with {status}: {}", server.log()));
    let hello: serde_json::Value = serde_json::from_str(&text(&mut second)).expect("json");
    assert_eq!(hello["seen"], 0, "{hello}");
    assert_eq!(hello["room"], "kitchen");
    assert_eq!(hello["who"], "anonymous");
    // The same path still answers HTTP.
    let response = server.get("/rooms/lobby");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-wrapped"], "yes");
    // Middleware refuses the handshake with its own answer.
    assert_eq!(
        try_connect(&server, "/rooms/lobby", &[("x-token", "bad")]).err(),
        Some(401)
    );
    // A security dependency: without credentials the handshake is refused with its 401.
    assert_eq!(try_connect(&server, "/secured", &[]).err(), Some(401));
    let mut secured = try_connect(&server, "/secured", &[("authorization", "Bearer s3cret")])
        .expect("with a token");
    assert_eq!(text(&mut secured), "token s3cret");
    // A parameter that does not validate refuses the handshake (403, as FastAPI's 1008 close
    // before accepting is answered by uvicorn).
    assert_eq!(
        try_connect(&server, "/rooms/lobby?times=many", &[]).err(),
        Some(403)
    );
}

#[test]
fn handshakes_are_refused_where_no_handler_accepts_them() {
    let project = Project::dedented(&[
        (
            "routes/only-http/route.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
        (
            "routes/only-socket/route.py",
            r#"
            async def WEBSOCKET(websocket):
                await websocket.accept()
                await websocket.send_text("hello")
                await websocket.close(code=4001, reason="done")
            "#,
        ),
        (
            "routes/closes-first/route.py",
            "async def WEBSOCKET(websocket):\n    await websocket.close()\n",
        ),
        (
            "routes/returns/route.py",
            "async def WEBSOCKET(websocket):\n    return None\n",
        ),
        (
            "routes/raises/route.py",
            r#"
            from filerouter import HTTPException, WebSocketException, status

            async def WEBSOCKET(websocket, mode: str = "http"):
                if mode == "http":
                    raise HTTPException(418, "short and stout")
                if mode == "after":
                    await websocket.accept()
                    raise WebSocketException(code=status.WS_1008_POLICY_VIOLATION, reason="not allowed")
                raise WebSocketException(code=status.WS_1008_POLICY_VIOLATION)
            "#,
        ),
        (
            "routes/denied/route.py",
            r#"
            from filerouter import PlainTextResponse

            async def WEBSOCKET(websocket):
                await websocket.send_denial_response(PlainTextResponse("go away", status_code=451))
            "#,
        ),
        (
            "routes/fails/route.py",
            r#"
            async def WEBSOCKET(websocket):
                await websocket.accept()
                await websocket.receive_text()
                raise ValueError("the handler broke")
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    assert_eq!(try_connect(&server, "/only-http", &[]).err(), Some(403));
    assert_eq!(try_connect(&server, "/nowhere", &[]).err(), Some(403));
    assert_eq!(server.get("/only-socket").status(), 404);
    let mut socket = connect(&server, "/only-socket");
    assert_eq!(text(&mut socket), "hello");
    match socket.read() {
        Ok(Message::Close(Some(frame))) => {
            assert_eq!(u16::from(frame.code), 4001);
            assert_eq!(frame.reason.as_str(), "done");
        }
        other => panic!("expected the handler's close, got {other:?}"),
    }
    assert_eq!(try_connect(&server, "/closes-first", &[]).err(), Some(403));
    assert_eq!(try_connect(&server, "/returns", &[]).err(), Some(403));
    assert_eq!(try_connect(&server, "/raises", &[]).err(), Some(418));
    assert_eq!(
        try_connect(&server, "/raises?mode=ws", &[]).err(),
        Some(403)
    );
    let mut socket = connect(&server, "/raises?mode=after");
    assert_eq!(close_code(&mut socket), Some(1008));
    assert_eq!(try_connect(&server, "/denied", &[]).err(), Some(451));
    let mut socket = connect(&server, "/fails");
    socket.send(Message::text("go")).expect("send");
    assert_eq!(close_code(&mut socket), Some(1011));
    assert!(server.log_shows("the handler broke"), "{}", server.log());
    // A handshake with a version we do not speak: 426 naming ours.
    let mut raw = TcpStream::connect(server.base.trim_start_matches("http://")).expect("tcp");
    raw.write_all(
        b"GET /only-socket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n",
    )
    .expect("write");
    let head = read_head(&mut raw);
    assert!(head.starts_with("HTTP/1.1 426"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-version: 13"),
        "{head}"
    );
    // The server still serves.
    assert_eq!(server.get("/only-http").status(), 200);
    // `/docs` lists the WebSocket paths apart; `/openapi.json` leaves them out, as FastAPI's.
    let page = server.get("/docs").text().expect("docs");
    assert!(page.contains("id=\"websockets\""), "no WebSockets section");
    assert!(
        page.contains("/only-socket"),
        "/docs does not list /only-socket"
    );
    let document: serde_json::Value = server.get("/openapi.json").json().expect("openapi");
    assert!(
        document["paths"].get("/only-socket").is_none(),
        "{document}"
    );
    assert!(document["paths"].get("/only-http").is_some(), "{document}");
}

/// Read an HTTP response head from `stream`.
fn read_head(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => seen.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// A raw connection upgraded to a WebSocket on `path`: for frames no polite client sends. A
/// 503 with `Retry-After` is tried again (`while_busy`).
fn raw_socket(server: &Server, path: &str) -> TcpStream {
    let (raw, head) = while_busy(
        || {
            let mut raw =
                TcpStream::connect(server.base.trim_start_matches("http://")).expect("tcp");
            raw.write_all(
                format!(
                    "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                     Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                )
                .as_bytes(),
            )
            .expect("write");
            let head = read_head(&mut raw);
            if head.starts_with("HTTP/1.1 101") {
                Ok((raw, head))
            } else {
                Err(head)
            }
        },
        |head| head.starts_with("HTTP/1.1 503") && head.contains("retry-after:"),
    )
    .unwrap_or_else(|head| panic!("{head}"));
    // RFC 6455's own example key and answer.
    assert!(head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{head}");
    raw
}

/// One client frame: masked (unless `masked` is false), FIN as given.
fn frame(fin: bool, opcode: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut out = vec![if fin { 0x80 } else { 0 } | opcode];
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(mask_bit | n as u8),
        n if n < 65536 => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        let key = [0x12u8, 0x34, 0x56, 0x78];
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

/// Read server frames until a close frame: its code (None if the socket ended first).
fn raw_close_code(stream: &mut TcpStream) -> Option<u16> {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    loop {
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).ok()?;
        let opcode = head[0] & 0x0f;
        let len = match head[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                stream.read_exact(&mut b).ok()?;
                u16::from_be_bytes(b) as usize
            }
            127 => {
                let mut b = [0u8; 8];
                stream.read_exact(&mut b).ok()?;
                u64::from_be_bytes(b) as usize
            }
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload).ok()?;
        if opcode == 0x8 {
            return (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
        }
    }
}

const ECHO: &str = r#"
    from filerouter import kv, WebSocketDisconnect

    async def WEBSOCKET(websocket, tag: str = "echo"):
        await websocket.accept()
        try:
            async for text in websocket.iter_text():
                await websocket.send_text(text)
        finally:
            kv.set(tag, "ended")
"#;

#[test]
fn hostile_frames_close_the_connection_with_the_right_code_and_the_server_serves_on() {
    let project = Project::dedented(&[
        ("routes/echo/route.py", ECHO),
        ("routes/kv/route.py", KV_ROUTE),
        (
            "config.py",
            r#"sandbox = {"websocket_max_message_bytes": 4096}"#,
        ),
    ]);
    let server = Server::dev(&project);
    server.wait_for_snapshot();
    let rss_before = rss_kib(server.pid());

    // One frame over the size limit: 1009.
    let mut raw = raw_socket(&server, "/echo?tag=big");
    raw.write_all(&frame(true, 0x1, &vec![b'a'; 5000], true))
        .expect("write");
    assert_eq!(raw_close_code(&mut raw), Some(1009));

    // Fragments that never end: each small, together over the limit: 1009.
    let mut raw = raw_socket(&server, "/echo?tag=fragments");
    raw.write_all(&frame(false, 0x1, &[b'x'; 100], true))
        .expect("write");
    for _ in 0..200 {
        if raw
            .write_all(&frame(false, 0x0, &[b'x'; 100], true))
            .is_err()
        {
            break;
        }
    }
    assert_eq!(raw_close_code(&mut raw), Some(1009));

    // Text that is not UTF-8: 1007.
    let mut raw = raw_socket(&server, "/echo?tag=utf8");
    raw.write_all(&frame(true, 0x1, &[0xff, 0xfe, 0x41], true))
        .expect("write");
    assert_eq!(raw_close_code(&mut raw), Some(1007));

    // An unmasked client frame is a protocol error: 1002.
    let mut raw = raw_socket(&server, "/echo?tag=unmasked");
    raw.write_all(&frame(true, 0x1, b"hello", false))
        .expect("write");
    assert_eq!(raw_close_code(&mut raw), Some(1002));

    // A ping flood: 1008.
    let mut raw = raw_socket(&server, "/echo?tag=pings");
    let pings: Vec<u8> = (0..500)
        .flat_map(|_| frame(true, 0x9, b"p", true))
        .collect();
    let _ = raw.write_all(&pings);
    assert_eq!(raw_close_code(&mut raw), Some(1008));

    // Every handler saw its connection end (its `finally` ran), and the server serves on.
    for tag in ["big", "fragments", "utf8", "unmasked", "pings"] {
        assert!(
            eventually(Duration::from_secs(20), || kv_value(&server, tag)
                == "ended"),
            "{tag}: {}",
            server.log()
        );
    }
    let mut socket = connect(&server, "/echo");
    socket.send(Message::text("still here")).expect("send");
    assert_eq!(text(&mut socket), "still here");
    let rss_after = rss_kib(server.pid());
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn a_client_that_goes_away_stops_the_handler_and_frees_its_instance_within_a_second() {
    let project = Project::dedented(&[
        ("routes/echo/route.py", ECHO),
        ("routes/kv/route.py", KV_ROUTE),
        (
            "routes/sleeper/route.py",
            r#"
            import asyncio
            from filerouter import kv

            async def WEBSOCKET(websocket):
                await websocket.accept()
                kv.set("sleeper", "started")
                await asyncio.sleep(3600)
            "#,
        ),
        (
            "config.py",
            r#"server = {"workers": 3}
sandbox = {"max_streams": 2}"#,
        ),
    ]);
    let server = Server::dev(&project);
    // Gone in the middle of a receive: the handler's `finally` runs at once.
    let mut socket = connect(&server, "/echo?tag=receiving");
    socket.send(Message::text("one")).expect("send");
    assert_eq!(text(&mut socket), "one");
    drop(socket);
    assert!(
        eventually(Duration::from_secs(3), || kv_value(&server, "receiving")
            == "ended"),
        "{}",
        server.log()
    );
    // Gone while the handler sleeps: its instance is dropped a second later, and its place in
    // the cap of open sockets is free again.
    let socket = connect(&server, "/sleeper");
    assert!(eventually(Duration::from_secs(20), || kv_value(
        &server, "sleeper"
    ) == "started"));
    let mut second = connect(&server, "/echo?tag=second");
    assert_eq!(
        try_connect(&server, "/echo?tag=third", &[]).err(),
        Some(503),
        "the cap of two open sockets"
    );
    let gone = Instant::now();
    drop(socket);
    assert!(
        eventually(Duration::from_secs(20), || try_connect(
            &server,
            "/echo?tag=third",
            &[]
        )
        .is_ok()),
        "{}",
        server.log()
    );
    assert!(
        gone.elapsed() < Duration::from_secs(4),
        "{:?}",
        gone.elapsed()
    );
    assert!(
        server.log_shows("its instance was dropped"),
        "{}",
        server.log()
    );
    second.send(Message::text("ok")).expect("send");
    assert_eq!(text(&mut second), "ok");
}

#[test]
fn a_socket_runs_under_its_idle_duration_and_per_message_cpu_limits() {
    let project = Project::dedented(&[
        ("routes/echo/route.py", ECHO),
        ("routes/kv/route.py", KV_ROUTE),
        (
            "routes/work/route.py",
            r#"
            import time

            def spin(ms):
                end = time.monotonic() + ms / 1000
                while time.monotonic() < end:
                    pass

            async def WEBSOCKET(websocket):
                await websocket.accept()
                async for text in websocket.iter_text():
                    spin(int(text))
                    await websocket.send_text(f"spun {text}")
            "#,
        ),
        (
            "config.py",
            r#"sandbox = {"cpu_ms": 100, "websocket_message_cpu_ms": 300, "stream_cpu_ms": 5000, "stream_idle_s": 1, "stream_duration_s": 4}"#,
        ),
    ]);
    let server = Server::dev(&project);
    // Ten messages of 150 ms each: 1.5 s in all, past the request's 100 ms and each within
    // its own 300 ms.
    let mut socket = connect(&server, "/work");
    for _ in 0..10 {
        socket.send(Message::text("150")).expect("send");
        assert_eq!(text(&mut socket), "spun 150");
    }
    // One message past its 300 ms: the handler is stopped, the connection closed with 1011.
    socket.send(Message::text("2000")).expect("send");
    assert_eq!(close_code(&mut socket), Some(1011));
    assert!(
        server.log_shows("websocket_message_cpu_ms"),
        "{}",
        server.log()
    );

    // A client that sends nothing (not even the answer to a ping) is idle: 1001 after 1 s.
    let mut raw = raw_socket(&server, "/echo?tag=idle");
    let started = Instant::now();
    assert_eq!(raw_close_code(&mut raw), Some(1001));
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(eventually(Duration::from_secs(3), || kv_value(
        &server, "idle"
    ) == "ended"));

    // A client that answers pings and talks is not idle, but the connection ends at its
    // duration (4 s).
    let mut socket = connect(&server, "/echo?tag=long");
    let started = Instant::now();
    let mut code = None;
    while started.elapsed() < Duration::from_secs(10) {
        if let Err(e) = socket.send(Message::text("tick")) {
            eprintln!("send: {e}");
            break;
        }
        match socket.read() {
            Ok(Message::Close(frame)) => {
                code = frame.map(|f| u16::from(f.code));
                break;
            }
            Ok(Message::Text(_)) => std::thread::sleep(Duration::from_millis(300)),
            Ok(_) => {}
            Err(e) => {
                eprintln!("read: {e}");
                break;
            }
        }
    }
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(code, Some(1011), "{}", server.log());
    assert!(server.log_shows("stream_duration_s"), "{}", server.log());
}

#[test]
fn a_client_that_never_reads_slows_the_sender_and_holds_little_memory() {
    let project = Project::dedented(&[
        ("routes/kv/route.py", KV_ROUTE),
        (
            "routes/firehose/route.py",
            r#"
            from filerouter import kv

            async def WEBSOCKET(websocket):
                await websocket.accept()
                chunk = "x" * 60000
                sent = 0
                while True:
                    await websocket.send_text(chunk)
                    sent += 1
                    if sent % 10 == 0:
                        kv.set("sent", sent)
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    server.wait_for_snapshot();
    // One request first: the first instance made from the snapshot maps its pages, which are
    // the server's, not the socket's.
    let _ = kv_value(&server, "sent");
    let before = rss_kib(server.pid());
    let raw = raw_socket(&server, "/firehose");
    // The socket's buffers fill, then the handler waits: the count stops growing.
    std::thread::sleep(Duration::from_secs(3));
    let first = kv_value(&server, "sent").as_i64().unwrap_or(0);
    std::thread::sleep(Duration::from_secs(2));
    let second = kv_value(&server, "sent").as_i64().unwrap_or(0);
    assert!(first > 0, "{}", server.log());
    assert_eq!(
        first, second,
        "the handler kept sending to a client that reads nothing"
    );
    // 60 KB messages: the kernel's buffers hold some MB, the host at most two messages.
    assert!(
        second < 400,
        "{second} messages went out to a client that reads nothing"
    );
    let after = rss_kib(server.pid());
    assert!(
        after < before + 32 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    drop(raw);
}

#[test]
fn shutdown_closes_open_sockets_with_1001() {
    let project = Project::dedented(&[("routes/echo/route.py", ECHO)]);
    let mut server = Server::dev(&project);
    let mut socket = connect(&server, "/echo");
    socket.send(Message::text("before")).expect("send");
    assert_eq!(text(&mut socket), "before");
    let asked = Instant::now();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status();
    assert_eq!(close_code(&mut socket), Some(1001));
    assert_eq!(server.terminate(), Some(0));
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
}

#[test]
fn under_run_tenants_each_tenants_sockets_count_against_its_own_cap() {
    let root = support::lasting_tempdir();
    for tenant in ["a", "b"] {
        let project = root.join(tenant);
        std::fs::create_dir_all(project.join("routes/echo")).expect("mkdir");
        std::fs::write(project.join("routes/echo/route.py"), dedent(ECHO)).expect("write");
        std::fs::create_dir_all(project.join("routes/kv")).expect("mkdir");
        std::fs::write(project.join("routes/kv/route.py"), dedent(KV_ROUTE)).expect("write");
        let (code, out, err) = support::run(&["build"], &project);
        assert_eq!(code, 0, "{out}{err}");
    }
    std::fs::write(
        root.join("tenants.toml"),
        "[defaults]\nmax_streams = 1\n\n[tenant.a]\nhosts = [\"a.test\"]\nproject = \"a\"\n\n[tenant.b]\nhosts = [\"b.test\"]\nproject = \"b\"\n",
    )
    .expect("tenants.toml");
    let server = Server::start(
        &[
            "run",
            "--tenants",
            root.join("tenants.toml").to_str().expect("path"),
            "--admin",
            "127.0.0.1:0",
        ],
        &[],
        Duration::from_secs(120),
    );
    let admin = support::admin::admin_address(&server);
    let open_streams = |tenant: &str| {
        let text = client()
            .get(format!("http://{admin}/metrics"))
            .send()
            .expect("metrics")
            .text()
            .expect("text");
        support::admin::metric(
            &text,
            &format!("filerouter_tenant_open_streams{{tenant=\"{tenant}\"}}"),
        )
    };
    let open = |host: &str| try_connect(&server, "/echo", &[("host", host)]);
    let mut a = open("a.test").expect("a's first socket");
    assert_eq!(open("a.test").err(), Some(503), "a's cap is one");
    let mut b = open("b.test").expect("b's socket is not held back by a's");
    assert_eq!(open_streams("a"), 1.0);
    assert_eq!(open_streams("b"), 1.0);
    a.send(Message::text("from a")).expect("send");
    assert_eq!(text(&mut a), "from a");
    b.send(Message::text("from b")).expect("send");
    assert_eq!(text(&mut b), "from b");
    a.close(None).expect("close");
    let _ = close_code(&mut a);
    assert!(eventually(Duration::from_secs(20), || open("a.test").is_ok()));
}

#[test]
fn python_websockets_client_talks_to_dev_and_run() {
    let venv = match support::tools::python_venv() {
        Ok(venv) => venv,
        Err(why) => {
            return support::tools::missing(
                "python_websockets_client_talks_to_dev_and_run",
                &why,
                "python3 and python3-venv, and reach PyPI",
            );
        }
    };
    let project = Project::dedented(&[(
        "routes/chat/route.py",
        r#"
            import asyncio
            from filerouter import WebSocket

            async def WEBSOCKET(websocket: WebSocket, name: str = "guest"):
                await websocket.accept()
                await websocket.send_json({"hello": name})
                async for message in websocket.iter_json():
                    await asyncio.sleep(0.01)
                    await websocket.send_json({"echo": message, "by": name})
            "#,
    )]);
    let script = r#"
import json, sys
from websockets.sync.client import connect

base = sys.argv[1].replace("http://", "ws://")
with connect(base + "/chat?name=ann") as ws:
    assert json.loads(ws.recv()) == {"hello": "ann"}
    for i in range(20):
        ws.send(json.dumps({"n": i}))
        assert json.loads(ws.recv()) == {"echo": {"n": i}, "by": "ann"}
print("ok")
"#;
    let script_path = project.path().join("client.py");
    std::fs::write(&script_path, script).expect("script");
    let check = |server: &Server| {
        let out = std::process::Command::new(venv.join("bin/python"))
            .arg(&script_path)
            .arg(&server.base)
            .output()
            .expect("python");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ok"),
            "{}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            server.log()
        );
    };
    check(&Server::dev(&project));
    let (code, out, err) = support::run(&["build"], project.path());
    assert_eq!(code, 0, "{out}{err}");
    check(&Server::run(&project, &[]));
}

fn chat_example() -> Project {
    Project::copy_of(&support::tools::workspace().join("examples/websocket-chat"))
}

/// The next message of a chat connection, as JSON, skipping control frames.
fn chat_message(socket: &mut Socket) -> serde_json::Value {
    serde_json::from_str(&text(socket)).expect("a chat message is JSON")
}

/// Read chat messages until one has `text`; panics after 30.
fn chat_until(socket: &mut Socket, wanted: &str) -> serde_json::Value {
    for _ in 0..30 {
        let message = chat_message(socket);
        if message["text"] == wanted {
            return message;
        }
    }
    panic!("no chat message {wanted:?}");
}

/// Two people in `room` on `server` (through `host`): what one says, the other hears.
fn chat_between(server: &Server, host: &str, room: &str) -> (Socket, Socket) {
    let path = |name: &str| format!("/chat/{room}?name={name}");
    let mut ann = try_connect(server, &path("ann"), &[("host", host)]).expect("ann joins");
    chat_until(&mut ann, "ann joined");
    let mut bob = try_connect(server, &path("bob"), &[("host", host)]).expect("bob joins");
    chat_until(&mut bob, "bob joined");
    chat_until(&mut ann, "bob joined");
    ann.send(Message::text("hello bob")).expect("send");
    let heard = chat_until(&mut bob, "hello bob");
    assert_eq!(heard["from"], "ann");
    (ann, bob)
}

#[test]
fn the_chat_example_relays_between_connections_in_dev_run_and_under_tenants() {
    let project = chat_example();
    {
        let server = Server::dev(&project);
        let (ann, mut bob) = chat_between(&server, "localhost", "dev");
        drop(ann);
        chat_until(&mut bob, "ann left");
    }
    let (code, out, err) = support::run(&["build"], project.path());
    assert_eq!(code, 0, "{out}{err}");
    {
        let server = Server::run(&project, &[]);
        let (_ann, mut bob) = chat_between(&server, "localhost", "run");
        bob.send(Message::text("hi ann")).expect("send");
        chat_until(&mut bob, "hi ann");
    }
    // Two tenants serving the same example: the same room name is two rooms.
    let root = support::lasting_tempdir();
    for tenant in ["a", "b"] {
        support::copy_all(project.path(), &root.join(tenant));
    }
    std::fs::write(
        root.join("tenants.toml"),
        "[tenant.a]\nhosts = [\"a.test\"]\nproject = \"a\"\n\n[tenant.b]\nhosts = [\"b.test\"]\nproject = \"b\"\n",
    )
    .expect("tenants.toml");
    let server = Server::start(
        &[
            "run",
            "--tenants",
            root.join("tenants.toml").to_str().expect("path"),
        ],
        &[],
        Duration::from_secs(120),
    );
    let (mut a_ann, mut a_bob) = chat_between(&server, "a.test", "lobby");
    let (mut b_ann, _b_bob) = chat_between(&server, "b.test", "lobby");
    a_ann.send(Message::text("only for a")).expect("send");
    chat_until(&mut a_bob, "only for a");
    b_ann.send(Message::text("only for b")).expect("send");
    // a's room hears b's line never: the next thing a hears is its own next line.
    a_ann.send(Message::text("a again")).expect("send");
    let next = chat_message(&mut a_bob);
    assert_eq!(next["text"], "a again", "{next}");
}

#[test]
fn the_chat_example_works_in_chromium_in_dev_and_run() {
    const TEST: &str = "the_chat_example_works_in_chromium_in_dev_and_run";
    let (chromium, dir) = match support::tools::browser() {
        Ok(tools) => tools,
        Err(why) => {
            return support::tools::missing(
                TEST,
                &why,
                "chromium, nodejs and npm (apt-get install chromium nodejs npm)",
            );
        }
    };
    let project = chat_example();
    let check = |server: &Server| {
        let result = support::tools::run_tool(
            std::process::Command::new("node")
                .arg(dir.join("streams.mjs"))
                .arg(&server.base)
                .env("CHROMIUM", &chromium),
        );
        if let Err(failure) = result {
            panic!("the browser test failed:\n{failure}\n{}", server.log());
        }
    };
    check(&Server::dev(&project));
    let (code, out, err) = support::run(&["build"], project.path());
    assert_eq!(code, 0, "{out}{err}");
    check(&Server::run(&project, &[]));
}
