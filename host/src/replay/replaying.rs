//! Replaying one trace: the recorded clocks, randomness and host answers served in order,
//! and the first question the trace does not hold (another call, other arguments, one call
//! too many, a clock read or random bytes past the recorded ones) kept as the run's
//! [`Divergence`]. The sandbox stops the run at once on a divergent host call; a clock or
//! random draw cannot stop it (WASI's traits cannot fail), so it is kept and the next host
//! call stops the run.
//!
//! A trace whose client closed its connection first (499) ends where the client left: the
//! run's first host call past it is stopped there (as production's was), its clocks and
//! randomness past the recorded ones are served anyway, and its outcome is the recorded one.
//!
//! Not for: loading the build or showing the result (`filerouter replay`, `crate::cli`).

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use rand_core::TryRng;
use serde_json::Value;
use tokio::sync::watch;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

use super::{
    brief,
    sent::{Sent, SentLog},
    tape::{Answer, Outcome, Tape, TapeError},
};

/// The first question a replay asked that the trace does not hold.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("divergence at call {number}: the run asked {asked}, the trace recorded {recorded}")]
pub struct Divergence {
    /// 1 for the first host call (clock reads and random draws count apart: see `asked`).
    pub number: usize,
    pub asked: String,
    pub recorded: String,
}

/// A trace being replayed.
pub struct Replaying {
    tape: Tape,
    random: Vec<u8>,
    insecure_random: Vec<u8>,
    seed: u128,
    /// Clocks and randomness past the recorded ones are not a divergence (replay on the
    /// current source, whose imports draw and read differently): the clocks go on from the
    /// last recorded reading, the randomness is real.
    lenient: bool,
    /// The recorded client closed its connection first: the trace ends where it left.
    client_left: bool,
    state: Mutex<Cursor>,
    ended: watch::Sender<Option<Outcome>>,
}

#[derive(Default)]
struct Cursor {
    call: usize,
    wall: usize,
    monotonic: usize,
    random: usize,
    insecure_random: usize,
    divergence: Option<Divergence>,
    /// The response sent before the call ended (`background.respond`).
    responded: Option<Outcome>,
    /// What the run sent on its stream or socket.
    sent: SentLog,
    /// The run was stopped where the recorded client left (call number).
    stopped_where_client_left: Option<usize>,
}

impl Replaying {
    /// Replay `tape`; `lenient`: clocks and randomness past the recorded ones are served
    /// anyway (see [`Replaying`]'s field), only host calls are checked.
    pub fn new(tape: Tape, lenient: bool) -> Result<Arc<Replaying>, TapeError> {
        let (random, insecure_random) = tape.random_bytes()?;
        let seed = u128::from_str_radix(&tape.insecure_seed, 16)
            .map_err(|e| TapeError::Invalid(format!("insecure_seed: {e}")))?;
        Ok(Arc::new(Replaying {
            client_left: tape.outcome.is_client_closed(),
            tape,
            random,
            insecure_random,
            seed,
            lenient,
            state: Mutex::new(Cursor {
                sent: SentLog::keeping(),
                ..Cursor::default()
            }),
            ended: watch::channel(None).0,
        }))
    }

    pub fn tape(&self) -> &Tape {
        &self.tape
    }

    /// The first divergence, if the run diverged.
    pub fn divergence(&self) -> Option<Divergence> {
        self.state.lock().ok()?.divergence.clone()
    }

    /// Host calls the run made (those the trace answered).
    pub fn calls_answered(&self) -> usize {
        self.state.lock().map_or(0, |cursor| cursor.call)
    }

    /// The recorded answer of the run's next host call, if it is `call` with `args`; else the
    /// divergence (kept, the first one only).
    pub fn next(&self, call: &str, args: &Value) -> Result<Answer, Divergence> {
        let Ok(mut cursor) = self.state.lock() else {
            return Err(Divergence {
                number: 0,
                asked: call.into(),
                recorded: "nothing (the replay's state was lost)".into(),
            });
        };
        if let Some(divergence) = &cursor.divergence {
            return Err(divergence.clone());
        }
        let number = cursor.call + 1;
        let asked = format!("{call}({})", brief(args));
        let diverged = match self.tape.calls.get(cursor.call) {
            Some(recorded) if recorded.call == call && recorded.args == *args => {
                cursor.call += 1;
                return Ok(recorded.answer.clone());
            }
            Some(recorded) => Divergence {
                number,
                asked,
                recorded: format!("{}({})", recorded.call, brief(&recorded.args)),
            },
            None if self.client_left => {
                cursor.stopped_where_client_left.get_or_insert(number);
                return Ok(Answer::Stopped(
                    "the recorded client closed its connection here".into(),
                ));
            }
            None if self.tape.truncated => Divergence {
                number,
                asked,
                recorded: "nothing more: the trace was cut at its size bound".into(),
            },
            None => Divergence {
                number,
                asked,
                recorded: format!("no more calls (it holds {})", self.tape.calls.len()),
            },
        };
        cursor.divergence = Some(diverged.clone());
        Err(diverged)
    }

    /// The recorded clocks and randomness.
    pub fn configure(self: &Arc<Self>, wasi: &mut WasiCtxBuilder) {
        wasi.wall_clock(Clock(self.clone()))
            .monotonic_clock(Clock(self.clone()))
            .secure_random(Random {
                replaying: self.clone(),
                secure: true,
            })
            .insecure_random(Random {
                replaying: self.clone(),
                secure: false,
            })
            .insecure_random_seed(self.seed);
    }

    fn diverge(cursor: &mut Cursor, asked: String, recorded: String) {
        if cursor.divergence.is_none() {
            cursor.divergence = Some(Divergence {
                number: cursor.call + 1,
                asked,
                recorded,
            });
        }
    }

    fn clock(&self, wall: bool) -> u64 {
        let Ok(mut cursor) = self.state.lock() else {
            return 0;
        };
        let cursor = &mut *cursor;
        let (values, at, name) = if wall {
            (&self.tape.wall_clock, &mut cursor.wall, "wall clock")
        } else {
            (
                &self.tape.monotonic_clock,
                &mut cursor.monotonic,
                "monotonic clock",
            )
        };
        match values.get(*at) {
            Some(value) => {
                *at += 1;
                *value
            }
            None if self.lenient || self.client_left => {
                *at += 1;
                let past = (*at - values.len()) as u64;
                values.last().copied().unwrap_or(0) + past * 1000
            }
            None => {
                let last = values.last().copied().unwrap_or(0);
                let read = *at + 1;
                Self::diverge(
                    cursor,
                    format!("a read of the {name} (read {read})"),
                    format!("{} reads", values.len()),
                );
                last
            }
        }
    }

    fn draw(&self, secure: bool, dst: &mut [u8]) {
        let Ok(mut cursor) = self.state.lock() else {
            return;
        };
        let cursor = &mut *cursor;
        let (bytes, at, name) = if secure {
            (&self.random, &mut cursor.random, "random")
        } else {
            (
                &self.insecure_random,
                &mut cursor.insecure_random,
                "insecure random",
            )
        };
        match bytes.get(*at..*at + dst.len()) {
            Some(recorded) => {
                dst.copy_from_slice(recorded);
                *at += dst.len();
            }
            None if self.lenient || self.client_left => {
                use rand_core::Rng;
                wasmtime_wasi::thread_rng().fill_bytes(dst);
            }
            None => {
                dst.fill(0);
                let wanted = *at + dst.len();
                Self::diverge(
                    cursor,
                    format!("{wanted} {name} bytes"),
                    format!("{} {name} bytes", bytes.len()),
                );
            }
        }
    }

    /// The response went out early (background tasks run after it): the run's outcome.
    pub fn responded(&self, outcome: Outcome) {
        if let Ok(mut cursor) = self.state.lock() {
            cursor.responded.get_or_insert(outcome);
        }
    }

    /// The run sent `sent` on its stream or socket.
    pub fn sent(&self, sent: Sent) {
        if let Ok(mut cursor) = self.state.lock() {
            cursor.sent.add(sent);
        }
    }

    /// What the run sent on its stream or socket, in order.
    pub fn frames(&self) -> Vec<Sent> {
        self.state
            .lock()
            .map_or_else(|_| Vec::new(), |cursor| cursor.sent.frames().to_vec())
    }

    /// The call number where the run was stopped because the recorded client left there.
    pub fn stopped_where_client_left(&self) -> Option<usize> {
        self.state.lock().ok()?.stopped_where_client_left
    }

    /// How the run ended (or the response it sent before, or what it streamed);
    /// [`Replaying::ended`] answers from now on. A run stopped where the recorded client left
    /// ends as the recording did.
    pub fn finish(&self, outcome: Outcome) {
        let outcome = match self.state.lock() {
            Ok(cursor) if cursor.stopped_where_client_left.is_some() => self.tape.outcome.clone(),
            Ok(cursor) => match cursor.responded.clone() {
                Some(responded) => responded,
                None => cursor.sent.outcome(outcome),
            },
            Err(_) => outcome,
        };
        self.ended.send_replace(Some(outcome));
    }

    /// Wait for the run's end (background tasks included): its outcome.
    pub async fn ended(&self) -> Outcome {
        let mut ended = self.ended.subscribe();
        loop {
            if let Some(outcome) = ended.borrow_and_update().clone() {
                return outcome;
            }
            if ended.changed().await.is_err() {
                return Outcome::Failed {
                    status: 500,
                    error: "Lost".into(),
                    message: "the run ended without an outcome".into(),
                    file: None,
                    line: None,
                };
            }
        }
    }

    /// At the run's end: the first recorded call it never asked for, as a divergence (a run
    /// that stopped early asked less than production did).
    pub fn unasked(&self) -> Option<Divergence> {
        let cursor = self.state.lock().ok()?;
        let recorded = self.tape.calls.get(cursor.call)?;
        Some(Divergence {
            number: cursor.call + 1,
            asked: "nothing more (the run ended)".into(),
            recorded: format!("{}({})", recorded.call, brief(&recorded.args)),
        })
    }
}

struct Clock(Arc<Replaying>);

impl HostWallClock for Clock {
    fn resolution(&self) -> Duration {
        wasmtime_wasi::clocks::wall_clock().resolution()
    }

    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.clock(true))
    }
}

impl HostMonotonicClock for Clock {
    fn resolution(&self) -> u64 {
        wasmtime_wasi::clocks::monotonic_clock().resolution()
    }

    fn now(&self) -> u64 {
        self.0.clock(false)
    }
}

struct Random {
    replaying: Arc<Replaying>,
    secure: bool,
}

impl TryRng for Random {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut bytes = [0; 4];
        self.replaying.draw(self.secure, &mut bytes);
        Ok(u32::from_le_bytes(bytes))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut bytes = [0; 8];
        self.replaying.draw(self.secure, &mut bytes);
        Ok(u64::from_le_bytes(bytes))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.replaying.draw(self.secure, dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::replay::tape::{Bytes, Call, FORMAT, Request};

    fn tape(calls: Vec<Call>) -> Tape {
        Tape {
            format: FORMAT,
            id: "0".repeat(32),
            filerouter_version: "test".into(),
            bundle: "b".repeat(64),
            tenant: None,
            recorded_at: "2026-01-01T00:00:00Z".into(),
            request: Request {
                method: "GET".into(),
                path: "/".into(),
                query: String::new(),
                headers: Vec::new(),
                body: Bytes::default(),
                client: None,
            },
            target: json!("Host"),
            redacted_headers: Vec::new(),
            environment: Vec::new(),
            insecure_seed: "0".into(),
            wall_clock: vec![10, 20],
            monotonic_clock: Vec::new(),
            random: "AQIDBA==".into(),
            insecure_random: String::new(),
            calls,
            outcome: Outcome::response(200, b""),
            truncated: false,
        }
    }

    fn call(name: &str, args: Value, answer: Value) -> Call {
        Call {
            call: name.into(),
            args,
            answer: Answer::Value(answer),
        }
    }

    #[test]
    fn answers_in_order_and_names_the_first_divergence() {
        let replaying = Replaying::new(
            tape(vec![
                call("kv.get", json!(["a"]), json!({"Ok": "1"})),
                call("kv.get", json!(["b"]), json!({"Ok": null})),
            ]),
            false,
        )
        .unwrap();
        assert_eq!(
            replaying.next("kv.get", &json!(["a"])).unwrap(),
            Answer::Value(json!({"Ok": "1"}))
        );
        let divergence = replaying.next("kv.get", &json!(["c"])).unwrap_err();
        assert_eq!(
            divergence.to_string(),
            r#"divergence at call 2: the run asked kv.get(["c"]), the trace recorded kv.get(["b"])"#
        );
        // The first one stays, whatever comes after.
        assert_eq!(
            replaying.next("kv.get", &json!(["b"])),
            Err(divergence.clone())
        );
        assert_eq!(replaying.divergence(), Some(divergence));
    }

    #[test]
    fn a_call_past_the_trace_and_a_call_never_asked_are_divergences() {
        let replaying = Replaying::new(tape(vec![]), false).unwrap();
        let past = replaying.next("sql.open", &json!(["app.db"])).unwrap_err();
        assert_eq!(past.recorded, "no more calls (it holds 0)");
        let replaying = Replaying::new(
            tape(vec![call("kv.get", json!(["a"]), json!({"Ok": null}))]),
            false,
        )
        .unwrap();
        let unasked = replaying.unasked().unwrap();
        assert_eq!(unasked.number, 1);
        assert_eq!(unasked.recorded, r#"kv.get(["a"])"#);
    }

    #[test]
    fn a_trace_whose_client_left_stops_the_run_where_it_left_and_ends_as_recorded() {
        let mut left = tape(vec![call("kv.get", json!(["a"]), json!({"Ok": null}))]);
        left.outcome = Outcome::client_closed();
        let replaying = Replaying::new(left, false).unwrap();
        assert!(replaying.next("kv.get", &json!(["a"])).is_ok());
        assert!(matches!(
            replaying.next("kv.set", &json!(["b", "1", null])),
            Ok(Answer::Stopped(_))
        ));
        assert_eq!(replaying.stopped_where_client_left(), Some(2));
        // Past the recorded clock reads: served, not a divergence.
        let _ = (
            replaying.clock(true),
            replaying.clock(true),
            replaying.clock(true),
        );
        assert_eq!(replaying.divergence(), None);
        replaying.finish(Outcome::response(200, b"late"));
        let ended = replaying.ended.borrow().clone();
        assert_eq!(ended, Some(Outcome::client_closed()));
    }

    #[test]
    fn clocks_and_random_bytes_are_served_as_recorded_then_diverge_unless_lenient() {
        let strict = Replaying::new(tape(vec![]), false).unwrap();
        assert_eq!((strict.clock(true), strict.clock(true)), (10, 20));
        let mut bytes = [0; 4];
        strict.draw(true, &mut bytes);
        assert_eq!(bytes, [1, 2, 3, 4]);
        assert!(strict.divergence().is_none());
        strict.draw(true, &mut bytes);
        assert_eq!(bytes, [0; 4]);
        let divergence = strict.divergence().unwrap();
        assert_eq!(divergence.asked, "8 random bytes");
        assert_eq!(divergence.recorded, "4 random bytes");

        let lenient = Replaying::new(tape(vec![]), true).unwrap();
        assert_eq!(
            (
                lenient.clock(true),
                lenient.clock(true),
                lenient.clock(true)
            ),
            (10, 20, 1020)
        );
        lenient.draw(true, &mut [0; 64]);
        assert!(lenient.divergence().is_none());
    }
}
