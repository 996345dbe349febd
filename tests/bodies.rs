//! Typed request bodies, declared parameters (`Query`, `Path`, `Header`, `Cookie`, `Body`),
//! forms and uploads, and what `/openapi.json` says about them, through the real binary.
//!
//! The expected 422 bodies are what FastAPI 0.165 with pydantic 2.14 answers for the same
//! handlers and requests (recorded from it; `tests/port.rs` compares against a live FastAPI).

use crate::support;

use serde_json::{Value, json};
use support::{Project, Server, json};

fn fixture() -> Project {
    Project::new(&[
        (
            "routes/_lib/models.py",
            r#"
            import dataclasses, datetime, enum, uuid
            from typing import Annotated, Optional, TypedDict
            from filerouter import Field

            class Color(enum.Enum):
                red = "red"
                green = "green"

            @dataclasses.dataclass
            class Tag:
                name: str
                weight: int = 1

            @dataclasses.dataclass
            class Item:
                name: str
                price: float
                count: int = 0
                tags: list[Tag] = dataclasses.field(default_factory=list)
                color: Optional[Color] = None
                id: Optional[uuid.UUID] = None
                when: Optional[datetime.date] = None
                flag: bool = False

            class Point(TypedDict):
                x: int
                y: Annotated[int, Field(ge=0)]
            "#,
        ),
        (
            "routes/items/route.py",
            r#"
            import dataclasses
            from _lib.models import Item

            def POST(request, item: Item) -> Item:
                """Create an item."""
                return item
            "#,
        ),
        (
            "routes/points/route.py",
            r#"
            from _lib.models import Point

            def POST(request, points: list[Point]) -> list[Point]:
                return points
            "#,
        ),
        (
            "routes/pair/route.py",
            r#"
            from typing import Literal
            from filerouter import Body
            from _lib.models import Item, Tag

            def POST(request, item: Item, tag: Tag, importance: int = Body(gt=0)) -> tuple[dict, Literal[201]]:
                return {"item": item.name, "tag": tag.name, "importance": importance}, 201
            "#,
        ),
        (
            "routes/embed/route.py",
            r#"
            from filerouter import Body
            from _lib.models import Tag

            def PUT(request, tag: Tag = Body(embed=True)):
                return {"tag": tag.name}
            "#,
        ),
        (
            "routes/search/route.py",
            r#"
            from typing import Annotated, Optional
            from filerouter import Cookie, Header, Query

            def GET(
                request,
                q: Annotated[str, Query(min_length=2, max_length=5, pattern="^[a-z]+$", description="Text to find.")],
                page: int = Query(1, ge=1, le=100),
                ratio: float = Query(0.5, gt=0, lt=1),
                tags: list[int] = Query([]),
                sort: Optional[str] = Query(None, alias="sort-by"),
                user_agent: str = Header(),
                x_token: int = Header(0),
                session: Optional[str] = Cookie(None),
            ):
                return {"q": q, "page": page, "ratio": ratio, "tags": tags, "sort": sort,
                        "ua": user_agent, "token": x_token, "session": session}
            "#,
        ),
        (
            "routes/users/[user_id]/route.py",
            r#"
            from filerouter import Path

            def GET(request, user_id: int = Path(ge=1, description="The user's number.")):
                return {"user_id": user_id}

            def DELETE(request, user_id: int) -> None:
                return None
            "#,
        ),
        (
            "routes/login/route.py",
            r#"
            from filerouter import Form

            async def POST(request, username: str = Form(min_length=3), remember: bool = Form(False)):
                form = await request.form()
                return {"username": username, "remember": remember, "fields": sorted(form.keys())}
            "#,
        ),
        (
            "routes/upload/route.py",
            r#"
            from filerouter import File, Form, UploadFile

            async def POST(request, file: UploadFile = File(), raw: bytes = File(), note: str = Form("")):
                data = await file.read()
                return {"filename": file.filename, "type": file.content_type, "size": len(data),
                        "raw": len(raw), "note": note}
            "#,
        ),
    ])
}

fn post_json(server: &Server, path: &str, body: &str) -> (u16, Value) {
    let response = server
        .request("POST", path)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap();
    (response.status().as_u16(), json(response))
}

#[test]
fn a_dataclass_body_is_read_validated_and_converted() {
    let project = fixture();
    let server = Server::dev(&project);
    let (status, body) = post_json(
        &server,
        "/items",
        r#"{"name": "a", "price": "3.5", "count": "36", "tags": [{"name": "t", "weight": 2.0}],
            "color": "red", "id": "12345678123456781234567812345678", "when": "2024-01-02", "flag": "yes", "extra": 1}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"name": "a", "price": 3.5, "count": 36, "tags": [{"name": "t", "weight": 2}],
               "color": "red", "id": "12345678-1234-5678-1234-567812345678", "when": "2024-01-02", "flag": true})
    );
}

#[test]
fn body_errors_are_fastapis_item_for_item() {
    let project = fixture();
    let server = Server::dev(&project);
    let (status, body) = post_json(
        &server,
        "/items",
        r#"{"name": 1, "price": "x", "count": 3.5, "tags": [{"weight": "z"}, 5], "color": "blue", "id": "nope", "when": "2024-13-01", "flag": "maybe"}"#,
    );
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"detail": [
            {"type": "string_type", "loc": ["body", "name"], "msg": "Input should be a valid string", "input": 1},
            {"type": "float_parsing", "loc": ["body", "price"], "msg": "Input should be a valid number, unable to parse string as a number", "input": "x"},
            {"type": "int_from_float", "loc": ["body", "count"], "msg": "Input should be a valid integer, got a number with a fractional part", "input": 3.5},
            {"type": "missing", "loc": ["body", "tags", 0, "name"], "msg": "Field required", "input": {"weight": "z"}},
            {"type": "int_parsing", "loc": ["body", "tags", 0, "weight"], "msg": "Input should be a valid integer, unable to parse string as an integer", "input": "z"},
            {"type": "dataclass_type", "loc": ["body", "tags", 1], "msg": "Input should be a dictionary or an instance of Tag", "input": 5, "ctx": {"class_name": "Tag"}},
            {"type": "enum", "loc": ["body", "color"], "msg": "Input should be 'red' or 'green'", "input": "blue", "ctx": {"expected": "'red' or 'green'"}},
            {"type": "uuid_parsing", "loc": ["body", "id"], "msg": "Input should be a valid UUID, invalid character: found `n` at 0", "input": "nope", "ctx": {"error": "invalid character: found `n` at 0"}},
            {"type": "date_from_datetime_parsing", "loc": ["body", "when"], "msg": "Input should be a valid date or datetime, month value is outside expected range of 1-12", "input": "2024-13-01", "ctx": {"error": "month value is outside expected range of 1-12"}},
            {"type": "bool_parsing", "loc": ["body", "flag"], "msg": "Input should be a valid boolean, unable to interpret input", "input": "maybe"},
        ]})
    );

    // Malformed JSON, no body, a body of the wrong shape, and a body that is not JSON.
    let (status, body) = post_json(&server, "/items", "{bad");
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"detail": [{"type": "json_invalid", "loc": ["body", 1], "msg": "JSON decode error", "input": {},
                           "ctx": {"error": "Expecting property name enclosed in double quotes"}}]})
    );
    let response = server.request("POST", "/items").send().unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(
        json(response),
        json!({"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": null}]})
    );
    let (status, body) = post_json(&server, "/items", "[1, 2]");
    assert_eq!(status, 422);
    assert_eq!(
        body["detail"][0],
        json!({"type": "dataclass_type", "loc": ["body"], "msg": "Input should be a dictionary or an instance of Item",
               "input": [1, 2], "ctx": {"class_name": "Item"}})
    );
    let response = server
        .request("POST", "/items")
        .header("content-type", "text/plain")
        .body(r#"{"name": "a", "price": 1}"#)
        .send()
        .unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(
        json(response)["detail"][0]["input"],
        r#"{"name": "a", "price": 1}"#
    );
    let (status, body) = post_json(&server, "/items", r#"{"price": null}"#);
    assert_eq!(status, 422);
    assert_eq!(
        body["detail"],
        json!([{"type": "missing", "loc": ["body", "name"], "msg": "Field required", "input": {"price": null}},
               {"type": "float_type", "loc": ["body", "price"], "msg": "Input should be a valid number", "input": null}])
    );
}

#[test]
fn lists_of_typeddicts_and_field_constraints() {
    let project = fixture();
    let server = Server::dev(&project);
    let (status, body) = post_json(
        &server,
        "/points",
        r#"[{"x": "1", "y": 2}, {"x": 3, "y": 4, "z": 5}]"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!([{"x": 1, "y": 2}, {"x": 3, "y": 4}]));
    let (status, body) = post_json(&server, "/points", r#"[{"y": -1}, "p"]"#);
    assert_eq!(status, 422);
    assert_eq!(
        body["detail"],
        json!([
            {"type": "missing", "loc": ["body", 0, "x"], "msg": "Field required", "input": {"y": -1}},
            {"type": "greater_than_equal", "loc": ["body", 0, "y"], "msg": "Input should be greater than or equal to 0", "input": -1, "ctx": {"ge": 0}},
            {"type": "dict_type", "loc": ["body", 1], "msg": "Input should be a valid dictionary", "input": "p"},
        ])
    );
    let (status, body) = post_json(&server, "/points", "{}");
    assert_eq!(status, 422);
    assert_eq!(body["detail"][0]["type"], "list_type");
}

#[test]
fn several_body_parameters_embed_by_name() {
    let project = fixture();
    let server = Server::dev(&project);
    let (status, body) = post_json(
        &server,
        "/pair",
        r#"{"item": {"name": "a", "price": 1}, "tag": {"name": "t"}, "importance": "3"}"#,
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body, json!({"item": "a", "tag": "t", "importance": 3}));
    let (status, body) = post_json(&server, "/pair", r#"{"name": "a", "price": 1}"#);
    assert_eq!(status, 422);
    assert_eq!(
        body["detail"],
        json!([
            {"type": "missing", "loc": ["body", "item"], "msg": "Field required", "input": null},
            {"type": "missing", "loc": ["body", "tag"], "msg": "Field required", "input": null},
            {"type": "missing", "loc": ["body", "importance"], "msg": "Field required", "input": null},
        ])
    );
    let (status, body) = post_json(
        &server,
        "/pair",
        r#"{"item": {"name": "a", "price": 1}, "tag": {}, "importance": 0}"#,
    );
    assert_eq!(status, 422);
    assert_eq!(
        body["detail"],
        json!([
            {"type": "missing", "loc": ["body", "tag", "name"], "msg": "Field required", "input": {}},
            {"type": "greater_than", "loc": ["body", "importance"], "msg": "Input should be greater than 0", "input": 0, "ctx": {"gt": 0}},
        ])
    );
    // `Body(embed=True)` on a single parameter.
    let response = server
        .request("PUT", "/embed")
        .header("content-type", "application/json")
        .body(r#"{"name": "t"}"#)
        .send()
        .unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(json(response)["detail"][0]["loc"], json!(["body", "tag"]));
}

#[test]
fn declared_query_header_cookie_and_path_parameters() {
    let project = fixture();
    let server = Server::dev(&project);
    let response = server
        .request(
            "GET",
            "/search?q=abc&page=3&ratio=0.25&tags=1&tags=2&sort-by=name",
        )
        .header("user-agent", "agent/1")
        .header("x-token", "7")
        .header("cookie", "session=s1")
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        json(response),
        json!({"q": "abc", "page": 3, "ratio": 0.25, "tags": [1, 2], "sort": "name", "ua": "agent/1", "token": 7, "session": "s1"})
    );
    let response = server
        .request("GET", "/search?q=A&page=0&ratio=1&tags=x")
        .header("user-agent", "agent/1")
        .header("x-token", "zz")
        .send()
        .unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(
        json(response)["detail"],
        json!([
            {"type": "string_too_short", "loc": ["query", "q"], "msg": "String should have at least 2 characters", "input": "A", "ctx": {"min_length": 2}},
            {"type": "greater_than_equal", "loc": ["query", "page"], "msg": "Input should be greater than or equal to 1", "input": "0", "ctx": {"ge": 1}},
            {"type": "less_than", "loc": ["query", "ratio"], "msg": "Input should be less than 1", "input": "1", "ctx": {"lt": 1.0}},
            {"type": "int_parsing", "loc": ["query", "tags", 0], "msg": "Input should be a valid integer, unable to parse string as an integer", "input": "x"},
            {"type": "int_parsing", "loc": ["header", "x-token"], "msg": "Input should be a valid integer, unable to parse string as an integer", "input": "zz"},
        ])
    );
    let response = server
        .request("GET", "/search?q=abcdef1")
        .header("user-agent", "a")
        .send()
        .unwrap();
    assert_eq!(
        json(response)["detail"][0],
        json!({"type": "string_too_long", "loc": ["query", "q"], "msg": "String should have at most 5 characters", "input": "abcdef1", "ctx": {"max_length": 5}})
    );
    let response = server
        .request("GET", "/search?q=AB")
        .header("user-agent", "a")
        .send()
        .unwrap();
    assert_eq!(
        json(response)["detail"][0],
        json!({"type": "string_pattern_mismatch", "loc": ["query", "q"], "msg": "String should match pattern '^[a-z]+$'", "input": "AB", "ctx": {"pattern": "^[a-z]+$"}})
    );
    let response = server.get("/users/0");
    assert_eq!(response.status(), 422);
    assert_eq!(
        json(response)["detail"][0],
        json!({"type": "greater_than_equal", "loc": ["path", "user_id"], "msg": "Input should be greater than or equal to 1", "input": "0", "ctx": {"ge": 1}})
    );
    assert_eq!(json(server.get("/users/5")), json!({"user_id": 5}));
}

#[test]
fn forms_and_uploads() {
    let project = fixture();
    let server = Server::dev(&project);
    let response = server
        .request("POST", "/login")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("username=alice&remember=on&other=1")
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        json(response),
        json!({"username": "alice", "remember": true, "fields": ["other", "remember", "username"]})
    );
    let response = server
        .request("POST", "/login")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("username=al")
        .send()
        .unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(
        json(response)["detail"],
        json!([{"type": "string_too_short", "loc": ["body", "username"], "msg": "String should have at least 3 characters", "input": "al", "ctx": {"min_length": 3}}])
    );
    let response = server.request("POST", "/login").send().unwrap();
    assert_eq!(
        json(response)["detail"],
        json!([{"type": "missing", "loc": ["body", "username"], "msg": "Field required", "input": null}])
    );

    let boundary = "XyZ";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a b.txt\"\r\nContent-Type: text/plain\r\n\r\nline one\r\nline two\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"raw\"; filename=\"r.bin\"\r\n\r\n\x00\x01\x02\r\n\
         --{boundary}--\r\n"
    );
    let response = server
        .request("POST", "/upload")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        json(response),
        json!({"filename": "a b.txt", "type": "text/plain", "size": 18, "raw": 3, "note": "hello"})
    );
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nnot a file\r\n--{boundary}--\r\n"
    );
    let response = server
        .request("POST", "/upload")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(
        json(response)["detail"],
        json!([
            {"type": "value_error", "loc": ["body", "file"], "msg": "Value error, Expected UploadFile, received: <class 'str'>", "input": "not a file", "ctx": {"error": {}}},
            {"type": "missing", "loc": ["body", "raw"], "msg": "Field required", "input": null},
        ])
    );
    // A multipart body that never ends is a 400, not a crash.
    let response = server
        .request("POST", "/upload")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\ncut"
        ))
        .send()
        .unwrap();
    assert_eq!(response.status(), 400);
}

#[test]
fn openapi_documents_bodies_parameters_and_responses() {
    let project = fixture();
    let server = Server::dev(&project);
    let doc = json(server.get("/openapi.json"));
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["Tag"],
        json!({"properties": {"name": {"type": "string", "title": "Name"},
                              "weight": {"type": "integer", "title": "Weight", "default": 1}},
               "type": "object", "required": ["name"], "title": "Tag"})
    );
    assert_eq!(
        schemas["Item"]["properties"]["tags"]["items"],
        json!({"$ref": "#/components/schemas/Tag"})
    );
    assert_eq!(
        schemas["Color"],
        json!({"enum": ["red", "green"], "title": "Color", "type": "string"})
    );
    assert_eq!(schemas["Point"]["properties"]["y"]["minimum"], 0);

    let items = &doc["paths"]["/items"]["post"];
    assert_eq!(items["requestBody"]["required"], true);
    let media = &items["requestBody"]["content"]["application/json"];
    assert_eq!(
        media["schema"],
        json!({"$ref": "#/components/schemas/Item"})
    );
    assert_eq!(media["example"]["name"], "string");
    assert_eq!(
        items["responses"]["200"]["content"]["application/json"]["schema"],
        json!({"$ref": "#/components/schemas/Item"})
    );
    assert!(items["responses"]["422"].is_object());
    let pair = &doc["paths"]["/pair"]["post"];
    assert_eq!(
        pair["requestBody"]["content"]["application/json"]["schema"]["required"],
        json!(["item", "tag", "importance"])
    );
    assert!(pair["responses"]["201"].is_object(), "{pair:#}");
    assert!(doc["paths"]["/users/{user_id}"]["delete"]["responses"]["204"].is_object());

    let params = doc["paths"]["/search"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .clone();
    let find = |name: &str| {
        params
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name}: {params:#?}"))
    };
    assert_eq!(
        find("q"),
        json!({"name": "q", "in": "query", "required": true, "description": "Text to find.",
               "schema": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"}})
    );
    assert_eq!(
        find("page")["schema"],
        json!({"type": "integer", "minimum": 1, "maximum": 100, "default": 1})
    );
    assert_eq!(find("sort-by")["in"], "query");
    assert_eq!(find("user-agent")["in"], "header");
    assert_eq!(find("user-agent")["required"], true);
    assert_eq!(find("x-token")["in"], "header");
    assert_eq!(find("session")["in"], "cookie");
    let path = &doc["paths"]["/users/{user_id}"]["get"]["parameters"][0];
    assert_eq!(path["schema"], json!({"type": "integer", "minimum": 1}));
    assert_eq!(path["description"], "The user's number.");

    let login = &doc["paths"]["/login"]["post"]["requestBody"]["content"];
    assert_eq!(
        login["application/x-www-form-urlencoded"]["schema"]["properties"]["username"]["minLength"],
        3
    );
    let upload =
        &doc["paths"]["/upload"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"];
    assert_eq!(upload["properties"]["file"]["format"], "binary");
    assert_eq!(upload["required"], json!(["file", "raw"]));

    // /docs shows the body with its example, ready to send.
    let page = server.get("/docs").text().unwrap();
    assert!(
        page.contains("&quot;name&quot;: &quot;string&quot;")
            || page.contains("\"name\": \"string\""),
        "no example body in /docs"
    );
    assert!(page.contains("data-content-type=\"application/x-www-form-urlencoded\""));
}
