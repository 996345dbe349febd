"""argon2-cffi's deprecated mid-level functions."""

import os
import warnings

from ._password_hasher import (
    DEFAULT_HASH_LENGTH,
    DEFAULT_MEMORY_COST,
    DEFAULT_PARALLELISM,
    DEFAULT_RANDOM_SALT_LENGTH,
    DEFAULT_TIME_COST,
)
from .low_level import Type, hash_secret, hash_secret_raw, verify_secret

_INSTEAD = " is deprecated, use argon2.PasswordHasher instead"


def hash_password(
    password,
    salt=None,
    time_cost=DEFAULT_TIME_COST,
    memory_cost=DEFAULT_MEMORY_COST,
    parallelism=DEFAULT_PARALLELISM,
    hash_len=DEFAULT_HASH_LENGTH,
    type=Type.I,
):
    """Deprecated: `argon2.low_level.hash_secret` with default parameters."""
    warnings.warn("argon2.hash_password" + _INSTEAD, DeprecationWarning, stacklevel=2)
    salt = os.urandom(DEFAULT_RANDOM_SALT_LENGTH) if salt is None else salt
    return hash_secret(password, salt, time_cost, memory_cost, parallelism, hash_len, type)


def hash_password_raw(
    password,
    salt=None,
    time_cost=DEFAULT_TIME_COST,
    memory_cost=DEFAULT_MEMORY_COST,
    parallelism=DEFAULT_PARALLELISM,
    hash_len=DEFAULT_HASH_LENGTH,
    type=Type.I,
):
    """Deprecated: `argon2.low_level.hash_secret_raw` with default parameters."""
    warnings.warn("argon2.hash_password_raw" + _INSTEAD, DeprecationWarning, stacklevel=2)
    salt = os.urandom(DEFAULT_RANDOM_SALT_LENGTH) if salt is None else salt
    return hash_secret_raw(password, salt, time_cost, memory_cost, parallelism, hash_len, type)


def verify_password(hash, password, type=Type.I):
    """Deprecated: `argon2.low_level.verify_secret`."""
    warnings.warn("argon2.verify_password" + _INSTEAD, DeprecationWarning, stacklevel=2)
    return verify_secret(hash, password, type)
