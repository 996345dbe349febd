//! TLS to Postgres as libpq's URL options say it: `sslmode` and `sslrootcert`, read out of the
//! operator's URL (or key-value connection string) before tokio-postgres parses the rest, which
//! knows neither `verify-ca`, `verify-full` nor `sslrootcert`.
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default, as libpq's) | if the server offers it | not checked |
//! | `require` | always | not checked; with `sslrootcert`, its chain (as libpq) |
//! | `verify-ca` | always | chains to a root of `sslrootcert` |
//! | `verify-full` | always | chains to a root of `sslrootcert`, and is for the host name |
//!
//! Without `sslrootcert` (or with `sslrootcert=system`), the roots are the system's and
//! Mozilla's ([`crate::server_tls`]); libpq would read `~/.postgresql/root.crt` instead. The TLS
//! itself is rustls through `tokio-postgres-rustls` (which also gives SCRAM its channel
//! binding). Not for: the connections themselves (that is [`super`]).

use std::path::PathBuf;

use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::server_tls::{self, Check};

/// libpq's `sslmode`, less `allow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, TlsUrlError> {
        match value {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            "allow" => Err(TlsUrlError::Allow),
            other => Err(TlsUrlError::Mode(other.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Why the URL's TLS options cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsUrlError {
    #[error("sslmode={0:?} is not one of disable, prefer, require, verify-ca, verify-full")]
    Mode(String),
    #[error("sslmode=allow (plain first, TLS if refused) is not supported: use prefer, or disable")]
    Allow,
    #[error("sslrootcert is empty: name a PEM file of CA certificates (or `system`)")]
    EmptyRootCert,
    #[error("{0}")]
    Tls(#[from] server_tls::TlsError),
}

/// The URL's TLS options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    pub mode: SslMode,
    /// `sslrootcert`, unless absent or `system`.
    pub root_cert: Option<PathBuf>,
}

impl TlsOptions {
    /// How much of the certificate is checked.
    fn check(&self) -> Check {
        match self.mode {
            SslMode::Disable | SslMode::Prefer => Check::Encrypt,
            SslMode::Require if self.root_cert.is_none() => Check::Encrypt,
            SslMode::Require | SslMode::VerifyCa => Check::Chain,
            SslMode::VerifyFull => Check::Full,
        }
    }

    /// What tokio-postgres is told: whether TLS is tried, and required.
    pub fn wire_mode(&self) -> WireMode {
        match self.mode {
            SslMode::Disable => WireMode::Disable,
            SslMode::Prefer => WireMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
        }
    }

    /// The connector for these options (it reads the CA file now).
    pub fn connector(&self) -> Result<MakeRustlsConnect, TlsUrlError> {
        let config = server_tls::client_config(self.check(), self.root_cert.as_deref())?;
        Ok(MakeRustlsConnect::new(config))
    }

    /// A failed connection's message with what the options make of it.
    pub fn explain(&self, message: &str) -> String {
        if self.mode == SslMode::Disable && message.contains("no encryption") {
            return format!(
                "{message} (the server accepts only TLS connections here: use sslmode=verify-full, or require)"
            );
        }
        if message.contains("server does not support TLS") {
            return format!(
                "{message} (sslmode={} needs TLS: turn ssl on in the server, or use sslmode=prefer)",
                self.mode.name()
            );
        }
        let checked = server_tls::explain(message, self.root_cert.as_deref());
        if checked != message {
            return format!("{checked} [sslmode={}]", self.mode.name());
        }
        checked
    }
}

/// `url` without its `sslmode` and `sslrootcert`, and what they said.
pub fn split(url: &str) -> Result<(String, TlsOptions), TlsUrlError> {
    let mut mode = None;
    let mut root_cert = None;
    let mut take = |key: &str, value: String| -> Result<bool, TlsUrlError> {
        match key {
            "sslmode" => {
                mode = Some(SslMode::parse(&value)?);
                Ok(true)
            }
            "sslrootcert" => {
                root_cert = Some(value);
                Ok(true)
            }
            _ => Ok(false),
        }
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_url(url, &mut take)?
    } else {
        split_key_values(url, &mut take)?
    };
    let root_cert = match root_cert.as_deref() {
        None | Some("system") => None,
        Some("") => return Err(TlsUrlError::EmptyRootCert),
        Some(path) => Some(PathBuf::from(path)),
    };
    Ok((
        rest,
        TlsOptions {
            mode: mode.unwrap_or(SslMode::Prefer),
            root_cert,
        },
    ))
}

type Take<'a> = dyn FnMut(&str, String) -> Result<bool, TlsUrlError> + 'a;

/// The URL form: the query's `key=value` pairs (after the credentials, which end at the first
/// `@`, as tokio-postgres reads them).
fn split_url(url: &str, take: &mut Take<'_>) -> Result<String, TlsUrlError> {
    let after_credentials = url.find('@').map_or(0, |at| at + 1);
    let Some(question) = url[after_credentials..].find('?') else {
        return Ok(url.to_string());
    };
    let question = after_credentials + question;
    let mut kept = Vec::new();
    for pair in url[question + 1..].split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8_lossy()
            .into_owned();
        if !take(&key, value)? {
            kept.push(pair);
        }
    }
    let mut rest = url[..question].to_string();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok(rest)
}

/// The key-value form (`host=db user=app sslmode=verify-full`), values plain or in single
/// quotes with backslash escapes, as libpq reads them. A string this cannot read is passed on
/// whole, for tokio-postgres to say what is wrong with it.
fn split_key_values(text: &str, take: &mut Take<'_>) -> Result<String, TlsUrlError> {
    let mut rest = String::new();
    let mut chars = text.char_indices().peekable();
    let mut kept_from = 0;
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Ok(text.to_string());
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        let quoted = chars.next_if(|(_, c)| *c == '\'').is_some();
        let mut closed = !quoted;
        while let Some((_, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, next)) = chars.next() {
                        value.push(next);
                    }
                }
                '\'' if quoted => {
                    closed = true;
                    break;
                }
                c if !quoted && c.is_whitespace() => break,
                c => value.push(c),
            }
        }
        if !closed {
            return Ok(text.to_string());
        }
        let end = chars.peek().map_or(text.len(), |(i, _)| *i);
        if take(&key, value)? {
            rest.push_str(&text[kept_from..start]);
            kept_from = end;
        }
    }
    rest.push_str(&text[kept_from..]);
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(mode: SslMode, root: Option<&str>) -> TlsOptions {
        TlsOptions {
            mode,
            root_cert: root.map(PathBuf::from),
        }
    }

    #[test]
    fn urls_lose_the_tls_options_and_keep_the_rest() {
        let (rest, tls) = split(
            "postgres://app:p%3Fw@db:5432/app?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://app:p%3Fw@db:5432/app?application_name=x");
        assert_eq!(tls, options(SslMode::VerifyFull, Some("/etc/ca.pem")));
        let (rest, tls) = split("postgresql://app@db/app?sslmode=disable").unwrap();
        assert_eq!(rest, "postgresql://app@db/app");
        assert_eq!(tls, options(SslMode::Disable, None));
        let (rest, tls) = split("postgres://app:pw@db/app").unwrap();
        assert_eq!(rest, "postgres://app:pw@db/app");
        assert_eq!(tls, options(SslMode::Prefer, None));
        // A `?` in the password is not the query's.
        let (rest, tls) = split("postgres://app:a?b@db/app?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://app:a?b@db/app");
        assert_eq!(tls.mode, SslMode::Require);
        let (_, tls) = split("postgres://app@db/app?sslrootcert=system&sslmode=verify-ca").unwrap();
        assert_eq!(tls, options(SslMode::VerifyCa, None));
    }

    #[test]
    fn key_value_strings_lose_the_tls_options_and_keep_the_rest() {
        let (rest, tls) = split(
            "host=db user=app password='a b\\'c' sslmode = verify-ca sslrootcert='/etc/my ca.pem' dbname=app",
        )
        .unwrap();
        assert_eq!(rest, "host=db user=app password='a b\\'c'  dbname=app");
        assert_eq!(tls, options(SslMode::VerifyCa, Some("/etc/my ca.pem")));
        assert!(rest.parse::<tokio_postgres::Config>().is_ok());
        let (rest, tls) = split("host=db sslmode=require").unwrap();
        assert_eq!(rest, "host=db ");
        assert_eq!(tls.mode, SslMode::Require);
        // Not readable here: passed on whole.
        assert_eq!(
            split("host=db password='open").unwrap().0,
            "host=db password='open"
        );
    }

    #[test]
    fn bad_modes_are_named() {
        assert_eq!(
            split("postgres://a@b/c?sslmode=verify_full").unwrap_err(),
            TlsUrlError::Mode("verify_full".into())
        );
        assert_eq!(
            split("host=b sslmode=allow").unwrap_err(),
            TlsUrlError::Allow
        );
        assert_eq!(
            split("postgres://a@b/c?sslrootcert=").unwrap_err(),
            TlsUrlError::EmptyRootCert
        );
    }

    #[test]
    fn require_with_a_ca_file_checks_the_chain_as_libpq() {
        assert_eq!(options(SslMode::Require, None).check(), Check::Encrypt);
        assert_eq!(options(SslMode::Require, Some("/ca")).check(), Check::Chain);
        assert_eq!(options(SslMode::VerifyCa, None).check(), Check::Chain);
        assert_eq!(options(SslMode::VerifyFull, None).check(), Check::Full);
        assert_eq!(
            options(SslMode::Prefer, Some("/ca")).check(),
            Check::Encrypt
        );
    }
}
