"""`@route(...)`: what FastAPI's path-operation decorator says about an operation beyond its path
and method, for `/docs` and `/openapi.json`: tags, summary, description, extra responses,
deprecation and the operation id.

    @route(tags=["items"], summary="Create an item", responses={409: {"description": "Taken"}})
    def POST(request, item: Item): ...

The file's path and the handler's name give the path and method, so `route` takes only the
rest. It checks its arguments when the route file is imported (a mistake is an import error on
that line) and returns the handler itself, marked: it changes nothing about how a request is
served. Not for: reading the marks (`describe.py` in the guest does, when the host inspects the
route file).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

_F = TypeVar("_F", bound="Callable[..., Any]")

# The attribute `route` sets on a handler.
ATTRIBUTE = "__filerouter_route__"

# What `RouteInfo.response_model` is when `@route` was given none (`None` means "no model").
NOT_GIVEN = inspect.Parameter.empty

_STATUS_RANGE = re.compile(r"^[1-5]XX$")
# The keys of an OpenAPI Response Object, and FastAPI's `model`; others pass through as they are.
_RESPONSE_KEYS = {"description", "model", "content", "headers", "links"}


@dataclasses.dataclass(frozen=True)
class RouteInfo:
    """What `@route(...)` declared for one handler."""

    tags: tuple[str, ...] = ()
    summary: str | None = None
    description: str | None = None
    response_description: str | None = None
    # status (`"404"`, `"4XX"`, `"default"`) -> OpenAPI Response Object, `model` kept as given
    responses: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    deprecated: bool = False
    operation_id: str | None = None
    # `response_model=`: what the answer's body is validated and filtered with, instead of the
    # return annotation (None: no filtering); `NOT_GIVEN` when not given.
    response_model: Any = NOT_GIVEN
    # How a response model's value is written out (pydantic's `model_dump` options).
    response_model_include: Any = None
    response_model_exclude: Any = None
    response_model_by_alias: bool = True
    response_model_exclude_unset: bool = False
    response_model_exclude_defaults: bool = False
    response_model_exclude_none: bool = False
    # `response_class=`: for a handler that `yield`s, how its items are sent
    # (`EventSourceResponse`: Server-Sent Events; another `StreamingResponse` class: as they
    # are); None: JSON Lines. Other handlers choose their response by what they return.
    response_class: Any = None


def _text(name: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"route({name}=...) takes a string, not {type(value).__name__}")


def _status_key(code: object) -> str:
    number = code if isinstance(code, int) and not isinstance(code, bool) else None
    if isinstance(code, str) and code.isdigit():
        number = int(code)
    if number is not None:
        if not 100 <= number <= 599:
            raise ValueError(f"route(responses=...): {code!r} is not an HTTP status code (100 to 599)")
        return str(number)
    if isinstance(code, str) and (code == "default" or _STATUS_RANGE.match(code)):
        return code
    raise ValueError(
        f"route(responses=...): {code!r} is not a status: use an int such as 404, or \"4XX\", or \"default\""
    )


def _responses(responses: Mapping[Any, Any] | None) -> dict[str, dict[str, Any]]:
    if responses is None:
        return {}
    if not isinstance(responses, dict):
        raise TypeError(
            "route(responses=...) takes a dict of status to response, like "
            '{404: {"description": "Item not found"}}'
        )
    out: dict[str, dict[str, Any]] = {}
    for code, response in responses.items():
        key = _status_key(code)
        if not isinstance(response, dict):
            raise TypeError(f"route(responses=...): the response of {code!r} must be a dict, like {{\"description\": ...}}")
        # Keys beyond OpenAPI's go into the document as they are, as FastAPI copies them; they
        # must be JSON, since the document is.
        for extra in (k for k in response if k not in _RESPONSE_KEYS):
            if not isinstance(extra, str):
                raise TypeError(f"route(responses=...): the response of {code!r} has a key {extra!r} that is not a string")
            try:
                json.dumps(response[extra])
            except (TypeError, ValueError) as exc:
                raise TypeError(
                    f"route(responses=...): {extra!r} of the response of {code!r} is not JSON ({exc}): "
                    "it goes into /openapi.json as it is"
                ) from None
        _text(f"responses[{code!r}]['description']", response.get("description"))
        for part in ("content", "headers", "links"):
            if part in response and not isinstance(response[part], dict):
                raise TypeError(f"route(responses=...): {part!r} of the response of {code!r} must be a dict")
        out[key] = dict(response)
    return out


def route(
    *,
    tags: Sequence[str] | None = None,
    summary: str | None = None,
    description: str | None = None,
    response_description: str | None = None,
    responses: Mapping[int | str, dict[str, Any]] | None = None,
    deprecated: bool | None = None,
    operation_id: str | None = None,
    response_model: Any = NOT_GIVEN,
    response_model_include: Any = None,
    response_model_exclude: Any = None,
    response_model_by_alias: bool = True,
    response_model_exclude_unset: bool = False,
    response_model_exclude_defaults: bool = False,
    response_model_exclude_none: bool = False,
    response_class: Any = None,
) -> Callable[[_F], _F]:
    """Describe a handler for `/docs` and `/openapi.json`, with the keyword arguments of
    FastAPI's `@app.get(...)`:

    - `tags`: the groups it is listed under (the first one on `/docs`); default: its path's
      first segment. `openapi_tags` in `config.py` describes and orders them.
    - `summary`, `description`: instead of the docstring's first line and the rest (with a
      `summary`, the whole docstring is the description).
    - `response_description`: the success response's description.
    - `responses`: more responses, `{404: {"description": ..., "model": Message}}`: a `model`
      (a dataclass, TypedDict, ...) is the JSON content's schema; `content`, `headers` and
      `links` are OpenAPI's own.
    - `deprecated`: marks it deprecated (still served).
    - `operation_id`: its `operationId` and its anchor on `/docs` (unique; a clash gets `_2`).
    - `response_model`: what the body of its answers is checked and cut down to, instead of the
      return annotation (`None`: nothing is checked); `response_model_exclude_unset`,
      `response_model_exclude_defaults`, `response_model_exclude_none`,
      `response_model_include`, `response_model_exclude` and `response_model_by_alias` say how
      a pydantic model is written out, as in FastAPI.
    - `response_class`: for a handler that `yield`s, `EventSourceResponse` (`filerouter.sse`)
      streams its items as Server-Sent Events, another `StreamingResponse` class streams them
      as they are; without it they stream as JSON Lines (`application/jsonl`), as in FastAPI.
    """
    if response_class is not None:
        from .responses import Response

        if not (isinstance(response_class, type) and issubclass(response_class, Response)):
            raise TypeError(
                "route(response_class=...) takes a response class, such as EventSourceResponse or StreamingResponse"
            )
    if isinstance(tags, str) or (tags is not None and not all(isinstance(t, str) for t in tags)):
        raise TypeError('route(tags=...) takes a list of strings, like tags=["items"]')
    if deprecated is not None and not isinstance(deprecated, bool):
        raise TypeError("route(deprecated=...) takes True or False")
    if operation_id is not None and (not isinstance(operation_id, str) or not operation_id.strip()):
        raise ValueError("route(operation_id=...) takes a non-empty string")
    info = RouteInfo(
        tags=tuple(dict.fromkeys(tags or ())),
        summary=_text("summary", summary),
        description=_text("description", description),
        response_description=_text("response_description", response_description),
        responses=_responses(responses),
        deprecated=bool(deprecated),
        operation_id=operation_id,
        response_model=response_model,
        response_model_include=response_model_include,
        response_model_exclude=response_model_exclude,
        response_model_by_alias=bool(response_model_by_alias),
        response_model_exclude_unset=bool(response_model_exclude_unset),
        response_model_exclude_defaults=bool(response_model_exclude_defaults),
        response_model_exclude_none=bool(response_model_exclude_none),
        response_class=response_class,
    )

    def mark(fn: _F) -> _F:
        if not callable(fn):
            raise TypeError("@route(...) decorates a handler function")
        setattr(fn, ATTRIBUTE, info)
        return fn

    return mark


def info_of(fn: object) -> RouteInfo | None:
    """What `@route(...)` declared for `fn`, if anything."""
    info = getattr(fn, ATTRIBUTE, None)
    return info if isinstance(info, RouteInfo) else None


__all__ = ["RouteInfo", "route"]
