//! The sandbox's side of recording and replay (`crate::replay`): each host call of a request
//! that is taped starts with [`taped!`] (in replay, it returns the recorded answer at once, or
//! traps naming the divergence) and ends with [`Taping::end`] (in recording, it keeps what the
//! real service answered). Two lines per host function in `services.rs`; untaped calls (the
//! default, and every call but a request's) pay one branch.

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use super::CallState;
use crate::replay::{Answer, Tap};

/// What [`CallState::tap_start`] decided.
pub(super) enum Started<T> {
    /// Replay: the recorded answer, which the host function returns as it is.
    Answered(T),
    /// The real service answers; [`Taping::end`] records it when recording.
    Go(Taping),
}

/// A host call in progress whose answer may be recorded.
pub(super) struct Taping {
    call: &'static str,
    args: Option<Value>,
}

/// Start a taped host call: `taped!(self, "kv.get", (&key,))` evaluates to the [`Taping`]
/// to end the call with, or returns the recorded answer (replay) or the divergence's trap
/// from the enclosing host function.
macro_rules! taped {
    ($state:expr, $call:literal, $args:expr) => {
        match $state.tap_start($call, || serde_json::to_value($args))? {
            $crate::sandbox::tap::Started::Answered(answer) => return Ok(answer),
            $crate::sandbox::tap::Started::Go(taping) => taping,
        }
    };
}
pub(super) use taped;

impl CallState {
    pub(super) fn tap_start<T: DeserializeOwned>(
        &self,
        call: &'static str,
        args: impl FnOnce() -> serde_json::Result<Value>,
    ) -> wasmtime::Result<Started<T>> {
        let Some(tap) = &self.tap else {
            return Ok(Started::Go(Taping { call, args: None }));
        };
        let args = args().unwrap_or(Value::Null);
        match tap.before(call, &args) {
            Ok(None) => Ok(Started::Go(Taping {
                call,
                args: Some(args),
            })),
            Ok(Some(Answer::Value(value))) => match serde_json::from_value(value) {
                Ok(answer) => Ok(Started::Answered(answer)),
                Err(e) => Err(wasmtime::Error::msg(format!(
                    "replay: the trace's answer to {call} is not one this build gives: {e}"
                ))),
            },
            // The recorded request was stopped inside this call (a limit): so is the replay.
            Ok(Some(Answer::Stopped(_))) => Err(wasmtime::Error::from(wasmtime::Trap::Interrupt)),
            Err(divergence) => Err(wasmtime::Error::msg(format!("replay: {divergence}"))),
        }
    }

    /// The call's tap, when the call is taped (a request's, with recording on or in replay).
    pub(super) fn tap(&self) -> Option<&Tap> {
        self.tap.as_ref()
    }
}

impl Taping {
    /// The real service's `result`, recorded when recording, returned as it is.
    pub(super) fn end<T: Serialize>(
        self,
        state: &CallState,
        result: wasmtime::Result<T>,
    ) -> wasmtime::Result<T> {
        if let (Some(tap), Some(args)) = (state.tap(), self.args) {
            let answer = match &result {
                Ok(value) => Answer::Value(serde_json::to_value(value).unwrap_or(Value::Null)),
                Err(stopped) => Answer::Stopped(format!("{stopped:#}")),
            };
            tap.after(self.call, args, answer);
        }
        result
    }

    /// As [`Taping::end`], but what is recorded is `kept` (the operator's values replaced by
    /// placeholders), not the `result` the guest gets.
    pub(super) fn end_kept<T: Serialize>(
        self,
        state: &CallState,
        result: wasmtime::Result<T>,
        kept: impl FnOnce(&T) -> T,
    ) -> wasmtime::Result<T> {
        if let (Some(tap), Some(args), Ok(value)) = (state.tap(), self.args, &result) {
            let answer = Answer::Value(serde_json::to_value(kept(value)).unwrap_or(Value::Null));
            tap.after(self.call, args, answer);
        }
        result
    }
}

/// What a trace keeps of a password: its hash, never the password.
pub(super) fn hidden(password: &[u8]) -> String {
    format!("blake3:{}", &blake3::hash(password).to_hex()[..32])
}
