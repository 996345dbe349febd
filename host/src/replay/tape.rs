//! The trace file (a "tape"): what one request learned from outside the sandbox, in the order it
//! asked, so that [`super::replaying`] can answer the same questions the same way.
//!
//! JSON, versioned by [`FORMAT`]; a file of another format is refused with both numbers. Host
//! calls are kept as their WIT names (`kv.get`) with their arguments and results as JSON (the
//! generated WIT types' own serde form, bytes as [`Bytes`] where the host chooses the form).
//! Not for: deciding what is recorded (the hooks in `crate::sandbox`), nor where tapes are
//! kept ([`super::store`]).

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The format of the trace files this build writes and reads.
pub const FORMAT: u32 = 1;

/// One recorded request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Tape {
    pub format: u32,
    /// 32 hexadecimal digits, also the file's name in the store.
    pub id: String,
    pub filerouter_version: String,
    /// The build's identity: the BLAKE3 checksum that ends its `bundle.bin`. Replay refuses
    /// another.
    pub bundle: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// RFC 3339, UTC.
    pub recorded_at: String,
    /// The request as the guest received it (`types.http-request`), with the configured
    /// headers' values replaced by [`redacted_header`].
    pub request: Request,
    /// What served it (`types.target`), as the router decided.
    pub target: Value,
    /// The header names whose values were not recorded.
    pub redacted_headers: Vec<String>,
    /// The operator's values the request was given: names and a hash of each value, never the
    /// value (route code got `[NAME]` in replay).
    pub environment: Vec<EnvironmentValue>,
    /// WASI's insecure seed the instance was given.
    pub insecure_seed: String,
    /// Every read of the wall clock, nanoseconds since the Unix epoch, in order.
    pub wall_clock: Vec<u64>,
    /// Every read of the monotonic clock, in nanoseconds, in order.
    pub monotonic_clock: Vec<u64>,
    /// Every byte of secure randomness the guest drew (the seeds it draws at start
    /// included), in order, base64.
    pub random: String,
    /// Every byte of insecure randomness, in order, base64.
    pub insecure_random: String,
    /// The host calls, in the order they completed.
    pub calls: Vec<Call>,
    /// How the request ended.
    pub outcome: Outcome,
    /// The tape reached its memory bound and holds only the first calls: a replay stops
    /// where it ends.
    #[serde(default)]
    pub truncated: bool,
}

/// One request's head and body.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub client: Option<String>,
}

/// A value of the operator's environment as a trace keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EnvironmentValue {
    pub name: String,
    /// BLAKE3 of the value, hexadecimal (its first 16 digits).
    pub blake3: String,
}

/// One host call: what was asked and what the host answered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Call {
    /// The WIT interface and function (`sql.execute`).
    pub call: String,
    pub args: Value,
    pub answer: Answer,
}

/// What a host call gave back.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The value the guest received.
    Value(Value),
    /// The call stopped the request (a limit reached inside it); the text says why.
    Stopped(String),
}

/// How a recorded request ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Outcome {
    /// The guest's response.
    Response {
        status: u16,
        body_bytes: u64,
        /// BLAKE3 of the body, hexadecimal.
        body_blake3: String,
    },
    /// A streamed response (`StreamingResponse`, Server-Sent Events): its head's status, and
    /// the chunks its call wrote, joined (`super::sent`).
    Streamed {
        status: u16,
        chunks: u64,
        body_bytes: u64,
        /// BLAKE3 of the body the chunks make, hexadecimal.
        body_blake3: String,
    },
    /// A WebSocket session the call accepted (101): the messages it sent and its close code.
    Socket {
        messages: u64,
        bytes: u64,
        /// BLAKE3 over the messages, each with its kind and length, and the close frame's code.
        blake3: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        close: Option<u16>,
    },
    /// No response from project code: what the sandbox reported (an exception, a limit), or
    /// [`Outcome::client_closed`].
    Failed {
        /// The status the server answered with.
        status: u16,
        /// `Project`, `Timeout`, `MemoryCap`, `Trap`, ...
        error: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<u32>,
    },
}

impl Outcome {
    /// The status the client got (101 for a WebSocket session).
    pub fn status(&self) -> u16 {
        match self {
            Outcome::Response { status, .. }
            | Outcome::Streamed { status, .. }
            | Outcome::Failed { status, .. } => *status,
            Outcome::Socket { .. } => 101,
        }
    }

    /// The client closed its connection before the response was sent, and the call was
    /// dropped where it was: nginx's 499 ("client closed request"). Kept as a 5xx is.
    pub fn client_closed() -> Outcome {
        Outcome::Failed {
            status: CLIENT_CLOSED,
            error: "ClientClosed".into(),
            message: "the client closed the connection before the response was sent".into(),
            file: None,
            line: None,
        }
    }

    /// Whether this is [`Outcome::client_closed`].
    pub fn is_client_closed(&self) -> bool {
        matches!(self, Outcome::Failed { status, error, .. } if *status == CLIENT_CLOSED && error == "ClientClosed")
    }

    /// The outcome of a response with `status` and `body`.
    pub fn response(status: u16, body: &[u8]) -> Outcome {
        Outcome::Response {
            status,
            body_bytes: body.len() as u64,
            body_blake3: blake3::hash(body).to_hex().to_string(),
        }
    }

    /// One line for a terminal.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Response {
                status,
                body_bytes,
                body_blake3,
            } => format!(
                "response {status}, {body_bytes} bytes (blake3 {})",
                &body_blake3[..16.min(body_blake3.len())]
            ),
            Outcome::Streamed {
                status,
                chunks,
                body_bytes,
                body_blake3,
            } => format!(
                "streamed response {status}, {chunks} chunks, {body_bytes} bytes (blake3 {})",
                &body_blake3[..16.min(body_blake3.len())]
            ),
            Outcome::Socket {
                messages,
                bytes,
                blake3,
                close,
            } => format!(
                "websocket session, {messages} messages sent, {bytes} bytes (blake3 {}){}",
                &blake3[..16.min(blake3.len())],
                close.map_or(String::new(), |code| format!(", closed with {code}"))
            ),
            Outcome::Failed {
                status,
                error,
                message,
                file,
                line,
            } => {
                let at = match (file, line) {
                    (Some(file), Some(line)) => format!(" at {file}:{line}"),
                    (Some(file), None) => format!(" at {file}"),
                    _ => String::new(),
                };
                format!("{status}: {error}: {message}{at}")
            }
        }
    }
}

/// The status of a request whose client closed its connection first (nginx's).
pub const CLIENT_CLOSED: u16 = 499;

/// Bytes as a trace keeps them: text when they are UTF-8 (readable, and where the operator's
/// values are redacted in every spelling), else base64.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum BytesForm {
    Text(String),
    Base64(String),
}

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => BytesForm::Text(text.to_string()),
            Err(_) => BytesForm::Base64(base64::engine::general_purpose::STANDARD.encode(&self.0)),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match BytesForm::deserialize(deserializer)? {
            BytesForm::Text(text) => Ok(Bytes(text.into_bytes())),
            BytesForm::Base64(text) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map(Bytes)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// What a redacted header's value becomes: its hash, so two requests with the same value can
/// still be told apart from two with different ones.
pub fn redacted_header(value: &str) -> String {
    format!(
        "[redacted {}]",
        &blake3::hash(value.as_bytes()).to_hex()[..16]
    )
}

/// Why a trace file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TapeError {
    #[error("not a filerouter trace: {0}")]
    Invalid(String),
    #[error("trace format {found}, but this filerouter reads format {expected}")]
    Format { found: u32, expected: u32 },
}

impl Tape {
    /// Read a trace from its JSON text, refusing another format.
    pub fn from_json(text: &[u8]) -> Result<Tape, TapeError> {
        #[derive(Deserialize)]
        struct Head {
            format: u32,
        }
        let head: Head =
            serde_json::from_slice(text).map_err(|e| TapeError::Invalid(e.to_string()))?;
        if head.format != FORMAT {
            return Err(TapeError::Format {
                found: head.format,
                expected: FORMAT,
            });
        }
        serde_json::from_slice(text).map_err(|e| TapeError::Invalid(e.to_string()))
    }

    /// The bytes of the randomness streams.
    pub fn random_bytes(&self) -> Result<(Vec<u8>, Vec<u8>), TapeError> {
        let decode = |text: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| TapeError::Invalid(format!("random bytes: {e}")))
        };
        Ok((decode(&self.random)?, decode(&self.insecure_random)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_text_when_they_can_be_and_base64_otherwise() {
        let text = serde_json::to_string(&Bytes(b"hello".to_vec())).unwrap();
        assert_eq!(text, r#"{"text":"hello"}"#);
        let binary = serde_json::to_string(&Bytes(vec![0xff, 0])).unwrap();
        assert_eq!(binary, r#"{"base64":"/wA="}"#);
        for bytes in [b"hello".to_vec(), vec![0xff, 0]] {
            let json = serde_json::to_string(&Bytes(bytes.clone())).unwrap();
            assert_eq!(serde_json::from_str::<Bytes>(&json).unwrap().0, bytes);
        }
    }

    #[test]
    fn another_format_is_refused_naming_both() {
        let error = Tape::from_json(br#"{"format": 99}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            "trace format 99, but this filerouter reads format 1"
        );
        assert!(matches!(
            Tape::from_json(b"nope"),
            Err(TapeError::Invalid(_))
        ));
    }
}
