"""Checking a value against a type hint, as pydantic 2 does in FastAPI (lax mode).

`validate(hint, value, loc, errors, constraints)` returns the converted value, or `INVALID` after
appending FastAPI's error items (`type`, `loc`, `msg`, `input`, `ctx`) to `errors`. It covers what
a handler declares: `int`, `float`, `str`, `bool`, `bytes`, `Decimal`, `UUID`, `date`,
`datetime`, enums, `Literal`, `Optional` and unions, `list`/`set`/`tuple`, `dict`, dataclasses
(nested, with defaults) and `TypedDict`s, with the lax conversions FastAPI applies (`"36"` for an
`int` is 36). Not for: deciding where a value comes from (see `params`), or JSON Schema (see
`schemas`).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import inspect
import math
import re
import types
import typing
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeAlias

    # FastAPI's error items (`type`, `loc`, `msg`, `input`, `ctx`), appended to as they are found.
    Errors: TypeAlias = list[dict[str, Any]]

INVALID = object()
_MISSING = dataclasses.MISSING

_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}
_INT_TEXT = re.compile(r"^[+-]?\d+(_\d+)*(\.0*)?$")


class Constraints:
    """The everyday constraints of FastAPI's `Query(...)`, `Field(...)` and friends."""

    NAMES = ("gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length", "pattern")

    gt: Any
    ge: Any
    lt: Any
    le: Any
    multiple_of: Any
    min_length: int | None
    max_length: int | None
    pattern: str | None

    def __init__(self, **given: Any) -> None:
        for name in self.NAMES:
            setattr(self, name, given.get(name))

    def __bool__(self) -> bool:
        return any(getattr(self, name) is not None for name in self.NAMES)

    def merged(self, other: Constraints | None) -> Constraints:
        if other is None:
            return self
        out = Constraints()
        for name in self.NAMES:
            mine = getattr(self, name)
            setattr(out, name, mine if mine is not None else getattr(other, name))
        return out


def error(
    errors: Errors, type_: str, loc: Sequence[Any], msg: str, value: Any, ctx: dict[str, Any] | None = None
) -> Any:
    item: dict[str, Any] = {"type": type_, "loc": list(loc), "msg": msg, "input": value}
    if ctx is not None:
        item["ctx"] = ctx
    errors.append(item)
    return INVALID


def expected_text(choices: Sequence[Any]) -> str:
    quoted = [repr(c) if isinstance(c, str) else str(c) for c in choices]
    if len(quoted) <= 1:
        return "".join(quoted)
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]


# A TypedDict key's qualifiers, which `get_type_hints(include_extras=True)` keeps around its type.
_QUALIFIERS = tuple(
    getattr(typing, name) for name in ("Required", "NotRequired", "ReadOnly") if hasattr(typing, name)
)


def split_annotated(hint: Any) -> tuple[Any, list[Any]]:
    """(the bare hint, its `Annotated` metadata); a TypedDict key's `NotRequired[...]`,
    `Required[...]` and `ReadOnly[...]` are taken off too."""
    metadata: list[Any] = []
    while True:
        origin = typing.get_origin(hint)
        if origin is typing.Annotated:
            metadata = list(hint.__metadata__) + metadata
            hint = hint.__origin__
        elif origin in _QUALIFIERS:
            hint = typing.get_args(hint)[0]
        else:
            return hint, metadata


def constraints_in(metadata: Sequence[Any]) -> Constraints | None:
    """The `Constraints` carried by `Annotated[...]` metadata (from `Field`, `Query`, ...)."""
    found = None
    for item in metadata:
        own = getattr(item, "constraints", None)
        if isinstance(own, Constraints):
            found = own.merged(found)
    return found


def is_union(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    return origin is typing.Union or origin is types.UnionType


def is_typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__required_keys__")


def type_label(hint: Any) -> str:
    """The name pydantic gives a union member in an error location."""
    hint, _ = split_annotated(hint)
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint) or is_typeddict(hint) or issubclass(hint, enum.Enum):
            return hint.__name__
        return {uuid.UUID: "uuid", datetime.datetime: "datetime", datetime.date: "date",
                decimal.Decimal: "decimal"}.get(hint, hint.__name__)
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return "literal[" + ",".join(repr(a) for a in typing.get_args(hint)) + "]"
    if origin is not None:
        args = ",".join(type_label(a) for a in typing.get_args(hint))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return str(hint)


def validate(hint: Any, value: Any, loc: Sequence[Any], errors: Errors, constraints: Constraints | None = None) -> Any:
    """`value` converted to `hint`, or `INVALID` with the reasons appended to `errors`."""
    # The commonest hints, bare: what the steps below would come to for them.
    if hint is int:
        return _number(_int(value, loc, errors), value, loc, errors, constraints)
    if hint is str:
        return _text(_str(value, loc, errors), value, loc, errors, constraints)
    hint, metadata = split_annotated(hint)
    declared = constraints_in(metadata) if metadata else None
    if declared is not None:
        constraints = declared.merged(constraints)
    if hint is inspect.Parameter.empty or hint is typing.Any or hint is None and value is None or hint is object:
        return value
    if is_union(hint):
        return _union(hint, value, loc, errors, constraints)
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return _literal(typing.get_args(hint), value, loc, errors)
    if origin in (list, set, frozenset, tuple, typing.List, typing.Set, typing.Sequence) or hint in (
        list, set, frozenset, tuple
    ):
        return _sequence(hint, origin or hint, value, loc, errors, constraints)
    if origin in (dict, typing.Dict, typing.Mapping) or hint is dict:
        return _mapping(hint, value, loc, errors)
    if hint is type(None) or hint is None:
        if value is None:
            return None
        return error(errors, "none_required", loc, "Input should be None", value)
    if not isinstance(hint, type):
        return value
    if issubclass(hint, enum.Enum):
        return _enum(hint, value, loc, errors)
    if hint is bool:
        return _bool(value, loc, errors)
    if hint is int:
        return _number(_int(value, loc, errors), value, loc, errors, constraints)
    if hint is float:
        return _number(_float(value, loc, errors), value, loc, errors, constraints, as_float=True)
    if hint is decimal.Decimal:
        return _number(_decimal(value, loc, errors), value, loc, errors, constraints)
    if hint is str:
        return _text(_str(value, loc, errors), value, loc, errors, constraints)
    if hint is bytes:
        return _bytes(value, loc, errors, constraints)
    if hint is uuid.UUID:
        return _uuid(value, loc, errors)
    if hint is datetime.datetime:
        return _datetime(value, loc, errors)
    if hint is datetime.date:
        return _date(value, loc, errors)
    if dataclasses.is_dataclass(hint):
        return _dataclass(hint, value, loc, errors)
    if is_typeddict(hint):
        return _typeddict(hint, value, loc, errors)
    if isinstance(value, hint):
        return value
    upload = getattr(hint, "__filerouter_upload__", False)
    if upload:
        return error(
            errors, "value_error", loc,
            f"Value error, Expected UploadFile, received: {type(value)}", value, {"error": {}},
        )
    return error(
        errors, "is_instance_of", loc, f"Input should be an instance of {hint.__name__}", value,
        {"class": hint.__name__},
    )


def _union(hint: Any, value: Any, loc: Sequence[Any], errors: Errors, constraints: Constraints | None) -> Any:
    members = list(typing.get_args(hint))
    if value is None and type(None) in members:
        return None
    members = [m for m in members if m is not type(None)]
    if len(members) == 1:
        if value is None:
            return validate(members[0], value, loc, errors, constraints)
        return validate(members[0], value, loc, errors, constraints)
    # Smart mode: an exact type match first, then the first member that validates.
    for member in members:
        bare, _ = split_annotated(member)
        if isinstance(bare, type) and type(value) is bare:
            return validate(member, value, loc, errors, constraints)
    collected: Errors = []
    for member in members:
        attempt: Errors = []
        result = validate(member, value, list(loc) + [type_label(member)], attempt, constraints)
        if result is not INVALID:
            return result
        collected += attempt
    errors += collected
    return INVALID


def _literal(choices: Sequence[Any], value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    for choice in choices:
        if value == choice and type(value) is type(choice):
            return choice
    for choice in choices:  # an enum member given by its value, `"1"` for 1 is not lax here
        if isinstance(choice, enum.Enum) and value == choice.value:
            return choice
    expected = expected_text(choices)
    return error(errors, "literal_error", loc, f"Input should be {expected}", value, {"expected": expected})


def _enum(cls: type[enum.Enum], value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if isinstance(value, cls):
        return value
    for member in cls:
        if member.value == value and not (isinstance(value, bool) != isinstance(member.value, bool)):
            return member
    if isinstance(value, str):
        for member in cls:
            if not isinstance(member.value, str) and str(member.value) == value:
                return member
    expected = expected_text([m.value for m in cls])
    return error(errors, "enum", loc, f"Input should be {expected}", value, {"expected": expected})


def _bool(value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    if isinstance(value, (str, int, float)):
        return error(errors, "bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value)
    return error(errors, "bool_type", loc, "Input should be a valid boolean", value)


def _int(value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value):
            return int(value)
        if not math.isfinite(value):
            return error(errors, "finite_number", loc, "Input should be a finite number", value)
        return error(errors, "int_from_float", loc, "Input should be a valid integer, got a number with a fractional part", value)
    if isinstance(value, decimal.Decimal) and value == value.to_integral_value():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and _INT_TEXT.match(text):
            try:
                return int(text.split(".")[0].replace("_", ""))
            except ValueError:  # past CPython's 4,300 digits, which pydantic refuses too
                return error(errors, "int_parsing_size", loc, "Unable to parse input string as an integer, exceeded maximum size", value)
        return error(errors, "int_parsing", loc, "Input should be a valid integer, unable to parse string as an integer", value)
    return error(errors, "int_type", loc, "Input should be a valid integer", value)


def _float(value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            if not text or not text.isascii() or "__" in text or text.startswith("_") or text.endswith("_"):
                raise ValueError(text)
            return float(text)
        except ValueError:
            return error(errors, "float_parsing", loc, "Input should be a valid number, unable to parse string as a number", value)
    return error(errors, "float_type", loc, "Input should be a valid number", value)


def _decimal(value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if isinstance(value, decimal.Decimal):
        return value
    if isinstance(value, bool):
        return decimal.Decimal(int(value))
    if isinstance(value, int):
        return decimal.Decimal(value)
    if isinstance(value, float):
        return decimal.Decimal(str(value))
    if isinstance(value, str):
        try:
            return decimal.Decimal(value.strip())
        except decimal.InvalidOperation:
            return error(errors, "decimal_parsing", loc, "Input should be a valid decimal", value)
    return error(errors, "decimal_type", loc, "Decimal input should be an integer, float, string or Decimal object", value)


def _ctx_number(bound: Any, as_float: bool) -> Any:
    return float(bound) if as_float else bound


def _number(
    number: Any, value: Any, loc: Sequence[Any], errors: Errors, constraints: Constraints | None, as_float: bool = False
) -> Any:
    if number is INVALID or not constraints:
        return number
    c = constraints
    checks: tuple[tuple[str, Callable[[Any], bool], str, str], ...] = (
        ("gt", lambda b: number > b, "greater_than", "greater than"),
        ("ge", lambda b: number >= b, "greater_than_equal", "greater than or equal to"),
        ("lt", lambda b: number < b, "less_than", "less than"),
        ("le", lambda b: number <= b, "less_than_equal", "less than or equal to"),
    )
    for name, ok, type_, words in checks:
        bound = getattr(c, name)
        if bound is not None and not ok(bound):
            shown = _ctx_number(bound, as_float)
            return error(errors, type_, loc, f"Input should be {words} {bound}", value, {name: shown})
    if c.multiple_of is not None and number % c.multiple_of != 0:
        shown = _ctx_number(c.multiple_of, as_float)
        return error(errors, "multiple_of", loc, f"Input should be a multiple of {c.multiple_of}", value, {"multiple_of": shown})
    return number


def _str(value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, enum.Enum) and isinstance(value.value, str):
        return value.value
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return error(errors, "string_unicode", loc, "Input should be a valid string, unable to parse raw data as a unicode string", value)
    return error(errors, "string_type", loc, "Input should be a valid string", value)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _text(text: Any, value: Any, loc: Sequence[Any], errors: Errors, constraints: Constraints | None) -> Any:
    if text is INVALID or not constraints:
        return text
    c = constraints
    if c.min_length is not None and len(text) < c.min_length:
        return error(errors, "string_too_short", loc, f"String should have at least {_plural(c.min_length, 'character')}", value, {"min_length": c.min_length})
    if c.max_length is not None and len(text) > c.max_length:
        return error(errors, "string_too_long", loc, f"String should have at most {_plural(c.max_length, 'character')}", value, {"max_length": c.max_length})
    if c.pattern is not None and re.search(c.pattern, text) is None:
        return error(errors, "string_pattern_mismatch", loc, f"String should match pattern '{c.pattern}'", value, {"pattern": c.pattern})
    return text


def _bytes(value: Any, loc: Sequence[Any], errors: Errors, constraints: Constraints | None) -> Any:
    if isinstance(value, (bytes, bytearray)):
        data = bytes(value)
    elif isinstance(value, str):
        data = value.encode()
    else:
        return error(errors, "bytes_type", loc, "Input should be a valid bytes", value)
    c = constraints
    if c and c.min_length is not None and len(data) < c.min_length:
        return error(errors, "bytes_too_short", loc, f"Data should have at least {_plural(c.min_length, 'byte')}", value, {"min_length": c.min_length})
    if c and c.max_length is not None and len(data) > c.max_length:
        return error(errors, "bytes_too_long", loc, f"Data should have at most {_plural(c.max_length, 'byte')}", value, {"max_length": c.max_length})
    return data


def _uuid(value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("latin-1")
    if not isinstance(value, str):
        return error(errors, "uuid_type", loc, "UUID input should be a string, bytes or UUID object", value)
    reason = _uuid_problem(value)
    if reason is None:
        try:
            return uuid.UUID(value)
        except ValueError:
            reason = f"invalid length: found {len(value)}"
    return error(errors, "uuid_parsing", loc, f"Input should be a valid UUID, {reason}", value, {"error": reason})


def _uuid_problem(text: str) -> str | None:
    """What the `uuid` crate (behind pydantic) says about `text`, or None if it parses."""
    body = text[9:] if text.lower().startswith("urn:uuid:") else text
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    for index, char in enumerate(body):
        if not (char in "0123456789abcdefABCDEF-"):
            return f"invalid character: found `{char}` at {index}"
    if len(body) not in (32, 36):
        return f"invalid length: found {len(body)}"
    if len(body) == 36:
        groups = body.split("-")
        if [len(g) for g in groups] != [8, 4, 4, 4, 12]:
            return f"invalid group count: expected 5, found {len(groups)}" if len(groups) != 5 else (
                "invalid group length in group 0"
            )
    elif "-" in body:
        return f"invalid character: found `-` at {body.index('-')}"
    return None


class _DateProblem(Exception):
    pass


def _digits(text: str, start: int, count: int, what: str) -> int:
    part = text[start:start + count]
    if len(part) < count:
        raise _DateProblem("input is too short")
    if not part.isascii() or not part.isdigit():
        raise _DateProblem(f"invalid character in {what}")
    return int(part)


def _parse_date(text: str) -> datetime.date:
    if len(text) < 10:
        raise _DateProblem("input is too short")
    year = _digits(text, 0, 4, "year")
    if text[4] != "-":
        raise _DateProblem("invalid date separator, expected `-`")
    month = _digits(text, 5, 2, "month")
    if text[7] != "-":
        raise _DateProblem("invalid date separator, expected `-`")
    day = _digits(text, 8, 2, "day")
    if not 1 <= month <= 12:
        raise _DateProblem("month value is outside expected range of 1-12")
    try:
        return datetime.date(year, month, day)
    except ValueError:
        raise _DateProblem("day value is outside expected range") from None


def _parse_datetime(text: str) -> datetime.datetime:
    day = _parse_date(text)
    rest = text[10:]
    if not rest:
        return datetime.datetime(day.year, day.month, day.day)
    if rest[0] not in "Tt _":
        raise _DateProblem("invalid datetime separator, expected `T`, `t`, `_` or space")
    rest = rest[1:]
    hour = _digits(rest, 0, 2, "hour")
    if len(rest) < 3 or rest[2] != ":":
        raise _DateProblem("invalid time separator, expected `:`" if len(rest) >= 3 else "input is too short")
    minute = _digits(rest, 3, 2, "minute")
    second = micro = 0
    pos = 5
    if len(rest) > pos and rest[pos] == ":":
        second = _digits(rest, 6, 2, "second")
        pos = 8
        if len(rest) > pos and rest[pos] in ".,":
            end = pos + 1
            while end < len(rest) and rest[end].isdigit():
                end += 1
            fraction = rest[pos + 1:end]
            if not fraction:
                raise _DateProblem("invalid character in second fraction")
            micro = int((fraction + "000000")[:6])
            pos = end
    tz = None
    tail = rest[pos:]
    if tail in ("Z", "z"):
        tz = datetime.timezone.utc
    elif tail:
        match = re.fullmatch(r"([+-])(\d\d):?(\d\d)", tail)
        if match is None:
            raise _DateProblem("unexpected extra characters at the end of the input")
        sign = 1 if match.group(1) == "+" else -1
        tz = datetime.timezone(sign * datetime.timedelta(hours=int(match.group(2)), minutes=int(match.group(3))))
    if hour > 23:
        raise _DateProblem("hour value is outside expected range of 0-23")
    if minute > 59:
        raise _DateProblem("minute value is outside expected range of 0-59")
    if second > 59:
        raise _DateProblem("second value is outside expected range of 0-59")
    return datetime.datetime(day.year, day.month, day.day, hour, minute, second, micro, tzinfo=tz)


def _from_timestamp(number: float) -> datetime.datetime:
    seconds = float(number)
    if abs(seconds) > 20_000_000_000:  # milliseconds, as pydantic reads large numbers
        seconds /= 1000
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=seconds)


def _datetime(value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, datetime.date):
        return datetime.datetime(value.year, value.month, value.day)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _from_timestamp(value)
    if isinstance(value, str):
        try:
            return _parse_datetime(value)
        except _DateProblem as problem:
            reason = str(problem)
            if reason == "input is too short" and value.strip().lstrip("+-").replace(".", "", 1).isdigit():
                return _from_timestamp(float(value))
            return error(errors, "datetime_from_date_parsing", loc, f"Input should be a valid datetime or date, {reason}", value, {"error": reason})
    return error(errors, "datetime_type", loc, "Input should be a valid datetime", value)


def _date(value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if isinstance(value, datetime.datetime):
        value = value.date() if value.time() == datetime.time() else value
        if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
            return value
        return error(errors, "date_from_datetime_inexact", loc, "Datetimes provided to dates should have zero time - e.g. be exact dates", value)
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        moment = _from_timestamp(value)
        if moment.time() != datetime.time():
            return error(errors, "date_from_datetime_inexact", loc, "Datetimes provided to dates should have zero time - e.g. be exact dates", value)
        return moment.date()
    if isinstance(value, str):
        try:
            if len(value) == 10:
                return _parse_date(value)
            moment = _parse_datetime(value)
        except _DateProblem as problem:
            reason = str(problem)
            return error(errors, "date_from_datetime_parsing", loc, f"Input should be a valid date or datetime, {reason}", value, {"error": reason})
        if moment.time() != datetime.time():
            return error(errors, "date_from_datetime_inexact", loc, "Datetimes provided to dates should have zero time - e.g. be exact dates", value)
        return moment.date()
    return error(errors, "date_type", loc, "Input should be a valid date", value)


def _sequence(
    hint: Any, origin: Any, value: Any, loc: Sequence[Any], errors: Errors, constraints: Constraints | None
) -> Any:
    kind = {set: "set", frozenset: "frozenset", tuple: "tuple", typing.Set: "set"}.get(origin, "list")
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
    else:
        return error(errors, f"{kind}_type", loc, f"Input should be a valid {kind}", value)
    args = typing.get_args(hint)
    if kind == "tuple" and args and not (len(args) == 2 and args[1] is Ellipsis):
        item_hints = list(args)
    else:
        item_hints = [args[0] if args else typing.Any] * len(items)
    c = constraints
    field_type = kind.capitalize()
    if c and c.min_length is not None and len(items) < c.min_length:
        return error(errors, "too_short", loc, f"{field_type} should have at least {_plural(c.min_length, 'item')} after validation, not {len(items)}", value, {"field_type": field_type, "min_length": c.min_length, "actual_length": len(items)})
    if c and c.max_length is not None and len(items) > c.max_length:
        return error(errors, "too_long", loc, f"{field_type} should have at most {_plural(c.max_length, 'item')} after validation, not {len(items)}", value, {"field_type": field_type, "max_length": c.max_length, "actual_length": len(items)})
    out = []
    failed = False
    for index, item in enumerate(items):
        item_hint = item_hints[index] if index < len(item_hints) else typing.Any
        result = validate(item_hint, item, list(loc) + [index], errors)
        if result is INVALID:
            failed = True
        out.append(result)
    if failed:
        return INVALID
    if kind == "set":
        return set(out)
    if kind == "frozenset":
        return frozenset(out)
    if kind == "tuple":
        return tuple(out)
    return out


def _mapping(hint: Any, value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if not isinstance(value, dict):
        return error(errors, "dict_type", loc, "Input should be a valid dictionary", value)
    args = typing.get_args(hint)
    key_hint, value_hint = args if len(args) == 2 else (typing.Any, typing.Any)
    out = {}
    failed = False
    for key, item in value.items():
        new_key = validate(key_hint, key, list(loc) + [key, "[key]"], errors)
        new_value = validate(value_hint, item, list(loc) + [key], errors)
        if new_key is INVALID or new_value is INVALID:
            failed = True
        else:
            out[new_key] = new_value
    return INVALID if failed else out


# class -> its fields' resolved hints, once resolved: `typing.get_type_hints` costs more than
# validating a small body. Filled at build time by `warm` for the classes handlers take, so that
# a fresh instance finds them resolved; shared, so never changed by a caller.
_HINTS: dict[type, dict[str, Any]] = {}


def field_hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of a dataclass's or TypedDict's fields (with `Annotated` kept).
    The same dict every time once they resolve: read it, never change it."""
    found = _HINTS.get(cls)
    if found is not None:
        return found
    try:
        found = _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # noqa: BLE001  (an unresolvable forward reference: keep the raw text)
        return dict(getattr(cls, "__annotations__", {}))  # not kept: it may resolve later
    return found


# dataclass -> (name, hint, required) of each field `__init__` takes, worked out once.
_INIT_FIELDS: dict[type, list[tuple[str, Any, bool]]] = {}


def _init_fields(cls: type) -> list[tuple[str, Any, bool]]:
    found = _INIT_FIELDS.get(cls)
    if found is None:
        hints = field_hints(cls)
        found = [
            (f.name, hints.get(f.name, typing.Any), f.default is _MISSING and f.default_factory is _MISSING)
            for f in dataclasses.fields(cls)
            if f.init
        ]
        if cls in _HINTS:  # resolved: the answer will not change
            _INIT_FIELDS[cls] = found
    return found


def warm(hint: Any, seen: set[int] | None = None) -> None:
    """Resolve now (at build time) the field hints of the dataclasses and TypedDicts that
    `hint` is or contains, so that requests validating them find the work done."""
    seen = set() if seen is None else seen
    if id(hint) in seen:
        return
    seen.add(id(hint))
    bare, _ = split_annotated(hint)
    for arg in typing.get_args(bare):
        warm(arg, seen)
    if isinstance(bare, type) and (dataclasses.is_dataclass(bare) or is_typeddict(bare)):
        try:
            hints = field_hints(bare)
            if dataclasses.is_dataclass(bare):
                _init_fields(bare)
        except Exception:  # noqa: BLE001  (speed only: a request works it out, or reports it)
            return
        for field_hint in hints.values():
            warm(field_hint, seen)


def _dataclass(cls: Any, value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        return error(errors, "dataclass_type", loc, f"Input should be a dictionary or an instance of {cls.__name__}", value, {"class_name": cls.__name__})
    kwargs = {}
    failed = False
    for name, hint, required in _init_fields(cls):
        if name not in value:
            if required:
                error(errors, "missing", list(loc) + [name], "Field required", value)
                failed = True
            continue
        result = validate(hint, value[name], list(loc) + [name], errors)
        if result is INVALID:
            failed = True
        else:
            kwargs[name] = result
    if failed:
        return INVALID
    try:
        made = cls(**kwargs)
    except (ValueError, AssertionError) as exc:
        kind = "assertion_error" if isinstance(exc, AssertionError) else "value_error"
        label = "Assertion failed" if isinstance(exc, AssertionError) else "Value error"
        return error(errors, kind, loc, f"{label}, {exc}", value, {"error": str(exc)})
    record_fields_set(made, kwargs)
    return made


# id(instance) -> (instance, the names of the fields its input gave), for `fields_set`: every
# dataclass made from a request's input. Kept per module, which is per request (every request
# runs in a fresh instance); the instance is held so that its id stays its own.
_FIELDS_SET: dict[int, tuple[Any, frozenset[str]]] = {}


def record_fields_set(instance: Any, given: Any) -> None:
    """Remember that `instance` was made from input that set the fields named in `given`."""
    _FIELDS_SET[id(instance)] = (instance, frozenset(given))


def recorded_fields_set(instance: Any) -> frozenset[str] | None:
    """The fields the input of `instance` set, if validation made it; else None."""
    found = _FIELDS_SET.get(id(instance))
    if found is None or found[0] is not instance:
        return None
    return found[1]


def _typeddict(cls: Any, value: Any, loc: Sequence[Any], errors: Errors) -> Any:
    if not isinstance(value, dict):
        return error(errors, "dict_type", loc, "Input should be a valid dictionary", value)
    hints = field_hints(cls)
    required = getattr(cls, "__required_keys__", set(hints))
    out = {}
    failed = False
    for name, hint in hints.items():
        if name not in value:
            if name in required:
                error(errors, "missing", list(loc) + [name], "Field required", value)
                failed = True
            continue
        result = validate(hint, value[name], list(loc) + [name], errors)
        if result is INVALID:
            failed = True
        else:
            out[name] = result
    return INVALID if failed else out
