//! Every routing rule of SPEC.md and DECISIONS.md, through the real binary over HTTP.

use crate::support;

use serde_json::json;
use support::{Project, Server, json};

/// Each route file answers with its own name and the parameters it received.
fn echo(name: &str, params: &str) -> String {
    format!(
        "def GET(request{sig}):\n    return {{'route': '{name}', 'params': {{{body}}}}}\n",
        sig = if params.is_empty() {
            String::new()
        } else {
            format!(", {params}")
        },
        body = params
            .split(", ")
            .filter(|p| !p.is_empty())
            .map(|p| {
                let n = p.split(':').next().unwrap().trim();
                format!("'{n}': {n}")
            })
            .collect::<Vec<_>>()
            .join(", "),
    )
}

fn routing_project() -> Project {
    let files: Vec<(String, String)> = vec![
        ("routes/index.py".into(), echo("root", "")),
        ("routes/users/route.py".into(), echo("users", "")),
        ("routes/users/me/route.py".into(), echo("me", "")),
        ("routes/users/[id]/route.py".into(), echo("user", "id: int")),
        (
            "routes/users/[id]/posts/[post_id]/route.py".into(),
            echo("post", "id: int, post_id: str"),
        ),
        (
            "routes/docs-site/[...path]/route.py".into(),
            echo("docs", "path: list"),
        ),
        (
            "routes/shop/[[...slug]]/route.py".into(),
            echo("shop", "slug: list"),
        ),
        (
            "routes/(admin)/settings/route.py".into(),
            echo("settings", ""),
        ),
        (
            "routes/(marketing)/(deep)/about/route.py".into(),
            echo("about", ""),
        ),
        ("routes/api/index.py".into(), echo("api", "")),
        ("routes/v1/status/route.py".into(), echo("v1", "")),
        ("routes/v2/status/route.py".into(), echo("v2", "")),
        ("routes/v1.2/route.py".into(), echo("dotted", "")),
        ("routes/_lib/route.py".into(), echo("private", "")),
        ("routes/.hidden/route.py".into(), echo("hidden", "")),
        ("routes/files/[name]/route.py".into(), echo("file", "name")),
        (
            "routes/mixed/[a]/static/[b]/route.py".into(),
            echo("mixed", "a, b"),
        ),
        ("routes/cat/[id]/route.py".into(), echo("cat-one", "id")),
        (
            "routes/cat/[...rest]/route.py".into(),
            echo("cat-rest", "rest: list"),
        ),
        (
            "routes/cat/[[...all]]/route.py".into(),
            echo("cat-all", "all: list"),
        ),
    ];
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    Project::new(&refs)
}

fn route_of(server: &Server, path: &str) -> (u16, serde_json::Value) {
    let response = server.get(path);
    let status = response.status().as_u16();
    let text = response.text().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(json!(text)))
}

#[test]
fn files_and_folders_map_to_paths() {
    let project = routing_project();
    let server = Server::dev(&project);
    let cases = [
        ("/", "root"),
        ("/users", "users"),
        ("/users/me", "me"),
        ("/users/7", "user"),
        ("/users/7/posts/abc", "post"),
        ("/settings", "settings"),
        ("/about", "about"),
        ("/api", "api"),
        ("/v1/status", "v1"),
        ("/v2/status", "v2"),
        ("/v1.2", "dotted"),
        ("/mixed/x/static/y", "mixed"),
    ];
    for (path, expected) in cases {
        let (status, body) = route_of(&server, path);
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["route"], expected, "{path}: {body}");
    }
    // Group folders add no segment; private folders are not routes.
    for path in [
        "/(admin)/settings",
        "/admin/settings",
        "/_lib",
        "/.hidden",
        "/route",
        "/index",
    ] {
        assert_eq!(server.get(path).status(), 404, "{path}");
    }
}

#[test]
fn dynamic_parameters_are_converted_and_passed_in_url_order() {
    let project = routing_project();
    let server = Server::dev(&project);
    let (_, body) = route_of(&server, "/users/42/posts/hello");
    assert_eq!(body["params"], json!({"id": 42, "post_id": "hello"}));
    let (_, body) = route_of(&server, "/mixed/1/static/2");
    assert_eq!(body["params"], json!({"a": "1", "b": "2"}));
}

#[test]
fn precedence_static_then_param_then_catch_alls() {
    let project = routing_project();
    let server = Server::dev(&project);
    assert_eq!(route_of(&server, "/users/me").1["route"], "me");
    assert_eq!(route_of(&server, "/users/12").1["route"], "user");
    assert_eq!(route_of(&server, "/cat/1").1["route"], "cat-one");
    let (_, body) = route_of(&server, "/cat/1/2/3");
    assert_eq!(body["route"], "cat-rest");
    assert_eq!(body["params"]["rest"], json!(["1", "2", "3"]));
    let (_, body) = route_of(&server, "/cat");
    assert_eq!(body["route"], "cat-all");
    assert_eq!(body["params"]["all"], json!([]));
}

#[test]
fn catch_all_needs_a_segment_and_optional_catch_all_does_not() {
    let project = routing_project();
    let server = Server::dev(&project);
    assert_eq!(server.get("/docs-site").status(), 404);
    let (status, body) = route_of(&server, "/docs-site/guide/intro/setup.md");
    assert_eq!(status, 200);
    assert_eq!(
        body["params"]["path"],
        json!(["guide", "intro", "setup.md"])
    );
    let (_, body) = route_of(&server, "/shop");
    assert_eq!(body["params"]["slug"], json!([]));
    let (_, body) = route_of(&server, "/shop/a/b");
    assert_eq!(body["params"]["slug"], json!(["a", "b"]));
}

#[test]
fn conversion_failure_is_a_fastapi_422() {
    let project = routing_project();
    let server = Server::dev(&project);
    let response = server.get("/users/abc");
    assert_eq!(response.status(), 422);
    assert_eq!(
        json(response),
        json!({"detail": [{"type": "int_parsing", "loc": ["path", "id"],
            "msg": "Input should be a valid integer, unable to parse string as an integer",
            "input": "abc"}]})
    );
}

#[test]
fn every_type_hint_converts_or_fails_with_its_error_type() {
    let project = Project::new(&[
        (
            "routes/f/[v]/route.py",
            "def GET(request, v: float):\n    return {'v': v}\n",
        ),
        (
            "routes/b/[v]/route.py",
            "def GET(request, v: bool):\n    return {'v': v}\n",
        ),
        (
            "routes/s/[v]/route.py",
            "def GET(request, v: str):\n    return {'v': v}\n",
        ),
        (
            "routes/n/[v]/route.py",
            "def GET(request, v):\n    return {'v': v, 't': type(v).__name__}\n",
        ),
        (
            "routes/u/[v]/route.py",
            "import uuid\ndef GET(request, v: uuid.UUID):\n    return {'v': str(v), 't': type(v).__name__}\n",
        ),
        (
            "routes/e/[v]/route.py",
            "import enum\nclass Color(enum.Enum):\n    red = 'red'\n    green = 'green'\n\
             def GET(request, v: Color):\n    return {'v': v.value, 't': type(v).__name__}\n",
        ),
    ]);
    let server = Server::dev(&project);
    assert_eq!(json(server.get("/f/2.5")), json!({"v": 2.5}));
    assert_eq!(json(server.get("/b/true")), json!({"v": true}));
    assert_eq!(json(server.get("/b/0")), json!({"v": false}));
    assert_eq!(json(server.get("/s/42")), json!({"v": "42"}));
    assert_eq!(json(server.get("/n/42")), json!({"v": "42", "t": "str"}));
    let id = "12345678-1234-5678-1234-567812345678";
    assert_eq!(
        json(server.get(&format!("/u/{id}"))),
        json!({"v": id, "t": "UUID"})
    );
    assert_eq!(
        json(server.get("/e/green")),
        json!({"v": "green", "t": "Color"})
    );
    for (path, kind) in [
        ("/f/x", "float_parsing"),
        ("/b/maybe", "bool_parsing"),
        ("/u/not-a-uuid", "uuid_parsing"),
        ("/e/blue", "enum"),
    ] {
        let response = server.get(path);
        assert_eq!(response.status(), 422, "{path}");
        let body = json(response);
        let error = &body["detail"][0];
        assert_eq!(error["type"], kind, "{path}: {body}");
        assert_eq!(error["loc"], json!(["path", "v"]));
        assert!(!error["msg"].as_str().unwrap().is_empty());
    }
    let body = json(server.get("/e/blue"));
    assert_eq!(body["detail"][0]["msg"], "Input should be 'red' or 'green'");
}

#[test]
fn unknown_path_is_404_json() {
    let project = routing_project();
    let server = Server::dev(&project);
    let response = server.get("/nope/nothing");
    assert_eq!(response.status(), 404);
    assert_eq!(json(response), json!({"detail": "Not Found"}));
}

#[test]
fn missing_method_is_405_with_allow() {
    let project = Project::new(&[(
        "routes/items/route.py",
        "def GET(request):\n    return []\n\ndef POST(request):\n    return {}, 201\n",
    )]);
    let server = Server::dev(&project);
    let response = server.request("DELETE", "/items").send().unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "GET, HEAD, POST, OPTIONS");
    assert_eq!(json(response), json!({"detail": "Method Not Allowed"}));
}

#[test]
fn head_and_options_are_automatic() {
    let project = Project::new(&[
        (
            "routes/items/route.py",
            "def GET(request):\n    return {'hello': 'world'}\n",
        ),
        (
            "routes/custom/route.py",
            "from filerouter import Response\n\
             def GET(request):\n    return {}\n\
             def OPTIONS(request):\n    return Response(status_code=200, headers={'x-custom': 'yes'})\n",
        ),
    ]);
    let server = Server::dev(&project);
    let get = server.get("/items");
    let get_length = get.headers()["content-length"].clone();
    let head = server.request("HEAD", "/items").send().unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], get_length);
    assert_eq!(head.headers()["content-type"], "application/json");
    assert!(head.bytes().unwrap().is_empty());
    let options = server.request("OPTIONS", "/items").send().unwrap();
    assert_eq!(options.status(), 204);
    assert_eq!(options.headers()["allow"], "GET, HEAD, OPTIONS");
    let custom = server.request("OPTIONS", "/custom").send().unwrap();
    assert_eq!(custom.status(), 200);
    assert_eq!(custom.headers()["x-custom"], "yes");
}

#[test]
fn trailing_slash_redirects_with_307_when_the_route_exists() {
    let project = routing_project();
    let server = Server::dev(&project);
    let response = server.get("/users/?page=2");
    assert_eq!(response.status(), 307);
    // Absolute, as Starlette's: the request's own host (uvicorn gives
    // `http://127.0.0.1:PORT/users?page=2` for the same request; tests/port.rs compares them).
    assert_eq!(
        response.headers()["location"],
        format!("{}/users?page=2", server.url("")).as_str()
    );
    let named = server
        .request("GET", "/users/")
        .header("host", "api.example.test")
        .send()
        .unwrap();
    assert_eq!(named.headers()["location"], "http://api.example.test/users");
    // A proxy on the same machine says the client spoke HTTPS (uvicorn's default trust).
    let proxied = server
        .request("GET", "/users/")
        .header("host", "api.example.test")
        .header("x-forwarded-proto", "https")
        .send()
        .unwrap();
    assert_eq!(
        proxied.headers()["location"],
        "https://api.example.test/users"
    );
    assert_eq!(server.get("/nothing/").status(), 404);
    assert_eq!(server.get("/users//7").status(), 404);
    assert_eq!(server.get("//users").status(), 404);
}

/// Routes declared with `TRAILING_SLASH = True` (issue 25): the path with the slash is the
/// canonical one, served, documented and kept by `build`; the one without redirects to it.
#[test]
fn trailing_slash_routes_redirect_to_the_path_with_the_slash() {
    let project = Project::new(&[
        (
            "routes/products/route.py",
            "TRAILING_SLASH = True\n\ndef GET(request):\n    return ['a', 'b']\n\ndef POST(request):\n    return {'made': True}, 201\n",
        ),
        (
            "routes/products/[id]/route.py",
            "TRAILING_SLASH = True\n\ndef GET(request, id: int):\n    return {'id': id}\n",
        ),
        (
            "routes/shop/[[...slug]]/route.py",
            "TRAILING_SLASH = True\n\ndef GET(request, slug: list):\n    return {'slug': slug}\n",
        ),
        ("routes/users/route.py", &echo("users", "")),
        (
            "routes/index.py",
            "TRAILING_SLASH = True\n\ndef GET(request):\n    return {'root': True}\n",
        ),
        (
            "routes/wrong/route.py",
            "import json\n\nTRAILING_SLASH = 'yes'\n\ndef GET(request):\n    return {}\n",
        ),
    ]);
    let check = |server: &Server| {
        let base = server.url("");
        let redirect = |path: &str, method: &str| {
            let response = server.request(method, path).send().unwrap();
            assert_eq!(response.status(), 307, "{method} {path}");
            let location = response.headers()["location"].to_str().unwrap().to_string();
            location
                .strip_prefix(&base)
                .unwrap_or_else(|| panic!("{location} is not under {base}"))
                .to_string()
        };
        assert_eq!(redirect("/products", "GET"), "/products/");
        assert_eq!(redirect("/products?page=2", "GET"), "/products/?page=2");
        assert_eq!(redirect("/products", "POST"), "/products/");
        assert_eq!(redirect("/products/7", "GET"), "/products/7/");
        assert_eq!(redirect("/shop", "GET"), "/shop/");
        assert_eq!(redirect("/shop/a/b", "GET"), "/shop/a/b/");
        assert_eq!(json(server.get("/products/")), json!(["a", "b"]));
        let posted = server.request("POST", "/products/").send().unwrap();
        assert_eq!(posted.status(), 201);
        assert_eq!(json(server.get("/products/7/")), json!({"id": 7}));
        assert_eq!(json(server.get("/shop/")), json!({"slug": []}));
        assert_eq!(json(server.get("/shop/a/b/")), json!({"slug": ["a", "b"]}));
        assert_eq!(json(server.get("/")), json!({"root": true}));
        // Routes without it keep FastAPI's default: the slash goes.
        assert_eq!(redirect("/users/", "GET"), "/users");
        assert_eq!(server.get("/products//").status(), 404);
        // /docs and /openapi.json show the canonical paths.
        let doc = json(server.get("/openapi.json"));
        let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
        for path in [
            "/products/",
            "/products/{id}/",
            "/shop/",
            "/shop/{slug}/",
            "/users",
        ] {
            assert!(paths.iter().any(|p| *p == path), "{path} in {paths:?}");
        }
        for path in ["/products", "/products/{id}", "/shop", "/shop/{slug}"] {
            assert!(!paths.iter().any(|p| *p == path), "{path} in {paths:?}");
        }
        let page = server.get("/docs").text().unwrap();
        assert!(page.contains("data-path=\"/products/{id}/\""), "{page}");
    };
    let server = Server::dev(&project);
    check(&server);
    // Anything but True or False is a mistake, shown at its line.
    let wrong = server.get("/wrong");
    assert_eq!(wrong.status(), 500);
    let error = json(wrong);
    assert_eq!(error["error"]["file"], "routes/wrong/route.py", "{error}");
    assert_eq!(error["error"]["line"], 3, "{error}");
    assert!(
        error["detail"]
            .as_str()
            .unwrap()
            .contains("TRAILING_SLASH must be True or False"),
        "{error}"
    );
    drop(server);

    // `build` keeps the declaration: `run` redirects the same way.
    project.remove("routes/wrong/route.py");
    let (code, stdout, stderr) = support::run(&["build", "--project", "."], project.path());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let server = Server::run(&project, &[]);
    check(&server);
}

#[test]
fn path_segments_are_percent_decoded_once() {
    let project = routing_project();
    let server = Server::dev(&project);
    let (_, body) = route_of(&server, "/files/a%2Fb%20c%2541");
    assert_eq!(body["params"]["name"], "a/b c%41");
    let (_, body) = route_of(&server, "/docs-site/x%2Fy/z");
    assert_eq!(body["params"]["path"], json!(["x/y", "z"]));
}

#[test]
fn conflicting_files_are_a_scan_error_naming_both() {
    let project = Project::new(&[
        ("routes/index.py", "def GET(request):\n    return {}\n"),
        ("routes/a/index.py", "def GET(request):\n    return {}\n"),
        ("routes/a/route.py", "def GET(request):\n    return {}\n"),
    ]);
    let server = Server::dev(&project);
    let response = server.get("/");
    assert_eq!(response.status(), 500);
    let text = response.text().unwrap();
    assert!(
        text.contains("routes/a/index.py") && text.contains("routes/a/route.py"),
        "{text}"
    );
}

#[test]
fn group_folders_resolving_to_one_url_conflict() {
    let project = Project::new(&[
        (
            "routes/(a)/x/route.py",
            "def GET(request):\n    return {}\n",
        ),
        (
            "routes/(b)/x/route.py",
            "def GET(request):\n    return {}\n",
        ),
    ]);
    let server = Server::dev(&project);
    let text = server.get("/x").text().unwrap();
    assert!(
        text.contains("routes/(a)/x/route.py") && text.contains("routes/(b)/x/route.py"),
        "{text}"
    );
}

#[test]
fn sibling_dynamic_folders_with_different_names_conflict() {
    let project = Project::new(&[
        (
            "routes/p/[id]/route.py",
            "def GET(request, id):\n    return {}\n",
        ),
        (
            "routes/p/[slug]/route.py",
            "def GET(request, slug):\n    return {}\n",
        ),
    ]);
    let server = Server::dev(&project);
    let response = server.get("/p/1");
    assert_eq!(response.status(), 500);
    let text = response.text().unwrap();
    assert!(text.contains("[id]") && text.contains("[slug]"), "{text}");
}

#[test]
fn methods_come_from_the_file_not_its_name() {
    let project = Project::new(&[(
        "routes/things/route.py",
        "def PUT(request):\n    return {'m': 'put'}\n\ndef helper():\n    pass\n\nGET = None\n",
    )]);
    let server = Server::dev(&project);
    assert_eq!(
        json(server.request("PUT", "/things").send().unwrap()),
        json!({"m": "put"})
    );
    let response = server.get("/things");
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "PUT, OPTIONS");
}
