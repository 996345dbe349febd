"""`urllib.request` through the host's outbound gate, like `filerouter.http`.

CPython's `urllib.request` opens sockets through `http.client`, and the sandbox has none. Imported
at build time (dispatcher.py), this gives `HTTPHandler` and `HTTPSHandler` an `open` that makes
the call through the host instead (`filerouter.http`'s calls: the same allow-list, address
checks, limits and log). Everything else is urllib's own: `urlopen`, `Request`, openers built
with `build_opener`, its redirect handler (each hop a new call, checked again), `HTTPError` for
4xx and 5xx. A call the host refuses or cannot make raises `urllib.error.URLError`, whose
`reason` is `filerouter.http`'s exception (`OutboundRefused`, `TimeoutException`, ...).
"""

import http.client
import io
import urllib.error
import urllib.request
import urllib.response

from filerouter import http as _http

# Headers the host sets itself (`wit/filerouter.wit`, `interface outbound`).
_HOST_HEADERS = {"host", "connection", "content-length", "transfer-encoding", "upgrade"}


class _Body(io.RawIOBase):
    """A response body read from the host as it arrives."""

    def __init__(self, response):
        self._response = response
        self._pending = b""

    def readable(self):
        return True

    def readinto(self, buffer):
        if not self._pending:
            try:
                self._pending = self._response._chunk()
            except _http.RequestError as e:
                raise OSError(str(e)) from None
            if not self._pending:
                return 0
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self):
        self._response.close()
        super().close()


def _open(req):
    # urlopen's default timeout (none given) is the project's `outbound["timeout_s"]`.
    timeout = req.timeout if isinstance(req.timeout, (int, float)) and req.timeout > 0 else _http.PROJECT_TIMEOUT
    headers = dict(req.unredirected_hdrs)
    headers.update({k: v for k, v in req.headers.items() if k not in headers})
    pairs = [(name.title(), value) for name, value in headers.items() if name.lower() not in _HOST_HEADERS]
    info = _http.RequestInfo(req.get_method(), req.full_url, _http.Headers(pairs))
    data = req.data
    if data is None:
        body = b""
    elif isinstance(data, (bytes, bytearray, memoryview)):
        body = bytes(data)
    elif hasattr(data, "read"):
        body = iter(lambda: data.read(64 * 1024), b"")
    else:
        body = data
    try:
        # urllib gives the body as it came, its content-encoding undone by no one.
        call, rest = _http._start(info, body, float(timeout), decode=False)
        if rest is not None:
            for chunk in rest:
                _http._write(call, chunk, True, info)
            _http._write(call, b"", False, info)
        response = _http._head(call, info)
    except _http.RequestError as e:
        raise urllib.error.URLError(e) from None
    message = http.client.HTTPMessage()
    for name, value in response.headers.items():
        message[name] = value
    answer = urllib.response.addinfourl(io.BufferedReader(_Body(response)), message, req.full_url, response.status_code)
    answer.msg = response.reason_phrase
    return answer


def _http_open(self, req):
    return _open(req)


urllib.request.HTTPHandler.http_open = _http_open
urllib.request.HTTPSHandler.https_open = _http_open
