//! FastAPI-style handler parameters: query parameters by name with defaults, conversion and
//! 422 bodies, and `Depends` (nested, cached per request, sync and async, `yield` teardown).

use crate::support;

use serde_json::json;
use support::{Project, Server, json};

#[test]
fn query_parameters_convert_default_and_report_422() {
    let project = Project::new(&[(
        "routes/search/[kind]/route.py",
        r#"
        import enum
        import uuid

        class Order(enum.Enum):
            asc = "asc"
            desc = "desc"

        def GET(request, kind: str, q: str, limit: int = 10, ratio: float = 0.5,
                exact: bool = False, order: Order = Order.asc, tag: list[str] = [],
                ref: uuid.UUID | None = None, raw=None):
            return {"kind": kind, "q": q, "limit": limit, "ratio": ratio, "exact": exact,
                    "order": order.value, "tag": tag, "ref": str(ref) if ref else None, "raw": raw}
        "#,
    )]);
    let server = Server::dev(&project);
    assert_eq!(
        json(server.get("/search/books?q=dune")),
        json!({"kind": "books", "q": "dune", "limit": 10, "ratio": 0.5, "exact": false,
               "order": "asc", "tag": [], "ref": null, "raw": null})
    );
    assert_eq!(
        json(server.get(
            "/search/books?q=dune&limit=3&ratio=2.5&exact=yes&order=desc&tag=a&tag=b&raw=x&ref=12345678-1234-5678-1234-567812345678"
        )),
        json!({"kind": "books", "q": "dune", "limit": 3, "ratio": 2.5, "exact": true,
               "order": "desc", "tag": ["a", "b"], "ref": "12345678-1234-5678-1234-567812345678",
               "raw": "x"})
    );
    let missing = server.get("/search/books");
    assert_eq!(missing.status(), 422);
    assert_eq!(
        json(missing),
        json!({"detail": [{"type": "missing", "loc": ["query", "q"], "msg": "Field required", "input": null}]})
    );
    let bad = server.get("/search/books?q=x&limit=ten&exact=maybe&order=up");
    assert_eq!(bad.status(), 422);
    let detail = json(bad)["detail"].clone();
    let kinds: Vec<(&str, &str)> = detail
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), e["loc"][1].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("int_parsing", "limit"),
            ("bool_parsing", "exact"),
            ("enum", "order")
        ]
    );
    for error in detail.as_array().unwrap() {
        assert_eq!(error["loc"][0], "query");
        assert!(!error["msg"].as_str().unwrap().is_empty());
    }
}

#[test]
fn depends_resolves_nested_cached_sync_and_async_dependencies() {
    let project = Project::new(&[(
        "routes/orgs/[org]/route.py",
        r#"
        from filerouter import Depends, HTTPException

        CALLS = []

        def settings():
            CALLS.append("settings")
            return {"page_size": 20}

        async def token(request):
            value = request.headers.get("x-token")
            if value is None:
                raise HTTPException(401, "no token", headers={"WWW-Authenticate": "Token"})
            return value

        async def current_user(tok: str = Depends(token), cfg=Depends(settings)):
            return {"name": tok.upper(), "page_size": cfg["page_size"]}

        def paging(page: int = 1, cfg=Depends(settings)):
            return {"page": page, "size": cfg["page_size"]}

        def GET(request, org: str, user=Depends(current_user), paging=Depends(paging),
                cookie_theme=None):
            return {"org": org, "user": user, "paging": paging, "settings_calls": len(CALLS),
                    "theme": request.cookies.get("theme"), "agent": request.headers.get("USER-AGENT")}
        "#,
    )]);
    let server = Server::dev(&project);
    let response = server
        .request("GET", "/orgs/acme?page=3")
        .header("X-Token", "abc")
        .header("User-Agent", "tester")
        .header("Cookie", "theme=dark; other=1")
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        json(response),
        json!({"org": "acme", "user": {"name": "ABC", "page_size": 20},
               "paging": {"page": 3, "size": 20}, "settings_calls": 1,
               "theme": "dark", "agent": "tester"})
    );
    // A dependency's HTTPException answers the request, headers and all.
    let denied = server.get("/orgs/acme");
    assert_eq!(denied.status(), 401);
    assert_eq!(denied.headers()["www-authenticate"], "Token");
    assert_eq!(json(denied), json!({"detail": "no token"}));
    // A dependency's query parameter is validated like the handler's own.
    let bad = server
        .request("GET", "/orgs/acme?page=first")
        .header("X-Token", "abc")
        .send()
        .unwrap();
    assert_eq!(bad.status(), 422);
    assert_eq!(json(bad)["detail"][0]["loc"], json!(["query", "page"]));
}

#[test]
fn yield_dependencies_tear_down_after_the_handler_in_reverse_order() {
    let project = Project::new(&[
        (
            "routes/work/route.py",
            r#"
            from filerouter import Depends, HTTPException, kv

            def log(entry):
                kv.set("log", kv.get("log", []) + [entry])

            def db():
                log("db open")
                try:
                    yield "db"
                except HTTPException as exc:
                    log(f"db saw {exc.status_code}")
                    raise
                finally:
                    log("db close")

            async def tx(conn=Depends(db)):
                log("tx begin")
                yield conn + "+tx"
                log("tx end")

            def GET(request, t=Depends(tx), fail: bool = False):
                log("handler")
                if fail:
                    raise HTTPException(409, "conflict")
                return {"t": t}
            "#,
        ),
        (
            "routes/log/route.py",
            r#"
            from filerouter import kv

            def GET(request):
                return kv.get("log", [])

            def DELETE(request):
                kv.delete("log")
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    assert_eq!(json(server.get("/work")), json!({"t": "db+tx"}));
    assert_eq!(
        json(server.get("/log")),
        json!(["db open", "tx begin", "handler", "tx end", "db close"])
    );
    assert_eq!(
        server.request("DELETE", "/log").send().unwrap().status(),
        204
    );
    let failed = server.get("/work?fail=true");
    assert_eq!(failed.status(), 409);
    assert_eq!(
        json(server.get("/log")),
        json!(["db open", "tx begin", "handler", "db saw 409", "db close"])
    );
}
