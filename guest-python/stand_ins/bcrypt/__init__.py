"""`bcrypt` inside the filerouter sandbox: PyPI's bcrypt API, computed by the host at native speed.

PyPI's bcrypt is native code, which the sandbox cannot load, and pure-Python bcrypt is far too
slow (cost 12: about 47 s in the sandbox). This package takes its place (`filerouter packages
install` leaves PyPI's out) and hands the work to the host (the `passwords` interface of
`wit/filerouter.wit`), on the request's own thread: the CPU time counts against the request's
`cpu_ms`, and a request past its limit is stopped in the middle of a hash (504).

    import bcrypt

    hashed = bcrypt.hashpw(b"correct horse", bcrypt.gensalt())   # $2b$12$...
    bcrypt.checkpw(b"correct horse", hashed)                     # True
    key = bcrypt.kdf(b"password", b"salt", 32, 100)              # bcrypt_pbkdf

It behaves as bcrypt 4.3: a password longer than 72 bytes is truncated to its first 72 (as
passlib 1.7.4 expects; bcrypt 5.0 raises ValueError instead), and hashes interoperate with
every bcrypt (`$2a$`, `$2b$`, `$2y$`).
"""

import operator
import os
import warnings

from filerouter.passwords import call as _call
from wit_world.imports import passwords as _host

from . import __about__
from .__about__ import __version__

__title__ = "bcrypt"
__summary__ = "Modern(-ish) password hashing for your software and your servers"
__uri__ = "https://github.com/pyca/bcrypt/"
__author__ = "The Python Cryptographic Authority developers"
__email__ = "cryptography-dev@python.org"
__license__ = "Apache License, Version 2.0"
__copyright__ = f"Copyright 2013-2025 {__author__}"

__all__ = [
    "__author__",
    "__copyright__",
    "__email__",
    "__license__",
    "__summary__",
    "__title__",
    "__uri__",
    "__version__",
    "checkpw",
    "gensalt",
    "hashpw",
    "kdf",
]

_ALPHABET = b"./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _bytes(value, name):
    if not isinstance(value, bytes):
        raise TypeError(f"argument '{name}': '{type(value).__name__}' object cannot be converted to 'PyBytes'")
    return value


def _unsigned(value, name, bits):
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"argument '{name}': '{type(value).__name__}' object cannot be interpreted as an integer") from None
    if not 0 <= value < 2**bits:
        raise OverflowError(f"argument '{name}': out of range integral type conversion attempted")
    return value


def _encode(data):
    """bcrypt's base64, without padding."""
    out = bytearray()
    for i in range(0, len(data), 3):
        chunk = data[i : i + 3]
        n = int.from_bytes(chunk.ljust(3, b"\0"), "big")
        for j in range(len(chunk) + 1):
            out.append(_ALPHABET[(n >> (18 - 6 * j)) & 63])
    return bytes(out)


def gensalt(rounds=12, prefix=b"2b"):
    """A new salt for `hashpw`: `$2b$12$` and 16 random bytes in bcrypt's base64."""
    rounds = _unsigned(rounds, "rounds", 16)
    prefix = b"2b" if prefix is None else _bytes(prefix, "prefix")
    if prefix not in (b"2a", b"2b"):
        raise ValueError("Supported prefixes are b'2a' or b'2b'")
    if not 4 <= rounds <= 31:
        raise ValueError("Invalid rounds")
    return b"$" + prefix + b"$" + b"%02d" % rounds + b"$" + _encode(os.urandom(16))


def hashpw(password, salt):
    """The bcrypt hash of `password` with `salt` (from `gensalt`, or a whole hash)."""
    return _call(_host.bcrypt_hash, _bytes(password, "password"), _bytes(salt, "salt"))


def checkpw(password, hashed_password):
    """Whether `password` matches `hashed_password` (compared in constant time)."""
    return _call(_host.bcrypt_check, _bytes(password, "password"), _bytes(hashed_password, "hashed_password"))


def kdf(password, salt, desired_key_bytes, rounds, ignore_few_rounds=False):
    """bcrypt_pbkdf: `desired_key_bytes` bytes derived from `password` and `salt`."""
    password = _bytes(password, "password")
    salt = _bytes(salt, "salt")
    desired_key_bytes = _unsigned(desired_key_bytes, "desired_key_bytes", 64)
    rounds = _unsigned(rounds, "rounds", 32)
    if not password or not salt:
        raise ValueError("password and salt must not be empty")
    if desired_key_bytes == 0 or desired_key_bytes > 512:
        raise ValueError("desired_key_bytes must be 1-512")
    if rounds < 1:
        raise ValueError("rounds must be 1 or more")
    if rounds < 50 and not ignore_few_rounds:
        # They probably think the rounds are logarithmic, as bcrypt's cost is.
        warnings.warn(
            f"Warning: bcrypt.kdf() called with only {rounds} round(s). This few is not secure: "
            "the parameter is linear, like PBKDF2.",
            UserWarning,
            stacklevel=2,
        )
    return _call(_host.bcrypt_kdf, password, salt, desired_key_bytes, rounds)


