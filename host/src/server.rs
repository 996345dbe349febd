//! The HTTP server: accepts connections on a socket and hands each request to the [`site`]
//! (one project's [`router`], or the tenant its host names).
//!
//! HTTP/1.1 with keep-alive, via hyper, and the upgrade of a connection to a WebSocket (which
//! `crate::sandbox::socket` then runs). Each request runs inside its record
//! ([`request_record`]), which then gives its access line ([`access_log`]) and its metrics
//! ([`metrics`]). With [`Serving::health_path`], readiness ([`health`]) is answered on this
//! port too, before any routing.
//!
//! Stopping ([`Serving`]): on SIGTERM, readiness turns 503 at once and new connections are
//! still served for the drain delay (answered with `Connection: close`, so that clients and
//! balancers move on), so that a load balancer notices before the port closes; a second
//! signal, or SIGINT, cuts the delay short. Then it stops accepting, lets the requests in
//! flight finish (up to the graceful timeout) and returns.
//!
//! What a client may hold is bounded here ([`ServerLimits`]): open connections (past the cap,
//! new ones wait in the kernel's backlog and the log says so once per interval), the time to
//! send a request head (which is also how long an idle keep-alive connection stays open), the
//! head's size, and the time and memory request bodies take ([`request_body`]); and what a
//! client that does not read holds: response bodies in memory across connections
//! ([`response_body`], charged by the router) and the time a response write may make no
//! progress ([`write_timeout`], around every connection's socket). Failed accepts (`EMFILE`,
//! ...) back off instead of spinning. Heads that RFC 9112 says to refuse are refused before
//! routing ([`http_checks`]).
//!
//! Open files are shared out at start ([`FileBudget`]): the soft `RLIMIT_NOFILE` is raised to
//! the hard limit ([`raise_open_file_limit`]), and the public port's default connection cap
//! leaves [`FD_RESERVE`] descriptors (or half a low limit) to everything else: the admin
//! port (which has its own cap), the log, caches, databases and tenant loads. So a flood of
//! connections fills the cap, never the process's table of files. The admin port
//! ([`crate::admin`]) uses the same accept loop ([`Acceptor`]) and HTTP/1 settings
//! ([`http1_builder`]).
//!
//! [`router`]: crate::router
//! [`request_record`]: crate::request_record
//! [`access_log`]: crate::access_log
//! [`metrics`]: crate::metrics
//! [`health`]: crate::health
//! [`request_body`]: crate::request_body
//! [`response_body`]: crate::response_body
//! [`write_timeout`]: crate::write_timeout
//! [`http_checks`]: crate::http_checks
//! [`site`]: crate::site

use std::{
    convert::Infallible,
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use hyper::{server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    access_log,
    config::ServerSettings,
    health::Health,
    http_checks, metrics,
    request_body::BodyBudget,
    request_record::{self, Record},
    response,
    response_body::{DEFAULT_MAX_BUFFERED_RESPONSE_BYTES, ResponseBudget},
    site::Site,
    traces::{self, RequestTrace},
    write_timeout::WriteTimeout,
};

/// How often a repeated condition (connection cap reached, accept failing) is logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The bounds on what clients may hold; see docs/reference/limits.md.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerLimits {
    /// Open connections at once.
    pub max_connections: usize,
    /// Time to send a whole request head; also the keep-alive idle time between requests.
    pub header_timeout: Duration,
    /// Time to send a whole request body.
    pub body_timeout: Duration,
    /// The bytes of one request head (request line and headers).
    pub max_header_bytes: usize,
    /// Request bodies held in memory at once, across all requests.
    pub max_buffered_body_bytes: u64,
    /// Response bodies held in memory at once, across all connections, until written.
    pub max_buffered_response_bytes: u64,
    /// How long a response write may make no progress before the connection is closed.
    pub write_timeout: Duration,
}

impl ServerLimits {
    /// The limits `config.py`'s `server` asks for; defaults where it is silent.
    pub fn from_settings(server: &ServerSettings) -> ServerLimits {
        ServerLimits {
            max_connections: server
                .max_connections
                .map(|n| n as usize)
                .unwrap_or_else(default_max_connections),
            header_timeout: server
                .header_timeout_s
                .map(Duration::from_secs_f64)
                .unwrap_or(Duration::from_secs(10)),
            body_timeout: server
                .body_timeout_s
                .map(Duration::from_secs_f64)
                .unwrap_or(Duration::from_secs(60)),
            max_header_bytes: 64 * 1024,
            max_buffered_body_bytes: server.max_buffered_body_bytes.unwrap_or(256 * 1024 * 1024),
            max_buffered_response_bytes: server
                .max_buffered_response_bytes
                .unwrap_or(DEFAULT_MAX_BUFFERED_RESPONSE_BYTES),
            write_timeout: server
                .write_timeout_s
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .unwrap_or(Duration::from_secs(30)),
        }
    }
}

/// The most open connections the public port takes by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The most connections the admin port (`crate::admin`) holds open at once; fewer with a low
/// open-file limit ([`FileBudget::admin`]). Here, with the rest of the open-file budget, so
/// that this module need not import the admin port, which imports it.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

/// Open files the public port's connections never take (by default): kept for the admin
/// port (at most [`ADMIN_MAX_CONNECTIONS`] of them), the log, the engine, every
/// tenant's database and kv files, and the files a load opens (the cache, the memory image).
/// With a limit below twice this, half the limit is kept instead.
pub const FD_RESERVE: u64 = 1024;

/// How the process's open files are shared out; see [`FileBudget::get`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileBudget {
    /// The soft `RLIMIT_NOFILE` now.
    pub limit: u64,
    /// The soft limit before [`raise_open_file_limit`] raised it, if it did.
    pub raised_from: Option<u64>,
    /// Descriptors kept from the public port's connections.
    pub reserve: u64,
    /// The public port's default connection cap: `limit - reserve`, within 16 and
    /// [`DEFAULT_MAX_CONNECTIONS`].
    pub public: usize,
    /// The admin port's connection cap: [`ADMIN_MAX_CONNECTIONS`], or a quarter of
    /// the reserve if that is fewer (at least 4).
    pub admin: usize,
}

impl FileBudget {
    /// The budget for the process's open-file limit now.
    pub fn get() -> FileBudget {
        let raised_from = RAISED_FROM.get().copied().flatten();
        FileBudget::for_limit(open_file_limit(), raised_from)
    }

    fn for_limit(limit: u64, raised_from: Option<u64>) -> FileBudget {
        let reserve = FD_RESERVE.min(limit / 2);
        let public = usize::try_from(limit - reserve)
            .unwrap_or(DEFAULT_MAX_CONNECTIONS)
            .clamp(16, DEFAULT_MAX_CONNECTIONS);
        let admin = ADMIN_MAX_CONNECTIONS
            .min(usize::try_from(reserve / 4).unwrap_or(usize::MAX))
            .max(4);
        FileBudget {
            limit,
            raised_from,
            reserve,
            public,
            admin,
        }
    }
}

/// The soft limit before [`raise_open_file_limit`] raised it (`None` inside if it did not).
static RAISED_FROM: OnceLock<Option<u64>> = OnceLock::new();

/// The process's soft `RLIMIT_NOFILE` (1024 if it cannot be read).
pub fn open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur
    } else {
        1024
    }
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (to the kernel's `nr_open` when the hard
/// limit is unlimited), as servers commonly do: the soft limit is often 1024 for
/// compatibility with `select`, which nothing here uses. Call it once, at start; returns the
/// soft limit before and after (equal when nothing changed or it could not be raised).
pub fn raise_open_file_limit() -> (u64, u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        let _ = RAISED_FROM.set(None);
        return (1024, 1024);
    }
    let before = limit.rlim_cur;
    let mut wanted = limit.rlim_max;
    if wanted == libc::RLIM_INFINITY {
        wanted = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(1 << 20);
    }
    if wanted <= limit.rlim_cur {
        let _ = RAISED_FROM.set(None);
        return (before, before);
    }
    let raised = libc::rlimit {
        rlim_cur: wanted,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads the struct it is given and nothing else.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        let _ = RAISED_FROM.set(None);
        return (before, before);
    }
    let _ = RAISED_FROM.set(Some(before));
    (before, wanted)
}

/// The public port's connection cap when `config.py` gives none: 4096, or fewer so that
/// [`FD_RESERVE`] descriptors (half a low limit) stay free; see [`FileBudget`].
pub fn default_max_connections() -> usize {
    FileBudget::get().public
}

/// Log, once at start, how the open files are shared out.
fn log_file_budget(limits: &ServerLimits) {
    let budget = FileBudget::get();
    let raised = budget
        .raised_from
        .map(|from| format!(" (raised from {from})"))
        .unwrap_or_default();
    let kept = budget.limit.saturating_sub(limits.max_connections as u64);
    if limits.max_connections as u64 + budget.reserve > budget.limit {
        tracing::warn!(
            "open files: limit {}{raised}; max_connections = {} leaves {kept} for everything else, fewer than the {} kept by default: a flood of connections may leave none for the cache and the database (lower server['max_connections'] or raise `ulimit -n`)",
            budget.limit,
            limits.max_connections,
            budget.reserve,
        );
    } else if budget.public < DEFAULT_MAX_CONNECTIONS && limits.max_connections == budget.public {
        tracing::warn!(
            "open files: limit {}{raised}; public connections at most {} (not {DEFAULT_MAX_CONNECTIONS}: raise `ulimit -n`), admin connections at most {}, {kept} kept for everything else",
            budget.limit,
            limits.max_connections,
            budget.admin,
        );
    } else {
        tracing::info!(
            "open files: limit {}{raised}; public connections at most {}, admin connections at most {}, {kept} kept for everything else (caches, databases, tenant loads)",
            budget.limit,
            limits.max_connections,
            budget.admin,
        );
    }
}

/// The HTTP/1 settings of both ports: a request head must arrive whole within
/// `header_timeout` (which also bounds how long an idle keep-alive connection stays open, and
/// a connection that never sends a byte) and hold at most `max_header_bytes`.
pub fn http1_builder(header_timeout: Duration, max_header_bytes: usize) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(max_header_bytes);
    builder
}

/// Accepts connections, at most `cap` open at once: past it, new connections wait in the
/// kernel's backlog (holding none of the process's descriptors) until one closes, and a
/// warning says so once per [`LOG_EVERY`]. Failed accepts back off ([`AcceptBackoff`]).
/// Both ports' accept loop.
pub struct Acceptor {
    listener: TcpListener,
    connections: Arc<Semaphore>,
    cap: usize,
    /// What the warning says when the cap is reached (after "connection limit reached (N
    /// open): ").
    full: String,
    last_full_log: Option<Instant>,
    errors: AcceptBackoff,
}

impl Acceptor {
    /// Accept on `listener`, at most `cap` connections at once; `what` names the port in the
    /// log (`""` for the public one) and `full` says what to do when the cap is reached.
    pub fn new(listener: TcpListener, cap: usize, what: &'static str, full: String) -> Acceptor {
        Acceptor {
            listener,
            connections: Arc::new(Semaphore::new(cap)),
            cap,
            full,
            last_full_log: None,
            errors: AcceptBackoff {
                what,
                ..AcceptBackoff::default()
            },
        }
    }

    /// The next connection, with the permit it holds until it closes (drop the permit then);
    /// `None` once `stop` resolves.
    pub async fn accept<S: Future<Output = ()>>(
        &mut self,
        stop: &mut Pin<&mut S>,
    ) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
        let permit = match self.connections.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if self
                    .last_full_log
                    .is_none_or(|at| at.elapsed() >= LOG_EVERY)
                {
                    self.last_full_log = Some(Instant::now());
                    tracing::warn!(
                        "{}connection limit reached ({} open): {}",
                        self.errors.what,
                        self.cap,
                        self.full
                    );
                }
                tokio::select! {
                    permit = self.connections.clone().acquire_owned() => permit.ok()?,
                    () = stop.as_mut() => return None,
                }
            }
        };
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        self.errors.reset();
                        return Some((stream, peer, permit));
                    }
                    Err(e) => {
                        let pause = self.errors.failed(&e);
                        tokio::select! {
                            () = tokio::time::sleep(pause) => continue,
                            () = stop.as_mut() => return None,
                        }
                    }
                },
                () = stop.as_mut() => return None,
            }
        }
    }
}

/// How a server reports its health and stops.
#[derive(Clone, Default)]
pub struct Serving {
    /// Readiness, turned off on SIGTERM.
    pub health: Health,
    /// Answer readiness on the public port at this path too (`--health-path`).
    pub health_path: Option<String>,
    /// After SIGTERM, how long new connections are still served (`--drain-delay`).
    pub drain_delay: Duration,
    /// Then, how long the requests in flight may take to finish (`--graceful-timeout`).
    pub graceful_timeout: Duration,
}

/// Serve `site` on `listener` until SIGINT or SIGTERM, then drain as `serving` says.
pub async fn serve(listener: TcpListener, site: Site, serving: Serving) {
    let limits = ServerLimits::from_settings(&site.server_settings());
    log_file_budget(&limits);
    if traces::enabled() {
        tracing::info!("traces: exporting spans over OTLP/HTTP (the OTEL_* variables)");
    }
    let budget = BodyBudget::new(limits.max_buffered_body_bytes)
        .with_responses(ResponseBudget::new(limits.max_buffered_response_bytes));
    let builder = http1_builder(limits.header_timeout, limits.max_header_bytes);
    // Connections in flight: told to finish when the server stops, and waited for. (hyper-util's
    // `GracefulShutdown` cannot watch a connection that may be upgraded to a WebSocket.)
    let connections = TaskTracker::new();
    let finish = CancellationToken::new();
    let health = serving.health.clone();
    let drain_delay = serving.drain_delay;
    let stop = async move {
        let signal = shutdown_signal().await;
        health.drain();
        if signal == Signal::Terminate && !drain_delay.is_zero() {
            tracing::warn!(
                "SIGTERM: not ready from now on; serving new connections for {drain_delay:?} more"
            );
            tokio::select! {
                () = tokio::time::sleep(drain_delay) => {}
                _ = shutdown_signal() => {}
            }
        }
    };
    tokio::pin!(stop);
    let health_path: Option<Arc<str>> = serving.health_path.as_deref().map(Arc::from);
    let mut acceptor = Acceptor::new(
        listener,
        limits.max_connections,
        "",
        "new connections wait until one closes (server['max_connections'] in config.py)".into(),
    );
    while let Some((stream, peer, permit)) = acceptor.accept(&mut stop).await {
        let _ = stream.set_nodelay(true);
        let site = site.clone();
        let budget = budget.clone();
        let body_timeout = limits.body_timeout;
        let health = serving.health.clone();
        let health_path = health_path.clone();
        let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let site = site.clone();
            let budget = budget.clone();
            let health = health.clone();
            let health_path = health_path.clone();
            async move {
                if let Some(path) = health_path.as_deref()
                    && request.uri().path() == path
                    && matches!(*request.method(), hyper::Method::GET | hyper::Method::HEAD)
                {
                    return Ok(readiness(&health).await);
                }
                let started = Instant::now();
                let in_progress = metrics::global().request_started();
                let method = request.method().clone();
                let path = request.uri().path().to_string();
                let record = Arc::new(Record::default());
                // The request's span (while traces are on), or a client's trace id.
                let trace = RequestTrace::start(method.as_str(), request.headers());
                let answer = traces::scope(trace.as_ref(), async {
                    match http_checks::check(request.version(), request.headers()) {
                        Some(refusal) => response::json(
                            refusal.status,
                            serde_json::json!({ "detail": refusal.detail }).to_string(),
                        ),
                        None => site.respond(request, peer, &budget, body_timeout).await,
                    }
                });
                let mut response = request_record::scope(record.clone(), answer).await;
                let status = response.status().as_u16();
                let elapsed = started.elapsed();
                metrics::global().request_ended(
                    metrics::method_label(&method),
                    status,
                    elapsed,
                    &record,
                );
                drop(in_progress);
                let trace_id = trace.as_ref().map(RequestTrace::trace_id);
                access_log::write(method.as_str(), &path, status, elapsed, &record, trace_id);
                if let Some(trace) = trace {
                    trace.finish(status, &record.route(), record.tenant().as_deref());
                }
                // Draining: this connection is not kept, so its client reconnects elsewhere.
                if health.is_draining() && status != 101 {
                    response.headers_mut().insert(
                        hyper::header::CONNECTION,
                        hyper::header::HeaderValue::from_static("close"),
                    );
                }
                Ok::<_, Infallible>(response)
            }
        });
        let stream = WriteTimeout::new(stream, limits.write_timeout);
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let finish = finish.clone();
        connections.spawn(async move {
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = finish.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop(permit);
        });
    }
    drop(acceptor);
    tracing::warn!("shutting down: finishing the requests in flight");
    // Streamed responses end now (their handlers see the stream over) and WebSockets close
    // with 1001; then requests in flight, the background tasks of requests already answered,
    // and the streams' and sockets' calls.
    crate::sandbox::stream::stop_all();
    crate::sandbox::socket::stop_all();
    finish.cancel();
    connections.close();
    let finished = async {
        connections.wait().await;
        crate::sandbox::background::drained().await;
        crate::sandbox::stream::drained().await;
        crate::sandbox::socket::drained().await;
    };
    let graceful = serving.graceful_timeout;
    if tokio::time::timeout(graceful, finished).await.is_err() {
        tracing::warn!("requests still running after {graceful:?}; stopping them");
    }
}

/// Readiness on the public port: 200 or 503, with why, never cached.
async fn readiness(health: &Health) -> hyper::Response<response::Body> {
    let readiness = health.readiness().await;
    let status = if readiness.is_ready() {
        hyper::StatusCode::OK
    } else {
        hyper::StatusCode::SERVICE_UNAVAILABLE
    };
    let mut answer = response::json(status, readiness.body());
    answer.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    answer
}

/// Failed accepts (out of file descriptors, say) wait longer each time, from 10 ms to 1 s,
/// and are logged once per [`LOG_EVERY`] with how many there were.
#[derive(Default)]
struct AcceptBackoff {
    /// The port, in the log: `""` or `"admin "`.
    what: &'static str,
    pause: Option<Duration>,
    failures: u64,
    logged: Option<Instant>,
}

impl AcceptBackoff {
    fn failed(&mut self, error: &std::io::Error) -> Duration {
        self.failures += 1;
        if self.logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            self.logged = Some(Instant::now());
            tracing::warn!(
                "{}accept failed: {error} ({} times since the last success); retrying with backoff",
                self.what,
                self.failures
            );
        }
        let pause = self.pause.map_or(Duration::from_millis(10), |p| {
            (p * 2).min(Duration::from_secs(1))
        });
        self.pause = Some(pause);
        pause
    }

    fn reset(&mut self) {
        if self.failures > 0 {
            tracing::info!(
                "{}accepting connections again after {} failures",
                self.what,
                self.failures
            );
        }
        *self = AcceptBackoff {
            what: self.what,
            ..AcceptBackoff::default()
        };
    }
}

/// Which signal asked the server to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Interrupt,
    Terminate,
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM, saying which.
async fn shutdown_signal() -> Signal {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(e) => {
                    tracing::warn!("cannot listen for SIGTERM: {e}");
                    let _ = interrupt.await;
                    return Signal::Interrupt;
                }
            };
        tokio::select! {
            _ = interrupt => Signal::Interrupt,
            _ = terminate.recv() => Signal::Terminate,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
        Signal::Interrupt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_port_leaves_a_reserve_of_files() {
        // A high limit: 4096 connections, the rest kept.
        let high = FileBudget::for_limit(20_000, None);
        assert_eq!(high.public, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(high.reserve, FD_RESERVE);
        assert_eq!(high.admin, ADMIN_MAX_CONNECTIONS);
        // The common soft limit: half of it for connections.
        let common = FileBudget::for_limit(1024, None);
        assert_eq!(
            (common.public, common.reserve, common.admin),
            (512, 512, 64)
        );
        let middle = FileBudget::for_limit(3000, None);
        assert_eq!((middle.public, middle.reserve), (1976, FD_RESERVE));
        // A low limit: half, and the admin port a quarter of the rest.
        let low = FileBudget::for_limit(96, None);
        assert_eq!((low.public, low.reserve, low.admin), (48, 48, 12));
        for limit in [64, 96, 256, 1024, 2048, 5000, 1 << 20] {
            let b = FileBudget::for_limit(limit, None);
            assert!(
                b.public as u64 + b.admin as u64 + b.reserve / 2 <= limit,
                "{limit}: {b:?}"
            );
        }
    }
}
