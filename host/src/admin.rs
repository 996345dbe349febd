//! The admin address of `filerouter run --admin ADDR` (a single project or `--tenants`):
//! metrics, liveness and readiness, on their own socket.
//!
//! `GET /metrics` is Prometheus' text format (version 0.0.4), encoded by the
//! `prometheus-client` crate: the process's HTTP and sandbox metrics (`crate::metrics`), its
//! resident memory, and with tenants their own figures (`crate::tenants::metrics`).
//! `GET /livez` answers 200 while the process runs; `GET /readyz` 200 when it is ready to
//! serve, else 503 with why (`crate::health`: starting, draining, a backend down).
//! `GET /healthz` answers 200 `{"status":"ok",...}` while the server runs (with tenants: how
//! many are configured, loaded and refused). Nothing else is served here, and none of this is
//! reachable on the public port unless `--health-path` puts readiness there: the public server
//! never looks at these paths, and this listener never routes to a project.
//!
//! What a client may hold here is bounded as on the public port, with the same building blocks
//! ([`server::Acceptor`], [`server::http1_builder`], [`WriteTimeout`]) and bounds of its own:
//! at most [`MAX_CONNECTIONS`] open connections (its descriptors are part of the reserve the
//! public port leaves, see [`server::FileBudget`]), a request head within [`HEADER_TIMEOUT`]
//! (also the keep-alive idle time), heads of at most [`MAX_HEADER_BYTES`], and answers whose
//! writes make no progress for [`WRITE_TIMEOUT`] are cut off. Failed accepts back off.

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use hyper::{Method, Request, Response, StatusCode, body::Incoming, header, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::gauge::ConstGauge,
    registry::Registry,
};

use crate::{
    health::Health,
    metrics,
    replay::store::{self, TraceStore},
    response::{self, Body},
    server,
    tenants::{Tenants, metrics::Scrape},
    write_timeout::WriteTimeout,
};

/// What the admin address reports on.
#[derive(Clone)]
pub struct Admin {
    pub health: Health,
    /// With `--tenants`: theirs too.
    pub tenants: Option<Tenants>,
    /// `run --record` of one project: its kept traces (`/traces`, `/traces/ID`).
    pub traces: Option<Arc<TraceStore>>,
}

/// Connections the admin port holds open at once (fewer with a low open-file limit: see
/// [`server::FileBudget`], which shares the process's descriptors out and so owns the number,
/// [`server::ADMIN_MAX_CONNECTIONS`]). Past it, new connections **wait** in the kernel's
/// backlog until one closes, as on the public port, rather than being accepted and closed at
/// once: waiting holds none of the process's descriptors, an idle connection frees its slot
/// within [`HEADER_TIMEOUT`], and a scraper's request is then answered instead of refused.
pub const MAX_CONNECTIONS: usize = server::ADMIN_MAX_CONNECTIONS;

/// Time to send a whole request head on the admin port; also how long an idle keep-alive
/// connection (or one that never sends a byte) stays open. A scraper sends its request at once.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest request head the admin port reads (hyper's smallest buffer is 8 KiB).
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// How long a write of an answer may make no progress (a client that stops reading) before
/// the connection is closed.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Listen on `address`; fails if it cannot be bound.
pub async fn listen(address: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(address)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {address} for --admin: {e}"))
}

/// Serve metrics and health of `admin` on `listener` until the process ends.
pub fn spawn(listener: TcpListener, admin: Admin) {
    tokio::spawn(async move {
        let cap = server::FileBudget::get().admin;
        let mut acceptor = server::Acceptor::new(
            listener,
            cap,
            "admin ",
            "new admin connections wait until one closes".into(),
        );
        let builder = server::http1_builder(HEADER_TIMEOUT, MAX_HEADER_BYTES);
        let never = std::future::pending::<()>();
        tokio::pin!(never);
        while let Some((stream, peer, permit)) = acceptor.accept(&mut never).await {
            let admin = admin.clone();
            let service = service_fn(move |request: Request<Incoming>| {
                let admin = admin.clone();
                async move { Ok::<_, Infallible>(respond(&admin, request, peer).await) }
            });
            let stream = WriteTimeout::new(stream, WRITE_TIMEOUT);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!("admin connection from {peer}: {e}");
                }
                drop(permit);
            });
        }
    });
}

async fn respond(admin: &Admin, request: Request<Incoming>, _peer: SocketAddr) -> Response<Body> {
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return response::json(
            StatusCode::METHOD_NOT_ALLOWED,
            r#"{"detail":"Method Not Allowed"}"#,
        );
    }
    match request.uri().path() {
        "/metrics" => {
            let rss = tokio::task::spawn_blocking(resident_bytes)
                .await
                .ok()
                .flatten();
            let mut scraped = Registry::default();
            scraped.register_collector(Box::new(Process { rss }));
            if let Some(tenants) = &admin.tenants {
                scraped.register_collector(Box::new(Scrape(tenants.clone())));
            }
            let text = metrics::global().render(Some(&scraped));
            let mut response = Response::new(response::full(text));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            response
        }
        "/livez" => response::json(StatusCode::OK, r#"{"status":"alive"}"#),
        "/readyz" => {
            let readiness = admin.health.readiness().await;
            let status = if readiness.is_ready() {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            response::json(status, readiness.body())
        }
        "/healthz" => {
            let body = match &admin.tenants {
                Some(tenants) => {
                    let all = tenants.all();
                    let loaded = all.iter().filter(|t| t.is_loaded()).count();
                    let refused: Vec<&str> = all
                        .iter()
                        .filter(|t| t.refusal().is_some())
                        .map(|t| t.name())
                        .collect();
                    serde_json::json!({
                        "status": "ok",
                        "tenants": all.len(),
                        "loaded": loaded,
                        "refused": refused,
                    })
                }
                None => serde_json::json!({ "status": "ok" }),
            };
            response::json(StatusCode::OK, body.to_string())
        }
        path if path == "/traces" || path.starts_with("/traces/") => {
            let id = path.strip_prefix("/traces/");
            match &admin.traces {
                Some(store) => traces(store.clone(), id).await,
                None => response::json(
                    StatusCode::NOT_FOUND,
                    r#"{"detail":"No traces: recording is off (run --record)"}"#,
                ),
            }
        }
        path if path.starts_with("/tenants/") && admin.tenants.is_some() => {
            tenant_traces(admin, &request, path).await
        }
        _ => response::json(StatusCode::NOT_FOUND, r#"{"detail":"Not Found"}"#),
    }
}

/// `GET /tenants/NAME/traces[/ID]`: a tenant's traces, for a client that shows that tenant's
/// `traces_token` (`Authorization: Bearer TOKEN`): a tenant only ever sees its own.
async fn tenant_traces(admin: &Admin, request: &Request<Incoming>, path: &str) -> Response<Body> {
    let not_found = || response::json(StatusCode::NOT_FOUND, r#"{"detail":"Not Found"}"#);
    let Some(tenants) = &admin.tenants else {
        return not_found();
    };
    let rest = &path["/tenants/".len()..];
    let (name, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let id = match rest {
        "traces" => None,
        rest => match rest.strip_prefix("traces/") {
            Some(id) => Some(id),
            None => return not_found(),
        },
    };
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match tenants.traces(name, token) {
        Some(store) => traces(store, id).await,
        None => {
            let mut refused = response::json(
                StatusCode::UNAUTHORIZED,
                r#"{"detail":"This tenant's traces_token is needed (Authorization: Bearer TOKEN)"}"#,
            );
            refused.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            refused
        }
    }
}

/// `GET /traces`: the kept traces, newest first; `GET /traces/ID`: one trace file, as
/// `filerouter replay` reads it. Only from `store`: one project's, or one tenant's.
async fn traces(store: Arc<TraceStore>, id: Option<&str>) -> Response<Body> {
    let id = id.map(str::to_string);
    let read = tokio::task::spawn_blocking(move || match id {
        None => store
            .list()
            .map(|list| {
                serde_json::json!({ "traces": list })
                    .to_string()
                    .into_bytes()
            })
            .map(Some),
        Some(id) => store.get(&id),
    })
    .await;
    match read {
        Ok(Ok(Some(bytes))) => {
            let mut response = Response::new(response::full(bytes));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            response
        }
        Ok(Ok(None)) | Ok(Err(store::StoreError::BadId(_))) => {
            response::json(StatusCode::NOT_FOUND, r#"{"detail":"No such trace"}"#)
        }
        Ok(Err(e)) => {
            tracing::warn!("admin: traces: {e}");
            response::json(
                StatusCode::INTERNAL_SERVER_ERROR,
                r#"{"detail":"Internal Server Error"}"#,
            )
        }
        Err(_) => response::json(
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"detail":"Internal Server Error"}"#,
        ),
    }
}

/// The process's own figures, read at scrape time.
#[derive(Debug)]
struct Process {
    rss: Option<u64>,
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(rss) = self.rss {
            let gauge = ConstGauge::new(rss);
            gauge.encode(encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory of the server process.",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// The process's resident memory, from `/proc/self/statm` (Linux).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
