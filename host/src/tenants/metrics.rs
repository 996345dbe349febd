//! Per-tenant figures for `run --tenants --admin`, in the `prometheus-client` crate's types.
//!
//! Counted as requests end ([`TenantMetrics::record`]): answers by status and a histogram of
//! request latency, and, as they happen, loads and failed loads. Read at scrape time by
//! [`Scrape`], a collector: those, the scheduler's per-queue figures (CPU time, queue depth,
//! running, rejections), whether each tenant is loaded or refused, its outbound calls, and
//! the process-wide memory slot counts. Nothing here is on a request's critical path beyond
//! one read-locked map look-up and a few atomic additions. Not here: the process's HTTP and
//! sandbox metrics (`crate::metrics`), serving them (`crate::admin`).

use std::{
    collections::BTreeMap,
    sync::{Mutex, atomic::AtomicU64},
    time::Duration,
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric},
    metrics::{
        MetricType,
        counter::{ConstCounter, Counter},
        gauge::ConstGauge,
        histogram::Histogram,
    },
};

use super::Tenants;

/// Request latency buckets, in seconds (Python's Prometheus clients' defaults).
const LATENCY_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// One tenant's statistics; kept across reloads and reconfiguration of the tenant.
pub struct TenantMetrics {
    /// Answers by status: a handful of statuses, so a small locked map.
    statuses: Mutex<BTreeMap<u16, Counter>>,
    latency: Histogram,
    pub loads: AtomicU64,
    pub load_failures: AtomicU64,
    /// Its route code's outbound HTTP calls (`crate::outbound`).
    pub outbound: std::sync::Arc<crate::outbound::Metrics>,
}

impl Default for TenantMetrics {
    fn default() -> Self {
        Self {
            statuses: Mutex::new(BTreeMap::new()),
            latency: Histogram::new(LATENCY_BUCKETS),
            loads: AtomicU64::new(0),
            load_failures: AtomicU64::new(0),
            outbound: Default::default(),
        }
    }
}

impl TenantMetrics {
    /// Count one answered request.
    pub fn record(&self, status: u16, elapsed: Duration) {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(status)
            .or_default()
            .inc();
        self.latency.observe(elapsed.as_secs_f64());
    }

    /// Answers by status so far.
    pub fn statuses(&self) -> BTreeMap<u16, u64> {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(status, count)| (*status, count.get()))
            .collect()
    }
}

/// The tenants' figures, read when `/metrics` is scraped.
pub struct Scrape(pub Tenants);

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scrape")
    }
}

/// Writes one family after another: a descriptor, then its samples.
struct Families<'a, 'b> {
    encoder: &'a mut DescriptorEncoder<'b>,
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

impl Families<'_, '_> {
    /// Family `name` (without `_total`), of `kind`, with one sample per entry of `samples`.
    fn family<'s, M: EncodeMetric>(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        samples: impl IntoIterator<Item = (Labels<'s>, M)>,
    ) -> Result<(), std::fmt::Error> {
        let mut metric = self.encoder.encode_descriptor(name, help, None, kind)?;
        for (labels, value) in samples {
            value.encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn counters<'s, N: EncodeCounterValue + std::fmt::Debug + Send + Sync>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Labels<'s>, N)>,
    ) -> Result<(), std::fmt::Error> {
        self.family(
            name,
            help,
            MetricType::Counter,
            samples.into_iter().map(|(l, v)| (l, ConstCounter::new(v))),
        )
    }

    fn gauges<'s, N: EncodeGaugeValue + std::fmt::Debug + Send + Sync>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Labels<'s>, N)>,
    ) -> Result<(), std::fmt::Error> {
        self.family(
            name,
            help,
            MetricType::Gauge,
            samples.into_iter().map(|(l, v)| (l, ConstGauge::new(v))),
        )
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let all = self.0.all();
        let mut out = Families {
            encoder: &mut encoder,
        };
        out.gauges(
            "filerouter_tenants",
            "Tenants configured.",
            [(vec![], all.len() as u64)],
        )?;
        out.gauges(
            "filerouter_tenants_loaded",
            "Tenants loaded now.",
            [(vec![], all.iter().filter(|t| t.is_loaded()).count() as u64)],
        )?;
        let slots = self.0.slot_counts();
        out.counters(
            "filerouter_memory_slots_given",
            "Linear memories given to instances: from a new slot, from a free slot that held the tenant's image (warm), or from one switched from another tenant's.",
            [
                (vec![("slot", "created")], slots.created),
                (vec![("slot", "warm")], slots.warm),
                (vec![("slot", "switched")], slots.switched),
            ],
        )?;
        out.counters(
            "filerouter_memory_slot_switches_within_base",
            "Of the switched slots, those that went between layers of one base image: only the pages where the two images differ were copied.",
            [(vec![], slots.switched_within_base)],
        )?;
        out.counters(
            "filerouter_memory_slot_resets",
            "Memory slots reset after a call: written pages copied back from the image, or the image mapped afresh.",
            [
                (vec![("reset", "copied")], slots.copied),
                (vec![("reset", "remapped")], slots.remapped),
            ],
        )?;
        out.counters(
            "filerouter_memory_slot_pages_copied",
            "Pages copied back from images by memory resets.",
            [(vec![], slots.pages_copied)],
        )?;

        let statuses: Vec<(String, Vec<(String, u64)>)> = all
            .iter()
            .map(|t| {
                let by_status = t
                    .metrics
                    .statuses()
                    .into_iter()
                    .map(|(status, n)| (status.to_string(), n))
                    .collect();
                (t.name().to_string(), by_status)
            })
            .collect();
        out.counters(
            "filerouter_requests",
            "Requests answered, by tenant and status.",
            statuses.iter().flat_map(|(tenant, by_status)| {
                by_status.iter().map(move |(status, n)| {
                    (
                        vec![("tenant", tenant.as_str()), ("status", status.as_str())],
                        *n,
                    )
                })
            }),
        )?;
        out.family(
            "filerouter_request_duration_seconds",
            "Time to answer a request (to the response head), by tenant.",
            MetricType::Histogram,
            all.iter()
                .map(|t| (vec![("tenant", t.name())], t.metrics.latency.clone())),
        )?;
        let queues: Vec<_> = all.iter().map(|t| (t.name(), t.queue_stats())).collect();
        out.counters(
            "filerouter_tenant_cpu_seconds",
            "CPU time the tenant's requests ran in the sandbox.",
            queues
                .iter()
                .map(|(name, q)| (vec![("tenant", *name)], q.cpu.as_secs_f64())),
        )?;
        out.gauges(
            "filerouter_tenant_running",
            "The tenant's requests running in the sandbox now.",
            queues
                .iter()
                .map(|(name, q)| (vec![("tenant", *name)], q.running as u64)),
        )?;
        out.gauges(
            "filerouter_tenant_open_streams",
            "The tenant's streamed responses and WebSockets open now (each holds a sandbox instance; at most its max_streams).",
            all.iter()
                .map(|t| (vec![("tenant", t.name())], t.open_streams() as u64)),
        )?;
        out.gauges(
            "filerouter_tenant_queue_depth",
            "The tenant's requests waiting for a turn now.",
            queues
                .iter()
                .map(|(name, q)| (vec![("tenant", *name)], q.queued as u64)),
        )?;
        out.counters(
            "filerouter_tenant_rejected",
            "Requests turned away with 503 because the tenant's queue was full.",
            queues
                .iter()
                .map(|(name, q)| (vec![("tenant", *name)], q.rejected)),
        )?;
        out.gauges(
            "filerouter_tenant_loaded",
            "1 while the tenant is loaded.",
            all.iter()
                .map(|t| (vec![("tenant", t.name())], u64::from(t.is_loaded()))),
        )?;
        out.gauges(
            "filerouter_tenant_refused",
            "1 while the tenant is refused (its cache cannot be used, or its database is behind); it is tried again after a back-off.",
            all.iter().map(|t| {
                (
                    vec![("tenant", t.name())],
                    u64::from(t.refusal().is_some()),
                )
            }),
        )?;
        out.counters(
            "filerouter_tenant_loads",
            "Times the tenant was loaded from its cache.",
            all.iter()
                .map(|t| (vec![("tenant", t.name())], t.metrics.loads.load(Relaxed))),
        )?;
        out.counters(
            "filerouter_tenant_load_failures",
            "Loads that failed: a cache that cannot be used (missing, corrupt, tampered with, wrong key), a database behind its migrations, or a load that could not be done then (out of files or memory).",
            all.iter().map(|t| {
                (
                    vec![("tenant", t.name())],
                    t.metrics.load_failures.load(Relaxed),
                )
            }),
        )?;
        // Outbound calls: by how they ended, bytes received, time taken.
        let ended: Vec<(&str, Vec<(String, u64)>)> = all
            .iter()
            .map(|t| {
                let ended = t
                    .metrics
                    .outbound
                    .ended
                    .lock()
                    .map(|m| m.iter().map(|(k, v)| (k.to_string(), *v)).collect())
                    .unwrap_or_default();
                (t.name(), ended)
            })
            .collect();
        out.counters(
            "filerouter_tenant_outbound_calls",
            "The tenant's outbound HTTP calls by how they ended: the response's status, or refused, invalid, limit, timeout, network, or closed (dropped before its end by the guest or with its request).",
            ended.iter().flat_map(|(tenant, ended)| {
                ended.iter().map(move |(how, n)| {
                    (vec![("tenant", *tenant), ("status", how.as_str())], *n)
                })
            }),
        )?;
        out.counters(
            "filerouter_tenant_outbound_received_bytes",
            "Response body bytes the tenant's outbound calls received.",
            all.iter().map(|t| {
                (
                    vec![("tenant", t.name())],
                    t.metrics.outbound.received_bytes.load(Relaxed),
                )
            }),
        )?;
        out.counters(
            "filerouter_tenant_outbound_seconds",
            "Seconds the tenant's outbound calls took together, each from its start to its body's end (divide by the calls for the mean).",
            all.iter().map(|t| {
                (
                    vec![("tenant", t.name())],
                    t.metrics.outbound.duration_us.load(Relaxed) as f64 / 1e6,
                )
            }),
        )?;
        Ok(())
    }
}
