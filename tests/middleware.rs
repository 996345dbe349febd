//! middleware.py around every kind of response, the key-value store, not-found.py, and edits
//! of root files picked up by `dev` without a restart.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::{Project, Server, eventually, json};

/// A project whose middleware marks every response, so a test can see it ran.
fn marked() -> Project {
    Project::new(&[
        (
            "middleware.py",
            r#"
            async def middleware(request, call_next):
                request.state.seen = "yes"
                response = await call_next(request)
                response.headers["X-Middleware"] = f"{request.method} {response.status_code}"
                return response
            "#,
        ),
        (
            "routes/items/[id]/route.py",
            r#"
            def GET(request, id: int):
                return {"id": id, "seen": request.state.seen}
            "#,
        ),
        ("public/hello.txt", "hello from public\n"),
    ])
}

#[test]
fn middleware_wraps_every_kind_of_response() {
    let project = marked();
    let server = Server::dev(&project);
    let cases: [(&str, &str, u16); 9] = [
        ("GET", "/items/7", 200),
        ("GET", "/items/abc", 422),
        ("GET", "/nowhere", 404),
        ("POST", "/items/7", 405),
        ("GET", "/items/7/", 307),
        ("OPTIONS", "/items/7", 204),
        ("GET", "/docs", 200),
        ("GET", "/openapi.json", 200),
        ("GET", "/hello.txt", 200),
    ];
    for (method, path, status) in cases {
        let response = server.request(method, path).send().unwrap();
        assert_eq!(response.status(), status, "{method} {path}");
        assert_eq!(
            response.headers()["x-middleware"],
            format!("{method} {status}").as_str(),
            "{method} {path}"
        );
    }
    // The handler saw what the middleware set; the host's own bodies came through intact.
    assert_eq!(
        json(server.get("/items/7")),
        json!({"id": 7, "seen": "yes"})
    );
    assert_eq!(
        server.get("/hello.txt").text().unwrap(),
        "hello from public\n"
    );
    let openapi = json(server.get("/openapi.json"));
    assert_eq!(openapi["openapi"], "3.1.0");
    let head = server.request("HEAD", "/items/7").send().unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["x-middleware"], "HEAD 200");
    assert_eq!(head.text().unwrap(), "");
}

#[test]
fn middleware_returns_early_changes_status_and_sees_errors() {
    let project = Project::new(&[
        (
            "middleware.py",
            r#"
            from filerouter import JSONResponse, HTTPException

            async def middleware(request, call_next):
                if request.headers.get("authorization") != "Bearer good":
                    return JSONResponse({"detail": "Not authenticated"}, status_code=401)
                if request.query_params.get("teapot"):
                    raise HTTPException(418, "short and stout")
                try:
                    response = await call_next(request)
                except ZeroDivisionError:
                    return JSONResponse({"detail": "handled by middleware"}, status_code=503)
                if request.query_params.get("accepted"):
                    response.status_code = 202
                return response
            "#,
        ),
        (
            "routes/calls/route.py",
            r#"
            from filerouter import kv

            def GET(request):
                return {"calls": kv.incr("calls")}
            "#,
        ),
        (
            "routes/boom/route.py",
            r#"
            def GET(request):
                return 1 / 0
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    // Early return: the handler never runs (its counter does not move).
    let denied = server.get("/calls");
    assert_eq!(denied.status(), 401);
    assert_eq!(json(denied), json!({"detail": "Not authenticated"}));
    let auth = |path: &str| {
        server
            .request("GET", path)
            .header("Authorization", "Bearer good")
            .send()
            .unwrap()
    };
    assert_eq!(json(auth("/calls")), json!({"calls": 1}));
    let accepted = auth("/calls?accepted=1");
    assert_eq!(accepted.status(), 202);
    assert_eq!(json(accepted), json!({"calls": 2}));
    let teapot = auth("/calls?teapot=1");
    assert_eq!(teapot.status(), 418);
    assert_eq!(json(teapot), json!({"detail": "short and stout"}));
    // A handler's exception reaches the middleware, which may answer it.
    let handled = auth("/boom");
    assert_eq!(handled.status(), 503);
    assert_eq!(json(handled), json!({"detail": "handled by middleware"}));
}

#[test]
fn the_key_value_store_outlives_requests_and_rate_limits() {
    let project = Project::new(&[
        (
            "middleware.py",
            r#"
            from filerouter import JSONResponse, kv

            async def middleware(request, call_next):
                count = kv.incr(f"rate:{request.client}", ttl=60)
                if count > 3:
                    return JSONResponse({"detail": "Too Many Requests"}, status_code=429)
                response = await call_next(request)
                response.headers["X-Count"] = str(count)
                return response
            "#,
        ),
        (
            "routes/kv/route.py",
            r#"
            import time
            from filerouter import kv
            from filerouter.kv import KVError

            GLOBAL = []

            def GET(request):
                GLOBAL.append(1)
                kv.set("doc", {"a": [1, 2], "b": None})
                kv.set("short", "gone soon", ttl=0.05)
                before = kv.get("short")
                time.sleep(0.1)
                try:
                    kv.incr("doc")
                    incr_error = None
                except KVError as exc:
                    incr_error = str(exc)
                return {
                    "doc": kv.get("doc"),
                    "short_before": before,
                    "short_after": kv.get("short", "expired"),
                    "deleted": kv.delete("doc"),
                    "deleted_again": kv.delete("doc"),
                    "incr_error": incr_error,
                    "globals": len(GLOBAL),
                }
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let first = server.get("/kv");
    assert_eq!(first.headers()["x-count"], "1");
    assert_eq!(
        json(first),
        json!({
            "doc": {"a": [1, 2], "b": null}, "short_before": "gone soon",
            "short_after": "expired", "deleted": true, "deleted_again": false,
            "incr_error": "the value under this key is not an integer", "globals": 1,
        })
    );
    // Module globals start fresh; the counter in the store does not.
    assert_eq!(server.get("/kv").headers()["x-count"], "2");
    assert_eq!(server.get("/kv").headers()["x-count"], "3");
    let limited = server.get("/kv");
    assert_eq!(limited.status(), 429);
    assert_eq!(json(limited), json!({"detail": "Too Many Requests"}));
    assert_eq!(server.get("/nowhere").status(), 429);
}

#[test]
fn not_found_py_replaces_the_404_body_and_keeps_the_status() {
    let project = Project::new(&[
        (
            "not-found.py",
            r#"
            def handler(request, context):
                stats = context.get_statistics()
                get_routes = [r["path"] for r in context.get_routes_by_method("GET")]
                return {
                    "missing": request.path,
                    "total": stats["total_routes"],
                    "methods": stats["methods"],
                    "get_routes": get_routes,
                    "title": context.get_project_info()["title"],
                    "files": [r["file"] for r in context.get_routes()],
                }
            "#,
        ),
        ("config.py", "title = 'Shop'\n"),
        ("routes/index.py", "def GET(request):\n    return {}\n"),
        (
            "routes/users/[id]/route.py",
            "def GET(request, id: int):\n    return {}\n\ndef DELETE(request, id: int):\n    return None\n",
        ),
    ]);
    let server = Server::dev(&project);
    let response = server.get("/no/such/page");
    assert_eq!(response.status(), 404);
    assert_eq!(
        json(response),
        json!({
            "missing": "/no/such/page", "total": 3, "methods": {"GET": 2, "DELETE": 1},
            "get_routes": ["/", "/users/{id}"], "title": "Shop",
            // One entry per path and method, as `total` counts them.
            "files": ["routes/index.py", "routes/users/[id]/route.py", "routes/users/[id]/route.py"],
        })
    );

    // HTML text, async, and a response object all keep 404; edits apply without a restart.
    project.write(
        "not-found.py",
        r#"
        async def handler(request, context):
            return "<h1>Lost: " + request.path + "</h1>"
        "#,
    );
    assert!(eventually(Duration::from_secs(10), || {
        server.get("/x").text().unwrap() == "<h1>Lost: /x</h1>"
    }));
    let html = server.get("/x");
    assert_eq!(html.status(), 404);
    assert!(
        html.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    project.write(
        "not-found.py",
        r#"
        from filerouter import PlainTextResponse

        def handler(request, context):
            return PlainTextResponse("nothing here", headers={"X-Custom": "1"})
        "#,
    );
    assert!(eventually(Duration::from_secs(10), || {
        server.get("/x").text().unwrap() == "nothing here"
    }));
    let plain = server.get("/x");
    assert_eq!(plain.status(), 404);
    assert_eq!(plain.headers()["x-custom"], "1");

    // Removing it brings the default back.
    project.remove("not-found.py");
    assert!(eventually(Duration::from_secs(10), || {
        server.get("/x").text().unwrap() == r#"{"detail":"Not Found"}"#
    }));
}

#[test]
fn middleware_edits_apply_without_a_restart() {
    let project = Project::new(&[("routes/index.py", "def GET(request):\n    return {}\n")]);
    let server = Server::dev(&project);
    assert!(server.get("/").headers().get("x-version").is_none());
    for version in ["1", "2"] {
        project.write(
            "middleware.py",
            &format!(
                r#"
                async def middleware(request, call_next):
                    response = await call_next(request)
                    response.headers["X-Version"] = "{version}"
                    return response
                "#
            ),
        );
        assert!(eventually(Duration::from_secs(10), || {
            server
                .get("/")
                .headers()
                .get("x-version")
                .is_some_and(|v| v == version)
        }));
    }
    project.remove("middleware.py");
    assert!(eventually(Duration::from_secs(10), || {
        server.get("/").headers().get("x-version").is_none()
    }));
}

#[test]
fn the_example_api_project_works_as_its_readme_says() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/api");
    let project = support::Project::copy_of(&root);
    let server = Server::dev(&project);
    let token = "Bearer secret-token";
    assert_eq!(server.get("/health").status(), 200);
    let denied = server.get("/items");
    assert_eq!(denied.status(), 401);
    assert_eq!(denied.headers()["www-authenticate"], "Bearer");
    let created = server
        .request("POST", "/items")
        .header("Authorization", token)
        .header("Content-Type", "application/json")
        .body(r#"{"name": "lamp"}"#)
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    assert!(created.headers().contains_key("x-process-time-ms"));
    assert_eq!(json(created), json!({"id": 1, "name": "lamp"}));
    let not_json = server
        .request("POST", "/items")
        .header("Authorization", token)
        .body("name=lamp")
        .send()
        .unwrap();
    assert_eq!(not_json.status(), 415);
    let listed = server
        .request("GET", "/items?limit=5")
        .header("Authorization", token)
        .send()
        .unwrap();
    assert_eq!(
        json(listed),
        json!({"user": "demo", "items": [{"id": 1, "name": "lamp"}], "total": 1})
    );
    let logo = server.get("/logo.svg");
    assert_eq!(logo.status(), 200);
    assert_eq!(logo.headers()["content-type"], "image/svg+xml");
    assert_eq!(server.get("/nope").status(), 401);
    let missing = server
        .request("GET", "/nope")
        .header("Authorization", token)
        .send()
        .unwrap();
    assert_eq!(missing.status(), 404);
    let missing = json(missing);
    assert_eq!(missing["detail"], "Not Found");
    assert_eq!(missing["path"], "/nope");
    // The middleware's log line reaches the server's output.
    assert!(eventually(Duration::from_secs(20), || server
        .log()
        .contains("POST /items -> 201")));
}
