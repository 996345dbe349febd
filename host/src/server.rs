//! The HTTP server: accepts connections on a socket and hands each request to the [`site`]
//! (one project's [`router`], or the tenant its host names).
//!
//! HTTP/1.1 with keep-alive, via hyper. One access line per request is logged at `info`.
//! On SIGINT or SIGTERM it stops accepting, lets the requests in flight finish (up to a
//! bound) and returns.
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
//! [`router`]: crate::router
//! [`request_body`]: crate::request_body
//! [`response_body`]: crate::response_body
//! [`write_timeout`]: crate::write_timeout
//! [`http_checks`]: crate::http_checks
//! [`site`]: crate::site

use std::{
    convert::Infallible,
    sync::Arc,
    time::{Duration, Instant},
};

use hyper::{server::conn::http1, service::service_fn};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
};
use tokio::{net::TcpListener, sync::Semaphore};

use crate::{
    config::ServerSettings,
    http_checks,
    request_body::BodyBudget,
    response_body::{DEFAULT_MAX_BUFFERED_RESPONSE_BYTES, ResponseBudget},
    router,
    site::Site,
    write_timeout::WriteTimeout,
};

/// How often a repeated condition (connection cap reached, accept failing) is logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The bounds on what clients may hold; see the README's limits table.
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

/// 4096 connections, or fewer when the process may open fewer files: a quarter of the
/// descriptors stay free for the sandbox, the cache and the log.
pub fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and nothing else.
    let files = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur
    } else {
        1024
    };
    usize::try_from(files / 4 * 3)
        .unwrap_or(4096)
        .clamp(16, 4096)
}

/// Serve `site` on `listener` until SIGINT or SIGTERM; then wait up to `drain` for the
/// requests in flight.
pub async fn serve(listener: TcpListener, site: Site, drain: Duration) {
    let limits = ServerLimits::from_settings(&site.server_settings());
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let budget = BodyBudget::new(limits.max_buffered_body_bytes)
        .with_responses(ResponseBudget::new(limits.max_buffered_response_bytes));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes);
    let graceful = GracefulShutdown::new();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    let mut last_full_log: Option<Instant> = None;
    let mut accept_errors = AcceptBackoff::default();
    loop {
        let permit = match connections.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if last_full_log.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
                    last_full_log = Some(Instant::now());
                    tracing::warn!(
                        "connection limit reached ({} open): new connections wait until one closes (server['max_connections'] in config.py)",
                        limits.max_connections
                    );
                }
                tokio::select! {
                    permit = connections.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                    () = &mut stop => break,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    accept_errors.reset();
                    accepted
                }
                Err(e) => {
                    let pause = accept_errors.failed(&e);
                    tokio::select! {
                        () = tokio::time::sleep(pause) => continue,
                        () = &mut stop => break,
                    }
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let site = site.clone();
        let budget = budget.clone();
        let body_timeout = limits.body_timeout;
        let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let site = site.clone();
            let budget = budget.clone();
            async move {
                let started = Instant::now();
                let method = request.method().clone();
                let path = request.uri().path().to_string();
                let response = match http_checks::check(request.version(), request.headers()) {
                    Some(refusal) => router::json(
                        refusal.status,
                        serde_json::json!({ "detail": refusal.detail }).to_string(),
                    ),
                    None => site.respond(request, peer, &budget, body_timeout).await,
                };
                tracing::info!(
                    target: "access",
                    "{method} {path} {} {:.1}ms",
                    response.status().as_u16(),
                    started.elapsed().as_secs_f64() * 1000.0
                );
                Ok::<_, Infallible>(response)
            }
        });
        let stream = WriteTimeout::new(stream, limits.write_timeout);
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    tracing::warn!("shutting down: finishing the requests in flight");
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still running after {drain:?}; stopping them");
    }
}

/// Failed accepts (out of file descriptors, say) wait longer each time, from 10 ms to 1 s,
/// and are logged once per [`LOG_EVERY`] with how many there were.
#[derive(Default)]
struct AcceptBackoff {
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
                "accept failed: {error} ({} times since the last success); retrying with backoff",
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
                "accepting connections again after {} failures",
                self.failures
            );
        }
        *self = AcceptBackoff::default();
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(e) => {
                    tracing::warn!("cannot listen for SIGTERM: {e}");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
