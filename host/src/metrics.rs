//! The process's Prometheus metrics, kept with the `prometheus-client` crate and shown by the
//! admin address's `/metrics` (`crate::admin`), for a single project and for tenants alike.
//!
//! HTTP, with the names Python users already chart: `http_requests_total{method,route,status}`,
//! `http_request_duration_seconds{method,route}` (a histogram) and `http_requests_in_progress`
//! (with a `tenant` label under `run --tenants`). `route` is the route pattern that matched
//! (`/users/{id}`), never the raw path: a request no route file matched is counted under the one
//! label [`UNMATCHED`], and a method outside the standard ones as `OTHER`, so no client can
//! grow the label sets. The sandbox's own: the time calls waited in the scheduler's queue, the
//! CPU each request's guest used, the limits that stopped requests, and the time database
//! statements took. Recording (`crate::replay`, with a `tenant` label under `run --tenants`):
//! requests taped, traces kept, traces dropped by a bound (`reason`: `count` and `bytes` on
//! disk, `tape_cap` for a tape cut at its in-memory bound), and the bytes of traces written.
//!
//! Written on the request path by the server ([`Metrics::request_started`],
//! [`Metrics::request_ended`]) from the request's record (`crate::request_record`), and by the
//! sandbox (`database_statement`); each is a few atomic operations and one read-locked map
//! look-up. Not here: per-tenant figures read at scrape time (`crate::tenants::metrics`), and
//! serving them (`crate::admin`).

use std::{
    fmt::Write,
    sync::{Arc, LazyLock},
    time::Duration,
};

use prometheus_client::{
    encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::request_record::{self, Record};

pub use request_record::UNMATCHED;

/// The Prometheus text format's content type (version 0.0.4), which `/metrics` answers in.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Request durations, in seconds: the buckets Python's Prometheus clients use by default.
const DURATION_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// CPU and queue wait per request, in seconds: finer, a guest call takes milliseconds.
const SANDBOX_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

/// Database statements, in seconds.
const DATABASE_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

/// The `tenant` label every family here carries under `run --tenants`, and none without.
fn encode_tenant(
    tenant: &Option<Arc<str>>,
    encoder: &mut LabelSetEncoder,
) -> Result<(), std::fmt::Error> {
    match tenant {
        Some(tenant) => ("tenant", &**tenant).encode(encoder.encode_label()),
        None => Ok(()),
    }
}

/// `method`, `route`, `status` (and `tenant` under `run --tenants`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct RequestLabels {
    tenant: Option<Arc<str>>,
    method: &'static str,
    route: Arc<str>,
    status: u16,
}

impl EncodeLabelSet for RequestLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        encode_tenant(&self.tenant, encoder)?;
        ("method", self.method).encode(encoder.encode_label())?;
        ("route", &*self.route).encode(encoder.encode_label())?;
        ("status", self.status).encode(encoder.encode_label())
    }
}

/// `method`, `route` (and `tenant`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct RouteLabels {
    tenant: Option<Arc<str>>,
    method: &'static str,
    route: Arc<str>,
}

impl EncodeLabelSet for RouteLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        encode_tenant(&self.tenant, encoder)?;
        ("method", self.method).encode(encoder.encode_label())?;
        ("route", &*self.route).encode(encoder.encode_label())
    }
}

/// The sandbox limit that stopped a request.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct LimitLabels {
    limit: &'static str,
}

impl EncodeLabelSet for LimitLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("limit", self.limit).encode(encoder.encode_label())
    }
}

/// A tenant's label, when there is one (recording's counters).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct TenantLabels {
    tenant: Option<Arc<str>>,
}

impl EncodeLabelSet for TenantLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        encode_tenant(&self.tenant, encoder)?;
        Ok(())
    }
}

/// Why traces were dropped, and whose.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct DroppedLabels {
    tenant: Option<Arc<str>>,
    reason: &'static str,
}

impl EncodeLabelSet for DroppedLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        encode_tenant(&self.tenant, encoder)?;
        ("reason", self.reason).encode(encoder.encode_label())
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// A request in progress (`http_requests_in_progress`), until dropped: also when its client
/// goes away before the answer.
pub struct InProgress(Gauge);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The process's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: HistogramFamily<RouteLabels>,
    in_progress: Gauge,
    queue_wait: Histogram,
    cpu: Histogram,
    limits: Family<LimitLabels, Counter>,
    database: Histogram,
    traces_taped: Family<TenantLabels, Counter>,
    traces_kept: Family<TenantLabels, Counter>,
    traces_dropped: Family<DroppedLabels, Counter>,
    trace_bytes: Family<TenantLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by method, route pattern and status",
            requests.clone(),
        );
        let durations: HistogramFamily<RouteLabels> =
            Family::new_with_constructor(duration_histogram);
        registry.register(
            "http_request_duration_seconds",
            "Time to answer an HTTP request (to the response head), by method and route pattern",
            durations.clone(),
        );
        let in_progress = Gauge::default();
        registry.register(
            "http_requests_in_progress",
            "HTTP requests being answered now",
            in_progress.clone(),
        );
        let queue_wait = Histogram::new(SANDBOX_BUCKETS);
        registry.register(
            "filerouter_queue_wait_seconds",
            "Time a request's sandbox call waited for a turn in the scheduler's queue",
            queue_wait.clone(),
        );
        let cpu = Histogram::new(SANDBOX_BUCKETS);
        registry.register(
            "filerouter_request_cpu_seconds",
            "CPU time a request's sandbox call used (its guest and the host work charged to it)",
            cpu.clone(),
        );
        let limits = Family::<LimitLabels, Counter>::default();
        registry.register(
            "filerouter_sandbox_limits",
            "Requests stopped by a sandbox limit: cpu, wall, memory, or queue (turned away with 503, the queue full)",
            limits.clone(),
        );
        let database = Histogram::new(DATABASE_BUCKETS);
        registry.register(
            "filerouter_database_statement_duration_seconds",
            "Time route code's database statements took, each from the host's start to its result",
            database.clone(),
        );
        let traces_taped = Family::<TenantLabels, Counter>::default();
        registry.register(
            "filerouter_traces_taped",
            "Requests taped in memory while recording is on (issue 47)",
            traces_taped.clone(),
        );
        let traces_kept = Family::<TenantLabels, Counter>::default();
        registry.register(
            "filerouter_traces_kept",
            "Traces written to the trace store (5xx, 499 and the sampled others)",
            traces_kept.clone(),
        );
        let traces_dropped = Family::<DroppedLabels, Counter>::default();
        registry.register(
            "filerouter_traces_dropped",
            "Traces dropped by a bound: count and bytes (the store's, the oldest removed or one too large not kept), tape_cap (a tape cut at its in-memory bound)",
            traces_dropped.clone(),
        );
        let trace_bytes = Family::<TenantLabels, Counter>::default();
        registry.register(
            "filerouter_trace_bytes_written",
            "Bytes of trace files written to the trace store",
            trace_bytes.clone(),
        );
        Metrics {
            traces_taped,
            traces_kept,
            traces_dropped,
            trace_bytes,
            registry,
            requests,
            durations,
            in_progress,
            queue_wait,
            cpu,
            limits,
            database,
        }
    }
}

static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// The process's metrics.
pub fn global() -> &'static Metrics {
    &GLOBAL
}

/// A route code's database statement took `took` (written by the sandbox's host calls).
pub fn database_statement(took: Duration) {
    GLOBAL.database.observe(took.as_secs_f64());
}

/// A method as a label: the standard ones by name, any other as `OTHER`.
pub fn method_label(method: &hyper::Method) -> &'static str {
    use hyper::Method as M;
    match *method {
        M::GET => "GET",
        M::HEAD => "HEAD",
        M::POST => "POST",
        M::PUT => "PUT",
        M::PATCH => "PATCH",
        M::DELETE => "DELETE",
        M::OPTIONS => "OPTIONS",
        M::CONNECT => "CONNECT",
        M::TRACE => "TRACE",
        _ => "OTHER",
    }
}

impl Metrics {
    /// A request arrived: counted in progress until the guard is dropped.
    pub fn request_started(&self) -> InProgress {
        self.in_progress.inc();
        InProgress(self.in_progress.clone())
    }

    /// A request that arrived with `method` was answered with `status` after `elapsed`; `record`
    /// says what it matched and cost.
    pub fn request_ended(
        &self,
        method: &'static str,
        status: u16,
        elapsed: Duration,
        record: &Record,
    ) {
        let tenant = record.tenant();
        let route = record.route();
        self.requests
            .get_or_create(&RequestLabels {
                tenant: tenant.clone(),
                method,
                route: route.clone(),
                status,
            })
            .inc();
        self.durations
            .get_or_create(&RouteLabels {
                tenant,
                method,
                route,
            })
            .observe(elapsed.as_secs_f64());
        if record.ran_guest() {
            self.queue_wait.observe(record.queue_wait().as_secs_f64());
            self.cpu.observe(record.cpu().as_secs_f64());
        }
        if let Some(limit) = record.limit() {
            self.limits.get_or_create(&LimitLabels { limit }).inc();
        }
    }

    /// A request's tape was started (recording on).
    pub fn trace_taped(&self, tenant: Option<&Arc<str>>) {
        self.traces_taped
            .get_or_create(&TenantLabels {
                tenant: tenant.cloned(),
            })
            .inc();
    }

    /// A trace of `bytes` was written to the store.
    pub fn trace_kept(&self, tenant: Option<&Arc<str>>, bytes: u64) {
        let labels = TenantLabels {
            tenant: tenant.cloned(),
        };
        self.traces_kept.get_or_create(&labels).inc();
        self.trace_bytes.get_or_create(&labels).inc_by(bytes);
    }

    /// `count` traces were dropped by the bound `reason` (nothing when 0).
    pub fn traces_dropped(&self, tenant: Option<&Arc<str>>, reason: &'static str, count: u64) {
        if count > 0 {
            self.traces_dropped
                .get_or_create(&DroppedLabels {
                    tenant: tenant.cloned(),
                    reason,
                })
                .inc_by(count);
        }
    }

    /// The text exposition of these metrics, then of `more` (per-tenant figures).
    pub fn render(&self, more: Option<&Registry>) -> String {
        let mut out = String::new();
        let encode = prometheus_client::encoding::prometheus_text::encode;
        if encode(&mut out, &self.registry).is_err() {
            tracing::warn!("metrics: could not encode the process's metrics");
        }
        if let Some(more) = more
            && encode(&mut out, more).is_err()
        {
            let _ = writeln!(out);
            tracing::warn!("metrics: could not encode the tenants' metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_are_counted_by_route_pattern_never_by_path() {
        let metrics = Metrics::default();
        for (route, status) in [
            (Some("/users/{id}"), 200),
            (Some("/users/{id}"), 200),
            (None, 404),
        ] {
            let record = Arc::new(Record::default());
            let guard = metrics.request_started();
            request_record::scope(record.clone(), async {
                if let Some(route) = route {
                    request_record::set_route(Arc::from(route));
                    request_record::add_cpu(Duration::from_millis(3));
                }
            })
            .await;
            metrics.request_ended("GET", status, Duration::from_millis(12), &record);
            drop(guard);
        }
        let text = metrics.render(None);
        for line in [
            r#"http_requests_total{method="GET",route="/users/{id}",status="200"} 2"#,
            r#"http_requests_total{method="GET",route="unmatched",status="404"} 1"#,
            r#"http_request_duration_seconds_bucket{method="GET",route="/users/{id}",le="0.025"} 2"#,
            r#"http_request_duration_seconds_count{method="GET",route="unmatched"} 1"#,
            "http_requests_in_progress 0",
            "filerouter_request_cpu_seconds_count 2",
            "# TYPE http_request_duration_seconds histogram",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        metrics.trace_taped(None);
        let tenant: Arc<str> = Arc::from("a");
        metrics.trace_kept(Some(&tenant), 300);
        metrics.trace_kept(Some(&tenant), 200);
        metrics.traces_dropped(Some(&tenant), "count", 2);
        metrics.traces_dropped(None, "bytes", 0);
        let text = metrics.render(None);
        for line in [
            "filerouter_traces_taped_total 1",
            r#"filerouter_traces_kept_total{tenant="a"} 2"#,
            r#"filerouter_trace_bytes_written_total{tenant="a"} 500"#,
            r#"filerouter_traces_dropped_total{tenant="a",reason="count"} 2"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!text.contains(r#"reason="bytes""#), "{text}");
        assert_eq!(
            method_label(&hyper::Method::from_bytes(b"BREW").unwrap()),
            "OTHER"
        );
    }
}
