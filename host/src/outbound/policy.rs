//! Which origins and addresses route code may reach: the allow-lists (`config.py`'s
//! `outbound["allow"]`, and under `run --tenants` the operator's `outbound` for the tenant),
//! how an origin matches an entry, and which addresses only an entry that names them unlocks.
//!
//! Nothing is allowed by default. An entry is an origin, `scheme://host[:port]`: the scheme
//! `http` or `https`, the port its default when not given, and the host one of
//! - a name (`api.stripe.com`), which matches itself only;
//! - `*.` and a name (`*.example.com`), which matches every name below it (`a.example.com`,
//!   `a.b.example.com`), not the name itself;
//! - `*`, which matches every name and address;
//! - an address (`127.0.0.1`, `[::1]`), which matches itself however the URL writes it
//!   (`2130706433`, `0177.0.0.1` and `[::ffff:127.0.0.1]` are all 127.0.0.1).
//!
//! After the origin, the addresses: every address the host connects to is checked after DNS
//! resolution ([`Rules::check_address`]). Loopback, private, link-local (cloud metadata at
//! 169.254.169.254), multicast, unspecified and reserved addresses are refused unless the entry
//! that allowed the origin names that address (or is `localhost`, for loopback): a public name
//! that resolves to 127.0.0.1 stays refused, and since the host connects to the address it
//! checked, DNS rebinding gains nothing. Under `run --tenants` both lists must allow a call:
//! a project can only narrow what the operator gives its tenant.
//!
//! Not here: connecting (`super::client`), limits and metrics (`super`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An origin's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn parse(text: &str) -> Option<Scheme> {
        match text {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A host as a URL names it, after the WHATWG URL parser (lower case, IP forms normalized).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Address(IpAddr),
}

impl Host {
    fn from_url(host: url::Host<&str>) -> Host {
        match host {
            url::Host::Domain(name) => Host::Name(name.trim_end_matches('.').to_string()),
            url::Host::Ipv4(ip) => Host::Address(IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => Host::Address(canonical(IpAddr::V6(ip))),
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Address(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Address(ip) => write!(f, "{ip}"),
        }
    }
}

/// The origin of a URL a call asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: Scheme,
    pub host: Host,
    pub port: u16,
}

impl Origin {
    /// `host[:port]`, the port only when it is not the scheme's: the `Host` header's value.
    pub fn authority(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.to_string()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme.as_str(), self.authority())
    }
}

/// A URL a call asks for, checked for what the host will send.
#[derive(Debug, Clone)]
pub struct Target {
    pub origin: Origin,
    /// The path and query, as sent in the request line (`/v1/charges?x=1`).
    pub path_and_query: String,
}

impl Target {
    /// `text` as an absolute `http` or `https` URL without credentials.
    pub fn parse(text: &str) -> Result<Target, String> {
        let url = url::Url::parse(text).map_err(|e| format!("{text:?} is not a URL: {e}"))?;
        let scheme = Scheme::parse(url.scheme()).ok_or_else(|| {
            format!(
                "{text:?}: only http:// and https:// URLs can be called, not {}://",
                url.scheme()
            )
        })?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!(
                "{}://{}: a URL with credentials (user:password@) is not sent; \
                 use an Authorization header",
                url.scheme(),
                url.host_str().unwrap_or_default()
            ));
        }
        let host = url
            .host()
            .map(Host::from_url)
            .ok_or_else(|| format!("{text:?} has no host"))?;
        let port = url.port().unwrap_or(scheme.default_port());
        let mut path_and_query = url.path().to_string();
        if let Some(query) = url.query() {
            path_and_query.push('?');
            path_and_query.push_str(query);
        }
        Ok(Target {
            origin: Origin { scheme, host, port },
            path_and_query,
        })
    }
}

/// What an entry's host matches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    /// One name (`api.stripe.com`; `localhost` also names loopback addresses).
    Name(String),
    /// Every name below this one (`*.example.com` holds `example.com`).
    Below(String),
    /// One address.
    Address(IpAddr),
    /// Everything (`*`).
    Any,
}

/// One entry of an allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    scheme: Scheme,
    host: HostRule,
    port: u16,
    /// As written, for messages.
    text: String,
}

impl Entry {
    /// One origin entry, `scheme://host[:port]`; an error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Entry, String> {
        let bad = |why: &str| {
            format!(
                "{text:?} {why}; write an origin such as \"https://api.example.com\", \"https://*.example.com\" or \"http://127.0.0.1:9000\""
            )
        };
        let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("has no scheme"))?;
        let scheme = Scheme::parse(&scheme.to_ascii_lowercase())
            .ok_or_else(|| bad("is not http:// or https://"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(bad(
                "is not an origin (it has a path, a query or credentials)",
            ));
        }
        // The host may be `*` or start with `*.`: parse the rest as a URL of its own.
        let (wildcard, authority) = if rest == "*" || rest.starts_with("*:") {
            (Some(""), format!("wildcard.invalid{}", &rest[1..]))
        } else if let Some(below) = rest.strip_prefix("*.") {
            (Some("below"), below.to_string())
        } else {
            (None, rest.to_string())
        };
        let url = url::Url::parse(&format!("{}://{authority}/", scheme.as_str()))
            .map_err(|e| bad(&format!("does not parse ({e})")))?;
        let host = url
            .host()
            .map(Host::from_url)
            .ok_or_else(|| bad("has no host"))?;
        let port = url.port().unwrap_or(scheme.default_port());
        let host = match (wildcard, host) {
            (Some(""), _) => HostRule::Any,
            (Some(_), Host::Name(name)) => HostRule::Below(name),
            (Some(_), Host::Address(_)) => {
                return Err(bad("puts a wildcard before an address"));
            }
            (None, Host::Name(name)) => HostRule::Name(name),
            (None, Host::Address(ip)) => HostRule::Address(ip),
        };
        Ok(Entry {
            scheme,
            host,
            port,
            text: text.to_string(),
        })
    }

    fn matches(&self, origin: &Origin) -> bool {
        if self.scheme != origin.scheme || self.port != origin.port {
            return false;
        }
        match (&self.host, &origin.host) {
            (HostRule::Any, _) => true,
            (HostRule::Name(rule), Host::Name(name)) => rule == name,
            (HostRule::Below(rule), Host::Name(name)) => name
                .strip_suffix(rule.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostRule::Address(rule), Host::Address(ip)) => rule == ip,
            _ => false,
        }
    }

    /// Whether this entry names `ip`, so that it may be reached even when it is special.
    fn names(&self, ip: IpAddr) -> bool {
        match &self.host {
            HostRule::Address(rule) => *rule == ip,
            HostRule::Name(name) => name == "localhost" && ip.is_loopback(),
            _ => false,
        }
    }
}

/// Where an allow-list is written, for messages: the place a user would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `config.py`'s `outbound["allow"]`.
    Project,
    /// The tenants file's `outbound` for the tenant (named).
    Operator(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Project => f.write_str("config.py's outbound[\"allow\"]"),
            Source::Operator(tenant) => {
                write!(f, "the tenants file's `outbound` for tenant {tenant}")
            }
        }
    }
}

/// One allow-list and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<Entry>,
    source: Source,
}

impl AllowList {
    /// The list `entries` written at `source`; an error names the first bad entry.
    pub fn parse(entries: &[String], source: Source) -> Result<AllowList, String> {
        let entries = entries
            .iter()
            .map(|text| Entry::parse(text).map_err(|e| format!("{source}: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(AllowList { entries, source })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn allows(&self, origin: &Origin) -> bool {
        self.entries.iter().any(|entry| entry.matches(origin))
    }

    /// The entry that both allows `origin` and names `ip`, if one does.
    fn names(&self, origin: &Origin, ip: IpAddr) -> bool {
        self.entries
            .iter()
            .any(|entry| entry.matches(origin) && entry.names(ip))
    }
}

/// A project's rules: its own list and, under `run --tenants`, the operator's for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    project: AllowList,
    operator: Option<AllowList>,
}

impl Rules {
    pub fn new(project: AllowList, operator: Option<AllowList>) -> Rules {
        Rules { project, operator }
    }

    /// No calls at all.
    pub fn none() -> Rules {
        Rules {
            project: AllowList {
                entries: Vec::new(),
                source: Source::Project,
            },
            operator: None,
        }
    }

    fn lists(&self) -> impl Iterator<Item = &AllowList> {
        std::iter::once(&self.project).chain(self.operator.as_ref())
    }

    /// Whether a call to `origin` may start; the refusal says which list refused and how to
    /// allow it.
    pub fn check_origin(&self, origin: &Origin) -> Result<(), String> {
        for list in self.lists() {
            if !list.allows(origin) {
                let hint = match &list.source {
                    Source::Project if list.is_empty() => format!(
                        "nothing is allowed by default: add \"{origin}\" to outbound[\"allow\"] in config.py"
                    ),
                    Source::Project => format!(
                        "no entry of config.py's outbound[\"allow\"] matches it: add \"{origin}\" there"
                    ),
                    Source::Operator(tenant) => format!(
                        "{} does not allow it, and a project can only narrow what the operator allows: \
                         the operator adds \"{origin}\" to `outbound` in [tenant.{tenant}]",
                        list.source
                    ),
                };
                return Err(format!("{origin} is not allowed: {hint}"));
            }
        }
        Ok(())
    }

    /// Whether the host may connect to `ip`, an address `origin`'s host resolved to (or is).
    pub fn check_address(&self, origin: &Origin, ip: IpAddr) -> Result<(), String> {
        let ip = canonical(ip);
        let Some(kind) = special(ip) else {
            return Ok(());
        };
        for list in self.lists() {
            if !list.names(origin, ip) {
                let shown = Host::Address(ip);
                let how = match &origin.host {
                    Host::Name(name) => format!("{name} resolved to {shown}, {kind} address"),
                    Host::Address(_) => format!("{shown} is {kind} address"),
                };
                let allow = Origin {
                    host: Host::Address(ip),
                    ..origin.clone()
                };
                return Err(format!(
                    "{origin} is refused: {how}, which only an entry naming that address may reach \
                     (list \"{allow}\" in {})",
                    list.source
                ));
            }
        }
        Ok(())
    }
}

/// `ip` with an IPv4 address inside IPv6 (`::ffff:a.b.c.d`, `64:ff9b::a.b.c.d`) as that
/// IPv4 address, so that every check sees what the packets would reach.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let s = v6.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let [.., a, b, c, d] = v6.octets();
                return IpAddr::V4(Ipv4Addr::new(a, b, c, d));
            }
            IpAddr::V6(v6)
        }
        v4 => v4,
    }
}

/// What kind of special address `ip` is (with its article, for a message), or None for an
/// address on the public internet.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some("an unspecified")
    } else if ip.is_loopback() {
        Some("a loopback")
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        Some("a private")
    } else if ip.is_link_local() {
        Some("a link-local")
    } else if ip.is_multicast() {
        Some("a multicast")
    } else if a >= 240
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || (a == 198 && (b & 0xfe) == 18)
    {
        Some("a reserved")
    } else {
        None
    }
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_unspecified() {
        Some("an unspecified")
    } else if ip.is_loopback() {
        Some("a loopback")
    } else if (first & 0xfe00) == 0xfc00 {
        Some("a private")
    } else if (first & 0xffc0) == 0xfe80 {
        Some("a link-local")
    } else if ip.is_multicast() {
        Some("a multicast")
    } else if ip.segments()[..6] == [0; 6] {
        // `::a.b.c.d`, the deprecated IPv4-compatible form.
        Some("a reserved")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(project: &[&str]) -> Rules {
        let entries: Vec<String> = project.iter().map(|s| s.to_string()).collect();
        Rules::new(AllowList::parse(&entries, Source::Project).unwrap(), None)
    }

    fn origin(url: &str) -> Origin {
        Target::parse(url).unwrap().origin
    }

    #[test]
    fn names_wildcards_and_ports_match_as_documented() {
        let r = rules(&[
            "https://api.stripe.com",
            "https://*.example.com",
            "http://localhost:9000",
        ]);
        for allowed in [
            "https://api.stripe.com/v1/charges",
            "https://API.Stripe.com:443/",
            "https://a.example.com/x",
            "https://a.b.example.com/",
            "http://localhost:9000/",
        ] {
            assert!(r.check_origin(&origin(allowed)).is_ok(), "{allowed}");
        }
        for refused in [
            "http://api.stripe.com/",
            "https://api.stripe.com:8443/",
            "https://example.com/",
            "https://evilexample.com/",
            "https://example.com.evil.net/",
            "http://localhost:9001/",
            "http://127.0.0.1:9000/",
        ] {
            assert!(r.check_origin(&origin(refused)).is_err(), "{refused}");
        }
    }

    #[test]
    fn every_spelling_of_loopback_is_the_same_address() {
        for url in [
            "http://127.0.0.1:9000/",
            "http://2130706433:9000/",
            "http://0177.0.0.1:9000/",
            "http://0x7f.1:9000/",
            "http://127.1:9000/",
            "http://[::ffff:127.0.0.1]:9000/",
            "http://[::ffff:7f00:1]:9000/",
        ] {
            let o = origin(url);
            assert_eq!(o.host, Host::Address("127.0.0.1".parse().unwrap()), "{url}");
        }
    }

    #[test]
    fn special_addresses_need_an_entry_that_names_them() {
        let wide = rules(&["http://*:9000", "https://*.example.com"]);
        for ip in [
            "127.0.0.1",
            "::1",
            "0.0.0.0",
            "::",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.169.254",
            "fe80::1",
            "fd00::1",
            "224.0.0.1",
            "ff02::1",
            "255.255.255.255",
            "::ffff:169.254.169.254",
            "64:ff9b::7f00:1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            let o = origin("http://anything.test:9000/");
            let refused = wide.check_address(&o, ip).unwrap_err();
            assert!(refused.contains("resolved to"), "{refused}");
        }
        assert!(
            wide.check_address(
                &origin("http://a.test:9000/"),
                "93.184.216.34".parse().unwrap()
            )
            .is_ok()
        );
        let named = rules(&["http://127.0.0.1:9000", "http://localhost:9001"]);
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(
            named
                .check_address(&origin("http://127.0.0.1:9000/"), local)
                .is_ok()
        );
        assert!(
            named
                .check_address(&origin("http://localhost:9001/"), local)
                .is_ok()
        );
        assert!(
            named
                .check_address(
                    &origin("http://localhost:9001/"),
                    "10.0.0.1".parse().unwrap()
                )
                .is_err()
        );
    }

    #[test]
    fn the_operator_list_narrows_and_messages_say_where_to_allow() {
        let project = AllowList::parse(
            &["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()],
            Source::Project,
        )
        .unwrap();
        let operator =
            AllowList::parse(&["http://127.0.0.1:1".into()], Source::Operator("b".into())).unwrap();
        let r = Rules::new(project, Some(operator));
        assert!(r.check_origin(&origin("http://127.0.0.1:1/")).is_ok());
        let refused = r.check_origin(&origin("http://127.0.0.1:2/")).unwrap_err();
        assert!(refused.contains("[tenant.b]"), "{refused}");
        let none = Rules::none()
            .check_origin(&origin("https://api.stripe.com/"))
            .unwrap_err();
        assert!(none.contains("nothing is allowed by default"), "{none}");
        assert!(none.contains("\"https://api.stripe.com\""), "{none}");
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for (entry, why) in [
            ("api.stripe.com", "no scheme"),
            ("ftp://x.com", "not http"),
            ("https://x.com/v1", "not an origin"),
            ("https://user:pw@x.com", "not an origin"),
            ("https://*.127.0.0.1", "wildcard before an address"),
            ("https://x.com:99999", "does not parse"),
        ] {
            let error = Entry::parse(entry).unwrap_err();
            assert!(error.contains(why), "{entry}: {error}");
        }
    }

    #[test]
    fn urls_that_cannot_be_called_are_refused_with_the_reason() {
        for (url, why) in [
            ("file:///etc/passwd", "only http"),
            ("https://user:secret@x.com/", "credentials"),
            ("not a url", "not a URL"),
        ] {
            let error = Target::parse(url).unwrap_err();
            assert!(error.contains(why), "{url}: {error}");
            assert!(!error.contains("secret"), "{error}");
        }
    }
}
