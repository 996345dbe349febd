//! Outbound HTTP from route code: the gate every call passes, and the calls of one request.
//!
//! Three lifetimes, three types:
//!
//! - **Once per project** (per tenant under `run --tenants`), a [`Gate`]: the [`policy`]'s
//!   rules, the per-request [`Bounds`], the tenant's connections ([`Bounds::connections`] at
//!   once) and its [`Metrics`]. Kept by the sandbox; rebuilt when `config.py` or the tenants
//!   file changes (the metrics carry over).
//! - **Once per request**, a [`Session`] from [`Gate::session`]: the request's calls by number,
//!   how many it made and how many bytes they received. Dropping it (the request's call ends,
//!   however it ends) aborts every call still open.
//! - **Once per call**, a task running a [`client::Exchange`]: resolve, check, connect, send,
//!   receive into the call's [`client::Shared`] state, where the guest's `head`, `read` and
//!   `wait` (`wit/filerouter.wit`, `interface outbound`) find it.
//!
//! Every wait here is async: a guest waiting on the network holds no guest thread (the
//! scheduler runs other calls meanwhile), and the time counts against `wall_s`, not `cpu_ms`.
//! Each call is logged (method, origin, status, time, bytes; never headers, paths or bodies).
//!
//! Not here: the guest's side (`guest-python/filerouter/http.py`), the WIT adapter
//! (`crate::sandbox`'s services).

pub mod client;
pub mod decoding;
pub mod policy;

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use tokio::sync::{Notify, Semaphore, mpsc};

pub use client::{CA_FILE_VAR, check_ca_file};
pub use policy::{AllowList, Rules, Source};

use client::{Body, Exchange, Shared};
use policy::Target;

/// Why a call failed, as the guest's exception will say.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Limit(String),
    #[error("{0}")]
    Timeout(String),
    #[error("{0}")]
    Network(String),
    /// The body did not decode from its `content-encoding`.
    #[error("{0}")]
    Decoding(String),
}

/// The bounds of outbound calls: per request, and the tenant's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    /// Calls one request may make (each redirect hop is a call, and so is a refused one).
    pub calls: u32,
    /// Calls one request may have open at once.
    pub concurrent: u32,
    /// Bytes one request's calls may receive together (response bodies).
    pub received: u64,
    /// Connections the project (tenant) may have open at once, over all its requests.
    pub connections: u32,
    /// The timeout of a call that names none, each step (see `wit/filerouter.wit`).
    pub timeout: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            calls: 50,
            concurrent: 10,
            received: 16 * 1024 * 1024,
            connections: 100,
            timeout: Duration::from_secs(10),
        }
    }
}

/// A project's outbound statistics, for the admin metrics; kept across reloads.
#[derive(Default)]
pub struct Metrics {
    /// Calls by how they ended: the status code, or `refused`, `invalid`, `limit`, `timeout`,
    /// `network`, or `closed` (dropped before its end: closed by the guest, or its request
    /// ended).
    pub ended: Mutex<BTreeMap<String, u64>>,
    pub received_bytes: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub duration_us: AtomicU64,
    pub calls: AtomicU64,
}

impl Metrics {
    fn record(&self, ended: &str, received: u64, elapsed: Duration) {
        if let Ok(mut map) = self.ended.lock() {
            *map.entry(ended.to_string()).or_default() += 1;
        }
        self.received_bytes.fetch_add(received, Relaxed);
        self.duration_us
            .fetch_add(elapsed.as_micros().min(u64::MAX as u128) as u64, Relaxed);
        self.calls.fetch_add(1, Relaxed);
    }
}

/// What the operator's tenants file gives one tenant: the origins it may reach (its project
/// can only narrow them) and its connections at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorGrant {
    pub allow: AllowList,
    pub connections: Option<u32>,
}

/// One project's gate: its rules, bounds, connections and metrics.
pub struct Gate {
    rules: Arc<Rules>,
    bounds: Bounds,
    connections: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl Gate {
    pub fn new(rules: Rules, bounds: Bounds, metrics: Arc<Metrics>) -> Gate {
        let connections = Arc::new(Semaphore::new(bounds.connections as usize));
        Gate {
            rules: Arc::new(rules),
            bounds,
            connections,
            metrics,
        }
    }

    /// A gate that allows nothing (the build, the server's own calls).
    pub fn closed() -> Gate {
        Gate::new(Rules::none(), Bounds::default(), Arc::default())
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The calls of one request, which must end by `deadline` (its `wall_s`).
    pub fn session(self: &Arc<Self>, deadline: Instant) -> Session {
        Session {
            gate: self.clone(),
            deadline,
            calls: HashMap::new(),
            next: 1,
            made: 0,
            received: Arc::new(AtomicU64::new(0)),
            decoded: Arc::new(AtomicU64::new(0)),
            news: Arc::new(Notify::new()),
        }
    }
}

/// One call of a request, as its session holds it.
struct Call {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    /// The rest of the request body, while more is to come.
    body: Option<mpsc::Sender<Bytes>>,
    timeout: Duration,
}

impl Drop for Call {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The outbound calls of one request (see the module's doc).
pub struct Session {
    gate: Arc<Gate>,
    deadline: Instant,
    calls: HashMap<u32, Call>,
    next: u32,
    made: u32,
    received: Arc<AtomicU64>,
    /// The bytes the calls' decoded bodies came to, against the same bound.
    decoded: Arc<AtomicU64>,
    news: Arc<Notify>,
}

impl Session {
    /// Let the calls last until `deadline` instead (a request whose response streams lasts as
    /// long as its stream may).
    pub fn extend_deadline(&mut self, deadline: Instant) {
        self.deadline = self.deadline.max(deadline);
    }
}

/// What `start` is asked for (the WIT record's fields).
pub struct Request {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub timeout_s: f64,
    /// Whether the body is given decoded from its `content-encoding` (`decoding`).
    pub decode: bool,
}

/// Headers the host sets itself.
const HOST_HEADERS: [&str; 5] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
];

impl Session {
    /// Check the call and start its exchange; its number.
    pub fn start(&mut self, request: Request, body: Vec<u8>, more: bool) -> Result<u32, CallError> {
        let started = Instant::now();
        let checked = self.check(&request);
        // A refused or malformed call counts as made too, so that a loop of them ends at
        // `max_calls` (and its log lines with it).
        if !matches!(checked, Err(CallError::Limit(_))) {
            self.made += 1;
        }
        let (method, target, timeout) = match checked {
            Ok(checked) => checked,
            Err(error) => {
                self.gate.metrics.record(kind(&error), 0, Duration::ZERO);
                tracing::info!(
                    "outbound {} {} refused: {error}",
                    request.method,
                    shown_origin(&request.url)
                );
                return Err(error);
            }
        };
        let number = self.next;
        self.next += 1;
        let shared = Arc::new(Shared {
            state: Mutex::new(Default::default()),
            room: Notify::new(),
            changed: Notify::new(),
            news: self.news.clone(),
        });
        let (body, sender) = if more {
            let (tx, rx) = mpsc::channel(2);
            (Body::Streamed(Bytes::from(body), rx), Some(tx))
        } else {
            (Body::Full(Bytes::from(body)), None)
        };
        let exchange = Exchange {
            method: method.clone(),
            target: target.clone(),
            headers: request.headers,
            body,
            timeout,
            rules: self.gate.rules.clone(),
            shared: shared.clone(),
            received: self.received.clone(),
            decoded: request.decode.then(|| self.decoded.clone()),
            max_received: self.gate.bounds.received,
        };
        let connections = self.gate.connections.clone();
        let limit = self.gate.bounds.connections;
        let metrics = self.gate.metrics.clone();
        let failed = shared.clone();
        let task = tokio::spawn(async move {
            let mut unended = Unended {
                metrics: metrics.clone(),
                started,
                armed: true,
            };
            let origin = target.origin.to_string();
            // The tenant's connections: wait for one as long as the call's timeout.
            let permit = match tokio::time::timeout(timeout, connections.acquire_owned()).await {
                Ok(Ok(permit)) => Some(permit),
                _ => None,
            };
            let outcome = match permit {
                Some(_permit) => exchange.run().await,
                None => {
                    let error = CallError::Limit(format!(
                        "all {limit} of the project's outbound connections stayed in use for {}",
                        client::seconds(timeout)
                    ));
                    failed.fail(error.clone());
                    client::Outcome {
                        status: None,
                        received: 0,
                        error: Some(error),
                    }
                }
            };
            let elapsed = started.elapsed();
            let ended = match (&outcome.error, outcome.status) {
                (Some(error), _) => kind(error).to_string(),
                (None, Some(status)) => status.to_string(),
                (None, None) => "network".to_string(),
            };
            metrics.record(&ended, outcome.received, elapsed);
            unended.armed = false;
            match (&outcome.error, outcome.status) {
                (None, Some(status)) => tracing::info!(
                    "outbound {method} {origin} {status} in {} ms, {} bytes",
                    elapsed.as_millis(),
                    outcome.received
                ),
                (Some(error), status) => tracing::info!(
                    "outbound {method} {origin} failed{} after {} ms: {error}",
                    status.map(|s| format!(" (status {s})")).unwrap_or_default(),
                    elapsed.as_millis()
                ),
                (None, None) => {}
            }
        });
        self.calls.insert(
            number,
            Call {
                shared,
                task,
                body: sender,
                timeout,
            },
        );
        Ok(number)
    }

    /// The method, target and timeout of a call the rules and bounds allow.
    fn check(&self, request: &Request) -> Result<(hyper::Method, Target, Duration), CallError> {
        let bounds = &self.gate.bounds;
        if self.made >= bounds.calls {
            return Err(CallError::Limit(format!(
                "this request made its {} outbound calls (outbound[\"max_calls\"] in config.py)",
                bounds.calls
            )));
        }
        if self.calls.len() >= bounds.concurrent as usize {
            return Err(CallError::Limit(format!(
                "this request has {} outbound calls open, its most at once \
                 (outbound[\"max_concurrent\"] in config.py; close responses it is done with)",
                bounds.concurrent
            )));
        }
        let method = request.method.as_str();
        if method.is_empty() || method.len() > 32 {
            return Err(CallError::Invalid(format!(
                "{method:?} is not an HTTP method"
            )));
        }
        let method = hyper::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .map_err(|_| CallError::Invalid(format!("{method:?} is not an HTTP method")))?;
        for (name, value) in &request.headers {
            let lower = name.to_ascii_lowercase();
            if HOST_HEADERS.contains(&lower.as_str()) {
                return Err(CallError::Invalid(format!(
                    "the {name} header is the host's to set"
                )));
            }
            if hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err()
                || hyper::header::HeaderValue::from_str(value).is_err()
            {
                return Err(CallError::Invalid(format!(
                    "the header {name:?} is not a valid HTTP header (name or value)"
                )));
            }
        }
        let target = Target::parse(&request.url).map_err(CallError::Invalid)?;
        self.gate
            .rules
            .check_origin(&target.origin)
            .map_err(CallError::Refused)?;
        let left = self.deadline.saturating_duration_since(Instant::now());
        // Infinity: no timeout of the call's own; 0 (or anything else not positive): the
        // project's.
        let asked = match request.timeout_s {
            t if t > 0.0 => Duration::try_from_secs_f64(t).unwrap_or(left),
            _ => bounds.timeout,
        };
        Ok((method, target, asked.min(left)))
    }

    /// Send more of call `number`'s body.
    pub async fn write(&mut self, number: u32, body: Vec<u8>, more: bool) -> Result<(), CallError> {
        let call = self.call(number)?;
        let timeout = call.timeout;
        let Some(sender) = call.body.clone() else {
            return Err(CallError::Invalid(
                "the request body was already sent whole".into(),
            ));
        };
        if !more {
            call.body = None;
        }
        if body.is_empty() {
            return Ok(());
        }
        match tokio::time::timeout(timeout, sender.send(Bytes::from(body))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(self.ended_early(number)),
            Err(_) => Err(CallError::Timeout(format!(
                "the peer took no request body for {}",
                client::seconds(timeout)
            ))),
        }
    }

    /// Why call `number` stopped taking its body: its error, else that it answered first.
    fn ended_early(&self, number: u32) -> CallError {
        let error = self.calls.get(&number).and_then(|call| {
            let state = call.shared.state.lock().ok()?;
            match (&state.head, &state.end) {
                (Some(Err(e)), _) | (_, Some(Err(e))) => Some(e.clone()),
                _ => None,
            }
        });
        error.unwrap_or_else(|| {
            CallError::Network("the peer stopped reading the request body".into())
        })
    }

    /// Of `numbers`, those with news; waits up to `timeout` (none: until one has).
    pub async fn wait(&mut self, numbers: &[u32], timeout: Option<Duration>) -> Vec<u32> {
        let until = timeout.map(|t| Instant::now() + t);
        loop {
            let news = self.news.notified();
            let ready: Vec<u32> = numbers
                .iter()
                .copied()
                .filter(|n| match self.calls.get(n) {
                    // An unknown or closed call has news: `head` or `read` says so at once.
                    None => true,
                    Some(call) => call
                        .shared
                        .state
                        .lock()
                        .map(|s| s.has_news())
                        .unwrap_or(true),
                })
                .collect();
            if !ready.is_empty() || numbers.is_empty() && until.is_none() {
                return ready;
            }
            match until {
                None => news.await,
                Some(until) => {
                    if tokio::time::timeout_at(until.into(), news).await.is_err() {
                        return Vec::new();
                    }
                }
            }
        }
    }

    /// Call `number`'s response head, waiting for it.
    pub async fn head(&mut self, number: u32) -> Result<client::Head, CallError> {
        let shared = self.call(number)?.shared.clone();
        loop {
            let changed = shared.changed.notified();
            {
                let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(head) = &state.head {
                    let head = head.clone();
                    state.head_taken = true;
                    return head;
                }
            }
            changed.await;
        }
    }

    /// Up to `max` bytes of call `number`'s body, waiting for some; empty at its end.
    pub async fn read(&mut self, number: u32, max: usize) -> Result<Vec<u8>, CallError> {
        let shared = self.call(number)?.shared.clone();
        loop {
            let changed = shared.changed.notified();
            {
                let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(Err(e)) = &state.head {
                    return Err(e.clone());
                }
                if let Some(mut chunk) = state.chunks.pop_front() {
                    if chunk.len() > max.max(1) {
                        let rest = chunk.split_off(max.max(1));
                        state.chunks.push_front(rest);
                    }
                    state.buffered -= chunk.len();
                    drop(state);
                    shared.room.notify_one();
                    return Ok(chunk.to_vec());
                }
                match &state.end {
                    Some(Ok(())) => return Ok(Vec::new()),
                    Some(Err(e)) => return Err(e.clone()),
                    None => {}
                }
            }
            changed.await;
        }
    }

    /// Drop call `number` (its connection closes).
    pub fn close(&mut self, number: u32) {
        self.calls.remove(&number);
    }

    fn call(&mut self, number: u32) -> Result<&mut Call, CallError> {
        self.calls
            .get_mut(&number)
            .ok_or_else(|| CallError::Invalid(format!("outbound call {number} is closed")))
    }
}

/// Counts a call whose task was dropped before it ended (the guest closed it, or its request
/// ended) as `closed`, so that every call started is counted once.
struct Unended {
    metrics: Arc<Metrics>,
    started: Instant,
    armed: bool,
}

impl Drop for Unended {
    fn drop(&mut self) {
        if self.armed {
            self.metrics.record("closed", 0, self.started.elapsed());
        }
    }
}

/// The metric label of a failure.
fn kind(error: &CallError) -> &'static str {
    match error {
        CallError::Refused(_) => "refused",
        CallError::Invalid(_) => "invalid",
        CallError::Limit(_) => "limit",
        CallError::Timeout(_) => "timeout",
        CallError::Network(_) => "network",
        CallError::Decoding(_) => "decoding",
    }
}

/// The origin of `url` for a log line (never its path or query), or `(not a URL)`.
fn shown_origin(url: &str) -> String {
    Target::parse(url)
        .map(|t| t.origin.to_string())
        .unwrap_or_else(|_| "(not a URL)".into())
}
