//! Host names: the patterns a tenant claims (`acme.example.com`, `*.acme.example.com`) and the
//! one host a request names.
//!
//! A request names its host in the request target when that is in absolute form
//! (`GET http://acme.example.com/ HTTP/1.1`), and otherwise in its one `Host` header. RFC 9112
//! (section 3.2.2) says the target's authority wins and `Host` is then ignored; so it is here.
//! `X-Forwarded-Host`, `Forwarded` and every other header are never read: the server is the edge.
//! A request with two `Host` headers, none, user information in the authority (`a@b`) or a name
//! that is not a host name is refused with 400 before any tenant is chosen, so no request can
//! name two tenants at once. Names compare without case, without the port and without a final
//! dot. This module decides nothing else.

use std::fmt;

use hyper::{HeaderMap, Uri, header};

/// A host a tenant claims: an exact name, or `*.` and a suffix, which matches every name that
/// ends in `.suffix` (any depth: `a.acme.example.com`, `a.b.acme.example.com`) but not the suffix
/// itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    Exact(String),
    /// The suffix, without the `*.`.
    Wildcard(String),
}

impl HostPattern {
    /// Parse a pattern as written in tenants.toml.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let (wild, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let normal = normalize(name).ok_or_else(|| {
            format!(
                "{text:?} is not a host name (letters, digits, '-' and '.', optionally starting with \"*.\"; no port, no scheme)"
            )
        })?;
        if normal.contains(':') && !normal.starts_with('[') {
            return Err(format!(
                "{text:?}: leave the port out; hosts match on any port"
            ));
        }
        if wild {
            if normal.starts_with('[') {
                return Err(format!(
                    "{text:?}: a wildcard needs a domain name after \"*.\""
                ));
            }
            Ok(HostPattern::Wildcard(normal))
        } else {
            Ok(HostPattern::Exact(normal))
        }
    }

    /// Whether the (normalized) `host` is one this pattern claims.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(name) => host == name,
            HostPattern::Wildcard(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }

    /// Whether some host name would match both patterns.
    pub fn overlaps(&self, other: &HostPattern) -> bool {
        match (self, other) {
            (HostPattern::Exact(a), HostPattern::Exact(b)) => a == b,
            (HostPattern::Exact(name), wild @ HostPattern::Wildcard(_))
            | (wild @ HostPattern::Wildcard(_), HostPattern::Exact(name)) => wild.matches(name),
            (HostPattern::Wildcard(a), HostPattern::Wildcard(b)) => {
                a == b || a.ends_with(&format!(".{b}")) || b.ends_with(&format!(".{a}"))
            }
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(name) => write!(f, "{name}"),
            HostPattern::Wildcard(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

/// Why a request's host could not be told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("the request has no Host header")]
    Missing,
    #[error("the request has more than one Host header")]
    Several,
    #[error("the Host header or request target is not a valid host")]
    Invalid,
}

/// The one host a request names, normalized (lower case, no port, no final dot).
pub fn request_host(uri: &Uri, headers: &HeaderMap) -> Result<String, HostError> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let header_host = hosts.next();
    if hosts.next().is_some() {
        return Err(HostError::Several);
    }
    // Absolute form: the target's authority wins, the Host header is ignored (RFC 9112 3.2.2).
    let authority = match uri.authority() {
        Some(authority) => authority.as_str(),
        None => header_host
            .ok_or(HostError::Missing)?
            .to_str()
            .map_err(|_| HostError::Invalid)?,
    };
    if authority.contains('@') {
        return Err(HostError::Invalid);
    }
    let host = strip_port(authority).ok_or(HostError::Invalid)?;
    normalize(host).ok_or(HostError::Invalid)
}

/// `host[:port]` without the port; `None` if the port is not a number.
fn strip_port(authority: &str) -> Option<&str> {
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let rest = &authority[end + 1..];
        if rest.is_empty()
            || (rest.starts_with(':') && rest[1..].bytes().all(|b| b.is_ascii_digit()))
        {
            return Some(&authority[..=end]);
        }
        return None;
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => Some(host),
        Some(_) => None,
        None => Some(authority),
    }
}

/// Lower case without one final dot; `None` unless it is a DNS name (letters, digits, `-`,
/// `_`, dots between non-empty labels) or a bracketed IPv6 address.
fn normalize(host: &str) -> Option<String> {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.is_empty() || host.len() > 253 {
        return None;
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let ok = !inner.is_empty()
            && inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        return ok.then_some(host);
    }
    let ok = host.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    ok.then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(text: &str) -> Uri {
        text.parse().unwrap()
    }

    fn headers(hosts: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for host in hosts {
            map.append(header::HOST, host.parse().unwrap());
        }
        map
    }

    #[test]
    fn patterns_match_exact_and_wildcard_names() {
        let exact = HostPattern::parse("Acme.Example.com.").unwrap();
        assert!(exact.matches("acme.example.com"));
        assert!(!exact.matches("x.acme.example.com"));
        let wild = HostPattern::parse("*.acme.example.com").unwrap();
        assert!(wild.matches("a.acme.example.com"));
        assert!(wild.matches("a.b.acme.example.com"));
        assert!(!wild.matches("acme.example.com"));
        assert!(!wild.matches("evilacme.example.com"));
        assert!(!wild.matches(".acme.example.com"));
        for bad in [
            "",
            "*.",
            "a b",
            "http://a.com",
            "a.com:80",
            "a..b",
            "*.*.a",
            "a/b",
            "*",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn overlaps_are_found() {
        let p = |t: &str| HostPattern::parse(t).unwrap();
        assert!(p("a.com").overlaps(&p("A.com")));
        assert!(p("x.a.com").overlaps(&p("*.a.com")));
        assert!(p("*.a.com").overlaps(&p("*.b.a.com")));
        assert!(!p("a.com").overlaps(&p("*.a.com")));
        assert!(!p("*.a.com").overlaps(&p("*.ba.com")));
        assert!(!p("b.com").overlaps(&p("a.com")));
    }

    #[test]
    fn the_request_host_comes_from_one_place() {
        assert_eq!(
            request_host(&uri("/"), &headers(&["Blog.Example.com:8080"])).unwrap(),
            "blog.example.com"
        );
        assert_eq!(
            request_host(&uri("/"), &headers(&["blog.example.com."])).unwrap(),
            "blog.example.com"
        );
        assert_eq!(
            request_host(&uri("/"), &headers(&["[::1]:80"])).unwrap(),
            "[::1]"
        );
        // Absolute form: the target wins over the Host header.
        assert_eq!(
            request_host(
                &uri("http://acme.example.com/x"),
                &headers(&["blog.example.com"])
            )
            .unwrap(),
            "acme.example.com"
        );
        assert_eq!(
            request_host(&uri("/"), &headers(&[])),
            Err(HostError::Missing)
        );
        assert_eq!(
            request_host(&uri("/"), &headers(&["a.com", "b.com"])),
            Err(HostError::Several)
        );
        for bad in [
            "a.com, b.com",
            "a.com:x",
            "",
            "a b",
            "a.com:80:80",
            "[::1",
            "a@b.com",
        ] {
            assert!(
                request_host(&uri("/"), &headers(&[bad])).is_err(),
                "{bad:?} was accepted"
            );
        }
        assert_eq!(
            request_host(
                &uri("http://acme.example.com@blog.example.com/"),
                &headers(&["blog.example.com"])
            ),
            Err(HostError::Invalid)
        );
    }
}
