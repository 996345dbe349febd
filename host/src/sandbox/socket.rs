//! WebSockets (a route file's `WEBSOCKET` handler): the host side of `interface websocket` in
//! `wit/filerouter.wit`.
//!
//! The router recognizes the handshake ([`Handshake::take`]: RFC 6455's headers, and hyper's
//! upgrade of the connection) and calls the handler like a request's. The handler's `accept`
//! ([`accept`]) hands [`super::Sandbox::handle`] the 101 answer and a [`Connection`]; the router
//! answers with the 101, hyper gives the connection up, and [`serve`] runs the WebSocket
//! protocol on it (tokio-tungstenite) in a task of its own, between the socket and the call:
//!
//! - **Messages.** What the client sends waits in a channel of one message for the handler's
//!   `receive`; while it waits, nothing more is read from the socket (TCP's back-pressure
//!   reaches the client). What the handler sends waits in a channel of one message for the
//!   socket, and `send` waits while it is full. So a connection's host memory is at most two
//!   messages of `websocket_max_message_bytes` plus tungstenite's buffers, however the client
//!   behaves. Control frames never reach the handler: pings are answered here (more than
//!   [`MAX_PINGS_PER_SECOND`] close the connection with 1008), and the host pings the client
//!   so that a live one is never idle.
//! - **Limits.** From `accept` on, the call runs under the stream limits ([`StreamLimits`]):
//!   CPU time for its whole life, a total duration, an idle timeout (nothing heard from the
//!   client for that long closes the connection with 1001), and the project's cap on open
//!   streams and sockets ([`OpenStreams`], shared with streamed responses). Each received
//!   message also starts a CPU allowance of `websocket_message_cpu_ms` (`services.rs`). A
//!   message over `websocket_max_message_bytes` closes the connection with 1009, text that is
//!   not UTF-8 with 1007, a protocol error with 1002.
//! - **The end.** The handler's `close`, or its return, closes the connection (1000 when it
//!   returned without closing, 1011 when it failed). When the connection ends first (the
//!   client closed or went away, a limit, the server stopping), the handler's next `receive`
//!   gets the `closed` event (`WebSocketDisconnect`), its `send` fails, and a call that has
//!   not ended [`DISCONNECT_GRACE`] later is dropped with its instance ([`supervise`]).
//! - **Shutdown.** [`stop_all`] closes every connection with 1001; [`drained`] resolves once
//!   their calls and tasks have ended.
//!
//! Not here: the guest's `WebSocket` (`guest-python/filerouter/websockets.py`), HTTP framing
//! and the upgrade itself (hyper), the WebSocket protocol (tungstenite).

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures_util::{SinkExt, StreamExt};
use hyper::{Request, StatusCode, body::Incoming, header::HeaderMap, upgrade::OnUpgrade};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{
        Error as WsError, Message,
        error::{CapacityError, ProtocolError},
        handshake::derive_accept_key,
        protocol::{CloseFrame, Role, WebSocketConfig, frame::coding::CloseCode},
    },
};
use tokio_util::sync::CancellationToken;

use super::{
    HttpResponse, SandboxError,
    lingering::{self, DISCONNECT_GRACE, Lingering},
    stream::{OpenGuard, OpenStreams},
};
pub use crate::config::StreamLimits;
use crate::scheduler::Limit;

/// More pings than this in one second close the connection with 1008 (policy violation):
/// each one costs the host a pong.
pub const MAX_PINGS_PER_SECOND: u32 = 100;

/// How often the host pings the client (at most; half the idle limit when that is shorter), so
/// that a live client, which answers, is never idle.
pub const PING_EVERY: Duration = Duration::from_secs(20);

/// The read buffer of each connection, allocated when it opens.
const READ_BUFFER: usize = 16 * 1024;

/// How long closing waits for the socket (the close frame out, the client's close back).
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Calls and connection tasks still running, in this process.
static RUNNING: Lingering = Lingering::new();

/// Cancelled when the server stops: every connection closes with 1001.
fn stopping() -> &'static CancellationToken {
    static STOP: std::sync::OnceLock<CancellationToken> = std::sync::OnceLock::new();
    STOP.get_or_init(CancellationToken::new)
}

/// Close every open connection with 1001 (the server is stopping).
pub fn stop_all() {
    stopping().cancel();
}

/// How many WebSocket calls and connection tasks are running now.
pub fn running() -> usize {
    RUNNING.running()
}

/// Resolves once no WebSocket call or connection task is running (at once if none is).
pub async fn drained() {
    RUNNING.drained().await;
}

/// Why a request that asks to become a WebSocket cannot (the router answers with it).
#[derive(Debug, thiserror::Error)]
pub enum BadHandshake {
    #[error("a WebSocket handshake needs `Sec-WebSocket-Version: 13`")]
    Version,
    #[error("a WebSocket handshake needs a `Sec-WebSocket-Key` of 16 bytes in base64")]
    Key,
    #[error("a WebSocket handshake is a GET request")]
    Method,
}

impl BadHandshake {
    /// The status of the refusal: 426 (with `Sec-WebSocket-Version: 13`) for a version we do
    /// not speak, 400 otherwise.
    pub fn status(&self) -> StatusCode {
        match self {
            BadHandshake::Version => StatusCode::UPGRADE_REQUIRED,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// A WebSocket handshake the router found in a request: what `accept` answers it with.
pub struct Handshake {
    upgrade: OnUpgrade,
    key: String,
    /// The subprotocols the client offered (`Sec-WebSocket-Protocol`), in its order.
    offered: Vec<String>,
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshake")
            .field("offered", &self.offered)
            .finish_non_exhaustive()
    }
}

/// Whether `headers` ask for a WebSocket (`Upgrade: websocket` and `Connection: upgrade`).
pub fn is_requested(headers: &HeaderMap) -> bool {
    let has_token = |name: hyper::header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|value| {
            value.to_str().is_ok_and(|value| {
                value
                    .split(',')
                    .any(|part| part.trim().eq_ignore_ascii_case(token))
            })
        })
    };
    has_token(hyper::header::UPGRADE, "websocket")
        && has_token(hyper::header::CONNECTION, "upgrade")
}

impl Handshake {
    /// The handshake `request` asks for (RFC 6455, 4.2.1), taking its connection's upgrade:
    /// None when it asks for no WebSocket, an error when it asks for one wrongly.
    pub fn take(request: &mut Request<Incoming>) -> Result<Option<Handshake>, BadHandshake> {
        let headers = request.headers();
        if !is_requested(headers) {
            return Ok(None);
        }
        if request.method() != hyper::Method::GET {
            return Err(BadHandshake::Method);
        }
        let text = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::trim)
        };
        if text("sec-websocket-version") != Some("13") {
            return Err(BadHandshake::Version);
        }
        let key = text("sec-websocket-key").ok_or(BadHandshake::Key)?;
        use base64::Engine;
        match base64::engine::general_purpose::STANDARD.decode(key) {
            Ok(bytes) if bytes.len() == 16 => {}
            _ => return Err(BadHandshake::Key),
        }
        let key = key.to_string();
        let offered = headers
            .get_all("sec-websocket-protocol")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(|protocol| protocol.trim().to_string())
            .filter(|protocol| !protocol.is_empty())
            .take(32)
            .collect();
        let upgrade = hyper::upgrade::on(request);
        Ok(Some(Handshake {
            upgrade,
            key,
            offered,
        }))
    }
}

/// What a WebSocket request's call needs to accept its connection (given by `Sandbox::handle`).
pub(super) struct Setup {
    pub handshake: Handshake,
    pub limits: StreamLimits,
    pub open: OpenStreams,
    /// The cap on `open`.
    pub cap: usize,
}

/// Why `accept` refused; the guest answers the handshake otherwise (503 for [`Refused::Full`]).
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    #[error("only a WebSocket request's call can accept a connection")]
    NotAWebSocket,
    #[error("the connection was accepted already")]
    Accepted,
    #[error("the response was sent already")]
    Sent,
    #[error(
        "the project has {0} streamed responses and WebSockets open, its cap (`sandbox = {{\"max_streams\": ...}}` in config.py, `max_streams` in a tenants file)"
    )]
    Full(usize),
    #[error("the client did not offer the subprotocol {0:?} (it offered {1:?})")]
    Subprotocol(String, Vec<String>),
    #[error("the client went away before the connection opened")]
    Gone,
    #[error("the handshake's answer is not valid: {0}")]
    Head(String),
}

/// One message, either way.
pub(super) enum Payload {
    Text(String),
    Binary(Vec<u8>),
}

impl Payload {
    fn len(&self) -> usize {
        match self {
            Payload::Text(text) => text.len(),
            Payload::Binary(bytes) => bytes.len(),
        }
    }
}

/// Why the handler's `send` failed.
pub(super) enum SendFailed {
    /// The connection is over, with this close code and reason.
    Closed(u16, String),
    /// The message is over `websocket_max_message_bytes`.
    TooLarge(String),
}

/// What the handler's `receive` gets.
pub(super) enum Event {
    Message(Payload),
    /// The connection is over: its close code and reason.
    Closed(u16, String),
}

/// What the handler sends to the socket.
enum Out {
    Message(Message),
    Close(u16, String),
}

/// How the connection ended, once it has: what the handler's `receive` and `send` learn then.
#[derive(Default)]
struct Over {
    closed: Mutex<Option<(u16, String)>>,
}

impl Over {
    fn set(&self, code: u16, reason: &str) {
        if let Ok(mut slot) = self.closed.lock()
            && slot.is_none()
        {
            *slot = Some((code, reason.to_string()));
        }
    }

    fn get(&self) -> (u16, String) {
        self.closed
            .lock()
            .ok()
            .and_then(|slot| slot.clone())
            .unwrap_or((1006, "the connection was lost".to_string()))
    }
}

/// The call's end of an accepted connection (in its `CallState`).
pub(super) struct Socket {
    events: mpsc::Receiver<Event>,
    out: mpsc::Sender<Out>,
    over: Arc<Over>,
    /// The `closed` event was handed to the handler: nothing more will come.
    finished: bool,
    max_message_bytes: usize,
    _open: OpenGuard,
}

/// An accepted connection, as `Sandbox::handle` gets it: the task to run it ([`serve`]) and
/// what [`supervise`] needs.
pub struct Connection {
    upgrade: OnUpgrade,
    config: WebSocketConfig,
    limits: StreamLimits,
    events: mpsc::Sender<Event>,
    out: mpsc::Receiver<Out>,
    /// The supervisor's way to close the connection when the call ends.
    feed: mpsc::Sender<Out>,
    over: Arc<Over>,
    /// Cancelled when the connection's task has ended.
    gone: CancellationToken,
}

/// Why `accept` did not accept, with what it was given back when that may still be used.
pub(super) struct NotAccepted {
    pub setup: Option<Setup>,
    pub early: Option<super::stream::EarlySender>,
    pub refused: Refused,
}

/// Accept the connection `setup` allows: the 101 answer (with `head`'s headers added) and the
/// [`Connection`] go to the waiting `Sandbox::handle` through `early`; the call keeps the
/// [`Socket`]. `Err` gives `setup` and `early` back when they may still be used.
pub(super) fn accept(
    setup: Setup,
    early: super::stream::EarlySender,
    subprotocol: Option<String>,
    head: HttpResponse,
) -> Result<Socket, Box<NotAccepted>> {
    let refuse = |setup, early, refused| {
        Box::new(NotAccepted {
            setup,
            early,
            refused,
        })
    };
    if let Some(protocol) = &subprotocol
        && !setup.handshake.offered.contains(protocol)
    {
        let offered = setup.handshake.offered.clone();
        return Err(refuse(
            Some(setup),
            Some(early),
            Refused::Subprotocol(protocol.clone(), offered),
        ));
    }
    if !head.body.is_empty() || head.host_body {
        return Err(refuse(
            Some(setup),
            Some(early),
            Refused::Head("the 101 answer has no body".into()),
        ));
    }
    let reserved = [
        "upgrade",
        "connection",
        "sec-websocket-accept",
        "sec-websocket-protocol",
        "content-length",
        "transfer-encoding",
    ];
    let mut headers: Vec<(String, String)> = head
        .headers
        .into_iter()
        .filter(|(name, _)| !reserved.contains(&name.to_ascii_lowercase().as_str()))
        .collect();
    headers.push(("upgrade".into(), "websocket".into()));
    headers.push(("connection".into(), "Upgrade".into()));
    headers.push((
        "sec-websocket-accept".into(),
        derive_accept_key(setup.handshake.key.as_bytes()),
    ));
    if let Some(protocol) = subprotocol {
        headers.push(("sec-websocket-protocol".into(), protocol));
    }
    let Some(open) = setup.open.try_open(setup.cap) else {
        let cap = setup.cap;
        return Err(refuse(Some(setup), Some(early), Refused::Full(cap)));
    };
    let answer = HttpResponse {
        status: 101,
        headers,
        body: Vec::new(),
        host_body: false,
    };
    let limits = setup.limits;
    let max = limits.max_message_bytes;
    // Small buffers (an idle connection holds little) and messages written as they are sent;
    // a message that cannot be written waits in the write buffer, which holds one at most.
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
        .max_write_buffer_size(max.saturating_add(64 * 1024))
        .max_message_size(Some(max))
        .max_frame_size(Some(max));
    let (events_tx, events_rx) = mpsc::channel(1);
    let (out_tx, out_rx) = mpsc::channel(1);
    let over = Arc::new(Over::default());
    let connection = Connection {
        upgrade: setup.handshake.upgrade,
        config,
        limits,
        events: events_tx,
        out: out_rx,
        feed: out_tx.clone(),
        over: over.clone(),
        gone: CancellationToken::new(),
    };
    if early
        .send(super::Early::Socket(answer, connection))
        .is_err()
    {
        return Err(refuse(None, None, Refused::Gone));
    }
    Ok(Socket {
        events: events_rx,
        out: out_tx,
        over,
        finished: false,
        max_message_bytes: max,
        _open: open,
    })
}

impl Socket {
    /// The next event within `timeout` (None: wait as long as it takes); `Ok(None)` when the
    /// time passed first.
    pub(super) async fn receive(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<Option<Event>, String> {
        if self.finished {
            return Err("the connection is closed: its `closed` event was received already".into());
        }
        let next = match timeout {
            None => self.events.recv().await,
            Some(timeout) => match tokio::time::timeout(timeout, self.events.recv()).await {
                Ok(next) => next,
                Err(_) => return Ok(None),
            },
        };
        let event = next.unwrap_or_else(|| {
            let (code, reason) = self.over.get();
            Event::Closed(code, reason)
        });
        if matches!(event, Event::Closed(..)) {
            self.finished = true;
        }
        Ok(Some(event))
    }

    /// Send `payload`, waiting while the message before it is still unsent.
    pub(super) async fn send(&self, payload: Payload) -> Result<(), SendFailed> {
        if payload.len() > self.max_message_bytes {
            return Err(SendFailed::TooLarge(format!(
                "a WebSocket message is at most {} bytes (`sandbox = {{\"websocket_max_message_bytes\": ...}}` in config.py), not {}",
                self.max_message_bytes,
                payload.len()
            )));
        }
        let message = match payload {
            Payload::Text(text) => Message::text(text),
            Payload::Binary(bytes) => Message::binary(bytes),
        };
        self.out.send(Out::Message(message)).await.map_err(|_| {
            let (code, reason) = self.over.get();
            SendFailed::Closed(code, reason)
        })
    }

    /// Close the connection with `code` and `reason`.
    pub(super) async fn close(&self, code: u16, reason: String) -> Result<(), String> {
        if !may_send(code) {
            return Err(format!(
                "a server closes a WebSocket with 1000-1003, 1007-1014 or 3000-4999, not {code}"
            ));
        }
        if reason.len() > 123 {
            return Err(format!(
                "a close reason is at most 123 bytes, not {}",
                reason.len()
            ));
        }
        self.out
            .send(Out::Close(code, reason))
            .await
            .map_err(|_| self.over_text())
    }

    fn over_text(&self) -> String {
        let (code, reason) = self.over.get();
        format!("the connection is closed ({code}: {reason})")
    }
}

/// Run `connection` once hyper has sent the 101: messages between the socket and the call
/// until one side closes, a limit, or the server stopping. Logs under `label`.
pub(super) fn serve(label: String, connection: Connection) {
    let running = RUNNING.enter();
    tokio::spawn(async move {
        let _running = running;
        let gone = connection.gone.clone();
        let over = connection.over.clone();
        let (code, reason) = run(connection).await;
        over.set(code, &reason);
        tracing::debug!("{label}: WebSocket closed ({code}: {reason})");
        gone.cancel();
    });
}

/// How a connection ended, as the loop in [`run`] sees it.
enum Ending {
    /// Close with this code and reason (the close frame goes out, the client's comes back).
    Close(u16, String),
    /// The client closed it (its close frame, answered already) with this code and reason.
    ByClient(u16, String),
    /// The socket is gone: nothing more can be sent.
    Lost(String),
}

async fn run(connection: Connection) -> (u16, String) {
    let Connection {
        upgrade,
        config,
        limits,
        events,
        mut out,
        feed,
        over,
        gone: _,
    } = connection;
    drop(feed);
    let upgraded = match upgrade.await {
        Ok(upgraded) => upgraded,
        Err(e) => {
            let reason = format!("the handshake did not complete: {e}");
            over.set(1006, &reason);
            return (1006, reason);
        }
    };
    let socket =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
    let (mut sink, mut stream) = socket.split();
    let heard = Arc::new(Mutex::new(Instant::now()));
    let last_heard = heard.clone();
    // The reader: the client's frames, its messages to the handler (one waits at most).
    // Returns how the client ended the connection, and the stream half for closing.
    let over_seen = over.clone();
    let reader = async move {
        let mut pings = PingMeter::default();
        let mut call_ended = false;
        let ending = loop {
            let next = stream.next().await;
            if let Ok(mut at) = last_heard.lock() {
                *at = Instant::now();
            }
            let event = match next {
                Some(Ok(Message::Text(text))) => Event::Message(Payload::Text(text.to_string())),
                Some(Ok(Message::Binary(bytes))) => Event::Message(Payload::Binary(bytes.into())),
                Some(Ok(Message::Ping(_))) => {
                    if pings.one_more() {
                        continue;
                    }
                    let reason = format!("more than {MAX_PINGS_PER_SECOND} pings in a second");
                    break Ending::Close(1008, reason);
                }
                Some(Ok(Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = frame.map_or((1005, String::new()), |frame| {
                        (u16::from(frame.code), frame.reason.to_string())
                    });
                    break Ending::ByClient(code, reason);
                }
                Some(Err(error)) => break ending_of(error),
                None => break Ending::Lost("the client went away".into()),
            };
            // Once the call has ended, what still arrives is dropped (the loop below closes
            // the connection, and this keeps reading for the client's answer).
            if !call_ended && events.send(event).await.is_err() {
                call_ended = true;
            }
        };
        // The handler learns at once how the client ended it: its `receive` finds no sender
        // and reads the code set here (closing the socket may take a while yet).
        let (code, reason) = ending.code();
        over_seen.set(code, &reason);
        drop(events);
        (ending, stream)
    };
    tokio::pin!(reader);
    // The stream half, once the reader has ended and given it back.
    let mut read_half = None;
    let ping_every = PING_EVERY
        .min(limits.idle / 2)
        .max(Duration::from_millis(100));
    let mut pinger = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
    let stop = stopping().clone();
    let ending = loop {
        let heard_at = heard
            .lock()
            .map(|at| *at)
            .unwrap_or_else(|_| Instant::now());
        let idle_at = tokio::time::Instant::from_std(heard_at + limits.idle);
        tokio::select! {
            biased;
            () = stop.cancelled() => break Ending::Close(1001, "the server is stopping".into()),
            (ending, half) = &mut reader => {
                read_half = Some(half);
                break ending;
            }
            () = tokio::time::sleep_until(idle_at) => {
                let heard_at = heard.lock().map(|at| *at).unwrap_or_else(|_| Instant::now());
                if heard_at.elapsed() >= limits.idle {
                    break Ending::Close(1001, format!(
                        "nothing was heard from the client for {:.1}s, the idle limit (`sandbox = {{\"stream_idle_s\": ...}}` in config.py)",
                        limits.idle.as_secs_f64()
                    ));
                }
            }
            next = out.recv() => match next {
                Some(Out::Message(message)) => {
                    if let Err(error) = sink.send(message).await {
                        break Ending::Lost(format!("sending failed: {error}"));
                    }
                }
                Some(Out::Close(code, reason)) => break Ending::Close(code, reason),
                // Every sender is gone: the call ended without closing (the supervisor sends
                // 1000 or 1011 first when it can).
                None => break Ending::Close(1000, String::new()),
            },
            _ = pinger.tick() => {
                if let Err(error) = sink.send(Message::Ping(Default::default())).await {
                    break Ending::Lost(format!("sending failed: {error}"));
                }
            }
        }
    };
    // What the handler's `receive` and `send` learn from now on.
    let (code, reason) = ending.code();
    over.set(code, &reason);
    let closing = async {
        match ending {
            Ending::Close(code, reason) => {
                let frame = CloseFrame {
                    code: CloseCode::from(code),
                    reason: reason.into(),
                };
                if sink.send(Message::Close(Some(frame))).await.is_err() {
                    return;
                }
                match read_half.take() {
                    // The client's close frame (or its going away) ends the reader.
                    None => {
                        let _ = (&mut reader).await;
                    }
                    // The reader stopped on a bad frame: what the client still sends is read
                    // and dropped until it closes, so that the close frame reaches it (closing
                    // a socket with unread data would reset the connection and lose it).
                    Some(half) => {
                        if let Ok(socket) = sink.reunite(half) {
                            drain(socket.into_inner()).await;
                        }
                    }
                }
            }
            Ending::ByClient(..) => {
                // tungstenite queued the answer to the client's close frame: send it.
                let _ = sink.close().await;
            }
            Ending::Lost(_) => {}
        }
    };
    let _ = tokio::time::timeout(CLOSE_WAIT, closing).await;
    (code, reason)
}

/// Read and drop what `io` still receives until the client closes it (the caller bounds the
/// time); its write side is shut first, so the client sees the end after the close frame.
async fn drain(mut io: TokioIo<hyper::upgrade::Upgraded>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = io.shutdown().await;
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = io.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

impl Ending {
    /// The close code and reason the handler sees (1006 for a connection lost).
    fn code(&self) -> (u16, String) {
        match self {
            Ending::Close(code, reason) | Ending::ByClient(code, reason) => (*code, reason.clone()),
            Ending::Lost(reason) => (1006, reason.clone()),
        }
    }
}

/// The close code and reason for a failure reading the socket.
fn ending_of(error: WsError) -> Ending {
    match error {
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => Ending::Close(
            1009,
            format!("a message of {size} bytes is over the limit of {max_size}"),
        ),
        WsError::Capacity(error) => Ending::Close(1009, error.to_string()),
        WsError::Utf8(_) => Ending::Close(1007, "a text message is not UTF-8".into()),
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => {
            Ending::Lost("the client went away without closing".into())
        }
        WsError::Protocol(error) => Ending::Close(1002, truncated(error.to_string())),
        WsError::ConnectionClosed | WsError::AlreadyClosed => {
            Ending::Lost("the connection was closed".into())
        }
        error => Ending::Lost(error.to_string()),
    }
}

/// Whether a server may send close code `code` (RFC 6455, 7.4: 1004-1006 and 1015 are never
/// sent, 1015-2999 are reserved).
fn may_send(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// A close reason fits in 123 bytes.
fn truncated(mut reason: String) -> String {
    if reason.len() > 123 {
        let mut end = 123;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// Counts a client's pings in the current second.
#[derive(Default)]
struct PingMeter {
    second: Option<Instant>,
    count: u32,
}

impl PingMeter {
    /// Count one ping; false when it is one too many this second.
    fn one_more(&mut self) -> bool {
        let now = Instant::now();
        match self.second {
            Some(start) if now.duration_since(start) < Duration::from_secs(1) => {
                self.count += 1;
            }
            _ => {
                self.second = Some(now);
                self.count = 1;
            }
        }
        self.count <= MAX_PINGS_PER_SECOND
    }
}

/// Let `call`, whose connection was accepted, run on in a task of its own: when it ends,
/// close the connection (1000, or 1011 when it failed, unless it closed it itself); when the
/// connection ends first (`gone`), drop it [`DISCONNECT_GRACE`] later if it has not ended.
pub(super) fn supervise<F>(label: String, call: F, connection: &Connection)
where
    F: std::future::Future<Output = Result<HttpResponse, SandboxError>> + Send + 'static,
{
    let feed = connection.feed.clone();
    let gone = connection.gone.clone();
    let running = RUNNING.enter();
    tokio::spawn(async move {
        let _running = running;
        let mut call = Box::pin(call);
        let outcome = lingering::end_or_grace(&mut call, gone.cancelled()).await;
        match outcome {
            Some(Ok(_)) => {
                let _ = feed.try_send(Out::Close(1000, String::new()));
            }
            Some(Err(error)) => {
                ended_badly(&label, &error);
                let _ = feed.try_send(Out::Close(1011, "the handler failed".into()));
            }
            None => {
                drop(call);
                tracing::warn!(
                    "{label}: the WebSocket was closed and the handler had not stopped {DISCONNECT_GRACE:?} later: its instance was dropped"
                );
            }
        }
    });
}

/// Log a WebSocket call that ended with an error (its connection closes with 1011).
fn ended_badly(label: &str, error: &SandboxError) {
    match error {
        SandboxError::Project(error) => {
            let at = error.at();
            tracing::error!(
                "{label}: the WebSocket handler failed (the connection was closed with 1011): {}: {}{at}\n{}",
                error.kind,
                error.message,
                error.traceback.trim_end()
            );
        }
        SandboxError::Timeout(overrun) => {
            let setting = match overrun.limit {
                Limit::Cpu => {
                    "`websocket_message_cpu_ms` (for one message) or `stream_cpu_ms` (in all)"
                }
                Limit::Wall => "`stream_duration_s`",
            };
            tracing::error!(
                "{label}: the WebSocket handler was stopped (the connection was closed with 1011): {overrun}; its limit is {setting} in config.py's `sandbox`"
            );
        }
        error => tracing::error!(
            "{label}: the WebSocket handler was stopped (the connection was closed with 1011): {error}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_past_the_rate_are_refused_and_the_count_restarts_each_second() {
        let mut meter = PingMeter::default();
        for _ in 0..MAX_PINGS_PER_SECOND {
            assert!(meter.one_more());
        }
        assert!(!meter.one_more());
        meter.second = Some(Instant::now() - Duration::from_secs(2));
        assert!(meter.one_more());
    }

    #[test]
    fn close_reasons_are_cut_at_a_character_boundary() {
        let reason = "é".repeat(100);
        let cut = truncated(reason);
        assert!(cut.len() <= 123);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
