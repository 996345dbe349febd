//! pydantic in the sandbox (issue 41, point 1): the real pydantic 2 from PyPI on pydantic-core
//! compiled for the sandbox from its sdist, built into the guest (host/guest-packages.txt pins
//! both). A project imports it without installing anything.
//!
//! - a route takes a JSON body into a `BaseModel` (nested model, `Field` constraint, a
//!   validator, lax conversion) and answers with the model dumped, through `filerouter run`
//!   from a build and through `dev`; a body that does not fit is a 422 with pydantic's own
//!   errors, malformed JSON too (`json_invalid`). The expected bodies are what pydantic 2.14.4
//!   with its native pydantic-core 2.50.5 gives for the same code on CPython;
//! - the guest holds pydantic and pydantic-core at the pinned versions, the core being the
//!   extension compiled for the guest's CPython (`.cpython-314-wasm32-wasi.so`);
//! - pydantic's V1 API (`pydantic.v1`) is there too; the modules the guest leaves out (the mypy
//!   and Hypothesis plugins) say why when imported.
//!
//! Integers past CPython's 4,300 digits are answered as FastAPI answers them on every path
//! (models, dataclasses, query, form).
//!
//! FastAPI's handling of models as parameters and return annotations is otherwise not covered
//! here.

mod support;

use serde_json::{Value, json};
use support::{Project, Server, json, run_with_env};

const ITEMS: &str = r#"
    import pydantic_core
    from pydantic import BaseModel, Field, ValidationError, field_validator

    from filerouter import JSONResponse, Request


    class Maker(BaseModel):
        name: str
        country: str = "unknown"


    class Item(BaseModel):
        name: str
        price: float = Field(gt=0)
        tags: list[str] = []
        maker: Maker

        @field_validator("name")
        @classmethod
        def strip(cls, value: str) -> str:
            return value.strip()


    async def POST(request: Request):
        try:
            item = Item.model_validate_json(await request.body())
        except ValidationError as e:
            return JSONResponse({"detail": e.errors(include_url=False)}, status_code=422)
        return {"item": item.model_dump(), "json": item.model_dump_json()}
"#;

const VERSIONS: &str = r#"
    import pydantic
    import pydantic_core
    from pydantic_core import _pydantic_core


    def GET(request):
        return {
            "pydantic": pydantic.VERSION,
            "pydantic_core": pydantic_core.__version__,
            "core_file": _pydantic_core.__file__,
        }
"#;

const LEFT_OUT: &str = r#"
    import importlib


    def GET(request, name: str):
        try:
            importlib.import_module(name)
        except ImportError as e:
            return {"type": type(e).__name__, "message": str(e)}
        return {"type": None}
"#;

const V1: &str = r#"
    from pydantic.v1 import BaseModel


    class Old(BaseModel):
        a: int
        b: str = "x"


    def GET(request):
        return Old(a="3").dict()
"#;

fn project() -> Project {
    Project::new(&[
        ("routes/items/route.py", ITEMS),
        ("routes/versions/route.py", VERSIONS),
        ("routes/left-out/route.py", LEFT_OUT),
        ("routes/v1/route.py", V1),
    ])
}

/// The versions `host/guest-packages.txt` pins for `name`.
fn pinned(name: &str) -> String {
    let pins = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/guest-packages.txt"))
        .expect("read host/guest-packages.txt");
    pins.lines()
        .find_map(|line| {
            let spec = line.split_whitespace().next()?;
            let (n, version) = spec.split_once("==")?;
            (n == name).then(|| version.to_string())
        })
        .unwrap_or_else(|| panic!("host/guest-packages.txt pins no {name}"))
}

fn check_items(server: &Server, mode: &str) {
    let post = |body: &str| {
        server
            .request("POST", "/items")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .expect("POST /items")
    };

    let response = post(r#"{"name": "  pen ", "price": "1.5", "maker": {"name": "Acme"}}"#);
    assert_eq!(response.status(), 200, "{mode}: {}", server.log());
    let body = json(response);
    let item = json!({"name": "pen", "price": 1.5, "tags": [], "maker": {"name": "Acme", "country": "unknown"}});
    assert_eq!(body["item"], item, "{mode}: {body:#}");
    assert_eq!(
        body["json"],
        r#"{"name":"pen","price":1.5,"tags":[],"maker":{"name":"Acme","country":"unknown"}}"#,
        "{mode}"
    );

    let response = post(r#"{"name": "pen", "price": -2, "tags": "x"}"#);
    assert_eq!(response.status(), 422, "{mode}: {}", server.log());
    let body = json(response);
    assert_eq!(
        body,
        json!({"detail": [
            {"type": "greater_than", "loc": ["price"], "msg": "Input should be greater than 0",
             "input": -2, "ctx": {"gt": 0.0}},
            {"type": "list_type", "loc": ["tags"], "msg": "Input should be a valid array", "input": "x"},
            {"type": "missing", "loc": ["maker"], "msg": "Field required",
             "input": {"name": "pen", "price": -2, "tags": "x"}},
        ]}),
        "{mode}"
    );

    let response = post(r#"{"name": "pen", "#);
    assert_eq!(response.status(), 422, "{mode}: {}", server.log());
    let body = json(response);
    let eof = "EOF while parsing a value at line 1 column 16";
    assert_eq!(
        body,
        json!({"detail": [{"type": "json_invalid", "loc": [], "msg": format!("Invalid JSON: {eof}"),
                           "input": r#"{"name": "pen", "#, "ctx": {"error": eof}}]}),
        "{mode}"
    );
}

#[test]
fn a_model_validates_a_body_and_dumps_it_in_run_and_dev() {
    let project = project();
    let (code, stdout, stderr) = run_with_env(&["build", "--project", "."], project.path(), &[]);
    assert_eq!(code, 0, "build: {stdout}\n{stderr}");
    let server = Server::run(&project, &[]);
    check_items(&server, "run");
    drop(server);

    let server = Server::dev(&project);
    check_items(&server, "dev");
}

#[test]
fn the_guest_holds_the_pinned_pydantic_and_its_compiled_core() {
    let project = project();
    let server = Server::dev(&project);
    let response = server.get("/versions");
    assert_eq!(response.status(), 200, "{}", server.log());
    let body = json(response);
    assert_eq!(body["pydantic"], pinned("pydantic"), "{body:#}");
    assert_eq!(body["pydantic_core"], pinned("pydantic-core"), "{body:#}");
    let file = body["core_file"].as_str().unwrap_or_default();
    assert!(
        file.ends_with("/pydantic_core/_pydantic_core.cpython-314-wasm32-wasi.so"),
        "{body:#}"
    );
}

#[test]
fn the_v1_api_is_there_and_the_modules_left_out_say_why() {
    let project = project();
    let server = Server::dev(&project);
    let response = server.get("/v1");
    assert_eq!(response.status(), 200, "{}", server.log());
    assert_eq!(json(response), json!({"a": 3, "b": "x"}));

    for (name, why) in [
        ("pydantic.mypy", "plugin for mypy"),
        ("pydantic.v1.mypy", "plugin for mypy"),
        ("pydantic.v1._hypothesis_plugin", "plugin for Hypothesis"),
    ] {
        let response = server.get(&format!("/left-out?name={name}"));
        assert_eq!(response.status(), 200, "{}", server.log());
        let body = json(response);
        assert_eq!(body["type"], "ModuleNotFoundError", "{name}: {body:#}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("in the filerouter sandbox") && message.contains(why),
            "{name}: {message}"
        );
    }
    // Not a blanket refusal: pydantic's other modules are there.
    for name in [
        "pydantic.networks",
        "pydantic.v1.fields",
        "pydantic.experimental.pipeline",
    ] {
        let response = server.get(&format!("/left-out?name={name}"));
        assert_eq!(json(response)["type"], serde_json::Value::Null, "{name}");
    }
}

/// Integers past CPython's limit of 4,300 digits for converting text (`sys.int_info`), as
/// FastAPI 0.165 with pydantic 2.14 answers them: a JSON number that long is a body the parser
/// cannot read (400, a pydantic model's or a dataclass's alike), text that long for an `int`
/// is pydantic's 422 `int_parsing_size` (a model's field, a dataclass's, a query parameter, a
/// form field). Never a 500 naming the `ValueError`.
const NUMBERS: &str = r#"
    import dataclasses

    from pydantic import BaseModel

    from filerouter import Form


    class Model(BaseModel):
        count: int


    @dataclasses.dataclass
    class Record:
        count: int


    def POST(request, item: Model):
        return {"bits": item.count.bit_length()}


    def PUT(request, item: Record):
        return {"bits": item.count.bit_length()}


    def GET(request, count: int):
        return {"bits": count.bit_length()}


    def PATCH(request, count: int = Form()):
        return {"bits": count.bit_length()}
"#;

#[test]
fn an_integer_past_4300_digits_is_a_400_or_422_as_in_fastapi_not_a_500() {
    let project = Project::new(&[("routes/numbers/route.py", NUMBERS)]);
    let server = Server::dev(&project);
    let send = |method: &str, body: Option<String>, query: &str, form: bool| {
        let mut request = server.request(method, &format!("/numbers{query}"));
        if let Some(body) = body {
            let kind = if form {
                "application/x-www-form-urlencoded"
            } else {
                "application/json"
            };
            request = request.header("content-type", kind).body(body);
        }
        let response = request.send().unwrap();
        (response.status().as_u16(), json(response))
    };
    let too_long = "9".repeat(100_000);
    let size_error = |loc: Value, input: &str| {
        json!({"detail": [{
            "type": "int_parsing_size", "loc": loc,
            "msg": "Unable to parse input string as an integer, exceeded maximum size",
            "input": input,
        }]})
    };
    let unreadable = json!({"detail": "There was an error parsing the body"});
    for method in ["POST", "PUT"] {
        let (status, body) = send(
            method,
            Some(format!(r#"{{"count": {too_long}}}"#)),
            "",
            false,
        );
        assert_eq!(
            (status, &body),
            (400, &unreadable),
            "{method}, a JSON number"
        );
        let (status, body) = send(
            method,
            Some(format!(r#"{{"count": "{too_long}"}}"#)),
            "",
            false,
        );
        assert_eq!(
            (status, &body),
            (422, &size_error(json!(["body", "count"]), &too_long)),
            "{method}, text"
        );
        // 4,300 digits are still a number.
        let (status, body) = send(
            method,
            Some(format!(r#"{{"count": {}}}"#, "9".repeat(4_300))),
            "",
            false,
        );
        assert_eq!(
            (status, &body),
            (200, &json!({"bits": 14_285})),
            "{method}, 4,300 digits"
        );
    }
    // A query parameter within the request line's limit.
    let long = "9".repeat(5_000);
    let (status, body) = send("GET", None, &format!("?count={long}"), false);
    assert_eq!(
        (status, &body),
        (422, &size_error(json!(["query", "count"]), &long)),
        "a query"
    );
    let (status, body) = send("PATCH", Some(format!("count={too_long}")), "", true);
    assert_eq!(
        (status, &body),
        (422, &size_error(json!(["body", "count"]), &too_long)),
        "a form"
    );
}
