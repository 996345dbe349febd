"""What the host learns of one handler for `/docs` and `/openapi.json` (the `handler-info`
record of `wit/filerouter.wit`): its parameters with where they come from and their JSON
Schema, its request body, the schema of what it returns, the security schemes it depends on
(`filerouter.security`), and what `@route(...)` declares (`filerouter.operation`).

Computed from the handler's signature once (`params.specs_of`), when the host inspects a route
file. Not for: binding a request (see `filerouter.params`).
"""

import dataclasses
import http
import inspect
import json
import typing

import docstrings
import wit_text
from filerouter import adapters, models, operation, params, schemas, security
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
    if spec.pydantic and "$ref" not in schema:
        # As FastAPI titles a parameter's (or body's) own schema: `item_ids` is "Item Ids".
        schema["title"] = (spec.marker.title if spec.marker is not None else None) or spec.alias.title().replace("_", " ")
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
    if not embed or (len(specs) == 1 and specs[0].model is not None):
        # One body parameter, or a form model (`Annotated[Login, Form()]`): the whole body.
        spec = specs[0]
        schema = _param_schema(named, spec)
        required = spec.required
    else:
        properties = {}
        required_names = []
        for spec in specs:
            sub = dict(_param_schema(named, spec))
            if spec.pydantic and not adapters.titled(spec.hint, spec.constraints):
                # A property of FastAPI's `Body_...` model, titled as pydantic titles a field:
                # not when it names a model (`Coupon | None`).
                sub.pop("title", None)
            elif "$ref" not in sub:
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
    `-> tuple[Item, Literal[201]]` (the `(body, status)` a handler returns), `-> None` (204).
    A handler that `yield`s streams: its media type, without a schema."""
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        cls = getattr(operation.info_of(fn), "response_class", None)
        media = "application/jsonl" if cls is None else getattr(cls, "media_type", None) or "application/octet-stream"
        return {"status": 200, "schema": None, "media_type": media}
    hint = models.declared_model(fn, params.type_hints(fn))
    if hint is inspect.Parameter.empty or hint is dataclasses.MISSING:
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
    return {"status": status, "schema": named.of(hint, mode="serialization")}


def _model_params(named, spec):
    """The `HandlerParam`s of a parameter model (`Annotated[Filters, Query()]`): one per field
    of the model, as FastAPI lists them, each with pydantic's schema of the field."""
    location = "query" if spec.location == "auto" else spec.location
    (ref,), defs = adapters.schemas([(spec.model, None, "validation")])
    own = ref.get("$ref", "").rsplit("/", 1)[-1]
    definition = defs.get(own, ref)
    for name, found in defs.items():
        if name != own:
            named.named.setdefault(name, found)
    properties = definition.get("properties", {})
    convert = location == "header" and getattr(spec.marker, "convert_underscores", True)
    out = []
    for field in adapters.model_fields(spec.model):
        # As FastAPI: named by the field's first alias (a header's with `_` as `-`), its schema
        # pydantic's, titled after that alias unless it is a reference.
        alias, key = adapters.param_aliases(field, convert_underscores=convert)[0]
        info = field.info
        schema = dict(properties.get(alias, properties.get(field.name, {})))
        if "$ref" not in schema:
            schema["title"] = info.title or alias.title().replace("_", " ")
        required = info.is_required()
        default_json = None
        if not required and info.default_factory is None:
            try:
                default_json = json.dumps(info.default, default=jsonable, allow_nan=False)
            except (TypeError, ValueError):
                default_json = None
        enum_cls = params.enum_class(info.annotation)
        out.append(
            HandlerParam(
                name=wit_text.safe(key),
                kind=params.kind_of(info.annotation),
                choices=[wit_text.safe(m.value) for m in enum_cls] if enum_cls else [],
                has_default=not required,
                default_json=default_json,
                description=wit_text.safe(info.description),
                location=location,
                schema=json.dumps(schema, default=jsonable),
            )
        )
    return out


def _documented_only(fn, texts):
    """`HandlerParam`s for the parameters only the docstring names (`:param name:`): the
    handler reads them itself (`request.query_params.get("name")`), so they are optional query
    strings, as SPEC.md's page extracts query parameters from docstrings."""
    taken = set(inspect.signature(fn).parameters)
    for spec in params.param_specs(fn) + params.body_specs(fn)[0]:
        taken |= {spec.name, spec.alias}
    return [
        HandlerParam(
            name=wit_text.safe(name),
            kind="str",
            choices=[],
            has_default=True,
            default_json=None,
            description=wit_text.safe(text),
            location="query",
            schema=None,
        )
        for name, text in texts.items()
        if name not in taken
    ]


def _security(fn):
    """`(requirements, schemes, challenges)`: the operation's OpenAPI `security` (one
    requirement per scheme it depends on, with the scopes required of it), the schemes' Security
    Scheme Objects by name, and whether one of them answers 401 by itself."""
    found = security.schemes_of(fn)
    requirements, schemes = [], {}
    for scheme, scopes in found:
        requirements.append({scheme.scheme_name: list(scopes)})
        schemes.setdefault(scheme.scheme_name, scheme.openapi_scheme())
    return requirements, schemes, any(scheme.auto_error for scheme, _ in found)


def _declared_responses(named, responses):
    """`@route(responses=...)` as OpenAPI Response Objects: a `model` becomes the JSON
    content's schema, and a missing description is the status's phrase, as in FastAPI."""
    out = {}
    for code, given in responses.items():
        response = {k: v for k, v in given.items() if k != "model"}
        if given.get("model") is not None:
            content = dict(response.get("content") or {})
            media = dict(content.get("application/json") or {})
            media.setdefault("schema", named.of(given["model"], mode="serialization"))
            content["application/json"] = media
            response["content"] = content
        if not response.get("description"):
            try:
                response["description"] = http.HTTPStatus(int(code)).phrase
            except ValueError:
                response["description"] = "Additional Response"
        out[code] = response
    return out


def _operation(named, info):
    """What `@route(...)` adds to the operation, or None."""
    if info is None:
        return None
    return {
        "tags": list(info.tags),
        "deprecated": info.deprecated,
        "operation_id": info.operation_id,
        "response_description": info.response_description,
        "responses": _declared_responses(named, info.responses),
    }


def describe(method, fn):
    """The `HandlerInfo` of handler `fn` serving `method`."""
    summary, description, texts = docstrings.parse(inspect.getdoc(fn))
    info = operation.info_of(fn)
    if info is not None and info.summary is not None:
        # As FastAPI: a declared summary leaves the whole docstring to the description.
        description = "\n\n".join(part for part in (summary, description) if part) or None
        summary = info.summary
    if info is not None and info.description is not None:
        description = info.description
    named = schemas.Schemas()
    described = []
    for spec in params.param_specs(fn):
        if spec.model is not None:
            described += _model_params(named, spec)
            continue
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
                if spec.marker is not None or spec.pydantic
                else None,
            )
        )
    described += _documented_only(fn, texts)
    body = _body(named, fn)
    response = _response(named, fn)
    requirements, schemes, challenges = _security(fn)
    declared = _operation(named, info)
    openapi = None
    if body is not None or response is not None or named.named or requirements or declared:
        openapi = json.dumps(
            {
                "request_body": body,
                "response": response,
                "schemas": named.named,
                "security": requirements,
                "security_schemes": schemes,
                "challenges": challenges,
                "operation": declared,
            },
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
