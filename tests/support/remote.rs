//! Real local services for route code to call over outbound HTTP: an HTTP/1.1 server (plain, or
//! TLS with a test CA made by rcgen) on loopback, each connection on a thread of its own, and a
//! bare listener that counts the connections it was offered (one that must see none).
//!
//! The server's paths:
//! - `/json`: `{"method", "path", "query", "body_bytes", "headers"}` of the request.
//! - `/slow?ms=N`: the same after N ms.
//! - `/hang`: reads the request and never answers.
//! - `/huge?mb=N`: N MiB of `x`, chunked, as fast as the peer reads.
//! - `/redirect?to=URL`: 302 to URL.
//! - `/hold?ms=N`: like `/slow`, counting how many were held at once ([`Remote::most_held`]).

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread,
    time::Duration,
};

/// A test CA, and a server certificate it signed for `localhost` and 127.0.0.1.
pub struct TestCa {
    pub ca_pem: String,
    /// The server's certificate and key as PEM, for servers that read them from files.
    pub server_cert_pem: String,
    pub server_key_pem: String,
    server_cert: rustls::pki_types::CertificateDer<'static>,
    server_key: rustls::pki_types::PrivateKeyDer<'static>,
}

impl TestCa {
    pub fn new() -> TestCa {
        TestCa::for_names(&["localhost", "127.0.0.1"])
    }

    /// A test CA, and a server certificate it signed for `names` (host names or IP addresses).
    pub fn for_names(names: &[&str]) -> TestCa {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "filerouter test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let server_key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "localhost");
        let cert = params.signed_by(&server_key, &issuer).unwrap();
        TestCa {
            ca_pem: ca_cert.pem(),
            server_cert_pem: cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            server_cert: cert.der().clone(),
            server_key: rustls::pki_types::PrivateKeyDer::try_from(server_key.serialize_der())
                .unwrap(),
        }
    }

    /// The CA's certificate written to `dir/ca.pem`; its path.
    pub fn write_ca(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, &self.ca_pem).unwrap();
        path
    }

    fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![self.server_cert.clone()], self.server_key.clone_key())
            .unwrap();
        Arc::new(config)
    }
}

/// A running local service; stops accepting when dropped.
pub struct Remote {
    pub port: u16,
    held: Arc<AtomicUsize>,
    most_held: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Remote {
    /// Plain HTTP on 127.0.0.1.
    pub fn http() -> Remote {
        Remote::start(None)
    }

    /// HTTPS on 127.0.0.1 with `ca`'s server certificate.
    pub fn https(ca: &TestCa) -> Remote {
        Remote::start(Some(ca.server_config()))
    }

    fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Remote {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let held = Arc::new(AtomicUsize::new(0));
        let most_held = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, m, s) = (held.clone(), most_held.clone(), stop.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let (h, m, tls) = (h.clone(), m.clone(), tls.clone());
                thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                    match tls {
                        None => serve(stream, &h, &m),
                        Some(config) => {
                            let Ok(connection) = rustls::ServerConnection::new(config) else {
                                return;
                            };
                            serve(rustls::StreamOwned::new(connection, stream), &h, &m)
                        }
                    }
                });
            }
        });
        Remote {
            port,
            held,
            most_held,
            stop,
        }
    }

    /// The `/hold` requests held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// The most `/hold` requests held at once so far.
    pub fn most_held(&self) -> usize {
        self.most_held.load(Ordering::Relaxed)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One connection: requests until the peer closes it.
fn serve(stream: impl Read + Write, held: &AtomicUsize, most_held: &AtomicUsize) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let mut headers = Vec::new();
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_string());
                if name == "content-length" {
                    length = value.parse().unwrap_or(0);
                }
                if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                    chunked = true;
                }
                headers.push((name, value));
            }
        }
        let body_bytes = if chunked {
            read_chunked(&mut reader)
        } else {
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            body.len()
        };
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let param = |name: &str| -> Option<String> {
            query
                .split('&')
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| percent_decode(v))
        };
        let number = |name: &str| param(name).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let stream = reader.get_mut();
        let echo = serde_json::json!({
            "method": method,
            "path": path,
            "query": query,
            "body_bytes": body_bytes,
            "headers": headers.iter().map(|(n, v)| vec![n.clone(), v.clone()]).collect::<Vec<_>>(),
        })
        .to_string();
        let ok = match path {
            "/json" => respond(stream, 200, &[], echo.as_bytes()),
            "/slow" => {
                thread::sleep(Duration::from_millis(number("ms")));
                respond(stream, 200, &[], echo.as_bytes())
            }
            "/hold" => {
                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                most_held.fetch_max(now, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(number("ms")));
                held.fetch_sub(1, Ordering::SeqCst);
                respond(stream, 200, &[], echo.as_bytes())
            }
            "/hang" => {
                thread::sleep(Duration::from_secs(60));
                return;
            }
            "/huge" => huge(stream, number("mb")),
            "/coded" => {
                let coding = param("coding").unwrap_or_default();
                let (label, body) = encoded(&coding, echo.as_bytes());
                respond(stream, 200, &[("content-encoding", label)], &body)
            }
            "/bomb" => {
                let (_, body) = encoded("gzip", &vec![0u8; (number("mb") as usize) << 20]);
                respond(stream, 200, &[("content-encoding", "gzip")], &body)
            }
            "/redirect" => {
                let to = param("to").unwrap_or_default();
                respond(stream, 302, &[("location", &to)], b"")
            }
            _ => respond(stream, 404, &[], b"{\"detail\":\"Not Found\"}"),
        };
        if !ok {
            return;
        }
    }
}

fn read_chunked(reader: &mut impl BufRead) -> usize {
    let mut total = 0;
    loop {
        let mut size = String::new();
        if reader.read_line(&mut size).unwrap_or(0) == 0 {
            return total;
        }
        let size =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        let mut chunk = vec![0; size + 2];
        if reader.read_exact(&mut chunk).is_err() {
            return total;
        }
        total += size;
        if size == 0 {
            return total;
        }
    }
}

fn respond(stream: &mut impl Write, status: u16, headers: &[(&str, &str)], body: &[u8]) -> bool {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).is_ok()
        && stream.write_all(body).is_ok()
        && stream.flush().is_ok()
}

/// `body` encoded as `coding` says (`gzip`, `deflate`: zlib-wrapped, `raw-deflate`: without
/// the wrapper, as some servers send `deflate`; `broken-gzip`: labelled gzip but sent as it is,
/// so it does not decode; anything else: as it is), with the `content-encoding` label it is
/// sent under.
fn encoded<'a>(coding: &'a str, body: &[u8]) -> (&'a str, Vec<u8>) {
    use flate2::{
        Compression,
        write::{DeflateEncoder, GzEncoder, ZlibEncoder},
    };
    fn finish<W: Write>(mut encoder: W, body: &[u8], done: impl FnOnce(W) -> Vec<u8>) -> Vec<u8> {
        encoder.write_all(body).unwrap();
        done(encoder)
    }
    match coding {
        "gzip" => (
            "gzip",
            finish(GzEncoder::new(Vec::new(), Compression::best()), body, |e| {
                e.finish().unwrap()
            }),
        ),
        "deflate" => (
            "deflate",
            finish(
                ZlibEncoder::new(Vec::new(), Compression::best()),
                body,
                |e| e.finish().unwrap(),
            ),
        ),
        "raw-deflate" => (
            "deflate",
            finish(
                DeflateEncoder::new(Vec::new(), Compression::best()),
                body,
                |e| e.finish().unwrap(),
            ),
        ),
        "broken-gzip" => ("gzip", body.to_vec()),
        other => (other, body.to_vec()),
    }
}

fn huge(stream: &mut impl Write, mb: u64) -> bool {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    if stream.write_all(head.as_bytes()).is_err() {
        return false;
    }
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..mb * 16 {
        let ok = stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .and_then(|()| stream.write_all(&chunk))
            .and_then(|()| stream.write_all(b"\r\n"));
        if ok.is_err() {
            return false;
        }
    }
    stream.write_all(b"0\r\n\r\n").is_ok() && stream.flush().is_ok()
}

fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// A listener that must see no connection: it counts those it was offered, on 127.0.0.1 and,
/// where the machine has IPv6, on [::1] at the same port.
pub struct Tripwire {
    pub port: u16,
    listeners: Vec<TcpListener>,
}

impl Tripwire {
    pub fn new() -> Tripwire {
        let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        let mut listeners = vec![v4];
        if let Ok(v6) = TcpListener::bind(("::1", port)) {
            listeners.push(v6);
        }
        for listener in &listeners {
            listener.set_nonblocking(true).unwrap();
        }
        Tripwire { port, listeners }
    }

    /// The connections offered so far (each accepted and closed).
    pub fn connections(&self) -> usize {
        let mut count = 0;
        for listener in &self.listeners {
            while listener.accept().is_ok() {
                count += 1;
            }
        }
        count
    }
}
