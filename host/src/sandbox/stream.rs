//! Streamed responses (`StreamingResponse`, a handler that `yield`s, Server-Sent Events, JSON
//! Lines): the host side of `interface stream` in `wit/filerouter.wit`.
//!
//! A request's call that streams sends its head first (`response-stream.start`): [`super::Sandbox::handle`]
//! answers at once with that head and a [`StreamBody`], and the call goes on in a task of its
//! own ([`supervise`]), in the same instance, writing chunks (`response-stream.write`) into a bounded
//! channel that hyper reads from. So:
//!
//! - **Back-pressure.** At most [`QUEUED_CHUNKS`] chunks of at most [`MAX_CHUNK`] bytes wait in
//!   the channel; a `write` past that waits (holding no guest thread) until hyper has taken one,
//!   and hyper takes one only when the socket does. A stream's host memory is thus at most
//!   `QUEUED_CHUNKS * MAX_CHUNK` (128 KiB) plus the chunk hyper is writing and the socket's
//!   buffers, however slowly its client reads. A client that reads nothing at all is cut off by
//!   `server["write_timeout_s"]` (`crate::write_timeout`).
//! - **Limits.** From `start` on, the call runs under the stream's limits ([`StreamLimits`])
//!   instead of the request's: CPU time for its whole life, a total duration (counted as
//!   `wall_s` is), an idle timeout (no chunk for that long cuts the body off) and a cap on the
//!   streams a project (a tenant) has open at once ([`OpenStreams`]; a stream past it is
//!   refused before its head is sent: the guest answers 503).
//! - **The end.** When the call returns, the body ends; when it fails (an exception, a limit, a
//!   trap), the body is cut off (the client sees an incomplete response) and the failure is
//!   logged. When the body goes away first (the client disconnected, the idle timeout, the
//!   server stopping), the next `write` fails and `wait` returns at once, so the guest closes
//!   its generator (`GeneratorExit` runs its `finally`); a call that has not ended
//!   [`DISCONNECT_GRACE`] later is dropped with its instance.
//! - **Shutdown.** [`stop_all`] ends every open stream's body (the server calls it when it stops
//!   accepting), and [`drained`] resolves once their calls have ended.
//!
//! The stream holds its instance (one of `server["workers"]`, one of its tenant's
//! `concurrency`) for its whole life: that is why the cap on open streams exists, and why it is
//! half of those instances by default. A WebSocket holds its instance the same way, with the
//! same [`OpenStreams`] count and [`StreamLimits`] (`super::socket`).
//!
//! Not here: what the guest streams (`guest-python/sandbox/streaming.py`), HTTP framing (hyper).

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::{
    HttpResponse, SandboxError,
    lingering::{self, DISCONNECT_GRACE, Lingering},
};
pub use crate::config::StreamLimits;
use crate::scheduler::Limit;

/// The largest chunk one `response-stream.write` may carry (the guest splits larger ones).
pub const MAX_CHUNK: usize = 64 * 1024;

/// Chunks that may wait in a stream's channel before `response-stream.write` waits.
pub const QUEUED_CHUNKS: usize = 2;

/// Streams whose calls are still running, in this process.
static RUNNING: Lingering = Lingering::new();

/// Cancelled when the server stops: every stream's body ends.
fn stopping() -> &'static CancellationToken {
    static STOP: std::sync::OnceLock<CancellationToken> = std::sync::OnceLock::new();
    STOP.get_or_init(CancellationToken::new)
}

/// End every open stream (the server is stopping): their bodies are cut off, their calls see
/// the stream over and end within [`DISCONNECT_GRACE`].
pub fn stop_all() {
    stopping().cancel();
}

/// How many streams' calls are running now.
pub fn running() -> usize {
    RUNNING.running()
}

/// Resolves once no stream's call is running (at once if none is).
pub async fn drained() {
    RUNNING.drained().await;
}

/// The streams one project (a tenant) has open: shared by every variant of its sandbox.
#[derive(Clone, Debug, Default)]
pub struct OpenStreams {
    open: Arc<AtomicUsize>,
}

impl OpenStreams {
    /// Streams open now.
    pub fn count(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Count one more stream (or socket), unless `cap` are open already.
    pub(super) fn try_open(&self, cap: usize) -> Option<OpenGuard> {
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < cap).then_some(n + 1)
            })
            .ok()
            .map(|_| OpenGuard {
                open: self.open.clone(),
            })
    }
}

/// One open stream (or socket) in its project's count, until its call ends.
pub(super) struct OpenGuard {
    open: Arc<AtomicUsize>,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One piece of a streamed body, from the call to hyper.
enum Piece {
    Data(Bytes),
    /// The call returned: the body ends here, complete.
    End,
}

/// What a request's call needs to start a stream (given by `Sandbox::handle`).
#[derive(Clone)]
pub(super) struct Setup {
    pub limits: StreamLimits,
    pub open: OpenStreams,
    /// The cap on `open`.
    pub cap: usize,
}

/// Where a request's answer goes when the guest sends it before its call ends.
pub(super) type EarlySender = tokio::sync::oneshot::Sender<super::Early>;

/// Why a stream is over, once it is: what `write` tells the guest.
#[derive(Default)]
struct Over {
    reason: Mutex<Option<String>>,
}

impl Over {
    fn set(&self, reason: String) {
        if let Ok(mut slot) = self.reason.lock()
            && slot.is_none()
        {
            *slot = Some(reason);
        }
    }

    fn get(&self) -> String {
        self.reason
            .lock()
            .ok()
            .and_then(|slot| slot.clone())
            .unwrap_or_else(|| "the client went away".to_string())
    }
}

/// The call's end of a started stream (in its `CallState`).
pub(super) struct Writer {
    tx: mpsc::Sender<Piece>,
    over: Arc<Over>,
    _open: OpenGuard,
}

/// Why a stream could not start; the guest answers otherwise (503 for [`Refused::Full`]).
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    #[error("only a request's call can stream its response")]
    NotARequest,
    #[error("the response was sent already")]
    Sent,
    #[error(
        "the project has {0} streamed responses open, its cap (`sandbox = {{\"max_streams\": ...}}` in config.py, `max_streams` in a tenants file)"
    )]
    Full(usize),
    #[error("the client went away before the stream started")]
    Gone,
}

/// Start the stream `setup` allows, with `head`: the head and body go to the waiting
/// `Sandbox::handle` through `early`; the call keeps the [`Writer`]. `Err` gives `early` back
/// when it may still be used (nothing was sent).
pub(super) fn start(
    setup: &Setup,
    early: EarlySender,
    head: HttpResponse,
) -> Result<Writer, (Option<EarlySender>, Refused)> {
    let Some(open) = setup.open.try_open(setup.cap) else {
        return Err((Some(early), Refused::Full(setup.cap)));
    };
    let (tx, rx) = mpsc::channel(QUEUED_CHUNKS);
    let over = Arc::new(Over::default());
    let body = StreamBody {
        rx,
        idle: setup.limits.idle,
        idle_timer: Box::pin(tokio::time::sleep(setup.limits.idle)),
        stop: Box::pin(stopping().clone().cancelled_owned()),
        over: over.clone(),
        done: false,
    };
    let feed = tx.clone();
    if early
        .send(super::Early::Stream(head, Stream { body, feed }))
        .is_err()
    {
        return Err((None, Refused::Gone));
    }
    Ok(Writer {
        tx,
        over,
        _open: open,
    })
}

impl Writer {
    /// Send `chunk`, waiting while [`QUEUED_CHUNKS`] wait already; `Err` once the stream is over.
    pub(super) async fn write(&self, chunk: Vec<u8>) -> Result<(), String> {
        if chunk.len() > MAX_CHUNK {
            return Err(format!(
                "a stream chunk is at most {MAX_CHUNK} bytes, not {}",
                chunk.len()
            ));
        }
        if chunk.is_empty() {
            return if self.tx.is_closed() {
                Err(self.over.get())
            } else {
                Ok(())
            };
        }
        self.tx
            .send(Piece::Data(Bytes::from(chunk)))
            .await
            .map_err(|_| self.over.get())
    }

    /// Wait up to `timeout`; true at once when the stream is over.
    pub(super) async fn wait(&self, timeout: Duration) -> bool {
        tokio::select! {
            () = self.tx.closed() => true,
            () = tokio::time::sleep(timeout) => self.tx.is_closed(),
        }
    }
}

/// A started stream, as `Sandbox::handle` gets it: the body for hyper, and the feed that ends
/// it once the call has returned.
pub struct Stream {
    pub(super) body: StreamBody,
    feed: mpsc::Sender<Piece>,
}

impl Stream {
    /// Take the body for the response; the rest goes to [`supervise`].
    pub(super) fn split(self) -> (StreamBody, Feed) {
        (self.body, Feed { tx: self.feed })
    }
}

/// The supervisor's end of the channel: ends the body when the call returns.
pub(super) struct Feed {
    tx: mpsc::Sender<Piece>,
}

/// Let `call`, whose stream has started, run on in a task of its own: end the body when it
/// returns, cut it off when it fails, and drop it [`DISCONNECT_GRACE`] after the stream is over
/// if it has not ended by then. How it ends is logged under `label`.
pub(super) fn supervise<F>(label: String, call: F, feed: Feed)
where
    F: Future<Output = Result<HttpResponse, SandboxError>> + Send + 'static,
{
    let running = RUNNING.enter();
    tokio::spawn(async move {
        let _running = running;
        let mut call = Box::pin(call);
        let outcome = lingering::end_or_grace(&mut call, feed.tx.closed()).await;
        match outcome {
            Some(Ok(_)) => {
                // The body ends, complete (unless it is gone already: then this fails at once;
                // a client that reads nothing is cut off by the write timeout).
                let _ = feed.tx.send(Piece::End).await;
                tracing::debug!("{label}: stream ended");
            }
            Some(Err(error)) => ended_badly(&label, &error),
            None => {
                drop(call);
                tracing::warn!(
                    "{label}: the stream was over (client gone, idle or shutdown) and the handler had not stopped {DISCONNECT_GRACE:?} later: its instance was dropped"
                );
            }
        }
    });
}

/// Log a stream's call that ended with an error (its body was cut off).
fn ended_badly(label: &str, error: &SandboxError) {
    match error {
        SandboxError::Project(error) => {
            let at = error.at();
            tracing::error!(
                "{label}: the streamed response failed after its head was sent (the body was cut off): {}: {}{at}\n{}",
                error.kind,
                error.message,
                error.traceback.trim_end()
            );
        }
        SandboxError::Timeout(overrun) => {
            let setting = match overrun.limit {
                Limit::Cpu => "stream_cpu_ms",
                Limit::Wall => "stream_duration_s",
            };
            tracing::error!(
                "{label}: the streamed response was stopped (the body was cut off): {overrun}; a stream's limits are `sandbox = {{\"{setting}\": ...}}` in config.py"
            );
        }
        error => tracing::error!(
            "{label}: the streamed response was stopped (the body was cut off): {error}"
        ),
    }
}

/// A streamed response's body, as hyper reads it: the chunks of the call, as it writes them.
pub struct StreamBody {
    rx: mpsc::Receiver<Piece>,
    idle: Duration,
    idle_timer: Pin<Box<tokio::time::Sleep>>,
    stop: Pin<Box<WaitForCancellationFutureOwned>>,
    over: Arc<Over>,
    done: bool,
}

impl StreamBody {
    /// Cut the body off: the stream is over for `reason`.
    fn cut(&mut self, reason: String) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.done = true;
        self.over.set(reason.clone());
        self.rx.close();
        Poll::Ready(Some(Err(io::Error::other(reason))))
    }
}

impl hyper::body::Body for StreamBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Piece::Data(bytes))) => {
                let idle = self.idle;
                if let Some(at) = tokio::time::Instant::now().checked_add(idle) {
                    self.idle_timer.as_mut().reset(at);
                }
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            Poll::Ready(Some(Piece::End)) => {
                self.done = true;
                self.rx.close();
                return Poll::Ready(None);
            }
            Poll::Ready(None) => {
                return self.cut("the handler stopped before the stream's end".into());
            }
            Poll::Pending => {}
        }
        if self.stop.as_mut().poll(cx).is_ready() {
            return self.cut("the server is stopping".into());
        }
        if self.idle_timer.as_mut().poll(cx).is_ready() {
            let idle = self.idle;
            return self.cut(format!(
                "the stream sent nothing for {:.1}s, its idle limit (`sandbox = {{\"stream_idle_s\": ...}}` in config.py)",
                idle.as_secs_f64()
            ));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        if !self.done {
            self.over.set("the client went away".into());
        }
    }
}
