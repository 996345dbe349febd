//! Outbound HTTP from route code (issue 29), against real local services (`support::remote`):
//! plain HTTP and HTTPS with a test CA given by `FILEROUTER_CA_FILE`. Every refused case must
//! raise the right exception with a message that says where to allow it, and reach nothing: a
//! tripwire listener at the refused address must see no connection.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{
    Project, Server,
    remote::{Remote, TestCa, Tripwire},
};

/// Route files that call out in every way a user would: `filerouter.http` async and sync,
/// streamed both ways, gathered, and `urllib.request`. Each answers what it got or the
/// exception's class and message.
const ROUTES: &[(&str, &str)] = &[
    (
        "routes/call/route.py",
        r#"
        from filerouter import http

        async def POST(request):
            spec = await request.json()
            # No "timeout": the call names none (the project's); null: None (no timeout of its own).
            options = {"timeout": spec["timeout"]} if "timeout" in spec else {}
            try:
                r = await http.request(
                    spec.get("method", "GET"), spec["url"], **options,
                    follow_redirects=spec.get("follow", False), content=spec.get("content"),
                    headers=spec.get("headers"),
                )
            except http.HTTPError as e:
                return {"error": type(e).__name__, "message": str(e)}
            try:
                parsed = r.json()
            except ValueError:
                parsed = None
            return {"status": r.status_code, "json": parsed, "bytes": len(r.content), "url": r.url}
        "#,
    ),
    (
        "routes/sync/route.py",
        r#"
        from filerouter import http

        def POST(request, url: str, chunks: int = 0):
            try:
                with http.Client(timeout=10) as client:
                    if chunks:
                        body = (b"y" * 1000 for _ in range(chunks))
                        r = client.post(url, content=body)
                    else:
                        r = client.get(url)
            except http.HTTPError as e:
                return {"error": type(e).__name__, "message": str(e)}
            return {"status": r.status_code, "json": r.json()}
        "#,
    ),
    (
        "routes/stream/route.py",
        r#"
        from filerouter import http

        async def GET(request, url: str, stop: int = 0):
            total = 0
            try:
                async with http.AsyncClient().stream("GET", url) as r:
                    async for chunk in r.aiter_bytes():
                        total += len(chunk)
                        if stop and total >= stop:
                            break
            except http.HTTPError as e:
                return {"error": type(e).__name__, "message": str(e), "bytes": total}
            return {"status": r.status_code, "bytes": total}
        "#,
    ),
    (
        "routes/gather/route.py",
        r#"
        import asyncio
        from filerouter import http

        async def GET(request, url: str, n: int = 3):
            async with http.AsyncClient() as client:
                responses = await asyncio.gather(*(client.get(url) for _ in range(n)),
                                                 return_exceptions=True)
            return [r.status_code if isinstance(r, http.Response) else type(r).__name__
                    for r in responses]
        "#,
    ),
    (
        "routes/urllib/route.py",
        r#"
        import json
        import urllib.error
        import urllib.request

        def GET(request, url: str):
            try:
                with urllib.request.urlopen(url) as r:
                    return {"status": r.status, "json": json.loads(r.read())}
            except urllib.error.HTTPError as e:
                return {"error": "HTTPError", "status": e.code}
            except urllib.error.URLError as e:
                return {"error": "URLError", "reason": type(e.reason).__name__,
                        "message": str(e.reason)}
        "#,
    ),
];

/// The routes with `config` as `config.py`.
fn project(config: &str) -> Project {
    let mut files: Vec<(&str, &str)> = ROUTES.to_vec();
    files.push(("config.py", config));
    Project::new(&files)
}

/// `config.py` allowing `entries`, with `extra` more keys of `outbound`.
fn allowing(entries: &[String], extra: &str) -> String {
    format!("outbound = {{\"allow\": {entries:?}, {extra}}}\n")
}

fn call(server: &Server, spec: Value) -> Value {
    let response = server
        .request("POST", "/call")
        .json(&spec)
        .timeout(Duration::from_secs(60))
        .send()
        .expect("POST /call");
    assert_eq!(response.status(), 200, "{}", server.log());
    support::json(response)
}

fn get(server: &Server, path: &str) -> Value {
    let response = server
        .request("GET", path)
        .timeout(Duration::from_secs(60))
        .send()
        .expect("GET");
    assert_eq!(response.status(), 200, "{path}: {}", server.log());
    support::json(response)
}

/// `text` percent-encoded for a query parameter.
fn q(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[test]
fn a_route_calls_an_allowed_https_service_and_gets_its_json() {
    let ca = TestCa::new();
    let remote = Remote::https(&ca);
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca(dir.path());
    let p = remote.port;
    let project = project(&allowing(
        &[
            format!("https://localhost:{p}"),
            format!("https://127.0.0.1:{p}"),
        ],
        "",
    ));
    let server = Server::dev_with_env(
        &project,
        &[("FILEROUTER_CA_FILE", ca_file.to_str().unwrap())],
    );
    for url in [
        format!("https://localhost:{p}/json?a=1"),
        format!("https://127.0.0.1:{p}/json?a=1"),
    ] {
        let got = call(
            &server,
            json!({"url": url, "method": "POST", "content": "hello"}),
        );
        assert_eq!(got["status"], 200, "{got}");
        assert_eq!(got["json"]["path"], "/json", "{got}");
        assert_eq!(got["json"]["query"], "a=1", "{got}");
        assert_eq!(got["json"]["method"], "POST", "{got}");
        assert_eq!(got["json"]["body_bytes"], 5, "{got}");
    }
    // The same through urllib, and with the sync client.
    let got = get(
        &server,
        &format!("/urllib?url={}", q(&format!("https://localhost:{p}/json"))),
    );
    assert_eq!(got["status"], 200, "{got}");
    assert_eq!(got["json"]["path"], "/json", "{got}");
    let response = server
        .request(
            "POST",
            &format!("/sync?url={}", q(&format!("https://localhost:{p}/json"))),
        )
        .send()
        .unwrap();
    let got = support::json(response);
    assert_eq!(got["status"], 200, "{got}");
    // The dev log shows each call: method, origin, status, time; never the path or query.
    assert!(
        support::eventually(Duration::from_secs(20), || server
            .log_shows(&format!("outbound POST https://localhost:{p} 200"))),
        "{}",
        server.log()
    );
    assert!(!server.log().contains("/json?a=1"), "{}", server.log());
}

#[test]
fn https_to_a_server_the_roots_do_not_trust_fails_saying_so() {
    let ca = TestCa::new();
    let remote = Remote::https(&ca);
    let p = remote.port;
    let project = project(&allowing(&[format!("https://localhost:{p}")], ""));
    // No FILEROUTER_CA_FILE: the test CA is not trusted.
    let server = Server::dev(&project);
    let got = call(
        &server,
        json!({"url": format!("https://localhost:{p}/json")}),
    );
    assert_eq!(got["error"], "ConnectError", "{got}");
    assert!(got["message"].as_str().unwrap().contains("TLS"), "{got}");
}

#[test]
fn nothing_is_allowed_by_default_and_nothing_is_reached() {
    let wire = Tripwire::new();
    let project = project("");
    let server = Server::dev(&project);
    let url = format!("http://127.0.0.1:{}/x", wire.port);
    let got = call(&server, json!({"url": url}));
    assert_eq!(got["error"], "OutboundRefused", "{got}");
    let message = got["message"].as_str().unwrap();
    assert!(
        message.contains("nothing is allowed by default"),
        "{message}"
    );
    assert!(
        message.contains(&format!("\"http://127.0.0.1:{}\"", wire.port))
            && message.contains("outbound[\"allow\"] in config.py"),
        "{message}"
    );
    let got = get(&server, &format!("/urllib?url={}", q(&url)));
    assert_eq!(got["error"], "URLError", "{got}");
    assert_eq!(got["reason"], "OutboundRefused", "{got}");
    assert_eq!(wire.connections(), 0);
}

#[test]
fn every_ssrf_shape_is_refused_and_reaches_nothing() {
    let wire = Tripwire::new();
    let p = wire.port;
    // Everything at the tripwire's port (and at port 80) is allowed by origin: only the
    // address check stands between these URLs and loopback.
    let project = project(&allowing(
        &[format!("http://*:{p}"), "http://*".to_string()],
        "",
    ));
    let server = Server::dev(&project);
    for (url, says) in [
        (format!("http://127.0.0.1:{p}/"), "a loopback address"),
        (format!("http://[::1]:{p}/"), "a loopback address"),
        (format!("http://0.0.0.0:{p}/"), "an unspecified address"),
        (
            format!("http://2130706433:{p}/"),
            "127.0.0.1 is a loopback address",
        ),
        (
            format!("http://0177.0.0.1:{p}/"),
            "127.0.0.1 is a loopback address",
        ),
        (
            format!("http://0x7f.1:{p}/"),
            "127.0.0.1 is a loopback address",
        ),
        (
            format!("http://[::ffff:127.0.0.1]:{p}/"),
            "127.0.0.1 is a loopback address",
        ),
        (format!("http://localhost:{p}/"), "localhost resolved to"),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "a link-local address",
        ),
        ("http://10.0.0.1/".to_string(), "a private address"),
        ("http://[fe80::1]/".to_string(), "a link-local address"),
        ("http://224.0.0.1/".to_string(), "a multicast address"),
    ] {
        let got = call(&server, json!({"url": url}));
        assert_eq!(got["error"], "OutboundRefused", "{url}: {got}");
        let message = got["message"].as_str().unwrap();
        assert!(message.contains(says), "{url}: {message}");
        assert!(
            message.contains("only an entry naming that address"),
            "{url}: {message}"
        );
    }
    // urllib goes through the same gate.
    let got = get(
        &server,
        &format!("/urllib?url={}", q(&format!("http://localhost:{p}/"))),
    );
    assert_eq!(got["reason"], "OutboundRefused", "{got}");
    assert_eq!(wire.connections(), 0, "{}", server.log());
}

#[test]
fn headers_that_would_smuggle_or_override_are_refused_before_sending() {
    let wire = Tripwire::new();
    let project = project(&allowing(&[format!("http://127.0.0.1:{}", wire.port)], ""));
    let server = Server::dev(&project);
    let url = format!("http://127.0.0.1:{}/", wire.port);
    for headers in [
        json!({"x-a": "1\r\nHost: evil.test"}),
        json!({"bad name": "1"}),
        json!({"Host": "evil.test"}),
        json!({"Content-Length": "0"}),
        json!({"Transfer-Encoding": "chunked"}),
    ] {
        let got = call(&server, json!({"url": url, "headers": headers}));
        assert_eq!(got["error"], "InvalidURL", "{headers}: {got}");
    }
    let got = call(&server, json!({"url": url, "method": "GET\r\nX"}));
    assert_eq!(got["error"], "InvalidURL", "{got}");
    assert_eq!(wire.connections(), 0);
}

#[test]
fn wildcards_match_the_names_below_and_not_the_name_itself() {
    let project = project(&allowing(&["https://*.example.com".to_string()], ""));
    let server = Server::dev(&project);
    for url in [
        "https://example.com/",
        "https://evilexample.com/",
        "https://example.com.evil.net/",
        "http://api.example.com/",
        "https://api.example.com:8443/",
    ] {
        let got = call(&server, json!({"url": url}));
        assert_eq!(got["error"], "OutboundRefused", "{url}: {got}");
        assert!(
            got["message"]
                .as_str()
                .unwrap()
                .contains("no entry of config.py's outbound"),
            "{got}"
        );
    }
    // A name below passes the origin check: whatever the network then says (this machine may
    // have no DNS), the gate did not refuse it.
    let got = call(
        &server,
        json!({"url": "https://api.example.com/", "timeout": 3}),
    );
    assert_ne!(got["error"], "OutboundRefused", "{got}");
}

#[test]
fn redirects_are_checked_hop_by_hop() {
    let remote = Remote::http();
    let wire = Tripwire::new();
    let (a, w) = (remote.port, wire.port);
    let project = project(&allowing(&[format!("http://127.0.0.1:{a}")], ""));
    let server = Server::dev(&project);
    // To an allowed origin: followed when asked (httpx's default is not to follow).
    let hop = format!(
        "http://127.0.0.1:{a}/redirect?to={}",
        q(&format!("http://127.0.0.1:{a}/json"))
    );
    let got = call(&server, json!({"url": hop}));
    assert_eq!(got["status"], 302, "{got}");
    let got = call(&server, json!({"url": hop, "follow": true}));
    assert_eq!(got["status"], 200, "{got}");
    assert_eq!(got["url"], format!("http://127.0.0.1:{a}/json"), "{got}");
    // To a refused one: the hop raises, and nothing reaches it.
    let away = format!(
        "http://127.0.0.1:{a}/redirect?to={}",
        q(&format!("http://127.0.0.1:{w}/secret"))
    );
    let got = call(&server, json!({"url": away, "follow": true}));
    assert_eq!(got["error"], "OutboundRefused", "{got}");
    assert!(
        got["message"]
            .as_str()
            .unwrap()
            .contains(&format!("127.0.0.1:{w}")),
        "{got}"
    );
    let got = get(&server, &format!("/urllib?url={}", q(&away)));
    assert_eq!(got["reason"], "OutboundRefused", "{got}");
    // A redirect to cloud metadata is refused as well.
    let metadata = format!(
        "http://127.0.0.1:{a}/redirect?to={}",
        q("http://169.254.169.254/latest/meta-data/")
    );
    let got = call(&server, json!({"url": metadata, "follow": true}));
    assert_eq!(got["error"], "OutboundRefused", "{got}");
    assert_eq!(wire.connections(), 0);
}

#[test]
fn slow_silent_and_huge_services_hit_their_bounds_and_the_server_goes_on() {
    let remote = Remote::http();
    let a = remote.port;
    let project = project(&allowing(
        &[format!("http://127.0.0.1:{a}")],
        "\"max_received_mb\": 1",
    ));
    let server = Server::dev(&project);
    let got = call(
        &server,
        json!({"url": format!("http://127.0.0.1:{a}/slow?ms=3000"), "timeout": 0.5}),
    );
    assert_eq!(got["error"], "TimeoutException", "{got}");
    let got = call(
        &server,
        json!({"url": format!("http://127.0.0.1:{a}/hang"), "timeout": 0.5}),
    );
    assert_eq!(got["error"], "TimeoutException", "{got}");
    assert!(got["message"].as_str().unwrap().contains("0.5s"), "{got}");
    let got = call(
        &server,
        json!({"url": format!("http://127.0.0.1:{a}/huge?mb=64")}),
    );
    assert_eq!(got["error"], "LimitExceeded", "{got}");
    assert!(
        got["message"].as_str().unwrap().contains("max_received_mb"),
        "{got}"
    );
    let got = get(
        &server,
        &format!(
            "/stream?url={}",
            q(&format!("http://127.0.0.1:{a}/huge?mb=64"))
        ),
    );
    assert_eq!(got["error"], "LimitExceeded", "{got}");
    let received = got["bytes"].as_u64().unwrap();
    assert!(received <= 1024 * 1024, "{got}");
    // Under the bound, a streamed body arrives whole.
    let got = get(
        &server,
        &format!(
            "/stream?url={}",
            q(&format!("http://127.0.0.1:{a}/huge?mb=0"))
        ),
    );
    assert_eq!(got["status"], 200, "{got}");
    let got = call(
        &server,
        json!({"url": format!("http://127.0.0.1:{a}/json")}),
    );
    assert_eq!(got["status"], 200, "{got}");
}

#[test]
fn gathered_calls_run_at_once_and_per_request_bounds_hold() {
    let remote = Remote::http();
    let a = remote.port;
    let project = project(&allowing(
        &[format!("http://127.0.0.1:{a}")],
        "\"max_calls\": 4, \"max_concurrent\": 3",
    ));
    let server = Server::dev(&project);
    let hold = q(&format!("http://127.0.0.1:{a}/hold?ms=1000"));
    let got = get(&server, &format!("/gather?url={hold}&n=3"));
    assert_eq!(got, json!([200, 200, 200]), "{}", server.log());
    assert_eq!(
        remote.most_held(),
        3,
        "the three calls were not made at once"
    );
    // A fourth call at once is over max_concurrent; five calls are over max_calls.
    let got = get(&server, &format!("/gather?url={hold}&n=4"));
    let statuses = got.as_array().unwrap();
    assert_eq!(
        statuses.iter().filter(|s| **s == json!(200)).count(),
        3,
        "{got}"
    );
    assert!(statuses.contains(&json!("LimitExceeded")), "{got}");
    let json_url = q(&format!("http://127.0.0.1:{a}/json"));
    let got = get(&server, &format!("/gather?url={json_url}&n=5"));
    assert!(
        got.as_array().unwrap().contains(&json!("LimitExceeded")),
        "{got}"
    );
}

#[test]
fn a_call_without_a_timeout_has_the_projects_and_none_means_the_wall_time() {
    let remote = Remote::http();
    let a = remote.port;
    let config = format!(
        "{}sandbox = {{\"wall_s\": 20}}\n",
        allowing(&[format!("http://127.0.0.1:{a}")], "\"timeout_s\": 0.5")
    );
    let project = project(&config);
    let server = Server::dev(&project);
    let slow = format!("http://127.0.0.1:{a}/slow?ms=1500");
    // No timeout named: config.py's outbound["timeout_s"].
    let got = call(&server, json!({"url": slow}));
    assert_eq!(got["error"], "TimeoutException", "{got}");
    assert!(got["message"].as_str().unwrap().contains("0.5s"), "{got}");
    let got = get(&server, &format!("/urllib?url={}", q(&slow)));
    assert_eq!(got["reason"], "TimeoutException", "{got}");
    // timeout=None: none of its own, only what is left of wall_s.
    let got = call(&server, json!({"url": slow, "timeout": null}));
    assert_eq!(got["status"], 200, "{got}");
    // A timeout named: that one.
    let got = call(&server, json!({"url": slow, "timeout": 5}));
    assert_eq!(got["status"], 200, "{got}");
}

#[test]
fn waiting_on_the_network_counts_against_wall_time_not_cpu() {
    let remote = Remote::http();
    let a = remote.port;
    // 50 ms of CPU, 20 s of wall time: a 1.5 s wait would be 30 times the CPU limit.
    let config = format!(
        "{}sandbox = {{\"cpu_ms\": 50, \"wall_s\": 20}}\n",
        allowing(&[format!("http://127.0.0.1:{a}")], "")
    );
    let project = project(&config);
    let server = Server::dev(&project);
    let got = call(
        &server,
        json!({"url": format!("http://127.0.0.1:{a}/slow?ms=1500")}),
    );
    assert_eq!(got["status"], 200, "{got}\n{}", server.log());
}

#[test]
fn a_streamed_request_body_arrives_whole() {
    let remote = Remote::http();
    let a = remote.port;
    let project = project(&allowing(&[format!("http://127.0.0.1:{a}")], ""));
    let server = Server::dev(&project);
    let url = q(&format!("http://127.0.0.1:{a}/json"));
    let response = server
        .request("POST", &format!("/sync?url={url}&chunks=300"))
        .send()
        .unwrap();
    let got = support::json(response);
    assert_eq!(got["json"]["body_bytes"], 300_000, "{got}");
    assert_eq!(got["json"]["method"], "POST", "{got}");
}

#[test]
fn a_bad_entry_is_a_config_error_with_its_line() {
    let project = project("# payments\noutbound = {\"allow\": [\"api.stripe.com\"]}\n");
    let (code, stdout, stderr) =
        support::run_with_env(&["build", "--project", "."], project.path(), &[]);
    assert_ne!(code, 0, "{stdout}{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains("api.stripe.com") && all.contains("http://"),
        "{all}"
    );
    assert!(
        all.contains("line 2") || all.contains("config.py:2"),
        "{all}"
    );
}

/// POST /call as tenant `host`.
fn call_as(server: &Server, host: &str, spec: Value) -> Value {
    let response = support::admin::client(Duration::from_secs(60))
        .post(server.url("/call"))
        .header("host", host)
        .json(&spec)
        .send()
        .expect("POST /call");
    assert_eq!(response.status(), 200, "{}", server.log());
    support::json(response)
}

#[test]
fn a_tenant_cannot_use_another_tenants_allowance() {
    let (for_a, for_b) = (Remote::http(), Remote::http());
    let (a_origin, b_origin) = (
        format!("http://127.0.0.1:{}", for_a.port),
        format!("http://127.0.0.1:{}", for_b.port),
    );
    // Both projects ask for both services; the operator gives each tenant its own.
    let config = allowing(&[a_origin.clone(), b_origin.clone()], "");
    let (a, b) = (project(&config), project(&config));
    a.build();
    b.build();
    let site = support::admin::Site::new(
        &[("a", a.path()), ("b", b.path())],
        &format!(
            r#"
            [tenant.a]
            hosts = ["a.test"]
            project = "a"
            outbound = ["{a_origin}"]
            outbound_connections = 1

            [tenant.b]
            hosts = ["b.test"]
            project = "b"
            outbound = ["{b_origin}"]
            "#
        ),
    );
    let server = site.start(None, &[]);
    let got = call_as(
        &server,
        "b.test",
        json!({"url": format!("{a_origin}/json")}),
    );
    assert_eq!(got["error"], "OutboundRefused", "{got}");
    let message = got["message"].as_str().unwrap();
    assert!(
        message.contains("[tenant.b]") && message.contains("can only narrow"),
        "{message}"
    );
    let got = call_as(
        &server,
        "b.test",
        json!({"url": format!("{b_origin}/json")}),
    );
    assert_eq!(got["status"], 200, "{got}");
    let got = call_as(
        &server,
        "a.test",
        json!({"url": format!("{a_origin}/json")}),
    );
    assert_eq!(got["status"], 200, "{got}");

    // Tenant a has one outbound connection: while one request holds it, another's call waits
    // for it no longer than its timeout. The second call starts once the service holds the
    // first (not after a fixed time: on a busy machine the first may not have called yet).
    let holder = std::thread::scope(|s| {
        let holder = s.spawn(|| {
            call_as(
                &server,
                "a.test",
                json!({"url": format!("{a_origin}/hold?ms=4000")}),
            )
        });
        assert!(
            support::eventually(Duration::from_secs(30), || for_a.held() == 1),
            "the first call never reached the service: {}",
            server.log()
        );
        let got = call_as(
            &server,
            "a.test",
            json!({"url": format!("{a_origin}/json"), "timeout": 0.5}),
        );
        assert_eq!(got["error"], "LimitExceeded", "{got}");
        assert!(
            got["message"]
                .as_str()
                .unwrap()
                .contains("all 1 of the project's outbound connections"),
            "{got}"
        );
        holder.join().unwrap()
    });
    assert_eq!(holder["status"], 200, "{holder}");
    // A call the guest closes before its body ended is counted as closed.
    let huge = q(&format!("{a_origin}/huge?mb=8"));
    let (status, body) =
        support::admin::get(&server, "a.test", &format!("/stream?url={huge}&stop=1"))
            .expect("GET /stream");
    assert_eq!(status, 200, "{body}");

    // The admin metrics count each tenant's calls by how they ended.
    let admin = support::admin::admin_address(&server);
    let text = support::admin::client(Duration::from_secs(10))
        .get(format!("http://{admin}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let metric = support::admin::metric;
    assert_eq!(
        metric(
            &text,
            "filerouter_tenant_outbound_calls_total{tenant=\"b\",status=\"refused\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "filerouter_tenant_outbound_calls_total{tenant=\"b\",status=\"200\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "filerouter_tenant_outbound_calls_total{tenant=\"a\",status=\"limit\"}"
        ),
        1.0
    );
    assert!(
        metric(
            &text,
            "filerouter_tenant_outbound_received_bytes_total{tenant=\"a\"}"
        ) > 0.0
    );
    assert!(!text.contains("/slow"), "paths are never labels:\n{text}");
    // The call dropped with its request counts as closed (its task may take a moment to end).
    let closed = "filerouter_tenant_outbound_calls_total{tenant=\"a\",status=\"closed\"} 1";
    assert!(
        support::eventually(Duration::from_secs(20), || {
            support::admin::client(Duration::from_secs(10))
                .get(format!("http://{admin}/metrics"))
                .send()
                .ok()
                .and_then(|r| r.text().ok())
                .is_some_and(|text| text.contains(closed))
        }),
        "no {closed} in the metrics"
    );
}

#[test]
fn a_broken_ca_file_stops_the_start_and_says_why() {
    let project = project("");
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    for (file, says) in [
        (dir.path().join("missing.pem"), "missing.pem"),
        (not_pem.clone(), "no PEM certificate"),
    ] {
        let output = std::process::Command::new("timeout")
            .arg("30")
            .arg(support::binary())
            .arg("dev")
            .current_dir(project.path())
            .env("FILEROUTER_CA_FILE", &file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("FILEROUTER_CA_FILE") && stderr.contains(says),
            "{stderr}"
        );
    }
}

#[test]
fn dev_applies_an_edited_allow_list_at_once() {
    let remote = Remote::http();
    let a = remote.port;
    let project = project("");
    let server = Server::dev(&project);
    let url = format!("http://127.0.0.1:{a}/json");
    assert_eq!(
        call(&server, json!({"url": url}))["error"],
        "OutboundRefused"
    );
    project.write(
        "config.py",
        &allowing(&[format!("http://127.0.0.1:{a}")], ""),
    );
    assert!(
        support::eventually(Duration::from_secs(20), || {
            call(&server, json!({"url": url}))["status"] == 200
        }),
        "{}",
        server.log()
    );
    project.write("config.py", "");
    assert!(
        support::eventually(Duration::from_secs(20), || {
            call(&server, json!({"url": url}))["error"] == "OutboundRefused"
        }),
        "{}",
        server.log()
    );
}

#[test]
fn calls_waiting_on_the_network_leave_the_guest_threads_to_other_requests() {
    let remote = Remote::http();
    let a = remote.port;
    // As many waiting calls as this machine has guest threads (one per core).
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let config = format!(
        "{}server = {{\"workers\": {}}}\n",
        allowing(&[format!("http://127.0.0.1:{a}")], ""),
        threads + 2
    );
    let project = project(&config);
    let server = Server::dev(&project);
    let slow = json!({"url": format!("http://127.0.0.1:{a}/hold?ms=4000")});
    std::thread::scope(|s| {
        let waiting: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| call(&server, slow.clone())))
            .collect();
        assert!(
            support::eventually(Duration::from_secs(10), || remote.held() == threads),
            "{}",
            server.log()
        );
        // Every guest thread's request waits on the network: another request still runs now.
        let got = call(&server, json!({"url": "http://127.0.0.1:1/"}));
        assert_eq!(got["error"], "OutboundRefused", "{got}");
        assert_eq!(
            remote.held(),
            threads,
            "the other request waited for the held calls"
        );
        for waiting in waiting {
            assert_eq!(waiting.join().unwrap()["status"], 200);
        }
    });
}

/// `filerouter.http` gives gzip and deflate bodies decoded, as httpx does: `.content`,
/// `.text`, `.json()` and `aiter_bytes()` decoded, `headers` still showing the encoding, and
/// `accept-encoding: gzip, deflate` sent unless the call sets its own. `br` (which needs native
/// code) comes as it is. urllib gives the body as it came, as urllib does. A gzip bomb (64 MiB
/// of zeros in 64 KiB) ends with `LimitExceeded` at the request's received-bytes bound, and
/// the server goes on serving.
#[test]
fn gzip_and_deflate_bodies_are_decoded_as_httpx_does_and_bombs_meet_the_bound() {
    let remote = Remote::http();
    let a = remote.port;
    let project = project(&allowing(
        &[format!("http://127.0.0.1:{a}")],
        "\"max_received_mb\": 1",
    ));
    project.write(
        "routes/coded/route.py",
        r#"
        import urllib.request
        from filerouter import http

        async def GET(request, url: str, accept: str = "", raw: bool = False):
            if raw:
                with urllib.request.urlopen(url) as r:
                    body = r.read()
                    return {"encoding": r.headers.get("content-encoding"), "magic": body[:2].hex()}
            headers = {"accept-encoding": accept} if accept else None
            try:
                r = await http.get(url, headers=headers)
            except http.HTTPError as e:
                return {"error": type(e).__name__, "message": str(e)}
            try:
                parsed = r.json()
            except ValueError:
                parsed = None
            streamed = 0
            async with http.AsyncClient().stream("GET", url, headers=headers) as s:
                async for chunk in s.aiter_bytes():
                    streamed += len(chunk)
            return {
                "json": parsed,
                "text_is_json": r.text.startswith("{"),
                "bytes": len(r.content),
                "streamed": streamed,
                "encoding": r.headers.get("content-encoding"),
            }
        "#,
    );
    let server = Server::dev(&project);
    let coded = |coding: &str, extra: &str| {
        get(
            &server,
            &format!(
                "/coded?url={}{extra}",
                q(&format!("http://127.0.0.1:{a}/coded?coding={coding}"))
            ),
        )
    };
    for (coding, label) in [
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("raw-deflate", "deflate"),
    ] {
        let got = coded(coding, "");
        assert_eq!(got["json"]["path"], "/coded", "{coding}: {got}");
        assert_eq!(got["text_is_json"], true, "{coding}: {got}");
        assert_eq!(got["bytes"], got["streamed"], "{coding}: {got}");
        assert_eq!(got["encoding"], label, "{coding}: {got}");
        let sent: Vec<Value> = got["json"]["headers"].as_array().unwrap().clone();
        assert!(
            sent.contains(&json!(["accept-encoding", "gzip, deflate"])),
            "{coding}: {got}"
        );
    }
    // The call's own accept-encoding is sent as it is.
    let got = coded("gzip", "&accept=identity");
    let sent: Vec<Value> = got["json"]["headers"].as_array().unwrap().clone();
    assert!(
        sent.contains(&json!(["accept-encoding", "identity"])),
        "{got}"
    );
    // A body labelled gzip that is not: httpx's DecodingError, saying why.
    let got = coded("broken-gzip", "");
    assert_eq!(got["error"], "DecodingError", "{got}");
    assert!(got["message"].as_str().unwrap().contains("gzip"), "{got}");
    // br needs native code: the body comes as it was sent (here, JSON labelled br).
    let got = coded("br", "");
    assert_eq!(got["encoding"], "br", "{got}");
    assert_eq!(got["json"]["path"], "/coded", "{got}");
    // urllib leaves it encoded, as urllib does.
    let got = coded("gzip", "&raw=true");
    assert_eq!(got["encoding"], "gzip", "{got}");
    assert_eq!(got["magic"], "1f8b", "{got}");

    let bomb = get(
        &server,
        &format!(
            "/coded?url={}",
            q(&format!("http://127.0.0.1:{a}/bomb?mb=64"))
        ),
    );
    assert_eq!(bomb["error"], "LimitExceeded", "{bomb}");
    assert!(
        bomb["message"]
            .as_str()
            .unwrap()
            .contains("decoded (content-encoding) to more than 1048576 bytes"),
        "{bomb}"
    );
    let streamed = get(
        &server,
        &format!(
            "/stream?url={}",
            q(&format!("http://127.0.0.1:{a}/bomb?mb=64"))
        ),
    );
    assert_eq!(streamed["error"], "LimitExceeded", "{streamed}");
    assert!(
        streamed["bytes"].as_u64().unwrap() <= 1024 * 1024,
        "{streamed}"
    );
    // Under the bound, a compressed body arrives whole; the server goes on.
    let small = get(
        &server,
        &format!(
            "/stream?url={}",
            q(&format!("http://127.0.0.1:{a}/bomb?mb=0"))
        ),
    );
    assert_eq!(small["status"], 200, "{small}");
    let got = coded("gzip", "");
    assert_eq!(got["json"]["path"], "/coded", "{got}");
}
