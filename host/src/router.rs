//! From an HTTP request to a response: the steps between the socket and the guest.
//!
//! In order: scan and config errors (500), trailing-slash redirect (307: `/users/` to `/users`,
//! or `/products` to `/products/` for a route declared with `TRAILING_SLASH = True`), route
//! lookup and method selection with automatic HEAD and OPTIONS (405 with `Allow`); when no
//! route matches, `/docs` and `/openapi.json`, then a static file from `public/`, then 404
//! (or `not-found.py`).
//! That decides a [`Target`]. A route handler or page handler runs in a fresh sandbox instance,
//! inside `middleware.py` when the project has one. What the host answers itself (redirect,
//! 405, static file, docs, 404) goes straight out without middleware, or, with middleware, is
//! handed to the guest's `call_next` through the `upstream` service; its body stays here.
//! The body is read whole within the bounds of [`request_body`] (413, 408, 503); sandbox
//! limits become 504 and 500; a full scheduler queue gives 503 with `Retry-After`. The guest's
//! response body is charged to the server's [`response_body`] budget until it is written: 503
//! with `Retry-After` when it does not fit now, 500 naming the setting when it never could.
//!
//! The request path imports one way: the router uses the modules it calls ([`app`],
//! [`error_page`], [`public`], [`request_body`], [`response_body`]), which build their answers
//! from [`response`] and never import the router back. Not here: the socket and HTTP framing
//! (`crate::server`), choosing a tenant (`crate::site`), what the guest does with a request.
//!
//! [`app`]: crate::app
//! [`error_page`]: crate::error_page
//! [`public`]: crate::public
//! [`request_body`]: crate::request_body
//! [`response`]: crate::response
//! [`response_body`]: crate::response_body

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use http_body_util::BodyExt;
use hyper::{
    HeaderMap, Method, Request, Response, StatusCode,
    body::Incoming,
    header::{self, HeaderName, HeaderValue},
    http::request::Parts,
};

use crate::{
    app::{App, Loaded},
    error_page::{self, Failure, RequestInfo},
    mode::Mode,
    public,
    request_body::{self, BodyBudget},
    response::{Body, full, json, redirect, status_only, with_allow},
    response_body::{ResponseBudget, ResponseError},
    routes::table::Captured,
    sandbox::{
        Answer, HttpRequest, HttpResponse, PageTarget, ParamValue, PathParam, RouteTarget,
        SandboxError, Target, Upstream,
        socket::{self, Handshake},
        stream::StreamBody,
    },
    scheduler::Limit,
};

/// Answer one request; its body is read within `budget` and `body_timeout`.
pub async fn respond(
    app: &App,
    mut request: Request<Incoming>,
    peer: SocketAddr,
    budget: &BodyBudget,
    body_timeout: Duration,
) -> Response<Body> {
    let loaded = app.current();
    // A WebSocket handshake takes the connection's upgrade before the request is taken apart.
    let handshake = match Handshake::take(&mut request) {
        Ok(handshake) => handshake,
        Err(bad) => return bad_handshake(&bad),
    };
    let (parts, body) = request.into_parts();
    let accept_html = error_page::accepts_html(&parts.headers);
    let mut info = RequestInfo {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        ..RequestInfo::default()
    };
    // `debug = False` in config.py turns the detailed pages off in `dev` too.
    let error_mode = match (app.mode, loaded.settings.debug) {
        (Mode::Development, Some(false)) => Mode::Production,
        (mode, _) => mode,
    };
    let fail = |failure: &Failure, info: &RequestInfo| {
        error_page::respond(
            error_mode,
            &app.root,
            failure,
            info,
            accept_html,
            app.generation(),
        )
    };

    // The development error page polls this to reload itself after a fix.
    if app.mode == Mode::Development && parts.uri.path() == "/_filerouter/reload" {
        let mut response = Response::new(full(app.generation().to_string()));
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return response;
    }
    if let Some(failure) = &loaded.config_error {
        return fail(failure, &info);
    }
    if !loaded.project.scan_errors.is_empty() {
        return fail(
            &error_page::scan_failure(&loaded.project.scan_errors),
            &info,
        );
    }

    let target = match decide(app, &loaded, &parts, peer, handshake.is_some(), &mut info).await {
        Ok(target) => target,
        Err(failure) => return fail(&failure, &info),
    };
    let has_middleware = loaded.project.root_files.has("middleware.py");
    let (target, host_answer) = match target {
        Decided::Host(response) if !has_middleware => return response,
        Decided::Host(response) => (Target::Host, Some(response)),
        Decided::Guest(target) => (target, None),
    };
    // Only a `WEBSOCKET` handler answers a handshake (`decide` saw to that).
    let handshake = match &target {
        Target::Route(route) if route.handler == "WEBSOCKET" => handshake,
        _ => None,
    };

    // The guest runs: it gets the whole body, within the limits; `held` keeps the body's
    // share of the budget until the answer is ready.
    let max_body = loaded.sandbox.limits().max_body_bytes;
    let mut held = request_body::Held::default();
    let declared = content_length(&parts.headers);
    let body =
        match request_body::read(body, declared, max_body, body_timeout, budget, &mut held).await {
            Ok(body) => body,
            Err(refused) => return refused.response(),
        };
    let guest_request = HttpRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: header_pairs(&parts.headers),
        body: Vec::from(body),
        client: Some(peer.ip().to_string()),
    };

    let kept_body: Arc<Mutex<Option<Body>>> = Arc::default();
    let upstream = host_answer.map(|answer| upstream(answer, kept_body.clone()));
    let result = loaded
        .sandbox
        .handle(
            guest_request,
            target,
            loaded.project.root_files.sources(),
            upstream,
            handshake,
        )
        .await;
    match result {
        Ok(Answer::Streamed(response, body)) => match streamed(response, body) {
            Ok(response) => response,
            Err(reason) => fail(&invalid_response(&reason), &info),
        },
        Ok(Answer::Switched(head)) => match switched(head) {
            Ok(response) => response,
            Err(reason) => fail(&invalid_response(&reason), &info),
        },
        Ok(Answer::Whole(response)) => {
            let host_body = if response.host_body {
                kept_body.lock().ok().and_then(|mut b| b.take())
            } else {
                None
            };
            match from_guest(response, host_body, budget.responses()) {
                Ok(response) => response,
                Err(Invalid::Response(reason)) => fail(&invalid_response(&reason), &info),
                Err(Invalid::Unheld(ResponseError::Busy)) => ResponseError::busy_response(),
                Err(Invalid::Unheld(error @ ResponseError::TooLarge { max, .. })) => {
                    let failure = Failure::simple(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "ResponseTooLarge",
                        &format!("the handler returned more than the server may hold: {error}"),
                        vec![format!(
                            "Send large files from public/ (streamed from disk), or raise `server = {{\"max_buffered_response_bytes\": ...}}` in config.py (now {max})"
                        )],
                    );
                    fail(&failure, &info)
                }
            }
        }
        Err(SandboxError::Busy(rejected)) => {
            crate::request_record::set_limit("queue");
            busy(rejected.retry_after)
        }
        Err(error) => fail(&sandbox_failure(&loaded, error), &info),
    }
}

/// The scheme and host a redirect names, as Starlette builds a request's URL under uvicorn's
/// defaults: the request's own host (its HTTP/2 authority or `Host` header), and `http` unless
/// a proxy on the same machine (a loopback peer, uvicorn's `--forwarded-allow-ips`) says
/// `X-Forwarded-Proto: https`. Empty (a relative location) for a request that names no host.
fn origin(parts: &Parts, peer: SocketAddr) -> String {
    let host = parts
        .uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| parts.headers.get(header::HOST)?.to_str().ok())
        .filter(|host| !host.is_empty());
    let Some(host) = host else {
        return String::new();
    };
    let forwarded = parts
        .headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    let scheme = match forwarded.as_deref() {
        Some("https") if peer.ip().is_loopback() => "https",
        _ => "http",
    };
    format!("{scheme}://{host}")
}

/// Where a request goes.
enum Decided {
    /// The host answers (redirect, 405, OPTIONS, static file, docs, 404).
    Host(Response<Body>),
    /// Project code answers: a route handler or a page handler.
    Guest(Target),
}

async fn decide(
    app: &App,
    loaded: &Loaded,
    parts: &Parts,
    peer: SocketAddr,
    websocket: bool,
    info: &mut RequestInfo,
) -> Result<Decided, Box<Failure>> {
    let project = &loaded.project;
    let path = parts.uri.path();
    let query = parts.uri.query().unwrap_or("");

    // FastAPI's redirect_slashes, decided before matching: `/users/` -> `/users`, and for a
    // route declared with `TRAILING_SLASH = True` the reverse, `/products` -> `/products/`.
    // The location is absolute, as Starlette's is (see [`origin`]), made only for a redirect.
    let with_query = |location: String| {
        let location = format!("{}{location}", origin(parts, peer));
        if query.is_empty() {
            location
        } else {
            format!("{location}?{query}")
        }
    };
    let found = match path.strip_suffix('/').filter(|s| !s.is_empty()) {
        Some(stripped) => match project.table.lookup(stripped) {
            Some(found) if project.routes[found.route].trailing_slash => Some(found),
            Some(_) => {
                return Ok(Decided::Host(redirect(&with_query(stripped.to_string()))));
            }
            None => None,
        },
        None => match project.table.lookup(path) {
            Some(found) if project.routes[found.route].trailing_slash && path != "/" => {
                return Ok(Decided::Host(redirect(&with_query(format!("{path}/")))));
            }
            found => found,
        },
    };

    if let Some(found) = found {
        let route = &project.routes[found.route];
        // Metrics and the access line name the pattern, never the path.
        crate::request_record::set_route(Arc::from(route.path()));
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
            return Err(Box::new(Failure::from_project(error)));
        }
        let method = parts.method.as_str();
        let handler = if websocket {
            // A handshake goes to the `WEBSOCKET` handler; a route without one refuses it, as
            // Starlette does for a path with no WebSocket route.
            if route.handler("WEBSOCKET").is_none() {
                return Ok(Decided::Host(no_websocket()));
            }
            "WEBSOCKET"
        } else if !route.serves_http() {
            // A route with only a `WEBSOCKET` handler has no HTTP methods: 404, as Starlette
            // answers an HTTP request to a WebSocket route.
            return Ok(Decided::Host(json(
                StatusCode::NOT_FOUND,
                r#"{"detail":"Not Found"}"#,
            )));
        } else if route.handler(method).is_some() && method != "WEBSOCKET" {
            method
        } else if parts.method == Method::HEAD && route.handler("GET").is_some() {
            "GET"
        } else if parts.method == Method::OPTIONS {
            return Ok(Decided::Host(with_allow(
                status_only(StatusCode::NO_CONTENT),
                &route.allow(),
            )));
        } else {
            let response = json(
                StatusCode::METHOD_NOT_ALLOWED,
                r#"{"detail":"Method Not Allowed"}"#,
            );
            return Ok(Decided::Host(with_allow(response, &route.allow())));
        };
        return Ok(Decided::Guest(Target::Route(RouteTarget {
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
        })));
    }

    if websocket {
        return Ok(Decided::Host(no_websocket()));
    }
    let readable = matches!(parts.method, Method::GET | Method::HEAD);
    if loaded.docs_enabled() && readable {
        if path == "/docs" {
            if project.root_files.has("docs.py") {
                return Ok(Decided::Guest(page(loaded, "docs.py", StatusCode::OK)));
            }
            let mut response = Response::new(full(crate::docs::page(&loaded.catalog)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            return Ok(Decided::Host(response));
        }
        if path == "/openapi.json" {
            let document = crate::docs::openapi(&loaded.catalog).to_string();
            return Ok(Decided::Host(json(StatusCode::OK, document)));
        }
    }
    if readable {
        // File system work (open, fstat) runs on a blocking thread, never on this one.
        let (root, path, headers) = (app.root.clone(), path.to_string(), parts.headers.clone());
        let head = parts.method == Method::HEAD;
        let found =
            tokio::task::spawn_blocking(move || public::serve(&root, &path, &headers, head));
        if let Ok(Some(response)) = found.await {
            return Ok(Decided::Host(response));
        }
    }
    if project.root_files.has("not-found.py") {
        return Ok(Decided::Guest(page(
            loaded,
            "not-found.py",
            StatusCode::NOT_FOUND,
        )));
    }
    Ok(Decided::Host(json(
        StatusCode::NOT_FOUND,
        r#"{"detail":"Not Found"}"#,
    )))
}

fn page(loaded: &Loaded, file: &str, status: StatusCode) -> Target {
    Target::Page(PageTarget {
        file: file.to_string(),
        context: loaded.context.clone(),
        status: status.as_u16(),
    })
}

/// Hand the host's `answer` to middleware's `call_next`: status and headers go to the guest,
/// the body waits in `kept` until the guest's answer says whether it is used.
fn upstream(answer: Response<Body>, kept: Arc<Mutex<Option<Body>>>) -> Upstream {
    let (parts, body) = answer.into_parts();
    let head = HttpResponse {
        status: parts.status.as_u16(),
        headers: header_pairs(&parts.headers),
        body: Vec::new(),
        host_body: true,
    };
    let mut body = Some(body);
    Box::new(move |_request| {
        if let Some(body) = body.take()
            && let Ok(mut slot) = kept.lock()
        {
            *slot = Some(body);
        }
        head.clone()
    })
}

/// What the sandbox reported, as the failure a client is shown.
fn sandbox_failure(loaded: &Loaded, error: SandboxError) -> Failure {
    match error {
        SandboxError::Project(error) => Failure::from_project(&error),
        SandboxError::Timeout(overrun) => {
            crate::request_record::set_limit(match overrun.limit {
                Limit::Cpu => "cpu",
                Limit::Wall => "wall",
            });
            let hint = match overrun.limit {
                Limit::Cpu => format!(
                    "If the work needs more CPU time, raise `sandbox = {{\"cpu_ms\": ...}}` in config.py (now {}; `timeout_s` sets both limits)",
                    overrun.allowed.as_millis()
                ),
                Limit::Wall => format!(
                    "If the handler waits on something slow (`time.sleep`, `asyncio.sleep`), raise `sandbox = {{\"wall_s\": ...}}` in config.py (now {}; `timeout_s` sets both limits)",
                    overrun.allowed.as_secs_f64()
                ),
            };
            let mut failure = Failure::simple(
                StatusCode::GATEWAY_TIMEOUT,
                "Timeout",
                &format!("{overrun}, and was stopped"),
                vec![hint],
            );
            failure.json_detail = Some(serde_json::json!({"detail": "Handler timed out"}));
            failure.json_exact = true;
            failure
        }
        SandboxError::MemoryCap(trap) => {
            crate::request_record::set_limit("memory");
            let limits = loaded.sandbox.limits();
            Failure::simple(
                StatusCode::INTERNAL_SERVER_ERROR,
                "SandboxLimit",
                &format!("the sandbox stopped the handler at its memory cap: {trap}"),
                vec![format!(
                    "If the handler needs more memory, raise `sandbox = {{\"memory_mb\": ...}}` in config.py (now {})",
                    limits.memory_bytes / (1024 * 1024)
                )],
            )
        }
        SandboxError::Trap(trap) => Failure::simple(
            StatusCode::INTERNAL_SERVER_ERROR,
            "SandboxTrap",
            &format!("the guest runtime stopped the handler: {trap}"),
            vec![
                "The Python runtime aborted (`os.abort()`, a failed assertion in the runtime or a crash), not a sandbox limit: look at what the handler did last".into(),
            ],
        ),
        SandboxError::StackExhausted(trap) => Failure::simple(
            StatusCode::INTERNAL_SERVER_ERROR,
            "SandboxStackExhausted",
            &format!(
                "the handler's call stack ran out ({} MiB; {trap}): code that checks no recursion depth walked or freed a structure nested too deep (freeing a list nested about 150,000 deep, `hash` of such a tuple); the instance was discarded",
                crate::sandbox::engine::MAX_WASM_STACK >> 20
            ),
            vec![
                "Keep data shallower: `json`, `repr`, `==`, `copy` and `kv` raise RecursionError long before this, but freeing a structure checks no depth".into(),
            ],
        ),
        SandboxError::Exited(code) => Failure::simple(
            StatusCode::INTERNAL_SERVER_ERROR,
            "SandboxExit",
            &format!("the handler ended its sandbox instance with exit status {code} (`os._exit`)"),
            vec!["Return a response or raise an exception (`HTTPException`) instead of exiting".into()],
        ),
        other => Failure::simple(
            StatusCode::INTERNAL_SERVER_ERROR,
            "SandboxError",
            &other.to_string(),
            Vec::new(),
        ),
    }
}

/// Why the guest's response cannot be sent as it is.
enum Invalid {
    /// Its status or a header is not valid HTTP.
    Response(String),
    /// Its body did not get room in the response budget.
    Unheld(ResponseError),
}

/// A streamed response: the guest's head, with `body` as its chunks arrive (never charged to
/// the response budget: a stream holds at most a few chunks, see `crate::sandbox::stream`).
/// `Err` says why the head is not valid HTTP (the stream is then dropped, and its call stops).
fn streamed(head: HttpResponse, body: StreamBody) -> Result<Response<Body>, String> {
    let (status, mut headers) =
        head_of(head.status, head.headers).map_err(|invalid| match invalid {
            Invalid::Response(reason) => reason,
            Invalid::Unheld(error) => error.to_string(),
        })?;
    // The length is unknown until the end: hyper sends the body chunked.
    headers.remove(header::CONTENT_LENGTH);
    let mut built = Response::new(body.boxed());
    *built.status_mut() = status;
    *built.headers_mut() = headers;
    Ok(built)
}

/// A handshake's 101 Switching Protocols, as the guest's `accept` made it (the host's own
/// `upgrade`, `connection` and `sec-websocket-accept` among its headers); hyper hands the
/// connection over once it is sent. `Err` says why the head is not valid HTTP.
fn switched(head: HttpResponse) -> Result<Response<Body>, String> {
    let headers = header_map(head.headers).map_err(|invalid| match invalid {
        Invalid::Response(reason) => reason,
        Invalid::Unheld(error) => error.to_string(),
    })?;
    let mut built = Response::new(crate::response::empty_body());
    *built.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *built.headers_mut() = headers;
    Ok(built)
}

/// The answer to a WebSocket handshake no `WEBSOCKET` handler takes: 403, as uvicorn answers
/// one that Starlette's router closes before accepting.
fn no_websocket() -> Response<Body> {
    json(
        StatusCode::FORBIDDEN,
        r#"{"detail":"No WebSocket handler at this path"}"#,
    )
}

/// The answer to a malformed WebSocket handshake (426 names the version we speak).
fn bad_handshake(bad: &socket::BadHandshake) -> Response<Body> {
    let mut response = json(
        bad.status(),
        serde_json::json!({ "detail": bad.to_string() }).to_string(),
    );
    if bad.status() == StatusCode::UPGRADE_REQUIRED {
        response.headers_mut().insert(
            HeaderName::from_static("sec-websocket-version"),
            HeaderValue::from_static("13"),
        );
    }
    response
}

/// The guest's response as an HTTP response, its body charged to `budget`; `host_body` is the
/// host's own body when the guest passed the host's answer on.
fn from_guest(
    response: HttpResponse,
    host_body: Option<Body>,
    budget: &ResponseBudget,
) -> Result<Response<Body>, Invalid> {
    let (status, mut headers) = head_of(response.status, response.headers)?;
    let body = match host_body {
        Some(body) => body,
        // 204 and 304 have no body (RFC 9110), whatever the handler returned with them.
        None if matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED) => {
            headers.remove(header::CONTENT_LENGTH);
            crate::response::empty_body()
        }
        None => {
            // The guest's own body: any length the host's answer declared no longer holds.
            headers.remove(header::CONTENT_LENGTH);
            budget.hold(response.body).map_err(Invalid::Unheld)?.boxed()
        }
    };
    let mut built = Response::new(body);
    *built.status_mut() = status;
    *built.headers_mut() = headers;
    Ok(built)
}

/// The guest's status and headers, checked.
fn head_of(status: u16, pairs: Vec<(String, String)>) -> Result<(StatusCode, HeaderMap), Invalid> {
    let code = status;
    let status = StatusCode::from_u16(code)
        .ok()
        .filter(|s| !s.is_informational())
        .ok_or_else(|| {
            Invalid::Response(format!(
                "the handler returned an invalid status code {code}: a final answer is 200 to 599"
            ))
        })?;
    Ok((status, header_map(pairs)?))
}

/// The guest's headers as a `HeaderMap`, in their order.
fn header_map(pairs: Vec<(String, String)>) -> Result<HeaderMap, Invalid> {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            Invalid::Response(format!("the handler set an invalid header name {name:?}"))
        })?;
        let value = HeaderValue::from_str(&value).map_err(|_| {
            Invalid::Response(format!(
                "the handler set an invalid value for header {name}"
            ))
        })?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// Headers as the WIT records carry them: lower-case names, values as text.
fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The request's `Content-Length`, when it has one that parses.
pub fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// 500 for a response the guest gave that HTTP cannot carry (a header name or value, say).
fn invalid_response(reason: &str) -> Failure {
    Failure::simple(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InvalidResponse",
        reason,
        vec!["Header names are tokens like `X-Request-Id`; values are visible ASCII text".into()],
    )
}

/// 503 for a request whose queue is full: it never ran; the client may try again later.
fn busy(retry_after: std::time::Duration) -> Response<Body> {
    let mut response = json(
        StatusCode::SERVICE_UNAVAILABLE,
        r#"{"detail":"Service Unavailable"}"#,
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_after.as_secs()),
    );
    response
}
