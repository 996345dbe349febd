//! What route code prints: the guest's stdout and stderr, captured per call and written to the
//! server's log as safe text.
//!
//! Route code is not trusted with the server's terminal or log: its output never reaches them
//! raw. Each call gets one [`GuestOutput`] for both streams; it keeps the first
//! [`MAX_OUTPUT_BYTES`] and counts the rest. When the call ends, [`GuestOutput::emit`] writes it
//! line by line, each line prefixed with what ran (`GET /users/1 routes/users/[id]/route.py |`)
//! and with control characters (ANSI escapes, carriage returns, ...) shown escaped, so printed
//! text can neither colour the terminal nor forge a log line. The guest is never slowed or
//! failed by the cap: writes past it succeed and are dropped.

use std::{
    io::Write,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use bytes::Bytes;
use wasmtime_wasi::{
    cli::{IsTerminal, StdoutStream},
    p2::{OutputStream, Pollable, StreamResult},
};

/// The most a single call's output (stdout and stderr together) that reaches the log.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The most one logged line shows; a longer line is cut and marked.
const MAX_LINE_CHARS: usize = 4096;

/// Both output streams of one call.
#[derive(Clone, Default)]
pub struct GuestOutput {
    captured: Arc<Mutex<Captured>>,
}

#[derive(Default)]
struct Captured {
    bytes: Vec<u8>,
    dropped: u64,
}

impl GuestOutput {
    fn push(&self, data: &[u8]) {
        let mut captured = self.captured.lock().unwrap_or_else(|e| e.into_inner());
        let room = MAX_OUTPUT_BYTES.saturating_sub(captured.bytes.len());
        let kept = room.min(data.len());
        captured.bytes.extend_from_slice(&data[..kept]);
        captured.dropped += (data.len() - kept) as u64;
    }

    /// The captured output as log lines, each prefixed with `label` and escaped, after
    /// `redact` rewrote the whole text (it hides the operator's values, which may span lines).
    pub fn lines(
        &self,
        label: &str,
        redact: impl for<'t> Fn(&'t str) -> std::borrow::Cow<'t, str>,
    ) -> Vec<String> {
        let captured = self.captured.lock().unwrap_or_else(|e| e.into_inner());
        // The label holds the request path, which the client chose.
        let label = escape(label);
        let mut lines: Vec<String> = Vec::new();
        if captured.bytes.is_empty() && captured.dropped == 0 {
            return lines;
        }
        let text = String::from_utf8_lossy(&captured.bytes);
        let text = redact(&text);
        let text = text.strip_suffix('\n').unwrap_or(&text);
        for line in text.split('\n') {
            lines.push(format!("{label} | {}", escape(line)));
        }
        if captured.dropped > 0 {
            lines.push(format!(
                "{label} | [{} more bytes of output dropped: at most {MAX_OUTPUT_BYTES} bytes per request are logged]",
                captured.dropped
            ));
        }
        lines
    }

    /// Write the captured output to the server's stderr, prefixed with `label`, through
    /// `redact` (see [`GuestOutput::lines`]).
    pub fn emit(&self, label: &str, redact: impl for<'t> Fn(&'t str) -> std::borrow::Cow<'t, str>) {
        let lines = self.lines(label, redact);
        if lines.is_empty() {
            return;
        }
        let mut stderr = std::io::stderr().lock();
        for line in lines {
            let _ = writeln!(stderr, "{line}");
        }
    }
}

/// `line` with every control character (and every other character that could change how the
/// log reads, such as bidirectional overrides) written as an escape.
pub fn escape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for (count, c) in line.chars().enumerate() {
        if count >= MAX_LINE_CHARS {
            out.push_str(" [line cut]");
            break;
        }
        let unsafe_char = c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c);
        if c == '\t' {
            out.push(c);
        } else if unsafe_char {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_escaped_prefixed_and_capped() {
        let output = GuestOutput::default();
        output.push(b"\x1b[31mred\x1b[0m\nINFO forged\r\nok\ttab\n");
        let lines = output.lines("GET /x routes/x/route.py", |t| {
            std::borrow::Cow::Borrowed(t)
        });
        assert_eq!(
            lines,
            vec![
                "GET /x routes/x/route.py | \\u{1b}[31mred\\u{1b}[0m",
                "GET /x routes/x/route.py | INFO forged\\r",
                "GET /x routes/x/route.py | ok\ttab",
            ]
        );
        let big = GuestOutput::default();
        big.push(&vec![b'a'; MAX_OUTPUT_BYTES + 10]);
        let lines = big.lines("L", |t| std::borrow::Cow::Borrowed(t));
        assert!(lines.last().unwrap().contains("10 more bytes"), "{lines:?}");
        assert!(escape("\u{202e}abc").starts_with("\\u{202e}"));
        assert!(
            GuestOutput::default()
                .lines("L", |t| std::borrow::Cow::Borrowed(t))
                .is_empty()
        );
    }
}
