"""`filerouter.trace`: route code's own spans in the request's trace.

While the server exports traces (OpenTelemetry over OTLP, see docs/guides/deployment.md), every
request has a trace: the host's spans for the request, its wait in the queue, the route's call,
each SQL statement, kv call and outbound call. Route code adds its own spans and attributes::

    from filerouter import trace

    def GET(request, id: int):
        with trace.span("load user", user_id=id) as span:
            user = load(id)
            span.set_attribute("user.plan", user.plan)
        return user

A span opened inside another one is its child (per task: `asyncio` tasks each follow their own
nesting); the outermost ones are children of the route's call span, so SQL statements, kv and
outbound calls made inside a span are its siblings, not its children. An exception leaving the
block marks the span failed with the exception's type and message, and goes on.

Attribute values are `str`, `int`, `float` or `bool` (anything else is sent as its `str()`).
While the server does not export traces, `span` costs one host call, which answers that it keeps
nothing, and the span does nothing; outside the sandbox (pytest on your machine) it does nothing
either. Bounds: 1000 spans per request; names and keys are cut to 256 bytes, texts to 4096.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

from . import _sandbox

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["Span", "span"]

# The innermost open span of this task (its number), 0 for none.
_current: contextvars.ContextVar[int] = contextvars.ContextVar("filerouter_trace_span", default=0)


def _text(text: object) -> str:
    """`text` as a string that crosses to the host (lone surrogates replaced)."""
    return str(text).encode("utf-8", "replace").decode("utf-8")


def _value(value: object) -> Any:
    host = _sandbox.trace
    if isinstance(value, bool):
        return host.Value_Boolean(value)
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return host.Value_Integer(value)
        return host.Value_Text(str(value))
    if isinstance(value, float):
        return host.Value_Float(value)
    return host.Value_Text(_text(value))


class Span:
    """An open span (what `with trace.span(...) as span` gives)."""

    __slots__ = ("_number", "_token", "name")

    def __init__(self, name: str, attributes: dict[str, object]) -> None:
        self.name = name
        self._number = 0
        self._token: contextvars.Token[int] | None = None
        self._open(attributes)

    def _open(self, attributes: dict[str, object]) -> None:
        if not _sandbox.INSIDE:
            return
        parent = _current.get()
        self._number = _sandbox.trace.start(
            _text(self.name),
            parent or None,
            [(_text(key), _value(value)) for key, value in attributes.items()],
        )

    @property
    def recording(self) -> bool:
        """Whether the span is exported (else setting attributes does nothing)."""
        return self._number != 0

    def set_attribute(self, key: str, value: object) -> None:
        """Set the attribute `key` to `value` (`str`, `int`, `float` or `bool`)."""
        if self._number:
            _sandbox.trace.set_attribute(self._number, _text(key), _value(value))

    def set_attributes(self, attributes: dict[str, object]) -> None:
        """Set several attributes."""
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def __enter__(self) -> Span:
        if self._number:
            self._token = _current.set(self._number)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        if self._number:
            failure = None if kind is None else _text(f"{kind.__name__}: {error}")
            _sandbox.trace.end(self._number, failure)
            self._number = 0


def span(name: str, /, **attributes: object) -> Span:
    """A span named `name` with `attributes`, open for the `with` block it is used in."""
    return Span(name, attributes)
