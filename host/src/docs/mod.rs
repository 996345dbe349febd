//! The built-in API reference: the `/docs` page and the `/openapi.json` document.
//!
//! Both are pure functions of the [`Catalog`] (what the guest reported about the route files;
//! nothing here runs project code or touches the network): [`openapi`] maps it to OpenAPI 3.1,
//! [`page`] renders it as one self-contained HTML page (CSS and script embedded, the route list
//! readable without JavaScript). Not here: when they are served (`docs_enabled`), the project's
//! `docs.py` replacement and middleware around them; the router decides those.

mod openapi;
mod page;

pub use openapi::openapi;
pub use page::page;

use std::collections::HashSet;

use crate::catalog::{Catalog, Operation, PathParam, RouteEntry};

/// The first segment of a path, which groups routes on the page and tags them in OpenAPI:
/// `users` for `/users/{id}`, `""` for `/`.
fn group_key(path: &str) -> &str {
    path.trim_start_matches('/').split('/').next().unwrap_or("")
}

/// The OpenAPI tag of a group: its key without braces, `root` for `/`.
fn tag_of(path: &str) -> String {
    let key = group_key(path)
        .trim_start_matches('{')
        .trim_end_matches('}');
    if key.is_empty() {
        "root".to_string()
    } else {
        key.to_string()
    }
}

/// A stable, unique identifier for every operation of the catalog, in catalog order
/// (route by route, handler by handler): `get_users_user_id` for `GET /users/{user_id}`, or the
/// handler's own `@route(operation_id=...)`, used as the OpenAPI `operationId` and as the page's
/// anchors. Declared ids are kept first; clashes get `_2`, `_3`, ...
fn operation_ids(catalog: &Catalog) -> Vec<Vec<String>> {
    let mut taken = HashSet::new();
    let declared: Vec<Vec<Option<String>>> = catalog
        .routes
        .iter()
        .map(|route| {
            route
                .handlers
                .iter()
                .map(|op| {
                    let id = op.operation_id.as_ref()?;
                    Some(unique(&mut taken, id.clone()))
                })
                .collect()
        })
        .collect();
    catalog
        .routes
        .iter()
        .zip(declared)
        .map(|(route, declared)| {
            route
                .handlers
                .iter()
                .zip(declared)
                .map(|(op, id)| {
                    id.unwrap_or_else(|| unique(&mut taken, base_id(&op.method, &route.path)))
                })
                .collect()
        })
        .collect()
}

/// The OpenAPI tags of an operation: its declared ones, else its path's group.
fn tags_of(route: &RouteEntry, op: &Operation) -> Vec<String> {
    if op.tags.is_empty() {
        vec![tag_of(&route.path)]
    } else {
        op.tags.clone()
    }
}

/// The security schemes of the whole catalog, by name (the first definition of a name wins).
fn security_schemes(catalog: &Catalog) -> serde_json::Map<String, serde_json::Value> {
    let mut schemes = serde_json::Map::new();
    for op in catalog.routes.iter().flat_map(|r| &r.handlers) {
        for (name, scheme) in &op.security_schemes {
            if !schemes.contains_key(name) {
                schemes.insert(name.clone(), scheme.clone());
            }
        }
    }
    schemes
}

/// The names of the schemes an operation's `security` lists, in order.
fn security_names(op: &Operation) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for requirement in &op.security {
        for name in requirement.as_object().into_iter().flat_map(|r| r.keys()) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    names
}

fn base_id(method: &str, path: &str) -> String {
    let mut id = method.to_ascii_lowercase();
    let mut last_underscore = false;
    for c in path.chars() {
        if c.is_ascii_alphanumeric() {
            if id.len() == method.len() || last_underscore {
                id.push('_');
            }
            id.push(c.to_ascii_lowercase());
            last_underscore = false;
        } else {
            last_underscore = true;
        }
    }
    if id.len() == method.len() {
        id.push_str("_root");
    }
    id
}

fn unique(taken: &mut HashSet<String>, base: String) -> String {
    if taken.insert(base.clone()) {
        return base;
    }
    (2..)
        .map(|n| format!("{base}_{n}"))
        .find(|candidate| taken.insert(candidate.clone()))
        .unwrap_or(base)
}

/// The path of an optional catch-all route with the catch-all left out (`/shop` for
/// `/shop/{slug}`, `/shop/` for a trailing-slash `/shop/{slug}/`), which it also serves,
/// unless another route already has that path.
fn bare_path(route: &RouteEntry, catalog: &Catalog) -> Option<String> {
    let last = route.path_params.last()?;
    if last.shape != "optional_catch_all" {
        return None;
    }
    let suffix = format!("/{{{}}}", last.name);
    let (path, slash) = match route.path.strip_suffix('/') {
        Some(path) if !path.is_empty() => (path, "/"),
        _ => (route.path.as_str(), ""),
    };
    let bare = path.strip_suffix(&suffix)?;
    let bare = if bare.is_empty() {
        "/".to_string()
    } else {
        format!("{bare}{slash}")
    };
    if catalog.routes.iter().any(|r| r.path == bare) {
        return None;
    }
    Some(bare)
}

/// Whether a parameter kind converts its text, so that a bad value is a 422.
fn converts(kind: &str) -> bool {
    !matches!(kind, "str" | "any")
}

/// Whether a declared schema has constraints a value may fail (`Query(ge=1)`, `max_length`...).
fn constrained(schema: Option<&serde_json::Value>) -> bool {
    const KEYS: [&str; 10] = [
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
    ];
    let Some(schema) = schema else {
        return false;
    };
    let own = KEYS.iter().any(|k| schema.get(k).is_some());
    let members = schema
        .get("anyOf")
        .and_then(|m| m.as_array())
        .is_some_and(|m| m.iter().any(|s| constrained(Some(s))));
    own || members
}

/// Whether the method may carry a JSON body that the handler reads.
fn takes_body(method: &str) -> bool {
    matches!(method, "POST" | "PUT" | "PATCH")
}

/// The error statuses the framework itself may answer for an operation, with what they mean:
/// 404 when the path has parameters, 413 for methods with a body, 422 when a parameter
/// converts or is required.
fn framework_errors(path_params: &[PathParam], op: &Operation) -> Vec<(u16, &'static str)> {
    let mut out = Vec::new();
    if !path_params.is_empty() {
        out.push((404, "Not Found"));
    }
    if takes_body(&op.method) {
        out.push((413, "Request body too large"));
    }
    let validates = path_params
        .iter()
        .any(|p| p.shape == "single" && (converts(&p.kind) || constrained(p.schema.as_ref())))
        || op
            .query_params
            .iter()
            .any(|q| q.required || converts(&q.kind) || constrained(q.schema.as_ref()))
        || op.request_body.is_some();
    if validates {
        out.push((422, "Validation Error"));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::catalog::{Operation, PathParam, ProjectInfo, QueryParam, Statistics};

    pub fn op(method: &str, summary: Option<&str>) -> Operation {
        Operation {
            method: method.into(),
            summary: summary.map(Into::into),
            description: None,
            doc: summary.map(Into::into),
            is_async: false,
            query_params: Vec::new(),
            request_body: None,
            response: None,
            schemas: serde_json::Map::new(),
            ..Operation::default()
        }
    }

    pub fn param(name: &str, kind: &str, shape: &'static str) -> PathParam {
        PathParam {
            name: name.into(),
            kind: kind.into(),
            choices: Vec::new(),
            shape,
            description: None,
            schema: None,
        }
    }

    pub fn query(name: &str, kind: &str, default: Option<serde_json::Value>) -> QueryParam {
        QueryParam {
            name: name.into(),
            location: "query".into(),
            kind: kind.into(),
            choices: Vec::new(),
            required: default.is_none(),
            default,
            description: None,
            schema: None,
        }
    }

    pub fn route(
        path: &str,
        file: &str,
        path_params: Vec<PathParam>,
        handlers: Vec<Operation>,
    ) -> RouteEntry {
        RouteEntry {
            path: path.into(),
            file: file.into(),
            methods: handlers.iter().map(|h| h.method.clone()).collect(),
            dynamic: !path_params.is_empty(),
            path_params,
            handlers,
        }
    }

    /// A catalog with one route of every kind.
    pub fn sample() -> Catalog {
        let mut list = op("GET", Some("List users."));
        list.description = Some("Filtered by `q`.\nSecond line.".into());
        list.query_params = vec![
            {
                let mut q = query("q", "str", None);
                q.required = false;
                q.description = Some("Text to <search> for.".into());
                q
            },
            query("limit", "int", Some(json!(10))),
            query("tag", "list", None),
        ];
        let mut color = param("color", "enum", "single");
        color.choices = vec!["red".into(), "green".into()];
        let routes = vec![
            route(
                "/",
                "routes/index.py",
                vec![],
                vec![op("GET", Some("Say hello."))],
            ),
            route(
                "/users",
                "routes/users/route.py",
                vec![],
                vec![list, op("POST", None)],
            ),
            route(
                "/users/{id}",
                "routes/users/[id]/route.py",
                vec![{
                    let mut id = param("id", "int", "single");
                    id.description = Some("The user's <number>.".into());
                    id
                }],
                vec![
                    op("GET", Some("One <b>user</b> & more.")),
                    op("DELETE", None),
                ],
            ),
            route(
                "/orders/{order_id}",
                "routes/orders/[order_id]/route.py",
                vec![param("order_id", "uuid", "single")],
                vec![op("GET", None)],
            ),
            route(
                "/colors/{color}",
                "routes/colors/[color]/route.py",
                vec![color],
                vec![op("GET", None)],
            ),
            route(
                "/files/{path}",
                "routes/files/[...path]/route.py",
                vec![param("path", "list", "catch_all")],
                vec![op("GET", None)],
            ),
            route(
                "/shop/{slug}",
                "routes/shop/[[...slug]]/route.py",
                vec![param("slug", "list", "optional_catch_all")],
                vec![op("GET", None)],
            ),
        ];
        Catalog {
            websockets: Vec::new(),
            statistics: Statistics::of(&routes),
            routes,
            project: ProjectInfo {
                title: "Demo <API>".into(),
                description: Some("A & B".into()),
                version: "2.0.0".into(),
                app_name: None,
                tags: Vec::new(),
            },
        }
    }

    #[test]
    fn groups_and_tags_come_from_the_first_segment() {
        assert_eq!(group_key("/"), "");
        assert_eq!(group_key("/users/{id}"), "users");
        assert_eq!(tag_of("/"), "root");
        assert_eq!(tag_of("/{slug}/x"), "slug");
    }

    #[test]
    fn operation_ids_are_readable_and_unique() {
        assert_eq!(base_id("GET", "/"), "get_root");
        assert_eq!(base_id("GET", "/users/{user_id}"), "get_users_user_id");
        assert_eq!(base_id("POST", "/v1.2/a-b"), "post_v1_2_a_b");
        let mut catalog = sample();
        catalog
            .routes
            .push(route("/users-", "x", vec![], vec![op("GET", None)]));
        let ids: Vec<String> = operation_ids(&catalog).into_iter().flatten().collect();
        let set: HashSet<&String> = ids.iter().collect();
        assert_eq!(set.len(), ids.len(), "{ids:?}");
        assert!(ids.contains(&"get_users_2".to_string()), "{ids:?}");
    }

    #[test]
    fn optional_catch_alls_also_serve_the_bare_path() {
        let catalog = sample();
        let shop = catalog
            .routes
            .iter()
            .find(|r| r.path == "/shop/{slug}")
            .unwrap();
        assert_eq!(bare_path(shop, &catalog).as_deref(), Some("/shop"));
        let files = catalog
            .routes
            .iter()
            .find(|r| r.path == "/files/{path}")
            .unwrap();
        assert_eq!(bare_path(files, &catalog), None);
    }
}
