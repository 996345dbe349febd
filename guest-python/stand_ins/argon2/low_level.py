"""argon2-cffi's low-level functions, computed by the host (`passwords.argon2-hash`).

The host computes raw Argon2 hashes with libargon2's rules and messages; this module writes and
reads their encoded form (`$argon2id$v=19$m=65536,t=3,p=4$<salt>$<hash>`, standard base64
without padding) exactly as libargon2 does. `ffi` and `core` (the raw cffi bindings) do not
exist here.
"""

import base64
import binascii
import hmac
import operator
import re
from enum import Enum

from filerouter.passwords import buffer as _buffer
from filerouter.passwords import call as _call
from wit_world.imports import passwords as _host

from .exceptions import HashingError, VerificationError, VerifyMismatchError

__all__ = [
    "ARGON2_VERSION",
    "Type",
    "hash_secret",
    "hash_secret_raw",
    "verify_secret",
]

ARGON2_VERSION = 19
"""The latest version of the Argon2 algorithm (0x13), used by default."""


class Type(Enum):
    """Argon2's variants (libargon2's numbers)."""

    D = 0
    I = 1  # noqa: E741
    ID = 2


_VARIANT = {
    Type.D: _host.Argon2Variant.ARGON2D,
    Type.I: _host.Argon2Variant.ARGON2I,
    Type.ID: _host.Argon2Variant.ARGON2ID,
}
_NAME = {Type.D: "argon2d", Type.I: "argon2i", Type.ID: "argon2id"}


def _uint32(value, name):
    value = operator.index(value)
    if not 0 <= value < 2**32:
        raise OverflowError(f"{name}: integer {value} does not fit 'uint32_t'")
    return value


def _raw(secret, salt, time_cost, memory_cost, parallelism, hash_len, type, version, error):
    if not isinstance(type, Type):
        raise TypeError(f"type must be an argon2.Type, not {type!r}")
    return _call(
        _host.argon2_hash,
        _VARIANT[type],
        _uint32(version, "version"),
        _buffer(secret),
        _buffer(salt),
        _uint32(time_cost, "time_cost"),
        _uint32(memory_cost, "memory_cost"),
        _uint32(parallelism, "parallelism"),
        _uint32(hash_len, "hash_len"),
        error=error,
    )


def _b64(data):
    return base64.b64encode(data).rstrip(b"=")


def hash_secret(secret, salt, time_cost, memory_cost, parallelism, hash_len, type, version=ARGON2_VERSION):
    """Hash `secret` and return an encoded hash (which `verify_secret` takes)."""
    raw = _raw(secret, salt, time_cost, memory_cost, parallelism, hash_len, type, version, HashingError)
    return b"$%s$v=%d$m=%d,t=%d,p=%d$%s$%s" % (
        _NAME[type].encode(),
        version,
        memory_cost,
        time_cost,
        parallelism,
        _b64(_buffer(salt)),
        _b64(raw),
    )


def hash_secret_raw(secret, salt, time_cost, memory_cost, parallelism, hash_len, type, version=ARGON2_VERSION):
    """Hash `secret` and return the raw hash (`hash_len` bytes)."""
    return _raw(secret, salt, time_cost, memory_cost, parallelism, hash_len, type, version, HashingError)


# libargon2's decimals: digits without a leading zero, at most 2**32 - 1.
_DECIMAL = rb"(0|[1-9][0-9]*)"
_B64 = rb"([A-Za-z0-9+/]*)"


def _decode_b64(text):
    """Standard base64 without padding, refusing what libargon2 refuses (a lone last character,
    set bits past the last byte)."""
    if len(text) % 4 == 1:
        return None
    try:
        data = base64.b64decode(text + b"=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        return None
    return data if _b64(data) == text else None


def _decode(hash, type):
    """(version, m, t, p, salt, digest) of an encoded hash of `type`, as libargon2's
    `decode_string` reads it; None if it does not."""
    pattern = (
        rb"\$" + _NAME[type].encode() + rb"(?:\$v=" + _DECIMAL + rb")?"
        rb"\$m=" + _DECIMAL + rb",t=" + _DECIMAL + rb",p=" + _DECIMAL + rb"\$" + _B64 + rb"\$" + _B64
    )
    match = re.fullmatch(pattern, hash)
    if match is None:
        return None
    version, m, t, p, salt, digest = match.groups()
    numbers = [0x10 if version is None else int(version), int(m), int(t), int(p)]
    if any(n >= 2**32 for n in numbers):
        return None
    salt, digest = _decode_b64(salt), _decode_b64(digest)
    if salt is None or digest is None:
        return None
    return (*numbers, salt, digest)


def verify_secret(hash, secret, type):
    """Whether `secret` is the secret of the encoded `hash` of `type`: True, or an exception."""
    hash = _buffer(hash).split(b"\0", 1)[0]
    if not isinstance(type, Type):
        raise TypeError(f"type must be an argon2.Type, not {type!r}")
    decoded = _decode(hash, type)
    if decoded is None:
        raise VerificationError("Decoding failed")
    version, m, t, p, salt, digest = decoded
    again = _raw(secret, salt, t, m, p, len(digest), type, version, VerificationError)
    if not hmac.compare_digest(again, digest):
        raise VerifyMismatchError("The password does not match the supplied hash")
    return True


def error_to_str(error):
    """libargon2's message for an error code (the ones this package can meet)."""
    return _MESSAGES.get(error, "Unknown error code")


_MESSAGES = {
    0: "OK",
    -2: "Output is too short",
    -6: "Salt is too short",
    -12: "Time cost is too small",
    -14: "Memory cost is too small",
    -15: "Memory cost is too large",
    -16: "Too few lanes",
    -17: "Too many lanes",
    -22: "Memory allocation error",
    -26: "There is no such version of Argon2",
    -32: "Decoding failed",
    -35: "The password does not match the supplied hash",
}
