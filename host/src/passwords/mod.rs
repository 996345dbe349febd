//! Password hashing and key derivation for route code, computed by the host at native speed:
//! bcrypt and its `bcrypt_pbkdf` ([`bcrypt`]), Argon2 d, i and id ([`argon2`]), PBKDF2-HMAC
//! ([`pbkdf2`]) and scrypt ([`scrypt`]). The guest's `bcrypt` and `argon2` packages (the APIs
//! of PyPI's bcrypt and argon2-cffi) and its `hashlib.pbkdf2_hmac` and `hashlib.scrypt` reach
//! them through the `passwords` interface of `wit/filerouter.wit`.
//!
//! Every function runs on the thread that calls it: in the sandbox that is the request's guest
//! thread, inside the host call, so the CPU it uses is the request's and counts against its
//! `cpu_ms`. The long loops (bcrypt's `2^cost` key expansions, PBKDF2's iterations, scrypt's
//! mixing, `bcrypt_pbkdf`'s rounds) ask a [`Meter`] every millisecond or so whether to go on,
//! so a request past its time limit stops in the middle of the computation (a 504), never
//! minutes later. Argon2 is computed by the `argon2` crate in one step: its work
//! (`time_cost × memory_cost`) is bounded instead ([`ARGON2_MAX_WORK_KIB`]) and the meter is
//! asked before and after.
//!
//! Every parameter is checked here, whatever the guest checked before: a bad one is a
//! [`PasswordError::Invalid`] with the message the Python original gives, never a panic. The
//! memory of Argon2 and scrypt, which lives on the host, is at most the request's memory limit.
//!
//! Not here: the text forms of Argon2 hashes (`$argon2id$v=19$...`) and their verification, and
//! the Python exceptions; the guest does those (`guest-python/stand_ins/argon2/`). No salts are made
//! here either: the guest draws them from WASI's randomness, as the originals draw from the OS.

pub mod argon2;
pub mod bcrypt;
pub mod pbkdf2;
pub mod scrypt;

pub use self::argon2::{ARGON2_MAX_WORK_KIB, Argon2Variant};

/// The longest derived key or raw hash any function here returns (1 MiB): the result crosses
/// into the guest's memory, and real keys are tens of bytes.
pub const MAX_OUTPUT: usize = 1 << 20;

/// Why a function produced no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    /// A parameter the algorithm refuses, or one past a bound of the sandbox: the message is
    /// for the route author (the original's, where it has one).
    #[error("{0}")]
    Invalid(String),
    /// The [`Meter`] said stop (the request is past its time limit).
    #[error("stopped: the request is past its time limit")]
    Stopped,
}

/// Asked between pieces of a long computation, on the computing thread: whether to go on.
pub trait Meter {
    fn keep_going(&mut self) -> bool;
}

impl<F: FnMut() -> bool> Meter for F {
    fn keep_going(&mut self) -> bool {
        self()
    }
}

/// A meter that never stops (tests, and callers outside a request).
pub fn unmetered() -> impl Meter {
    || true
}

fn invalid<T>(message: impl Into<String>) -> Result<T, PasswordError> {
    Err(PasswordError::Invalid(message.into()))
}

/// Go on only if `meter` says so.
fn check(meter: &mut dyn Meter) -> Result<(), PasswordError> {
    if meter.keep_going() {
        Ok(())
    } else {
        Err(PasswordError::Stopped)
    }
}

/// Whether `a` and `b` are equal, in time that depends on their lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}
