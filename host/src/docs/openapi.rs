//! `/openapi.json`: the catalog as an OpenAPI 3.1 document.
//!
//! Every route and method the route files define (HEAD and OPTIONS only when a file defines
//! them; the automatic ones are not operations), path parameters typed from the handlers' hints,
//! query parameters from their signatures with the docstring's descriptions, and the responses
//! the framework itself produces (404, 413, 422 with FastAPI's `HTTPValidationError`; 405 is in
//! `components`). Not for: rendering (see `page`), or deciding whether the document is served.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::{bare_path, framework_errors, operation_ids, security_schemes, tags_of, takes_body};
use crate::catalog::{Catalog, Operation, PathParam, QueryParam, RouteEntry};

/// The OpenAPI 3.1 document of `catalog`.
pub fn openapi(catalog: &Catalog) -> Value {
    let ids = operation_ids(catalog);
    let mut paths = Map::new();
    let mut named = Map::new();
    let catalog = &with_unique_schemas(catalog, &mut named);
    for (route, ids) in catalog.routes.iter().zip(&ids) {
        let item = path_item(route, ids, &route.path_params);
        insert_item(&mut paths, &route.path, item);
        // `/shop/{slug}` for `[[...slug]]` also serves `/shop`, with an empty list.
        if let Some(bare) = bare_path(route, catalog) {
            let params = &route.path_params[..route.path_params.len() - 1];
            let bare_ids: Vec<String> = ids.iter().map(|id| format!("{id}_bare")).collect();
            insert_item(&mut paths, &bare, path_item(route, &bare_ids, params));
        }
    }
    one_name_per_mode(&mut named, &mut paths);
    let mut info = Map::new();
    info.insert("title".into(), json!(catalog.project.title));
    if let Some(description) = &catalog.project.description {
        info.insert("description".into(), json!(description));
    }
    info.insert("version".into(), json!(catalog.project.version));
    json!({
        "openapi": "3.1.0",
        "info": info,
        "paths": paths,
        "tags": tags(catalog),
        "components": components(named, security_schemes(catalog)),
    })
}

/// The document's Tag Objects: config.py's `openapi_tags` as given (with their descriptions),
/// then every other tag an operation has, in catalog order.
fn tags(catalog: &Catalog) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for tag in &catalog.project.tags {
        if let Some(name) = tag.get("name").and_then(Value::as_str)
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_string());
            out.push(tag.clone());
        }
    }
    for route in &catalog.routes {
        for op in &route.handlers {
            for tag in tags_of(route, op) {
                if !names.contains(&tag) {
                    out.push(json!({"name": tag}));
                    names.push(tag);
                }
            }
        }
    }
    out
}

/// The names of the framework's own schemas.
const RESERVED: [&str; 3] = ["HTTPError", "ValidationError", "HTTPValidationError"];

/// The catalog with every handler's named schemas (dataclasses, TypedDicts, enums) gathered
/// into `named`; two different schemas of one name (an `Item` in two route files) get
/// distinct names (`Item`, `Item2`), and the references follow.
fn with_unique_schemas(catalog: &Catalog, named: &mut Map<String, Value>) -> Catalog {
    let mut catalog = catalog.clone();
    for route in &mut catalog.routes {
        for op in &mut route.handlers {
            let mut renames: Vec<(String, String)> = Vec::new();
            for (name, schema) in &op.schemas {
                let mut chosen = name.clone();
                let mut n = 1;
                loop {
                    match named.get(&chosen) {
                        None if !RESERVED.contains(&chosen.as_str()) => break,
                        None => {
                            n += 1;
                            chosen = format!("{name}{n}");
                        }
                        Some(existing) if same_schema(existing, schema, &renames) => break,
                        Some(_) => {
                            n += 1;
                            chosen = format!("{name}{n}");
                        }
                    }
                }
                if chosen != *name {
                    renames.push((name.clone(), chosen));
                }
            }
            let mut schemas = std::mem::take(&mut op.schemas);
            for value in schemas.values_mut() {
                rename_refs(value, &renames);
            }
            for (name, schema) in schemas {
                let name = renames
                    .iter()
                    .find(|(old, _)| *old == name)
                    .map_or(name, |(_, new)| new.clone());
                named.entry(name).or_insert(schema);
            }
            for value in op.request_body.iter_mut().chain(op.response.iter_mut()) {
                rename_refs(value, &renames);
            }
            for value in op.responses.values_mut() {
                rename_refs(value, &renames);
            }
            for param in &mut op.query_params {
                if let Some(schema) = &mut param.schema {
                    rename_refs(schema, &renames);
                }
            }
        }
    }
    catalog
}

fn same_schema(existing: &Value, schema: &Value, renames: &[(String, String)]) -> bool {
    let mut renamed = schema.clone();
    rename_refs(&mut renamed, renames);
    *existing == renamed
}

fn rename_refs(value: &mut Value, renames: &[(String, String)]) {
    if renames.is_empty() {
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get_mut("$ref")
                && let Some(name) = target.strip_prefix("#/components/schemas/")
                && let Some((_, new)) = renames.iter().find(|(old, _)| old == name)
            {
                *target = format!("#/components/schemas/{new}");
            }
            for child in map.values_mut() {
                rename_refs(child, renames);
            }
        }
        Value::Array(items) => {
            for child in items {
                rename_refs(child, renames);
            }
        }
        _ => {}
    }
}

/// pydantic names a model whose schema as a request sends it differs from its schema as a
/// handler returns it (a computed field, a serializer) `Model-Input` and `Model-Output`, and the
/// guest describes every pydantic model both ways (guest-python/filerouter/adapters.py). As in
/// FastAPI, which describes each model only in the ways the app uses it, the document keeps
/// both names only when it refers to both: one it never refers to is dropped, and the one left
/// is `Model`.
fn one_name_per_mode(named: &mut Map<String, Value>, paths: &mut Map<String, Value>) {
    fn mode_of(name: &str) -> Option<(&str, &str)> {
        name.strip_suffix("-Input")
            .map(|base| (base, "-Output"))
            .or_else(|| name.strip_suffix("-Output").map(|base| (base, "-Input")))
    }
    if !named.keys().any(|name| mode_of(name).is_some()) {
        return;
    }
    let mut reached: HashSet<String> = HashSet::new();
    let mut todo: Vec<String> = Vec::new();
    for item in paths.values() {
        schema_refs(item, &mut todo);
    }
    while let Some(name) = todo.pop() {
        if reached.insert(name.clone())
            && let Some(schema) = named.get(&name)
        {
            schema_refs(schema, &mut todo);
        }
    }
    named.retain(|name, _| mode_of(name).is_none() || reached.contains(name));
    let renames: Vec<(String, String)> = named
        .keys()
        .filter_map(|name| {
            let (base, other) = mode_of(name)?;
            let alone = !named.contains_key(&format!("{base}{other}")) && !named.contains_key(base);
            alone.then(|| (name.clone(), base.to_string()))
        })
        .collect();
    if renames.is_empty() {
        return;
    }
    for (name, mut schema) in std::mem::take(named) {
        rename_refs(&mut schema, &renames);
        let name = renames
            .iter()
            .find(|(old, _)| *old == name)
            .map_or(name, |(_, new)| new.clone());
        named.insert(name, schema);
    }
    for item in paths.values_mut() {
        rename_refs(item, &renames);
    }
}

/// The names of the named schemas `value` refers to (`#/components/schemas/<name>`), pushed
/// onto `out`.
fn schema_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref")
                && let Some(name) = target.strip_prefix("#/components/schemas/")
            {
                out.push(name.to_string());
            }
            for child in map.values() {
                schema_refs(child, out);
            }
        }
        Value::Array(items) => {
            for child in items {
                schema_refs(child, out);
            }
        }
        _ => {}
    }
}

/// Add `item`'s operations to the path item at `path` (two files never share a path, but the
/// bare path of an optional catch-all is merged rather than overwritten, to be safe).
fn insert_item(paths: &mut Map<String, Value>, path: &str, item: Map<String, Value>) {
    match paths.get_mut(path).and_then(Value::as_object_mut) {
        Some(existing) => {
            for (method, operation) in item {
                existing.entry(method).or_insert(operation);
            }
        }
        None => {
            paths.insert(path.to_string(), Value::Object(item));
        }
    }
}

fn path_item(route: &RouteEntry, ids: &[String], params: &[PathParam]) -> Map<String, Value> {
    route
        .handlers
        .iter()
        .zip(ids)
        .map(|(op, id)| {
            let tags = tags_of(route, op);
            (
                op.method.to_ascii_lowercase(),
                operation(op, id, &tags, params),
            )
        })
        .collect()
}

fn operation(op: &Operation, id: &str, tags: &[String], path_params: &[PathParam]) -> Value {
    let mut out = Map::new();
    out.insert("tags".into(), json!(tags));
    if let Some(summary) = &op.summary {
        out.insert("summary".into(), json!(summary));
    }
    if let Some(description) = &op.description {
        out.insert("description".into(), json!(description));
    }
    out.insert("operationId".into(), json!(id));
    let mut parameters: Vec<Value> = path_params.iter().map(path_parameter).collect();
    parameters.extend(op.query_params.iter().map(query_parameter));
    if !parameters.is_empty() {
        out.insert("parameters".into(), Value::Array(parameters));
    }
    if let Some(body) = &op.request_body {
        out.insert("requestBody".into(), body.clone());
    } else if takes_body(&op.method) {
        out.insert(
            "requestBody".into(),
            json!({
                "description": "Any JSON value; the handler reads it with `await request.json()`.",
                "required": false,
                "content": {"application/json": {"schema": {}}},
            }),
        );
    }
    let mut responses = Map::new();
    let (status, mut success) = success_response(op.response.as_ref());
    if let Some(description) = &op.response_description {
        success["description"] = json!(description);
    }
    responses.insert(status, success);
    for (status, _) in framework_errors(path_params, op) {
        let component = match status {
            404 => "NotFound",
            413 => "PayloadTooLarge",
            _ => "ValidationError",
        };
        responses.insert(
            status.to_string(),
            json!({"$ref": format!("#/components/responses/{component}")}),
        );
    }
    if op.challenges {
        responses.insert(
            "401".into(),
            json!({"$ref": "#/components/responses/NotAuthenticated"}),
        );
    }
    // A handler may raise `HTTPException` with any status: `{"detail": ...}`.
    responses.insert(
        "default".into(),
        json!({"$ref": "#/components/responses/HTTPException"}),
    );
    declared_responses(&mut responses, &op.responses);
    out.insert("responses".into(), Value::Object(responses));
    if !op.security.is_empty() {
        out.insert("security".into(), Value::Array(op.security.clone()));
    }
    if op.deprecated {
        out.insert("deprecated".into(), json!(true));
    }
    Value::Object(out)
}

/// Add `@route(responses=...)` to an operation's responses: merged into the one of the same
/// status when it is the success response (its content types added to the annotation's),
/// otherwise in place of what the framework documents for that status.
fn declared_responses(responses: &mut Map<String, Value>, declared: &Map<String, Value>) {
    for (status, response) in declared {
        let Some(response) = response.as_object() else {
            continue;
        };
        match responses.get_mut(status) {
            Some(Value::Object(existing)) if !existing.contains_key("$ref") => {
                for (key, value) in response {
                    match (key.as_str(), existing.get_mut(key), value) {
                        ("content", Some(Value::Object(content)), Value::Object(more)) => {
                            for (media, item) in more {
                                content.insert(media.clone(), item.clone());
                            }
                        }
                        _ => {
                            existing.insert(key.clone(), value.clone());
                        }
                    }
                }
            }
            _ => {
                responses.insert(status.clone(), Value::Object(response.clone()));
            }
        }
    }
}

/// The status and Response Object of a successful answer: from the return annotation when
/// the handler has one (`-> Item`, `-> tuple[Item, Literal[201]]`, `-> None` for 204),
/// otherwise 200 with any JSON.
fn success_response(declared: Option<&Value>) -> (String, Value) {
    let status = declared
        .and_then(|d| d.get("status"))
        .and_then(Value::as_u64)
        .filter(|s| (200..600).contains(s))
        .unwrap_or(200);
    let description = match status {
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        _ => "Successful Response",
    };
    if status == 204 {
        return (status.to_string(), json!({"description": description}));
    }
    let media = declared
        .and_then(|d| d.get("media_type"))
        .and_then(Value::as_str)
        .unwrap_or("application/json");
    let schema = declared
        .and_then(|d| d.get("schema"))
        .filter(|s| !s.is_null())
        .cloned()
        .unwrap_or_else(|| {
            if media == "application/json" {
                json!({})
            } else {
                json!({"type": "string"})
            }
        });
    (
        status.to_string(),
        json!({"description": description, "content": {media: {"schema": schema}}}),
    )
}

/// The JSON Schema of a value of `kind` (`choices` for an enum).
fn schema(kind: &str, choices: &[String]) -> Map<String, Value> {
    let mut schema = Map::new();
    match kind {
        "int" => {
            schema.insert("type".into(), json!("integer"));
        }
        "float" => {
            schema.insert("type".into(), json!("number"));
        }
        "bool" => {
            schema.insert("type".into(), json!("boolean"));
        }
        "uuid" => {
            schema.insert("type".into(), json!("string"));
            schema.insert("format".into(), json!("uuid"));
        }
        "enum" if !choices.is_empty() => {
            schema.insert("type".into(), json!("string"));
            schema.insert("enum".into(), json!(choices));
        }
        "list" => {
            schema.insert("type".into(), json!("array"));
            schema.insert("items".into(), json!({"type": "string"}));
        }
        _ => {
            schema.insert("type".into(), json!("string"));
        }
    }
    schema
}

fn path_parameter(param: &PathParam) -> Value {
    let declared = param.schema.clone().filter(|_| param.shape == "single");
    let catch_all = match param.shape {
        "catch_all" => Some(
            "One or more path segments separated by `/` (`a/b/c`); the handler gets them as a \
             list. A `/` inside one segment is sent as `%2F`.",
        ),
        "optional_catch_all" => Some(
            "Zero or more path segments separated by `/`; the handler gets them as a list \
             (empty for the path without them).",
        ),
        _ => None,
    };
    let schema = match (catch_all, declared) {
        (Some(_), _) => schema("str", &[]),
        (None, Some(Value::Object(declared))) => without_default(declared),
        (None, _) => schema(&param.kind, &param.choices),
    };
    let description = match (&param.description, catch_all) {
        (Some(own), Some(shape)) => Some(format!("{own}\n\n{shape}")),
        (Some(own), None) => Some(own.clone()),
        (None, shape) => shape.map(str::to_string),
    };
    let mut out = Map::new();
    out.insert("name".into(), json!(param.name));
    out.insert("in".into(), json!("path"));
    out.insert("required".into(), json!(true));
    if let Some(description) = description {
        out.insert("description".into(), json!(description));
    }
    out.insert("schema".into(), Value::Object(schema));
    if catch_all.is_some() {
        out.insert("x-filerouter-catch-all".into(), json!(true));
    }
    Value::Object(out)
}

/// A path parameter's schema carries no default (it is always given).
fn without_default(mut schema: Map<String, Value>) -> Map<String, Value> {
    schema.remove("default");
    schema
}

fn query_parameter(param: &QueryParam) -> Value {
    let mut schema = match &param.schema {
        Some(Value::Object(declared)) => without_default(declared.clone()),
        _ => schema(&param.kind, &param.choices),
    };
    if let Some(default) = param.default.as_ref().filter(|d| !d.is_null()) {
        schema.insert("default".into(), default.clone());
    }
    let mut out = Map::new();
    out.insert("name".into(), json!(param.name));
    out.insert("in".into(), json!(param.location));
    out.insert("required".into(), json!(param.required));
    if let Some(description) = &param.description {
        out.insert("description".into(), json!(description));
    }
    out.insert("schema".into(), Value::Object(schema));
    if param.kind == "list" && param.location == "query" {
        // `?tag=a&tag=b`, read with `query_params.getlist`.
        out.insert("style".into(), json!("form"));
        out.insert("explode".into(), json!(true));
    }
    Value::Object(out)
}

/// FastAPI's validation error schemas, the project's named schemas and security schemes, and
/// the responses the framework answers by itself.
fn components(named: Map<String, Value>, security: Map<String, Value>) -> Value {
    let detail = |example: &str| {
        json!({
            "application/json": {
                "schema": {"$ref": "#/components/schemas/HTTPError"},
                "example": {"detail": example},
            }
        })
    };
    let mut doc = json!({
        "schemas": {
            "HTTPError": {
                "title": "HTTPError",
                "type": "object",
                "properties": {"detail": {"title": "Detail"}},
                "required": ["detail"],
            },
            "ValidationError": {
                "title": "ValidationError",
                "type": "object",
                "properties": {
                    "loc": {
                        "title": "Location",
                        "type": "array",
                        "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                    },
                    "msg": {"title": "Message", "type": "string"},
                    "type": {"title": "Error Type", "type": "string"},
                    "input": {"title": "Input"},
                    "ctx": {"title": "Context", "type": "object"},
                },
                "required": ["loc", "msg", "type"],
            },
            "HTTPValidationError": {
                "title": "HTTPValidationError",
                "type": "object",
                "properties": {
                    "detail": {
                        "title": "Detail",
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/ValidationError"},
                    },
                },
            },
        },
        "responses": {
            "NotFound": {
                "description": "Not Found: no route matches the path (or the handler raised \
                                HTTPException(404)); the project's not-found.py may answer instead",
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/HTTPError"},
                        "example": {"detail": "Not Found"},
                    },
                    "text/html": {"schema": {"type": "string"}},
                },
            },
            "MethodNotAllowed": {
                "description": "Method Not Allowed: the path exists but its route file defines \
                                no handler for the method",
                "headers": {
                    "Allow": {
                        "description": "The methods the path serves",
                        "schema": {"type": "string"},
                    },
                },
                "content": detail("Method Not Allowed"),
            },
            "PayloadTooLarge": {
                "description": "Request body larger than `sandbox.max_body_bytes`",
                "content": detail("Request body too large"),
            },
            "ValidationError": {
                "description": "Validation Error: a parameter or the body did not convert to \
                                its type or meet its constraints, or a required one is missing",
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/HTTPValidationError"},
                    },
                },
            },
            "NotAuthenticated": {
                "description": "Not authenticated: a security dependency found no credentials, \
                                or malformed ones (`filerouter.security`)",
                "headers": {
                    "WWW-Authenticate": {
                        "description": "The scheme to authenticate with (`Bearer`, `Basic`, `APIKey`)",
                        "schema": {"type": "string"},
                    },
                },
                "content": detail("Not authenticated"),
            },
            "HTTPException": {
                "description": "An HTTPException the handler (or a dependency) raised",
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/HTTPError"},
                    },
                },
            },
        },
    });
    if let Some(schemas) = doc["schemas"].as_object_mut() {
        for (name, schema) in named {
            schemas.entry(name).or_insert(schema);
        }
    }
    if !security.is_empty() {
        doc["securitySchemes"] = Value::Object(security);
    }
    doc
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::docs::tests::sample;

    fn op<'a>(doc: &'a Value, path: &str, method: &str) -> &'a Value {
        &doc["paths"][path][method]
    }

    #[test]
    fn info_comes_from_the_project() {
        let doc = openapi(&sample());
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(
            doc["info"],
            json!({"title": "Demo <API>", "description": "A & B", "version": "2.0.0"})
        );
    }

    #[test]
    fn every_route_and_method_is_an_operation() {
        let doc = openapi(&sample());
        let paths = doc["paths"].as_object().unwrap();
        for path in [
            "/",
            "/users",
            "/users/{id}",
            "/orders/{order_id}",
            "/colors/{color}",
            "/files/{path}",
        ] {
            assert!(paths.contains_key(path), "{path}: {doc:#}");
        }
        assert!(op(&doc, "/users", "post").is_object());
        assert!(op(&doc, "/users/{id}", "delete").is_object());
        assert!(op(&doc, "/users/{id}", "head").is_null());
        assert_eq!(
            op(&doc, "/users/{id}", "get")["operationId"],
            "get_users_id"
        );
        assert_eq!(op(&doc, "/users/{id}", "get")["tags"], json!(["users"]));
        assert_eq!(op(&doc, "/", "get")["tags"], json!(["root"]));
        assert_eq!(op(&doc, "/", "get")["summary"], "Say hello.");
    }

    #[test]
    fn path_parameters_are_typed() {
        let doc = openapi(&sample());
        let first = |path: &str| op(&doc, path, "get")["parameters"][0].clone();
        assert_eq!(first("/users/{id}")["schema"], json!({"type": "integer"}));
        assert_eq!(first("/users/{id}")["in"], "path");
        assert_eq!(first("/users/{id}")["required"], true);
        assert_eq!(first("/users/{id}")["description"], "The user's <number>.");
        assert_eq!(
            first("/orders/{order_id}")["schema"],
            json!({"type": "string", "format": "uuid"})
        );
        assert_eq!(
            first("/colors/{color}")["schema"],
            json!({"type": "string", "enum": ["red", "green"]})
        );
        let rest = first("/files/{path}");
        assert_eq!(rest["schema"], json!({"type": "string"}));
        assert_eq!(rest["x-filerouter-catch-all"], true);
        assert!(rest["description"].as_str().unwrap().contains('/'));
    }

    #[test]
    fn optional_catch_alls_have_a_bare_path_too() {
        let doc = openapi(&sample());
        assert!(op(&doc, "/shop/{slug}", "get").is_object());
        let bare = op(&doc, "/shop", "get");
        assert!(bare["parameters"].is_null(), "{bare:#}");
        assert_eq!(bare["operationId"], "get_shop_slug_bare");
    }

    #[test]
    fn query_parameters_have_types_defaults_and_descriptions() {
        let doc = openapi(&sample());
        let params = op(&doc, "/users", "get")["parameters"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(
            params[0],
            json!({"name": "q", "in": "query", "required": false,
                   "description": "Text to <search> for.", "schema": {"type": "string"}})
        );
        assert_eq!(
            params[1]["schema"],
            json!({"type": "integer", "default": 10})
        );
        assert_eq!(params[1]["required"], false);
        assert_eq!(
            params[2]["schema"],
            json!({"type": "array", "items": {"type": "string"}})
        );
        assert_eq!(params[2]["explode"], true);
        assert_eq!(
            op(&doc, "/users", "get")["description"],
            "Filtered by `q`.\nSecond line."
        );
    }

    #[test]
    fn framework_responses_are_documented() {
        let doc = openapi(&sample());
        let responses = |path: &str, method: &str| op(&doc, path, method)["responses"].clone();
        assert_eq!(
            responses("/", "get")
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["200", "default"]
        );
        assert_eq!(
            responses("/users/{id}", "get")["422"]["$ref"],
            "#/components/responses/ValidationError"
        );
        assert_eq!(
            responses("/users/{id}", "get")["404"]["$ref"],
            "#/components/responses/NotFound"
        );
        assert!(responses("/files/{path}", "get")["422"].is_null());
        assert!(responses("/users", "get")["422"].is_object());
        assert!(responses("/users", "post")["413"].is_object());
        assert_eq!(op(&doc, "/users", "post")["requestBody"]["required"], false);
        assert!(op(&doc, "/users", "get")["requestBody"].is_null());
        let components = &doc["components"];
        assert!(components["schemas"]["HTTPValidationError"].is_object());
        assert!(components["responses"]["MethodNotAllowed"]["headers"]["Allow"].is_object());
    }

    #[test]
    fn route_metadata_and_security_shape_the_operation() {
        let mut catalog = sample();
        catalog.project.tags = vec![json!({"name": "people", "description": "Who"})];
        {
            let list = &mut catalog.routes[1].handlers[0];
            list.tags = vec!["people".into(), "search".into()];
            list.deprecated = true;
            list.operation_id = Some("get_users_id".into());
            list.response_description = Some("The users".into());
            list.responses = serde_json::from_value(json!({
                "200": {"description": "Users", "content": {"text/csv": {}}},
                "404": {"description": "No such user"},
                "4XX": {"description": "Some client error"},
            }))
            .unwrap();
            list.security = vec![json!({"Bearer": ["read"]})];
            list.security_schemes =
                serde_json::from_value(json!({"Bearer": {"type": "http", "scheme": "bearer"}}))
                    .unwrap();
            list.challenges = true;
        }
        let doc = openapi(&catalog);
        let list = op(&doc, "/users", "get");
        assert_eq!(list["tags"], json!(["people", "search"]));
        assert_eq!(list["deprecated"], true);
        // A declared id is kept; the generated one it took moves aside.
        assert_eq!(list["operationId"], "get_users_id");
        assert_eq!(
            op(&doc, "/users/{id}", "get")["operationId"],
            "get_users_id_2"
        );
        // The success response merges; other statuses are added or replace the framework's.
        let responses = &list["responses"];
        assert_eq!(responses["200"]["description"], "Users");
        assert_eq!(
            responses["200"]["content"],
            json!({"application/json": {"schema": {}}, "text/csv": {}})
        );
        assert_eq!(responses["404"], json!({"description": "No such user"}));
        assert_eq!(responses["4XX"]["description"], "Some client error");
        assert_eq!(
            responses["401"]["$ref"],
            "#/components/responses/NotAuthenticated"
        );
        assert_eq!(list["security"], json!([{"Bearer": ["read"]}]));
        assert_eq!(
            doc["components"]["securitySchemes"],
            json!({"Bearer": {"type": "http", "scheme": "bearer"}})
        );
        // Declared tags first, described; then the rest in catalog order.
        let names: Vec<&str> = doc["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names[..3], ["people", "root", "search"]);
        assert_eq!(doc["tags"][0]["description"], "Who");
        // Operations without any keep their defaults.
        assert!(op(&doc, "/", "get")["security"].is_null());
        assert!(op(&doc, "/", "get")["deprecated"].is_null());
        assert!(doc["components"]["responses"]["NotAuthenticated"].is_object());
        assert!(openapi(&sample())["components"]["securitySchemes"].is_null());
    }

    #[test]
    fn a_model_keeps_its_input_and_output_names_only_when_both_are_used() {
        let refer = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
        let object = |field: Value| json!({"type": "object", "properties": {"f": field}});
        let named_of = |pairs: &[(&str, Value)]| -> Map<String, Value> {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect()
        };
        // `Item` used only as a body, `Tag` (inside it) used both ways through `Pair`.
        let mut named = named_of(&[
            ("Item-Input", object(refer("Tag-Input"))),
            ("Item-Output", object(refer("Tag-Output"))),
            ("Tag-Input", object(json!({"type": "string"}))),
            ("Tag-Output", object(json!({"type": "integer"}))),
            ("Pair-Input", object(refer("Tag-Input"))),
            ("Pair-Output", object(refer("Tag-Output"))),
            ("Plain", object(json!({}))),
        ]);
        let mut paths: Map<String, Value> = [(
            "/items".to_string(),
            json!({
                "post": {"requestBody": {"content": {"application/json": {"schema": refer("Item-Input")}}}},
                "put": {"responses": {"200": {"content": {"application/json": {"schema": refer("Tag-Output")}}}}},
            }),
        )]
        .into_iter()
        .collect();
        one_name_per_mode(&mut named, &mut paths);
        let mut names: Vec<&str> = named.keys().map(String::as_str).collect();
        names.sort_unstable();
        // The unused `Item-Output` and `Pair-*` are gone, `Item` is itself again, `Tag` is
        // used both ways and keeps both names; a schema that never had two names stays.
        assert_eq!(names, ["Item", "Plain", "Tag-Input", "Tag-Output"]);
        assert_eq!(named["Item"], object(refer("Tag-Input")));
        assert_eq!(
            paths["/items"]["post"]["requestBody"]["content"]["application/json"]["schema"],
            refer("Item")
        );
        // One used one way only is renamed where it is referred to, in schemas too.
        let mut named = named_of(&[
            ("Outer-Input", object(refer("Inner-Input"))),
            ("Inner-Input", object(json!({}))),
            ("Inner-Output", object(json!({"readOnly": true}))),
        ]);
        let mut paths: Map<String, Value> = [("/o".to_string(), refer("Outer-Input"))]
            .into_iter()
            .collect();
        one_name_per_mode(&mut named, &mut paths);
        assert_eq!(named["Outer"], object(refer("Inner")));
        assert!(named.contains_key("Inner") && named.len() == 2, "{named:?}");
        assert_eq!(paths["/o"], refer("Outer"));
    }

    #[test]
    fn an_empty_catalog_is_still_a_document() {
        let mut catalog = sample();
        catalog.routes.clear();
        let doc = openapi(&catalog);
        assert_eq!(doc["paths"], json!({}));
        assert_eq!(doc["tags"], json!([]));
    }
}
