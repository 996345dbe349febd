//! The HTTP server: accepts connections on a socket and hands each request to [`router`].
//!
//! HTTP/1.1 with keep-alive, via hyper. One access line per request is logged at `info`.
//!
//! [`router`]: crate::router

use std::{convert::Infallible, time::Instant};

use hyper::{server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::{app::App, router};

/// Serve `app` on `listener` until the process ends.
pub async fn serve(listener: TcpListener, app: App) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        tokio::spawn(async move {
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
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!("connection from {peer}: {e}");
            }
        });
    }
}
