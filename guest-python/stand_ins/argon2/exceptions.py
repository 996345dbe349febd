"""argon2-cffi's exceptions, with the same names and classes."""


class Argon2Error(Exception):
    """Superclass of all argon2 exceptions. Never raised directly."""


class VerificationError(Argon2Error):
    """Verification failed; the reason (Argon2's message) is in `args[0]`."""


class VerifyMismatchError(VerificationError):
    """The secret does not match the hash."""


class HashingError(Argon2Error):
    """Hashing failed; the reason (Argon2's message) is in `args[0]`."""


class InvalidHashError(ValueError):
    """The hash is so clearly invalid that it could not be passed to Argon2."""


class UnsupportedParametersError(ValueError):
    """The platform does not support the parameters (never raised here: the host computes)."""


InvalidHash = InvalidHashError
"""Deprecated alias for `InvalidHashError`."""
