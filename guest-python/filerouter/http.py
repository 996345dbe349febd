"""`filerouter.http`: call other HTTP services from route code, in httpx's shapes.

    from filerouter import http

    async def POST(request):
        r = await http.post("https://api.stripe.com/v1/charges", data={...}, timeout=10)
        r.raise_for_status()
        return {"status": r.status_code, "id": r.json()["id"]}

    def GET(request):                          # the same, without async
        with http.Client(base_url="https://api.example.com") as client:
            return client.get("/items", params={"page": 2}).json()

    async with http.AsyncClient() as client:   # asyncio.gather of calls waits for the slowest
        a, b = await asyncio.gather(client.get(URL_A), client.get(URL_B))

    async with http.AsyncClient().stream("GET", url) as r:   # the body as it arrives
        async for chunk in r.aiter_bytes():
            ...

The host makes every call (`wit/filerouter.wit`, `interface outbound`): nothing is allowed by
default, and `config.py`'s `outbound = {"allow": ["https://api.stripe.com", ...]}` lists the
origins route code may call. The host checks each address a name resolves to when it connects:
loopback, private and link-local addresses (cloud metadata at 169.254.169.254) only when an
entry names that address. A refusal raises `OutboundRefused`, saying which rule refused and
where to allow it. Redirects are followed only with `follow_redirects=True` (as in httpx), each
hop checked again. `urllib.request.urlopen` goes through the same gate.

Exceptions, as httpx names them: `HTTPError` > `RequestError` > `ConnectError`,
`DecodingError`, `TimeoutException`, `OutboundRefused`, `LimitExceeded`, `TooManyRedirects`, `InvalidURL`;
and `HTTPStatusError` from `raise_for_status()`.
"""

from __future__ import annotations

import asyncio
import json as _json
import math
import urllib.parse
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

from . import _sandbox
from ._sandbox import Err
from ._sandbox import outbound as _host
from .responses import MutableHeaders

__all__ = [
    "AsyncClient",
    "Client",
    "ConnectError",
    "DecodingError",
    "HTTPError",
    "HTTPStatusError",
    "Headers",
    "InvalidURL",
    "LimitExceeded",
    "OutboundRefused",
    "RequestError",
    "Response",
    "TimeoutException",
    "TooManyRedirects",
    "delete",
    "get",
    "head",
    "options",
    "patch",
    "post",
    "put",
    "request",
]

# What a call sends as its timeout when it names none: the project's `outbound["timeout_s"]`
# (10 s unless config.py says otherwise). `timeout=None` sends infinity: no timeout of its own,
# only what is left of the request's `wall_s`.
PROJECT_TIMEOUT = 0.0
DEFAULT_MAX_REDIRECTS = 20
_CHUNK = 64 * 1024
_REDIRECTS = (301, 302, 303, 307, 308)


class HTTPError(Exception):
    """Every error of this module."""


class RequestError(HTTPError):
    """A call that got no usable response."""

    def __init__(self, message: str, *, request: RequestInfo | None = None) -> None:
        super().__init__(message)
        self.request = request


class ConnectError(RequestError):
    """The name did not resolve, the connection or TLS failed, or the peer broke HTTP."""


class DecodingError(RequestError):
    """The response body did not decode from its `content-encoding` (gzip, deflate)."""


class TimeoutException(RequestError):
    """A step of the call took longer than its timeout."""


class OutboundRefused(RequestError):
    """The project's outbound rules refused the call; the message says where to allow it."""


class LimitExceeded(RequestError):
    """A bound of outbound calls was reached: calls per request, calls open, bytes received."""


class TooManyRedirects(RequestError):
    """More redirects than `max_redirects`."""


class InvalidURL(RequestError):
    """The URL, method or a header cannot be sent."""


class HTTPStatusError(HTTPError):
    """`raise_for_status()` on a 4xx or 5xx response."""

    def __init__(self, message: str, *, request: RequestInfo, response: Response) -> None:
        super().__init__(message)
        self.request = request
        self.response = response


_ERRORS: dict[str, type[RequestError]] = {
    "refused": OutboundRefused,
    "invalid": InvalidURL,
    "limit": LimitExceeded,
    "timeout": TimeoutException,
    "network": ConnectError,
    "decoding": DecodingError,
}


def _raise(error: Any, request: RequestInfo | None) -> RequestError:
    """The exception for the host's `error` variant (its class name says the case)."""
    kind = type(error).__name__.rpartition("_")[2].lower()  # `Error_Refused` -> "refused"
    message = getattr(error, "value", str(error))
    return _ERRORS.get(kind, ConnectError)(str(message), request=request)


class Headers(MutableHeaders):
    """Case-insensitive headers, as httpx's: repeated names keep every value, in order;
    `headers["name"]` joins them with ", ", `get_list` gives each."""

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] | None = None) -> None:
        super().__init__(items.items() if isinstance(items, Mapping) else items)

    def get_list(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self._items if k.lower() == name]

    def __getitem__(self, name: str) -> str:
        values = self.get_list(name)
        if not values:
            raise KeyError(name)
        return ", ".join(values)

    def discard(self, name: str) -> None:
        """Remove every value of `name`, if there is one."""
        if name in self:
            del self[name]

    def copy(self) -> Headers:
        return Headers(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


class RequestInfo:
    """What was asked for: `method` and `url` (a response's `request`)."""

    def __init__(self, method: str, url: str, headers: Headers) -> None:
        self.method = method
        self.url = url
        self.headers = headers

    def __repr__(self) -> str:
        return f"<Request({self.method!r}, {self.url!r})>"


class Response:
    """A response: `status_code`, `headers`, `content`, `text`, `json()`; a streamed one
    (`client.stream(...)`) reads its body with `iter_bytes()` or `aiter_bytes()`."""

    def __init__(self, call: int, status: int, headers: Headers, request: RequestInfo) -> None:
        self._call: int | None = call
        self.status_code = status
        self.headers = headers
        self.request = request
        self.url = request.url
        self._content: bytes | None = None

    # -- the body ---------------------------------------------------------------------------

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise HTTPError(
                "the body of a streamed response was not read: call read() or aread() first"
            )
        return self._content

    @property
    def encoding(self) -> str:
        content_type = self.headers.get("content-type", "") or ""
        for part in content_type.split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                return value.strip('"')
        return "utf-8"

    @property
    def text(self) -> str:
        return self.content.decode(self.encoding, errors="replace")

    def json(self, **kwargs: Any) -> Any:
        return _json.loads(self.content, **kwargs)

    def _chunk(self) -> bytes:
        if self._call is None:
            return b""
        try:
            chunk: bytes = _host.read(self._call, _CHUNK)
        except Err as e:
            self.close()
            raise _raise(e.value, self.request) from None
        if not chunk:
            self.close()
        return chunk

    def iter_bytes(self) -> Iterator[bytes]:
        """The body as it arrives (what was read already first)."""
        if self._content is not None:
            if self._content:
                yield self._content
            return
        while chunk := self._chunk():
            yield chunk

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives, waiting without blocking other tasks."""
        if self._content is not None:
            if self._content:
                yield self._content
            return
        while self._call is not None:
            await _news(self._call)
            chunk = self._chunk()
            if not chunk:
                return
            yield chunk

    def read(self) -> bytes:
        if self._content is None:
            self._content = b"".join(self.iter_bytes())
        return self._content

    async def aread(self) -> bytes:
        if self._content is None:
            self._content = b"".join([chunk async for chunk in self.aiter_bytes()])
        return self._content

    def close(self) -> None:
        """Close the call (what is unread is never read)."""
        if self._call is not None:
            _host.close(self._call)
            self._call = None

    async def aclose(self) -> None:
        self.close()

    # -- the status -------------------------------------------------------------------------

    @property
    def reason_phrase(self) -> str:
        from http import HTTPStatus

        try:
            return HTTPStatus(self.status_code).phrase
        except ValueError:
            return ""

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def is_redirect(self) -> bool:
        return self.status_code in _REDIRECTS and "location" in self.headers

    @property
    def is_error(self) -> bool:
        return self.status_code >= 400

    def raise_for_status(self) -> Response:
        if self.is_error:
            kind = "Client error" if self.status_code < 500 else "Server error"
            raise HTTPStatusError(
                f"{kind} '{self.status_code} {self.reason_phrase}' for url '{self.url}'",
                request=self.request,
                response=self,
            )
        return self

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Response [{self.status_code} {self.reason_phrase}]>"


# -- waiting ----------------------------------------------------------------------------------


async def _news(call: int) -> None:
    """Wait until call `call` has news, letting other tasks run: the sandbox's event loop
    waits for every pending call in one host `wait` (`eventloop.py`)."""
    loop = asyncio.get_running_loop()
    watch = getattr(getattr(loop, "_selector", None), "watch_outbound", None)
    if watch is None:  # another event loop: wait in the host, holding this one
        _host.wait([call], None)
        return
    future: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    watch(call, wake)
    await future


# -- building a request -----------------------------------------------------------------------

Content = bytes | str | Iterable[bytes] | AsyncIterable[bytes]


def _merge_url(base_url: str, url: str, params: Mapping[str, Any] | None) -> str:
    if base_url and not urllib.parse.urlsplit(url).scheme:
        url = base_url.rstrip("/") + "/" + url.lstrip("/")
    if params:
        pairs: list[tuple[str, str]] = []
        for key, value in params.items():
            values = value if isinstance(value, (list, tuple)) else [value]
            pairs.extend((str(key), _param(v)) for v in values)
        split = urllib.parse.urlsplit(url)
        query = "&".join(q for q in (split.query, urllib.parse.urlencode(pairs)) if q)
        url = urllib.parse.urlunsplit(split._replace(query=query))
    return url


def _param(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return ""
    return str(value)


def _body(
    headers: Headers,
    content: Content | None,
    data: Mapping[str, Any] | None,
    json: Any,
) -> bytes | Iterable[bytes] | AsyncIterable[bytes]:
    if json is not None:
        if "content-type" not in headers:
            headers["content-type"] = "application/json"
        return _json.dumps(json, separators=(",", ":")).encode()
    if data is not None:
        if "content-type" not in headers:
            headers["content-type"] = "application/x-www-form-urlencoded"
        pairs: list[tuple[str, str]] = []
        for key, value in data.items():
            values = value if isinstance(value, (list, tuple)) else [value]
            pairs.extend((str(key), _param(v)) for v in values)
        return urllib.parse.urlencode(pairs).encode()
    if content is None:
        return b""
    if isinstance(content, str):
        return content.encode()
    if isinstance(content, (bytes, bytearray, memoryview)):
        return bytes(content)
    return content


def _timeout(value: float | None | object, default: float) -> float:
    if value is _UNSET:
        return default
    if value is None:
        return math.inf  # no timeout of its own: what is left of the request's wall_s holds
    if isinstance(value, (int, float)) and value > 0:
        return float(value)
    raise TypeError(f"timeout must be a positive number of seconds or None, not {value!r}")


_UNSET: Any = object()


def _start(
    info: RequestInfo,
    body: bytes | Iterable[bytes] | AsyncIterable[bytes],
    timeout: float,
    decode: bool = True,
) -> tuple[int, Any]:
    """Start the call; its number and the body still to send (an iterator), if any. With
    `decode`, the host gives the body decoded from its gzip or deflate `content-encoding`, as
    httpx does (urllib gives it as it came)."""
    if not _sandbox.INSIDE:
        _sandbox.refuse_outside("http")
    request = _host.Request(
        method=info.method, url=info.url, headers=info.headers.items(), timeout_s=timeout, decode=decode
    )
    whole = isinstance(body, bytes)
    try:
        call: int = _host.start(request, body if whole else b"", not whole)
    except Err as e:
        raise _raise(e.value, info) from None
    return call, (None if whole else body)


def _write(call: int, chunk: bytes, more: bool, info: RequestInfo) -> None:
    try:
        _host.write(call, bytes(chunk), more)
    except Err as e:
        _host.close(call)
        raise _raise(e.value, info) from None


def _head(call: int, info: RequestInfo) -> Response:
    try:
        head = _host.head(call)
    except Err as e:
        _host.close(call)
        raise _raise(e.value, info) from None
    return Response(call, head.status, Headers(head.headers), info)


def _redirect(response: Response, method: str, headers: Headers) -> tuple[str, str, Headers, bool]:
    """Where a redirect goes: (method, url, headers, whether the body is dropped)."""
    location = response.headers.get("location") or ""
    url = urllib.parse.urljoin(response.url, location)
    status = response.status_code
    drop_body = False
    if status == 303 and method != "HEAD" or status in (301, 302) and method == "POST":
        method, drop_body = "GET", True
    headers = headers.copy()
    if drop_body:
        for name in ("content-type", "content-length"):
            headers.discard(name)
    old, new = urllib.parse.urlsplit(response.url), urllib.parse.urlsplit(url)
    if (old.scheme, old.hostname, old.port) != (new.scheme, new.hostname, new.port):
        headers.discard("authorization")
        headers.discard("cookie")
    return method, url, headers, drop_body


_Body = bytes | Iterable[bytes] | AsyncIterable[bytes]
_HeaderItems = Mapping[str, str] | Iterable[tuple[str, str]] | None


class _Call:
    """One call as a client sends it, hop after hop: what it asks for, its body, its timeout."""

    def __init__(self, info: RequestInfo, body: _Body, timeout: float) -> None:
        self.info, self.body, self.timeout = info, body, timeout

    def start(self) -> tuple[int, Any]:
        return _start(self.info, self.body, self.timeout)

    def next_hop(self, response: Response) -> None:
        """Follow `response`, a redirect: close it, and ask for where it points."""
        response.close()
        method, url, headers, drop = _redirect(response, self.info.method, self.info.headers)
        self.info = RequestInfo(method, url, headers)
        if drop or not isinstance(self.body, bytes):
            self.body = b""


class _BaseClient:
    """What `Client` and `AsyncClient` share: their settings, and how a call is prepared."""

    def __init__(
        self,
        *,
        base_url: str = "",
        headers: _HeaderItems = None,
        timeout: float | None = _UNSET,
        follow_redirects: bool = False,
        max_redirects: int = DEFAULT_MAX_REDIRECTS,
    ) -> None:
        self.base_url = base_url
        self.headers = Headers(headers)
        self.timeout = _timeout(timeout, PROJECT_TIMEOUT)
        self.follow_redirects = follow_redirects
        self.max_redirects = max_redirects

    def _prepare(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, Any] | None = None,
        headers: _HeaderItems = None,
        content: Content | None = None,
        data: Mapping[str, Any] | None = None,
        json: Any = None,
        timeout: float | None = _UNSET,
        follow_redirects: bool | None = None,
    ) -> tuple[_Call, bool]:
        """The call, and whether to follow its redirects."""
        merged = self.headers.copy()
        for name, value in Headers(headers).items():
            merged[name] = value
        # httpx's default: the bodies it can decode (the host decodes them, bounded).
        if "accept-encoding" not in merged:
            merged["accept-encoding"] = "gzip, deflate"
        body = _body(merged, content, data, json)
        info = RequestInfo(method.upper(), _merge_url(self.base_url, url, params), merged)
        follow = self.follow_redirects if follow_redirects is None else follow_redirects
        return _Call(info, body, _timeout(timeout, self.timeout)), follow

    def _too_many(self, call: _Call) -> TooManyRedirects:
        return TooManyRedirects(f"more than {self.max_redirects} redirects", request=call.info)


class Client(_BaseClient):
    """Outbound HTTP without async: each call waits for its response (holding no thread the
    server could use). `with Client(...) as client:` or `Client(...).get(...)`."""

    def request(self, method: str, url: str, **kwargs: Any) -> Response:
        """The response, its body read (`params`, `headers`, `content`, `data`, `json`,
        `timeout`, `follow_redirects` as httpx's)."""
        response = self.stream(method, url, **kwargs)
        try:
            response.read()
        finally:
            response.close()
        return response

    def stream(self, method: str, url: str, **kwargs: Any) -> Response:
        """The response once its head arrived; read its body with `iter_bytes()`; `with` it
        (or `close()` it) to end the call."""
        call, follow = self._prepare(method, url, **kwargs)
        for _ in range(self.max_redirects + 1):
            if not isinstance(call.body, (bytes, Iterable)):
                raise TypeError("an async iterable body needs AsyncClient")
            number, rest = call.start()
            if rest is not None:
                for chunk in rest:
                    _write(number, chunk, True, call.info)
                _write(number, b"", False, call.info)
            response = _head(number, call.info)
            if not (follow and response.is_redirect):
                return response
            call.next_hop(response)
        raise self._too_many(call)

    def get(self, url: str, **kwargs: Any) -> Response:
        return self.request("GET", url, **kwargs)

    def head(self, url: str, **kwargs: Any) -> Response:
        return self.request("HEAD", url, **kwargs)

    def options(self, url: str, **kwargs: Any) -> Response:
        return self.request("OPTIONS", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> Response:
        return self.request("PUT", url, **kwargs)

    def patch(self, url: str, **kwargs: Any) -> Response:
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> Response:
        return self.request("DELETE", url, **kwargs)

    def close(self) -> None:
        pass

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Stream:
    """`async with client.stream(...) as response:` (also awaitable)."""

    def __init__(self, started: Any) -> None:
        self._started = started
        self._response: Response | None = None

    async def __aenter__(self) -> Response:
        self._response = await self._started
        return self._response

    async def __aexit__(self, *exc: object) -> None:
        if self._response is not None:
            self._response.close()

    def __await__(self) -> Any:
        return self._started.__await__()


class AsyncClient(_BaseClient):
    """Outbound HTTP with async: `await client.get(...)`; calls awaited together
    (`asyncio.gather`) run at once."""

    async def request(self, method: str, url: str, **kwargs: Any) -> Response:
        """The response, its body read (`params`, `headers`, `content`, `data`, `json`,
        `timeout`, `follow_redirects` as httpx's)."""
        response = await self._send(method, url, **kwargs)
        try:
            await response.aread()
        finally:
            response.close()
        return response

    def stream(self, method: str, url: str, **kwargs: Any) -> _Stream:
        """`async with client.stream(...) as r:` the response once its head arrived; read its
        body with `aiter_bytes()`."""
        return _Stream(self._send(method, url, **kwargs))

    async def _send(self, method: str, url: str, **kwargs: Any) -> Response:
        call, follow = self._prepare(method, url, **kwargs)
        for _ in range(self.max_redirects + 1):
            number, rest = call.start()
            if isinstance(rest, AsyncIterable):
                async for chunk in rest:
                    _write(number, chunk, True, call.info)
            elif rest is not None:
                for chunk in rest:
                    _write(number, chunk, True, call.info)
            if rest is not None:
                _write(number, b"", False, call.info)
            await _news(number)
            response = _head(number, call.info)
            if not (follow and response.is_redirect):
                return response
            call.next_hop(response)
        raise self._too_many(call)

    async def get(self, url: str, **kwargs: Any) -> Response:
        return await self.request("GET", url, **kwargs)

    async def head(self, url: str, **kwargs: Any) -> Response:
        return await self.request("HEAD", url, **kwargs)

    async def options(self, url: str, **kwargs: Any) -> Response:
        return await self.request("OPTIONS", url, **kwargs)

    async def post(self, url: str, **kwargs: Any) -> Response:
        return await self.request("POST", url, **kwargs)

    async def put(self, url: str, **kwargs: Any) -> Response:
        return await self.request("PUT", url, **kwargs)

    async def patch(self, url: str, **kwargs: Any) -> Response:
        return await self.request("PATCH", url, **kwargs)

    async def delete(self, url: str, **kwargs: Any) -> Response:
        return await self.request("DELETE", url, **kwargs)

    async def aclose(self) -> None:
        pass

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# -- module-level calls: async, as `await http.get(url)` ----------------------------------------


async def request(method: str, url: str, **kwargs: Any) -> Response:
    """One call with a client of its own (`follow_redirects`, `timeout`, ... as the client's)."""
    client_options = {k: kwargs.pop(k) for k in ("base_url", "max_redirects") if k in kwargs}
    return await AsyncClient(**client_options).request(method, url, **kwargs)


async def get(url: str, **kwargs: Any) -> Response:
    return await request("GET", url, **kwargs)


async def head(url: str, **kwargs: Any) -> Response:
    return await request("HEAD", url, **kwargs)


async def options(url: str, **kwargs: Any) -> Response:
    return await request("OPTIONS", url, **kwargs)


async def post(url: str, **kwargs: Any) -> Response:
    return await request("POST", url, **kwargs)


async def put(url: str, **kwargs: Any) -> Response:
    return await request("PUT", url, **kwargs)


async def patch(url: str, **kwargs: Any) -> Response:
    return await request("PATCH", url, **kwargs)


async def delete(url: str, **kwargs: Any) -> Response:
    return await request("DELETE", url, **kwargs)
