//! Per-tenant request statistics, and their rendering in Prometheus' text format for `--admin`.
//!
//! Counted here: answers by status, request latency (p50 and p99 over a sliding window of one to
//! two minutes, from an HDR histogram), loads and refusals. The scheduler's own per-queue figures
//! (CPU time, queue depth, running, rejections) are read from it when rendering. Nothing here is
//! on a request's critical path beyond one short lock.

use std::{
    collections::BTreeMap,
    fmt::Write,
    sync::{Mutex, atomic::AtomicU64},
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;

/// How long one latency window lasts; quantiles cover the current and the previous window.
const WINDOW: Duration = Duration::from_secs(60);

/// One tenant's statistics; kept across reloads and reconfiguration of the tenant.
pub struct TenantMetrics {
    statuses: Mutex<BTreeMap<u16, u64>>,
    latency: Mutex<Windows>,
    pub loads: AtomicU64,
    pub load_failures: AtomicU64,
    /// Its route code's outbound HTTP calls (`crate::outbound`).
    pub outbound: std::sync::Arc<crate::outbound::Metrics>,
}

struct Windows {
    started: Instant,
    current: Histogram<u64>,
    previous: Histogram<u64>,
    /// Since the start, for `_count` and `_sum`.
    count: u64,
    sum_us: u64,
}

fn histogram() -> Histogram<u64> {
    // Microseconds from 1 µs to one hour, 2 significant digits: about 10 KiB.
    Histogram::new_with_bounds(1, 3_600_000_000, 2).unwrap_or_else(|_| {
        Histogram::new(2).unwrap_or_else(|_| unreachable!("2 significant digits is valid"))
    })
}

impl Default for TenantMetrics {
    fn default() -> Self {
        Self {
            statuses: Mutex::new(BTreeMap::new()),
            latency: Mutex::new(Windows {
                started: Instant::now(),
                current: histogram(),
                previous: histogram(),
                count: 0,
                sum_us: 0,
            }),
            loads: AtomicU64::new(0),
            load_failures: AtomicU64::new(0),
            outbound: Default::default(),
        }
    }
}

impl TenantMetrics {
    /// Count one answered request.
    pub fn record(&self, status: u16, elapsed: Duration) {
        *self
            .statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(status)
            .or_default() += 1;
        let us = u64::try_from(elapsed.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut windows = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        windows.rotate();
        windows.current.saturating_record(us);
        windows.count += 1;
        windows.sum_us = windows.sum_us.saturating_add(us);
    }

    /// Answers by status so far.
    pub fn statuses(&self) -> BTreeMap<u16, u64> {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// (p50, p99) over the recent window, in seconds, and (count, sum in seconds) since the start.
    pub fn latency(&self) -> (Option<(f64, f64)>, u64, f64) {
        let mut windows = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        windows.rotate();
        let mut both = windows.current.clone();
        let _ = both.add(&windows.previous);
        let quantiles = (!both.is_empty()).then(|| {
            (
                both.value_at_quantile(0.5) as f64 / 1e6,
                both.value_at_quantile(0.99) as f64 / 1e6,
            )
        });
        (quantiles, windows.count, windows.sum_us as f64 / 1e6)
    }
}

impl Windows {
    fn rotate(&mut self) {
        let age = self.started.elapsed();
        if age >= WINDOW * 2 {
            self.previous.reset();
            self.current.reset();
            self.started = Instant::now();
        } else if age >= WINDOW {
            std::mem::swap(&mut self.previous, &mut self.current);
            self.current.reset();
            self.started += WINDOW;
        }
    }
}

/// Builds the Prometheus text exposition: each metric family once, with HELP and TYPE.
#[derive(Default)]
pub struct Exposition {
    families: BTreeMap<&'static str, (&'static str, &'static str, String)>,
}

impl Exposition {
    /// Add one sample of family `name` (`kind`: counter, gauge, summary) with `labels`.
    pub fn sample(
        &mut self,
        name: &'static str,
        kind: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let family = self
            .families
            .entry(name)
            .or_insert_with(|| (kind, help, String::new()));
        let sample_name = name;
        let _ = write!(family.2, "{sample_name}");
        write_labels(&mut family.2, labels);
        let _ = writeln!(family.2, " {}", number(value));
    }

    /// Add a sample under a suffixed name of family `name` (`_count`, `_sum` of a summary).
    pub fn sample_suffixed(
        &mut self,
        name: &'static str,
        suffix: &str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        if let Some(family) = self.families.get_mut(name) {
            let _ = write!(family.2, "{name}{suffix}");
            write_labels(&mut family.2, labels);
            let _ = writeln!(family.2, " {}", number(value));
        }
    }

    pub fn render(self) -> String {
        let mut out = String::new();
        for (name, (kind, help, samples)) in self.families {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            out.push_str(&samples);
        }
        out
    }
}

fn write_labels(out: &mut String, labels: &[(&str, &str)]) {
    if labels.is_empty() {
        return;
    }
    out.push('{');
    for (i, (key, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let escaped = value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(out, "{key}=\"{escaped}\"");
    }
    out.push('}');
}

fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}
