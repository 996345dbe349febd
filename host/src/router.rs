//! From an HTTP request to a response: the steps between the socket and the guest.
//!
//! In order: body size limit (413), scan errors (500), trailing-slash redirect (307), route
//! lookup (404), method selection with automatic HEAD and OPTIONS (405 with `Allow`), then the
//! handler runs in a fresh sandbox instance. Sandbox limits become 504 and 500.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{
    HeaderMap, Method, Request, Response, StatusCode,
    body::Incoming,
    header::{self, HeaderName, HeaderValue},
};

use crate::{
    app::{App, Mode},
    error_page::{self, Failure, RequestInfo},
    routes::table::Captured,
    sandbox::{HttpRequest, HttpResponse, ParamValue, PathParam, RouteTarget, SandboxError},
};

/// The response body type of the server.
pub type Body = Full<Bytes>;

/// Answer one request.
pub async fn respond(app: &App, request: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
    let loaded = app.current();
    let project = &loaded.project;
    let sandbox = &loaded.sandbox;
    let (parts, body) = request.into_parts();
    let accept_html = error_page::accepts_html(&parts.headers);
    let path = parts.uri.path();
    let query = parts.uri.query().unwrap_or("");
    let mut info = RequestInfo {
        method: parts.method.to_string(),
        path: path.to_string(),
        ..RequestInfo::default()
    };
    let fail = |failure: &Failure, info: &RequestInfo| {
        error_page::respond(
            app.mode,
            &app.root,
            failure,
            info,
            accept_html,
            app.generation(),
        )
    };

    // The development error page polls this to reload itself after a fix.
    if app.mode == Mode::Development && path == "/_filerouter/reload" {
        let mut response = Response::new(Full::new(Bytes::from(app.generation().to_string())));
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return response;
    }
    if let Some(failure) = &loaded.config_error {
        return fail(failure, &info);
    }
    if !project.scan_errors.is_empty() {
        return fail(&error_page::scan_failure(&project.scan_errors), &info);
    }

    // FastAPI's redirect_slashes: `/users/` -> `/users`, decided before matching.
    if path.len() > 1 && path.ends_with('/') {
        let stripped = &path[..path.len() - 1];
        if project.table.lookup(stripped).is_some() {
            let location = if query.is_empty() {
                stripped.to_string()
            } else {
                format!("{stripped}?{query}")
            };
            return redirect(&location);
        }
    }

    let Some(found) = project.table.lookup(path) else {
        return json(StatusCode::NOT_FOUND, r#"{"detail":"Not Found"}"#);
    };
    let route = &project.routes[found.route];
    info.route_file = Some(format!("routes/{}", route.file));
    info.params = found
        .params
        .iter()
        .map(|(name, value)| {
            let text = match value {
                Captured::One(v) => v.clone(),
                Captured::Many(v) => v.join("/"),
            };
            (name.clone(), text)
        })
        .collect();
    if let Err(error) = &route.handlers {
        return fail(&Failure::from_project(error), &info);
    }

    let method = parts.method.as_str();
    let handler = if route.handler(method).is_some() {
        method
    } else if parts.method == Method::HEAD && route.handler("GET").is_some() {
        "GET"
    } else if parts.method == Method::OPTIONS {
        return with_allow(empty(StatusCode::NO_CONTENT), &route.allow());
    } else {
        let response = json(
            StatusCode::METHOD_NOT_ALLOWED,
            r#"{"detail":"Method Not Allowed"}"#,
        );
        return with_allow(response, &route.allow());
    };

    let max_body = sandbox.limits().max_body_bytes;
    if content_length(&parts.headers).is_some_and(|n| n > max_body as u64) {
        return too_large();
    }
    let body = match Limited::new(body, max_body).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Err(_) => {
            return json(
                StatusCode::BAD_REQUEST,
                r#"{"detail":"Could not read the request body"}"#,
            );
        }
    };

    let guest_request = HttpRequest {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
        client: Some(peer.ip().to_string()),
    };
    let target = RouteTarget {
        file: route.file.clone(),
        handler: handler.to_string(),
        params: found
            .params
            .into_iter()
            .map(|(name, value)| PathParam {
                name,
                value: match value {
                    Captured::One(v) => ParamValue::Single(v),
                    Captured::Many(v) => ParamValue::Segments(v),
                },
            })
            .collect(),
    };
    let result = sandbox.handle(guest_request, target).await;
    match result {
        Ok(response) => from_guest(response).unwrap_or_else(|reason| {
            let failure = Failure::simple(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InvalidResponse",
                &reason,
                vec![
                    "Header names are tokens like `X-Request-Id`; values are visible ASCII text"
                        .into(),
                ],
            );
            fail(&failure, &info)
        }),
        Err(SandboxError::Project(error)) => fail(&Failure::from_project(&error), &info),
        Err(SandboxError::Timeout(limit)) => {
            let mut failure = Failure::simple(
                StatusCode::GATEWAY_TIMEOUT,
                "Timeout",
                &format!(
                    "the handler ran longer than the sandbox's time limit of {limit:?} and was stopped"
                ),
                vec![format!(
                    "If the work is expected to take longer, raise `sandbox = {{\"timeout_s\": ...}}` in config.py (now {})",
                    limit.as_secs_f64()
                )],
            );
            failure.json_detail = Some(serde_json::json!({"detail": "Handler timed out"}));
            fail(&failure, &info)
        }
        Err(SandboxError::Trap(trap)) => {
            let limits = sandbox.limits();
            let failure = Failure::simple(
                StatusCode::INTERNAL_SERVER_ERROR,
                "SandboxLimit",
                &format!("the sandbox stopped the handler: {trap}"),
                vec![format!(
                    "If the handler needs more memory, raise `sandbox = {{\"memory_mb\": ...}}` in config.py (now {})",
                    limits.memory_bytes / (1024 * 1024)
                )],
            );
            fail(&failure, &info)
        }
        Err(other) => {
            let failure = Failure::simple(
                StatusCode::INTERNAL_SERVER_ERROR,
                "SandboxError",
                &other.to_string(),
                Vec::new(),
            );
            fail(&failure, &info)
        }
    }
}

fn from_guest(response: HttpResponse) -> Result<Response<Body>, String> {
    let status = StatusCode::from_u16(response.status).map_err(|_| {
        format!(
            "the handler returned an invalid status code {}",
            response.status
        )
    })?;
    let mut headers = HeaderMap::new();
    for (name, value) in response.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("the handler set an invalid header name {name:?}"))?;
        let value = HeaderValue::from_str(&value)
            .map_err(|_| format!("the handler set an invalid value for header {name}"))?;
        headers.append(name, value);
    }
    let mut built = Response::new(Full::new(Bytes::from(response.body)));
    *built.status_mut() = status;
    *built.headers_mut() = headers;
    Ok(built)
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A JSON response with a fixed body.
pub fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}

fn with_allow(mut response: Response<Body>, allow: &str) -> Response<Body> {
    if let Ok(value) = HeaderValue::from_str(allow) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    response
}

fn redirect(location: &str) -> Response<Body> {
    let mut response = empty(StatusCode::TEMPORARY_REDIRECT);
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

fn too_large() -> Response<Body> {
    json(
        StatusCode::PAYLOAD_TOO_LARGE,
        r#"{"detail":"Request body too large"}"#,
    )
}
