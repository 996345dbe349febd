//! The request-head handling the host does itself, on generated heads: the RFC 9112 checks
//! (`Host`, `Transfer-Encoding`), `Content-Length`, the conditional-request headers of static
//! files (`If-None-Match`, `If-Modified-Since`).
//! hyper has parsed the head already; none of this may panic on what it lets through.
#![no_main]

use arbitrary::Arbitrary;
use filerouter::{http_checks, public, router};
use hyper::{
    HeaderMap, Version,
    header::{HeaderName, HeaderValue},
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Head {
    http10: bool,
    headers: Vec<(String, Vec<u8>)>,
    etag_len: u64,
    modified_secs: Option<u32>,
}

fuzz_target!(|head: Head| {
    let mut headers = HeaderMap::new();
    for (name, value) in head.headers.iter().take(32) {
        let name = match name.as_str() {
            "h" => HeaderName::from_static("host"),
            "t" => HeaderName::from_static("transfer-encoding"),
            "c" => HeaderName::from_static("content-length"),
            "n" => HeaderName::from_static("if-none-match"),
            "m" => HeaderName::from_static("if-modified-since"),
            other => match HeaderName::from_bytes(other.as_bytes()) {
                Ok(name) => name,
                Err(_) => continue,
            },
        };
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(name, value);
        }
    }
    let version = if head.http10 { Version::HTTP_10 } else { Version::HTTP_11 };
    let _ = http_checks::check(version, &headers);
    let _ = router::content_length(&headers);
    let modified = head
        .modified_secs
        .map(|s| std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::from(s)));
    let etag = public::etag(head.etag_len, modified);
    let _ = public::not_modified(&headers, &etag, modified);
});
