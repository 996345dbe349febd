//! The responses the host makes itself: the body type every response of the server has
//! ([`Body`]), and the small fixed answers built from it (a JSON body, a bare status, a
//! redirect, an `Allow` header).
//!
//! Every module on the request path that answers (the router, static files, error pages, the
//! body bounds, tenants, the admin port) builds its answers here, so none of them needs the
//! router, and the request path imports one way. Not here: deciding which answer a request
//! gets (`crate::router`), and bounding the bodies held in memory (`crate::response_body`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::{
    Response, StatusCode,
    header::{self, HeaderValue},
};

/// The response body type of the server: whole bodies, a guest's body charged to the response
/// budget (`crate::response_body`), or a static file streamed from disk.
pub type Body = BoxBody<Bytes, std::io::Error>;

/// A body of `bytes`.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// An empty body.
pub fn empty_body() -> Body {
    full(Bytes::new())
}

/// A JSON response with a fixed body.
pub fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A response of `status` alone: no body, no content type.
pub fn status_only(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(empty_body());
    *response.status_mut() = status;
    response
}

/// `response` with an `Allow` header listing `allow` (left out if it is not a header value).
pub fn with_allow(mut response: Response<Body>, allow: &str) -> Response<Body> {
    if let Ok(value) = HeaderValue::from_str(allow) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    response
}

/// A 307 to `location` (method and body kept, as FastAPI's slash redirects).
pub fn redirect(location: &str) -> Response<Body> {
    let mut response = status_only(StatusCode::TEMPORARY_REDIRECT);
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}
