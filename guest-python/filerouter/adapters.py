"""Pydantic's own validation, serialization and JSON Schema, for the type hints that name
pydantic: a `BaseModel` (at any depth: `list[Item]`, `Item | None`, a dataclass with a model
field), a pydantic type (`EmailStr`, `SecretStr`, `HttpUrl`, ...) or pydantic metadata
(`Annotated[int, Field(gt=0)]`, `AfterValidator`).

FastAPI validates every parameter with a `pydantic.TypeAdapter` (`validate_python(value,
from_attributes=True)`), reports `ValidationError.errors(include_url=False)` with the
parameter's location in front of each item's, and serializes a response model with
`dump_python(mode="json", by_alias=True, ...)`. Handlers whose hints name pydantic get exactly
that, from the real pydantic the guest carries; every other hint (dataclasses, TypedDicts,
scalars) keeps `validation`'s faster checks, which give the same answers. Adapters are built
once per hint (at build time for production: `params.warm`), never per request.

Not for: deciding where a value comes from (`params`), or the schemas of dataclasses
(`schemas`).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import TYPE_CHECKING, Any

import pydantic
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.json_schema import GenerateJsonSchema

from .validation import INVALID, field_hints, is_typeddict, split_annotated

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .validation import Constraints, Errors

# Where `#/components/schemas/...` references point, as FastAPI's `REF_TEMPLATE`.
REF_TEMPLATE = "#/components/schemas/{model}"


def from_pydantic(obj: Any) -> bool:
    """Whether `obj` (a type, or metadata such as `Field(...)`) is pydantic's own."""
    module = getattr(type(obj) if not isinstance(obj, type) else obj, "__module__", "") or ""
    return module == "pydantic" or module.startswith(("pydantic.", "pydantic_core"))


# hint -> whether it names pydantic, worked out once per hint.
_INVOLVES: dict[Any, bool] = {}


def involves(hint: Any) -> bool:
    """Whether `hint` names pydantic anywhere (then pydantic checks it, as in FastAPI)."""
    try:
        found = _INVOLVES.get(hint)
    except TypeError:  # an unhashable hint: work it out each time
        return _involves(hint, set())
    if found is None:
        found = _INVOLVES[hint] = _involves(hint, set())
    return found


def _involves(hint: Any, seen: set[int]) -> bool:
    bare, metadata = split_annotated(hint)
    if any(from_pydantic(item) for item in metadata):
        return True
    if id(bare) in seen:
        return False
    seen.add(id(bare))
    if isinstance(bare, type):
        if issubclass(bare, BaseModel) or from_pydantic(bare):
            return True
        if hasattr(bare, "__pydantic_validator__"):  # a pydantic dataclass
            return True
        if dataclasses.is_dataclass(bare) or is_typeddict(bare):
            return any(_involves(h, seen) for h in field_hints(bare).values())
    if from_pydantic(bare):  # `pydantic.Json`, constrained types made by `conint`
        return True
    if typing.get_origin(bare) is typing.Literal:
        return False
    return any(_involves(arg, seen) for arg in typing.get_args(bare) if arg is not Ellipsis)


# (hint, constraints) -> its TypeAdapter.
_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _constraint_items(constraints: Constraints | None) -> tuple[tuple[str, Any], ...]:
    if not constraints:
        return ()
    return tuple((name, getattr(constraints, name)) for name in constraints.NAMES if getattr(constraints, name) is not None)


def adapter(hint: Any, constraints: Constraints | None = None) -> TypeAdapter[Any]:
    """The `TypeAdapter` of `hint` with the constraints of its `Query(...)`/`Body(...)` marker."""
    items = _constraint_items(constraints)
    try:
        found = _ADAPTERS.get((hint, items))
    except TypeError:
        return _adapter(hint, items)
    if found is None:
        found = _ADAPTERS[(hint, items)] = _adapter(hint, items)
    return found


def _adapter(hint: Any, items: tuple[tuple[str, Any], ...]) -> TypeAdapter[Any]:
    bare, metadata = split_annotated(hint)
    # Only pydantic's own metadata and annotated-types' constraints mean anything to it; the
    # `Query(...)`-style markers have been read already.
    kept = [m for m in metadata if from_pydantic(m) or type(m).__module__.startswith("annotated_types")]
    if items:
        kept.append(pydantic.Field(**dict(items)))
    target: Any = typing.Annotated[(bare, *kept)] if kept else bare
    return TypeAdapter(target)


def validate(hint: Any, value: Any, loc: Sequence[Any], errors: Errors, constraints: Constraints | None = None) -> Any:
    """`value` validated by pydantic against `hint`, or `INVALID` with FastAPI's error items
    (`loc` in front of pydantic's own) appended to `errors`."""
    try:
        return adapter(hint, constraints).validate_python(value, from_attributes=True)
    except ValidationError as exc:
        errors.extend(error_items(exc, loc))
        return INVALID


def error_items(exc: ValidationError, loc: Sequence[Any]) -> list[dict[str, Any]]:
    """`exc`'s errors as FastAPI's 422 body lists them: without pydantic's `url`, with `loc`
    in front, and `ctx` values made JSON the way `jsonable_encoder` makes them (an exception
    raised by a validator becomes `{}`)."""
    out: list[dict[str, Any]] = []
    for found in exc.errors(include_url=False):
        item: dict[str, Any] = dict(found)
        item["loc"] = [*loc, *found["loc"]]
        ctx = found.get("ctx")
        if ctx is not None:
            item["ctx"] = {key: _jsonable(value) for key, value in ctx.items()}
        out.append(item)
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseException):
        return {}
    return value


def titled(hint: Any, constraints: Constraints | None = None) -> bool:
    """Whether pydantic titles a model's field of this type after the field's name, as it does
    for FastAPI's `Body_...` model: not when the type has a title of its own (a model, an enum,
    `Item | None`)."""
    return GenerateJsonSchema().field_title_should_be_set(adapter(hint, constraints).core_schema)


class ModelField(typing.NamedTuple):
    """A field of a parameter model as FastAPI sees it (`get_cached_model_fields`): its name,
    pydantic's `FieldInfo`, and the model's config, which FastAPI leaves out (None) for a field
    whose type is a model, a dict or a dataclass."""

    name: str
    info: Any
    config: Any


# model -> its fields, worked out once per model.
_MODEL_FIELDS: dict[Any, list[ModelField]] = {}


def model_fields(model: type[BaseModel]) -> list[ModelField]:
    """The fields of a parameter model (`Annotated[Filters, Query()]`), in order."""
    found = _MODEL_FIELDS.get(model)
    if found is None:
        found = []
        for name, info in model.model_fields.items():
            kind = info.annotation
            nested = isinstance(kind, type) and (issubclass(kind, (BaseModel, dict)) or dataclasses.is_dataclass(kind))
            found.append(ModelField(name, info, None if nested else model.model_config))
        _MODEL_FIELDS[model] = found
    return found


def param_aliases(field: ModelField, *, convert_underscores: bool = False) -> list[tuple[str, str]]:
    """`(validation alias, request key)` pairs of a parameter model's field, in the order FastAPI
    tries them (`_get_param_aliases`): its `validation_alias` (or `alias`, or name; a header's
    name with `_` as `-` when `convert_underscores`), each choice of an `AliasChoices`, and its
    name too when the model validates by name (`populate_by_name`)."""
    info, name = field.info, field.name
    given = info.validation_alias
    alias = given if isinstance(given, str) and given else (info.alias if info.alias is not None else name)
    request_alias = alias.replace("_", "-") if convert_underscores and alias == name else alias
    if isinstance(given, pydantic.AliasPath):
        return [(alias, request_alias)]
    aliases = [(alias, request_alias)]
    if isinstance(given, pydantic.AliasChoices):
        if any(isinstance(choice, pydantic.AliasPath) for choice in given.choices):
            return aliases
        aliases = [(choice, choice) for choice in given.choices if isinstance(choice, str)]
    config = field.config or {}
    if config.get("validate_by_alias") is False or config.get("validate_by_name", config.get("populate_by_name", False)):
        request_name = name.replace("_", "-") if convert_underscores else name
        if config.get("validate_by_alias") is False:
            return [(name, request_name)]
        if name not in [a for a, _ in aliases]:
            aliases.append((name, request_name))
    return aliases


class SchemaGenerator(GenerateJsonSchema):
    """pydantic's JSON Schema generator as FastAPI uses it: `bytes` are binary strings."""

    def bytes_schema(self, schema: Any) -> Any:
        json_schema: dict[str, Any] = {"type": "string", "contentMediaType": "application/octet-stream"}
        bytes_mode = self._config.ser_json_bytes if self.mode == "serialization" else self._config.val_json_bytes
        if bytes_mode == "base64":
            json_schema["contentEncoding"] = "base64"
        self.update_with_validations(json_schema, schema, self.ValidationsMapping.bytes)
        return json_schema


def schemas(
    inputs: Sequence[tuple[Any, Constraints | None, str]],
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The JSON Schemas of `inputs` ((hint, constraints, mode): mode is "validation" for what
    comes in, "serialization" for what goes out) and the named schemas they refer to, as
    FastAPI's `get_definitions` makes them: `[schema, ...]` in order, and `{name: schema}`.

    Every model is described in both modes, so that a model whose two schemas differ is named
    `Model-Input` and `Model-Output` here, as FastAPI names it when an app uses it both ways;
    the host names it `Model` again when the whole document uses only one of the two (as
    FastAPI does: see `docs/openapi.rs`)."""
    generator = SchemaGenerator(ref_template=REF_TEMPLATE)
    entries: list[Any] = []
    for index, (hint, constraints, _) in enumerate(inputs):
        core = adapter(hint, constraints).core_schema
        for each in ("validation", "serialization"):
            entries.append((index, each, core))
    found, definitions = generator.generate_definitions(inputs=entries)
    mapping: dict[Any, dict[str, Any]] = dict(found)
    for schema in definitions.values():
        description = schema.get("description")
        if isinstance(description, str):
            schema["description"] = description.split("\f")[0]
    wanted = [_without_none(mapping[(index, mode)]) for index, (_, _, mode) in enumerate(inputs)]
    return wanted, {name: _without_none(schema) for name, schema in definitions.items()}


def _without_none(schema: Any) -> Any:
    """`schema` without the keys whose value is None (`"default": null`), at every depth, as
    FastAPI serves `/openapi.json` (`jsonable_encoder(..., exclude_none=True)`)."""
    if isinstance(schema, dict):
        return {key: _without_none(value) for key, value in schema.items() if value is not None}
    if isinstance(schema, list):
        return [_without_none(item) for item in schema]
    return schema


__all__ = [
    "BaseModel", "ModelField", "ValidationError", "adapter", "error_items", "from_pydantic", "involves",
    "model_fields", "param_aliases", "schemas", "titled", "validate",
]
