//! Error responses for failures in project code: detailed in development, opaque in production.
//!
//! Development answers with an HTML page (for browsers) or a JSON body (for API clients) that
//! names the error, the project file and line, and shows the code around it. Production answers
//! `{"detail":"Internal Server Error"}` and keeps the details in the server log.

use std::path::Path;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    HeaderMap, Response, StatusCode,
    header::{self, HeaderValue},
};
use serde_json::json;

use crate::{
    app::Mode,
    router::{Body, json as json_response},
    routes::scan::ScanError,
    sandbox::ProjectError,
};

const INTERNAL: &str = r#"{"detail":"Internal Server Error"}"#;

/// Whether the client prefers HTML (a browser).
pub fn accepts_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// An exception in project code, or a route file that does not import.
pub fn project_error(mode: Mode, root: &Path, error: &ProjectError, html: bool) -> Response<Body> {
    let location = match (&error.file, error.line) {
        (Some(file), Some(line)) => format!("{file}:{line}: "),
        (Some(file), None) => format!("{file}: "),
        _ => String::new(),
    };
    tracing::error!("{location}{}: {}", error.kind, error.message);
    if !error.traceback.is_empty() {
        tracing::debug!("{}", error.traceback);
    }
    if mode == Mode::Production {
        return json_response(StatusCode::INTERNAL_SERVER_ERROR, INTERNAL);
    }
    if !html {
        let body = json!({
            "detail": format!("{}: {}", error.kind, error.message),
            "error": {
                "type": error.kind,
                "message": error.message,
                "file": error.file,
                "line": error.line,
                "frames": error.frames.iter().map(|f| json!({
                    "file": f.file, "line": f.line, "function": f.function,
                })).collect::<Vec<_>>(),
            }
        });
        return json_response(StatusCode::INTERNAL_SERVER_ERROR, body.to_string());
    }
    let mut page = String::new();
    page.push_str(&format!(
        "<h1>{}</h1><p class=message>{}</p>",
        esc(&error.kind),
        esc(&error.message)
    ));
    if let Some(file) = &error.file {
        page.push_str(&format!(
            "<p class=where>{}{}</p>",
            esc(file),
            error.line.map(|l| format!(":{l}")).unwrap_or_default()
        ));
        if let Some(line) = error.line {
            page.push_str(&snippet(root, file, line));
        }
    }
    if !error.frames.is_empty() {
        page.push_str("<h2>Traceback (project code only)</h2><ol class=frames>");
        for frame in &error.frames {
            page.push_str(&format!(
                "<li><code>{}:{}</code> in <code>{}</code></li>",
                esc(&frame.file),
                frame.line,
                esc(&frame.function)
            ));
        }
        page.push_str("</ol>");
    }
    html_response(StatusCode::INTERNAL_SERVER_ERROR, &error.kind, &page)
}

/// Conflicting route files: every request answers with the list until they are fixed.
pub fn scan_errors(mode: Mode, errors: &[ScanError], html: bool) -> Response<Body> {
    if mode == Mode::Production {
        return json_response(StatusCode::INTERNAL_SERVER_ERROR, INTERNAL);
    }
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    if !html {
        let body = json!({
            "detail": format!("Route scan error: {}", messages.join("; ")),
            "error": {"type": "ScanError", "message": messages.join("\n"), "errors": messages},
        });
        return json_response(StatusCode::INTERNAL_SERVER_ERROR, body.to_string());
    }
    let items: String = messages
        .iter()
        .map(|m| format!("<li>{}</li>", esc(m)))
        .collect();
    let page = format!(
        "<h1>Route scan error</h1><p class=message>The <code>routes/</code> folder has conflicts; \
         every request answers with this page until they are fixed.</p><ul>{items}</ul>"
    );
    html_response(StatusCode::INTERNAL_SERVER_ERROR, "Route scan error", &page)
}

/// Any other failure with a message for the developer.
pub fn message(mode: Mode, status: StatusCode, message: &str, html: bool) -> Response<Body> {
    if mode == Mode::Production {
        return json_response(
            status,
            json!({"detail": status.canonical_reason()}).to_string(),
        );
    }
    if html {
        let page = format!("<h1>{}</h1><p class=message>{}</p>", status, esc(message));
        return html_response(status, status.as_str(), &page);
    }
    json_response(status, json!({"detail": message}).to_string())
}

fn snippet(root: &Path, file: &str, line: u32) -> String {
    let Ok(source) = std::fs::read_to_string(root.join(file)) else {
        return String::new();
    };
    let line = line as usize;
    let first = line.saturating_sub(5).max(1);
    let mut out = String::from("<pre class=code>");
    for (index, text) in source
        .lines()
        .enumerate()
        .skip(first - 1)
        .take(line + 5 - first)
    {
        let number = index + 1;
        let class = if number == line { " class=hit" } else { "" };
        out.push_str(&format!("<span{class}>{number:>4}  {}</span>\n", esc(text)));
    }
    out.push_str("</pre>");
    out
}

fn esc(text: &str) -> String {
    html_escape::encode_text(text).into_owned()
}

fn html_response(status: StatusCode, title: &str, body: &str) -> Response<Body> {
    let page = format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width,initial-scale=1\">\
         <title>{} - filerouter</title><style>{STYLE}</style></head><body><main>{body}</main></body></html>",
        esc(title)
    );
    let mut response = Response::new(Full::new(Bytes::from(page)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

const STYLE: &str = "body{font:15px/1.5 system-ui,sans-serif;margin:0;background:#fafafa;color:#222}\
main{max-width:960px;margin:2rem auto;padding:0 1rem}h1{color:#b00020;margin-bottom:.2rem}\
.where{font-family:monospace}.code{background:#1e1e1e;color:#ddd;padding:.8rem;overflow:auto}\
.code .hit{background:#5a1d1d;display:inline-block;width:100%}\
@media(prefers-color-scheme:dark){body{background:#121212;color:#ddd}}";
