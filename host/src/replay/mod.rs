//! Recording and replaying requests (issue 47): every request starts from the same sealed
//! snapshot, and everything it learns from outside passes through the host (WASI's clocks and
//! randomness, and the services of `wit/filerouter.wit`). With recording on, a request keeps
//! those answers in order, in memory and bounded ([`recording`]); a request that answered 5xx
//! (and a sampled fraction of the others) is kept on disk ([`store`]) as a trace file
//! ([`tape`]); `filerouter replay` runs the same build with the recorded answers served
//! instead of the real services ([`replaying`]), and stops at the first question the trace
//! does not hold.
//!
//! What the sandbox sees of all this is a [`Tap`] per call: its hooks ask [`Tap::before`] a host
//! call (in replay, the recorded answer) and tell [`Tap::after`] (in recording, what to keep),
//! and [`Tap::configure`] gives the instance's WASI context its clocks and randomness. Below
//! the sandbox: this module knows nothing of WIT types (they cross as JSON), routing or HTTP.

pub mod recording;
pub mod replaying;
pub mod sent;
pub mod store;
pub mod tape;

use std::sync::Arc;

use serde_json::Value;
use wasmtime_wasi::WasiCtxBuilder;

pub use recording::{RecordSettings, Recorder, Recording};
pub use replaying::{Divergence, Replaying};
pub use sent::Sent;
pub use tape::{Answer, Outcome, Tape};

/// How one call is taped: recorded, or replayed.
#[derive(Clone)]
pub enum Tap {
    Record(Arc<Recording>),
    Replay(Arc<Replaying>),
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tap::Record(recording) => write!(f, "Record({})", recording.id()),
            Tap::Replay(replaying) => write!(f, "Replay({})", replaying.tape().id),
        }
    }
}

impl Tap {
    /// Before a host call: in replay, the recorded answer (or the divergence, when the trace
    /// holds another call here); in recording, nothing (the call goes to the real service).
    pub fn before(&self, call: &str, args: &Value) -> Result<Option<Answer>, Divergence> {
        match self {
            Tap::Record(_) => Ok(None),
            Tap::Replay(replaying) => replaying.next(call, args).map(Some),
        }
    }

    /// After a host call the real service answered: kept, in recording.
    pub fn after(&self, call: &str, args: Value, answer: Answer) {
        if let Tap::Record(recording) = self {
            recording.call(call, args, answer);
        }
    }

    /// The instance's clocks and randomness: the real ones, recorded; or the recorded ones.
    pub fn configure(&self, wasi: &mut WasiCtxBuilder) {
        match self {
            Tap::Record(recording) => recording.configure(wasi),
            Tap::Replay(replaying) => replaying.configure(wasi),
        }
    }

    /// The response went out before the call ended (background tasks run after it): it is
    /// the request's outcome, whatever the call returns at its end.
    pub fn responded(&self, outcome: Outcome) {
        match self {
            Tap::Record(recording) => recording.responded(outcome),
            Tap::Replay(replaying) => replaying.responded(outcome),
        }
    }

    /// The guest sent something on its stream or socket (recorded and replayed alike: the
    /// request's outcome is what it sent, see [`sent`]).
    pub fn sent(&self, sent: Sent) {
        match self {
            Tap::Record(recording) => recording.sent(sent),
            Tap::Replay(replaying) => replaying.sent(sent),
        }
    }

    /// How the call ended (the recording decides whether to keep its trace).
    pub fn finish(&self, outcome: Outcome) {
        match self {
            Tap::Record(recording) => recording.finish(outcome),
            Tap::Replay(replaying) => replaying.finish(outcome),
        }
    }
}

/// A short, single-line rendering of a JSON value for messages.
pub(crate) fn brief(value: &Value) -> String {
    let text = value.to_string();
    const MAX: usize = 300;
    if text.chars().count() <= MAX {
        return text;
    }
    let cut: String = text.chars().take(MAX).collect();
    format!("{cut}…")
}
