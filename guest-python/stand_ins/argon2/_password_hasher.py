"""argon2-cffi's `PasswordHasher`."""

import os

from ._utils import Parameters, _check_types, extract_parameters, validate_params_for_platform
from .exceptions import InvalidHashError
from .low_level import Type, hash_secret, verify_secret
from .profiles import get_default_parameters

_default = get_default_parameters()
DEFAULT_RANDOM_SALT_LENGTH = _default.salt_len
DEFAULT_HASH_LENGTH = _default.hash_len
DEFAULT_TIME_COST = _default.time_cost
DEFAULT_MEMORY_COST = _default.memory_cost
DEFAULT_PARALLELISM = _default.parallelism


def _ensure_bytes(s, encoding):
    return s if isinstance(s, bytes) else s.encode(encoding)


class PasswordHasher:
    """Hashes passwords with Argon2id (RFC 9106's low-memory profile by default) and a random
    salt, and verifies any Argon2 hash."""

    __slots__ = ["_parameters", "encoding"]

    def __init__(
        self,
        time_cost=DEFAULT_TIME_COST,
        memory_cost=DEFAULT_MEMORY_COST,
        parallelism=DEFAULT_PARALLELISM,
        hash_len=DEFAULT_HASH_LENGTH,
        salt_len=DEFAULT_RANDOM_SALT_LENGTH,
        encoding="utf-8",
        type=Type.ID,
    ):
        e = _check_types(
            time_cost=(time_cost, int),
            memory_cost=(memory_cost, int),
            parallelism=(parallelism, int),
            hash_len=(hash_len, int),
            salt_len=(salt_len, int),
            encoding=(encoding, str),
            type=(type, Type),
        )
        if e:
            raise TypeError(e)
        params = Parameters(
            type=type,
            version=19,
            salt_len=salt_len,
            hash_len=hash_len,
            time_cost=time_cost,
            memory_cost=memory_cost,
            parallelism=parallelism,
        )
        validate_params_for_platform(params)
        self._parameters = params
        self.encoding = encoding

    @classmethod
    def from_parameters(cls, params):
        """A `PasswordHasher` with the parameters of `params` (a `Parameters`)."""
        return cls(
            time_cost=params.time_cost,
            memory_cost=params.memory_cost,
            parallelism=params.parallelism,
            hash_len=params.hash_len,
            salt_len=params.salt_len,
            type=params.type,
        )

    @property
    def time_cost(self):
        return self._parameters.time_cost

    @property
    def memory_cost(self):
        return self._parameters.memory_cost

    @property
    def parallelism(self):
        return self._parameters.parallelism

    @property
    def hash_len(self):
        return self._parameters.hash_len

    @property
    def salt_len(self):
        return self._parameters.salt_len

    @property
    def type(self):
        return self._parameters.type

    def hash(self, password, *, salt=None):
        """The encoded hash of `password` (a random salt unless one is given)."""
        return hash_secret(
            secret=_ensure_bytes(password, self.encoding),
            salt=salt or os.urandom(self.salt_len),
            time_cost=self.time_cost,
            memory_cost=self.memory_cost,
            parallelism=self.parallelism,
            hash_len=self.hash_len,
            type=self.type,
        ).decode("ascii")

    _header_to_type = {b"$argon2i$": Type.I, b"$argon2d$": Type.D, b"$argon2id": Type.ID}

    def verify(self, hash, password):
        """True if `password` matches `hash`; else VerifyMismatchError (or VerificationError,
        InvalidHashError for a hash that is not one)."""
        hash = _ensure_bytes(hash, "ascii")
        try:
            hash_type = self._header_to_type[hash[:9]]
        except LookupError:
            raise InvalidHashError from None
        return verify_secret(hash, _ensure_bytes(password, self.encoding), hash_type)

    def check_needs_rehash(self, hash):
        """Whether `hash` was made with other parameters than this hasher's."""
        if isinstance(hash, bytes):
            hash = hash.decode("ascii")
        return self._parameters != extract_parameters(hash)
