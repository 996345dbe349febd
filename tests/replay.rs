//! Recording and replay (issue 47): `run --record` keeps the traces of 5xx answers (and a
//! sample of the others), the admin address lists and serves them, and `filerouter replay`
//! reproduces a request on a folder that holds only the build and the trace.
//!
//! - the blog example's 500 (a title another post has), whose other post is deleted after,
//!   replayed from a folder with only `.cache/`: the same IntegrityError, traceback and line;
//! - a request that read the clocks, random numbers (`random`, `uuid4`, `os.urandom`), a row
//!   another request then deleted, kv, two concurrent outbound calls to a service that has
//!   since gone away, and that left a background task: its body replayed byte for byte (the
//!   operator's value is sent in a header, not returned: a replay gets `[NAME]` instead); a
//!   request past its time limit replays as the same 504; no operator value, redacted header
//!   or cookie appears in any trace file;
//! - the route changed: `--source` names the first divergence (call number, what was asked,
//!   what was recorded); a rebuilt project is refused, naming both builds;
//! - a streamed response (SSE) and a WebSocket session replay what they sent, chunk for chunk
//!   and message for message, and a changed route diverges at the first one it sends
//!   differently;
//! - a request whose client left mid-call is kept as a 499 and replays up to where it left;
//!   the recording's counters on `/metrics` (taped, kept, dropped, bytes; per tenant);
//! - `config.py`'s `record` turns recording on in `run`, and `dev --record` records traces
//!   that replay on the source.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::Value;

use crate::support::{
    self, Project, Server,
    admin::{Site, admin_address, client},
    eventually,
    remote::Remote,
};

/// `filerouter ARGS` in `cwd`: exit code, stdout, stderr.
fn filerouter(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let output = Command::new(support::binary())
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .output()
        .expect("run filerouter");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn build(project: &Path) {
    let (code, out, err) = filerouter(&["build", "--project", "."], project);
    assert_eq!(code, 0, "build failed:\n{out}\n{err}");
}

/// `run --record ARGS` on `project`'s build, with an admin address.
fn run_recording(project: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
    let project = project.to_str().unwrap();
    let mut all = vec![
        "run",
        "--project",
        project,
        "--migrate",
        "--record",
        "--admin",
        "127.0.0.1:0",
    ];
    all.extend_from_slice(args);
    Server::start(&all, env, Duration::from_secs(120))
}

/// The admin address's list of traces once it holds `count`: their ids, newest first.
fn traces(server: &Server, count: usize) -> Vec<Value> {
    let admin = admin_address(server);
    let mut list = Vec::new();
    let kept = eventually(Duration::from_secs(20), || {
        let Ok(response) = client(Duration::from_secs(10))
            .get(format!("http://{admin}/traces"))
            .send()
        else {
            return false;
        };
        let body: Value = response.json().unwrap();
        list = body["traces"].as_array().unwrap().clone();
        list.len() >= count
    });
    assert!(kept, "{list:?}\n{}", server.log());
    list
}

/// Trace `id`'s file text, from the admin address.
fn fetch(server: &Server, id: &str) -> String {
    let admin = admin_address(server);
    let response = client(Duration::from_secs(10))
        .get(format!("http://{admin}/traces/{id}"))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().unwrap()
}

/// A folder holding only `project`'s build (`.cache/`) and `trace` as `trace.json`: what a
/// developer's machine needs.
fn fresh_machine(project: &Path, trace: &str) -> PathBuf {
    let dir = support::lasting_tempdir();
    support::copy_all(&project.join(".cache"), &dir.join(".cache"));
    std::fs::write(dir.join("trace.json"), trace).unwrap();
    dir
}

#[test]
fn the_blog_examples_500_replays_after_the_data_that_caused_it_is_gone() {
    let project = Project::copy_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/blog"));
    let _ = std::fs::remove_dir_all(project.path().join(".data"));
    build(project.path());
    let mut server = run_recording(project.path(), &[], &[]);
    let post = |title: &str| {
        server
            .request("POST", "/posts")
            .json(&serde_json::json!({"title": title, "body": "text"}))
            .send()
            .unwrap()
    };
    assert_eq!(post("first").status(), 201);
    let second: Value = post("second").json().unwrap();
    let id = second["id"].as_i64().unwrap();
    // The second post takes the first one's title: the UNIQUE constraint raises, a 500.
    let failed = server
        .request("PATCH", &format!("/posts/{id}"))
        .json(&serde_json::json!({"title": "first"}))
        .send()
        .unwrap();
    assert_eq!(failed.status(), 500);
    // The post whose title caused it is deleted: the failure cannot happen again here.
    let deleted = server.request("DELETE", "/posts/1").send().unwrap();
    assert_eq!(deleted.status(), 204);
    let kept = traces(&server, 1);
    assert_eq!(
        kept.len(),
        1,
        "only the 500 is kept without a sample: {kept:?}"
    );
    assert_eq!(kept[0]["status"], 500);
    let trace = fetch(&server, kept[0]["id"].as_str().unwrap());
    server.terminate();

    let machine = fresh_machine(project.path(), &trace);
    let (code, out, err) = filerouter(&["replay", "trace.json", "--project", "."], &machine);
    assert_eq!(code, 0, "not reproduced:\n{out}\n{err}");
    assert!(out.contains("IntegrityError"), "{out}");
    assert!(
        out.contains("UNIQUE constraint failed: posts.title"),
        "{out}"
    );
    assert!(
        out.contains("File \"/routes/posts/[post_id]/route.py\", line"),
        "{out}"
    );
    assert!(out.contains("filerouter replay: reproduced: 500"), "{out}");
}

/// The project of the next test: one route that asks the outside everything it can.
fn mixed_project(remote: &Remote) -> Project {
    let config = format!(
        "app_name = \"replayed\"\n\
         sandbox = {{\"timeout_s\": 3}}\n\
         environment = {{\"names\": [\"API_TOKEN\"]}}\n\
         outbound = {{\"allow\": [\"http://127.0.0.1:{}\"]}}\n",
        remote.port
    );
    Project::dedented(&[
        ("config.py", &config),
        (
            "migrations/0001_items.sql",
            "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL);\n\
             INSERT INTO items VALUES (1, 'the first item');\n",
        ),
        (
            "routes/mix/route.py",
            r#"
            import asyncio
            import os
            import random
            import sqlite3
            import time
            import uuid

            from filerouter import BackgroundTasks, http, kv


            def note(key, value):
                kv.set(key, value)


            async def GET(request, tasks: BackgroundTasks, url: str):
                token = os.environ["API_TOKEN"]
                conn = sqlite3.connect("app.db")
                row = conn.execute("SELECT name FROM items WHERE id = 1").fetchone()
                conn.close()
                count = kv.incr("count")
                async with http.AsyncClient() as client:
                    slow, quick = await asyncio.gather(
                        client.get(url + "/slow?ms=100", headers={"authorization": "Bearer " + token}),
                        client.get(url + "/json?q=" + str(count)),
                    )
                tasks.add_task(note, "after", count)
                return {
                    "time": time.time(),
                    "monotonic": time.monotonic(),
                    "random": random.random(),
                    "uuid": str(uuid.uuid4()),
                    "urandom": os.urandom(8).hex(),
                    "row": row[0] if row else None,
                    "count": count,
                    "slow": slow.status_code,
                    "quick": quick.json()["query"],
                }
            "#,
        ),
        (
            "routes/items/route.py",
            r#"
            import sqlite3


            def DELETE(request, id: int):
                conn = sqlite3.connect("app.db")
                with conn:
                    conn.execute("DELETE FROM items WHERE id = ?", (id,))
                return None
            "#,
        ),
        (
            "routes/slow/route.py",
            r#"
            import time

            from filerouter import kv


            def GET(request):
                kv.incr("slow")
                time.sleep(30)
            "#,
        ),
    ])
}

const TOKEN: &str = "s3cret-token-value-47";
const CLIENT_SECRET: &str = "client-bearer-secret-9";
const COOKIE: &str = "session=cookie-secret-5";

#[test]
fn a_request_that_asked_everything_replays_byte_for_byte_and_a_changed_route_diverges() {
    let remote = Remote::http();
    let project = mixed_project(&remote);
    build(project.path());
    let mut server = run_recording(
        project.path(),
        &["--record-sample", "1"],
        &[("API_TOKEN", TOKEN)],
    );
    let url = format!("http://127.0.0.1:{}", remote.port);
    let mix = |server: &Server| {
        server
            .request("GET", &format!("/mix?url={url}"))
            .header("authorization", format!("Bearer {CLIENT_SECRET}"))
            .header("cookie", COOKIE)
            .timeout(Duration::from_secs(30))
            .send()
            .unwrap()
    };
    let first = mix(&server);
    assert_eq!(first.status(), 200, "{}", server.log());
    let body = first.bytes().unwrap().to_vec();
    let shown: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(shown["row"], "the first item");
    assert_eq!(shown["count"], 1);
    // Since then: the row is deleted, kv moved on, and (below) the service is gone.
    let deleted = server.request("DELETE", "/items?id=1").send().unwrap();
    assert_eq!(deleted.status(), 204);
    let second: Value = mix(&server).json().unwrap();
    assert_eq!(
        (second["row"].clone(), second["count"].clone()),
        (Value::Null, 2.into())
    );
    let slow = server
        .request("GET", "/slow")
        .timeout(Duration::from_secs(30))
        .send()
        .unwrap();
    assert_eq!(slow.status(), 504);
    let kept = traces(&server, 4);
    let mut files = Vec::new();
    for summary in &kept {
        files.push(fetch(&server, summary["id"].as_str().unwrap()));
    }
    server.terminate();
    drop(remote);

    // No operator value, redacted header or cookie in clear in any trace.
    for file in &files {
        for secret in [TOKEN, CLIENT_SECRET, "cookie-secret-5"] {
            assert!(!file.contains(secret), "{secret} in a trace:\n{file}");
        }
    }
    // The first trace of `path`, by the time it was recorded.
    let tape = |path: &str| -> String {
        let mut of_path: Vec<(String, &String)> = files
            .iter()
            .filter_map(|file| {
                let tape: Value = serde_json::from_str(file).unwrap();
                (tape["request"]["path"] == path)
                    .then(|| (tape["recorded_at"].as_str().unwrap().to_string(), file))
            })
            .collect();
        of_path.sort();
        of_path
            .first()
            .unwrap_or_else(|| panic!("no trace of {path}"))
            .1
            .clone()
    };
    let first_trace = tape("/mix");
    assert!(first_trace.contains("Bearer [API_TOKEN]"), "{first_trace}");

    let machine = fresh_machine(project.path(), &first_trace);
    let (code, out, err) = filerouter(
        &[
            "replay",
            "trace.json",
            "--project",
            ".",
            "--body",
            "body.out",
        ],
        &machine,
    );
    assert_eq!(code, 0, "not reproduced:\n{out}\n{err}");
    assert!(
        out.contains("filerouter replay: reproduced: response 200"),
        "{out}"
    );
    let replayed = std::fs::read(machine.join("body.out")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&replayed),
        String::from_utf8_lossy(&body),
        "the replayed body differs"
    );
    assert_eq!(replayed, body);

    // The request past its time limit: the same 504, stopped where it was.
    let machine = fresh_machine(project.path(), &tape("/slow"));
    let (code, out, err) = filerouter(&["replay", "trace.json", "--project", "."], &machine);
    assert_eq!(code, 0, "not reproduced:\n{out}\n{err}");
    assert!(out.contains("reproduced: 504: Timeout"), "{out}");

    // The route changed: its first different question is named.
    std::fs::write(project.path().join("trace.json"), &first_trace).unwrap();
    let route = project.path().join("routes/mix/route.py");
    let source = std::fs::read_to_string(&route).unwrap();
    std::fs::write(
        &route,
        source.replace("kv.incr(\"count\")", "kv.incr(\"total\")"),
    )
    .unwrap();
    let (code, out, err) = filerouter(
        &["replay", "trace.json", "--project", ".", "--source"],
        project.path(),
    );
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("warning: running the current source"), "{out}");
    assert!(
        out.contains("the run asked kv.incr([\"total\",1,null]), the trace recorded kv.incr([\"count\",1,null])"),
        "{out}"
    );
    assert!(
        out.contains("filerouter replay: divergence at call "),
        "{out}"
    );

    // Rebuilt, the build is another one: refused, naming both.
    build(project.path());
    let (code, out, err) = filerouter(&["replay", "trace.json", "--project", "."], project.path());
    assert_eq!(code, 2, "{out}\n{err}");
    let recorded: Value = serde_json::from_str(&first_trace).unwrap();
    let bundle = recorded["bundle"].as_str().unwrap();
    assert!(
        err.contains(&format!(
            "the trace was recorded on build {}",
            &bundle[..16]
        )),
        "{err}"
    );
    assert!(err.contains("but the build here is"), "{err}");
}

#[test]
fn a_tenant_fetches_its_own_traces_and_never_another_tenants() {
    let project = support::admin::built(
        "replay-boom",
        &[(
            "routes/boom/route.py",
            "def GET(request):\n    raise RuntimeError('boom ' + request.headers.get('host', ''))\n",
        )],
    );
    let site = Site::new(
        &[("a", &project), ("b", &project)],
        r#"
        [tenant.a]
        hosts = ["a.test"]
        project = "a"
        data_dir = "data/a"
        record = true
        traces_token = "token-of-tenant-a-0123"

        [tenant.b]
        hosts = ["b.test"]
        project = "b"
        data_dir = "data/b"
        record = true
        traces_token = "token-of-tenant-b-4567"
        "#,
    );
    let server = site.start(None, &[]);
    for host in ["a.test", "b.test"] {
        let (status, _) = support::admin::get(&server, host, "/boom").unwrap();
        assert_eq!(status, 500);
    }
    let admin = admin_address(&server);
    let list = |tenant: &str, token: Option<&str>| {
        let mut request =
            client(Duration::from_secs(10)).get(format!("http://{admin}/tenants/{tenant}/traces"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().unwrap()
    };
    let mut own = Vec::new();
    assert!(
        eventually(Duration::from_secs(20), || {
            let response = list("a", Some("token-of-tenant-a-0123"));
            assert_eq!(response.status(), 200);
            let body: Value = response.json().unwrap();
            own = body["traces"].as_array().unwrap().clone();
            !own.is_empty()
        }),
        "{}",
        server.log()
    );
    let id = own[0]["id"].as_str().unwrap().to_string();
    // Counted per tenant on the admin address's metrics. Each tenant's trace
    // is kept on its own after its answer, so b's may land after a's list
    // showed a's: wait for both counts rather than read them once.
    let expected: Vec<String> = ["a", "b"]
        .iter()
        .flat_map(|tenant| {
            [
                format!("filerouter_traces_kept_total{{tenant=\"{tenant}\"}} 1"),
                format!("filerouter_traces_taped_total{{tenant=\"{tenant}\"}} 1"),
            ]
        })
        .collect();
    let mut metrics = String::new();
    let counted = eventually(Duration::from_secs(20), || {
        metrics = client(Duration::from_secs(10))
            .get(format!("http://{admin}/metrics"))
            .send()
            .unwrap()
            .text()
            .unwrap();
        expected.iter().all(|line| metrics.contains(line))
    });
    for line in &expected {
        assert!(
            counted && metrics.contains(line),
            "{line} missing from\n{metrics}"
        );
    }
    let fetched = client(Duration::from_secs(10))
        .get(format!("http://{admin}/tenants/a/traces/{id}"))
        .bearer_auth("token-of-tenant-a-0123")
        .send()
        .unwrap();
    assert_eq!(fetched.status(), 200);
    let tape: Value = fetched.json().unwrap();
    assert_eq!(tape["tenant"], "a");

    // Tenant a's token opens nothing of b's, by list or by id; no token opens nothing.
    assert_eq!(list("b", Some("token-of-tenant-a-0123")).status(), 401);
    assert_eq!(list("b", None).status(), 401);
    assert_eq!(list("nobody", Some("token-of-tenant-a-0123")).status(), 401);
    let b_traces: Value = list("b", Some("token-of-tenant-b-4567")).json().unwrap();
    let b_id = b_traces["traces"][0]["id"].as_str().unwrap().to_string();
    assert_ne!(b_id, id);
    for (tenant, trace) in [("b", &b_id), ("a", &b_id)] {
        let response = client(Duration::from_secs(10))
            .get(format!("http://{admin}/tenants/{tenant}/traces/{trace}"))
            .bearer_auth("token-of-tenant-a-0123")
            .send()
            .unwrap();
        let status = response.status().as_u16();
        assert!(
            status == 401 || status == 404,
            "{tenant}/{trace}: {status} {}",
            response.text().unwrap()
        );
    }
    // The single-project endpoint is not there with tenants.
    let all = client(Duration::from_secs(10))
        .get(format!("http://{admin}/traces"))
        .send()
        .unwrap();
    assert_eq!(all.status(), 404);
}

/// A project with a streamed response (Server-Sent Events) and a WebSocket echo, each asking
/// the kv store and the random numbers as it goes.
fn streams_project() -> Project {
    Project::dedented(&[
        ("config.py", "app_name = \"streams\"\n"),
        (
            "routes/events/route.py",
            r#"
            import random

            from filerouter import Request, kv, route
            from filerouter.sse import EventSourceResponse


            @route(response_class=EventSourceResponse)
            async def GET(request: Request):
                n = kv.incr("events")
                for i in range(3):
                    yield {"n": n, "i": i, "r": random.random()}
            "#,
        ),
        (
            "routes/echo/route.py",
            r#"
            from filerouter import WebSocket, WebSocketDisconnect, kv


            async def WEBSOCKET(websocket: WebSocket):
                await websocket.accept()
                try:
                    while True:
                        text = await websocket.receive_text()
                        n = kv.incr("messages")
                        await websocket.send_text(f"{n}: {text}")
                except WebSocketDisconnect:
                    pass
            "#,
        ),
    ])
}

/// The trace in `files` whose request went to `path`.
fn trace_of<'a>(files: &'a [String], path: &str) -> &'a String {
    files
        .iter()
        .find(|file| serde_json::from_str::<Value>(file).unwrap()["request"]["path"] == path)
        .unwrap_or_else(|| panic!("no trace of {path}"))
}

#[test]
fn a_streamed_response_and_a_websocket_session_replay_what_they_sent_and_a_changed_route_diverges()
{
    let project = streams_project();
    build(project.path());
    let mut server = run_recording(project.path(), &["--record-sample", "1"], &[]);
    let streamed = server
        .request("GET", "/events")
        .timeout(Duration::from_secs(30))
        .send()
        .unwrap();
    assert_eq!(streamed.status(), 200, "{}", server.log());
    let body = streamed.bytes().unwrap().to_vec();
    assert!(
        String::from_utf8_lossy(&body).contains("\"i\": 2"),
        "{}",
        String::from_utf8_lossy(&body)
    );

    let address = server.base.trim_start_matches("http://").to_string();
    let stream = std::net::TcpStream::connect(&address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let (mut socket, _) =
        tungstenite::client::client(format!("ws://{address}/echo"), stream).unwrap();
    let mut heard = Vec::new();
    for text in ["hello", "world"] {
        socket.send(tungstenite::Message::text(text)).unwrap();
        loop {
            match socket.read().unwrap() {
                tungstenite::Message::Text(text) => {
                    heard.push(text.to_string());
                    break;
                }
                _ => continue,
            }
        }
    }
    assert_eq!(heard, ["1: hello", "2: world"]);
    socket.close(None).unwrap();
    while socket.read().is_ok() {}

    let kept = traces(&server, 2);
    let files: Vec<String> = kept
        .iter()
        .map(|summary| fetch(&server, summary["id"].as_str().unwrap()))
        .collect();
    let statuses: Vec<u64> = kept.iter().map(|s| s["status"].as_u64().unwrap()).collect();
    assert!(statuses.contains(&101), "{kept:?}");
    server.terminate();

    // The stream: its chunks again, byte for byte, from a folder with only the build.
    let events = trace_of(&files, "/events");
    let machine = fresh_machine(project.path(), events);
    let (code, out, err) = filerouter(
        &[
            "replay",
            "trace.json",
            "--project",
            ".",
            "--body",
            "body.out",
        ],
        &machine,
    );
    assert_eq!(code, 0, "not reproduced:\n{out}\n{err}");
    assert!(out.contains("streamed response: 200"), "{out}");
    assert!(
        out.contains("filerouter replay: reproduced: streamed response 200, "),
        "{out}"
    );
    assert_eq!(std::fs::read(machine.join("body.out")).unwrap(), body);

    // The session: the messages it sent, in order, from the messages it received.
    let echo = trace_of(&files, "/echo");
    let machine = fresh_machine(project.path(), echo);
    let (code, out, err) = filerouter(&["replay", "trace.json", "--project", "."], &machine);
    assert_eq!(code, 0, "not reproduced:\n{out}\n{err}");
    let sent: Vec<&str> = out.lines().filter(|line| line.starts_with("> ")).collect();
    assert_eq!(sent, ["> 1: hello", "> 2: world"], "{out}");
    assert!(out.contains("websocket: accepted (101)"), "{out}");
    assert!(
        out.contains("filerouter replay: reproduced: websocket session, 2 messages sent"),
        "{out}"
    );

    // Changed routes: the first message or chunk they send differently is named.
    std::fs::write(project.path().join("echo.json"), echo).unwrap();
    std::fs::write(project.path().join("events.json"), events).unwrap();
    let route = project.path().join("routes/echo/route.py");
    let source = std::fs::read_to_string(&route).unwrap();
    std::fs::write(
        &route,
        source.replace("f\"{n}: {text}\"", "f\"{n} said {text}\""),
    )
    .unwrap();
    let (code, out, err) = filerouter(
        &["replay", "echo.json", "--project", ".", "--source"],
        project.path(),
    );
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(r#"the run asked websocket.send(["text",{"text":"1 said hello"}]), the trace recorded websocket.send(["text",{"text":"1: hello"}])"#),
        "{out}"
    );
    let route = project.path().join("routes/events/route.py");
    let source = std::fs::read_to_string(&route).unwrap();
    std::fs::write(&route, source.replace("\"i\": i", "\"index\": i")).unwrap();
    let (code, out, err) = filerouter(
        &["replay", "events.json", "--project", ".", "--source"],
        project.path(),
    );
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(
            "the run asked response-stream.write([{\"text\":\"data: {\\\"n\\\": 1, \\\"index\\\": 0"
        ),
        "{out}"
    );
}

/// `name`'s value in the admin address's `/metrics` text (summed over its label sets that
/// contain `labels`).
fn metric(server: &Server, name: &str, labels: &str) -> u64 {
    let admin = admin_address(server);
    let text = client(Duration::from_secs(10))
        .get(format!("http://{admin}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .filter(|line| {
            line.starts_with(name)
                && line[name.len()..].starts_with(['{', ' '])
                && line.contains(labels)
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn a_request_whose_client_left_is_kept_as_499_replays_to_where_it_left_and_recording_is_counted() {
    let project = Project::dedented(&[
        ("config.py", "app_name = \"left\"\n"),
        (
            "routes/slow/route.py",
            r#"
            import time

            from filerouter import kv


            def GET(request):
                kv.incr("before")
                time.sleep(3)
                kv.incr("after")
                return {"done": True}
            "#,
        ),
        (
            "routes/ok/route.py",
            "def GET(request):\n    return {\"ok\": True}\n",
        ),
    ]);
    build(project.path());
    let mut server = run_recording(
        project.path(),
        &["--record-sample", "1", "--record-max", "2"],
        &[],
    );
    let gone = server
        .request("GET", "/slow")
        .timeout(Duration::from_millis(700))
        .send();
    assert!(gone.is_err(), "the client was meant to give up: {gone:?}");
    let kept = traces(&server, 1);
    assert_eq!(kept[0]["status"], 499, "{kept:?}");
    let left = fetch(&server, kept[0]["id"].as_str().unwrap());
    let tape: Value = serde_json::from_str(&left).unwrap();
    assert_eq!(tape["outcome"]["error"], "ClientClosed", "{left}");
    let calls: Vec<&str> = tape["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["call"].as_str().unwrap())
        .collect();
    assert_eq!(
        calls.iter().filter(|call| **call == "kv.incr").count(),
        1,
        "dropped where it slept: {left}"
    );
    assert_eq!(calls.last(), Some(&"kv.incr"), "{left}");

    // Two more kept (sampled): the store holds two, so the oldest goes; all counted.
    for _ in 0..2 {
        assert_eq!(server.get("/ok").status(), 200);
    }
    let listed = traces(&server, 2);
    let ok_bytes: u64 = listed
        .iter()
        .map(|summary| summary["bytes"].as_u64().unwrap())
        .sum();
    assert!(
        eventually(Duration::from_secs(20), || {
            metric(&server, "filerouter_traces_kept_total", "") == 3
        }),
        "{}",
        server.log()
    );
    assert_eq!(metric(&server, "filerouter_traces_taped_total", ""), 3);
    assert_eq!(
        metric(
            &server,
            "filerouter_traces_dropped_total",
            "reason=\"count\""
        ),
        1
    );
    assert_eq!(
        metric(&server, "filerouter_trace_bytes_written_total", ""),
        left.len() as u64 + ok_bytes
    );
    server.terminate();

    // Replayed: the same questions up to where the client left, stopped there.
    let machine = fresh_machine(project.path(), &left);
    let (code, out, err) = filerouter(&["replay", "trace.json", "--project", "."], &machine);
    assert_eq!(code, 0, "not reproduced:\n{out}\n{err}");
    assert!(
        out.contains("filerouter replay: reproduced: 499: ClientClosed"),
        "{out}"
    );
    let next = calls.len() + 1;
    assert!(
        out.contains(&format!(
            "stopped at call {next}, where the client had left"
        )),
        "{out}"
    );
}

#[test]
fn config_py_turns_recording_on_in_run_and_dev_records_for_a_replay_on_the_source() {
    let boom = "from filerouter import kv\n\n\ndef GET(request):\n    n = kv.incr(\"boom\")\n    raise RuntimeError(f\"boom {n}\")\n";
    let project = Project::new(&[
        (
            "config.py",
            "app_name = \"recorded\"\nrecord = {\"enabled\": True, \"max_traces\": 5}\n",
        ),
        ("routes/boom/route.py", boom),
    ]);
    build(project.path());
    // `run` without --record: config.py's setting turned it on.
    let project_dir = project.path().to_str().unwrap().to_string();
    let mut server = Server::start(
        &["run", "--project", &project_dir, "--admin", "127.0.0.1:0"],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(server.get("/boom").status(), 500);
    let kept = traces(&server, 1);
    assert_eq!(kept[0]["status"], 500);
    server.terminate();

    // A wrong value is refused with its line.
    let bad = Project::new(&[
        (
            "config.py",
            "app_name = \"bad\"\nrecord = {\"sample\": 2}\n",
        ),
        ("routes/boom/route.py", boom),
    ]);
    let (code, out, err) = filerouter(&["build", "--project", "."], bad.path());
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(err.contains("config.py:2"), "{err}");
    assert!(err.contains("sample"), "{err}");

    // `dev --record`: traces on disk, replayed on the current source.
    let plain = Project::new(&[("routes/boom/route.py", boom)]);
    let mut dev = Server::dev_with_args(&plain, &["--record"]);
    assert_eq!(dev.get("/boom").status(), 500);
    let traces_dir = plain.path().join(".data/traces");
    let mut written = Vec::new();
    assert!(
        eventually(Duration::from_secs(20), || {
            written = std::fs::read_dir(&traces_dir)
                .map(|dir| {
                    dir.flatten()
                        .map(|entry| entry.path())
                        .filter(|path| path.extension().is_some_and(|e| e == "json"))
                        .collect()
                })
                .unwrap_or_default();
            !written.is_empty()
        }),
        "{}",
        dev.log()
    );
    dev.terminate();
    let trace = written[0].to_str().unwrap();
    let (code, out, err) = filerouter(&["replay", trace, "--project", "."], plain.path());
    assert_eq!(code, 0, "not reproduced:\n{out}\n{err}");
    assert!(out.contains("recorded by `dev`"), "{out}");
    assert!(out.contains("RuntimeError: boom 1"), "{out}");
    assert!(out.contains("filerouter replay: reproduced: 500"), "{out}");
}
