"""`filerouter.kv`: a key-value store that outlives a request.

Every request runs in a fresh sandbox instance, so module globals are gone when it ends. State
that must last (rate-limit counters, sessions, caches) goes here: the store is kept by the host,
one per project, shared by all of that project's requests. Values are anything JSON can hold.

    from filerouter import kv

    hits = kv.incr(f"hits:{ip}", ttl=60)   # atomic; the key expires 60 s after it is created
    kv.set("greeting", {"text": "hi"}, ttl=3600)
    kv.get("greeting")                      # {"text": "hi"}, or None once expired
    kv.delete("greeting")                   # True if it was there

    # Read, change, write back only if nobody else wrote in between (else try again):
    cart = kv.get("cart:7")                 # None when absent
    kv.compare_and_set("cart:7", cart, (cart or []) + [item])   # True if it was still `cart`

    kv.keys("session:")                     # one page: up to 100 keys, in order
    for key in kv.scan("session:"):         # every key with that prefix, page by page
        ...
    kv.set_many({"a": 1, "b": 2}, ttl=60)   # all of them or none
    kv.delete_many(["a", "b"])

It is durable: the host keeps it in the project's SQLite file by default, or in Redis when the
operator configures one, so it survives restarts and is shared by every `filerouter run`
process (replica) that uses the same backend. It is bounded (docs/reference/limits.md). Every refusal,
whether this module's (a bad key, value or ttl) or the host's (a bound of the store, the backend
being unreachable), is a `KVError` raised at the call, with the reason.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from ._sandbox import OutsideSandboxError
from ._sandbox import kv as _host
from ._sandbox import wit_text

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

__all__ = [
    "DELETE",
    "KVError",
    "MAX_ENTRIES",
    "MAX_KEYS_PAGE",
    "MAX_TTL_SECONDS",
    "compare_and_set",
    "delete",
    "delete_many",
    "get",
    "incr",
    "keys",
    "scan",
    "set",
    "set_many",
]

# The longest ttl: ten years (the host refuses longer ones too).
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600
# The most keys one `keys` call returns, and the most entries one `set_many`/`delete_many` takes.
MAX_KEYS_PAGE = 1000
MAX_ENTRIES = 1000
_S64 = (-(2**63), 2**63 - 1)


class KVError(Exception):
    """The store refused an operation: a bad key, value or ttl, a bound of the store, `incr`
    on a value that is not an integer, or the backend being unreachable. The message says
    which."""


class _Delete:
    def __repr__(self) -> str:
        return "kv.DELETE"


# `compare_and_set`'s new value that deletes the key.
DELETE = _Delete()


def _ttl_ms(ttl: float | None) -> int | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise KVError(f"ttl must be a number of seconds, not {type(ttl).__name__}")
    if not (math.isfinite(ttl) and 0 < ttl <= MAX_TTL_SECONDS):
        raise KVError(f"ttl must be more than 0 and at most {MAX_TTL_SECONDS} seconds (ten years), not {ttl!r}")
    return max(1, int(ttl * 1000))


def _check_key(key: str, what: str = "kv keys") -> None:
    if not isinstance(key, str):
        raise KVError(f"{what} are strings, not {type(key).__name__}")
    if wit_text.has_lone_surrogate(key):
        raise KVError(f"{what} must be valid Unicode text; this one holds a lone surrogate")


def _check_page_size(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KVError(f"{name} must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_KEYS_PAGE:
        raise KVError(f"{name} must be from 1 to {MAX_KEYS_PAGE}, not {value}")


def _encode(value: Any) -> str:
    """`value` as the JSON text the host stores. Keys are sorted, so that equal dicts are equal
    text (`compare_and_set` compares text)."""
    try:
        # ensure_ascii writes any lone surrogate as an escape; NaN and infinities are not JSON.
        return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise KVError(f"kv values must be JSON (dict, list, str, int, float, bool, None): {exc}") from None


def _call(function: Callable[..., Any], *args: Any) -> Any:
    try:
        return function(*args)
    except OutsideSandboxError:
        raise
    except Exception as exc:  # the binding raises `Err` carrying the host's message
        raise KVError(getattr(exc, "value", str(exc))) from None


def get(key: str, default: Any = None) -> Any:
    """The value stored under `key`, or `default` if there is none (or it expired)."""
    _check_key(key)
    raw = _call(_host.get, key)
    return default if raw is None else json.loads(raw)


def set(key: str, value: Any, ttl: float | None = None) -> None:  # noqa: A001  (the natural name, as in every key-value client)
    """Store `value` (anything JSON can hold) under `key`; with `ttl`, for that many seconds."""
    _check_key(key)
    ttl_ms = _ttl_ms(ttl)
    _call(_host.set, key, _encode(value), ttl_ms)


def delete(key: str) -> bool:
    """Remove `key`; returns whether it was there."""
    _check_key(key)
    deleted: bool = _call(_host.delete, key)
    return deleted


def incr(key: str, by: int = 1, ttl: float | None = None) -> int:
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
    count: int = _call(_host.incr, key, by, ttl_ms)
    return count


def compare_and_set(key: str, expected: Any, value: Any, ttl: float | None = None) -> bool:
    """If `key` holds `expected`, store `value` instead, in one step; returns whether it did.

    `expected=None` means "absent" (what `get` returns for a missing key), so a read-modify-write
    loop needs nothing special: `old = kv.get(k)`, then `kv.compare_and_set(k, old, new)`, and
    read again if it returned False. `value=kv.DELETE` deletes the key instead. Values compare
    as JSON (`{"a": 1, "b": 2}` equals `{"b": 2, "a": 1}`; `1` does not equal `1.0`). `ttl`
    (seconds) applies to the stored value, as in `set`.

    A stored JSON `null` (`kv.set(k, None)`) reads as None too, but is not "absent": no
    `expected` matches it; overwrite it with `set` or remove it with `delete`.
    """
    _check_key(key)
    ttl_ms = _ttl_ms(ttl)
    expected_text = None if expected is None else _encode(expected)
    value_text = None if value is DELETE else _encode(value)
    done: bool = _call(_host.compare_and_set, key, expected_text, value_text, ttl_ms)
    return done


def keys(prefix: str = "", limit: int = 100, after: str | None = None) -> list[str]:
    """One page of the keys that start with `prefix`, in order (by their UTF-8 bytes): at most
    `limit` (1 to 1000) of them, those after `after` when given.

    For the next page, pass the last key of this one as `after`; a page shorter than `limit`
    is the last. `scan` does this for you.
    """
    _check_key(prefix, "kv key prefixes")
    if after is not None:
        _check_key(after, "kv keys (`after`)")
    _check_page_size(limit, "limit")
    page: list[str] = _call(_host.keys, prefix, after, limit)
    return page


def scan(prefix: str = "", page_size: int = 100) -> Iterator[str]:
    """Every key that starts with `prefix`, in order, fetched `page_size` (1 to 1000) at a
    time: an iterator (`for key in kv.scan("session:")`, or `list(kv.scan(...))`).

    Not a snapshot: a key written or deleted during the scan may or may not appear, but no key
    appears twice.
    """
    _check_key(prefix, "kv key prefixes")
    _check_page_size(page_size, "page_size")
    return _pages(prefix, page_size)


def _pages(prefix: str, page_size: int) -> Iterator[str]:
    after: str | None = None
    while True:
        page = keys(prefix, limit=page_size, after=after)
        yield from page
        if len(page) < page_size:
            return
        after = page[-1]


def set_many(items: Mapping[str, Any], ttl: float | None = None) -> None:
    """Store every `key: value` of the mapping `items` in one step: all of them or, on a
    `KVError`, none. `ttl` (seconds) applies to each. At most 1000 entries."""
    if not hasattr(items, "items"):
        raise KVError(f"set_many takes a mapping of keys to values, not {type(items).__name__}")
    ttl_ms = _ttl_ms(ttl)
    entries: list[tuple[str, str | None]] = []
    for key, value in items.items():
        _check_key(key)
        entries.append((key, _encode(value)))
    _write(entries, ttl_ms)


def delete_many(keys: Iterable[str]) -> None:  # (the parameter hides the `keys` function in here only)
    """Remove every key in `keys` (an iterable of keys) in one step: all of them or, on a
    `KVError`, none. Keys that are absent are no error. At most 1000 keys."""
    if isinstance(keys, str) or not hasattr(keys, "__iter__"):
        raise KVError(f"delete_many takes an iterable of keys (a list, say), not {type(keys).__name__}")
    entries: list[tuple[str, str | None]] = []
    for key in keys:
        _check_key(key)
        entries.append((key, None))
    _write(entries, None)


def _write(entries: list[tuple[str, str | None]], ttl_ms: int | None) -> None:
    if len(entries) > MAX_ENTRIES:
        raise KVError(f"one write takes at most {MAX_ENTRIES} entries, not {len(entries)}")
    if entries:
        _call(_host.write, entries, ttl_ms)
