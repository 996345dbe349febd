"""Socket calls from route code fail saying that the sandbox has no sockets, and where HTTP
calls go instead (`filerouter.http`, `urllib.request`: through the host's outbound gate).

The host refuses every socket and every name lookup, and WASI's answers read like a broken
machine (`[Errno -4] Non-recoverable error`, `[Errno 2] Permission denied`). Imported at build
time (dispatcher.py), this wraps the `socket` functions that reach the network so that their
errors say why, with the same exception types and errno values as before (code that catches
`OSError` or `socket.gaierror` still does), and gives `http.client` and `urllib.request` their
HTTPS classes back (CPython on WASI has no `ssl`, so they were left out): an `https://` URL
then fails for the same reason as an `http://` one instead of as an "unknown url type".
"""

import functools
import http.client
import socket
import urllib.request

NO_NETWORK = (
    "the filerouter sandbox has no sockets: route code cannot resolve names or open "
    "connections itself; call HTTP services with filerouter.http or urllib.request, which the "
    "host makes for it, to the origins config.py's outbound[\"allow\"] lists"
)


def _explain(error):
    """`error` (an OSError) again, of the same type and errno, saying that there is no network."""
    reason = error.strerror or str(error)
    try:
        return type(error)(error.errno, f"{NO_NETWORK} ({reason})")
    except TypeError:
        return OSError(error.errno, f"{NO_NETWORK} ({reason})")


def _no_network(function):
    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except OSError as error:
            if NO_NETWORK in str(error):
                raise
            raise _explain(error) from None

    return call


for _name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo"):
    setattr(socket, _name, _no_network(getattr(socket, _name)))
for _name in ("__init__", "connect", "bind", "sendto"):
    setattr(socket.socket, _name, _no_network(getattr(socket.socket, _name)))
del _name

if not hasattr(http.client, "HTTPSConnection"):

    class HTTPSConnection(http.client.HTTPConnection):
        """`http.client.HTTPSConnection` where there is no network: connecting fails saying so."""

        default_port = http.client.HTTPS_PORT

        def __init__(self, host, port=None, *, context=None, **kwargs):
            super().__init__(host, port, **kwargs)

    http.client.HTTPSConnection = HTTPSConnection
    http.client.__all__.append("HTTPSConnection")

if not hasattr(urllib.request, "HTTPSHandler"):

    class HTTPSHandler(urllib.request.AbstractHTTPHandler):
        def __init__(self, debuglevel=None, context=None, check_hostname=None):
            super().__init__(debuglevel)

        def https_open(self, req):
            return self.do_open(http.client.HTTPSConnection, req)

        https_request = urllib.request.AbstractHTTPHandler.do_request_

    urllib.request.HTTPSHandler = HTTPSHandler
    urllib.request.__all__.append("HTTPSHandler")
