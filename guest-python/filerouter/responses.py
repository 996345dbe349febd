"""Response classes, with FastAPI's names and arguments, and the JSON encoding of return values."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import uuid
from typing import TYPE_CHECKING, Any, TypeVar, overload
from urllib.parse import quote

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping

    from .background import BackgroundTask

_T = TypeVar("_T")


class MutableHeaders:
    """Case-insensitive response headers that middleware and handlers may change."""

    def __init__(self, items: dict[str, Any] | Iterable[tuple[object, object]] | None = None) -> None:
        self._items: list[tuple[str, str]] = []
        for k, v in (items.items() if isinstance(items, dict) else (items or [])):
            self._items.append((str(k), str(v)))

    def __getitem__(self, name: str) -> str:
        low = name.lower()
        for k, v in self._items:
            if k.lower() == low:
                return v
        raise KeyError(name)

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...
    @overload
    def get(self, name: str, default: _T) -> str | _T: ...
    def get(self, name: str, default: object = None) -> object:
        try:
            return self[name]
        except KeyError:
            return default

    def __setitem__(self, name: str, value: object) -> None:
        low = name.lower()
        self._items = [(k, v) for k, v in self._items if k.lower() != low]
        self._items.append((str(name), str(value)))

    def __delitem__(self, name: str) -> None:
        low = name.lower()
        before = len(self._items)
        self._items = [(k, v) for k, v in self._items if k.lower() != low]
        if len(self._items) == before:
            raise KeyError(name)

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def setdefault(self, name: str, value: object) -> str:
        if name not in self:
            self[name] = value
        return self[name]

    def append(self, name: str, value: object) -> None:
        self._items.append((str(name), str(value)))

    def update(self, other: Mapping[str, object] | Iterable[tuple[str, object]]) -> None:
        for k, v in (other.items() if hasattr(other, "items") else other):  # pyright: ignore[reportAttributeAccessIssue]
            self[k] = v

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def keys(self) -> list[str]:
        return [k for k, _ in self._items]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"MutableHeaders({self._items!r})"


class Response:
    """A response with a body of bytes or text, a status code, headers and a media type.

    `background` (a `BackgroundTask` or `BackgroundTasks`) runs after the response is sent, as
    in Starlette (see `filerouter.background`).
    """

    media_type: str | None = None
    charset = "utf-8"
    # True only for the host's own answer passed on by middleware (its body stays on the host).
    host_body = False

    def __init__(
        self,
        content: Any = None,
        status_code: int = 200,
        headers: dict[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        self.status_code = status_code
        self.background = background
        if media_type is not None:
            self.media_type = media_type
        self.body = self.render(content)
        self.headers = MutableHeaders(headers)
        if self.media_type is not None and "content-type" not in self.headers:
            content_type = self.media_type
            if content_type.startswith("text/") and "charset=" not in content_type:
                content_type += "; charset=" + self.charset
            self.headers["content-type"] = content_type

    def render(self, content: Any) -> bytes:
        if content is None:
            return b""
        if isinstance(content, (bytes, bytearray, memoryview)):
            return bytes(content)
        return str(content).encode(self.charset)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status_code={self.status_code})"


class HTMLResponse(Response):
    media_type = "text/html"


class PlainTextResponse(Response):
    media_type = "text/plain"


class StreamingResponse(Response):
    """A response whose body is sent as it is produced, as Starlette's: `content` is a sync or
    async iterable of `str` (encoded in `charset`) or bytes. The status and headers go out
    first, then each chunk as the iterable yields it (docs/guides/streaming.md).

    Middleware sees it like any response; one that wants the body wraps `body_iterator` with an
    iterator of its own (reading it whole would hold the stream in memory). It has no `body`.
    """

    def __init__(
        self,
        content: Iterable[Any] | AsyncIterable[Any],
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        if hasattr(content, "__aiter__"):
            self.body_iterator: AsyncIterator[Any] = content.__aiter__()  # pyright: ignore[reportAttributeAccessIssue]
        elif hasattr(content, "__iter__") and not isinstance(content, (str, bytes, bytearray, memoryview)):
            self.body_iterator = iterate(content)  # pyright: ignore[reportArgumentType]
        else:
            raise TypeError(
                f"StreamingResponse(content=...) takes an iterator or async iterator of str or bytes, "
                f"not {type(content).__name__}: for a whole body use Response"
            )
        super().__init__(None, status_code=status_code, headers=dict(headers or {}), media_type=media_type, background=background)
        del self.body

    def render(self, content: Any) -> bytes:
        return b""

    def chunk(self, value: Any) -> bytes:
        """One item of `body_iterator` as bytes."""
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, str):
            return value.encode(self.charset)
        raise TypeError(
            f"a streamed response's iterator yielded {type(value).__name__}: it may yield str or bytes"
        )


async def iterate(items: Iterable[Any]) -> AsyncIterator[Any]:
    """A sync iterable as an async iterator; closing it closes a generator's iterator too (its
    `finally` runs with `GeneratorExit`)."""
    iterator = iter(items)
    try:
        for item in iterator:
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def jsonable(value: Any) -> Any:
    """FastAPI's `jsonable_encoder` for the common cases: the `default` hook of `json.dumps`."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True)  # pyright: ignore[reportAttributeAccessIssue]  (a pydantic model, as `jsonable_encoder` writes it)
    raise TypeError(
        f"Object of type {type(value).__name__} is not JSON serializable: "
        "return a dict, list, str, int, float, bool or None, or a Response"
    )


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(
            content,
            ensure_ascii=False,
            allow_nan=False,
            indent=None,
            separators=(",", ":"),
            default=jsonable,
        ).encode("utf-8")


class RedirectResponse(Response):
    """A redirect (307 by default, like FastAPI) to `url`."""

    def __init__(
        self,
        url: object,
        status_code: int = 307,
        headers: dict[str, str] | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        super().__init__(content=b"", status_code=status_code, headers=headers, background=background)
        self.headers["location"] = quote(str(url), safe=":/%#?=@[]!$&'()*+,;")


def to_response(result: Any, status_code: int | None = None) -> Response:
    """What a handler returned, as a `Response` (DECISIONS.md: return values).

    `status_code` is the status for a plain body (a page handler's 404); a returned response
    or tuple keeps its own.
    """
    if isinstance(result, Response):
        return result
    if result is None:
        return Response(b"", status_code=204 if status_code is None else status_code)
    if isinstance(result, tuple) and len(result) in (2, 3):
        body, status = result[0], result[1]
        headers = result[2] if len(result) == 3 else None
        if isinstance(body, Response):
            body.status_code = status
            if headers:
                body.headers.update(headers)
            return body
        if body is None:
            return Response(b"", status_code=status, headers=headers)
        return JSONResponse(body, status_code=status, headers=headers)
    return JSONResponse(result, status_code=200 if status_code is None else status_code)
