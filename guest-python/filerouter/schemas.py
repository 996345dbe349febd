"""JSON Schema of type hints, for `/openapi.json`: what a request body, a declared parameter or a
handler's return annotation looks like, as FastAPI (pydantic 2) documents it.

Dataclasses, TypedDicts and enums become named schemas (`#/components/schemas/Item`), collected
in a `Schemas` object; everything else is inline. `example(schema)` makes a value that fits a
schema, which `/docs` puts in its "Try it" body. Not for: validation (see `validation`).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import typing
import uuid
from typing import TYPE_CHECKING, Any

from . import adapters
from .validation import constraints_in, field_hints, is_typeddict, is_union, split_annotated

if TYPE_CHECKING:
    from collections.abc import Callable

    from .validation import Constraints

    # A JSON Schema, as a dict that becomes JSON.
    Schema = dict[str, Any]

REF = "#/components/schemas/"


def title_of(name: str) -> str:
    return name.replace("_", " ").title()


class Schemas:
    """Named schemas, shared by every hint of one handler."""

    def __init__(self) -> None:
        self.named: dict[str, Schema] = {}

    def of(self, hint: Any, constraints: Constraints | None = None, mode: str = "validation") -> Schema:
        """The JSON Schema of `hint`, with `constraints` (`Constraints`) applied. `mode` is
        "validation" for what a request sends, "serialization" for what a handler returns
        (they differ for pydantic models with computed fields or serializers)."""
        if adapters.involves(hint):
            return self._pydantic(hint, constraints, mode)
        hint, metadata = split_annotated(hint)
        if metadata:
            declared = constraints_in(metadata)
            constraints = declared.merged(constraints) if declared else constraints
        schema = self._bare(hint)
        if constraints:
            schema = _constrained(schema, constraints)
        return schema

    def _pydantic(self, hint: Any, constraints: Constraints | None, mode: str) -> Schema:
        """pydantic's own JSON Schema of `hint`, as FastAPI's `/openapi.json` has it; the models
        it refers to join the named schemas."""
        (schema,), named = adapters.schemas([(hint, constraints, mode)])
        for name, found in named.items():
            self.named.setdefault(name, found)
        return dict(schema)

    def _bare(self, hint: Any) -> Schema:
        if hint is typing.Any or hint is object:
            return {}
        if hint is None or hint is type(None):
            return {"type": "null"}
        if is_union(hint):
            return {"anyOf": [self.of(arg) for arg in typing.get_args(hint)]}
        origin = typing.get_origin(hint)
        if origin is typing.Literal:
            values = list(typing.get_args(hint))
            schema: Schema = {"enum": [v.value if isinstance(v, enum.Enum) else v for v in values]}
            kinds = {_json_type(v) for v in schema["enum"]}
            if len(kinds) == 1 and None not in kinds:
                schema["type"] = kinds.pop()
            return schema
        if origin in (list, set, frozenset, typing.List, typing.Set, typing.Sequence) or hint in (list, set, frozenset):
            args = typing.get_args(hint)
            schema = {"type": "array", "items": self.of(args[0]) if args else {}}
            if origin in (set, frozenset) or hint in (set, frozenset):
                schema["uniqueItems"] = True
            return schema
        if origin is tuple or hint is tuple:
            args = typing.get_args(hint)
            if not args or (len(args) == 2 and args[1] is Ellipsis):
                return {"type": "array", "items": self.of(args[0]) if args else {}}
            items = [self.of(a) for a in args]
            return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        if origin in (dict, typing.Dict, typing.Mapping) or hint is dict:
            args = typing.get_args(hint)
            # As pydantic: `dict` and `dict[str, Any]` allow any value (`true`).
            value = args[1] if len(args) == 2 else typing.Any
            return {"additionalProperties": True if value is typing.Any else self.of(value), "type": "object"}
        if not isinstance(hint, type):
            return {}
        if getattr(hint, "__filerouter_upload__", False):
            return {"type": "string", "format": "binary"}
        if issubclass(hint, enum.Enum):
            return self._named(hint, lambda: _enum_schema(hint))
        if hint is bool:
            return {"type": "boolean"}
        if hint is int:
            return {"type": "integer"}
        if hint is float:
            return {"type": "number"}
        if hint is str:
            return {"type": "string"}
        if hint is bytes:
            return {"type": "string", "format": "binary"}
        if hint is decimal.Decimal:
            return {"anyOf": [{"type": "number"}, {"type": "string"}]}
        if hint is uuid.UUID:
            return {"type": "string", "format": "uuid"}
        if hint is datetime.datetime:
            return {"type": "string", "format": "date-time"}
        if hint is datetime.date:
            return {"type": "string", "format": "date"}
        if hint is datetime.time:
            return {"type": "string", "format": "time"}
        if dataclasses.is_dataclass(hint):
            return self._named(hint, lambda: self._record(hint))
        if is_typeddict(hint):
            return self._named(hint, lambda: self._record(hint))
        return {}

    def _named(self, cls: type, build: Callable[[], Schema]) -> Schema:
        name = cls.__name__
        if name not in self.named:
            self.named[name] = {}  # a placeholder: recursive types refer to themselves
            self.named[name] = build()
        return {"$ref": REF + name}

    def _record(self, cls: type) -> Schema:
        hints = field_hints(cls)
        properties: dict[str, Schema] = {}
        required: list[str] = []
        if dataclasses.is_dataclass(cls):
            fields: list[tuple[str, dataclasses.Field[Any] | None]] = [
                (f.name, f) for f in dataclasses.fields(cls) if f.init
            ]
        else:
            required_keys = getattr(cls, "__required_keys__", set(hints))
            fields = [(name, None) for name in hints]
        for name, field in fields:
            schema = dict(self.of(hints.get(name, typing.Any)))
            schema["title"] = title_of(name)
            if field is not None:
                if field.default is not dataclasses.MISSING:
                    default = jsonable_default(field.default)
                    if default is not NO_DEFAULT:
                        schema["default"] = default
                elif field.default_factory is dataclasses.MISSING:
                    required.append(name)
            elif name in required_keys:  # pyright: ignore[reportPossiblyUnboundVariable]  (set for a TypedDict)
                required.append(name)
            properties[name] = _ordered(schema)
        out: Schema = {"properties": properties, "type": "object"}
        if required:
            out["required"] = required
        out["title"] = cls.__name__
        doc = cls.__doc__
        if doc and not (dataclasses.is_dataclass(cls) and doc.startswith(cls.__name__ + "(")):
            out["description"] = doc.strip()
        return out


NO_DEFAULT = object()


def jsonable_default(value: Any) -> Any:
    """`value` as JSON can carry it, or `NO_DEFAULT`."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (uuid.UUID, datetime.date, decimal.Decimal)):
        value = str(value) if not isinstance(value, datetime.date) else value.isoformat()
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return NO_DEFAULT
    return value


def _ordered(schema: Schema) -> Schema:
    order = ("$ref", "anyOf", "type", "format", "items", "enum")
    out = {k: schema[k] for k in order if k in schema}
    out.update({k: v for k, v in schema.items() if k not in out})
    return out


def _json_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def _enum_schema(cls: type[enum.Enum]) -> Schema:
    values = [m.value for m in cls]
    schema: Schema = {"enum": values, "title": cls.__name__}
    kinds = {_json_type(v) for v in values}
    if len(kinds) == 1 and None not in kinds:
        schema["type"] = kinds.pop()
    return schema


def _constrained(schema: Schema, c: Constraints) -> Schema:
    schema = dict(schema)
    target = schema
    if "anyOf" in schema:  # Optional[int] with ge=1: the bound applies to the int
        members = [dict(m) for m in schema["anyOf"]]
        for member in members:
            if member.get("type") != "null":
                _apply(member, c)
        schema["anyOf"] = members
        return schema
    _apply(target, c)
    return schema


def _apply(schema: Schema, c: Constraints) -> None:
    kind = schema.get("type")
    if kind in ("integer", "number"):
        for name, key in (("gt", "exclusiveMinimum"), ("ge", "minimum"), ("lt", "exclusiveMaximum"), ("le", "maximum"), ("multiple_of", "multipleOf")):
            value = getattr(c, name)
            if value is not None:
                schema[key] = value
    elif kind == "string":
        for name, key in (("min_length", "minLength"), ("max_length", "maxLength"), ("pattern", "pattern")):
            value = getattr(c, name)
            if value is not None:
                schema[key] = value
    elif kind == "array":
        for name, key in (("min_length", "minItems"), ("max_length", "maxItems")):
            value = getattr(c, name)
            if value is not None:
                schema[key] = value


def example(schema: Schema, named: dict[str, Schema], depth: int = 0) -> Any:
    """A value that fits `schema` (resolving `$ref`s in `named`), for the docs' "Try it"."""
    if depth > 8:
        return None
    if "default" in schema:
        return schema["default"]
    if "examples" in schema and schema["examples"]:
        return schema["examples"][0]
    if "$ref" in schema:
        return example(named.get(schema["$ref"][len(REF):], {}), named, depth + 1)
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        members = [m for m in schema["anyOf"] if m.get("type") != "null"] or schema["anyOf"]
        return example(members[0], named, depth + 1)
    kind = schema.get("type")
    if kind == "object":
        if "properties" in schema:
            return {name: example(sub, named, depth + 1) for name, sub in schema["properties"].items()}
        return {}
    if kind == "array":
        items = schema.get("prefixItems")
        if items:
            return [example(i, named, depth + 1) for i in items]
        count = max(1, schema.get("minItems", 1))
        return [example(schema.get("items", {}), named, depth + 1) for _ in range(count)]
    if kind == "integer":
        return _number_example(schema, 0, 1)
    if kind == "number":
        return float(_number_example(schema, 0, 0.5))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "uuid":
            return "3fa85f64-5717-4562-b3fc-2c963f66afa6"
        if fmt == "date":
            return "2024-01-01"
        if fmt == "date-time":
            return "2024-01-01T00:00:00Z"
        if fmt == "binary":
            return ""
        if "pattern" in schema:
            return None
        text = "string"
        low = schema.get("minLength", 0)
        high = schema.get("maxLength")
        if len(text) < low:
            text = text + "x" * (low - len(text))
        if high is not None and len(text) > high:
            text = text[:high]
        return text
    return None


def _number_example(schema: Schema, value: float, step: float) -> Any:
    if "minimum" in schema:
        value = max(value, schema["minimum"])
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        value = schema["exclusiveMinimum"] + step
    if "maximum" in schema and value > schema["maximum"]:
        value = schema["maximum"]
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        value = schema["exclusiveMaximum"] - step
    return value
