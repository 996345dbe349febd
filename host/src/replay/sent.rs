//! What a streamed response or a WebSocket session sent, in order: the outcome its trace keeps
//! (how many chunks or messages, how many bytes, one BLAKE3 hash over all of them), and in a
//! replay the frames themselves, for `filerouter replay` to show. A streamed response's hash is
//! that of its body (the chunks joined), so it compares with a whole response's; a session's
//! hashes each message with its kind and length, then the close frame's code.
//!
//! The sandbox tells it what went out (`Tap::sent`), recorded and replayed alike: a chunk or a
//! message counts once `write`/`send` answered `ok`. Not for: what the guest received (the
//! trace's calls hold that), nor deciding what is kept (`super::recording`).

use super::tape::Outcome;

/// One thing the guest sent, as the sandbox reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum Sent {
    /// `response-stream.start` succeeded: the head went out with `status`.
    StreamStarted(u16),
    /// A chunk of the streamed body.
    Chunk(Vec<u8>),
    /// `websocket.accept` succeeded: the 101 went out.
    Accepted,
    /// A WebSocket message.
    Text(String),
    Binary(Vec<u8>),
    /// `websocket.close` with this code and reason.
    Close(u16, String),
}

/// What kind of long answer a call gave.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Stream(u16),
    Socket,
}

/// The frames a call sent, summed up (and kept, in replay).
#[derive(Default)]
pub struct SentLog {
    kind: Option<Kind>,
    count: u64,
    bytes: u64,
    close: Option<u16>,
    hasher: blake3::Hasher,
    /// The frames themselves; None when only the summary is wanted (recording).
    frames: Option<Vec<Sent>>,
}

impl SentLog {
    /// A log that keeps the frames (a replay shows them).
    pub fn keeping() -> SentLog {
        SentLog {
            frames: Some(Vec::new()),
            ..SentLog::default()
        }
    }

    pub fn add(&mut self, sent: Sent) {
        match &sent {
            Sent::StreamStarted(status) => self.kind = Some(Kind::Stream(*status)),
            Sent::Accepted => self.kind = Some(Kind::Socket),
            Sent::Chunk(bytes) => {
                self.count += 1;
                self.bytes += bytes.len() as u64;
                self.hasher.update(bytes);
            }
            Sent::Text(text) => self.message(b't', text.as_bytes()),
            Sent::Binary(bytes) => self.message(b'b', bytes),
            Sent::Close(code, _) => {
                self.close = Some(*code);
                self.hasher.update(b"c");
                self.hasher.update(&code.to_le_bytes());
            }
        }
        if let Some(frames) = &mut self.frames {
            frames.push(sent);
        }
    }

    fn message(&mut self, kind: u8, bytes: &[u8]) {
        self.count += 1;
        self.bytes += bytes.len() as u64;
        self.hasher.update(&[kind]);
        self.hasher.update(&(bytes.len() as u64).to_le_bytes());
        self.hasher.update(bytes);
    }

    /// The frames sent, in order (empty unless [`SentLog::keeping`]).
    pub fn frames(&self) -> &[Sent] {
        self.frames.as_deref().unwrap_or(&[])
    }

    /// The request's outcome, given how its call ended: the stream or the session when one was
    /// started and the call did not fail (a call that failed after its head or its 101 went
    /// out is kept as that failure), else `ended` as it is.
    pub fn outcome(&self, ended: Outcome) -> Outcome {
        let failed = matches!(&ended, Outcome::Failed { .. }) && !ended.is_client_closed();
        if failed {
            return ended;
        }
        let blake3 = self.hasher.finalize().to_hex().to_string();
        match self.kind {
            None => ended,
            Some(Kind::Stream(status)) => Outcome::Streamed {
                status,
                chunks: self.count,
                body_bytes: self.bytes,
                body_blake3: blake3,
            },
            Some(Kind::Socket) => Outcome::Socket {
                messages: self.count,
                bytes: self.bytes,
                blake3,
                close: self.close,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streams_hash_is_its_bodys_and_a_sessions_counts_each_message() {
        let mut stream = SentLog::default();
        stream.add(Sent::StreamStarted(200));
        stream.add(Sent::Chunk(b"data: 1\n\n".to_vec()));
        stream.add(Sent::Chunk(b"data: 2\n\n".to_vec()));
        let Outcome::Streamed {
            status,
            chunks,
            body_bytes,
            body_blake3,
        } = stream.outcome(Outcome::response(200, b""))
        else {
            panic!("not a stream");
        };
        assert_eq!((status, chunks, body_bytes), (200, 2, 18));
        assert_eq!(
            body_blake3,
            blake3::hash(b"data: 1\n\ndata: 2\n\n").to_hex().to_string()
        );
        assert!(stream.frames().is_empty(), "recording keeps no frames");

        // "ab" then "c" is not "a" then "bc": each message's length is in the hash.
        let session = |messages: &[&str]| {
            let mut log = SentLog::keeping();
            log.add(Sent::Accepted);
            for message in messages {
                log.add(Sent::Text(message.to_string()));
            }
            log.add(Sent::Close(1000, String::new()));
            (log.outcome(Outcome::response(200, b"")), log.frames().len())
        };
        let (one, frames) = session(&["ab", "c"]);
        assert_eq!(frames, 4);
        assert_ne!(one, session(&["a", "bc"]).0);
        assert!(matches!(
            one,
            Outcome::Socket {
                messages: 2,
                bytes: 3,
                close: Some(1000),
                ..
            }
        ));
    }

    #[test]
    fn a_failure_after_the_head_stays_the_outcome_and_nothing_sent_changes_nothing() {
        let mut stream = SentLog::default();
        stream.add(Sent::StreamStarted(200));
        let failed = Outcome::Failed {
            status: 500,
            error: "Project".into(),
            message: "ValueError: boom".into(),
            file: None,
            line: None,
        };
        assert_eq!(stream.outcome(failed.clone()), failed);
        let ended = Outcome::response(403, b"{}");
        assert_eq!(SentLog::default().outcome(ended.clone()), ended);
        // A stream whose client left before it ended is still the stream it sent.
        assert!(matches!(
            stream.outcome(Outcome::client_closed()),
            Outcome::Streamed { chunks: 0, .. }
        ));
    }
}
