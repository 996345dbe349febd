"""Models (dataclasses and TypedDicts) in and out: which fields a request body set, and the
response model a handler's return annotation declares.

**Which fields a body set**, for PATCH handlers (pydantic's `model_fields_set` and
`model_dump(exclude_unset=True)`)::

    from filerouter import asdict, fields_set

    @dataclasses.dataclass
    class BookPatch:
        title: str | None = None
        price: float | None = None

    def PATCH(request, book_id: int, patch: BookPatch):
        fields_set(patch)                    # frozenset({'price'}) for {"price": 9.5}
        changes = asdict(patch, exclude_unset=True)   # {'price': 9.5}: title was not sent
        ...

A dataclass made from a request's input remembers which of its fields the input gave (nested
ones too); one made by code counts every field as set. A TypedDict body holds only the keys
that were sent, so `fields_set` of a dict is its keys.

**Response models**: the return annotation (`-> Book`, `-> list[Book]`, `-> tuple[Book,
Literal[201]]`) validates and filters what the handler returns, as FastAPI's `response_model`
does: a dict, dataclass or other object with more fields than the model is cut down to the
model's fields (nested models and lists too), defaults fill fields it lacks, values convert as
in a request body (lax), and a value that does not fit (a required field missing, a `str` where
an `int` belongs) is a `ResponseValidationError`: a 500, the details in the server's log and the
`dev` error page only. A returned `Response`, `None` and a handler without an annotation are
left as they are.
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import enum
import inspect
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import adapters, operation, validation
from .exceptions import ResponseValidationError
from .forms import UploadFile
from .responses import Response
from .validation import INVALID, error, field_hints, is_typeddict, is_union, split_annotated

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .validation import Errors

__all__ = ["asdict", "fields_set"]

_MISSING = dataclasses.MISSING
_EMPTY = inspect.Parameter.empty


def fields_set(obj: Any) -> frozenset[str]:
    """The names of the fields of `obj` that its input set: for a dataclass made from a request
    body, the fields the client sent (with defaults filling the rest, as pydantic's
    `model_fields_set`); for a dataclass made by code, all of its fields; for a dict (a
    `TypedDict` body), its keys."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        recorded = validation.recorded_fields_set(obj)
        if recorded is not None:
            return recorded
        return frozenset(f.name for f in dataclasses.fields(obj))
    if isinstance(obj, Mapping):
        return frozenset(str(k) for k in obj)
    raise TypeError(f"fields_set() takes a dataclass instance or a dict, not {type(obj).__name__}")


def asdict(obj: Any, *, exclude_unset: bool = False, exclude_none: bool = False) -> dict[str, Any]:
    """`dataclasses.asdict(obj)`, nested dataclasses included, as pydantic's `model_dump`:
    with `exclude_unset`, only the fields the input set (`fields_set`), at every level; with
    `exclude_none`, no field whose value is None. A dict (a `TypedDict` body) is copied the
    same way."""
    if not (dataclasses.is_dataclass(obj) and not isinstance(obj, type)) and not isinstance(obj, Mapping):
        raise TypeError(f"asdict() takes a dataclass instance or a dict, not {type(obj).__name__}")
    out = _plain(obj, exclude_unset, exclude_none)
    return typing.cast("dict[str, Any]", out)


def _plain(value: Any, exclude_unset: bool, exclude_none: bool) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        chosen = fields_set(value) if exclude_unset else None
        out: dict[str, Any] = {}
        for field in dataclasses.fields(value):
            if chosen is not None and field.name not in chosen:
                continue
            item = getattr(value, field.name)
            if exclude_none and item is None:
                continue
            out[field.name] = _plain(item, exclude_unset, exclude_none)
        return out
    if isinstance(value, Mapping):
        return {
            k: _plain(v, exclude_unset, exclude_none)
            for k, v in value.items()
            if not (exclude_none and v is None)
        }
    if isinstance(value, list):
        return [_plain(v, exclude_unset, exclude_none) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v, exclude_unset, exclude_none) for v in value)
    return copy.deepcopy(value)


class ResponseModel:
    """What a handler's return annotation says its answers' bodies are."""

    def __init__(self, hint: Any, label: str, info: operation.RouteInfo | None = None) -> None:
        self.hint = hint
        self.label = label
        # A hint that names pydantic is validated and written out by pydantic, as FastAPI does
        # (`validate_python(value, from_attributes=True)`, then `dump_json` with the
        # `response_model_*` options of `@route`).
        self.pydantic = adapters.adapter(hint) if adapters.involves(hint) else None
        self.options: dict[str, Any] = {}
        self.fast: Callable[[Any], Any]
        if self.pydantic is not None:
            given = info or operation.RouteInfo()
            self.options = {
                "include": given.response_model_include,
                "exclude": given.response_model_exclude,
                "by_alias": given.response_model_by_alias,
                "exclude_unset": given.response_model_exclude_unset,
                "exclude_defaults": given.response_model_exclude_defaults,
                "exclude_none": given.response_model_exclude_none,
            }
            self.fast = _identity
        else:
            # The model as one function per type, worked out once: the common case, a value
            # that fits, runs without looking at a type hint again.
            self.fast = _compile(hint, {})

    def _pydantic_body(self, body: Any, fn: Callable[..., Any]) -> Any:
        adapter = typing.cast("Any", self.pydantic)
        try:
            value = adapter.validate_python(body, from_attributes=True)
        except adapters.ValidationError as exc:
            raise _invalid(fn, self.label, adapters.error_items(exc, ["response"])) from None
        # As FastAPI's `serialize_json`: pydantic writes the JSON itself (`inf` and `nan` as
        # `null`, as its `ser_json_inf_nan` says), sent as it is.
        return Response(adapter.dump_json(value, **self.options), media_type="application/json")

    def apply(self, result: Any, fn: Callable[..., Any]) -> Any:
        """`result` (what `fn` returned) with its body checked and cut down to the model."""
        if result is None or isinstance(result, Response):
            return result
        if isinstance(result, tuple) and len(result) in (2, 3):
            body = result[0]
            if body is None or isinstance(body, Response):
                return result
            return (self._body(body, fn), *result[1:])
        return self._body(result, fn)

    def _body(self, body: Any, fn: Callable[..., Any]) -> Any:
        if self.pydantic is not None:
            return self._pydantic_body(body, fn)
        try:
            return self.fast(body)
        except _Invalid:
            pass
        # It does not fit: again, the slow way, which says where and why.
        errors: Errors = []
        out = dump(self.hint, body, ["response"], errors)
        if errors or out is INVALID:
            raise _invalid(fn, self.label, errors)
        return out


_NONE = object()
# handler -> its ResponseModel, or _NONE: worked out once per function (at build time for
# production, see `warm`).
_MODELS: dict[Any, Any] = {}


def response_model(fn: Callable[..., Any], hints: Mapping[str, Any]) -> ResponseModel | None:
    """The response model of handler `fn` (whose resolved type hints are `hints`), or None when
    its return annotation declares none."""
    try:
        found = _MODELS.get(fn)
    except TypeError:
        return _model_of(declared_model(fn, hints), operation.info_of(fn))
    if found is None:
        found = _MODELS[fn] = _model_of(declared_model(fn, hints), operation.info_of(fn)) or _NONE
    return None if found is _NONE else typing.cast("ResponseModel", found)


# The return annotations of a `yield`ing handler that name its items' type (the first argument).
_STREAMED = (
    collections.abc.AsyncIterable,
    collections.abc.AsyncIterator,
    collections.abc.AsyncGenerator,
    collections.abc.Iterable,
    collections.abc.Iterator,
    collections.abc.Generator,
)


class ItemModel:
    """What each item of a streamed response is (`-> AsyncIterable[Item]`): validated and
    written out by pydantic, as FastAPI 0.135+ does for any item type (its `stream_item_field`),
    with the `response_model_*` options of `@route`."""

    def __init__(self, hint: Any, info: operation.RouteInfo) -> None:
        self.adapter = adapters.adapter(hint)
        self.label = validation.type_label(hint)
        self.options = {
            "include": info.response_model_include,
            "exclude": info.response_model_exclude,
            "by_alias": info.response_model_by_alias,
            "exclude_unset": info.response_model_exclude_unset,
            "exclude_defaults": info.response_model_exclude_defaults,
            "exclude_none": info.response_model_exclude_none,
        }

    def serialize(self, value: Any, fn: Callable[..., Any]) -> bytes:
        """`value` checked and written as JSON; `ResponseValidationError` when it does not fit."""
        try:
            checked = self.adapter.validate_python(value, from_attributes=True)
        except adapters.ValidationError as exc:
            raise _invalid(fn, self.label, adapters.error_items(exc, ["response"])) from None
        return bytes(self.adapter.dump_json(checked, **self.options))


def item_model(fn: Callable[..., Any], hints: Mapping[str, Any]) -> ItemModel | None:
    """The model of each item a `yield`ing handler streams, as FastAPI 0.135+ reads it: `Item`
    of a return annotation `AsyncIterable[Item]` (or `AsyncIterator`, `AsyncGenerator[Item,
    None]`, `Iterable`, `Iterator`, `Generator[Item, None, None]`); None without one, or for
    `ServerSentEvent` items, which go as they are."""
    hint = hints.get("return", _EMPTY)
    if hint is _EMPTY:
        return None
    bare, _ = split_annotated(hint)
    args = typing.get_args(bare)
    if typing.get_origin(bare) not in _STREAMED or not args:
        return None
    item = args[0]
    if item is typing.Any or (isinstance(item, type) and item.__name__ == "ServerSentEvent"):
        return None
    return ItemModel(item, operation.info_of(fn) or operation.RouteInfo())


def declared_model(fn: Callable[..., Any], hints: Mapping[str, Any]) -> Any:
    """The handler's response model as declared: `response_model=` of its `@route(...)` when
    that says one (`None` there turns filtering off, as in FastAPI), else its return annotation."""
    info = getattr(fn, "__filerouter_route__", None)
    declared = getattr(info, "response_model", _EMPTY)
    if declared is not _EMPTY and declared is not dataclasses.MISSING:
        return declared
    return hints.get("return", _EMPTY)


def _model_of(hint: Any, info: operation.RouteInfo | None = None) -> ResponseModel | None:
    """The model of a return annotation, read as `/openapi.json` documents it: `-> Item` (200),
    `-> tuple[Item, Literal[201]]` (the body of a `(body, status)` answer); `-> None` (204),
    response classes and unresolvable annotations declare none."""
    if hint is _EMPTY or hint is None or hint is type(None):
        return None
    bare, _ = split_annotated(hint)
    if typing.get_origin(bare) is tuple:
        args = typing.get_args(bare)
        if len(args) != 2 or typing.get_origin(args[1]) is not typing.Literal:
            return None
        hint = args[0]
        bare, _ = split_annotated(hint)
    if bare is _EMPTY or bare is typing.Any or bare is object or bare is tuple or isinstance(bare, str):
        return None
    if bare is None or bare is type(None):
        return None
    if isinstance(bare, type) and issubclass(bare, (Response, UploadFile)):
        return None
    if not _checkable(bare):
        return None
    if adapters.involves(hint):
        return ResponseModel(hint, validation.type_label(hint), info)
    for record in _records_in(hint, set()):
        _fields(record)  # worked out now: into the build's snapshot
    return ResponseModel(hint, validation.type_label(hint))


def _checkable(hint: Any) -> bool:
    """Whether a hint is one that `dump` can hold a value to (a `TypeVar`, a `Protocol` or a
    string forward reference cannot)."""
    hint, _ = split_annotated(hint)
    if isinstance(hint, (typing.TypeVar, str, typing.ForwardRef)):
        return False
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return True
    if is_union(hint) or origin is not None:
        return all(_checkable(a) for a in typing.get_args(hint) if a is not Ellipsis)
    return hint is None or isinstance(hint, type) or hint is typing.Any


def _records_in(hint: Any, seen: set[type]) -> list[type]:
    """The dataclasses and TypedDicts a hint holds, at any depth."""
    hint, _ = split_annotated(hint)
    found: list[type] = []
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or is_typeddict(hint)):
        if hint in seen:
            return found
        seen.add(hint)
        found.append(hint)
        for _, field_hint, _, _ in _fields(hint):
            found += _records_in(field_hint, seen)
    elif typing.get_origin(hint) not in (None, typing.Literal):
        for arg in typing.get_args(hint):
            found += _records_in(arg, seen)
    return found


def warm(fn: Callable[..., Any], hints: Mapping[str, Any]) -> None:
    """Work out `fn`'s response model now (at build time), so that requests skip it."""
    try:
        response_model(fn, hints)
    except Exception:  # noqa: BLE001  (a strange annotation: requests then answer as without it)
        _MODELS[fn] = _NONE


# (name, hint, default, default_factory) of a record's fields, per class: `typing.get_type_hints`
# is too slow to call for every item of a list.
_FIELDS: dict[type, list[tuple[str, Any, Any, Any]]] = {}


def _fields(cls: type) -> list[tuple[str, Any, Any, Any]]:
    found = _FIELDS.get(cls)
    if found is None:
        hints = field_hints(cls)
        if dataclasses.is_dataclass(cls):
            found = [
                (f.name, hints.get(f.name, typing.Any), f.default, f.default_factory)
                for f in dataclasses.fields(cls)
            ]
        else:
            found = [(name, hint, _MISSING, _MISSING) for name, hint in hints.items()]
        _FIELDS[cls] = found
    return found


def dump(hint: Any, value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    """`value` as the model `hint` says it goes out: records (dataclasses, TypedDicts) become
    dicts of their fields only, read from a dict, a dataclass or any object's attributes;
    containers are walked; scalars are validated and converted as a request's would be.
    `INVALID`, with the reasons in `errors`, when it does not fit."""
    bare, _ = split_annotated(hint)
    if bare is _EMPTY or bare is typing.Any or bare is object:
        return value
    if is_union(bare):
        return _union(bare, value, loc, errors)
    origin = typing.get_origin(bare)
    if origin is typing.Literal:
        return validation.validate(hint, value, loc, errors)
    if origin in (list, set, frozenset, tuple, typing.List, typing.Set, typing.Sequence) or bare in (
        list, set, frozenset, tuple
    ):
        return _sequence(bare, origin or bare, value, loc, errors)
    if origin in (dict, typing.Dict, typing.Mapping) or bare is dict:
        return _mapping(bare, value, loc, errors)
    if isinstance(bare, type):
        if dataclasses.is_dataclass(bare):
            return _record(bare, value, loc, errors, True)
        if is_typeddict(bare):
            return _record(bare, value, loc, errors, False)
    return validation.validate(hint, value, loc, errors)


def _union(hint: Any, value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    members = list(typing.get_args(hint))
    if value is None and type(None) in members:
        return None
    members = [m for m in members if m is not type(None)]
    if len(members) == 1:
        return dump(members[0], value, loc, errors)
    for member in members:  # an instance of exactly one member: that one
        bare, _ = split_annotated(member)
        if isinstance(bare, type) and type(value) is bare:
            return dump(member, value, loc, errors)
    collected: Errors = []
    for member in members:
        attempt: Errors = []
        result = dump(member, value, list(loc) + [validation.type_label(member)], attempt)
        if result is not INVALID and not attempt:
            return result
        collected += attempt
    errors += collected
    return INVALID


def _sequence(hint: Any, origin: Any, value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    kind = {set: "set", frozenset: "frozenset", tuple: "tuple", typing.Set: "set"}.get(origin, "list")
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
    elif inspect.isgenerator(value) or isinstance(value, (range, type({}.values()), type({}.keys()))):
        items = list(value)
    else:
        return error(errors, f"{kind}_type", loc, f"Input should be a valid {kind}", value)
    args = typing.get_args(hint)
    if kind == "tuple" and args and not (len(args) == 2 and args[1] is Ellipsis):
        item_hints = list(args)
    else:
        item_hints = [args[0] if args else typing.Any] * len(items)
    out = []
    failed = False
    for index, item in enumerate(items):
        item_hint = item_hints[index] if index < len(item_hints) else typing.Any
        result = dump(item_hint, item, list(loc) + [index], errors)
        if result is INVALID:
            failed = True
        out.append(result)
    return INVALID if failed else out


def _mapping(hint: Any, value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if not isinstance(value, Mapping):
        return error(errors, "dict_type", loc, "Input should be a valid dictionary", value)
    args = typing.get_args(hint)
    key_hint, value_hint = args if len(args) == 2 else (typing.Any, typing.Any)
    out = {}
    failed = False
    for key, item in value.items():
        new_key = validation.validate(key_hint, key, list(loc) + [key, "[key]"], errors)
        new_value = dump(value_hint, item, list(loc) + [key], errors)
        if new_key is INVALID or new_value is INVALID:
            failed = True
        else:
            out[new_key] = new_value
    return INVALID if failed else out


_NOT_RECORDS = (str, bytes, bytearray, int, float, bool, list, tuple, set, frozenset, enum.Enum)


def _reader(value: Any) -> Callable[[str], tuple[bool, Any]] | None:
    """How to read a record's fields from `value`: a mapping's keys (`sqlite3.Row` too), else an
    object's attributes (a dataclass, an ORM object: pydantic's `from_attributes`)."""
    if isinstance(value, Mapping):
        return lambda name: (name in value, value.get(name))
    if callable(getattr(value, "keys", None)) and hasattr(value, "__getitem__") and not isinstance(value, _NOT_RECORDS):
        try:
            keys = set(value.keys())
        except Exception:  # noqa: BLE001
            return None
        return lambda name: (name in keys, value[name] if name in keys else None)
    if value is None or isinstance(value, _NOT_RECORDS):
        return None
    return lambda name: (hasattr(value, name), getattr(value, name, None))


def _record(cls: type, value: Any, loc: Sequence[Any], errors: Errors, is_dataclass: bool) -> Any:
    read = _reader(value)
    if read is None:
        if is_dataclass:
            return error(
                errors, "dataclass_type", loc,
                f"Input should be a dictionary or an instance of {cls.__name__}", value,
                {"class_name": cls.__name__},
            )
        return error(errors, "dict_type", loc, "Input should be a valid dictionary", value)
    required = getattr(cls, "__required_keys__", None)
    out: dict[str, Any] = {}
    failed = False
    for name, hint, default, factory in _fields(cls):
        present, item = read(name)
        if not present:
            if default is not _MISSING:
                item = default
            elif factory is not _MISSING:
                item = factory()
            elif required is not None and name not in required:
                continue  # a TypedDict's NotRequired key: left out, as pydantic does
            else:
                error(errors, "missing", list(loc) + [name], "Field required", _shown(value))
                failed = True
                continue
        result = dump(hint, item, list(loc) + [name], errors)
        if result is INVALID:
            failed = True
        else:
            out[name] = result
    return INVALID if failed else out


class _Invalid(Exception):
    """A value the fast path cannot take: `dump` then finds out why."""


_ABSENT = object()


_Dumper = typing.Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _compile(hint: Any, memo: dict[Any, _Dumper]) -> _Dumper:
    """The fast form of `dump(hint, ...)` for values that fit: the same result, or `_Invalid`.
    `memo` holds the records being compiled (recursive models refer to themselves)."""
    bare, metadata = split_annotated(hint)
    if bare is _EMPTY or bare is typing.Any or bare is object:
        return _identity
    if is_union(bare):
        return _compile_union(bare, memo)
    origin = typing.get_origin(bare)
    if origin in (list, set, frozenset, tuple, typing.List, typing.Set, typing.Sequence) or bare in (
        list, set, frozenset, tuple
    ):
        args = typing.get_args(bare)
        kind = origin or bare
        if kind is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            return _slow(hint)
        item = _compile(args[0], memo) if args else _identity

        def sequence(value: Any) -> Any:
            if not isinstance(value, (list, tuple, set, frozenset)):
                raise _Invalid
            return [item(v) for v in value]

        return sequence
    if origin in (dict, typing.Dict, typing.Mapping) or bare is dict:
        args = typing.get_args(bare)
        if len(args) == 2 and split_annotated(args[0])[0] in (str, typing.Any) and not split_annotated(args[0])[1]:
            strict_keys = split_annotated(args[0])[0] is str
            item = _compile(args[1], memo)

            def mapping(value: Any) -> Any:
                if not isinstance(value, Mapping):
                    raise _Invalid
                out = {}
                for key, v in value.items():
                    if strict_keys and type(key) is not str:
                        raise _Invalid
                    out[key] = item(v)
                return out

            return mapping
        if not args:

            def plain_mapping(value: Any) -> Any:
                if not isinstance(value, Mapping):
                    raise _Invalid
                return dict(value)

            return plain_mapping
        return _slow(hint)
    if isinstance(bare, type) and (dataclasses.is_dataclass(bare) or is_typeddict(bare)):
        return _compile_record(bare, memo)
    if not metadata and bare in (int, str, float, bool):
        exact = bare
        general = _slow(hint)

        def scalar(value: Any) -> Any:
            if type(value) is exact:
                return value
            return general(value)

        return scalar
    return _slow(hint)


def _slow(hint: Any) -> _Dumper:
    """`dump` itself, as a fast-path dumper (for hints that are rare in response models)."""

    def slow(value: Any) -> Any:
        errors: Errors = []
        out = dump(hint, value, (), errors)
        if errors or out is INVALID:
            raise _Invalid
        return out

    return slow


def _compile_union(hint: Any, memo: dict[Any, _Dumper]) -> _Dumper:
    args = typing.get_args(hint)
    members = [m for m in args if m is not type(None)]
    nullable = len(members) < len(args)
    if len(members) != 1:
        return _slow(hint)
    only = _compile(members[0], memo)

    def optional(value: Any) -> Any:
        if value is None:
            if nullable:
                return None
            raise _Invalid
        return only(value)

    return optional


def _compile_record(cls: type, memo: dict[Any, _Dumper]) -> _Dumper:
    if cls in memo:
        return memo[cls]
    plan: list[tuple[str, _Dumper, Any, Any, bool]] = []

    def record(value: Any) -> Any:
        fetch: Callable[[str, Any], Any]
        if type(value) is dict:
            fetch = value.get
        else:
            read = _reader(value)
            if read is None:
                raise _Invalid

            def fetch(name: str, absent: Any) -> Any:
                found, item = read(name)
                return item if found else absent

        out: dict[str, Any] = {}
        for name, dumper, default, factory, optional in plan:
            item = fetch(name, _ABSENT)
            if item is not _ABSENT:
                out[name] = dumper(item)
            elif default is not _MISSING:
                out[name] = dumper(default)
            elif factory is not _MISSING:
                out[name] = dumper(factory())
            elif optional:
                continue
            else:
                raise _Invalid
        return out

    memo[cls] = record
    required = getattr(cls, "__required_keys__", None)
    for name, hint, default, factory in _fields(cls):
        optional = required is not None and name not in required
        plan.append((name, _compile(hint, memo), default, factory, optional))
    return record


def _shown(value: Any) -> Any:
    """`value` as an error item's `input`: dicts as they are, other objects as their fields."""
    if isinstance(value, Mapping):
        return dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    return value


def _invalid(fn: Callable[..., Any], label: str, errors: Errors) -> ResponseValidationError:
    code = getattr(fn, "__code__", None)
    count = len(errors)
    shown = "\n".join("  " + _item_text(item) for item in errors[:10])
    if count > 10:
        shown += f"\n  ... and {count - 10} more"
    name = getattr(fn, "__name__", "the handler")
    message = (
        f"{name}() returned a value that does not fit its return annotation `{label}` "
        f"(its response model): {count} validation error{'s' if count != 1 else ''}:\n{shown}"
    )
    missing = [item for item in errors if item.get("type") == "missing"]
    suggestions = []
    if missing:
        suggestions.append(
            "Return every required field of the model, or give the field a default (`= None`) in it"
        )
    suggestions.append(
        "The return annotation is the response model, as FastAPI's `response_model`: the returned "
        "value is checked against it and cut down to its fields. Annotate `-> dict[str, Any]` "
        "(or leave the annotation out) to send what the handler returns as it is"
    )
    return ResponseValidationError(
        message,
        errors,
        filename=code.co_filename if code else None,
        lineno=code.co_firstlineno if code else None,
        suggestions=suggestions,
    )


def _item_text(item: dict[str, Any]) -> str:
    shown = dict(item)
    text = repr(shown.get("input"))
    if len(text) > 200:
        text = text[:200] + "..."
    loc = repr(tuple(shown.get("loc", ())))
    return f"{{'type': {shown.get('type')!r}, 'loc': {loc}, 'msg': {shown.get('msg')!r}, 'input': {text}}}"
