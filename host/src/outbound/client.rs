//! One outbound exchange on the network: resolve the name, check every address against the
//! rules, connect to a checked address, TLS (rustls) for `https`, HTTP/1.1 (hyper), then the
//! response's head and body into the call's [`Shared`] state, where the guest's `head`, `read`
//! and `wait` find them.
//!
//! The trust roots for TLS are webpki's (Mozilla's), the system's, and the operator's CA file
//! (`$FILEROUTER_CA_FILE`, PEM), read once per process.
//!
//! Not here: which origins and addresses are allowed (`super::policy`), the per-request and
//! per-tenant bounds (`super`).

use std::{
    collections::VecDeque,
    net::{IpAddr, SocketAddr},
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use tokio::{
    net::TcpStream,
    sync::{Notify, mpsc},
};

use super::{
    CallError,
    decoding::{self, Decoder},
    policy::{Host, Rules, Scheme, Target},
};

/// How many body bytes a call holds for the guest before the host stops reading from the
/// peer until the guest reads some.
pub const BUFFERED: usize = 256 * 1024;

/// What the guest side and the exchange share about one call.
pub struct Shared {
    pub state: Mutex<Progress>,
    /// Woken when the guest reads (room for more body).
    pub room: Notify,
    /// Woken when the exchange records progress (for `head` and `read`).
    pub changed: Notify,
    /// The request session's wake-up for `wait` (shared by its calls).
    pub news: Arc<Notify>,
}

impl Shared {
    /// Record `error` as how the call ended (instead of its head, if none came yet), and wake
    /// whoever waits.
    pub fn fail(&self, error: CallError) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.head.is_none() {
            state.head = Some(Err(error));
        } else {
            state.end = Some(Err(error));
        }
        drop(state);
        self.notify();
    }

    /// Wake whoever waits for this call's progress. A wake-up with nobody waiting is kept
    /// (`notify_one`), so that none is lost between a check and a wait.
    pub fn notify(&self) {
        self.changed.notify_one();
        self.news.notify_one();
    }

    /// Wait until the guest has read enough that [`BUFFERED`] bytes are not held.
    async fn room_for_more(&self) {
        loop {
            let room = self.room.notified();
            let full = self
                .state
                .lock()
                .map(|s| s.buffered >= BUFFERED)
                .unwrap_or(false);
            if !full {
                return;
            }
            room.await;
        }
    }

    /// Hold `data` (body bytes) for the guest, and say so; nothing when it is empty.
    fn push(&self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            state.buffered += data.len();
            state.chunks.push_back(data);
        }
        self.notify();
    }
}

/// How far a call got.
#[derive(Default)]
pub struct Progress {
    /// The response head, once it arrived (or why none will).
    pub head: Option<Result<Head, CallError>>,
    /// Whether the guest took the head.
    pub head_taken: bool,
    pub chunks: VecDeque<Bytes>,
    pub buffered: usize,
    /// Once the body ended: how.
    pub end: Option<Result<(), CallError>>,
}

impl Progress {
    /// Whether `head` or `read` would answer at once.
    pub fn has_news(&self) -> bool {
        match &self.head {
            None => false,
            Some(Err(_)) => true,
            Some(Ok(_)) if !self.head_taken => true,
            Some(Ok(_)) => !self.chunks.is_empty() || self.end.is_some(),
        }
    }
}

/// A response's head.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

/// Everything one exchange needs, moved into its task.
pub struct Exchange {
    pub method: hyper::Method,
    pub target: Target,
    pub headers: Vec<(String, String)>,
    /// The whole body, or its first bytes and the rest from a channel.
    pub body: Body,
    pub timeout: Duration,
    pub rules: Arc<Rules>,
    pub shared: Arc<Shared>,
    /// Counts the bytes every call of the request received, against `max_received`.
    pub received: Arc<std::sync::atomic::AtomicU64>,
    /// Counts the bytes the request's decoded bodies came to, against `max_received`, when
    /// this call's body is to be decoded (`None`: given as it came).
    pub decoded: Option<Arc<std::sync::atomic::AtomicU64>>,
    pub max_received: u64,
}

/// A request body.
pub enum Body {
    Full(Bytes),
    Streamed(Bytes, mpsc::Receiver<Bytes>),
}

/// What the exchange ended with: the status (none: it failed before one) and bytes received.
pub struct Outcome {
    pub status: Option<u16>,
    pub received: u64,
    pub error: Option<CallError>,
}

impl Exchange {
    /// Count `len` decoded body bytes in `decoded`: past `max_received`, the limit error.
    fn count_decoded(
        &self,
        decoded: &std::sync::atomic::AtomicU64,
        len: usize,
    ) -> Result<(), CallError> {
        let total =
            decoded.fetch_add(len as u64, std::sync::atomic::Ordering::Relaxed) + len as u64;
        if total > self.max_received {
            return Err(CallError::Limit(format!(
                "the request's outbound calls' bodies decoded (content-encoding) to more than {} bytes (outbound[\"max_received_mb\"] in config.py)",
                self.max_received
            )));
        }
        Ok(())
    }

    /// Run the exchange to its end, recording what happens in `shared`.
    pub async fn run(self) -> Outcome {
        let shared = self.shared.clone();
        let mut outcome = Outcome {
            status: None,
            received: 0,
            error: None,
        };
        let failed = |error: CallError, outcome: &mut Outcome| {
            shared.fail(error.clone());
            outcome.error = Some(error);
        };
        let mut exchange = self;
        let (response, _driver) = match exchange.send().await {
            Ok(sent) => sent,
            Err(error) => {
                failed(error, &mut outcome);
                return outcome;
            }
        };
        let timeout = exchange.timeout;
        let status = response.status().as_u16();
        outcome.status = Some(status);
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_string(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut decoder = exchange
            .decoded
            .as_ref()
            .and_then(|_| Decoder::for_headers(&headers));
        {
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            state.head = Some(Ok(Head { status, headers }));
        }
        shared.notify();
        let mut body = response.into_body();
        loop {
            // Wait for room before reading more: the guest reads at its pace.
            shared.room_for_more().await;
            let frame = match tokio::time::timeout(timeout, body.frame()).await {
                Err(_) => {
                    failed(
                        CallError::Timeout(format!(
                            "the response body sent nothing for {}",
                            seconds(timeout)
                        )),
                        &mut outcome,
                    );
                    return outcome;
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    failed(
                        CallError::Network(format!("reading the response body: {e}")),
                        &mut outcome,
                    );
                    return outcome;
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            let len = data.len() as u64;
            outcome.received += len;
            let total = exchange
                .received
                .fetch_add(len, std::sync::atomic::Ordering::Relaxed)
                + len;
            if total > exchange.max_received {
                failed(
                    CallError::Limit(format!(
                        "the request's outbound calls received more than {} bytes \
                         (outbound[\"max_received_mb\"] in config.py)",
                        exchange.max_received
                    )),
                    &mut outcome,
                );
                return outcome;
            }
            match (&mut decoder, &exchange.decoded) {
                (Some(decoder), Some(decoded)) => {
                    // A slice at a time: each one's output is bounded, counted, and waits for
                    // the guest to make room, so a gzip bomb meets the bound, not memory.
                    for slice in data.chunks(decoding::SLICE) {
                        let out = match decoder.feed(slice) {
                            Ok(out) => out,
                            Err(e) => {
                                failed(CallError::Decoding(e.to_string()), &mut outcome);
                                return outcome;
                            }
                        };
                        if let Err(error) = exchange.count_decoded(decoded, out.len()) {
                            failed(error, &mut outcome);
                            return outcome;
                        }
                        shared.room_for_more().await;
                        shared.push(Bytes::from(out));
                    }
                }
                _ => shared.push(data),
            }
        }
        if let (Some(decoder), Some(decoded)) = (&mut decoder, &exchange.decoded) {
            let out = decoder.finish();
            if let Err(error) = exchange.count_decoded(decoded, out.len()) {
                failed(error, &mut outcome);
                return outcome;
            }
            shared.push(Bytes::from(out));
        }
        {
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            state.end = Some(Ok(()));
        }
        shared.notify();
        outcome
    }

    /// Resolve, check, connect, send the head and body; the response with its head.
    async fn send(
        &mut self,
    ) -> Result<(hyper::Response<hyper::body::Incoming>, AbortOnDrop), CallError> {
        let origin = self.target.origin.clone();
        let origin = &origin;
        let timeout = self.timeout;
        let addresses: Vec<IpAddr> = match &origin.host {
            Host::Address(ip) => vec![*ip],
            Host::Name(name) => {
                let lookup = tokio::net::lookup_host((name.as_str(), origin.port));
                match tokio::time::timeout(timeout, lookup).await {
                    Err(_) => {
                        return Err(CallError::Timeout(format!(
                            "resolving {name} took more than {}",
                            seconds(timeout)
                        )));
                    }
                    Ok(Err(e)) => {
                        return Err(CallError::Network(format!("{name} did not resolve: {e}")));
                    }
                    Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
                }
            }
        };
        if addresses.is_empty() {
            return Err(CallError::Network(format!(
                "{} has no address",
                origin.host
            )));
        }
        // Every address must pass: one refused address refuses the name.
        for ip in &addresses {
            self.rules
                .check_address(origin, *ip)
                .map_err(CallError::Refused)?;
        }
        let stream = connect(&addresses, origin.port, timeout).await?;
        let _ = stream.set_nodelay(true);
        let io: Box<dyn Io> = match origin.scheme {
            Scheme::Http => Box::new(stream),
            Scheme::Https => Box::new(tls(origin, stream, timeout).await?),
        };
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
                .await
                .map_err(|e| CallError::Network(format!("HTTP handshake: {e}")))?;
        // The connection's driver lives as long as the guard the caller holds: the call's task
        // (closing the call aborts the task, which drops the guard).
        let driver = AbortOnDrop(tokio::spawn(async move {
            let _ = connection.await;
        }));
        let request = self.request()?;
        let response = tokio::time::timeout(timeout, sender.send_request(request)).await;
        match response {
            Err(_) => Err(CallError::Timeout(format!(
                "{origin} sent no response head within {}",
                seconds(timeout)
            ))),
            Ok(Err(e)) => Err(CallError::Network(format!("{origin}: {e}"))),
            Ok(Ok(response)) => Ok((response, driver)),
        }
    }

    fn request(&mut self) -> Result<hyper::Request<BoxBody<Bytes, std::io::Error>>, CallError> {
        let mut builder = hyper::Request::builder()
            .method(self.method.clone())
            .uri(&self.target.path_and_query)
            .header(hyper::header::HOST, self.target.origin.authority());
        for (name, value) in &self.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let body = match std::mem::replace(&mut self.body, Body::Full(Bytes::new())) {
            Body::Full(bytes) => Full::new(bytes).map_err(|never| match never {}).boxed(),
            Body::Streamed(first, rest) => streamed_body(first, rest),
        };
        builder
            .body(body)
            .map_err(|e| CallError::Invalid(format!("the request: {e}")))
    }
}

/// The streamed body of an exchange: its first bytes, then what `write` sends, until the
/// sender is dropped.
fn streamed_body(first: Bytes, rest: mpsc::Receiver<Bytes>) -> BoxBody<Bytes, std::io::Error> {
    let first = futures_util::stream::iter(
        (!first.is_empty()).then(|| Ok::<_, std::io::Error>(Frame::data(first))),
    );
    let rest = futures_util::stream::unfold(rest, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, std::io::Error>(Frame::data(chunk)), rx))
    });
    use futures_util::StreamExt;
    BoxBody::new(StreamBody::new(first.chain(rest)))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

/// A connection to the first of `addresses` (all checked) that answers.
async fn connect(
    addresses: &[IpAddr],
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, CallError> {
    let mut last = None;
    for ip in addresses {
        let address = SocketAddr::new(*ip, port);
        match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = Some(CallError::Network(format!("connecting to {address}: {e}"))),
            Err(_) => {
                last = Some(CallError::Timeout(format!(
                    "connecting to {address} took more than {}",
                    seconds(timeout)
                )))
            }
        }
    }
    Err(last.unwrap_or_else(|| CallError::Network("no address to connect to".into())))
}

async fn tls(
    origin: &super::policy::Origin,
    stream: TcpStream,
    timeout: Duration,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, CallError> {
    let config = client_config().map_err(|e| CallError::Network(e.clone()))?;
    let name = match &origin.host {
        Host::Name(name) => rustls::pki_types::ServerName::try_from(name.clone())
            .map_err(|e| CallError::Invalid(format!("{name} as a TLS name: {e}")))?,
        Host::Address(ip) => rustls::pki_types::ServerName::IpAddress((*ip).into()),
    };
    let connector = tokio_rustls::TlsConnector::from(config);
    match tokio::time::timeout(timeout, connector.connect(name, stream)).await {
        Err(_) => Err(CallError::Timeout(format!(
            "the TLS handshake with {origin} took more than {}",
            seconds(timeout)
        ))),
        Ok(Err(e)) => Err(CallError::Network(format!("TLS with {origin}: {e}"))),
        Ok(Ok(stream)) => Ok(stream),
    }
}

/// The environment variable naming the operator's CA file (PEM).
pub const CA_FILE_VAR: &str = "FILEROUTER_CA_FILE";

/// The process's TLS client settings: read once; an unreadable CA file fails every `https`
/// call with the reason (and is logged once).
fn client_config() -> Result<Arc<rustls::ClientConfig>, &'static String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let made = make_client_config(std::env::var_os(CA_FILE_VAR).map(Into::into));
            if let Err(e) = &made {
                tracing::error!("outbound HTTPS is unavailable: {e}");
            }
            made
        })
        .as_ref()
        .map(Arc::clone)
}

/// Check the operator's CA file now (when one is named), so that `run` and `dev` refuse to
/// start with a broken one instead of failing calls later. Reads only that file: the system's
/// roots wait for the first HTTPS call.
pub fn check_ca_file() -> Result<(), String> {
    match std::env::var_os(CA_FILE_VAR) {
        Some(path) => operator_roots(std::path::Path::new(&path)).map(|_| ()),
        None => Ok(()),
    }
}

/// The certificates in the operator's CA file; an error names the variable, the file and the
/// problem.
fn operator_roots(
    path: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let shown = path.display();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{CA_FILE_VAR}={shown}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{CA_FILE_VAR}={shown}: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "{CA_FILE_VAR}={shown}: no PEM certificate in the file"
        ));
    }
    Ok(certs)
}

fn make_client_config(
    ca_file: Option<std::path::PathBuf>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        for cert in operator_roots(&path)? {
            roots
                .add(cert)
                .map_err(|e| format!("{CA_FILE_VAR}={}: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS settings: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// `d` as a short number of seconds for a message (`10s`, `0.25s`).
pub fn seconds(d: Duration) -> String {
    let text = format!("{:.3}", d.as_secs_f64());
    format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
}
