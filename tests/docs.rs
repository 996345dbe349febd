//! The API reference through the real binary: `/docs` and `/openapi.json` on fixture projects,
//! the document checked by `openapi-spec-validator` and schemathesis (from PyPI, in
//! `tests/.venv`), and the page driven in headless Chromium by `playwright-core`
//! (`tests/browser/`).
//!
//! The Python and browser tests need tools a fresh machine may lack. Without them they print a
//! loud `SKIPPED` to stderr and pass, unless `FILEROUTER_REQUIRE_BROWSER=1` (CI sets it), where
//! a missing tool is a failure.

mod support;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::{Value, json};
use support::{
    Project, Server, json,
    tools::{missing, python_venv, run_tool as run, workspace},
};

/// A project with a route of every kind, docstrings in both styles, and text that needs escaping.
fn fixture() -> Project {
    Project::new(&[
        (
            "config.py",
            r#"
            title = "Fixture <API> & co"
            description = "Described in config.py"
            version = "3.2.1"
            "#,
        ),
        (
            "routes/index.py",
            r#"
            def GET(request):
                """Say <b>hello</b> & wave."""
                return {"message": "hello"}
            "#,
        ),
        (
            "routes/users/route.py",
            r#"
            def GET(request, q: str | None = None, limit: int = 10, active: bool = True):
                """List users.

                Filtered by `q`, <script>alert("doc")</script>.

                :param q: Text to <search> for.
                :param limit: How many to return.
                """
                return {"q": q, "limit": limit, "active": active}

            async def POST(request):
                """Create a user."""
                return {"created": await request.json() if await request.body() else None}
            "#,
        ),
        (
            "routes/users/[id]/route.py",
            r#"
            def GET(request, id: int):
                """Fetch one user.

                :param id: The user's <number>.
                """
                return {"id": id}

            def DELETE(request, id: int):
                return {"deleted": id}
            "#,
        ),
        (
            "routes/orders/[order_id]/route.py",
            r#"
            import uuid

            def GET(request, order_id: uuid.UUID, page: int):
                """One order.

                Args:
                    page: The page of order lines,
                        counted from 1.
                """
                return {"id": str(order_id), "page": page}
            "#,
        ),
        (
            "routes/colors/[color]/route.py",
            r#"
            from enum import Enum

            class Color(Enum):
                red = "red"
                green = "green"

            def GET(request, color: Color):
                return {"color": color.value}
            "#,
        ),
        (
            "routes/prices/[amount]/route.py",
            "def GET(request, amount: float):\n    return {'amount': amount}\n",
        ),
        (
            "routes/flags/[on]/route.py",
            "def GET(request, on: bool):\n    return {'on': on}\n",
        ),
        (
            "routes/files/[...path]/route.py",
            r#"
            def GET(request, path: list):
                """A file by its path."""
                return {"segments": path}
            "#,
        ),
        (
            "routes/shop/[[...slug]]/route.py",
            "def GET(request, slug: list):\n    return {'slug': slug}\n",
        ),
        (
            "routes/<odd>/route.py",
            "def GET(request):\n    return {}\n",
        ),
    ])
}

/// Every `(path, method)` of the fixture.
const OPERATIONS: [(&str, &str); 12] = [
    ("/", "GET"),
    ("/users", "GET"),
    ("/users", "POST"),
    ("/users/{id}", "GET"),
    ("/users/{id}", "DELETE"),
    ("/orders/{order_id}", "GET"),
    ("/colors/{color}", "GET"),
    ("/prices/{amount}", "GET"),
    ("/flags/{on}", "GET"),
    ("/files/{path}", "GET"),
    ("/shop/{slug}", "GET"),
    ("/<odd>", "GET"),
];

fn docs_html(server: &Server) -> String {
    let response = server.get("/docs");
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(content_type.starts_with("text/html"), "{content_type}");
    response.text().unwrap()
}

#[test]
fn docs_page_lists_every_route_with_methods_params_docstrings_and_statistics() {
    let project = fixture();
    let server = Server::dev(&project);
    let html = docs_html(&server);
    for (path, method) in OPERATIONS {
        let path_html = path.replace('<', "&lt;").replace('>', "&gt;");
        let group = path_html.trim_start_matches('/').split('/').next().unwrap();
        assert!(
            html.contains(&format!(">/{group}</a></h2>")),
            "group of {path}"
        );
        assert!(
            html.contains(&format!(
                "data-method=\"{method}\" data-path=\"{path_html}\""
            )),
            "{method} {path} has no try-it form"
        );
    }
    assert_eq!(
        html.matches("<article class=\"op\"").count(),
        OPERATIONS.len()
    );
    // Dynamic parameters, typed.
    for marked in [
        "{id<span class=\"pt\">:int</span>}",
        "{order_id<span class=\"pt\">:uuid</span>}",
        "{color<span class=\"pt\">:enum</span>}",
        "{amount<span class=\"pt\">:float</span>}",
        "{on<span class=\"pt\">:bool</span>}",
        "{path<span class=\"pt\">:path</span>}",
        "{slug<span class=\"pt\">:path?</span>}",
    ] {
        assert!(html.contains(marked), "{marked}");
    }
    assert!(html.contains("<option>red</option><option>green</option>"));
    // Query parameters, with their defaults and docstring descriptions.
    assert!(html.contains("<span class=\"query\">?q&amp;limit&amp;active</span>"));
    assert!(html.contains("<code>limit</code></td><td data-label=\"In\">query</td><td data-label=\"Type\"><code>int</code></td><td data-label=\"Default\"><code>10</code></td><td data-label=\"Description\">How many to return.</td>"));
    assert!(html.contains("<code>active</code></td><td data-label=\"In\">query</td><td data-label=\"Type\"><code>bool</code></td><td data-label=\"Default\"><code>True</code>"));
    assert!(html.contains("<code>page</code> <span class=\"req\">required</span>"));
    assert!(
        html.contains("The page of order lines, counted from 1."),
        "Google-style Args:"
    );
    // Docstrings.
    assert!(html.contains("<span class=\"summary\">List users.</span>"));
    assert!(html.contains("<span class=\"summary\">A file by its path.</span>"));
    assert!(html.contains("Filtered by <code>q</code>"));
    // Statistics count handlers: 12, of which 4 static (GET /, GET and POST /users, GET /<odd>).
    assert!(html.contains("<dd id=\"stat-total\">12</dd>"));
    assert!(html.contains("<dd id=\"stat-static\">4</dd>"));
    assert!(html.contains("<dd id=\"stat-dynamic\">8</dd>"));
    for (method, count) in [("GET", 10), ("POST", 1), ("DELETE", 1)] {
        assert!(
            html.contains(&format!("data-method=\"{method}\" aria-pressed=\"false\"")),
            "{method} bar"
        );
        assert!(
            html.contains(&format!("<span class=\"n\">{count}</span>")),
            "{method} count"
        );
    }
    // Self-contained: nothing is loaded from elsewhere.
    assert!(!html.contains("<script src") && !html.contains("<link rel=\"stylesheet\""));
    assert!(!html.contains("https://"));
}

#[test]
fn docs_page_escapes_all_project_text() {
    let project = fixture();
    let server = Server::dev(&project);
    let html = docs_html(&server);
    assert!(html.contains("<title>Fixture &lt;API&gt; &amp; co · API reference</title>"));
    assert!(html.contains("Say &lt;b&gt;hello&lt;/b&gt; &amp; wave."));
    assert!(html.contains("&lt;script&gt;alert(\"doc\")&lt;/script&gt;"));
    assert!(html.contains("Text to &lt;search&gt; for."));
    assert!(html.contains("The user's &lt;number&gt;."));
    assert!(html.contains("/&lt;odd&gt;"));
    for raw in [
        "<API>",
        "<b>hello",
        "<script>alert",
        "<search>",
        "<odd>",
        "<number>",
    ] {
        assert!(!html.contains(raw), "unescaped {raw}");
    }
}

#[test]
fn openapi_document_describes_every_operation() {
    let project = fixture();
    let server = Server::dev(&project);
    let response = server.get("/openapi.json");
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let doc = json(response);
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(
        doc["info"],
        json!({"title": "Fixture <API> & co", "description": "Described in config.py", "version": "3.2.1"})
    );
    for (path, method) in OPERATIONS {
        let op = &doc["paths"][path][method.to_ascii_lowercase()];
        assert!(op.is_object(), "{method} {path}: {doc:#}");
        assert!(op["responses"]["200"].is_object(), "{method} {path}");
    }
    // Methods a file does not define are not operations, the automatic HEAD and OPTIONS neither.
    assert!(doc["paths"]["/users/{id}"]["post"].is_null());
    assert!(doc["paths"]["/users/{id}"]["head"].is_null());
    let ids: Vec<&str> = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .map(|op| op["operationId"].as_str().unwrap())
        .collect();
    let unique: std::collections::HashSet<&&str> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");

    let op = |path: &str, method: &str| doc["paths"][path][method].clone();
    let param = |path: &str, method: &str, name: &str| -> Value {
        op(path, method)["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("{path} has no parameters"))
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{path} has no parameter {name}"))
            .clone()
    };
    // Path parameter types.
    let id = param("/users/{id}", "get", "id");
    assert_eq!(
        (id["in"].clone(), id["required"].clone()),
        (json!("path"), json!(true))
    );
    assert_eq!(id["schema"], json!({"type": "integer"}));
    assert_eq!(id["description"], "The user's <number>.");
    assert_eq!(
        param("/prices/{amount}", "get", "amount")["schema"],
        json!({"type": "number"})
    );
    assert_eq!(
        param("/flags/{on}", "get", "on")["schema"],
        json!({"type": "boolean"})
    );
    assert_eq!(
        param("/orders/{order_id}", "get", "order_id")["schema"],
        json!({"type": "string", "format": "uuid"})
    );
    assert_eq!(
        param("/colors/{color}", "get", "color")["schema"],
        json!({"type": "string", "enum": ["red", "green"]})
    );
    let rest = param("/files/{path}", "get", "path");
    assert_eq!(rest["schema"], json!({"type": "string"}));
    assert_eq!(rest["x-filerouter-catch-all"], true);
    assert!(
        rest["description"]
            .as_str()
            .unwrap()
            .contains("separated by `/`")
    );
    // The optional catch-all also serves its bare path.
    assert!(op("/shop", "get")["parameters"].is_null());
    // Query parameters: type, default, required, docstring description (both styles).
    assert_eq!(
        param("/users", "get", "q"),
        json!({"name": "q", "in": "query", "required": false,
               "description": "Text to <search> for.", "schema": {"type": "string"}})
    );
    assert_eq!(
        param("/users", "get", "limit"),
        json!({"name": "limit", "in": "query", "required": false,
               "description": "How many to return.", "schema": {"type": "integer", "default": 10}})
    );
    assert_eq!(
        param("/users", "get", "active")["schema"],
        json!({"type": "boolean", "default": true})
    );
    let page = param("/orders/{order_id}", "get", "page");
    assert_eq!(page["required"], true);
    assert_eq!(
        page["description"],
        "The page of order lines, counted from 1."
    );
    // Summary and description from the docstring.
    assert_eq!(op("/users", "get")["summary"], "List users.");
    assert!(
        op("/users", "get")["description"]
            .as_str()
            .unwrap()
            .starts_with("Filtered by `q`")
    );
    assert!(op("/users/{id}", "delete")["summary"].is_null());
    // Tags by first segment.
    assert_eq!(op("/users/{id}", "get")["tags"], json!(["users"]));
    // The framework's own responses, FastAPI's 422 schema.
    let responses = op("/users/{id}", "get")["responses"].clone();
    assert_eq!(
        responses["422"]["$ref"],
        "#/components/responses/ValidationError"
    );
    assert_eq!(responses["404"]["$ref"], "#/components/responses/NotFound");
    assert!(op("/", "get")["responses"]["422"].is_null());
    assert_eq!(
        op("/users", "post")["requestBody"]["content"]["application/json"]["schema"],
        json!({})
    );
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["HTTPValidationError"]["properties"]["detail"]["items"]["$ref"],
        "#/components/schemas/ValidationError"
    );
    assert_eq!(
        schemas["ValidationError"]["required"],
        json!(["loc", "msg", "type"])
    );
}

#[test]
fn the_documented_errors_are_what_the_server_answers() {
    let project = fixture();
    let server = Server::dev(&project);
    let doc = json(server.get("/openapi.json"));
    // A 422 body matches the documented ValidationError fields.
    let body = json(server.get("/users/abc"));
    let required = doc["components"]["schemas"]["ValidationError"]["required"]
        .as_array()
        .unwrap();
    for field in required {
        let field = field.as_str().unwrap();
        assert!(
            !body["detail"][0][field].is_null(),
            "{field} missing in {body}"
        );
    }
    assert_eq!(
        json(server.get("/nothing/here")),
        json!({"detail": "Not Found"})
    );
    let response = server.request("PUT", "/users/1").send().unwrap();
    assert_eq!(response.status(), 405);
    assert!(response.headers().contains_key("allow"));
    assert!(doc["components"]["responses"]["MethodNotAllowed"]["headers"]["Allow"].is_object());
}

// ---------------------------------------------------------------------------------------------
// External tools: a Python venv with the validators, and node + Chromium for the browser test.

/// A copy of an example project, so that nothing is written into `examples/`.
fn example(name: &str) -> Project {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name == ".cache" || name == "__pycache__" {
                continue;
            }
            if path.is_dir() {
                walk(&path, base, out);
            } else {
                let rel = path
                    .strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .to_string();
                out.push((rel, std::fs::read_to_string(&path).unwrap_or_default()));
            }
        }
    }
    let base = workspace().join("examples").join(name);
    let mut files = Vec::new();
    walk(&base, &base, &mut files);
    let project = Project::new(&[]);
    for (rel, content) in files {
        // Written as they are: `Project::write` would dedent them.
        let path = project.path().join(&rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    project
}

#[test]
fn openapi_passes_the_validator_and_schemathesis() {
    const TEST: &str = "openapi_passes_the_validator_and_schemathesis";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    // The FastAPI port, with its packages installed (its routes import Jinja2, PyJWT and
    // python-dateutil).
    let bookshop = example("bookshop");
    let installed = run(Command::new(support::binary())
        .args(["packages", "install", "--project"])
        .arg(bookshop.path())
        .arg("--python")
        .arg(venv.join("bin/python")));
    assert!(installed.is_ok(), "{}", installed.unwrap_err());
    for project in [&fixture(), &example("hello"), &bookshop] {
        let server = Server::dev(project);
        let doc = server.get("/openapi.json").text().unwrap();
        let file = project.path().join("openapi.json");
        std::fs::write(&file, &doc).unwrap();
        let validated = run(Command::new(venv.join("bin/openapi-spec-validator")).arg(&file));
        assert!(validated.is_ok(), "{}\n{doc}", validated.unwrap_err());
    }

    // Property-based: schemathesis generates requests from the document (valid and invalid
    // ones) and checks every response against it, on the example project and the fixture.
    for project in [example("hello"), fixture()] {
        schemathesis(&venv, &project, &[]);
    }
    // The bookshop answers some schema-valid requests with an error on purpose (a wrong
    // password, an unreadable date, a duplicate title), as its FastAPI original does, which
    // fails schemathesis' `positive_data_acceptance` the same way: that check is left out.
    schemathesis(&venv, &bookshop, &["positive_data_acceptance"]);
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn schemathesis(venv: &Path, project: &Project, also_excluded: &[&str]) {
    let server = Server::dev(project);
    let mut excluded = vec![
        "ignored_auth",
        "use_after_free",
        "ensure_resource_availability",
    ];
    excluded.extend_from_slice(also_excluded);
    let attempt = || {
        run(Command::new(venv.join("bin/schemathesis"))
            .current_dir(project.path())
            .args(["run", &server.url("/openapi.json")])
            .args(["--checks", "all"])
            // No authentication exists to test, and no resources are created and then fetched.
            .args(["--exclude-checks", &excluded.join(",")])
            .args(["--phases", "examples,coverage,fuzzing"])
            .args(["--max-examples", "100", "--seed", "1", "--workers", "2"])
            .args([
                "--request-timeout",
                "30",
                "--no-color",
                "--suppress-health-check",
                "too_slow",
            ]))
    };
    let mut result = attempt();
    // CPython 3.11.7's `ast` sometimes raises "AST constructor recursion depth mismatch" inside
    // hypothesis while it describes a lambda for a repr (an interpreter bug, reported by the
    // tool as a runtime error of its own, not a finding about the server): run it once more.
    if result
        .as_ref()
        .is_err_and(|failure| failure.contains("AST constructor recursion depth mismatch"))
    {
        result = attempt();
    }
    if let Err(failure) = result {
        panic!(
            "schemathesis found problems:\n{failure}\nend of the server log:\n{}",
            tail(&server.log(), 60)
        );
    }
}

/// `node` and the Chromium the browser test drives, or what is missing.
fn browser_tools() -> Result<(PathBuf, PathBuf), String> {
    let chromium = std::env::var_os("FILEROUTER_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !chromium.exists() {
        return Err(format!("no Chromium at {}", chromium.display()));
    }
    run(Command::new("node").arg("--version")).map_err(|_| "no node".to_string())?;
    let dir = workspace().join("tests/browser");
    if !dir.join("node_modules/playwright-core").exists() {
        run(Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir))
        .map_err(|e| format!("npm ci in tests/browser failed (npm and the npm registry): {e}"))?;
    }
    Ok((chromium, dir))
}

#[test]
fn docs_page_works_in_a_real_browser() {
    const TEST: &str = "docs_page_works_in_a_real_browser";
    let (chromium, dir) = match browser_tools() {
        Ok(tools) => tools,
        Err(why) => {
            return missing(
                TEST,
                &why,
                "chromium, nodejs and npm (apt-get install chromium nodejs npm)",
            );
        }
    };
    let project = example("hello");
    let server = Server::dev(&project);
    let artifacts = workspace().join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let result = run(Command::new("node")
        .arg(dir.join("docs-page.mjs"))
        .arg(&server.base)
        .arg(&artifacts)
        .env("CHROMIUM", &chromium));
    match result {
        Ok(out) => eprintln!("{out}"),
        Err(failure) => panic!(
            "the browser test failed:\n{failure}\nend of the server log:\n{}",
            tail(&server.log(), 60)
        ),
    }
    assert!(artifacts.join("docs-page.png").exists());
}

#[test]
fn docs_py_replaces_the_page_with_the_route_context_and_reloads() {
    let project = Project::new(&[
        (
            "routes/users/[id]/route.py",
            "def GET(request, id: int):\n    \"\"\"One user.\"\"\"\n    return {}\n\ndef DELETE(request, id: int):\n    return None\n",
        ),
        ("routes/index.py", "def GET(request):\n    return {}\n"),
        ("config.py", "title = 'Shop API'\nversion = '3.0.0'\n"),
        (
            "docs.py",
            r#"
            def handler(request, context):
                stats = context.get_statistics()
                rows = "".join(
                    f"<li>{','.join(r['methods'])} {r['path']}</li>" for r in context.get_routes()
                )
                deletes = [r["path"] for r in context.get_routes_by_method("DELETE")]
                info = context.get_project_info()
                return (
                    f"<h1>{info['title']} {info['version']}</h1><ul>{rows}</ul>"
                    f"<p>{stats['total_routes']} total, {stats['dynamic_routes']} dynamic, "
                    f"{stats['static_routes']} static; DELETE on {deletes}</p>"
                )
            "#,
        ),
    ]);
    let server = Server::dev(&project);
    let page = server.get("/docs");
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert_eq!(
        page.text().unwrap(),
        "<h1>Shop API 3.0.0</h1><ul><li>GET /</li><li>GET,DELETE /users/{id}</li></ul>\
         <p>3 total, 2 dynamic, 1 static; DELETE on ['/users/{id}']</p>"
    );
    // /openapi.json is still the built-in document.
    assert_eq!(
        json(server.get("/openapi.json"))["info"]["title"],
        "Shop API"
    );
    // A dict answers JSON; edits apply without a restart; removing docs.py restores the page.
    project.write(
        "docs.py",
        "async def handler(request, context):\n    return {'routes': len(context.get_routes())}\n",
    );
    assert!(support::eventually(Duration::from_secs(10), || {
        server.get("/docs").text().unwrap() == r#"{"routes":2}"#
    }));
    project.remove("docs.py");
    assert!(support::eventually(Duration::from_secs(10), || {
        server.get("/docs").text().unwrap().contains("/users/{id}")
            && server
                .get("/docs")
                .text()
                .unwrap()
                .contains("<!doctype html")
    }));
}
