//! The admin endpoint of `filerouter run --admin ADDR`: metrics and health, on their own socket.
//!
//! `GET /metrics` is Prometheus' text format (version 0.0.4): per tenant, answers by status,
//! latency p50/p99, CPU time, queue depth, requests running, rejections, whether it is loaded,
//! loads and failed loads; process-wide, the tenants loaded and the resident memory.
//! `GET /healthz` answers 200 `{"status":"ok",...}` while the server runs. Nothing else is
//! served here, and none of this is reachable on the public port: the public server never
//! looks at these paths, and this listener never routes to a tenant.
//!
//! What a client may hold here is bounded as on the public port, with the same building blocks
//! ([`server::Acceptor`], [`server::http1_builder`], [`WriteTimeout`]) and bounds of its own:
//! at most [`MAX_CONNECTIONS`] open connections (its descriptors are part of the reserve the
//! public port leaves, see [`server::FileBudget`]), a request head within [`HEADER_TIMEOUT`]
//! (also the keep-alive idle time), heads of at most [`MAX_HEADER_BYTES`], and answers whose
//! writes make no progress for [`WRITE_TIMEOUT`] are cut off. Failed accepts back off.

use std::{convert::Infallible, net::SocketAddr, time::Duration};

use hyper::{Method, Request, Response, StatusCode, body::Incoming, header, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::{
    response::{self, Body},
    server,
    tenants::{Tenants, metrics::Exposition},
    write_timeout::WriteTimeout,
};

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

/// Serve metrics and health of `tenants` on `listener` until the process ends.
pub fn spawn(listener: TcpListener, tenants: Tenants) {
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
            let tenants = tenants.clone();
            let service = service_fn(move |request: Request<Incoming>| {
                let tenants = tenants.clone();
                async move { Ok::<_, Infallible>(respond(&tenants, request, peer).await) }
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

async fn respond(
    tenants: &Tenants,
    request: Request<Incoming>,
    _peer: SocketAddr,
) -> Response<Body> {
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
            let mut response = Response::new(response::full(metrics(tenants, rss)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        "/healthz" => {
            let all = tenants.all();
            let loaded = all.iter().filter(|t| t.is_loaded()).count();
            let refused: Vec<&str> = all
                .iter()
                .filter(|t| t.refusal().is_some())
                .map(|t| t.name())
                .collect();
            let body = serde_json::json!({
                "status": "ok",
                "tenants": all.len(),
                "loaded": loaded,
                "refused": refused,
            });
            response::json(StatusCode::OK, body.to_string())
        }
        _ => response::json(StatusCode::NOT_FOUND, r#"{"detail":"Not Found"}"#),
    }
}

/// The metrics text.
fn metrics(tenants: &Tenants, rss: Option<u64>) -> String {
    let mut out = Exposition::default();
    let all = tenants.all();
    out.sample(
        "filerouter_tenants",
        "gauge",
        "Tenants configured.",
        &[],
        all.len() as f64,
    );
    out.sample(
        "filerouter_tenants_loaded",
        "gauge",
        "Tenants loaded now.",
        &[],
        all.iter().filter(|t| t.is_loaded()).count() as f64,
    );
    let slots = tenants.slot_counts();
    for (how, count) in [
        ("created", slots.created),
        ("warm", slots.warm),
        ("switched", slots.switched),
    ] {
        out.sample(
            "filerouter_memory_slots_given_total",
            "counter",
            "Linear memories given to instances: from a new slot, from a free slot that held the tenant's image (warm), or from one switched from another tenant's.",
            &[("slot", how)],
            count as f64,
        );
    }
    for (how, count) in [("copied", slots.copied), ("remapped", slots.remapped)] {
        out.sample(
            "filerouter_memory_slot_resets_total",
            "counter",
            "Memory slots reset after a call: written pages copied back from the image, or the image mapped afresh.",
            &[("reset", how)],
            count as f64,
        );
    }
    out.sample(
        "filerouter_memory_slot_pages_copied_total",
        "counter",
        "Pages copied back from images by memory resets.",
        &[],
        slots.pages_copied as f64,
    );
    if let Some(rss) = rss {
        out.sample(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory of the server process.",
            &[],
            rss as f64,
        );
    }
    for tenant in &all {
        let name = tenant.name();
        let labels = [("tenant", name)];
        for (status, count) in tenant.metrics.statuses() {
            let status = status.to_string();
            out.sample(
                "filerouter_requests_total",
                "counter",
                "Requests answered, by status.",
                &[("tenant", name), ("status", &status)],
                count as f64,
            );
        }
        let (quantiles, count, sum) = tenant.metrics.latency();
        if let Some((p50, p99)) = quantiles {
            out.sample(
                "filerouter_request_duration_seconds",
                "summary",
                "Time to answer a request (to the response head); quantiles over the last 1 to 2 minutes.",
                &[("tenant", name), ("quantile", "0.5")],
                p50,
            );
            out.sample(
                "filerouter_request_duration_seconds",
                "summary",
                "",
                &[("tenant", name), ("quantile", "0.99")],
                p99,
            );
        }
        out.sample_suffixed(
            "filerouter_request_duration_seconds",
            "_count",
            &labels,
            count as f64,
        );
        out.sample_suffixed("filerouter_request_duration_seconds", "_sum", &labels, sum);
        let queue = tenant.queue_stats();
        out.sample(
            "filerouter_tenant_cpu_seconds_total",
            "counter",
            "CPU time the tenant's requests ran in the sandbox.",
            &labels,
            queue.cpu.as_secs_f64(),
        );
        out.sample(
            "filerouter_tenant_running",
            "gauge",
            "The tenant's requests running in the sandbox now.",
            &labels,
            queue.running as f64,
        );
        out.sample(
            "filerouter_tenant_open_streams",
            "gauge",
            "The tenant's streamed responses and WebSockets open now (each holds a sandbox instance; at most its max_streams).",
            &labels,
            tenant.open_streams() as f64,
        );
        out.sample(
            "filerouter_tenant_queue_depth",
            "gauge",
            "The tenant's requests waiting for a turn now.",
            &labels,
            queue.queued as f64,
        );
        out.sample(
            "filerouter_tenant_rejected_total",
            "counter",
            "Requests turned away with 503 because the tenant's queue was full.",
            &labels,
            queue.rejected as f64,
        );
        out.sample(
            "filerouter_tenant_loaded",
            "gauge",
            "1 while the tenant is loaded.",
            &labels,
            if tenant.is_loaded() { 1.0 } else { 0.0 },
        );
        out.sample(
            "filerouter_tenant_refused",
            "gauge",
            "1 while the tenant is refused (its cache cannot be used, or its database is behind); it is tried again after a back-off.",
            &labels,
            if tenant.refusal().is_some() { 1.0 } else { 0.0 },
        );
        out.sample(
            "filerouter_tenant_loads_total",
            "counter",
            "Times the tenant was loaded from its cache.",
            &labels,
            tenant
                .metrics
                .loads
                .load(std::sync::atomic::Ordering::Relaxed) as f64,
        );
        out.sample(
            "filerouter_tenant_load_failures_total",
            "counter",
            "Loads that failed: a cache that cannot be used (missing, corrupt, tampered with, wrong key), a database behind its migrations, or a load that could not be done then (out of files or memory).",
            &labels,
            tenant
                .metrics
                .load_failures
                .load(std::sync::atomic::Ordering::Relaxed) as f64,
        );
        outbound_samples(&mut out, &labels, &tenant.metrics.outbound);
    }
    out.render()
}

/// A tenant's outbound calls: by how they ended, bytes received, time taken.
fn outbound_samples(
    out: &mut Exposition,
    labels: &[(&str, &str)],
    metrics: &crate::outbound::Metrics,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let ended = metrics.ended.lock().map(|m| m.clone()).unwrap_or_default();
    for (how, count) in &ended {
        let mut with = labels.to_vec();
        with.push(("status", how.as_str()));
        out.sample(
            "filerouter_tenant_outbound_calls_total",
            "counter",
            "The tenant's outbound HTTP calls by how they ended: the response's status, or refused, invalid, limit, timeout, network, or closed (dropped before its end by the guest or with its request).",
            &with,
            *count as f64,
        );
    }
    out.sample(
        "filerouter_tenant_outbound_received_bytes_total",
        "counter",
        "Response body bytes the tenant's outbound calls received.",
        labels,
        metrics.received_bytes.load(Relaxed) as f64,
    );
    out.sample(
        "filerouter_tenant_outbound_seconds_total",
        "counter",
        "Seconds the tenant's outbound calls took together, each from its start to its body's end (divide by the calls for the mean).",
        labels,
        metrics.duration_us.load(Relaxed) as f64 / 1e6,
    );
}

/// The process's resident memory, from `/proc/self/statm` (Linux).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
