"""`filerouter.kv`: a key-value store that outlives a request.

Every request runs in a fresh sandbox instance, so module globals are gone when it ends. State
that must last (rate-limit counters, sessions, caches) goes here: the store is kept by the host,
one per project, shared by all of that project's requests. Values are anything JSON can hold.

    from filerouter import kv

    hits = kv.incr(f"hits:{ip}", ttl=60)   # atomic; the key expires 60 s after it is created
    kv.set("greeting", {"text": "hi"}, ttl=3600)
    kv.get("greeting")                      # {"text": "hi"}, or None once expired
    kv.delete("greeting")

It lives in the server's memory: a restart empties it, and it is bounded (see the README). Every
refusal, whether this module's (a bad key, value or ttl) or the host's (a bound of the store), is
a `KVError` raised at the call, with the reason.
"""

import json
import math

import wit_text
from wit_world.imports import kv as _host

__all__ = ["KVError", "MAX_TTL_SECONDS", "delete", "get", "incr", "set"]

# The longest ttl: ten years (the host refuses longer ones too).
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600
_S64 = (-(2**63), 2**63 - 1)


class KVError(Exception):
    """The store refused an operation: a bad key, value or ttl, a bound of the store, or `incr`
    on a value that is not an integer. The message says which."""


def _ttl_ms(ttl):
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise KVError(f"ttl must be a number of seconds, not {type(ttl).__name__}")
    if not (math.isfinite(ttl) and 0 < ttl <= MAX_TTL_SECONDS):
        raise KVError(f"ttl must be more than 0 and at most {MAX_TTL_SECONDS} seconds (ten years), not {ttl!r}")
    return max(1, int(ttl * 1000))


def _check_key(key):
    if not isinstance(key, str):
        raise KVError(f"kv keys are strings, not {type(key).__name__}")
    if wit_text.has_lone_surrogate(key):
        raise KVError("kv keys must be valid Unicode text; this one holds a lone surrogate")


def _host_error(exc):
    return KVError(getattr(exc, "value", str(exc)))


def get(key, default=None):
    """The value stored under `key`, or `default` if there is none (or it expired)."""
    _check_key(key)
    raw = _host.get(key)
    return default if raw is None else json.loads(raw)


def set(key, value, ttl=None):  # noqa: A001  (the natural name, as in every key-value client)
    """Store `value` (anything JSON can hold) under `key`; with `ttl`, for that many seconds."""
    _check_key(key)
    ttl_ms = _ttl_ms(ttl)
    try:
        # ensure_ascii writes any lone surrogate as an escape; NaN and infinities are not JSON.
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise KVError(f"kv values must be JSON (dict, list, str, int, float, bool, None): {exc}") from None
    try:
        _host.set(key, text, ttl_ms)
    except Exception as exc:  # the binding raises `Err` carrying the host's message
        raise _host_error(exc) from None


def delete(key):
    """Remove `key`; returns whether it was there."""
    _check_key(key)
    return _host.delete(key)


def incr(key, by=1, ttl=None):
    """Add `by` to the integer under `key` (0 if absent) atomically and return the new value.

    `ttl` (seconds) applies when this call creates the key, so `incr(k, ttl=60)` counts in a
    fixed 60-second window. Values are 64-bit signed integers.
    """
    _check_key(key)
    if isinstance(by, bool) or not isinstance(by, int):
        raise KVError(f"incr adds an int, not {type(by).__name__}")
    if not _S64[0] <= by <= _S64[1]:
        raise KVError(f"incr adds a 64-bit integer; {by} is out of range")
    ttl_ms = _ttl_ms(ttl)
    try:
        return _host.incr(key, by, ttl_ms)
    except Exception as exc:
        raise _host_error(exc) from None
