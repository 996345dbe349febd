"""`argon2` inside the filerouter sandbox: argon2-cffi's API, computed by the host at native speed.

argon2-cffi binds libargon2, native code the sandbox cannot load. This package takes its place
(`filerouter packages install` leaves argon2-cffi out) with the same modules and names
(`PasswordHasher`, `Parameters`, `Type`, `extract_parameters`, `exceptions`, `low_level`,
`profiles`), and the host computes the hashes (the `passwords` interface of
`wit/filerouter.wit`) on the request's own thread, counted against its `cpu_ms`.

    from argon2 import PasswordHasher

    ph = PasswordHasher()                     # Argon2id, t=3, m=64 MiB, p=4 (RFC 9106)
    hashed = ph.hash("correct horse")         # $argon2id$v=19$m=65536,t=3,p=4$...
    ph.verify(hashed, "correct horse")        # True, or VerifyMismatchError

Hashes interoperate with argon2-cffi's. Bounds: `memory_cost` at most the request's memory
limit (`memory_mb`), `time_cost × memory_cost` at most 2 GiB (a `HashingError` beyond);
`low_level.ffi` and `low_level.core` (raw cffi) do not exist.
"""

from . import exceptions, low_level, profiles
from ._legacy import hash_password, hash_password_raw, verify_password
from ._password_hasher import (
    DEFAULT_HASH_LENGTH,
    DEFAULT_MEMORY_COST,
    DEFAULT_PARALLELISM,
    DEFAULT_RANDOM_SALT_LENGTH,
    DEFAULT_TIME_COST,
    PasswordHasher,
)
from ._utils import Parameters, extract_parameters
from .low_level import Type

__title__ = "argon2-cffi"
__author__ = "Hynek Schlawack"
__copyright__ = "Copyright (c) 2015 " + __author__
__license__ = "MIT"

__all__ = [
    "DEFAULT_HASH_LENGTH",
    "DEFAULT_MEMORY_COST",
    "DEFAULT_PARALLELISM",
    "DEFAULT_RANDOM_SALT_LENGTH",
    "DEFAULT_TIME_COST",
    "Parameters",
    "PasswordHasher",
    "Type",
    "exceptions",
    "extract_parameters",
    "hash_password",
    "hash_password_raw",
    "low_level",
    "profiles",
    "verify_password",
]

_METADATA = {
    "__version__": "25.1.0",
    "__description__": "Argon2 for Python",
    "__uri__": "https://argon2-cffi.readthedocs.io/",
    "__url__": "https://argon2-cffi.readthedocs.io/",
    "__email__": "hs@ox.cx",
}


def __getattr__(name):
    if name not in _METADATA:
        raise AttributeError(f"module {__name__} has no attribute {name}")
    import warnings

    warnings.warn(
        f"Accessing argon2.{name} is deprecated and will be removed in a future release.",
        DeprecationWarning,
        stacklevel=2,
    )
    return _METADATA[name]
