//! Error responses for failures in project code: detailed in development, opaque in production.
//!
//! Development answers with an HTML page (for browsers) or a JSON body (for API clients) that
//! names the error, the project file and line, shows the code around it highlighted, the
//! project frames of the traceback, the request, and likely fixes. The page reloads itself
//! after hot reload. Production answers `{"detail":"Internal Server Error"}` with only an
//! `x-request-id` header; the details go to the log under that id.

use std::{
    collections::HashSet,
    path::Path,
    sync::{
        LazyLock, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use hyper::{
    HeaderMap, Response, StatusCode,
    header::{self, HeaderValue},
};
use serde_json::{Value, json};
use syntect::{
    easy::HighlightLines,
    highlighting::{Theme, ThemeSet},
    html::{IncludeBackground, styled_line_to_highlighted_html},
    parsing::SyntaxSet,
};

use crate::{
    mode::Mode,
    response::{Body, full, json as json_response},
    routes::scan::ScanError,
    sandbox::{ConfigError, ProjectError},
};

const INTERNAL: &str = r#"{"detail":"Internal Server Error"}"#;

/// The request that met the error, as the page shows it.
#[derive(Debug, Clone, Default)]
pub struct RequestInfo {
    pub method: String,
    pub path: String,
    /// The route file, relative to the project (`routes/users/[id]/route.py`).
    pub route_file: Option<String>,
    pub params: Vec<(String, String)>,
}

/// What a developer needs to see, whatever failed.
#[derive(Debug, Clone)]
pub struct Failure {
    pub status: StatusCode,
    pub kind: String,
    pub message: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub frames: Vec<(String, u32, String)>,
    pub suggestions: Vec<String>,
    /// The full text for the log (a Python traceback, say).
    pub details: String,
    /// The exact JSON body API clients get in development, when it is not the generic one.
    pub json_detail: Option<Value>,
    /// API clients get exactly `json_detail` in development too (a timeout's 504): the
    /// details stay on the terminal and the HTML page.
    pub json_exact: bool,
}

impl Failure {
    pub fn from_project(error: &ProjectError) -> Failure {
        Failure {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: error.kind.clone(),
            message: error.message.clone(),
            file: error.file.clone(),
            line: error.line,
            frames: error
                .frames
                .iter()
                .map(|f| (f.file.clone(), f.line, f.function.clone()))
                .collect(),
            suggestions: error.suggestions.clone(),
            details: error.traceback.clone(),
            json_detail: None,
            json_exact: false,
        }
    }

    pub fn simple(
        status: StatusCode,
        kind: &str,
        message: &str,
        suggestions: Vec<String>,
    ) -> Failure {
        Failure {
            status,
            kind: kind.to_string(),
            message: message.to_string(),
            file: None,
            line: None,
            frames: Vec::new(),
            suggestions,
            details: String::new(),
            json_detail: None,
            json_exact: false,
        }
    }

    /// A config.py that cannot be used: every request answers with it until it is fixed.
    pub fn from_config(error: &ConfigError) -> Failure {
        let mut failure = match error {
            ConfigError::Project(project) => Failure::from_project(project),
            other => Failure::simple(
                StatusCode::INTERNAL_SERVER_ERROR,
                "ConfigError",
                &other.to_string(),
                Vec::new(),
            ),
        };
        failure.file = Some("config.py".into());
        failure.line = failure.line.or(Some(1));
        failure.suggestions.push(
            "Fix config.py: the server keeps the last good settings meanwhile and picks up the fix by itself".into(),
        );
        failure
    }

    pub fn location(&self) -> String {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => format!("{file}:{line}"),
            (Some(file), None) => file.clone(),
            _ => String::new(),
        }
    }
}

/// Whether the client prefers HTML (a browser).
pub fn accepts_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// A fresh id for a failed request, returned in `x-request-id` and written to the log.
pub fn request_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SEED: LazyLock<u64> = LazyLock::new(|| {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(std::time::SystemTime::now())
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:08x}{:08x}",
        (*SEED >> 32) as u32,
        (n as u32) ^ (*SEED as u32)
    )
}

/// The response for `failure`: logged once, detailed in development, opaque in production.
pub fn respond(
    mode: Mode,
    root: &Path,
    failure: &Failure,
    request: &RequestInfo,
    html: bool,
    generation: u64,
) -> Response<Body> {
    let id = request_id();
    let location = failure.location();
    let at = if location.is_empty() {
        String::new()
    } else {
        format!(" at {location}")
    };
    match mode {
        Mode::Development => {
            if first_sighting(generation, failure) {
                tracing::error!("{}: {}{at}", failure.kind, failure.message);
                for suggestion in &failure.suggestions {
                    tracing::error!("  hint: {suggestion}");
                }
                if !failure.details.is_empty() {
                    tracing::debug!("{}", failure.details);
                }
            }
        }
        Mode::Production => {
            tracing::error!(
                "request {id}: {} {}: {}: {}{at}\n{}",
                request.method,
                request.path,
                failure.kind,
                failure.message,
                failure.details
            );
        }
    }
    let mut response = match mode {
        Mode::Production => {
            let body = if failure.status == StatusCode::INTERNAL_SERVER_ERROR {
                INTERNAL.to_string()
            } else {
                failure
                    .json_detail
                    .clone()
                    .unwrap_or_else(|| json!({"detail": failure.status.canonical_reason()}))
                    .to_string()
            };
            json_response(failure.status, body)
        }
        Mode::Development if html => html_page(root, failure, request, generation),
        Mode::Development => json_response(failure.status, dev_json(failure, request).to_string()),
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

/// Whether `failure` is new since the project last changed: the terminal shows each error
/// once, not once per request, and again after a reload if it is still there.
fn first_sighting(generation: u64, failure: &Failure) -> bool {
    static SEEN: LazyLock<Mutex<(u64, HashSet<String>)>> =
        LazyLock::new(|| Mutex::new((0, HashSet::new())));
    let key = format!(
        "{}\0{}\0{}",
        failure.kind,
        failure.message,
        failure.location()
    );
    let Ok(mut seen) = SEEN.lock() else {
        return true;
    };
    if seen.0 != generation {
        *seen = (generation, HashSet::new());
    }
    seen.1.insert(key)
}

fn dev_json(failure: &Failure, request: &RequestInfo) -> Value {
    if failure.json_exact
        && let Some(exact) = &failure.json_detail
    {
        return exact.clone();
    }
    let mut body = failure
        .json_detail
        .clone()
        .unwrap_or_else(|| json!({"detail": format!("{}: {}", failure.kind, failure.message)}));
    body["error"] = json!({
        "type": failure.kind,
        "message": failure.message,
        "file": failure.file,
        "line": failure.line,
        "frames": failure.frames.iter().map(|(file, line, function)| json!({
            "file": file, "line": line, "function": function,
        })).collect::<Vec<_>>(),
        "suggestions": failure.suggestions,
        "request": {
            "method": request.method,
            "path": request.path,
            "route_file": request.route_file,
            "path_params": request.params.iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect::<serde_json::Map<String, Value>>(),
        },
    });
    body
}

/// Conflicting route files: every request answers with them until they are fixed.
pub fn scan_failure(errors: &[ScanError]) -> Failure {
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let mut failure = Failure::simple(
        StatusCode::INTERNAL_SERVER_ERROR,
        "ScanError",
        &messages.join("\n"),
        vec![
            "Every request answers with this page until the routes/ folder has no conflicts; \
             the server picks up the fix by itself"
                .to_string(),
        ],
    );
    failure.json_detail = Some(json!({
        "detail": format!("Route scan error: {}", messages.join("; ")),
        "errors": messages,
    }));
    failure
}

fn esc(text: &str) -> String {
    html_escape::encode_text(text).into_owned()
}

/// Turn `name` spans of already-escaped text into `<code>` elements.
fn with_code_spans(escaped: &str) -> String {
    let mut out = String::with_capacity(escaped.len() + 16);
    for (i, part) in escaped.split('`').enumerate() {
        if i % 2 == 1 {
            out.push_str("<code>");
            out.push_str(part);
            out.push_str("</code>");
        } else {
            out.push_str(part);
        }
    }
    // An unbalanced backtick leaves an open <code>: close it.
    if escaped.matches('`').count() % 2 == 1 {
        out.push_str("</code>");
    }
    out
}

static SYNTAXES: LazyLock<SyntaxSet> = LazyLock::new(SyntaxSet::load_defaults_newlines);
static THEME: LazyLock<Option<Theme>> =
    LazyLock::new(|| ThemeSet::load_defaults().themes.remove("base16-ocean.dark"));

/// The lines around `line` of `file`, numbered, Python-highlighted, the failing line marked.
fn snippet(root: &Path, file: &str, line: u32) -> String {
    // Only a regular file of a sane size: the name came from the guest's traceback.
    let path = root.join(file);
    let Ok(source) =
        crate::regular_file::read_to_string(&path, crate::regular_file::MAX_SOURCE_BYTES)
    else {
        return String::new();
    };
    let line = line as usize;
    let first = line.saturating_sub(6).max(1);
    let last = line + 4;
    let syntax = SYNTAXES
        .find_syntax_by_extension("py")
        .unwrap_or_else(|| SYNTAXES.find_syntax_plain_text());
    let mut highlighter = THEME
        .as_ref()
        .map(|theme| HighlightLines::new(syntax, theme));
    let mut out = String::from("<pre class=code><code>");
    for (index, text) in source.lines().enumerate() {
        let number = index + 1;
        if number > last {
            break;
        }
        let with_newline = format!("{text}\n");
        // Highlight every line from the top, so multi-line strings keep their state.
        let html = highlighter
            .as_mut()
            .and_then(|h| h.highlight_line(&with_newline, &SYNTAXES).ok())
            .and_then(|ranges| styled_line_to_highlighted_html(&ranges, IncludeBackground::No).ok())
            .unwrap_or_else(|| esc(&with_newline));
        if number < first {
            continue;
        }
        let class = if number == line { "line hit" } else { "line" };
        out.push_str(&format!(
            "<span class=\"{class}\"><span class=ln>{number:>4}</span>{}</span>",
            html.trim_end_matches('\n')
        ));
    }
    out.push_str("</code></pre>");
    out
}

fn html_page(
    root: &Path,
    failure: &Failure,
    request: &RequestInfo,
    generation: u64,
) -> Response<Body> {
    let mut page = format!(
        "<header><p class=kind>{}</p><h1>{}</h1>",
        esc(&failure.kind),
        esc(&failure.message).replace('\n', "<br>")
    );
    let location = failure.location();
    if !location.is_empty() {
        page.push_str(&format!("<p class=where>{}</p>", esc(&location)));
    }
    page.push_str("</header>");
    if !failure.suggestions.is_empty() {
        page.push_str("<section class=hints><h2>How to fix it</h2><ul>");
        for suggestion in &failure.suggestions {
            page.push_str(&format!("<li>{}</li>", with_code_spans(&esc(suggestion))));
        }
        page.push_str("</ul></section>");
    }
    if let (Some(file), Some(line)) = (&failure.file, failure.line) {
        page.push_str(&snippet(root, file, line));
    }
    if !failure.frames.is_empty() {
        page.push_str("<section><h2>Traceback (project code only, most recent call last)</h2><ol class=frames>");
        for (file, line, function) in &failure.frames {
            page.push_str(&format!(
                "<li><code>{}:{line}</code> in <code>{}</code></li>",
                esc(file),
                esc(function)
            ));
        }
        page.push_str("</ol></section>");
    }
    page.push_str(&format!(
        "<section><h2>Request</h2><table class=req><tr><th>method</th><td>{}</td></tr><tr><th>path</th><td>{}</td></tr>",
        esc(&request.method),
        esc(&request.path)
    ));
    if let Some(route_file) = &request.route_file {
        page.push_str(&format!(
            "<tr><th>route file</th><td>{}</td></tr>",
            esc(route_file)
        ));
    }
    for (name, value) in &request.params {
        page.push_str(&format!(
            "<tr><th>path parameter <code>{}</code></th><td>{}</td></tr>",
            esc(name),
            esc(value)
        ));
    }
    page.push_str("</table></section>");
    page.push_str(&format!(
        "<footer>filerouter development server: this page reloads when the project changes.</footer>\
         <script>(function(){{var g={generation};setInterval(function(){{fetch('/_filerouter/reload')\
         .then(function(r){{return r.text()}}).then(function(t){{if(+t!==g)location.reload()}})\
         .catch(function(){{}})}},700)}})()</script>"
    ));
    let document = format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width,initial-scale=1\">\
         <title>{} - filerouter</title><style>{STYLE}</style></head><body><main>{page}</main></body></html>",
        esc(&failure.kind)
    );
    let mut response = Response::new(full(document));
    *response.status_mut() = failure.status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

const STYLE: &str = "body{font:15px/1.55 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;background:#f6f6f4;color:#1d1d1f}\
main{max-width:980px;margin:0 auto;padding:1.5rem 1rem 3rem}header{border-left:6px solid #c62828;padding:.2rem 1rem;margin-bottom:1rem}\
.kind{font-weight:600;color:#c62828;margin:0;text-transform:none}h1{font-size:1.35rem;margin:.2rem 0}\
h2{font-size:1rem;margin:1.4rem 0 .4rem;color:#555}.where{font-family:ui-monospace,monospace;margin:.2rem 0;color:#333}\
.hints{background:#fff8e1;border:1px solid #f0d98a;border-radius:6px;padding:.2rem 1rem}.hints h2{color:#7a5b00}\
.code{background:#2b303b;color:#c0c5ce;border-radius:6px;padding:.6rem 0;overflow:auto;font:13px/1.5 ui-monospace,monospace}\
.code .line{display:block;padding:0 1rem;white-space:pre}.code .hit{background:#5b2630}.code .ln{color:#65737e;margin-right:1rem;user-select:none}\
.frames code,.req code,.hints code{font-family:ui-monospace,monospace}.req{border-collapse:collapse}.req th{text-align:left;padding:.2rem 1rem .2rem 0;color:#555;font-weight:500}\
footer{margin-top:2rem;color:#777;font-size:.85rem}\
@media(prefers-color-scheme:dark){body{background:#151515;color:#e4e4e4}.where{color:#ccc}h2,.req th{color:#aaa}.hints{background:#2d2613;border-color:#5c4b15}.hints h2{color:#e6c45c}}";
