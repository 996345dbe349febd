//! A real OTLP/HTTP receiver for the traces tests: a small hyper server on loopback that takes
//! `POST /v1/traces` (protobuf), decodes each export with the `opentelemetry-proto` crate's
//! prost types and keeps its spans, flattened, for the test to look at.

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use http_body_util::{BodyExt, Full};
use hyper::{server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{AnyValue, any_value},
};
use prost::Message;

use super::eventually;

/// One span as the receiver got it.
#[derive(Debug, Clone)]
pub struct Span {
    /// Hexadecimal, as in a `traceparent`.
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// OTLP's numbers: 1 internal, 2 server, 3 client.
    pub kind: i32,
    /// Every attribute's value as text (`7`, `true`, `text`).
    pub attributes: BTreeMap<String, String>,
    /// The status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
    /// The resource's `service.name`.
    pub service: String,
}

impl Span {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// The receiver; stops with the test process.
pub struct Receiver {
    pub port: u16,
    spans: Arc<Mutex<Vec<Span>>>,
    exports: Arc<Mutex<usize>>,
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let exports = Arc::new(Mutex::new(0));
        let (kept, counted) = (spans.clone(), exports.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let (kept, counted) = (kept.clone(), counted.clone());
                    let service =
                        service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                            let (kept, counted) = (kept.clone(), counted.clone());
                            async move {
                                let path = request.uri().path().to_string();
                                let body =
                                    request.into_body().collect().await.map(|b| b.to_bytes());
                                let status = match (path.as_str(), body) {
                                    ("/v1/traces", Ok(body)) => {
                                        match ExportTraceServiceRequest::decode(body) {
                                            Ok(export) => {
                                                kept.lock().unwrap().extend(flatten(export));
                                                *counted.lock().unwrap() += 1;
                                                200
                                            }
                                            Err(_) => 400,
                                        }
                                    }
                                    _ => 404,
                                };
                                let mut answer =
                                    hyper::Response::new(Full::new(bytes::Bytes::new()));
                                *answer.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                                answer.headers_mut().insert(
                                    hyper::header::CONTENT_TYPE,
                                    hyper::header::HeaderValue::from_static(
                                        "application/x-protobuf",
                                    ),
                                );
                                Ok::<_, Infallible>(answer)
                            }
                        });
                    tokio::spawn(async move {
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        Receiver {
            port,
            spans,
            exports,
        }
    }

    /// The endpoint for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The environment that makes a `run` export here, promptly.
    pub fn env(&self, service: &str) -> Vec<(String, String)> {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), self.endpoint()),
            ("OTEL_SERVICE_NAME".into(), service.into()),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "50".into()),
        ]
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// How many exports arrived.
    pub fn exports(&self) -> usize {
        *self.exports.lock().unwrap()
    }

    /// The spans, once `done` says they are all there (within `timeout`; else what came).
    pub fn wait_for(&self, timeout: Duration, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        eventually(timeout, || done(&self.spans()));
        self.spans()
    }
}

fn flatten(export: ExportTraceServiceRequest) -> Vec<Span> {
    let mut spans = Vec::new();
    for resource in export.resource_spans {
        let service = resource
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
            .and_then(|a| a.value.as_ref())
            .map(text)
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                spans.push(Span {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|a| {
                            (
                                a.key.clone(),
                                a.value.as_ref().map(text).unwrap_or_default(),
                            )
                        })
                        .collect(),
                    status: span.status.map_or(0, |s| s.code),
                    service: service.clone(),
                });
            }
        }
    }
    spans
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(any_value::Value::DoubleValue(x)) => x.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
