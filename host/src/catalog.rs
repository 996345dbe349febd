//! The project's API as data: every route with its handlers, parameters and docstrings, the
//! statistics, and the project's title and version.
//!
//! This is what `/docs`, `/openapi.json`, and the `context` of `docs.py` and `not-found.py`
//! describe. It is built from what the guest reported when it inspected the route files (in
//! `run`, from the build cache); nothing here runs project code. Routes whose file fails to
//! import are left out.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    config::Settings,
    project::Project,
    routes::{Pattern, Segment},
    sandbox::{HandlerInfo, HandlerParam},
};

/// The methods in the order the reference lists them.
pub const METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// The whole API.
#[derive(Debug, Clone, Serialize)]
pub struct Catalog {
    /// The HTTP routes: what `/openapi.json` describes and the statistics count.
    pub routes: Vec<RouteEntry>,
    /// The paths that accept WebSocket connections (a `WEBSOCKET` handler), which `/docs`
    /// lists apart; OpenAPI has no way to describe them (FastAPI leaves them out too).
    pub websockets: Vec<WebSocketEntry>,
    pub statistics: Statistics,
    pub project: ProjectInfo,
}

/// One route: a path and the handlers its file defines.
#[derive(Debug, Clone, Serialize)]
pub struct RouteEntry {
    /// OpenAPI-style path (`/users/{id}`; a catch-all is one `{rest}`).
    pub path: String,
    /// The route file, relative to the project (`routes/users/[id]/route.py`).
    pub file: String,
    /// The methods its file defines, in [`METHODS`] order.
    pub methods: Vec<String>,
    /// Whether the path has dynamic segments.
    pub dynamic: bool,
    /// The path parameters, in URL order.
    pub path_params: Vec<PathParam>,
    pub handlers: Vec<Operation>,
}

/// A path whose route file defines a `WEBSOCKET` handler.
#[derive(Debug, Clone, Serialize)]
pub struct WebSocketEntry {
    pub path: String,
    /// The route file, relative to the project (`routes/chat/route.py`).
    pub file: String,
    pub summary: Option<String>,
    pub description: Option<String>,
    /// The handler's query, header and cookie parameters.
    pub query_params: Vec<QueryParam>,
}

/// A path parameter of a route.
#[derive(Debug, Clone, Serialize)]
pub struct PathParam {
    pub name: String,
    /// The type the handler converts it to: `int`, `float`, `str`, `bool`, `uuid`, `enum`,
    /// `list` (catch-alls).
    #[serde(rename = "type")]
    pub kind: String,
    /// For an `Enum` hint, the allowed values.
    pub choices: Vec<String>,
    /// `single`, `catch_all` (one or more segments) or `optional_catch_all` (zero or more).
    pub shape: &'static str,
    /// Its description from the docstring of the first handler that describes it.
    pub description: Option<String>,
    /// Its JSON Schema with declared constraints (`Path(ge=1)`), when a handler gave one.
    pub schema: Option<serde_json::Value>,
}

/// One handler (one path and method).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Operation {
    pub method: String,
    pub summary: Option<String>,
    pub description: Option<String>,
    /// The whole docstring.
    pub doc: Option<String>,
    pub is_async: bool,
    /// Query, header and cookie parameters, from the signature (and its dependencies),
    /// described by `Query(description=...)` or the docstring.
    pub query_params: Vec<QueryParam>,
    /// The request body as an OpenAPI Request Body Object, when the handler declares one
    /// (a dataclass parameter, `Body()`, `Form()`, `File()`...).
    pub request_body: Option<serde_json::Value>,
    /// The successful response from the return annotation: `{"status": 200, "schema": ...}`.
    pub response: Option<serde_json::Value>,
    /// Named schemas the body and response refer to (`#/components/schemas/<name>`).
    pub schemas: serde_json::Map<String, serde_json::Value>,
    /// `@route(tags=[...])`: the groups it is listed under; empty: its path's first segment.
    pub tags: Vec<String>,
    /// `@route(deprecated=True)`.
    pub deprecated: bool,
    /// `@route(operation_id=...)`: its `operationId`, instead of the generated one.
    pub operation_id: Option<String>,
    /// `@route(response_description=...)`: the success response's description.
    pub response_description: Option<String>,
    /// `@route(responses={...})`: more OpenAPI Response Objects, by status (`"404"`, `"4XX"`,
    /// `"default"`).
    pub responses: serde_json::Map<String, serde_json::Value>,
    /// The OpenAPI `security` of the operation: one requirement object (`{"OAuth2PasswordBearer":
    /// ["scope"]}`) per security scheme it depends on (`filerouter.security`).
    pub security: Vec<serde_json::Value>,
    /// Those schemes' OpenAPI Security Scheme Objects, by name.
    pub security_schemes: serde_json::Map<String, serde_json::Value>,
    /// Whether one of its schemes answers 401 when credentials are missing (`auto_error`).
    pub challenges: bool,
}

/// A query, header or cookie parameter of a handler.
#[derive(Debug, Clone, Serialize)]
pub struct QueryParam {
    /// The name the client sends (a header's name, a query parameter's alias).
    pub name: String,
    /// `query`, `header` or `cookie`.
    pub location: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub choices: Vec<String>,
    pub required: bool,
    /// The default value, when JSON can express it.
    pub default: Option<serde_json::Value>,
    pub description: Option<String>,
    /// Its JSON Schema with declared constraints, when the handler gave one.
    pub schema: Option<serde_json::Value>,
}

/// What the API holds. `total_routes`, `static_routes`, `dynamic_routes` and `methods` count
/// handlers (one per path and method), as DECISIONS.md defines them; `total_handlers` is
/// `total_routes` under a name that says so, and `total_paths` counts the routes as
/// `get_routes()` lists them (one per route file that imports).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Statistics {
    pub total_routes: usize,
    pub static_routes: usize,
    pub dynamic_routes: usize,
    pub methods: BTreeMap<String, usize>,
    pub total_handlers: usize,
    pub total_paths: usize,
}

impl Statistics {
    /// The counts for `routes`.
    pub fn of(routes: &[RouteEntry]) -> Statistics {
        let mut statistics = Statistics {
            total_paths: routes.len(),
            ..Statistics::default()
        };
        for route in routes {
            for method in &route.methods {
                statistics.total_routes += 1;
                statistics.total_handlers += 1;
                if route.dynamic {
                    statistics.dynamic_routes += 1;
                } else {
                    statistics.static_routes += 1;
                }
                *statistics.methods.entry(method.clone()).or_default() += 1;
            }
        }
        statistics
    }
}

/// The project's name, description and version (config.py).
#[derive(Debug, Clone, Serialize)]
pub struct ProjectInfo {
    pub title: String,
    pub description: Option<String>,
    pub version: String,
    pub app_name: Option<String>,
    /// `openapi_tags` from config.py: `{"name", "description", "externalDocs"}` objects, in
    /// the order `/docs` and `/openapi.json` list their groups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<serde_json::Value>,
}

impl ProjectInfo {
    /// `title` from config.py, else `app_name`, else "filerouter API"; `version` default "0.1.0".
    pub fn from_settings(settings: &Settings) -> ProjectInfo {
        ProjectInfo {
            title: settings
                .title
                .clone()
                .or_else(|| settings.app_name.clone())
                .unwrap_or_else(|| "filerouter API".to_string()),
            description: settings.description.clone(),
            version: settings
                .version
                .clone()
                .unwrap_or_else(|| "0.1.0".to_string()),
            app_name: settings.app_name.clone(),
            tags: settings.openapi_tags.clone().unwrap_or_default(),
        }
    }
}

impl Catalog {
    /// The catalog of `project`, sorted by path.
    pub fn of(project: &Project, info: ProjectInfo) -> Catalog {
        let mut routes: Vec<RouteEntry> = project
            .routes
            .iter()
            .filter_map(|route| {
                let handlers: Vec<HandlerInfo> = route
                    .handlers
                    .as_ref()
                    .ok()?
                    .iter()
                    .filter(|h| h.method != "WEBSOCKET")
                    .cloned()
                    .collect();
                if handlers.is_empty() {
                    return None;
                }
                let mut found = entry(&route.pattern, &route.file, &handlers);
                // `/products/` for a route declared with `TRAILING_SLASH = True`.
                found.path = route.path();
                Some(found)
            })
            .collect();
        let mut websockets: Vec<WebSocketEntry> = project
            .routes
            .iter()
            .filter_map(|route| {
                let handler = route.handler("WEBSOCKET")?;
                let described = entry(&route.pattern, &route.file, std::slice::from_ref(handler));
                let op = described.handlers.into_iter().next()?;
                Some(WebSocketEntry {
                    path: route.path(),
                    file: format!("routes/{}", route.file),
                    summary: op.summary,
                    description: op.description,
                    query_params: op.query_params,
                })
            })
            .collect();
        websockets.sort_by(|a, b| a.path.cmp(&b.path));
        routes.sort_by(|a, b| a.path.cmp(&b.path));
        Catalog {
            statistics: Statistics::of(&routes),
            routes,
            websockets,
            project: info,
        }
    }
}

fn entry(pattern: &Pattern, file: &str, handlers: &[HandlerInfo]) -> RouteEntry {
    let mut ordered: Vec<&HandlerInfo> = handlers.iter().collect();
    ordered.sort_by_key(|h| METHODS.iter().position(|m| *m == h.method));
    let path_params: Vec<PathParam> = pattern
        .0
        .iter()
        .filter_map(|segment| {
            let name = segment.param_name()?;
            // The first handler that takes the parameter tells its type.
            let hinted = handlers
                .iter()
                .flat_map(|h| h.params.iter())
                .find(|p| p.name == name);
            let (kind, choices) = match (segment.is_catch_all(), hinted) {
                (true, _) => ("list".to_string(), Vec::new()),
                (false, Some(p)) if p.kind != "any" && p.kind != "list" => {
                    (p.kind.clone(), p.choices.clone())
                }
                _ => ("str".to_string(), Vec::new()),
            };
            let description = handlers
                .iter()
                .flat_map(|h| h.params.iter())
                .find_map(|p| (p.name == name).then(|| p.description.clone()).flatten());
            let schema = match (segment.is_catch_all(), hinted) {
                (false, Some(p)) => parse_json(p.schema.as_deref()),
                _ => None,
            };
            Some(PathParam {
                name: name.to_string(),
                kind,
                choices,
                description,
                schema,
                shape: match segment {
                    Segment::CatchAll(_) => "catch_all",
                    Segment::OptionalCatchAll(_) => "optional_catch_all",
                    _ => "single",
                },
            })
        })
        .collect();
    let is_path = |p: &HandlerParam| {
        (p.location == "query" || p.location == "path")
            && path_params.iter().any(|pp| pp.name == p.name)
    };
    RouteEntry {
        path: pattern.to_string(),
        file: format!("routes/{file}"),
        methods: ordered.iter().map(|h| h.method.clone()).collect(),
        dynamic: !path_params.is_empty(),
        handlers: ordered
            .iter()
            .map(|h| {
                let openapi = parse_json(h.openapi.as_deref()).unwrap_or_default();
                Operation {
                    method: h.method.clone(),
                    summary: h.summary.clone(),
                    description: h.description.clone(),
                    doc: h.doc.clone(),
                    is_async: h.is_async,
                    query_params: h
                        .params
                        .iter()
                        .filter(|p| !is_path(p) && p.location != "path")
                        .map(|p| QueryParam {
                            name: p.name.clone(),
                            location: p.location.clone(),
                            kind: if p.kind == "any" {
                                "str".into()
                            } else {
                                p.kind.clone()
                            },
                            choices: p.choices.clone(),
                            required: !p.has_default,
                            default: p
                                .default_json
                                .as_deref()
                                .and_then(|d| serde_json::from_str(d).ok()),
                            description: p.description.clone(),
                            schema: parse_json(p.schema.as_deref()),
                        })
                        .collect(),
                    request_body: openapi
                        .get("request_body")
                        .filter(|v| !v.is_null())
                        .cloned(),
                    response: openapi.get("response").filter(|v| !v.is_null()).cloned(),
                    schemas: openapi
                        .get("schemas")
                        .and_then(|v| v.as_object())
                        .cloned()
                        .unwrap_or_default(),
                    ..declared(&openapi)
                }
            })
            .collect(),
        path_params,
    }
}

/// What `@route(...)` and the security dependencies add to an operation (the guest's
/// `operation`, `security`, `security_schemes` and `challenges`); the rest left empty.
fn declared(openapi: &serde_json::Value) -> Operation {
    let declared = openapi.get("operation").filter(|v| v.is_object());
    let text = |key: &str| {
        declared
            .and_then(|d| d.get(key))
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let object = |value: Option<&serde_json::Value>| {
        value
            .and_then(|v| v.as_object())
            .cloned()
            .unwrap_or_default()
    };
    Operation {
        tags: declared
            .and_then(|d| d.get("tags"))
            .and_then(|v| v.as_array())
            .map(|tags| {
                tags.iter()
                    .filter_map(|t| t.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        deprecated: declared
            .and_then(|d| d.get("deprecated"))
            .and_then(|v| v.as_bool())
            .unwrap_or(false),
        operation_id: text("operation_id").filter(|id| !id.is_empty()),
        response_description: text("response_description"),
        responses: object(declared.and_then(|d| d.get("responses"))),
        security: openapi
            .get("security")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default(),
        security_schemes: object(openapi.get("security_schemes")),
        challenges: openapi
            .get("challenges")
            .and_then(|v| v.as_bool())
            .unwrap_or(false),
        ..Operation::default()
    }
}

/// JSON text from the guest, when it parses (it always does; a bad one is left out).
fn parse_json(text: Option<&str>) -> Option<serde_json::Value> {
    text.and_then(|t| serde_json::from_str(t).ok())
}
