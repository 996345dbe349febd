"""The request object handlers receive: method, path, headers, query, cookies and body."""

from __future__ import annotations

import json as _json
from typing import TYPE_CHECKING, Any, TypeVar, overload
from urllib.parse import parse_qsl, unquote

from filerouter.exceptions import HTTPException
from ._sandbox import wit_text
from .forms import parse as parse_form
from .multidict import MultiDict

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from .forms import FormData

_T = TypeVar("_T")


class Headers:
    """Read-only, case-insensitive view of HTTP headers; repeated names keep every value."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items = [(k.lower(), v) for k, v in items]

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...
    @overload
    def get(self, name: str, default: _T) -> str | _T: ...
    def get(self, name: str, default: object = None) -> object:
        name = name.lower()
        for k, v in self._items:
            if k == name:
                return v
        return default

    def getlist(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self._items if k == name]

    def keys(self) -> list[str]:
        return [k for k, _ in self._items]

    def values(self) -> list[str]:
        return [v for _, v in self._items]

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


class QueryParams(MultiDict[str]):
    """The query string as a multi-dict: `get(name)` gives the last value, `getlist` all."""

    def __init__(self, query: str = "") -> None:
        super().__init__(parse_qsl(query, keep_blank_values=True))


class State:
    """A plain attribute bag (`request.state.user = ...`) shared by middleware and handler."""

    if TYPE_CHECKING:
        # For checkers: any attribute may be set, and read back as `Any`.
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    def __repr__(self) -> str:
        return f"State({vars(self)!r})"


def _parse_cookies(header: str) -> dict[str, str]:
    cookies = {}
    for chunk in header.split(";"):
        key, sep, value = chunk.partition("=")
        key, value = key.strip(), value.strip()
        if not sep and not key:
            continue
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        cookies[key] = unquote(value)
    return cookies


class Request:
    """One HTTP request, as FastAPI's `Request` offers it to a handler."""

    def __init__(
        self,
        method: str,
        path: str,
        query: str,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        client: str | None = None,
        path_params: Mapping[str, Any] | None = None,
    ) -> None:
        self.method = method
        self.raw_path = path
        self.path = unquote(path)
        self.query_string = query
        self.headers = Headers(headers)
        self.query_params = QueryParams(query)
        # `[name]` folders: a str each, a list of str for `[...name]`.
        self.path_params: dict[str, Any] = dict(path_params or {})
        self.client = client
        self.state = State()
        self._body = bytes(body)
        self._cookies: dict[str, str] | None = None
        self._form: FormData | None = None

    @property
    def url(self) -> str:
        return self.path + ("?" + self.query_string if self.query_string else "")

    @property
    def cookies(self) -> dict[str, str]:
        if self._cookies is None:
            self._cookies = _parse_cookies(self.headers.get("cookie", ""))
        return self._cookies

    async def body(self) -> bytes:
        return self._body

    async def json(self) -> Any:
        value = _json.loads(self._body)
        # JSON may escape a lone surrogate ("\udc80"); such text cannot be sent on anywhere.
        if b"\\u" in self._body and wit_text.find_in(value) is not None:
            raise HTTPException(
                400, "The JSON body holds a lone surrogate (a \\uD800-\\uDFFF escape that is not part of a pair)"
            )
        return value

    async def form(self) -> FormData:
        """The body as a form (`FormData`): URL-encoded or multipart, with `UploadFile`s for
        files; empty for any other content type."""
        if self._form is None:
            self._form = parse_form(self.headers.get("content-type", ""), self._body)
        return self._form

    def __repr__(self) -> str:
        return f"Request({self.method} {self.url})"
