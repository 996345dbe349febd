//! Static files: the project's `public/` folder, served at `/` when no route matches.
//!
//! Files are opened through a capability handle on `public/` (cap-std), never by joining path
//! strings: `..`, absolute paths and symlinks that lead outside `public/` cannot be opened.
//! Names starting with `.` are never served. Responses carry a content type from the file
//! name, `ETag` and `Last-Modified`, answer conditional requests with 304, and stream the file
//! rather than read it into memory. Only regular files are served: a file is opened with
//! `O_NONBLOCK` (a FIFO never blocks the open) and checked with `fstat` before anything is read,
//! so a FIFO, a device or a symlink to one is a 404. [`serve`] blocks on the file system: the
//! router calls it on a blocking thread. This module does not decide *when* a static file is
//! served (that is the router's job) and runs no project code.

use std::{path::Path, time::SystemTime};

use cap_std::{
    ambient_authority,
    fs::{Dir, OpenOptions, OpenOptionsExt},
};
use futures_util::TryStreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::{
    HeaderMap, Response, StatusCode,
    body::Frame,
    header::{self, HeaderValue},
};
use percent_encoding::percent_decode_str;
use tokio_util::io::ReaderStream;

use crate::response::{Body, empty_body};

/// How much of a file is read at a time while streaming it.
const CHUNK: usize = 64 * 1024;

/// The answer for `path` (still percent-encoded) from `root/public/`, or `None` if there is no
/// such file there. `head` leaves the body out.
pub fn serve(root: &Path, path: &str, headers: &HeaderMap, head: bool) -> Option<Response<Body>> {
    let relative = relative_path(path)?;
    let dir = Dir::open_ambient_dir(root.join("public"), ambient_authority()).ok()?;
    let (file, meta, relative) = open_file(&dir, &relative)?;
    let modified = meta.modified().ok().map(|t| t.into_std());
    let etag = etag(meta.len(), modified);

    let mut response = if not_modified(headers, &etag, modified) {
        let mut response = Response::new(empty_body());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
    } else {
        let mut response = if head {
            Response::new(empty_body())
        } else {
            Response::new(stream(file.into_std()))
        };
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(meta.len()));
        let mime = mime_guess::from_path(&relative).first_or_octet_stream();
        let content_type = if mime.type_() == mime_guess::mime::TEXT
            || mime.essence_str() == "application/javascript"
        {
            format!("{}; charset=utf-8", mime.essence_str())
        } else {
            mime.essence_str().to_string()
        };
        if let Ok(value) = HeaderValue::from_str(&content_type) {
            response.headers_mut().insert(header::CONTENT_TYPE, value);
        }
        response
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    if let Some(modified) = modified
        && let Ok(value) = HeaderValue::from_str(&httpdate::fmt_http_date(modified))
    {
        headers.insert(header::LAST_MODIFIED, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Some(response)
}

/// The request path as a relative path inside `public/`, or `None` if it cannot name a file
/// there: every segment percent-decoded once, and none may be empty, `.`/`..`, hidden, or hold
/// a separator or NUL after decoding.
pub fn relative_path(path: &str) -> Option<String> {
    let trimmed = path.strip_prefix('/')?;
    if trimmed.is_empty() {
        return Some(String::new());
    }
    let mut parts = Vec::new();
    for segment in trimmed.split('/') {
        let decoded = percent_decode_str(segment).decode_utf8().ok()?;
        if decoded.is_empty()
            || decoded.starts_with('.')
            || decoded.contains(['/', '\\', '\0'])
            || decoded.contains(':')
        {
            return None;
        }
        parts.push(decoded.into_owned());
    }
    Some(parts.join("/"))
}

/// Open `relative` in `dir`; a folder serves its `index.html`. cap-std refuses anything that
/// would leave `dir`, symlinks included; anything but a regular file is passed over.
fn open_file(
    dir: &Dir,
    relative: &str,
) -> Option<(cap_std::fs::File, cap_std::fs::Metadata, String)> {
    let candidates = if relative.is_empty() {
        vec!["index.html".to_string()]
    } else {
        vec![relative.to_string(), format!("{relative}/index.html")]
    };
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    for candidate in candidates {
        if let Ok(file) = dir.open_with(&candidate, &options)
            && let Ok(meta) = file.metadata()
            && meta.is_file()
        {
            return Some((file, meta, candidate));
        }
    }
    None
}

/// The `ETag` of a file of `len` bytes modified at `modified`.
pub fn etag(len: u64, modified: Option<SystemTime>) -> String {
    let nanos = modified
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("\"{len:x}-{nanos:x}\"")
}

/// Whether the client's copy is current: `If-None-Match` decides when present, else
/// `If-Modified-Since` (to the second).
pub fn not_modified(headers: &HeaderMap, etag: &str, modified: Option<SystemTime>) -> bool {
    if let Some(value) = headers.get(header::IF_NONE_MATCH) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        return value
            .split(',')
            .map(|tag| tag.trim().trim_start_matches("W/"))
            .any(|tag| tag == "*" || tag == etag);
    }
    let (Some(since), Some(modified)) = (
        headers
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok()),
        modified,
    ) else {
        return false;
    };
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    };
    secs(modified) <= secs(since)
}

fn stream(file: std::fs::File) -> Body {
    let reader = ReaderStream::with_capacity(tokio::fs::File::from_std(file), CHUNK);
    BodyExt::boxed(StreamBody::new(reader.map_ok(Frame::data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_cannot_name_a_file_in_public_are_refused() {
        assert_eq!(relative_path("/logo.png").as_deref(), Some("logo.png"));
        assert_eq!(relative_path("/a%20b/c.txt").as_deref(), Some("a b/c.txt"));
        assert_eq!(relative_path("/").as_deref(), Some(""));
        for bad in [
            "/../etc/passwd",
            "/%2e%2e/etc/passwd",
            "/a/%2E%2E/%2E%2E/x",
            "/a%2F..%2Fb",
            "/.env",
            "/a//b",
            "/%00",
            "/C:%5Cwindows",
            "relative",
        ] {
            assert_eq!(relative_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn etags_and_dates_decide_304() {
        let now = SystemTime::now();
        let tag = etag(10, Some(now));
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&tag).unwrap());
        assert!(not_modified(&headers, &tag, Some(now)));
        assert!(!not_modified(&headers, "\"other\"", Some(now)));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::IF_MODIFIED_SINCE,
            HeaderValue::from_str(&httpdate::fmt_http_date(now)).unwrap(),
        );
        assert!(not_modified(&headers, &tag, Some(now)));
        assert!(!not_modified(
            &headers,
            &tag,
            Some(now + std::time::Duration::from_secs(5))
        ));
    }
}
