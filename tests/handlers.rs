//! Handler shapes: the request object, return values, HTTPException, sync and async,
//! the standard library, fresh globals.

use crate::support;

use serde_json::json;
use support::{Project, Server, json};

/// 204 and 304 have no body, so no content type: `HTTPException(204)` (issue 25), `None`,
/// `(None, 304)`; a body returned with them is not sent.
#[test]
fn no_content_answers_carry_no_content_type_and_no_body() {
    let project = Project::new(&[
        (
            "routes/raised/[code]/route.py",
            r#"
            from filerouter import HTTPException

            def GET(request, code: int):
                raise HTTPException(code, headers={"x-why": "raised"})
            "#,
        ),
        (
            "routes/none/route.py",
            "def GET(request):\n    return None\n",
        ),
        (
            "routes/unchanged/route.py",
            "def GET(request):\n    return None, 304, {'etag': '\"v1\"'}\n",
        ),
        (
            "routes/with-body/route.py",
            "def GET(request):\n    return {'ignored': True}, 204\n",
        ),
    ]);
    let server = Server::dev(&project);
    for (path, status) in [
        ("/raised/204", 204),
        ("/raised/304", 304),
        ("/none", 204),
        ("/unchanged", 304),
        ("/with-body", 204),
    ] {
        let response = server.get(path);
        assert_eq!(response.status(), status, "{path}");
        if path.starts_with("/raised") {
            assert_eq!(response.headers()["x-why"], "raised", "{path}");
        }
        // A body returned with 204 keeps its content type, as in FastAPI; the body goes.
        if path != "/with-body" {
            assert!(
                response.headers().get("content-type").is_none(),
                "{path}: {:?}",
                response.headers()
            );
        }
        assert!(response.bytes().unwrap().is_empty(), "{path}");
    }
    // Other statuses keep FastAPI's JSON body.
    let teapot = server.get("/raised/418");
    assert_eq!(teapot.headers()["content-type"], "application/json");
    assert_eq!(json(teapot), json!({"detail": "I'm a Teapot"}));
}

#[test]
fn request_members() {
    let project = Project::new(&[(
        "routes/echo/[id]/route.py",
        r#"
        from filerouter import Request

        async def POST(request: Request, id: int):
            return {
                "method": request.method,
                "path": request.path,
                "agent": request.headers.get("X-Test-Agent"),
                "agent_lower": request.headers.get("x-test-agent"),
                "q": request.query_params.get("q"),
                "missing": request.query_params.get("nope", "default"),
                "path_params": request.path_params,
                "json": await request.json(),
                "body": (await request.body()).decode(),
                "cookies": request.cookies,
            }
        "#,
    )]);
    let server = Server::dev(&project);
    let response = server
        .request("POST", "/echo/5?q=hello%20world")
        .header("X-Test-Agent", "tester")
        .header("Cookie", "session=abc; theme=dark")
        .header("Content-Type", "application/json")
        .body(r#"{"a": [1, 2]}"#)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        json(response),
        json!({
            "method": "POST", "path": "/echo/5", "agent": "tester", "agent_lower": "tester",
            "q": "hello world", "missing": "default", "path_params": {"id": "5"},
            "json": {"a": [1, 2]}, "body": "{\"a\": [1, 2]}",
            "cookies": {"session": "abc", "theme": "dark"},
        })
    );
}

#[test]
fn return_values() {
    let project = Project::new(&[
        (
            "routes/dict/route.py",
            "def GET(request):\n    return {'a': 1}\n",
        ),
        (
            "routes/list/route.py",
            "def GET(request):\n    return [1, 2, 3]\n",
        ),
        (
            "routes/none/route.py",
            "def GET(request):\n    return None\n",
        ),
        (
            "routes/created/route.py",
            "def POST(request):\n    return {'id': 1}, 201\n",
        ),
        (
            "routes/headers/route.py",
            "def GET(request):\n    return {'ok': True}, 202, {'X-Extra': 'yes'}\n",
        ),
        (
            "routes/responses/[kind]/route.py",
            r#"
            from filerouter import Response, JSONResponse, HTMLResponse, PlainTextResponse, RedirectResponse

            def GET(request, kind: str):
                if kind == "html":
                    return HTMLResponse("<h1>hi</h1>")
                if kind == "text":
                    return PlainTextResponse("plain", status_code=203)
                if kind == "json":
                    return JSONResponse({"x": 1}, status_code=201, headers={"X-A": "b"})
                if kind == "redirect":
                    return RedirectResponse("/somewhere")
                return Response(content=b"raw", media_type="application/octet-stream")
            "#,
        ),
        (
            "routes/encode/route.py",
            r#"
            import datetime, decimal, uuid, dataclasses, enum

            class Kind(enum.Enum):
                a = "A"

            @dataclasses.dataclass
            class Point:
                x: int
                y: int

            def GET(request):
                return {
                    "when": datetime.date(2024, 1, 2),
                    "id": uuid.UUID(int=1),
                    "price": decimal.Decimal("1.5"),
                    "kind": Kind.a,
                    "point": Point(1, 2),
                    "unicode": "héllo",
                }
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    assert_eq!(json(server.get("/dict")), json!({"a": 1}));
    assert_eq!(json(server.get("/list")), json!([1, 2, 3]));
    let none = server.get("/none");
    assert_eq!(none.status(), 204);
    assert!(none.bytes().unwrap().is_empty());
    let created = server.request("POST", "/created").send().unwrap();
    assert_eq!(created.status(), 201);
    let headers = server.get("/headers");
    assert_eq!(headers.status(), 202);
    assert_eq!(headers.headers()["x-extra"], "yes");

    let html = server.get("/responses/html");
    assert_eq!(html.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(html.text().unwrap(), "<h1>hi</h1>");
    let text = server.get("/responses/text");
    assert_eq!(text.status(), 203);
    assert_eq!(text.text().unwrap(), "plain");
    let j = server.get("/responses/json");
    assert_eq!(
        (j.status().as_u16(), j.headers()["x-a"].to_str().unwrap()),
        (201, "b")
    );
    let r = server.get("/responses/redirect");
    assert_eq!(r.status(), 307);
    assert_eq!(r.headers()["location"], "/somewhere");
    let raw = server.get("/responses/raw");
    assert_eq!(raw.headers()["content-type"], "application/octet-stream");
    assert_eq!(raw.text().unwrap(), "raw");

    assert_eq!(
        json(server.get("/encode")),
        json!({"when": "2024-01-02", "id": "00000000-0000-0000-0000-000000000001",
               "price": 1.5, "kind": "A", "point": {"x": 1, "y": 2}, "unicode": "héllo"})
    );
}

#[test]
fn http_exception() {
    let project = Project::new(&[(
        "routes/teapot/route.py",
        r#"
        from filerouter import HTTPException

        def GET(request):
            raise HTTPException(418, "short and stout", headers={"X-Pot": "tea"})

        def DELETE(request):
            raise HTTPException(status_code=403)
        "#,
    )]);
    let server = Server::dev(&project);
    let response = server.get("/teapot");
    assert_eq!(response.status(), 418);
    assert_eq!(response.headers()["x-pot"], "tea");
    assert_eq!(json(response), json!({"detail": "short and stout"}));
    let response = server.request("DELETE", "/teapot").send().unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(json(response), json!({"detail": "Forbidden"}));
}

#[test]
fn sync_and_async_handlers_with_asyncio() {
    let project = Project::new(&[
        (
            "routes/sync/route.py",
            "def GET(request):\n    return {'sync': True}\n",
        ),
        (
            "routes/async/route.py",
            r#"
            import asyncio

            async def work(n):
                await asyncio.sleep(0.01 * n)
                return n * n

            async def GET(request):
                results = await asyncio.gather(work(1), work(2), work(3))
                task = asyncio.create_task(work(4))
                queue = asyncio.Queue()
                await queue.put("q")
                return {"gather": results, "task": await task, "queue": await queue.get()}
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    assert_eq!(json(server.get("/sync")), json!({"sync": true}));
    assert_eq!(
        json(server.get("/async")),
        json!({"gather": [1, 4, 9], "task": 16, "queue": "q"})
    );
}

/// A built project (`run`) starts each request's coroutine at once, as an eager task
/// (`SandboxEventLoop.run_eagerly`): inside it the loop runs and the task is current, even in
/// a handler that never waits, and what it schedules without waiting (a callback, a task)
/// still gets its first step, as under `run_until_complete`.
#[test]
fn a_handler_that_never_waits_runs_in_a_task_of_a_running_loop() {
    let project = Project::built(&[
        (
            "routes/current/route.py",
            r#"
            import asyncio

            async def GET(request):
                async with asyncio.timeout(5):
                    task = asyncio.current_task()
                    running = asyncio.get_running_loop()
                return {"task": task is not None, "done": task.done(), "loop": running is not None}
            "#,
        ),
        (
            "routes/scheduled/route.py",
            r#"
            import asyncio

            async def note(what):
                print(f"scheduled {what} ran")

            async def GET(request):
                asyncio.get_running_loop().call_soon(print, "scheduled callback ran")
                asyncio.create_task(note("task"))
                return {"scheduled": True}
            "#,
        ),
        (
            "routes/waits/route.py",
            r#"
            import asyncio

            async def GET(request):
                await asyncio.sleep(0.01)
                return {"task": asyncio.current_task() is not None}
            "#,
        ),
        (
            "routes/plain/route.py",
            "import asyncio\n\ndef GET(request):\n    return {'loop': asyncio.get_event_loop().is_running()}\n",
        ),
    ]);
    let server = Server::run(&project, &[]);
    assert_eq!(
        json(server.get("/current")),
        json!({"task": true, "done": false, "loop": true})
    );
    assert_eq!(json(server.get("/scheduled")), json!({"scheduled": true}));
    assert!(
        server.log_shows("scheduled callback ran"),
        "{}",
        server.log()
    );
    assert!(server.log_shows("scheduled task ran"), "{}", server.log());
    assert_eq!(json(server.get("/waits")), json!({"task": true}));
    assert_eq!(json(server.get("/plain")), json!({"loop": true}));
}

/// A build checks every handler against its route's path parameters once, for its requests;
/// a handler that cannot take them still fails each request, naming the parameter.
#[test]
fn a_built_handler_is_checked_against_its_path_parameters() {
    let project = Project::built(&[
        (
            "routes/users/[id]/route.py",
            "def GET(request):\n    return {'id': None}\n",
        ),
        (
            "routes/items/[item_id]/route.py",
            "def GET(request, item_id: int):\n    return {'id': item_id}\n",
        ),
        (
            "routes/files/[...path]/route.py",
            "def GET(request, path: list[str]):\n    return {'path': path}\n",
        ),
        (
            "routes/shop/[[...slug]]/route.py",
            "def GET(request, slug: list[str] | None = None):\n    return {'slug': slug}\n",
        ),
    ]);
    let server = Server::run(&project, &[]);
    for _ in 0..2 {
        let response = server.get("/users/7");
        assert_eq!(response.status(), 500);
        assert!(
            server.log_shows("GET() does not accept the path parameter `id` of its route"),
            "{}",
            server.log()
        );
        assert_eq!(json(server.get("/items/7")), json!({"id": 7}));
        assert_eq!(
            json(server.get("/items/x")).pointer("/detail/0/type"),
            Some(&json!("int_parsing"))
        );
        assert_eq!(json(server.get("/files/a/b")), json!({"path": ["a", "b"]}));
        assert_eq!(json(server.get("/shop/a")), json!({"slug": ["a"]}));
    }
}

/// The build warms the request path before its snapshot (guest-python/sandbox/warmup.py),
/// the sandbox's `sqlite3` included: a fresh instance finds that module's code already
/// specialized by the adaptive interpreter, not redone by every request. A request that only
/// reads the bytecode (`dis`, which runs none of it) sees the snapshot's state; the `sqlite3`
/// it then uses works as ever.
#[test]
fn the_snapshot_holds_the_database_path_warmed() {
    let route = format!(
        "{SPECIALIZED}{}",
        r#"
import sqlite3


def GET(request):
    counts = {
        "Connection.execute": _specialized(sqlite3.Connection.execute),
        "Cursor.execute": _specialized(sqlite3.Cursor.execute),
        "Cursor.fetchone": _specialized(sqlite3.Cursor.fetchone),
    }
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    row = conn.execute("SELECT 1 AS one").fetchone()
    conn.close()
    return {"specialized": counts, "one": row["one"]}
"#
    );
    let project = Project::built(&[("routes/warm/route.py", &route)]);
    let server = Server::run(&project, &[]);
    for _ in 0..2 {
        let answer = json(server.get("/warm"));
        assert_eq!(answer["one"], 1, "{answer}");
        assert_all_specialized(&answer);
    }
}

/// Route code's `_specialized(fn)`: how many of `fn`'s instructions the adaptive interpreter
/// has specialized (its bytecode read with `dis`, none of it run).
const SPECIALIZED: &str = r#"
import dis


def _specialized(fn):
    plain = [i.opname for i in dis.get_instructions(fn)]
    adaptive = [i.opname for i in dis.get_instructions(fn, adaptive=True)]
    return sum(a != b for a, b in zip(plain, adaptive))
"#;

/// Every count in `answer["specialized"]` (from `_specialized`) is above zero.
fn assert_all_specialized(answer: &serde_json::Value) {
    for (name, count) in answer["specialized"].as_object().unwrap() {
        assert!(
            count.as_u64().unwrap() > 0,
            "{name} is not warmed: {answer}"
        );
    }
}

/// The build's warm-up enters through the guest's own entry for a request (the host's call
/// of `handle`), so the steps after the handler too are specialized in the snapshot: what
/// `handle` runs once the handler has answered (whether a WebSocket took the call, the
/// background tasks, the answer's conversion) is found specialized by a request that has not
/// run it yet. Route code reaches them through its own stack.
#[test]
fn the_snapshot_holds_the_request_entry_warmed() {
    let route = format!(
        "{SPECIALIZED}{}",
        r#"
import sys


def GET(request):
    frame = sys._getframe()
    while frame is not None and not (frame.f_code.co_name == "handle" and frame.f_code.co_filename.endswith("dispatcher.py")):
        frame = frame.f_back
    if frame is None:
        return {"found": False}
    entry = frame.f_globals
    return {
        "found": True,
        "specialized": {
            "sockets.accepted": _specialized(entry["sockets"].accepted),
            "pipeline.background_tasks": _specialized(entry["pipeline"].background_tasks),
            "_to_wit": _specialized(entry["_to_wit"]),
        },
    }
"#
    );
    let project = Project::built(&[("routes/entry/route.py", &route)]);
    // `dev`'s snapshots warm up the same way (its files are only seen by requests).
    let dev = Server::dev(&project);
    dev.wait_for_snapshot();
    for server in [Server::run(&project, &[]), dev] {
        for _ in 0..2 {
            let answer = json(server.get("/entry"));
            assert_eq!(answer["found"], true, "{answer}");
            assert_all_specialized(&answer);
        }
    }
}

/// The build works out what a request would otherwise redo every time: the resolved field
/// types of the dataclasses and TypedDicts a handler takes (nested ones too), and how each
/// `yield` dependency is entered. Route code counts the calls of `typing.get_type_hints` and
/// `contextlib.contextmanager` made outside the build (a stack without the guest's `bake`):
/// a request makes none, and validates as before.
#[test]
fn a_request_finds_its_body_types_and_dependencies_worked_out() {
    let project = Project::built(&[(
        "routes/orders/route.py",
        r#"
import contextlib
import dataclasses
import sys
import typing

from filerouter import Depends

CALLS = {"get_type_hints": 0, "contextmanager": 0}
def _counted(name, fn):
    def counting(*args, **kwargs):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_name != "bake":
            frame = frame.f_back
        if frame is None:
            CALLS[name] += 1
        return fn(*args, **kwargs)
    return counting


typing.get_type_hints = _counted("get_type_hints", typing.get_type_hints)
contextlib.contextmanager = _counted("contextmanager", contextlib.contextmanager)


class Meta(typing.TypedDict):
    source: str


@dataclasses.dataclass
class Item:
    sku: str
    qty: int


@dataclasses.dataclass
class Order:
    customer: str
    items: list[Item]
    meta: Meta


def session():
    yield "session"


def POST(order: Order, s: str = Depends(session)):
    return {"calls": CALLS, "qty": sum(i.qty for i in order.items), "source": order.meta["source"], "s": s}
"#,
    )]);
    let server = Server::run(&project, &[]);
    for _ in 0..2 {
        let answer = json(
            server
                .request("POST", "/orders")
                .json(&json!({"customer": "ann", "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 3}], "meta": {"source": "web"}}))
                .send()
                .unwrap(),
        );
        assert_eq!(
            answer,
            json!({"calls": {"get_type_hints": 0, "contextmanager": 0}, "qty": 5, "source": "web", "s": "session"})
        );
    }
    let invalid = server
        .request("POST", "/orders")
        .json(&json!({"customer": "ann", "items": [{"sku": "a", "qty": "x"}], "meta": {}}))
        .send()
        .unwrap();
    assert_eq!(invalid.status(), 422);
    let detail = json(invalid)["detail"].clone();
    let locs: Vec<_> = detail
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["loc"].clone())
        .collect();
    assert_eq!(
        locs,
        vec![
            json!(["body", "items", 0, "qty"]),
            json!(["body", "meta", "source"])
        ],
        "{detail}"
    );
}

#[test]
fn the_stdlib_set_is_importable() {
    let project = Project::new(&[(
        "routes/stdlib/route.py",
        r#"
        import json, re, datetime, decimal, uuid, enum, dataclasses, typing, collections
        import itertools, functools, math, random, hashlib, base64, urllib.parse, html
        import string, textwrap, time, asyncio

        def GET(request):
            return {
                "sha": hashlib.sha256(b"x").hexdigest()[:8],
                "b64": base64.b64encode(b"hi").decode(),
                "quote": urllib.parse.quote("a b"),
                "escape": html.escape("<"),
                "decimal": str(decimal.Decimal("0.1") + decimal.Decimal("0.2")),
                "sqrt": math.sqrt(16),
                "re": re.sub(r"\d", '#', "a1b2"),
            }
        "#,
    )]);
    let server = Server::dev(&project);
    assert_eq!(
        json(server.get("/stdlib")),
        json!({"sha": "2d711642", "b64": "aGk=", "quote": "a%20b", "escape": "&lt;",
               "decimal": "0.3", "sqrt": 4.0, "re": "a#b#"})
    );
}

#[test]
fn every_request_sees_fresh_module_globals_and_fresh_randomness() {
    let project = Project::new(&[(
        "routes/counter/route.py",
        r#"
        import random

        count = 0
        seen = []

        def GET(request):
            global count
            count += 1
            seen.append(count)
            return {"count": count, "seen": seen, "random": random.random()}
        "#,
    )]);
    let server = Server::dev(&project);
    let mut randoms = std::collections::HashSet::new();
    for _ in 0..5 {
        let body = json(server.get("/counter"));
        assert_eq!(body["count"], 1);
        assert_eq!(body["seen"], json!([1]));
        randoms.insert(body["random"].to_string());
    }
    assert_eq!(
        randoms.len(),
        5,
        "random numbers repeat across instances: {randoms:?}"
    );
}

#[test]
fn route_files_can_import_helpers_from_private_folders() {
    let project = Project::new(&[
        ("routes/_lib/__init__.py", ""),
        (
            "routes/_lib/greet.py",
            "def greet(name):\n    return 'hi ' + name\n",
        ),
        (
            "routes/hello/[name]/route.py",
            "from _lib.greet import greet\n\ndef GET(request, name):\n    return {'text': greet(name)}\n",
        ),
    ]);
    let server = Server::dev(&project);
    assert_eq!(json(server.get("/hello/ann")), json!({"text": "hi ann"}));
}

#[test]
fn an_exception_is_a_500_naming_file_and_line() {
    let project = Project::new(&[
        (
            "routes/boom/route.py",
            "def GET(request):\n    x = 1\n    return {'v': 1 / 0}\n",
        ),
        (
            "routes/ok/route.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
    ]);
    let server = Server::dev(&project);
    let response = server.get("/boom");
    assert_eq!(response.status(), 500);
    let body = json(response);
    assert_eq!(body["error"]["type"], "ZeroDivisionError");
    assert_eq!(body["error"]["file"], "routes/boom/route.py");
    assert_eq!(body["error"]["line"], 3);
    let html = server
        .request("GET", "/boom")
        .header("Accept", "text/html")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        html.contains("ZeroDivisionError") && html.contains("routes/boom/route.py:3"),
        "{html}"
    );
    assert_eq!(json(server.get("/ok")), json!({"ok": true}));
}

#[test]
fn a_broken_route_file_affects_only_its_own_routes() {
    let project = Project::new(&[
        (
            "routes/broken/route.py",
            "def GET(request):\n    return {\n",
        ),
        (
            "routes/fine/route.py",
            "def GET(request):\n    return {'fine': True}\n",
        ),
    ]);
    let server = Server::dev(&project);
    let response = server.get("/broken");
    assert_eq!(response.status(), 500);
    let body = json(response);
    assert_eq!(body["error"]["type"], "SyntaxError");
    assert_eq!(body["error"]["file"], "routes/broken/route.py");
    assert_eq!(body["error"]["line"], 2);
    assert_eq!(json(server.get("/fine")), json!({"fine": true}));
}

#[test]
fn query_parameters_by_name() {
    let project = Project::new(&[(
        "routes/search/route.py",
        "def GET(request, q: str, page: int = 1):\n    return {'q': q, 'page': page}\n",
    )]);
    let server = Server::dev(&project);
    assert_eq!(
        json(server.get("/search?q=x")),
        json!({"q": "x", "page": 1})
    );
    assert_eq!(
        json(server.get("/search?q=x&page=3")),
        json!({"q": "x", "page": 3})
    );
    let missing = server.get("/search");
    assert_eq!(missing.status(), 422);
    assert_eq!(
        json(missing),
        json!({"detail": [{"type": "missing", "loc": ["query", "q"], "msg": "Field required", "input": null}]})
    );
    let bad = json(server.get("/search?q=x&page=two"));
    assert_eq!(bad["detail"][0]["type"], "int_parsing");
    assert_eq!(bad["detail"][0]["loc"], json!(["query", "page"]));
}

#[test]
fn query_params_and_forms_are_multi_dicts() {
    // One name may come more than once: `get` and `[]` give the last value, `getlist` all of
    // them in order, `multi_items` every pair; keys, len and `in` count each name once.
    let project = Project::new(&[(
        "routes/multi/route.py",
        r#"
        def view(m):
            return {
                "get": m.get("a"), "item": m["a"], "all": m.getlist("a"),
                "none": m.getlist("zz"), "default": m.get("zz", "d"),
                "keys": list(m.keys()), "values": list(m.values()),
                "items": [list(p) for p in m.items()],
                "multi": [list(p) for p in m.multi_items()],
                "len": len(m), "in": "b" in m, "not_in": "zz" in m,
                "iter": list(m), "repr": repr(m),
            }

        def GET(request):
            return view(request.query_params)

        async def POST(request):
            form = await request.form()
            return view(form)
        "#,
    )]);
    let server = Server::dev(&project);
    let expected = |kind: &str| {
        json!({
            "get": "3", "item": "3", "all": ["1", "3"], "none": [], "default": "d",
            "keys": ["a", "b"], "values": ["3", ""], "items": [["a", "3"], ["b", ""]],
            "multi": [["a", "1"], ["b", ""], ["a", "3"]],
            "len": 2, "in": true, "not_in": false, "iter": ["a", "b"],
            "repr": format!("{kind}([('a', '1'), ('b', ''), ('a', '3')])"),
        })
    };
    assert_eq!(
        json(server.get("/multi?a=1&b=&a=3")),
        expected("QueryParams")
    );
    let posted = server
        .request("POST", "/multi")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("a=1&b=&a=3")
        .send()
        .unwrap();
    assert_eq!(posted.status(), 200);
    assert_eq!(json(posted), expected("FormData"));
}

#[test]
fn the_status_module_names_fastapi_codes() {
    let project = Project::new(&[(
        "routes/items/route.py",
        r#"
        from typing import Literal

        from filerouter import HTTPException, status
        from filerouter.status import HTTP_202_ACCEPTED

        def POST(request, name: str) -> tuple[dict[str, str], Literal[201]]:
            if name == "taken":
                raise HTTPException(status_code=status.HTTP_409_CONFLICT, detail="Item exists")
            return {"name": name}, status.HTTP_201_CREATED

        def PUT(request):
            return {"accepted": True}, HTTP_202_ACCEPTED

        def GET(request):
            return {
                "ok": status.HTTP_200_OK,
                "no_content": status.HTTP_204_NO_CONTENT,
                "unprocessable": status.HTTP_422_UNPROCESSABLE_ENTITY,
                "unprocessable_new": status.HTTP_422_UNPROCESSABLE_CONTENT,
                "teapot": status.HTTP_418_IM_A_TEAPOT,
                "ws": status.WS_1008_POLICY_VIOLATION,
            }
        "#,
    )]);
    let server = Server::dev(&project);
    let created = server.request("POST", "/items?name=pen").send().unwrap();
    assert_eq!(created.status(), 201);
    assert_eq!(json(created), json!({"name": "pen"}));
    let conflict = server.request("POST", "/items?name=taken").send().unwrap();
    assert_eq!(conflict.status(), 409);
    assert_eq!(json(conflict), json!({"detail": "Item exists"}));
    assert_eq!(
        server.request("PUT", "/items").send().unwrap().status(),
        202
    );
    assert_eq!(
        json(server.get("/items")),
        json!({"ok": 200, "no_content": 204, "unprocessable": 422, "unprocessable_new": 422,
               "teapot": 418, "ws": 1008})
    );
}
