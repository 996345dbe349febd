//! The FastAPI port: `examples/bookshop-fastapi` (the real FastAPI 0.165 on uvicorn, from
//! `tests/.venv`) and its filerouter port `examples/bookshop` get the same requests, in the
//! same order, and must answer each with the same status and the same body (JSON compared as
//! values, HTML as text). The port's packages (Jinja2 with MarkupSafe, PyJWT, python-dateutil)
//! are installed from PyPI with `filerouter packages install`, and the comparison runs against
//! `filerouter dev` and again against `filerouter run` of a build.
//!
//! The port's models are the original's: `examples/bookshop/routes/_lib/models.py` holds, below
//! its imports, exactly the text of the pydantic models in `examples/bookshop-fastapi/app.py`.
//!
//! Needs Python and PyPI (see `support::tools`): skipped loudly without them, a failure in CI.

use crate::support;

use std::{
    net::TcpListener,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use support::{
    Project, Server, client, eventually, run_with_env,
    tools::{missing, python_venv, workspace},
};

/// FastAPI on uvicorn, killed when dropped.
struct Uvicorn {
    child: Child,
    base: String,
}

impl Uvicorn {
    fn start(venv: &Path, app_dir: &Path) -> Uvicorn {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new(venv.join("bin/python"))
            .args([
                "-m",
                "uvicorn",
                "app:app",
                "--host",
                "127.0.0.1",
                "--log-level",
                "warning",
            ])
            .args(["--port", &port.to_string()])
            .current_dir(app_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start uvicorn");
        let server = Uvicorn {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let http = client();
        assert!(
            eventually(Duration::from_secs(60), || http
                .get(format!("{}/", server.base))
                .send()
                .is_ok_and(|r| r.status().is_success())),
            "uvicorn did not start"
        );
        server
    }
}

impl Drop for Uvicorn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

enum Body {
    None,
    Json(&'static str),
    Raw(&'static str, &'static str),
    Form(&'static str),
    Multipart(Vec<(&'static str, Option<&'static str>, &'static [u8])>),
}

struct Case {
    method: &'static str,
    path: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Body,
}

fn case(method: &'static str, path: &'static str) -> Case {
    Case {
        method,
        path,
        headers: Vec::new(),
        body: Body::None,
    }
}

impl Case {
    fn json(mut self, body: &'static str) -> Case {
        self.body = Body::Json(body);
        self
    }
    fn raw(mut self, content_type: &'static str, body: &'static str) -> Case {
        self.body = Body::Raw(content_type, body);
        self
    }
    fn form(mut self, body: &'static str) -> Case {
        self.body = Body::Form(body);
        self
    }
    fn multipart(
        mut self,
        parts: Vec<(&'static str, Option<&'static str>, &'static [u8])>,
    ) -> Case {
        self.body = Body::Multipart(parts);
        self
    }
    fn header(mut self, name: &'static str, value: &str) -> Case {
        self.headers.push((name, value.to_string()));
        self
    }
    fn auth(self, token: &str) -> Case {
        self.header("authorization", &format!("Bearer {token}"))
    }
}

/// What is compared: the status, the `www-authenticate` header, and the body (JSON as a value).
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    www_authenticate: Option<String>,
    json: Option<serde_json::Value>,
    text: String,
}

const BOUNDARY: &str = "filerouter-port-test-boundary";

fn send(base: &str, case: &Case) -> Answer {
    let http = client();
    let method = reqwest::Method::from_bytes(case.method.as_bytes()).unwrap();
    let mut request = http.request(method, format!("{base}{}", case.path));
    for (name, value) in &case.headers {
        request = request.header(*name, value);
    }
    request = match &case.body {
        Body::None => request,
        Body::Json(body) => request
            .header("content-type", "application/json")
            .body(*body),
        Body::Raw(content_type, body) => request.header("content-type", *content_type).body(*body),
        Body::Form(body) => request
            .header("content-type", "application/x-www-form-urlencoded")
            .body(*body),
        Body::Multipart(parts) => {
            let mut body = Vec::new();
            for (name, filename, data) in parts {
                body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
                match filename {
                    Some(file) => body.extend_from_slice(
                        format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\nContent-Type: image/png\r\n\r\n").as_bytes(),
                    ),
                    None => body.extend_from_slice(
                        format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
                    ),
                }
                body.extend_from_slice(data);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
            request
                .header(
                    "content-type",
                    format!("multipart/form-data; boundary={BOUNDARY}"),
                )
                .body(body)
        }
    };
    let response = request
        .send()
        .unwrap_or_else(|e| panic!("{} {}: {e}", case.method, case.path));
    let status = response.status().as_u16();
    let www_authenticate = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap_or_default().to_string());
    let text = response.text().unwrap_or_default();
    let json = serde_json::from_str(&text).ok();
    Answer {
        status,
        www_authenticate,
        text: if json.is_some() { String::new() } else { text },
        json,
    }
}

/// The token PyJWT makes for alice with the shared secret (HS256, `{"sub": "alice"}`): both
/// apps must issue exactly this, which the comparison of `POST /token` checks.
fn token(base: &str) -> String {
    let answer = send(
        base,
        &case("POST", "/token").form("username=alice&password=wonderland"),
    );
    answer
        .json
        .as_ref()
        .and_then(|j| j["access_token"].as_str())
        .expect("a token")
        .to_string()
}

/// Every request, in order (later ones see what earlier ones created or deleted).
fn cases(token: &str) -> Vec<Case> {
    let png: &'static [u8] = b"\x89PNG\r\n\x1a\n fake image bytes";
    vec![
        case("GET", "/"),
        case("GET", "/books"),
        case("GET", "/books?limit=2&offset=1"),
        case("GET", "/books?limit=0"),
        case("GET", "/books?limit=51&offset=-1"),
        case("GET", "/books?q=a"),
        case("GET", "/books?q=sagan"),
        case("GET", "/books?genre=science"),
        case("GET", "/books?genre=poetry"),
        case("GET", "/books?tag=space&max_price=10"),
        case("GET", "/books?tag=space&tag=classic"),
        case("GET", "/books?max_price=-1&limit=x"),
        case("GET", "/books/2"),
        case("GET", "/books/0"),
        case("GET", "/books/abc"),
        case("GET", "/books/99"),
        case("POST", "/token").form("username=alice&password=wonderland"),
        case("POST", "/token").form("username=alice&password=nope"),
        case("POST", "/token").form("username=al&password=x"),
        case("POST", "/token").form(""),
        case("POST", "/token").json(r#"{"username": "alice"}"#),
        case("GET", "/me"),
        case("GET", "/me").header("authorization", "Bearer not.a.token"),
        case("GET", "/me").auth(token),
        case("POST", "/books").json(r#"{"title": "Emma", "author": "Jane Austen", "price": 8}"#),
        case("POST", "/books")
            .auth(token)
            .json(r#"{"title": "Emma", "author": "Jane Austen", "price": 8, "tags": ["classic"], "published": "1815-12-23"}"#),
        case("POST", "/books")
            .auth(token)
            .json(r#"{"title": "Emma", "author": "Jane Austen", "price": 8}"#),
        case("POST", "/books")
            .auth(token)
            .json(r#"{"title": "Lax", "author": "A. N. Other", "price": "7.50", "genre": "history", "tags": ["x", "y"], "published": "2020-02-29"}"#),
        case("POST", "/books")
            .auth(token)
            .json(r#"{"title": 5, "price": "cheap", "genre": "poetry", "tags": "x", "published": "2024-13-01"}"#),
        case("POST", "/books").auth(token).json(r#"{"title": "x", "#),
        case("POST", "/books").auth(token),
        case("POST", "/books").auth(token).json("[1, 2]"),
        case("POST", "/books")
            .auth(token)
            .raw("text/plain", r#"{"title": "Emma", "author": "Jane Austen", "price": 8}"#),
        case("GET", "/books"),
        case("GET", "/books/4"),
        case("PUT", "/books/4")
            .auth(token)
            .json(r#"{"title": "Emma (annotated)", "author": "Jane Austen", "price": 11.25, "genre": "fiction"}"#),
        case("PUT", "/books/99")
            .auth(token)
            .json(r#"{"title": "Ghost", "author": "Nobody", "price": 1}"#),
        case("PUT", "/books/4").auth(token).json(r#"{"author": "Jane Austen", "price": 0.5}"#),
        case("DELETE", "/books/5"),
        case("DELETE", "/books/5").auth(token),
        case("GET", "/books/5"),
        case("DELETE", "/books/5").auth(token),
        case("POST", "/books/1/reviews")
            .header("x-client", "port-test")
            .json(r#"{"rating": 5, "comment": "A classic."}"#),
        case("POST", "/books/1/reviews").json(r#"{"rating": "4"}"#),
        case("POST", "/books/1/reviews").json(r#"{"rating": 6}"#),
        case("POST", "/books/1/reviews").json(
            r#"{"comment": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#,
        ),
        case("POST", "/books/1/reviews").json("[5]"),
        case("POST", "/books/99/reviews").json(r#"{"rating": 1}"#),
        case("GET", "/books/1/age?on=2020-06-15"),
        case("GET", "/books/3/age?on=June%205th%202031"),
        case("GET", "/books/1/age?on=not%20a%20date"),
        case("GET", "/books/1/age"),
        case("GET", "/books/1/page"),
        case("GET", "/books/3/page").header("cookie", "theme=dark<script>"),
        case("GET", "/books/99/page"),
        case("POST", "/orders").auth(token).json(
            r#"{"order": {"lines": [{"book_id": 1, "quantity": 2}, {"book_id": 2}], "address": {"street": "1 Main St", "city": "Springfield", "postcode": "12345"}, "gift": true}, "coupon": "SAVE10"}"#,
        ),
        case("POST", "/orders")
            .auth(token)
            .json(r#"{"order": {"lines": [{"book_id": 1}], "address": {"street": "x", "city": "y", "postcode": "z"}}, "coupon": "save10"}"#),
        case("POST", "/orders")
            .auth(token)
            .json(r#"{"order": {"lines": [{"quantity": "two"}, 3], "address": {"city": 7}}}"#),
        case("POST", "/orders")
            .auth(token)
            .json(r#"{"lines": [{"book_id": 1}], "address": {"street": "x", "city": "y", "postcode": "z"}}"#),
        case("POST", "/orders")
            .auth(token)
            .json(r#"{"order": {"lines": [{"book_id": 1, "quantity": 0}], "address": {"street": "x", "city": "y", "postcode": "z"}}}"#),
        case("POST", "/orders")
            .auth(token)
            .json(r#"{"order": {"lines": [{"book_id": 42}], "address": {"street": "x", "city": "y", "postcode": "z"}}}"#),
        case("POST", "/books/1/cover").multipart(vec![
            ("caption", None, b"Front cover"),
            ("cover", Some("dune.png"), png),
        ]),
        case("POST", "/books/1/cover").multipart(vec![("caption", None, b"No file")]),
        case("POST", "/books/1/cover").multipart(vec![("cover", None, b"not a file")]),
        case("POST", "/books/1/cover").form("caption=x"),
        case("GET", "/nowhere"),
        case("PATCH", "/books/1"),
    ]
}

/// Send every case to both servers and describe each difference.
fn differences(fastapi: &str, port: &str, label: &str) -> Vec<String> {
    let token = token(fastapi);
    let mut out = Vec::new();
    for (n, case) in cases(&token).iter().enumerate() {
        let want = send(fastapi, case);
        let got = send(port, case);
        if want != got {
            out.push(format!(
                "#{n} {} {} ({label}):\n  FastAPI:    {want:?}\n  filerouter: {got:?}",
                case.method, case.path
            ));
        }
    }
    out
}

/// The text of `models.py` from its first class on: the port's models, without its docstring
/// and imports.
fn models_block(models: &str) -> &str {
    let start = models
        .find("\nclass ")
        .expect("examples/bookshop/routes/_lib/models.py defines a class");
    models[start..].trim()
}

#[test]
fn the_port_uses_the_same_pydantic_models_as_the_original() {
    let read = |path: &str| {
        std::fs::read_to_string(workspace().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let original = read("examples/bookshop-fastapi/app.py");
    let models = read("examples/bookshop/routes/_lib/models.py");
    let block = models_block(&models);
    assert!(
        block.contains("(BaseModel):"),
        "the port's models are not pydantic models:\n{block}"
    );
    assert!(
        original.contains(&format!("\n{block}\n")),
        "examples/bookshop/routes/_lib/models.py (below its imports) is not the text of the \
         models in examples/bookshop-fastapi/app.py:\n{block}"
    );
    // And the original defines no model outside that text.
    let classes = |text: &str| text.matches("\nclass ").count();
    assert_eq!(
        classes(&original),
        classes(&format!("\n{block}")),
        "examples/bookshop-fastapi/app.py defines classes the port's models.py does not"
    );
}

#[test]
fn the_port_answers_every_request_as_the_fastapi_original() {
    const TEST: &str = "the_port_answers_every_request_as_the_fastapi_original";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let original = workspace().join("examples/bookshop-fastapi");
    let project = Project::copy_of(&workspace().join("examples/bookshop"));
    let python = venv.join("bin/python");
    let (code, stdout, stderr) = run_with_env(
        &[
            "packages",
            "install",
            "--project",
            project.path().to_str().unwrap(),
            "--python",
            python.to_str().unwrap(),
        ],
        project.path(),
        &[],
    );
    assert_eq!(code, 0, "packages install failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("MarkupSafe"), "{stdout}");

    let mut problems = Vec::new();
    {
        let fastapi = Uvicorn::start(&venv, &original);
        let dev = Server::dev(&project);
        problems.extend(differences(&fastapi.base, &dev.base, "dev"));
    }
    let (code, stdout, stderr) = run_with_env(
        &["build", "--project", project.path().to_str().unwrap()],
        project.path(),
        &[],
    );
    assert_eq!(code, 0, "build failed:\n{stdout}\n{stderr}");
    // The FastAPI original starts again from its seed data; so does the port: what `dev`
    // stored (its kv lasts, in the project's data folder) is put aside first.
    std::fs::remove_dir_all(project.path().join(".data")).unwrap();
    {
        let fastapi = Uvicorn::start(&venv, &original);
        let run = Server::run(&project, &[]);
        problems.extend(differences(&fastapi.base, &run.base, "run"));
    }
    assert!(
        problems.is_empty(),
        "{} differences:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Where nothing forces a difference, filerouter answers as FastAPI on uvicorn does, compared
/// on the same requests: the trailing-slash redirect's `Location` is absolute (the request's
/// host; `https` when a proxy on the same machine says so), and `responses=` keeps keys beyond
/// OpenAPI's, which FastAPI copies into the document as they are.
#[test]
fn fastapis_answers_where_nothing_forces_a_difference() {
    const TEST: &str = "fastapis_answers_where_nothing_forces_a_difference";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let original = tempfile::tempdir().unwrap();
    std::fs::write(
        original.path().join("app.py"),
        "from fastapi import FastAPI\n\n\
         app = FastAPI()\n\n\
         @app.get('/')\ndef index():\n    return {}\n\n\
         @app.get('/users')\ndef users():\n    return []\n\n\
         @app.get('/items', responses={404: {'description': 'Not here', 'mensaje': 'no existe', 'x-codes': [1, 2]}})\n\
         def items():\n    return []\n",
    )
    .unwrap();
    let project = Project::new(&[
        ("routes/index.py", "def GET(request):\n    return {}\n"),
        (
            "routes/users/route.py",
            "def GET(request):\n    return []\n",
        ),
        (
            "routes/items/route.py",
            "from filerouter import route\n\n\
             @route(responses={404: {'description': 'Not here', 'mensaje': 'no existe', 'x-codes': [1, 2]}})\n\
             def GET(request):\n    return []\n",
        ),
    ]);
    let fastapi = Uvicorn::start(&venv, original.path());
    let server = Server::dev(&project);
    let http = client();
    let redirect = |base: &str, headers: &[(&str, &str)]| {
        let mut request = http.get(format!("{base}/users/?page=2"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().unwrap();
        let location = response.headers()["location"].to_str().unwrap().to_string();
        (response.status().as_u16(), location.replace(base, "BASE"))
    };
    for headers in [
        &[][..],
        &[("host", "api.example.test")][..],
        &[("host", "api.example.test"), ("x-forwarded-proto", "https")][..],
    ] {
        let theirs = redirect(&fastapi.base, headers);
        let ours = redirect(&server.url(""), headers);
        assert_eq!(ours, theirs, "{headers:?}");
    }
    let responses = |base: &str| {
        let document: serde_json::Value = http
            .get(format!("{base}/openapi.json"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        document["paths"]["/items"]["get"]["responses"]["404"].clone()
    };
    let theirs = responses(&fastapi.base);
    assert_eq!(theirs["mensaje"], "no existe", "{theirs}");
    assert_eq!(responses(&server.url("")), theirs);
}
