//! Recording one request: its clocks, randomness and host calls, in memory and bounded
//! ([`RecordSettings::max_tape_bytes`]), and at its end the decision to keep it (5xx and 499,
//! a client that closed first, always; others by [`RecordSettings::sample`]) in the
//! project's [`TraceStore`], counted in the process's metrics (`crate::metrics`: taped, kept,
//! dropped by a bound, bytes written; per tenant under `run --tenants`).
//!
//! Never in clear in a kept trace: the operator's values (names and hashes in
//! [`Tape::environment`], and every spelling [`Environment::redact`] knows replaced by `[NAME]`
//! in the whole file), the configured headers ([`super::tape::redacted_header`]), and
//! passwords given to the `passwords` service (the hooks pass their hash). Not for: which calls
//! are recorded (the sandbox's hooks) or how a trace is replayed.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use rand_core::{Rng, TryRng};
use serde_json::Value;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

use super::{
    sent::{Sent, SentLog},
    store::TraceStore,
    tape::{self, Answer, Call, EnvironmentValue, Outcome, Tape},
};
use crate::environment::Environment;

/// What a project records, and what it keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordSettings {
    /// The fraction (0 to 1) of requests that did not answer 5xx whose traces are kept too.
    pub sample: f64,
    /// Header names (lower case) whose values are never recorded.
    pub redact_headers: Vec<String>,
    /// Traces kept on disk at most; the oldest go first.
    pub max_traces: usize,
    /// Bytes the kept traces take at most together; the oldest go first.
    pub max_bytes: u64,
    /// Bytes one request's trace may take in memory; past them it is cut (and marked so).
    pub max_tape_bytes: usize,
}

/// The headers never recorded unless the operator says otherwise.
pub const DEFAULT_REDACTED_HEADERS: [&str; 4] = [
    "authorization",
    "cookie",
    "proxy-authorization",
    "x-api-key",
];

/// What a trace recorded by `dev` names as its build: there is none, it ran the source
/// (`filerouter replay` runs the current source for it).
pub const DEV_BUNDLE: &str = "dev";

impl RecordSettings {
    /// `config.py`'s `record` settings over the defaults.
    pub fn from_project(project: &crate::config::RecordConfig) -> RecordSettings {
        let default = RecordSettings::default();
        RecordSettings {
            sample: project.sample.unwrap_or(default.sample),
            redact_headers: project
                .redact_headers
                .as_ref()
                .map_or(default.redact_headers, |names| {
                    names.iter().map(|name| name.to_ascii_lowercase()).collect()
                }),
            max_traces: project.max_traces.map_or(default.max_traces, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
            max_bytes: project
                .max_mb
                .map_or(default.max_bytes, |mb| mb.saturating_mul(1024 * 1024)),
            max_tape_bytes: default.max_tape_bytes,
        }
    }

    /// Within the default bounds on disk (a tenant's project asks, the operator's defaults
    /// bound it).
    pub fn within_defaults(mut self) -> RecordSettings {
        let default = RecordSettings::default();
        self.max_traces = self.max_traces.min(default.max_traces);
        self.max_bytes = self.max_bytes.min(default.max_bytes);
        self
    }
}

impl Default for RecordSettings {
    fn default() -> Self {
        RecordSettings {
            sample: 0.0,
            redact_headers: DEFAULT_REDACTED_HEADERS.map(String::from).to_vec(),
            max_traces: 100,
            max_bytes: 64 * 1024 * 1024,
            max_tape_bytes: 8 * 1024 * 1024,
        }
    }
}

/// A project's recording: its settings, its build's identity and its store.
pub struct Recorder {
    settings: RecordSettings,
    bundle: String,
    tenant: Option<String>,
    /// The tenant as the metrics label it.
    label: Option<Arc<str>>,
    store: Arc<TraceStore>,
}

impl Recorder {
    pub fn new(
        settings: RecordSettings,
        bundle: String,
        tenant: Option<String>,
        store: Arc<TraceStore>,
    ) -> Recorder {
        Recorder {
            settings,
            bundle,
            label: tenant.as_deref().map(Arc::from),
            tenant,
            store,
        }
    }

    /// What it records and keeps.
    pub fn settings(&self) -> &RecordSettings {
        &self.settings
    }

    /// Where its traces are kept.
    pub fn store(&self) -> &Arc<TraceStore> {
        &self.store
    }

    /// Start recording a request: `request` as the guest receives it, `target` (JSON) what
    /// serves it, `environment` the values it is given (hashed here, redacted when kept).
    pub fn start(
        self: &Arc<Self>,
        mut request: tape::Request,
        target: Value,
        environment: &Environment,
    ) -> Arc<Recording> {
        for (name, value) in &mut request.headers {
            if self
                .settings
                .redact_headers
                .iter()
                .any(|redacted| redacted.eq_ignore_ascii_case(name))
            {
                *value = tape::redacted_header(value);
            }
        }
        let mut rng = wasmtime_wasi::thread_rng();
        let id = format!("{:016x}{:016x}", rng.next_u64(), rng.next_u64());
        let seed = (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
        crate::metrics::global().trace_taped(self.label.as_ref());
        Arc::new(Recording {
            recorder: self.clone(),
            id,
            started: SystemTime::now(),
            request,
            target,
            environment: environment.clone(),
            seed,
            state: Mutex::new(Recorded::default()),
        })
    }
}

/// One request being recorded.
pub struct Recording {
    recorder: Arc<Recorder>,
    id: String,
    started: SystemTime,
    request: tape::Request,
    target: Value,
    /// The values given, for their names and hashes, and to redact the whole trace.
    environment: Environment,
    seed: u128,
    state: Mutex<Recorded>,
}

#[derive(Default)]
struct Recorded {
    wall_clock: Vec<u64>,
    monotonic_clock: Vec<u64>,
    random: Vec<u8>,
    insecure_random: Vec<u8>,
    calls: Vec<Call>,
    /// What the above take, roughly (a call's JSON text).
    bytes: usize,
    truncated: bool,
    finished: bool,
    /// The response sent before the call ended (`background.respond`).
    responded: Option<Outcome>,
    /// What a streamed response or a WebSocket session sent.
    sent: SentLog,
}

impl Recorded {
    /// Whether `more` bytes still fit in `max`; marks the tape cut when not.
    fn room(&mut self, more: usize, max: usize) -> bool {
        if self.truncated || self.bytes + more > max {
            self.truncated = true;
            return false;
        }
        self.bytes += more;
        true
    }
}

impl Recording {
    pub fn id(&self) -> &str {
        &self.id
    }

    fn with<T>(&self, f: impl FnOnce(&mut Recorded, usize) -> T) -> Option<T> {
        let max = self.recorder.settings.max_tape_bytes;
        let mut state = self.state.lock().ok()?;
        let cut = state.truncated;
        let result = f(&mut state, max);
        if state.truncated && !cut {
            // What comes past the bound is dropped from this tape: counted once per tape.
            crate::metrics::global().traces_dropped(self.recorder.label.as_ref(), "tape_cap", 1);
        }
        Some(result)
    }

    /// A host call the real service answered.
    pub fn call(&self, call: &str, args: Value, answer: Answer) {
        let size = call.len() + json_len(&args) + answer_len(&answer);
        self.with(|state, max| {
            if state.room(size, max) {
                state.calls.push(Call {
                    call: call.to_string(),
                    args,
                    answer,
                });
            }
        });
    }

    fn clock(&self, wall: bool, now: u64) {
        self.with(|state, max| {
            if state.room(8, max) {
                if wall {
                    state.wall_clock.push(now);
                } else {
                    state.monotonic_clock.push(now);
                }
            }
        });
    }

    fn random(&self, secure: bool, bytes: &[u8]) {
        self.with(|state, max| {
            if state.room(bytes.len(), max) {
                if secure {
                    state.random.extend_from_slice(bytes);
                } else {
                    state.insecure_random.extend_from_slice(bytes);
                }
            }
        });
    }

    /// The real clocks and randomness, each read recorded.
    pub fn configure(self: &Arc<Self>, wasi: &mut WasiCtxBuilder) {
        wasi.wall_clock(Wall {
            real: wasmtime_wasi::clocks::wall_clock(),
            recording: self.clone(),
        })
        .monotonic_clock(Monotonic {
            real: wasmtime_wasi::clocks::monotonic_clock(),
            recording: self.clone(),
        })
        .secure_random(Random {
            real: wasmtime_wasi::thread_rng(),
            recording: self.clone(),
            secure: true,
        })
        .insecure_random(Random {
            real: wasmtime_wasi::thread_rng(),
            recording: self.clone(),
            secure: false,
        })
        .insecure_random_seed(self.seed);
    }

    /// The response went out early (background tasks run after it): the request's outcome.
    pub fn responded(&self, outcome: Outcome) {
        self.with(|state, _| {
            state.responded.get_or_insert(outcome);
        });
    }

    /// The guest sent `sent` on its stream or socket.
    pub fn sent(&self, sent: Sent) {
        self.with(|state, _| state.sent.add(sent));
    }

    /// The request ended with `outcome` (or the response sent before, or the stream or
    /// session it sent): its trace is kept if it answered 5xx or its client closed first
    /// (499), or if the sample says so. Once; later calls do nothing.
    pub fn finish(&self, outcome: Outcome) {
        let outcome = self
            .with(|state, _| match state.responded.clone() {
                Some(responded) => responded,
                None => state.sent.outcome(outcome.clone()),
            })
            .unwrap_or(outcome);
        let settings = &self.recorder.settings;
        let keep = outcome.status() >= 500
            || outcome.is_client_closed()
            || (settings.sample > 0.0
                && (wasmtime_wasi::thread_rng().next_u64() as f64 / u64::MAX as f64)
                    < settings.sample);
        let Some(Some(tape)) = self.with(|state, _| {
            if state.finished {
                return None;
            }
            state.finished = true;
            keep.then(|| self.tape(state, outcome))
        }) else {
            return;
        };
        let store = self.recorder.store.clone();
        let environment = self.environment.clone();
        let label = self.recorder.label.clone();
        let save = move || {
            let metrics = crate::metrics::global();
            let text = match serde_json::to_string_pretty(&tape) {
                Ok(text) => text,
                Err(e) => {
                    tracing::warn!("trace {}: not kept: {e}", tape.id);
                    return;
                }
            };
            // The operator's values, in every spelling the redactor knows, wherever route
            // code put them (an outbound header, a SQL parameter, a response).
            let text = environment.redact(&text);
            match store.save(&tape.id, tape.outcome.status(), text.as_bytes()) {
                Ok(saved) => {
                    if saved.written > 0 {
                        metrics.trace_kept(label.as_ref(), saved.written);
                    }
                    if saved.too_large {
                        metrics.traces_dropped(label.as_ref(), "bytes", 1);
                    }
                    metrics.traces_dropped(label.as_ref(), "count", saved.removed_for_count);
                    metrics.traces_dropped(label.as_ref(), "bytes", saved.removed_for_bytes);
                }
                Err(e) => tracing::warn!("trace {}: not kept: {e}", tape.id),
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(save);
            }
            Err(_) => save(),
        }
    }

    fn tape(&self, state: &mut Recorded, outcome: Outcome) -> Tape {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let recorded_at = humantime::format_rfc3339_millis(self.started).to_string();
        Tape {
            format: tape::FORMAT,
            id: self.id.clone(),
            filerouter_version: env!("CARGO_PKG_VERSION").to_string(),
            bundle: self.recorder.bundle.clone(),
            tenant: self.recorder.tenant.clone(),
            recorded_at,
            request: self.request.clone(),
            target: self.target.clone(),
            redacted_headers: self.recorder.settings.redact_headers.clone(),
            environment: self
                .environment
                .values()
                .iter()
                .map(|(name, value)| EnvironmentValue {
                    name: name.clone(),
                    blake3: blake3::hash(value.as_bytes()).to_hex()[..16].to_string(),
                })
                .collect(),
            insecure_seed: format!("{:032x}", self.seed),
            wall_clock: std::mem::take(&mut state.wall_clock),
            monotonic_clock: std::mem::take(&mut state.monotonic_clock),
            random: b64.encode(&state.random),
            insecure_random: b64.encode(&state.insecure_random),
            calls: std::mem::take(&mut state.calls),
            outcome,
            truncated: state.truncated,
        }
    }
}

/// The length of `value`'s JSON text, without keeping the text.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

fn answer_len(answer: &Answer) -> usize {
    match answer {
        Answer::Value(value) => json_len(value),
        Answer::Stopped(why) => why.len(),
    }
}

struct Wall {
    real: Box<dyn HostWallClock + Send>,
    recording: Arc<Recording>,
}

impl HostWallClock for Wall {
    fn resolution(&self) -> Duration {
        self.real.resolution()
    }

    fn now(&self) -> Duration {
        let now = self.real.now();
        let nanos = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        self.recording.clock(true, nanos);
        Duration::from_nanos(nanos)
    }
}

struct Monotonic {
    real: Box<dyn HostMonotonicClock + Send>,
    recording: Arc<Recording>,
}

impl HostMonotonicClock for Monotonic {
    fn resolution(&self) -> u64 {
        self.real.resolution()
    }

    fn now(&self) -> u64 {
        let now = self.real.now();
        self.recording.clock(false, now);
        now
    }
}

struct Random {
    real: Box<dyn Rng + Send>,
    recording: Arc<Recording>,
    secure: bool,
}

impl TryRng for Random {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let value = self.real.next_u32();
        self.recording.random(self.secure, &value.to_le_bytes());
        Ok(value)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let value = self.real.next_u64();
        self.recording.random(self.secure, &value.to_le_bytes());
        Ok(value)
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.real.fill_bytes(dst);
        self.recording.random(self.secure, dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_tape_cut_at_its_bound_is_counted_once_and_a_kept_trace_with_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(TraceStore::new(dir.path().join("traces"), 10, 1 << 20));
        let settings = RecordSettings {
            max_tape_bytes: 64,
            ..RecordSettings::default()
        };
        let recorder = Arc::new(Recorder::new(
            settings,
            "b".repeat(64),
            Some("unit-tape-cap".into()),
            store.clone(),
        ));
        let request = tape::Request {
            method: "GET".into(),
            path: "/".into(),
            query: String::new(),
            headers: Vec::new(),
            body: tape::Bytes::default(),
            client: None,
        };
        let recording = recorder.start(request, json!("Host"), &Environment::default());
        for n in 0..5 {
            recording.call(
                "kv.get",
                json!([format!("a key long enough {n}")]),
                Answer::Value(json!({"Ok": null})),
            );
        }
        // No runtime here: the trace is written before `finish` returns.
        recording.finish(Outcome::response(500, b"{}"));
        let kept = store.list().unwrap();
        assert_eq!(kept.len(), 1);
        let text = store.get(&kept[0].id).unwrap().unwrap();
        let tape = Tape::from_json(&text).unwrap();
        assert!(tape.truncated && tape.calls.len() < 5, "{tape:?}");
        let metrics = crate::metrics::global().render(None);
        for line in [
            r#"filerouter_traces_dropped_total{tenant="unit-tape-cap",reason="tape_cap"} 1"#,
            r#"filerouter_traces_taped_total{tenant="unit-tape-cap"} 1"#,
            r#"filerouter_traces_kept_total{tenant="unit-tape-cap"} 1"#,
            &format!(
                r#"filerouter_trace_bytes_written_total{{tenant="unit-tape-cap"}} {}"#,
                text.len()
            ),
        ] {
            assert!(metrics.contains(line), "{line} missing from\n{metrics}");
        }
    }
}
