"""What the host learns of one handler for `/docs` and `/openapi.json` (the `handler-info`
record of `wit/filerouter.wit`): its parameters with where they come from and their JSON
Schema, its request body, and the schema of what it returns.

Computed from the handler's signature once (`params.specs_of`), when the host inspects a route
file. Not for: binding a request (see `filerouter.params`).
"""

import inspect
import json
import typing

import docstrings
import wit_text
from filerouter import params, schemas
from filerouter.forms import UploadFile
from filerouter.responses import Response, jsonable
from filerouter.validation import split_annotated
from wit_world.imports.types import HandlerInfo, HandlerParam


def _default_json(spec):
    if spec.required or spec.location in ("request", "depends"):
        return None
    default = spec.default
    if spec.marker is not None and spec.marker.default_factory is not None:
        return None
    try:
        return json.dumps(default, default=jsonable, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _param_schema(named, spec):
    schema = dict(named.of(spec.hint, spec.constraints))
    default = None if spec.required else schemas.jsonable_default(spec.default)
    if default is not None and default is not schemas.NO_DEFAULT:
        schema["default"] = default
    if spec.marker is not None:
        if spec.marker.title:
            schema["title"] = spec.marker.title
        if spec.marker.examples:
            schema["examples"] = list(spec.marker.examples)
    return schema


def _body(named, fn):
    specs, embed, is_form = params.body_specs(fn)
    if not specs:
        return None
    if not embed:
        spec = specs[0]
        schema = _param_schema(named, spec)
        required = spec.required
    else:
        properties = {}
        required_names = []
        for spec in specs:
            sub = dict(_param_schema(named, spec))
            if "$ref" not in sub:
                sub["title"] = sub.get("title") or schemas.title_of(spec.alias)
            if spec.description:
                sub["description"] = spec.description
            properties[spec.alias] = sub
            if spec.required:
                required_names.append(spec.alias)
        schema = {"type": "object", "properties": properties}
        if required_names:
            schema["required"] = required_names
        required = bool(required_names)
    uploads = any(params._is_upload(s.hint) or isinstance(s.marker, params.File) for s in specs)
    if is_form:
        media = "multipart/form-data" if uploads else "application/x-www-form-urlencoded"
    else:
        marker = specs[0].marker if len(specs) == 1 else None
        media = (marker.media_type if marker is not None and marker.media_type else None) or "application/json"
    content = {"schema": schema}
    example = schemas.example(schema, named.named)
    if example is not None and media == "application/json":
        content["example"] = example
    return {"required": required, "content": {media: content}}


def _response(named, fn):
    """`{"status": code, "schema": ...}` from the return annotation: `-> Item` (200),
    `-> tuple[Item, Literal[201]]` (the `(body, status)` a handler returns), `-> None` (204)."""
    hint = params.type_hints(fn).get("return", inspect.Parameter.empty)
    if hint is inspect.Parameter.empty:
        return None
    if hint is None or hint is type(None):
        return {"status": 204, "schema": None}
    bare, _ = split_annotated(hint)
    status = 200
    if typing.get_origin(bare) is tuple:
        args = typing.get_args(bare)
        codes = typing.get_args(args[1]) if len(args) == 2 and typing.get_origin(args[1]) is typing.Literal else ()
        if len(codes) != 1 or not isinstance(codes[0], int):
            return None
        hint, status = args[0], codes[0]
        bare, _ = split_annotated(hint)
    if bare is tuple or isinstance(bare, str):
        return None
    if isinstance(bare, type) and issubclass(bare, Response):
        media = getattr(bare, "media_type", None) or "application/json"
        return {"status": status, "schema": None, "media_type": media}
    if isinstance(bare, type) and issubclass(bare, UploadFile):
        return None
    return {"status": status, "schema": named.of(hint)}


def describe(method, fn):
    """The `HandlerInfo` of handler `fn` serving `method`."""
    summary, description, texts = docstrings.parse(inspect.getdoc(fn))
    named = schemas.Schemas()
    described = []
    for spec in params.param_specs(fn):
        hint = spec.hint
        enum_cls = params.enum_class(hint)
        location = "query" if spec.location == "auto" else spec.location
        text = spec.description or texts.get(spec.name) or texts.get(spec.alias)
        described.append(
            HandlerParam(
                name=wit_text.safe(spec.alias if spec.location not in ("auto", "path") else spec.name),
                kind=params.kind_of(hint),
                choices=[wit_text.safe(m.value) for m in enum_cls] if enum_cls else [],
                has_default=not spec.required,
                default_json=_default_json(spec),
                description=wit_text.safe(text),
                location=location,
                # Declared parameters carry their schema (constraints, alias, enums as named
                # schemas); plain ones are typed by the host from `kind`, as before.
                schema=json.dumps(_param_schema(named, spec), default=jsonable)
                if spec.marker is not None
                else None,
            )
        )
    body = _body(named, fn)
    response = _response(named, fn)
    openapi = None
    if body is not None or response is not None or named.named:
        openapi = json.dumps(
            {"request_body": body, "response": response, "schemas": named.named},
            default=jsonable,
        )
    return HandlerInfo(
        method=method,
        is_async=inspect.iscoroutinefunction(fn),
        doc=wit_text.safe(inspect.getdoc(fn)),
        summary=wit_text.safe(summary),
        description=wit_text.safe(description),
        params=described,
        openapi=openapi,
    )
