//! Security dependencies (`filerouter.security`, FastAPI's names) through the real binary: a
//! project using every scheme answers missing or malformed credentials with FastAPI's 401
//! bodies and `WWW-Authenticate` challenges, returns the credentials otherwise, and declares
//! `components.securitySchemes` and each operation's `security` in `/openapi.json` (through
//! sub-dependencies and `Security(..., scopes=...)` too), in `dev` and from a build in `run`.
//!
//! The expected answers are what FastAPI 0.165 answers to the same requests; the last test
//! checks that against the real FastAPI on uvicorn (from `tests/.venv`, see `support::tools`),
//! running the original app below beside the port: skipped loudly without Python and PyPI, a
//! failure in CI.

use crate::support;

use std::{
    net::TcpListener,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};
use support::{
    Project, Server, client, eventually, json, run_with_env,
    tools::{missing, python_venv, run_tool},
};

/// The FastAPI original: one route per scheme, `Security` scopes, a sub-dependency, and the
/// password flow's token URL.
const FASTAPI_APP: &str = r#"
from typing import Annotated, Optional

from fastapi import Depends, FastAPI, HTTPException, Security
from fastapi.security import (APIKeyCookie, APIKeyHeader, APIKeyQuery, HTTPAuthorizationCredentials,
    HTTPBasic, HTTPBasicCredentials, HTTPBearer, OAuth2PasswordBearer, OAuth2PasswordRequestForm,
    SecurityScopes)

app = FastAPI()
oauth2 = OAuth2PasswordBearer(tokenUrl="token", scopes={"items:read": "Read items"})
bearer = HTTPBearer(bearerFormat="JWT")
maybe = HTTPBearer(auto_error=False, scheme_name="MaybeBearer")
basic = HTTPBasic()
realm = HTTPBasic(realm="shop", scheme_name="RealmBasic", description="Basic with a realm")
key_header = APIKeyHeader(name="X-API-Key")
key_cookie = APIKeyCookie(name="session")
key_query = APIKeyQuery(name="api_key")


def current_user(token: Annotated[str, Depends(oauth2)]) -> str:
    return token


def scoped(scopes: SecurityScopes, token: Annotated[str, Depends(oauth2)]) -> dict:
    return {"needed": scopes.scopes, "scope_str": scopes.scope_str, "token": token}


@app.get("/")
def index():
    return {}


@app.post("/token")
def token(form: Annotated[OAuth2PasswordRequestForm, Depends()]):
    if form.password != "secret":
        raise HTTPException(400, "Incorrect username or password")
    return {"access_token": "tok-" + form.username, "token_type": "bearer", "scopes": form.scopes,
            "grant_type": form.grant_type, "client_id": form.client_id}


@app.get("/oauth")
def oauth(token: str = Depends(oauth2)):
    return {"token": token}


@app.get("/me")
def me(user: Annotated[str, Depends(current_user)]):
    return {"user": user}


@app.get("/items")
def items(user=Security(scoped, scopes=["items:read"])):
    return user


@app.get("/bearer")
def bearer_route(creds: HTTPAuthorizationCredentials = Depends(bearer)):
    return creds


@app.get("/optional")
def optional(creds: Optional[HTTPAuthorizationCredentials] = Depends(maybe)):
    return {"creds": creds}


@app.get("/basic")
def basic_route(creds: HTTPBasicCredentials = Depends(basic)):
    return creds


@app.get("/realm")
def realm_route(creds: HTTPBasicCredentials = Depends(realm)):
    return creds


@app.get("/header")
def header(key: str = Depends(key_header)):
    return {"key": key}


@app.get("/cookie")
def cookie(key: str = Depends(key_cookie)):
    return {"key": key}


@app.get("/query")
def query(key: str = Depends(key_query)):
    return {"key": key}


@app.get("/two")
def two(a: str = Depends(key_header), b: str = Depends(current_user), c: str = Depends(oauth2)):
    return {"a": a, "b": b}
"#;

/// The port: the same schemes in `routes/_lib/auth.py`, imported from `filerouter` (and
/// `filerouter.security`), one route file per path.
fn port() -> Project {
    let key_route = |name: &str| {
        format!(
            "from filerouter import Depends\nfrom _lib.auth import key_{name}\n\n\
             def GET(request, key: str = Depends(key_{name})):\n    return {{\"key\": key}}\n"
        )
    };
    let (header, cookie, query) = (key_route("header"), key_route("cookie"), key_route("query"));
    Project::new(&[
        (
            "routes/_lib/auth.py",
            r#"
            from typing import Annotated

            from filerouter import (APIKeyCookie, APIKeyHeader, Depends, HTTPBasic, HTTPBearer,
                OAuth2PasswordBearer, SecurityScopes)
            from filerouter.security import APIKeyQuery

            oauth2 = OAuth2PasswordBearer(tokenUrl="token", scopes={"items:read": "Read items"})
            bearer = HTTPBearer(bearerFormat="JWT")
            maybe = HTTPBearer(auto_error=False, scheme_name="MaybeBearer")
            basic = HTTPBasic()
            realm = HTTPBasic(realm="shop", scheme_name="RealmBasic", description="Basic with a realm")
            key_header = APIKeyHeader(name="X-API-Key")
            key_cookie = APIKeyCookie(name="session")
            key_query = APIKeyQuery(name="api_key")


            def current_user(token: Annotated[str, Depends(oauth2)]) -> str:
                return token


            def scoped(scopes: SecurityScopes, token: Annotated[str, Depends(oauth2)]) -> dict:
                return {"needed": scopes.scopes, "scope_str": scopes.scope_str, "token": token}
            "#,
        ),
        ("routes/index.py", "def GET(request):\n    return {}\n"),
        (
            "routes/token/route.py",
            r#"
            from typing import Annotated

            from filerouter import Depends, HTTPException, OAuth2PasswordRequestForm


            def POST(request, form: Annotated[OAuth2PasswordRequestForm, Depends()]):
                if form.password != "secret":
                    raise HTTPException(400, "Incorrect username or password")
                return {"access_token": "tok-" + form.username, "token_type": "bearer", "scopes": form.scopes,
                        "grant_type": form.grant_type, "client_id": form.client_id}
            "#,
        ),
        (
            "routes/oauth/route.py",
            r#"
            from filerouter import Depends
            from _lib.auth import oauth2

            def GET(request, token: str = Depends(oauth2)):
                return {"token": token}
            "#,
        ),
        (
            "routes/me/route.py",
            r#"
            from typing import Annotated
            from filerouter import Depends
            from _lib.auth import current_user

            def GET(request, user: Annotated[str, Depends(current_user)]):
                return {"user": user}
            "#,
        ),
        (
            "routes/items/route.py",
            r#"
            from filerouter import Security
            from _lib.auth import scoped

            def GET(request, user=Security(scoped, scopes=["items:read"])):
                return user
            "#,
        ),
        (
            "routes/bearer/route.py",
            r#"
            from filerouter import Depends, HTTPAuthorizationCredentials
            from _lib.auth import bearer

            def GET(request, creds: HTTPAuthorizationCredentials = Depends(bearer)):
                return creds
            "#,
        ),
        (
            "routes/optional/route.py",
            r#"
            from typing import Optional
            from filerouter import Depends
            from filerouter.security import HTTPAuthorizationCredentials
            from _lib.auth import maybe

            def GET(request, creds: Optional[HTTPAuthorizationCredentials] = Depends(maybe)):
                return {"creds": creds}
            "#,
        ),
        (
            "routes/basic/route.py",
            r#"
            from filerouter import Depends, HTTPBasicCredentials
            from _lib.auth import basic

            def GET(request, creds: HTTPBasicCredentials = Depends(basic)):
                return creds
            "#,
        ),
        (
            "routes/realm/route.py",
            r#"
            from filerouter import Depends, HTTPBasicCredentials
            from _lib.auth import realm

            def GET(request, creds: HTTPBasicCredentials = Depends(realm)):
                return creds
            "#,
        ),
        ("routes/header/route.py", &header),
        ("routes/cookie/route.py", &cookie),
        ("routes/query/route.py", &query),
        (
            "routes/two/route.py",
            r#"
            from filerouter import Depends
            from _lib.auth import current_user, key_header, oauth2

            def GET(request, a: str = Depends(key_header), b: str = Depends(current_user), c: str = Depends(oauth2)):
                return {"a": a, "b": b}
            "#,
        ),
    ])
}

/// One request: method, path, headers, a URL-encoded form body.
struct Case {
    method: &'static str,
    path: &'static str,
    headers: Vec<(&'static str, String)>,
    form: Option<&'static str>,
}

fn get(path: &'static str) -> Case {
    Case {
        method: "GET",
        path,
        headers: Vec::new(),
        form: None,
    }
}

impl Case {
    fn header(mut self, name: &'static str, value: &str) -> Case {
        self.headers.push((name, value.to_string()));
        self
    }

    fn form(mut self, body: &'static str) -> Case {
        self.method = "POST";
        self.form = Some(body);
        self
    }
}

/// Status, JSON body and `WWW-Authenticate` of an answer.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    body: Value,
    challenge: Option<String>,
}

fn send(base: &str, case: &Case) -> Answer {
    let mut request =
        client().request(case.method.parse().unwrap(), format!("{base}{}", case.path));
    for (name, value) in &case.headers {
        request = request.header(*name, value);
    }
    if let Some(form) = case.form {
        request = request
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form);
    }
    let response = request.send().expect("send");
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    let text = response.text().unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Answer {
        status,
        body,
        challenge,
    }
}

const NOT_AUTHENTICATED: &str = r#"{"detail":"Not authenticated"}"#;

/// Every case with FastAPI 0.165's answer: (case, status, body, `WWW-Authenticate`).
fn cases() -> Vec<(Case, u16, &'static str, Option<&'static str>)> {
    vec![
        // OAuth2PasswordBearer: the token after `Bearer` (any case), else 401 `Bearer`.
        (get("/oauth"), 401, NOT_AUTHENTICATED, Some("Bearer")),
        (
            get("/oauth").header("authorization", "Basic abc"),
            401,
            NOT_AUTHENTICATED,
            Some("Bearer"),
        ),
        (
            get("/oauth").header("authorization", "Bearer"),
            200,
            r#"{"token":""}"#,
            None,
        ),
        (
            get("/oauth").header("authorization", "bearer  abc def "),
            200,
            r#"{"token":"abc def"}"#,
            None,
        ),
        // A sub-dependency, and SecurityScopes from `Security(..., scopes=...)` above it.
        (
            get("/me").header("authorization", "Bearer x"),
            200,
            r#"{"user":"x"}"#,
            None,
        ),
        (get("/me"), 401, NOT_AUTHENTICATED, Some("Bearer")),
        (
            get("/items").header("authorization", "Bearer x"),
            200,
            r#"{"needed":["items:read"],"scope_str":"items:read","token":"x"}"#,
            None,
        ),
        // HTTPBearer: scheme and credentials, both required, scheme `bearer` in any case.
        (get("/bearer"), 401, NOT_AUTHENTICATED, Some("Bearer")),
        (
            get("/bearer").header("authorization", "Bearer"),
            401,
            NOT_AUTHENTICATED,
            Some("Bearer"),
        ),
        (
            get("/bearer").header("authorization", "Basic abc"),
            401,
            NOT_AUTHENTICATED,
            Some("Bearer"),
        ),
        (
            get("/bearer").header("authorization", "bEarer  abc def "),
            200,
            r#"{"scheme":"bEarer","credentials":"abc def"}"#,
            None,
        ),
        // auto_error=False: None instead of the 401.
        (get("/optional"), 200, r#"{"creds":null}"#, None),
        (
            get("/optional").header("authorization", "Basic x"),
            200,
            r#"{"creds":null}"#,
            None,
        ),
        (
            get("/optional").header("authorization", "Bearer x"),
            200,
            r#"{"creds":{"scheme":"Bearer","credentials":"x"}}"#,
            None,
        ),
        // HTTPBasic: base64 of user:password (ASCII), the password may hold colons.
        (get("/basic"), 401, NOT_AUTHENTICATED, Some("Basic")),
        (
            get("/basic").header("authorization", "Basic !!!"),
            401,
            NOT_AUTHENTICATED,
            Some("Basic"),
        ),
        (
            // base64 of `nocolon`
            get("/basic").header("authorization", "Basic bm9jb2xvbg=="),
            401,
            NOT_AUTHENTICATED,
            Some("Basic"),
        ),
        (
            // base64 of `al:pa:ss`
            get("/basic").header("authorization", "Basic YWw6cGE6c3M="),
            200,
            r#"{"username":"al","password":"pa:ss"}"#,
            None,
        ),
        (
            // base64 of `é:x`, not ASCII
            get("/basic").header("authorization", "basic w6k6eA=="),
            401,
            NOT_AUTHENTICATED,
            Some("Basic"),
        ),
        (
            get("/basic").header("authorization", "Bearer x"),
            401,
            NOT_AUTHENTICATED,
            Some("Basic"),
        ),
        (
            get("/realm"),
            401,
            NOT_AUTHENTICATED,
            Some("Basic realm=\"shop\""),
        ),
        // API keys: missing or empty is 401 `APIKey`.
        (get("/header"), 401, NOT_AUTHENTICATED, Some("APIKey")),
        (
            get("/header").header("x-api-key", ""),
            401,
            NOT_AUTHENTICATED,
            Some("APIKey"),
        ),
        (
            get("/header").header("x-api-key", "k1"),
            200,
            r#"{"key":"k1"}"#,
            None,
        ),
        (get("/cookie"), 401, NOT_AUTHENTICATED, Some("APIKey")),
        (
            get("/cookie").header("cookie", "session=s1"),
            200,
            r#"{"key":"s1"}"#,
            None,
        ),
        (get("/query?api_key=q1"), 200, r#"{"key":"q1"}"#, None),
        (
            get("/query?api_key="),
            401,
            NOT_AUTHENTICATED,
            Some("APIKey"),
        ),
        (get("/query"), 401, NOT_AUTHENTICATED, Some("APIKey")),
        // Two schemes: the first missing one answers.
        (
            get("/two").header("authorization", "Bearer t"),
            401,
            NOT_AUTHENTICATED,
            Some("APIKey"),
        ),
        (
            get("/two")
                .header("authorization", "Bearer t")
                .header("x-api-key", "k"),
            200,
            r#"{"a":"k","b":"t"}"#,
            None,
        ),
        // OAuth2PasswordRequestForm: FastAPI's 422s, `scope` split, the token.
        (
            get("/token").form(""),
            422,
            r#"{"detail":[{"type":"missing","loc":["body","username"],"msg":"Field required","input":null},{"type":"missing","loc":["body","password"],"msg":"Field required","input":null}]}"#,
            None,
        ),
        (
            get("/token").form("username=al&password=secret&scope=a+b&grant_type=pw"),
            422,
            r#"{"detail":[{"type":"string_pattern_mismatch","loc":["body","grant_type"],"msg":"String should match pattern '^password$'","input":"pw","ctx":{"pattern":"^password$"}}]}"#,
            None,
        ),
        (
            get("/token")
                .form("username=al&password=secret&scope=a++b&grant_type=password&client_id=c"),
            200,
            r#"{"access_token":"tok-al","token_type":"bearer","scopes":["a","b"],"grant_type":"password","client_id":"c"}"#,
            None,
        ),
        (
            get("/token").form("username=al&password=bad"),
            400,
            r#"{"detail":"Incorrect username or password"}"#,
            None,
        ),
    ]
}

fn check_answers(base: &str, label: &str) {
    let mut wrong = Vec::new();
    for (case, status, body, challenge) in cases() {
        let expected = Answer {
            status,
            body: serde_json::from_str(body).unwrap(),
            challenge: challenge.map(str::to_string),
        };
        let got = send(base, &case);
        if got != expected {
            wrong.push(format!(
                "{} {} {:?}:\n  expected {expected:?}\n  got      {got:?}",
                case.method, case.path, case.headers
            ));
        }
    }
    assert!(wrong.is_empty(), "{label}:\n{}", wrong.join("\n"));
}

#[test]
fn security_dependencies_answer_as_fastapi_does() {
    let project = port();
    let server = Server::dev(&project);
    check_answers(&server.base, "filerouter dev");
}

/// The security schemes FastAPI 0.165 declares for the app.
fn expected_schemes() -> Value {
    json!({
        "OAuth2PasswordBearer": {"type": "oauth2", "flows": {"password": {"scopes": {"items:read": "Read items"}, "tokenUrl": "token"}}},
        "HTTPBearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
        "MaybeBearer": {"type": "http", "scheme": "bearer"},
        "HTTPBasic": {"type": "http", "scheme": "basic"},
        "RealmBasic": {"type": "http", "scheme": "basic", "description": "Basic with a realm"},
        "APIKeyHeader": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
        "APIKeyCookie": {"type": "apiKey", "in": "cookie", "name": "session"},
        "APIKeyQuery": {"type": "apiKey", "in": "query", "name": "api_key"},
    })
}

/// Each GET path's `security`, as FastAPI 0.165 declares it.
fn expected_security() -> Vec<(&'static str, Value)> {
    vec![
        ("/oauth", json!([{"OAuth2PasswordBearer": []}])),
        // Through the sub-dependency `current_user`.
        ("/me", json!([{"OAuth2PasswordBearer": []}])),
        // `Security(scoped, scopes=[...])` above the scheme.
        ("/items", json!([{"OAuth2PasswordBearer": ["items:read"]}])),
        ("/bearer", json!([{"HTTPBearer": []}])),
        ("/optional", json!([{"MaybeBearer": []}])),
        ("/basic", json!([{"HTTPBasic": []}])),
        ("/realm", json!([{"RealmBasic": []}])),
        ("/header", json!([{"APIKeyHeader": []}])),
        ("/cookie", json!([{"APIKeyCookie": []}])),
        ("/query", json!([{"APIKeyQuery": []}])),
        // Once each, in the order met, though `oauth2` is reached twice.
        (
            "/two",
            json!([{"APIKeyHeader": []}, {"OAuth2PasswordBearer": []}]),
        ),
    ]
}

fn check_document(doc: &Value) {
    assert_eq!(
        doc["components"]["securitySchemes"],
        expected_schemes(),
        "{doc:#}"
    );
    for (path, security) in expected_security() {
        assert_eq!(doc["paths"][path]["get"]["security"], security, "{path}");
    }
    assert!(doc["paths"]["/token"]["post"]["security"].is_null());
    assert!(doc["paths"]["/"]["get"]["security"].is_null());
}

#[test]
fn openapi_declares_the_schemes_and_each_operations_security() {
    let project = port();
    let server = Server::dev(&project);
    let doc = json(server.get("/openapi.json"));
    check_document(&doc);
    // The framework's own 401 is documented where a scheme answers it, with its challenge;
    // not where the only scheme has auto_error=False.
    assert_eq!(
        doc["paths"]["/oauth"]["get"]["responses"]["401"]["$ref"],
        "#/components/responses/NotAuthenticated"
    );
    assert!(
        doc["components"]["responses"]["NotAuthenticated"]["headers"]["WWW-Authenticate"]
            .is_object()
    );
    assert!(doc["paths"]["/optional"]["get"]["responses"]["401"].is_null());
    // The token URL's form, from the class dependency: username and password required,
    // grant_type's pattern.
    let form = &doc["paths"]["/token"]["post"]["requestBody"];
    let schema = &form["content"]["application/x-www-form-urlencoded"]["schema"];
    assert_eq!(
        schema["required"],
        json!(["username", "password"]),
        "{form:#}"
    );
    assert_eq!(
        schema["properties"]["grant_type"]["anyOf"][0]["pattern"], "^password$",
        "{form:#}"
    );
    // The page offers authorization, and marks what requires it.
    let html = server.get("/docs").text().unwrap();
    assert!(html.contains("id=\"authorize\""), "no Authorize button");
    assert!(html.contains("<dialog id=\"auth-dialog\""));
    assert!(html.contains("data-scheme=\"OAuth2PasswordBearer\" data-type=\"oauth2\""));
    assert!(html.contains("data-token-url=\"token\""));
    assert!(html.contains("data-security=\"[&quot;OAuth2PasswordBearer&quot;]\""));
}

#[test]
fn security_works_from_a_build_in_run() {
    let project = port();
    let (code, stdout, stderr) = run_with_env(&["build", "--project", "."], project.path(), &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let server = Server::run(&project, &[]);
    check_answers(&server.base, "filerouter run");
    check_document(&json(server.get("/openapi.json")));
}

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
            .args(["-m", "uvicorn", "app:app", "--host", "127.0.0.1"])
            .args(["--log-level", "warning", "--port", &port.to_string()])
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

#[test]
fn the_expectations_are_what_fastapi_answers_and_the_port_matches_it() {
    const TEST: &str = "the_expectations_are_what_fastapi_answers_and_the_port_matches_it";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.py"), FASTAPI_APP).unwrap();
    let fastapi = Uvicorn::start(&venv, dir.path());
    check_answers(&fastapi.base, "FastAPI");
    let original = json(
        client()
            .get(format!("{}/openapi.json", fastapi.base))
            .send()
            .unwrap(),
    );
    check_document(&original);

    // And the port's document passes the validator.
    let project = port();
    let server = Server::dev(&project);
    let file = project.path().join("openapi.json");
    std::fs::write(&file, server.get("/openapi.json").text().unwrap()).unwrap();
    let validated = run_tool(Command::new(venv.join("bin/openapi-spec-validator")).arg(&file));
    assert!(validated.is_ok(), "{}", validated.unwrap_err());
}
