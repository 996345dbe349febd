"""`filerouter.kv`: a key-value store that outlives a request.

Every request runs in a fresh sandbox instance, so module globals are gone when it ends. State
that must last (rate-limit counters, sessions, caches) goes here: the store is kept by the host,
one per project, shared by all of that project's requests. Values are anything JSON can hold.

    from filerouter import kv

    hits = kv.incr(f"hits:{ip}", ttl=60)   # atomic; the key expires 60 s after it is created
    kv.set("greeting", {"text": "hi"}, ttl=3600)
    kv.get("greeting")                      # {"text": "hi"}, or None once expired
    kv.delete("greeting")

It lives in the server's memory: a restart empties it, and it is bounded (see the README).
"""

import json

from wit_world.imports import kv as _host

__all__ = ["KVError", "delete", "get", "incr", "set"]


class KVError(Exception):
    """The host refused an operation (a bound of the store, or `incr` on a non-integer)."""


def _ttl_ms(ttl):
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0:
        raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}")
    return max(1, int(ttl * 1000))


def _check_key(key):
    if not isinstance(key, str):
        raise TypeError(f"kv keys are strings, not {type(key).__name__}")


def get(key, default=None):
    """The value stored under `key`, or `default` if there is none (or it expired)."""
    _check_key(key)
    raw = _host.get(key)
    return default if raw is None else json.loads(raw)


def set(key, value, ttl=None):  # noqa: A001  (the natural name, as in every key-value client)
    """Store `value` (anything JSON can hold) under `key`; with `ttl`, for that many seconds."""
    _check_key(key)
    text = json.dumps(value, separators=(",", ":"))
    try:
        _host.set(key, text, _ttl_ms(ttl))
    except Exception as exc:  # the binding raises `Err` carrying the host's message
        raise KVError(getattr(exc, "value", str(exc))) from None


def delete(key):
    """Remove `key`; returns whether it was there."""
    _check_key(key)
    return _host.delete(key)


def incr(key, by=1, ttl=None):
    """Add `by` to the integer under `key` (0 if absent) atomically and return the new value.

    `ttl` (seconds) applies when this call creates the key, so `incr(k, ttl=60)` counts in a
    fixed 60-second window.
    """
    _check_key(key)
    if isinstance(by, bool) or not isinstance(by, int):
        raise TypeError(f"incr adds an int, not {type(by).__name__}")
    try:
        return _host.incr(key, by, _ttl_ms(ttl))
    except Exception as exc:
        raise KVError(getattr(exc, "value", str(exc))) from None
