//! What RFC 9112 requires a server to refuse before it routes a request.
//!
//! hyper parses the request line and headers, bounds their size and refuses a
//! `Transfer-Encoding` whose last coding is not `chunked` (400). What it lets through and the
//! RFC does not: an HTTP/1.1 request without `Host`, or with more than one (400, RFC 9112
//! section 3.2), and a transfer coding other than `chunked` that the server cannot undo (501,
//! section 6.1). This module only looks at the request head; it does not route or read bodies.

use hyper::{HeaderMap, StatusCode, Version, header};

/// Why a request head is refused: the status and the `detail` of the JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub detail: &'static str,
}

/// `None` if the head may be routed, else the answer it gets.
pub fn check(version: Version, headers: &HeaderMap) -> Option<Refusal> {
    let hosts = headers.get_all(header::HOST).iter().count();
    if hosts > 1 {
        return Some(Refusal {
            status: StatusCode::BAD_REQUEST,
            detail: "More than one Host header",
        });
    }
    if hosts == 0 && version >= Version::HTTP_11 {
        return Some(Refusal {
            status: StatusCode::BAD_REQUEST,
            detail: "Missing Host header",
        });
    }
    for value in headers.get_all(header::TRANSFER_ENCODING) {
        let Ok(text) = value.to_str() else {
            return Some(unsupported_coding());
        };
        for coding in text.split(',') {
            let coding = coding.split(';').next().unwrap_or("").trim();
            if !coding.is_empty() && !coding.eq_ignore_ascii_case("chunked") {
                return Some(unsupported_coding());
            }
        }
    }
    None
}

fn unsupported_coding() -> Refusal {
    Refusal {
        status: StatusCode::NOT_IMPLEMENTED,
        detail: "Unsupported Transfer-Encoding: only chunked is understood",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn host_must_appear_once_in_http_11() {
        let one = headers(&[("host", "a")]);
        assert_eq!(check(Version::HTTP_11, &one), None);
        let two = headers(&[("host", "a"), ("host", "b")]);
        assert_eq!(
            check(Version::HTTP_11, &two).map(|r| r.status),
            Some(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            check(Version::HTTP_10, &two).map(|r| r.status),
            Some(StatusCode::BAD_REQUEST)
        );
        let none = HeaderMap::new();
        assert_eq!(
            check(Version::HTTP_11, &none).map(|r| r.status),
            Some(StatusCode::BAD_REQUEST)
        );
        assert_eq!(check(Version::HTTP_10, &none), None);
    }

    #[test]
    fn only_chunked_transfer_coding_is_understood() {
        for ok in ["chunked", "Chunked", " chunked "] {
            let h = headers(&[("host", "a"), ("transfer-encoding", ok)]);
            assert_eq!(check(Version::HTTP_11, &h), None, "{ok}");
        }
        for bad in [
            "gzip, chunked",
            "deflate",
            "compress,chunked",
            "x;q=1, chunked",
        ] {
            let h = headers(&[("host", "a"), ("transfer-encoding", bad)]);
            assert_eq!(
                check(Version::HTTP_11, &h).map(|r| r.status),
                Some(StatusCode::NOT_IMPLEMENTED),
                "{bad}"
            );
        }
        let split = headers(&[
            ("host", "a"),
            ("transfer-encoding", "gzip"),
            ("transfer-encoding", "chunked"),
        ]);
        assert_eq!(
            check(Version::HTTP_11, &split).map(|r| r.status),
            Some(StatusCode::NOT_IMPLEMENTED)
        );
    }
}
