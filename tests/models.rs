//! Models in and out (issue 25, point 4): the return annotation is the response model, which
//! validates and filters what a handler returns as FastAPI's `response_model` does, and a PATCH
//! handler can tell which fields its body set (`fields_set`, `asdict(exclude_unset=True)`, as
//! pydantic's `model_fields_set` and `model_dump(exclude_unset=True)`).
//!
//! - extra fields are cut, at every depth (nested models, lists, dicts of models), from dicts,
//!   dataclasses of another shape and plain objects (`from_attributes`); defaults fill absent
//!   fields; values convert as in a request body; `(body, status)` answers are filtered too;
//!   a `Response`, `None` and handlers without a model are sent as returned;
//! - a value that does not fit (a required field missing, a wrong type) is a 500: in `dev` a
//!   `ResponseValidationError` naming the handler and each error's `loc` (`["response", ...]`),
//!   in `run` FastAPI's opaque body, with the details in the log only;
//! - a PATCH of a dataclass body learns which fields the client sent, nested ones included,
//!   and of a TypedDict body its keys.

use crate::support;

use serde_json::json;
use support::{Project, Server, json, run_with_env};

const BOOKS: &str = r#"
    import dataclasses
    from typing import Any, Literal, NotRequired, Optional, TypedDict

    from filerouter import JSONResponse

    @dataclasses.dataclass
    class Author:
        name: str

    @dataclasses.dataclass
    class Book:
        id: int
        title: str
        author: Author
        tags: list[str] = dataclasses.field(default_factory=list)
        price: Optional[float] = None

    class Summary(TypedDict):
        id: int
        title: str
        note: NotRequired[str]

    @dataclasses.dataclass
    class Row:                        # a dataclass of another shape, with more fields
        id: int
        title: str
        author: Author
        password_hash: str

    class Record:                     # an ORM-like object: fields as attributes
        def __init__(self) -> None:
            self.id = 3
            self.title = "Emma"
            self.author = {"name": "Austen", "email": "ja@example.com"}
            self.internal = "x"

    FULL = {"id": "1", "title": "Dune", "secret": "s", "author": {"name": "Herbert", "password": "p"},
            "tags": ["sf"], "price": 9}

    def GET(request, case: str) -> Book:
        if case == "dict":
            return FULL                                           # type: ignore[return-value]
        if case == "row":
            return Row(2, "Ulysses", Author("Joyce"), "hash")     # type: ignore[return-value]
        if case == "object":
            return Record()                                       # type: ignore[return-value]
        if case == "missing":
            return {"id": 1, "author": {"name": "x"}, "extra": 1}  # type: ignore[return-value]
        if case == "wrong":
            return {"id": "one", "title": "T", "author": {}}      # type: ignore[return-value]
        if case == "response":
            return JSONResponse({"anything": "goes"})              # type: ignore[return-value]
        raise ValueError(case)
"#;

const LISTS: &str = r#"
    import dataclasses
    from typing import Any, Literal, NotRequired, TypedDict

    @dataclasses.dataclass
    class Item:
        name: str
        qty: int = 1

    class Summary(TypedDict):
        id: int
        title: str
        note: NotRequired[str]

    def GET(request) -> list[Item]:
        return [{"name": "a", "cost": 3}, {"name": "b", "qty": "2", "cost": 4}]  # type: ignore[list-item]

    def POST(request) -> tuple[dict[str, Item], Literal[201]]:
        return {"x": {"name": "x", "qty": 5, "hidden": True}}, 201  # type: ignore[dict-item]

    def PUT(request) -> Summary:
        return {"id": 7, "title": "T", "drop": "me"}  # type: ignore[typeddict-unknown-key]

    def DELETE(request) -> None:
        return None

    def PATCH(request) -> list[Item]:
        import sqlite3
        conn = sqlite3.connect(":memory:")
        conn.row_factory = sqlite3.Row
        return conn.execute("SELECT 'row' AS name, 3 AS qty, 'x' AS password_hash").fetchall()  # type: ignore[no-any-return]
"#;

const UNFILTERED: &str = r#"
    from typing import Any

    def GET(request):
        return {"kept": True, "extra": [1, 2]}

    def POST(request) -> dict[str, Any]:
        return {"kept": True, "extra": [1, 2]}
"#;

#[test]
fn the_return_annotation_validates_and_filters_the_response() {
    let project = Project::new(&[
        ("routes/books/[case]/route.py", BOOKS),
        ("routes/lists/route.py", LISTS),
        ("routes/plain/route.py", UNFILTERED),
    ]);
    let server = Server::dev(&project);

    // Extra fields cut at every depth; values converted ("1" -> 1, 9 -> 9.0).
    assert_eq!(
        json(server.get("/books/dict")),
        json!({"id": 1, "title": "Dune", "author": {"name": "Herbert"}, "tags": ["sf"], "price": 9.0})
    );
    // From a dataclass of another shape, and from an object's attributes; defaults fill in.
    assert_eq!(
        json(server.get("/books/row")),
        json!({"id": 2, "title": "Ulysses", "author": {"name": "Joyce"}, "tags": [], "price": null})
    );
    assert_eq!(
        json(server.get("/books/object")),
        json!({"id": 3, "title": "Emma", "author": {"name": "Austen"}, "tags": [], "price": null})
    );
    // A response object goes out as it is.
    assert_eq!(
        json(server.get("/books/response")),
        json!({"anything": "goes"})
    );

    // Lists of models, (body, status) answers, dicts of models, TypedDicts.
    assert_eq!(
        json(server.get("/lists")),
        json!([{"name": "a", "qty": 1}, {"name": "b", "qty": 2}])
    );
    let created = server.request("POST", "/lists").send().unwrap();
    assert_eq!(created.status(), 201);
    assert_eq!(json(created), json!({"x": {"name": "x", "qty": 5}}));
    assert_eq!(
        json(server.request("PUT", "/lists").send().unwrap()),
        json!({"id": 7, "title": "T"})
    );
    assert_eq!(
        server.request("DELETE", "/lists").send().unwrap().status(),
        204
    );
    // Rows of the standard library's `sqlite3` (`sqlite3.Row`), with a column the model lacks.
    assert_eq!(
        json(server.request("PATCH", "/lists").send().unwrap()),
        json!([{"name": "row", "qty": 3}])
    );

    // No model, or `dict[str, Any]`: sent as returned.
    assert_eq!(
        json(server.get("/plain")),
        json!({"kept": true, "extra": [1, 2]})
    );
    assert_eq!(
        json(server.request("POST", "/plain").send().unwrap()),
        json!({"kept": true, "extra": [1, 2]})
    );

    // A required field missing: 500, FastAPI's ResponseValidationError, at the handler.
    let response = server.get("/books/missing");
    assert_eq!(response.status(), 500);
    let body = json(response);
    assert_eq!(body["error"]["type"], "ResponseValidationError", "{body}");
    assert_eq!(body["error"]["file"], "routes/books/[case]/route.py");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("GET() returned a value that does not fit its return annotation `Book` (its response model): 1 validation error"),
        "{message}"
    );
    assert!(
        message
            .contains("'type': 'missing', 'loc': ('response', 'title'), 'msg': 'Field required'"),
        "{message}"
    );
    // A value of the wrong type, and a nested required field missing.
    let body = json(server.get("/books/wrong"));
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("2 validation errors"), "{message}");
    assert!(
        message.contains("'type': 'int_parsing', 'loc': ('response', 'id')"),
        "{message}"
    );
    assert!(
        message.contains("'type': 'missing', 'loc': ('response', 'author', 'name')"),
        "{message}"
    );
    assert!(server.log_shows("ResponseValidationError"));
}

#[test]
fn in_production_a_response_that_does_not_fit_is_an_opaque_500() {
    let project = Project::new(&[("routes/books/[case]/route.py", BOOKS)]);
    let (code, _, stderr) = run_with_env(&["build"], project.path(), &[]);
    assert_eq!(code, 0, "{stderr}");
    let server = Server::run(&project, &[]);
    assert_eq!(
        json(server.get("/books/dict")),
        json!({"id": 1, "title": "Dune", "author": {"name": "Herbert"}, "tags": ["sf"], "price": 9.0})
    );
    let response = server.get("/books/missing");
    assert_eq!(response.status(), 500);
    let id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        response.text().unwrap(),
        r#"{"detail":"Internal Server Error"}"#
    );
    assert!(
        support::eventually(std::time::Duration::from_secs(5), || {
            let log = server.log();
            log.contains(&format!("request {id}")) && log.contains("'loc': ('response', 'title')")
        }),
        "{}",
        server.log()
    );
}

#[test]
fn patch_handlers_know_which_fields_the_body_set() {
    let project = Project::new(&[
        (
            "routes/books/[book_id]/route.py",
            r#"
        import dataclasses
        from typing import NotRequired, Optional, TypedDict

        from filerouter import asdict, fields_set, kv

        @dataclasses.dataclass
        class Size:
            width: int = 0
            height: int = 0

        @dataclasses.dataclass
        class Book:
            title: str
            price: float
            size: Size
            subtitle: Optional[str] = None

        @dataclasses.dataclass
        class BookPatch:
            title: Optional[str] = None
            price: Optional[float] = None
            subtitle: Optional[str] = None
            size: Optional[Size] = None

        class Labels(TypedDict):
            colour: NotRequired[str]
            shelf: NotRequired[int]

        def _stored(book_id: int) -> dict:
            return kv.get(f"book:{book_id}") or {
                "title": "Dune", "price": 9.5, "subtitle": "A novel", "size": {"width": 10, "height": 20}}

        def GET(request, book_id: int) -> Book:
            return _stored(book_id)

        def PATCH(request, book_id: int, patch: BookPatch) -> Book:
            stored = _stored(book_id)
            changes = asdict(patch, exclude_unset=True)
            kv.set("last", {
                "fields_set": sorted(fields_set(patch)),
                "changes": changes,
                "size_set": sorted(fields_set(patch.size)) if patch.size else None,
                "all": asdict(patch),
                "not_none": asdict(patch, exclude_none=True),
            })
            size = changes.pop("size", None)
            stored.update(changes)
            if size is not None:
                stored["size"].update(size)
            kv.set(f"book:{book_id}", stored)
            return stored

        def PUT(request, book_id: int, labels: Labels) -> dict:
            return {"fields_set": sorted(fields_set(labels)), "changes": asdict(labels, exclude_unset=True)}

        def POST(request, book_id: int) -> dict:
            made = BookPatch(title="made by code")
            return {"fields_set": sorted(fields_set(made))}
        "#,
        ),
        (
            "routes/last/route.py",
            "from filerouter import kv\n\ndef GET(request):\n    return kv.get('last')\n",
        ),
    ]);
    let server = Server::dev(&project);
    let patch = |body: serde_json::Value| {
        server
            .request("PATCH", "/books/1")
            .json(&body)
            .send()
            .unwrap()
    };

    // Only the price: the rest stays, though BookPatch has defaults for every field.
    let response = patch(json!({"price": 12}));
    assert_eq!(response.status(), 200);
    assert_eq!(
        json(response),
        json!({"title": "Dune", "price": 12.0, "size": {"width": 10, "height": 20}, "subtitle": "A novel"})
    );
    // An explicit null is a field set (to clear the subtitle), and a nested model knows its own.
    let response = patch(json!({"subtitle": null, "size": {"height": 25}}));
    assert_eq!(
        json(response),
        json!({"title": "Dune", "price": 12.0, "size": {"width": 10, "height": 25}, "subtitle": null})
    );
    let last = json(server.get("/books/1"));
    assert_eq!(last["size"], json!({"width": 10, "height": 25}));
    assert_eq!(
        json(server.get("/last")),
        json!({
            "fields_set": ["size", "subtitle"],
            "changes": {"subtitle": null, "size": {"height": 25}},
            "size_set": ["height"],
            "all": {"title": null, "price": null, "subtitle": null, "size": {"width": 0, "height": 25}},
            "not_none": {"size": {"width": 0, "height": 25}},
        })
    );

    // A TypedDict body holds only what was sent.
    let response = server
        .request("PUT", "/books/1")
        .json(&json!({"shelf": "4"}))
        .send()
        .unwrap();
    assert_eq!(
        json(response),
        json!({"fields_set": ["shelf"], "changes": {"shelf": 4}})
    );
    // A dataclass made by code counts every field as set (its constructor's arguments are
    // not known, unlike pydantic's).
    assert_eq!(
        json(server.request("POST", "/books/1").send().unwrap()),
        json!({"fields_set": ["price", "size", "subtitle", "title"]})
    );
}
