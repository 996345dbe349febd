//! OpenTelemetry traces (issue 45): a span for each request, its wait in the scheduler's queue,
//! its guest call, each SQL statement, kv call and outbound call it makes, and the spans route
//! code opens itself (`filerouter.trace`), exported over OTLP/HTTP (protobuf) with the SDK's
//! batch processor.
//!
//! Off unless the environment asks ([`init`]): `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_TRACES_EXPORTER=otlp`; `OTEL_SDK_DISABLED=true`
//! and `OTEL_TRACES_EXPORTER=none` keep it off. `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`, `OTEL_BSP_*` and the exporter's
//! `OTEL_EXPORTER_OTLP_*` are read by the SDK itself. While off, a request costs one check of
//! a static and a task-local holding `None`; nothing is allocated for it. A client's W3C
//! `traceparent` is read either way, so that the access line carries its trace id.
//!
//! The server opens a [`RequestTrace`] per request and runs the request inside it
//! ([`scope`]); the sandbox asks [`current`] for the parent of its queue wait and guest call,
//! and hands the call's [`CallTrace`] to the host services, which open their spans under it
//! (the guest's thread is not the request's task, so no task-local reaches them).
//!
//! Not here: what a span says about a service beyond its name and attributes (the services'
//! modules), metrics (`crate::metrics`), the log (`crate::logging`). This module imports
//! nothing of the crate, so that every layer may use it.

use std::{
    borrow::Cow,
    sync::OnceLock,
    time::{Duration, SystemTime},
};

use opentelemetry::{
    Context, KeyValue, Value,
    trace::{
        Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
        TraceState, Tracer as _,
    },
};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};

pub use opentelemetry::trace::TraceId as Id;

/// The tracer, once [`init`] found tracing asked for.
static TRACER: OnceLock<(SdkTracerProvider, SdkTracer)> = OnceLock::new();

/// Most spans route code may open in one call; past it, `start` answers 0 (no span).
pub const MAX_GUEST_SPANS: usize = 1000;
/// Longest span name or attribute key route code may give, in bytes; longer ones are cut.
const MAX_NAME_BYTES: usize = 256;
/// Longest attribute text route code (or a SQL statement) may give, in bytes; longer is cut.
const MAX_TEXT_BYTES: usize = 4096;

/// Why traces could not be set up as the environment asks.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    /// `OTEL_TRACES_EXPORTER` names an exporter other than `otlp` or `none`.
    #[error("OTEL_TRACES_EXPORTER={0}: filerouter exports traces with `otlp` only (or `none`)")]
    Exporter(String),
    /// `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` asks for gRPC or JSON.
    #[error("{0}={1}: filerouter exports OTLP over HTTP with protobuf only (http/protobuf)")]
    Protocol(&'static str, String),
    /// The exporter could not be built (a malformed endpoint, say).
    #[error("the OTLP trace exporter: {0}")]
    Build(String),
}

/// Whether the environment asks for traces.
fn wanted(var: impl Fn(&str) -> Option<String>) -> Result<bool, TracesError> {
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    match var("OTEL_TRACES_EXPORTER").map(|v| v.trim().to_ascii_lowercase()) {
        Some(v) if v == "none" => return Ok(false),
        Some(v) if v == "otlp" => {}
        Some(v) if v.is_empty() => {}
        Some(v) => return Err(TracesError::Exporter(v)),
        None => {}
    }
    let explicit = var("OTEL_TRACES_EXPORTER").is_some_and(|v| !v.trim().is_empty());
    let endpoint = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|name| var(name).is_some_and(|v| !v.trim().is_empty()));
    if !explicit && !endpoint {
        return Ok(false);
    }
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = var(name).filter(|p| !p.trim().is_empty()) {
            if protocol.trim() != "http/protobuf" {
                return Err(TracesError::Protocol(name, protocol));
            }
            break;
        }
    }
    Ok(true)
}

/// Set up the exporter if the environment asks for traces; returns whether it did. Call it
/// once, before the async runtime starts (the exporter's HTTP client has a runtime of its
/// own, on the batch processor's thread).
pub fn init() -> Result<bool, TracesError> {
    if TRACER.get().is_some() {
        return Ok(true);
    }
    if !wanted(|name| std::env::var(name).ok())? {
        return Ok(false);
    }
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()
        .map_err(|e| TracesError::Build(e.to_string()))?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    if !named {
        resource = resource.with_service_name("filerouter");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    use opentelemetry::trace::TracerProvider as _;
    let tracer = provider.tracer("filerouter");
    let _ = TRACER.set((provider, tracer));
    Ok(true)
}

/// Export what is left and stop the exporter (on the way out, after the server drained). Not
/// on an async thread: it waits for the export, up to `timeout`.
pub fn shutdown(timeout: Duration) {
    if let Some((provider, _)) = TRACER.get()
        && let Err(e) = provider.shutdown_with_timeout(timeout)
    {
        tracing::warn!("traces: the last export failed: {e}");
    }
}

/// Whether spans are being exported.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get().map(|(_, tracer)| tracer)
}

/// A request's trace: its server span while tracing is on, else just the trace id a client's
/// `traceparent` named (for the access line).
pub enum RequestTrace {
    /// The request's span, in the context its children are opened under.
    Exported { context: Context, method: String },
    /// Tracing is off; the client's trace id.
    Named(TraceId),
}

impl RequestTrace {
    /// The trace for a request with `method` and `headers`: `None` while tracing is off and
    /// no valid `traceparent` came.
    pub fn start(method: &str, headers: &hyper::HeaderMap) -> Option<RequestTrace> {
        let incoming = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_traceparent);
        let Some(tracer) = tracer() else {
            return incoming.map(|parent| RequestTrace::Named(parent.trace_id()));
        };
        let parent = match incoming {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::new(),
        };
        let span = tracer
            .span_builder(method.to_string())
            .with_kind(SpanKind::Server)
            .with_attributes([KeyValue::new("http.request.method", method.to_string())])
            .start_with_context(tracer, &parent);
        Some(RequestTrace::Exported {
            context: parent.with_span(span),
            method: method.to_string(),
        })
    }

    /// The trace's id.
    pub fn trace_id(&self) -> TraceId {
        match self {
            RequestTrace::Exported { context, .. } => context.span().span_context().trace_id(),
            RequestTrace::Named(id) => *id,
        }
    }

    /// End the request's span: answered with `status`, matched `route` (the pattern), for
    /// `tenant`.
    pub fn finish(self, status: u16, route: &str, tenant: Option<&str>) {
        let RequestTrace::Exported { context, method } = self else {
            return;
        };
        let span = context.span();
        span.update_name(format!("{method} {route}"));
        span.set_attribute(KeyValue::new("http.route", route.to_string()));
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if let Some(tenant) = tenant {
            span.set_attribute(KeyValue::new("filerouter.tenant", tenant.to_string()));
        }
        if status >= 500 {
            span.set_status(Status::error(status.to_string()));
        }
        span.end();
    }
}

/// A W3C `traceparent` (`00-<trace id>-<parent id>-<flags>`), as a remote parent; `None` when
/// malformed, of version `ff`, or with an all-zero id (the standard says to ignore it then).
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    // Version 00 has exactly four fields; a later version may add more.
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & 1),
        true,
        TraceState::default(),
    ))
}

/// The `traceparent` header that names `context`'s span as the parent.
fn traceparent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

tokio::task_local! {
    static CURRENT: Option<Context>;
}

/// Run `future` (one request) inside `trace`: [`current`] answers its context there.
pub async fn scope<F: Future>(trace: Option<&RequestTrace>, future: F) -> F::Output {
    let context = match trace {
        Some(RequestTrace::Exported { context, .. }) => Some(context.clone()),
        _ => None,
    };
    CURRENT.scope(context, future).await
}

/// The context of the request this task answers, while tracing is on.
pub fn current() -> Option<Context> {
    CURRENT.try_with(|c| c.clone()).ok().flatten()
}

/// Record a span that already happened: `name` under `parent`, from `start` to `end`.
pub fn record(parent: &Context, name: &'static str, start: SystemTime, end: SystemTime) {
    if let Some(tracer) = tracer() {
        let mut span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .start_with_context(tracer, parent);
        span.end_with_timestamp(end);
    }
}

/// A span open until it is dropped (or ended), with its context for children.
pub struct Active {
    context: Context,
}

impl Active {
    fn open(
        parent: &Context,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
    ) -> Option<Active> {
        let tracer = tracer()?;
        let span: Span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(tracer, parent);
        Some(Active {
            context: parent.with_span(span),
        })
    }

    /// Add an attribute.
    pub fn set(&self, key: &'static str, value: impl Into<Value>) {
        self.context.span().set_attribute(KeyValue::new(key, value));
    }

    /// Mark the span failed, with `message`.
    pub fn fail(&self, message: impl Into<Cow<'static, str>>) {
        self.context.span().set_status(Status::error(message));
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.context.span().end();
    }
}

/// The spans of one guest call: the call's own, and under it those the host services and
/// route code open. Held by the call's state; dropping it ends every span still open.
pub struct CallTrace {
    call: Active,
    /// Route code's spans by their number less one (`start`'s answer); `None` once ended.
    guest: Vec<Option<Active>>,
    /// Open outbound calls' client spans, by the call's number.
    outbound: Vec<(u32, Active)>,
}

impl CallTrace {
    /// The span of a guest call under `parent`; `None` while tracing is off.
    pub fn start(parent: &Context, purpose: &'static str) -> Option<CallTrace> {
        let call = Active::open(
            parent,
            "guest call",
            SpanKind::Internal,
            vec![KeyValue::new("filerouter.call", purpose)],
        )?;
        Some(CallTrace {
            call,
            guest: Vec::new(),
            outbound: Vec::new(),
        })
    }

    /// The span of one SQL statement (`statement`, without its parameters) on `system`
    /// (`sqlite`, `postgresql`).
    pub fn statement(&self, system: &'static str, statement: &str) -> Option<Active> {
        let operation = statement
            .split_whitespace()
            .next()
            .unwrap_or("SQL")
            .to_ascii_uppercase();
        let operation = cut(&operation, 32).to_string();
        Active::open(
            &self.call.context,
            operation.clone(),
            SpanKind::Client,
            vec![
                KeyValue::new("db.system", system),
                KeyValue::new("db.operation", operation),
                KeyValue::new("db.statement", cut(statement, MAX_TEXT_BYTES).to_string()),
            ],
        )
    }

    /// The span of one kv call (`get`, `set`, ...) on the project's store.
    pub fn kv(&self, operation: &'static str) -> Option<Active> {
        Active::open(
            &self.call.context,
            format!("kv {operation}"),
            SpanKind::Client,
            vec![
                KeyValue::new("db.system", "filerouter.kv"),
                KeyValue::new("db.operation", operation),
            ],
        )
    }

    /// Open the client span of an outbound call (`method` to `url`, whose query is left out)
    /// and give the `traceparent` header to send with it.
    pub fn outbound_start(&self, method: &str, url: &str) -> Option<(Active, String)> {
        let without_query = url.split(['?', '#']).next().unwrap_or(url);
        let span = Active::open(
            &self.call.context,
            method.to_string(),
            SpanKind::Client,
            vec![
                KeyValue::new("http.request.method", method.to_string()),
                KeyValue::new("url.full", cut(without_query, MAX_TEXT_BYTES).to_string()),
            ],
        )?;
        let header = traceparent(span.context.span().span_context());
        Some((span, header))
    }

    /// Keep an outbound call's span until its head arrives or the call closes.
    pub fn outbound_opened(&mut self, call: u32, span: Active) {
        self.outbound.push((call, span));
    }

    /// The outbound call's head came (`Ok(status)`) or it failed: its span ends.
    pub fn outbound_answered(&mut self, call: u32, answer: Result<u16, &str>) {
        if let Some(at) = self.outbound.iter().position(|(n, _)| *n == call) {
            let (_, span) = self.outbound.swap_remove(at);
            match answer {
                Ok(status) => {
                    span.set("http.response.status_code", i64::from(status));
                    if status >= 500 {
                        span.fail(status.to_string());
                    }
                }
                Err(message) => span.fail(cut(message, MAX_TEXT_BYTES).to_string()),
            }
        }
    }

    /// The outbound call closed (before its head, or after): its span ends if still open.
    pub fn outbound_closed(&mut self, call: u32) {
        self.outbound.retain(|(n, _)| *n != call);
    }

    /// Route code opens a span `name` under `parent` (a number this returned) or the call;
    /// the span's number, or 0 when no more may be opened.
    pub fn guest_start(
        &mut self,
        name: &str,
        parent: Option<u32>,
        attributes: Vec<(String, Value)>,
    ) -> u32 {
        if self.guest.len() >= MAX_GUEST_SPANS {
            return 0;
        }
        let under = parent
            .and_then(|n| self.guest.get(n.checked_sub(1)? as usize))
            .and_then(Option::as_ref)
            .map_or(&self.call.context, |span| &span.context);
        let attributes = attributes
            .into_iter()
            .map(|(key, value)| {
                KeyValue::new(cut(&key, MAX_NAME_BYTES).to_string(), bounded(value))
            })
            .collect();
        let Some(span) = Active::open(
            under,
            cut(name, MAX_NAME_BYTES).to_string(),
            SpanKind::Internal,
            attributes,
        ) else {
            return 0;
        };
        self.guest.push(Some(span));
        u32::try_from(self.guest.len()).unwrap_or(0)
    }

    /// Route code sets an attribute on its open span `span`; ignored for any other number.
    pub fn guest_set(&mut self, span: u32, key: &str, value: Value) {
        if let Some(Some(open)) = span.checked_sub(1).and_then(|n| self.guest.get(n as usize)) {
            open.context.span().set_attribute(KeyValue::new(
                cut(key, MAX_NAME_BYTES).to_string(),
                bounded(value),
            ));
        }
    }

    /// Route code ends its span `span`, failed with `error` if it raised.
    pub fn guest_end(&mut self, span: u32, error: Option<&str>) {
        if let Some(slot) = span
            .checked_sub(1)
            .and_then(|n| self.guest.get_mut(n as usize))
            && let Some(open) = slot.take()
            && let Some(error) = error
        {
            open.fail(cut(error, MAX_TEXT_BYTES).to_string());
        }
    }
}

/// A value route code gave, its text cut to [`MAX_TEXT_BYTES`].
fn bounded(value: Value) -> Value {
    match value {
        Value::String(s) if s.as_str().len() > MAX_TEXT_BYTES => {
            Value::from(cut(s.as_str(), MAX_TEXT_BYTES).to_string())
        }
        other => other,
    }
}

/// `text`'s first `max` bytes at most, cut at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_read_as_the_standard_says() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = parse_traceparent(good).unwrap();
        assert_eq!(
            parsed.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(parsed.span_id().to_string(), "00f067aa0ba902b7");
        assert!(parsed.is_sampled() && parsed.is_remote());
        assert_eq!(traceparent(&parsed), good);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
        // A later version may carry more fields.
        assert!(
            parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x")
                .is_some()
        );
    }

    #[test]
    fn the_environment_turns_traces_on_and_off() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!wanted(env(&[])).unwrap());
        assert!(wanted(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])).unwrap());
        assert!(
            wanted(env(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c/v1/traces"
            )]))
            .unwrap()
        );
        assert!(wanted(env(&[("OTEL_TRACES_EXPORTER", "otlp")])).unwrap());
        assert!(
            !wanted(env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_SDK_DISABLED", "TRUE")
            ]))
            .unwrap()
        );
        assert!(
            !wanted(env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_TRACES_EXPORTER", "none")
            ]))
            .unwrap()
        );
        assert!(wanted(env(&[("OTEL_TRACES_EXPORTER", "zipkin")])).is_err());
        assert!(
            wanted(env(&[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            ]))
            .is_err()
        );
    }

    #[test]
    fn cut_keeps_characters_whole() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("abc", 10), "abc");
    }
}
