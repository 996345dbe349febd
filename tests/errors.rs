//! Development error pages: every failure in project code lands on the file, the line, the code
//! and a likely fix, as an HTML page for browsers and as JSON for API clients.

use crate::support;

use std::time::Duration;

use reqwest::blocking::Response;
use serde_json::Value;
use support::{Project, Server, eventually, json};

/// The JSON an API client gets for a failing `path`, with the status checked.
fn dev_error(server: &Server, path: &str, status: u16) -> Value {
    let response = server.get(path);
    assert_eq!(response.status(), status, "{path}");
    let body = json(response);
    assert!(body["error"].is_object(), "{body}");
    body["error"].clone()
}

/// The HTML page a browser gets for `path`.
fn dev_page(server: &Server, path: &str) -> (u16, String) {
    let response: Response = server
        .request("GET", path)
        .header("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .unwrap();
    let status = response.status().as_u16();
    assert!(
        response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/html")),
        "{path}: not HTML"
    );
    (status, response.text().unwrap())
}

fn suggestions(error: &Value) -> String {
    error["suggestions"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Nothing from the guest runtime or the framework may show: only project files.
fn assert_only_project_frames(error: &Value) {
    let frames = error["frames"].as_array().expect("frames");
    assert!(!frames.is_empty(), "{error}");
    for frame in frames {
        let file = frame["file"].as_str().unwrap();
        assert!(
            file.starts_with("routes/")
                || ["config.py", "middleware.py", "docs.py", "not-found.py"].contains(&file),
            "a non-project frame leaked: {frame}"
        );
    }
}

fn assert_no_framework_text(page: &str) {
    for needle in [
        "dispatcher.py",
        "filerouter/params.py",
        "componentize",
        "/routes/",
        "wit_world",
    ] {
        assert!(!page.contains(needle), "the page shows {needle}:\n{page}");
    }
}

#[test]
fn handler_exception_page_and_json() {
    let project = Project::new(&[(
        "routes/users/[user_id]/route.py",
        r#"
        def lookup(user_id):
            users = {1: "ada"}
            return users[user_id]

        def GET(request, user_id: int):
            name = lookup(user_id)
            return {"name": name}
        "#,
    )]);
    let server = Server::dev(&project);
    let error = dev_error(&server, "/users/7", 500);
    assert_eq!(error["type"], "KeyError");
    assert_eq!(error["message"], "7");
    assert_eq!(error["file"], "routes/users/[user_id]/route.py");
    assert_eq!(error["line"], 3);
    assert_only_project_frames(&error);
    let lines: Vec<u64> = error["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, vec![6, 3]);
    assert_eq!(error["request"]["method"], "GET");
    assert_eq!(error["request"]["path_params"]["user_id"], "7");
    assert!(suggestions(&error).contains(".get("), "{error}");

    let (status, page) = dev_page(&server, "/users/7");
    assert_eq!(status, 500);
    assert!(page.contains("KeyError"));
    assert!(page.contains("routes/users/[user_id]/route.py:3"));
    // The code around the failing line, numbered, highlighted, the failing line marked.
    assert!(
        page.contains("class=\"line hit\"><span class=ln>   3</span>"),
        "{page}"
    );
    assert!(page.contains("<span class=ln>   6</span>"), "{page}");
    assert!(page.contains("users"), "{page}");
    assert!(
        page.contains("<span style=\"color:"),
        "not highlighted:\n{page}"
    );
    // The request that triggered it.
    assert!(page.contains("/users/7") && page.contains("user_id"));
    assert_no_framework_text(&page);
    // It reloads itself when the project changes.
    assert!(page.contains("/_filerouter/reload"));
}

#[test]
fn name_error_suggests_the_close_name() {
    let project = Project::new(&[(
        "routes/users/[user_id]/route.py",
        "def GET(request, user_id: int):\n    return {'id': userid}\n",
    )]);
    let server = Server::dev(&project);
    let error = dev_error(&server, "/users/1", 500);
    assert_eq!(error["type"], "NameError");
    assert_eq!(error["line"], 2);
    assert!(
        suggestions(&error).contains("Did you mean `user_id`?"),
        "{error}"
    );
    let (_, page) = dev_page(&server, "/users/1");
    assert!(
        page.contains("Did you mean <code>user_id</code>?")
            || page.contains("Did you mean `user_id`?")
    );
}

#[test]
fn import_failures_name_file_and_line() {
    let project = Project::new(&[
        (
            "routes/syntax/route.py",
            "def GET(request)\n    return {}\n",
        ),
        ("routes/indent/route.py", "def GET(request):\nreturn {}\n"),
        (
            "routes/imports/route.py",
            "import requests\n\ndef GET(request):\n    return {}\n",
        ),
        (
            "routes/typo/route.py",
            "import jsno\n\ndef GET(request):\n    return {}\n",
        ),
        (
            "routes/module_name/route.py",
            "LIMIT = 10\nPAGE = LIMT * 2\n\ndef GET(request):\n    return {}\n",
        ),
        (
            "routes/fine/route.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
    ]);
    let server = Server::dev(&project);

    let error = dev_error(&server, "/syntax", 500);
    assert_eq!(error["type"], "SyntaxError");
    assert_eq!(error["file"], "routes/syntax/route.py");
    assert_eq!(error["line"], 1);
    assert!(suggestions(&error).contains("colon"), "{error}");

    let error = dev_error(&server, "/indent", 500);
    assert_eq!(error["type"], "IndentationError");
    assert_eq!(error["line"], 2);

    let error = dev_error(&server, "/imports", 500);
    assert!(error["type"] == "ModuleNotFoundError" || error["type"] == "ImportError");
    assert_eq!(error["line"], 1);
    let hints = suggestions(&error);
    assert!(hints.contains("filerouter packages install"), "{hints}");
    // The whole standard library is importable: no list of it, and never the guest's own
    // modules (issue 24).
    assert!(hints.contains("neither in the standard library"), "{hints}");
    for internal in ["dispatcher", "baked", "pipeline", "preload", "wit_text"] {
        assert!(!hints.contains(internal), "{internal}: {hints}");
    }

    let error = dev_error(&server, "/typo", 500);
    assert!(
        suggestions(&error).contains("Did you mean `json`?"),
        "{error}"
    );

    let error = dev_error(&server, "/module_name", 500);
    assert_eq!(error["type"], "NameError");
    assert_eq!(error["line"], 2);
    assert!(
        suggestions(&error).contains("Did you mean `LIMIT`?"),
        "{error}"
    );

    let (status, page) = dev_page(&server, "/syntax");
    assert_eq!(status, 500);
    assert!(
        page.contains("class=\"line hit\"><span class=ln>   1</span>"),
        "{page}"
    );
    assert_no_framework_text(&page);

    // A broken file affects only its own routes.
    assert_eq!(server.get("/fine").status(), 200);
}

#[test]
fn handler_shape_mistakes_get_the_expected_signature() {
    let project = Project::new(&[
        (
            "routes/lower/route.py",
            "def get(request):\n    return {}\n",
        ),
        (
            "routes/norequest/route.py",
            "def GET(req):\n    return {}\n",
        ),
        (
            "routes/users/[user_id]/route.py",
            "def GET(request):\n    return {}\n",
        ),
    ]);
    let server = Server::dev(&project);

    let error = dev_error(&server, "/lower", 500);
    let hints = suggestions(&error);
    assert!(hints.contains("`GET`"), "{error}");
    assert_eq!(error["file"], "routes/lower/route.py");

    let error = dev_error(&server, "/norequest", 500);
    assert_eq!(error["file"], "routes/norequest/route.py");
    assert_eq!(error["line"], 1);
    assert!(suggestions(&error).contains("def GET(request"), "{error}");

    let error = dev_error(&server, "/users/3", 500);
    assert_eq!(error["line"], 1);
    assert!(
        suggestions(&error).contains("def GET(request, user_id"),
        "{error}"
    );
}

#[test]
fn unserializable_return_points_at_the_handler() {
    let project = Project::new(&[(
        "routes/bad/route.py",
        "class Thing:\n    pass\n\n\ndef GET(request):\n    return {'thing': Thing()}\n",
    )]);
    let server = Server::dev(&project);
    let error = dev_error(&server, "/bad", 500);
    assert_eq!(error["file"], "routes/bad/route.py");
    assert_eq!(error["line"], 5);
    assert!(
        error["message"].as_str().unwrap().contains("Thing"),
        "{error}"
    );
}

#[test]
fn scan_errors_name_both_files() {
    let project = Project::new(&[
        ("routes/a/index.py", "def GET(request):\n    return {}\n"),
        ("routes/a/route.py", "def GET(request):\n    return {}\n"),
    ]);
    let server = Server::dev(&project);
    let error = dev_error(&server, "/a", 500);
    assert_eq!(error["type"], "ScanError");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("routes/a/index.py") && message.contains("routes/a/route.py"),
        "{message}"
    );
    let (status, page) = dev_page(&server, "/anything");
    assert_eq!(status, 500);
    assert!(page.contains("routes/a/index.py"));
}

#[test]
fn config_errors_name_config_py_and_the_line() {
    let project = Project::new(&[
        ("routes/index.py", "def GET(request):\n    return {}\n"),
        ("config.py", "debug = True\n"),
    ]);
    let server = Server::dev(&project);
    assert_eq!(server.get("/").status(), 200);
    project.write(
        "config.py",
        "debug = True\nsandbox = {'memory_mb': 'lots'}\n",
    );
    assert!(eventually(Duration::from_secs(20), || server
        .get("/")
        .status()
        == 500));
    let error = dev_error(&server, "/", 500);
    assert_eq!(error["file"], "config.py");
    assert_eq!(error["line"], 2);
    let (_, page) = dev_page(&server, "/");
    assert!(page.contains("config.py:2"));
    assert!(
        page.contains("class=\"line hit\"><span class=ln>   2</span>"),
        "{page}"
    );
}

#[test]
fn sandbox_limits_are_named_with_where_to_raise_them() {
    let project = Project::new(&[
        (
            "routes/hog/route.py",
            "def GET(request):\n    data = []\n    while True:\n        data.append(bytearray(1 << 20))\n",
        ),
        ("config.py", "sandbox = {'memory_mb': 64}\n"),
    ]);
    let server = Server::dev(&project);
    let error = dev_error(&server, "/hog", 500);
    let hints = suggestions(&error);
    assert!(
        hints.contains("memory_mb") && hints.contains("config.py"),
        "{error}"
    );
}

#[test]
fn html_in_exception_messages_is_escaped() {
    let project = Project::new(&[(
        "routes/xss/route.py",
        "def GET(request):\n    raise ValueError('<script>alert(1)</script><b>bold</b>')\n",
    )]);
    let server = Server::dev(&project);
    let (status, page) = dev_page(&server, "/xss");
    assert_eq!(status, 500);
    assert!(!page.contains("<script>alert(1)"), "{page}");
    assert!(!page.contains("<b>bold</b>"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
}

#[test]
fn the_page_reloads_after_a_fix_and_the_terminal_shows_the_error_once() {
    let project = Project::new(&[(
        "routes/fix/route.py",
        "def GET(request):\n    return {'n': 1 / 0}\n",
    )]);
    let server = Server::dev(&project);
    let before: u64 = server
        .get("/_filerouter/reload")
        .text()
        .unwrap()
        .parse()
        .unwrap();
    for _ in 0..3 {
        assert_eq!(server.get("/fix").status(), 500);
    }
    // Printed once, compactly, with file:line.
    let log = server.log();
    let mentions = log
        .lines()
        .filter(|l| l.contains("ZeroDivisionError") && l.contains("routes/fix/route.py:2"))
        .count();
    assert_eq!(mentions, 1, "{log}");
    project.write(
        "routes/fix/route.py",
        "def GET(request):\n    return {'n': 1}\n",
    );
    assert!(eventually(Duration::from_secs(20), || {
        server
            .get("/_filerouter/reload")
            .text()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > before
    }));
    assert_eq!(server.get("/fix").status(), 200);
}

#[test]
fn failures_in_middleware_pages_and_dependencies_point_at_their_line() {
    let project = Project::new(&[
        (
            "middleware.py",
            r#"
            async def middleware(request, call_next):
                if request.path == "/mw":
                    raise KeyError("from middleware")
                response = await call_next(request)
                if request.path == "/after":
                    response.headers["X-Len"] = len(response)
                return response
            "#,
        ),
        (
            "routes/dep/route.py",
            r#"
            from filerouter import Depends

            def db():
                raise RuntimeError("database unreachable")

            def GET(request, conn=Depends(db)):
                return {}
            "#,
        ),
        (
            "routes/after/route.py",
            "def GET(request):\n    return {}\n",
        ),
        ("routes/mw/route.py", "def GET(request):\n    return {}\n"),
        (
            "docs.py",
            r#"
            def handler(request, context):
                routes = context.get_routes()
                return routes[99]
            "#,
        ),
        (
            "not-found.py",
            r#"
            async def handler(request, context):
                return {"stats": context.get_statistic()}
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let cases = [
        ("/mw", "KeyError", "middleware.py", 3, "raise KeyError"),
        ("/after", "TypeError", "middleware.py", 6, "len(response)"),
        (
            "/dep",
            "RuntimeError",
            "routes/dep/route.py",
            4,
            "database unreachable",
        ),
        ("/docs", "IndexError", "docs.py", 3, "routes[99]"),
        (
            "/nowhere",
            "AttributeError",
            "not-found.py",
            2,
            "get_statistic()",
        ),
    ];
    for (path, kind, file, line, code) in cases {
        let error = dev_error(&server, path, 500);
        assert_eq!(error["type"], kind, "{path}: {error}");
        assert_eq!(error["file"], file, "{path}: {error}");
        assert_eq!(error["line"], line, "{path}: {error}");
        assert_only_project_frames(&error);
        let (status, page) = dev_page(&server, path);
        assert_eq!(status, 500);
        assert!(page.contains(file), "{path}");
        assert!(
            strip_tags(&page).contains(code),
            "{path}: the code line {code:?} is not on the page"
        );
        assert_no_framework_text(&page);
    }
    // The Depends frame chain reaches the handler's file; the suggestion for the typo names
    // the right method.
    let error = dev_error(&server, "/nowhere", 500);
    assert!(suggestions(&error).contains("get_statistics"), "{error}");
}

/// The text of an HTML fragment without its tags (highlighted code is split into spans).
fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    html_escape::decode_html_entities(&out).into_owned()
}
