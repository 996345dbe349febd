//! The access line: one per request answered, at info level under the target `access`, in
//! the log's format ([`LogFormat`]): text (`GET /users/3 200 1.2ms route=/users/{id} cpu=0.8ms`)
//! or, with `--log-format json`, one JSON object with the fields `method`, `path` (without
//! the query, which may hold secrets), `route` (the pattern that matched, else `unmatched`),
//! `status`, `duration_ms`, `cpu_ms` (the guest's, 0 when the host answered alone),
//! `tenant` (empty for a single project) and `trace_id` (the request's trace, `crate::traces`:
//! its own while traces are exported, else the one a client's `traceparent` named, else empty).
//!
//! Written by the server once the response head is ready (`crate::server`). Not here: which
//! lines are kept (`crate::logging`'s filter), what the request matched and cost
//! (`crate::request_record`).

use std::{
    sync::atomic::{AtomicU8, Ordering::Relaxed},
    time::Duration,
};

use crate::{request_record::Record, traces::Id};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    // (Plain comments: doc comments here would turn `run --help` into clap's long form.)
    // Human-readable lines.
    #[default]
    Text,
    // One JSON object per line, for a log collector.
    Json,
}

static FORMAT: AtomicU8 = AtomicU8::new(0);

/// The format the subscriber was installed with (`crate::logging`).
pub fn set_format(format: LogFormat) {
    FORMAT.store(
        match format {
            LogFormat::Text => 0,
            LogFormat::Json => 1,
        },
        Relaxed,
    );
}

/// Log the access line of a request with `method` and `path`, answered with `status` after
/// `elapsed`, which matched and cost what `record` says; `trace_id` is the request's trace (`crate::traces`), if it has one.
pub fn write(
    method: &str,
    path: &str,
    status: u16,
    elapsed: Duration,
    record: &Record,
    trace_id: Option<Id>,
) {
    if !tracing::enabled!(target: "access", tracing::Level::INFO) {
        return;
    }
    let route = record.route();
    let tenant = record.tenant();
    let duration_ms = elapsed.as_secs_f64() * 1000.0;
    let cpu_ms = record.cpu().as_secs_f64() * 1000.0;
    if FORMAT.load(Relaxed) == 1 {
        tracing::info!(
            target: "access",
            method,
            path,
            route = &*route,
            status,
            duration_ms = round(duration_ms),
            cpu_ms = round(cpu_ms),
            tenant = tenant.as_deref().unwrap_or(""),
            trace_id = trace_id.map(|id| id.to_string()).unwrap_or_default(),
            "{method} {path} {status}"
        );
        return;
    }
    let tenant = tenant.map(|t| format!(" tenant={t}")).unwrap_or_default();
    let trace = trace_id.map(|t| format!(" trace={t}")).unwrap_or_default();
    tracing::info!(
        target: "access",
        "{method} {path} {status} {duration_ms:.1}ms route={route} cpu={cpu_ms:.1}ms{tenant}{trace}"
    );
}

/// Milliseconds to the microsecond.
fn round(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}
