"""Server-Sent Events, with FastAPI's names and behaviour (`fastapi.sse`, FastAPI 0.135+).

A handler that `yield`s, declared with `@route(response_class=EventSourceResponse)`, streams
`text/event-stream`: each plain object it yields is JSON-encoded into one event's `data:`
field; a `ServerSentEvent` sets the fields itself (`data`, `raw_data`, `event`, `id`, `retry`,
`comment`). While the generator yields nothing for `_PING_INTERVAL` seconds, a keep-alive
comment (`KEEPALIVE_COMMENT`) goes out. The browser's `EventSource` sends the last `id` back as
the `Last-Event-ID` request header when it reconnects: `request.headers.get("last-event-id")`.

    from filerouter import route
    from filerouter.sse import EventSourceResponse, ServerSentEvent

    @route(response_class=EventSourceResponse)
    async def GET(request):
        for n in range(3):
            yield ServerSentEvent(data={"n": n}, id=str(n))

Not here: sending the stream (`guest-python/sandbox/streaming.py` in the guest, the host's `stream`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, model_validator

from .responses import StreamingResponse, jsonable


class EventSourceResponse(StreamingResponse):
    """A streamed response of `text/event-stream`. As a handler's `response_class`, it makes a
    `yield`ing handler's items events; given content of its own, it sends that as it is."""

    media_type = "text/event-stream"


def _check_single_line(value: str | None, field_name: str) -> str | None:
    if value is not None and ("\r" in value or "\n" in value):
        raise ValueError(f"SSE '{field_name}' must be a single line")
    return value


def _check_event(value: str | None) -> str | None:
    return _check_single_line(value, "event")


def _check_id(value: str | None) -> str | None:
    if value is not None and "\0" in value:
        raise ValueError("SSE 'id' must not contain null characters")
    return _check_single_line(value, "id")


class ServerSentEvent(BaseModel):
    """One event. `data` is always JSON-encoded (`"hello"` goes out as `data: "hello"`);
    `raw_data` goes out as it is. `event` and `id` are single lines; `retry` is milliseconds;
    `comment` lines start with `:` and are ignored by `EventSource`."""

    data: Any = None
    raw_data: str | None = None
    event: Annotated[str | None, AfterValidator(_check_event)] = None
    id: Annotated[str | None, AfterValidator(_check_id)] = None
    retry: Annotated[int | None, Field(ge=0)] = None
    comment: str | None = None

    @model_validator(mode="after")
    def _check_data_exclusive(self) -> ServerSentEvent:
        if self.data is not None and self.raw_data is not None:
            raise ValueError(
                "Cannot set both 'data' and 'raw_data' on the same ServerSentEvent. Use 'data' for "
                "JSON-serialized payloads or 'raw_data' for pre-formatted strings."
            )
        return self


def format_sse_event(
    *,
    data_str: str | None = None,
    event: str | None = None,
    id: str | None = None,  # noqa: A002  (FastAPI's name)
    retry: int | None = None,
    comment: str | None = None,
) -> bytes:
    """One event in the wire format, from `data_str` already serialized; ends with a blank line."""
    _check_event(event)
    _check_id(id)
    lines: list[str] = []
    if comment is not None:
        lines.extend(f": {line}" for line in comment.splitlines())
    if event is not None:
        lines.append(f"event: {event}")
    if data_str is not None:
        lines.extend(f"data: {line}" for line in data_str.splitlines())
    if id is not None:
        lines.append(f"id: {id}")
    if retry is not None:
        lines.append(f"retry: {retry}")
    lines.extend(("", ""))
    return "\n".join(lines).encode("utf-8")


# The keep-alive comment sent while the generator is idle.
KEEPALIVE_COMMENT = b": ping\n\n"

# Seconds between keep-alive comments while the generator yields nothing.
_PING_INTERVAL: float = 15.0


def _finite(value: Any) -> Any:
    """`value` with NaN and the infinities as `None` (JSON has neither), as FastAPI writes them."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_item(value: Any) -> str:
    """A yielded object as FastAPI writes a stream item without an item model:
    `jsonable_encoder`, then `json.dumps` (with its default separators)."""
    return json.dumps(_finite(_encode(value)))


def _encode(value: Any) -> Any:
    """`value` as plain JSON types (what `jsonable_encoder` makes of it)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(_encode(k)): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_encode(v) for v in value]
    return _encode(jsonable(value))


def event_bytes(item: Any) -> bytes:
    """One yielded item as an event: a `ServerSentEvent` as its fields say, anything else
    JSON-encoded as `data:`."""
    if isinstance(item, ServerSentEvent):
        if item.raw_data is not None:
            data_str: str | None = item.raw_data
        elif item.data is not None:
            dump = getattr(item.data, "model_dump_json", None)
            data_str = dump() if callable(dump) else json_item(item.data)
        else:
            data_str = None
        return format_sse_event(data_str=data_str, event=item.event, id=item.id, retry=item.retry, comment=item.comment)
    return format_sse_event(data_str=json_item(item))


__all__ = [
    "KEEPALIVE_COMMENT",
    "EventSourceResponse",
    "ServerSentEvent",
    "format_sse_event",
]
