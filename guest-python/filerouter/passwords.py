"""Password hashing and key derivation, computed by the host at native speed.

CPython on WASI has no OpenSSL, so its `hashlib` lacks `pbkdf2_hmac` and `scrypt`, and the PyPI
packages `bcrypt` and `argon2-cffi` are native code the sandbox cannot load. The host computes
all of them instead (the `passwords` interface of `wit/filerouter.wit`), on the request's own
thread, so their CPU time counts against the request's `cpu_ms`. This module, imported with the
`filerouter` package while the guest is built, gives `hashlib` the two functions (with
CPython's signatures and exceptions) and puts the sandbox's own `bcrypt` and `argon2` packages
(`guest-python/stand_ins/bcrypt/`, `guest-python/stand_ins/argon2/`: the APIs of PyPI's bcrypt and argon2-cffi)
into the snapshot, so that route code, passlib and pwdlib use them unchanged::

    import hashlib
    key = hashlib.pbkdf2_hmac("sha256", b"password", salt, 600_000)

    import bcrypt
    hashed = bcrypt.hashpw(b"password", bcrypt.gensalt())   # cost 12
    bcrypt.checkpw(b"password", hashed)                     # True

    from argon2 import PasswordHasher
    PasswordHasher().verify(PasswordHasher().hash("password"), "password")

Bounds (the host enforces them): Argon2's and scrypt's memory at most the request's memory
limit, Argon2's `time_cost × memory_cost` at most 2 GiB, results at most 1 MiB.
"""

from __future__ import annotations

import hashlib
import operator
from typing import TYPE_CHECKING, Any, SupportsIndex

# componentize-py's modules: only inside the sandbox.
from ._sandbox import INSIDE, Err
from ._sandbox import passwords as _host

if TYPE_CHECKING:
    from collections.abc import Callable

    from _typeshed import ReadableBuffer

_INT_MAX = 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

# The hashes `pbkdf2_hmac` knows (the host's list), by normalized name, and their sizes.
_DIGEST_SIZES = {
    "md5": 16,
    "sha1": 20,
    "sha-1": 20,
    "sha224": 28,
    "sha-224": 28,
    "sha2-224": 28,
    "sha256": 32,
    "sha-256": 32,
    "sha2-256": 32,
    "sha384": 48,
    "sha-384": 48,
    "sha2-384": 48,
    "sha512": 64,
    "sha-512": 64,
    "sha2-512": 64,
    "sha512-224": 28,
    "sha-512/224": 28,
    "sha2-512/224": 28,
    "sha512-256": 32,
    "sha-512/256": 32,
    "sha2-512/256": 32,
    "sha3-224": 28,
    "sha3-256": 32,
    "sha3-384": 48,
    "sha3-512": 64,
}


class UnsupportedDigestmodError(ValueError):
    """A hash name `pbkdf2_hmac` does not know (CPython's `_hashlib.UnsupportedDigestmodError`)."""


def buffer(value: object) -> bytes:
    """A bytes-like argument as `bytes`, or CPython's TypeError for anything else."""
    if not isinstance(value, str):
        try:
            return bytes(memoryview(value))  # type: ignore[arg-type]  # TypeError for the rest
        except TypeError:
            pass
    raise TypeError(f"a bytes-like object is required, not '{type(value).__name__}'")


def _c_long(value: SupportsIndex) -> int:
    value = operator.index(value)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise OverflowError("Python int too large to convert to C long")
    return value


def _c_unsigned_long(value: SupportsIndex) -> int:
    value = operator.index(value)
    if value < 0:
        raise ValueError("Cannot convert negative int")
    if value >= 2**64:
        raise OverflowError("Python int too large for C unsigned long")
    return value


def call(function: Callable[..., Any], *args: Any, error: type[Exception] = ValueError) -> Any:
    """Call the host's `function`; its `err` becomes `error`."""
    try:
        return function(*args)
    except Err as e:
        raise error(e.value) from None


def pbkdf2_hmac(
    hash_name: str, password: ReadableBuffer, salt: ReadableBuffer, iterations: int, dklen: int | None = None
) -> bytes:
    """Password based key derivation function 2 (PKCS #5 v2.0) with HMAC as pseudorandom function."""
    if not isinstance(hash_name, str):
        raise TypeError(f"pbkdf2_hmac() argument 'hash_name' must be str, not {type(hash_name).__name__}")
    password = buffer(password)
    salt = buffer(salt)
    iterations = _c_long(iterations)
    size = _DIGEST_SIZES.get(hash_name.lower().replace("_", "-"))
    if size is None:
        raise UnsupportedDigestmodError(f"unsupported hash type {hash_name}")
    if iterations < 1:
        raise ValueError("iteration value must be greater than 0.")
    if iterations > _INT_MAX:
        raise OverflowError("iteration value is too great.")
    dklen = size if dklen is None else _c_long(dklen)
    if dklen < 1:
        raise ValueError("key length must be greater than 0.")
    if dklen > _INT_MAX:
        raise OverflowError("key length is too great.")
    key: bytes = call(_host.pbkdf2_hmac, hash_name, password, salt, iterations, dklen)
    return key


def scrypt(
    password: ReadableBuffer, *, salt: ReadableBuffer, n: int, r: int, p: int, maxmem: int = 0, dklen: int = 64
) -> bytes:
    """scrypt password-based key derivation function."""
    password = buffer(password)
    salt = buffer(salt)
    n = _c_unsigned_long(n)
    r = _c_unsigned_long(r)
    p = _c_unsigned_long(p)
    maxmem = _c_long(maxmem)
    dklen = _c_long(dklen)
    if n < 2 or n & (n - 1):
        raise ValueError("n must be a power of 2.")
    if not 0 <= maxmem <= _INT_MAX:
        raise ValueError(f"maxmem must be positive and smaller than {_INT_MAX}")
    if not 1 <= dklen <= _INT_MAX:
        raise ValueError(f"dklen must be greater than 0 and smaller than {_INT_MAX}")
    if r >= 2**30 or p >= 2**30:
        # OpenSSL's rule is r * p < 2**30 (each at least 1).
        raise ValueError("Invalid parameter combination for n, r, p, maxmem.")
    key: bytes = call(_host.scrypt, password, salt, n, r, p, maxmem, dklen)
    return key


# Inside the sandbox only: on your machine (the wheel's `filerouter`) `hashlib` has its own, and
# `bcrypt` and `argon2` are PyPI's, if anything.
pbkdf2_hmac.__module__ = scrypt.__module__ = "hashlib"
if INSIDE:
    hashlib.pbkdf2_hmac = pbkdf2_hmac
    hashlib.scrypt = scrypt
    if "pbkdf2_hmac" not in hashlib.__all__:
        hashlib.__all__ += ("pbkdf2_hmac",)  # type: ignore[assignment]  # (typeshed's tuple has it)

# The packages themselves, into the snapshot (they import this module for `call`). Checkers skip
# them: outside the sandbox these names are PyPI's packages, if anything.
if INSIDE and not TYPE_CHECKING:
    import argon2  # noqa: E402, F401, I001
    import argon2.exceptions  # noqa: E402, F401
    import argon2.low_level  # noqa: E402, F401
    import argon2.profiles  # noqa: E402, F401
    import bcrypt  # noqa: E402, F401
    import bcrypt.__about__  # noqa: E402, F401
