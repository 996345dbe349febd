//! The HTTP server: accepts connections on a socket and hands each request to [`router`].
//!
//! HTTP/1.1 with keep-alive, via hyper. One access line per request is logged at `info`.
//! On SIGINT or SIGTERM it stops accepting, lets the requests in flight finish (up to a
//! bound) and returns.
//!
//! [`router`]: crate::router

use std::{convert::Infallible, time::Duration, time::Instant};

use hyper::{server::conn::http1, service::service_fn};
use hyper_util::{rt::TokioIo, server::graceful::GracefulShutdown};
use tokio::net::TcpListener;

use crate::{app::App, router};

/// Serve `app` on `listener` until SIGINT or SIGTERM; then wait up to `drain` for the
/// requests in flight.
pub async fn serve(listener: TcpListener, app: App, drain: Duration) {
    let graceful = GracefulShutdown::new();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let app = app.clone();
            async move {
                let started = Instant::now();
                let method = request.method().clone();
                let path = request.uri().path().to_string();
                let response = router::respond(&app, request, peer).await;
                tracing::info!(
                    target: "access",
                    "{method} {path} {} {:.1}ms",
                    response.status().as_u16(),
                    started.elapsed().as_secs_f64() * 1000.0
                );
                Ok::<_, Infallible>(response)
            }
        });
        let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection from {peer}: {e}");
            }
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
