//! Traces (issue 45, point 3): `run` with the `OTEL_*` variables exports its spans over
//! OTLP/HTTP to a real receiver (`support::otlp`, which decodes them with opentelemetry-proto):
//! the request's server span continuing the client's `traceparent`, its queue wait and guest
//! call, each SQL statement, kv call and outbound call under the call (the outbound request
//! carrying a `traceparent` that names its client span), and the route's own spans
//! (`filerouter.trace`) with their attributes. The access line names the trace.

use std::time::Duration;

use crate::support::{
    self, Project, Server, otlp::Receiver, otlp::Span, remote::Remote, run_with_env,
};

/// The client's trace: the server's span must continue it.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// A route that uses SQL, kv, an outbound call and spans of its own.
fn project(remote_port: u16) -> Project {
    let route = r#"
        import sqlite3
        from filerouter import http, kv, trace

        def GET(request, id: int):
            with trace.span("load", user_id=id, plan="pro") as span:
                conn = sqlite3.connect("app.db")
                (n,) = conn.execute("SELECT ? + 1", (id,)).fetchone()
                kv.set(f"k{id}", n)
                got = kv.get(f"k{id}")
                with trace.span("inner") as inner:
                    inner.set_attribute("ok", True)
                span.set_attribute("n", n)
            with http.Client(timeout=10) as client:
                echo = client.get("http://127.0.0.1:PORT/json").json()
            sent = dict((name, value) for name, value in echo["headers"])
            return {"n": n, "kv": got, "traceparent": sent.get("traceparent")}
        "#
    .replace("PORT", &remote_port.to_string());
    Project::dedented(&[
        (
            "config.py",
            &format!("outbound = {{\"allow\": [\"http://127.0.0.1:{remote_port}\"]}}\n"),
        ),
        ("routes/work/[id]/route.py", &route),
    ])
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one span {name:?} in {spans:#?}");
    found[0]
}

#[test]
fn a_request_is_one_trace_from_the_client_through_sql_kv_outbound_and_the_routes_spans() {
    let remote = Remote::http();
    let project = project(remote.port);
    let (code, stdout, stderr) = run_with_env(&["build", "--project", "."], project.path(), &[]);
    assert_eq!(code, 0, "build:\n{stdout}\n{stderr}");
    let receiver = Receiver::start();
    let env = receiver.env("traces-test");
    let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let server = Server::start(
        &[
            "run",
            "--project",
            project.path().to_str().unwrap(),
            "--log-format",
            "json",
        ],
        &env,
        Duration::from_secs(120),
    );

    let response = server
        .request("GET", "/work/7")
        .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200, "{}", server.log());
    let body = support::json(response);
    assert_eq!(body["n"], 8, "{body}");
    assert_eq!(body["kv"], 8, "{body}");

    let spans = receiver.wait_for(Duration::from_secs(10), |spans| {
        spans.iter().any(|s| s.kind == 2) && spans.iter().any(|s| s.name == "guest call")
    });
    let ours: Vec<Span> = spans
        .iter()
        .filter(|s| s.trace_id == CLIENT_TRACE)
        .cloned()
        .collect();
    assert!(ours.iter().all(|s| s.service == "traces-test"), "{ours:#?}");

    // The server span continues the client's trace, under the client's span.
    let server_span = ours
        .iter()
        .find(|s| s.kind == 2)
        .unwrap_or_else(|| panic!("no server span in {spans:#?}"));
    assert_eq!(server_span.name, "GET /work/{id}", "{server_span:#?}");
    assert_eq!(server_span.parent_span_id, CLIENT_SPAN);
    assert_eq!(server_span.attribute("http.request.method"), Some("GET"));
    assert_eq!(server_span.attribute("http.route"), Some("/work/{id}"));
    assert_eq!(
        server_span.attribute("http.response.status_code"),
        Some("200")
    );

    // Its queue wait and its guest call; under the call, the statements, kv and outbound
    // calls, and the route's outer span.
    let call = one(&ours, "guest call");
    assert_eq!(call.parent_span_id, server_span.span_id);
    assert_eq!(call.attribute("filerouter.call"), Some("request"));
    assert_eq!(one(&ours, "queue wait").parent_span_id, server_span.span_id);
    let select = one(&ours, "SELECT");
    assert_eq!(select.parent_span_id, call.span_id);
    assert_eq!(select.kind, 3);
    assert_eq!(select.attribute("db.system"), Some("sqlite"));
    assert_eq!(select.attribute("db.statement"), Some("SELECT ? + 1"));
    for kv in ["kv set", "kv get"] {
        let span = one(&ours, kv);
        assert_eq!(span.parent_span_id, call.span_id, "{span:#?}");
        assert_eq!(span.attribute("db.system"), Some("filerouter.kv"));
    }
    let outbound = ours
        .iter()
        .find(|s| s.kind == 3 && s.name == "GET")
        .unwrap_or_else(|| panic!("no outbound span in {ours:#?}"));
    assert_eq!(outbound.parent_span_id, call.span_id);
    assert_eq!(
        outbound.attribute("url.full").map(|u| u.ends_with("/json")),
        Some(true)
    );
    assert_eq!(outbound.attribute("http.response.status_code"), Some("200"));
    // The outbound request carried a traceparent naming that client span.
    assert_eq!(
        body["traceparent"],
        format!("00-{CLIENT_TRACE}-{}-01", outbound.span_id),
        "{body}"
    );

    // The route's own spans, nested, with their attributes.
    let load = one(&ours, "load");
    assert_eq!(load.parent_span_id, call.span_id);
    assert_eq!(load.attribute("user_id"), Some("7"));
    assert_eq!(load.attribute("plan"), Some("pro"));
    assert_eq!(load.attribute("n"), Some("8"));
    let inner = one(&ours, "inner");
    assert_eq!(inner.parent_span_id, load.span_id);
    assert_eq!(inner.attribute("ok"), Some("true"));

    // The access line names the trace.
    assert!(
        server.log_shows(&format!(r#""trace_id":"{CLIENT_TRACE}""#)),
        "{}",
        server.log()
    );

    // Without a traceparent: a trace of its own, in the access line too.
    assert_eq!(server.get("/work/1").status(), 200);
    let spans = receiver.wait_for(Duration::from_secs(10), |spans| {
        spans
            .iter()
            .any(|s| s.kind == 2 && s.trace_id != CLIENT_TRACE)
    });
    let fresh = spans
        .iter()
        .find(|s| s.kind == 2 && s.trace_id != CLIENT_TRACE)
        .unwrap_or_else(|| panic!("no second server span in {spans:#?}"));
    assert_eq!(fresh.parent_span_id, "");
    assert!(
        server.log_shows(&format!(r#""trace_id":"{}""#, fresh.trace_id)),
        "{}",
        server.log()
    );
}
