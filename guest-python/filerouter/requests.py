"""The request object handlers receive: method, path, headers, query, cookies and body."""

import json as _json
from urllib.parse import parse_qsl, unquote

import wit_text
from filerouter.exceptions import HTTPException
from .forms import parse as parse_form
from .multidict import MultiDict


class Headers:
    """Read-only, case-insensitive view of HTTP headers; repeated names keep every value."""

    def __init__(self, items=()):
        self._items = [(k.lower(), v) for k, v in items]

    def get(self, name, default=None):
        name = name.lower()
        for k, v in self._items:
            if k == name:
                return v
        return default

    def getlist(self, name):
        name = name.lower()
        return [v for k, v in self._items if k == name]

    def keys(self):
        return [k for k, _ in self._items]

    def values(self):
        return [v for _, v in self._items]

    def items(self):
        return list(self._items)

    def __getitem__(self, name):
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name):
        return self.get(name) is not None

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        return f"Headers({self._items!r})"


class QueryParams(MultiDict):
    """The query string as a multi-dict: `get(name)` gives the last value, `getlist` all."""

    def __init__(self, query=""):
        super().__init__(parse_qsl(query, keep_blank_values=True))


class State:
    """A plain attribute bag (`request.state.user = ...`) shared by middleware and handler."""

    def __repr__(self):
        return f"State({vars(self)!r})"


def _parse_cookies(header):
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

    def __init__(self, method, path, query, headers, body, client=None, path_params=None):
        self.method = method
        self.raw_path = path
        self.path = unquote(path)
        self.query_string = query
        self.headers = Headers(headers)
        self.query_params = QueryParams(query)
        self.path_params = dict(path_params or {})
        self.client = client
        self.state = State()
        self._body = bytes(body)
        self._cookies = None
        self._form = None

    @property
    def url(self):
        return self.path + ("?" + self.query_string if self.query_string else "")

    @property
    def cookies(self):
        if self._cookies is None:
            self._cookies = _parse_cookies(self.headers.get("cookie", ""))
        return self._cookies

    async def body(self):
        return self._body

    async def json(self):
        value = _json.loads(self._body)
        # JSON may escape a lone surrogate ("\udc80"); such text cannot be sent on anywhere.
        if b"\\u" in self._body and wit_text.find_in(value) is not None:
            raise HTTPException(
                400, "The JSON body holds a lone surrogate (a \\uD800-\\uDFFF escape that is not part of a pair)"
            )
        return value

    async def form(self):
        """The body as a form (`FormData`): URL-encoded or multipart, with `UploadFile`s for
        files; empty for any other content type."""
        if self._form is None:
            self._form = parse_form(self.headers.get("content-type", ""), self._body)
        return self._form

    def __repr__(self):
        return f"Request({self.method} {self.url})"
