"""A stand-in for the standard library's `ssl`, which CPython on WASI does not have
(`preload` installs it as `ssl`).

The sandbox gives route code no network, so TLS can never be used; but some pure-Python packages
import `ssl` when they are imported (PyJWT's JWKS client does `from ssl import SSLContext`).
This module lets them import, and anything that tries TLS gets an `SSLError` that says why.
"""

CERT_NONE = 0
CERT_OPTIONAL = 1
CERT_REQUIRED = 2
PROTOCOL_TLS = 2
PROTOCOL_TLS_CLIENT = 16
PROTOCOL_TLS_SERVER = 17
HAS_SNI = False
OPENSSL_VERSION = "none (filerouter sandbox: no network)"

_WHY = "TLS is not available in the filerouter sandbox: route code has no network"


class SSLError(OSError):
    pass


class SSLCertVerificationError(SSLError, ValueError):
    pass


class SSLZeroReturnError(SSLError):
    pass


class SSLWantReadError(SSLError):
    pass


class SSLWantWriteError(SSLError):
    pass


class SSLSyscallError(SSLError):
    pass


class SSLEOFError(SSLError):
    pass


class SSLContext:
    def __init__(self, protocol=None, *args, **kwargs):
        raise SSLError(_WHY)


class SSLSocket:
    def __init__(self, *args, **kwargs):
        raise SSLError(_WHY)


def create_default_context(*args, **kwargs):
    raise SSLError(_WHY)
