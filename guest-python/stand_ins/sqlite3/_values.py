"""Python values to the host's SQL values and back.

Parameters: a value first passes through an adapter registered for its exact type
(`register_adapter`) or its `__conform__` method, as in the standard library; then None, int
(bool too), float, str and bytes-like objects become SQLite's NULL, INTEGER, REAL, TEXT and
BLOB. Anything else is a `ProgrammingError`.

Results: INTEGER, REAL and BLOB come back as int, float and bytes; TEXT through the
connection's `text_factory` (str by default); with a converter (`register_converter`, chosen by
a column name such as `"when [timestamp]"` under `PARSE_COLNAMES`), the converter gets the
value as bytes.
"""

import datetime
import warnings
from collections.abc import Mapping

from wit_world.imports.sql import (
    Params_Named,
    Params_None_,
    Params_Positional,
    Value_Blob,
    Value_Integer,
    Value_Null,
    Value_Real,
    Value_Text,
)

from ._exceptions import ProgrammingError


class PrepareProtocol:
    """The protocol adapters are registered for (`adapters` is keyed by (type, protocol))."""

    __module__ = "sqlite3"


# (type, PrepareProtocol) -> callable(value) -> a value SQLite stores.
adapters = {}
# Type name, upper case -> callable(bytes) -> a Python value.
converters = {}

_NO_ALTERNATIVE = object()
_INT64 = (-(2**63), 2**63 - 1)


def register_adapter(type, adapter, /):  # noqa: A002  (the standard library's parameter name)
    """Bind values of exactly `type` as what `adapter(value)` returns."""
    adapters[(type, PrepareProtocol)] = adapter


def register_converter(typename, converter, /):
    """Convert columns of type `typename` (case-insensitive) with `converter(bytes)`; used
    with `detect_types=PARSE_COLNAMES` (see the package docstring for `PARSE_DECLTYPES`)."""
    converters[typename.upper()] = converter


def adapt(obj, proto=PrepareProtocol, alt=_NO_ALTERNATIVE, /):
    """`obj` adapted for `proto`: its registered adapter, else `proto.__adapt__(obj)`, else
    `obj.__conform__(proto)`, else `alt` (a `ProgrammingError` when there is none)."""
    adapter = adapters.get((type(obj), proto))
    if adapter is not None:
        return adapter(obj)
    proto_adapt = getattr(proto, "__adapt__", None)
    if proto_adapt is not None:
        adapted = proto_adapt(obj)
        if adapted is not None:
            return adapted
    conform = getattr(obj, "__conform__", None)
    if conform is not None:
        adapted = conform(proto)
        if adapted is not None:
            return adapted
    if alt is not _NO_ALTERNATIVE:
        return alt
    raise ProgrammingError("can't adapt")


# Values SQLite stores as they are, unless an adapter was registered for their exact type.
_STORED_AS_IS = frozenset((type(None), int, float, str, bytes))


def _to_host(value, where):
    if type(value) not in _STORED_AS_IS or (type(value), PrepareProtocol) in adapters:
        value = adapt(value, PrepareProtocol, value)
    if value is None:
        return Value_Null()
    if isinstance(value, int):  # bool included, as 0 and 1
        if not _INT64[0] <= value <= _INT64[1]:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return Value_Integer(int(value))
    if isinstance(value, float):
        return Value_Real(float(value))
    if isinstance(value, str):
        value.encode("utf-8")  # a lone surrogate: the standard library's UnicodeEncodeError
        return Value_Text(str(value))
    if isinstance(value, bytes):
        return Value_Blob(bytes(value))
    try:
        view = memoryview(value)  # bytearray, memoryview, array.array, ...
    except TypeError:
        raise ProgrammingError(
            f"Error binding parameter {where}: type '{type(value).__name__}' is not supported"
        ) from None
    return Value_Blob(view.tobytes())


def params_to_host(parameters, statement):
    """The host's `params` for `parameters`: a mapping binds by name (`:name`, `@name` or
    `$name`), any other sequence by position (`?`); None or empty binds nothing.

    A mapping's keys that do not occur in `statement` at all cannot name one of its
    placeholders and are left out; a placeholder with no value is the host's error.
    """
    if parameters is None:
        return Params_None_()
    if isinstance(parameters, Mapping):
        return Params_Named(
            [
                (name, _to_host(value, f":{name}"))
                for name, value in parameters.items()
                if isinstance(name, str) and name in statement
            ]
        )
    if not (hasattr(type(parameters), "__getitem__") and hasattr(type(parameters), "__len__")):
        raise ProgrammingError("parameters are of unsupported type")
    values = [_to_host(parameters[i], i + 1) for i in range(len(parameters))]
    return Params_Positional(values) if values else Params_None_()


def to_python(value, text_factory):
    """The Python value of the host's `value`, TEXT through `text_factory`."""
    if isinstance(value, Value_Text):
        if text_factory is str:
            return value.value
        data = value.value.encode("utf-8")
        if text_factory is bytes:
            return data
        if text_factory is bytearray:
            return bytearray(data)
        return text_factory(data)
    if isinstance(value, Value_Null):
        return None
    return value.value


def converted(value, converter):
    """`converter` applied to the host's `value` as bytes (NULL stays None, unconverted)."""
    if isinstance(value, Value_Null):
        return None
    if isinstance(value, Value_Text):
        data = value.value.encode("utf-8")
    elif isinstance(value, Value_Blob):
        data = bytes(value.value)
    else:  # INTEGER or REAL: SQLite hands converters their text form
        data = repr(value.value).encode("ascii")
    return converter(data)


def converter_for(column):
    """The converter named in a column name such as `"when [timestamp]"`, if registered."""
    start = column.find("[")
    end = column.find("]", start + 1)
    if start == -1 or end == -1:
        return None
    return converters.get(column[start + 1 : end].upper())


def column_name(column):
    """The column name without its `[type]` part, as `PARSE_COLNAMES` reports it."""
    start = column.find("[")
    if start > 0 and column[start - 1] == " ":
        start -= 1
    return column if start == -1 else column[:start]


# The standard library's default adapters and converters (deprecated there since 3.12, with a
# DeprecationWarning; kept so that existing code behaves the same).

_DEPRECATED = "The default {what} is deprecated as of Python 3.12; see the sqlite3 documentation for suggested replacement recipes"


def _adapt_date(value):
    warnings.warn(_DEPRECATED.format(what="date adapter"), DeprecationWarning, stacklevel=2)
    return value.isoformat()


def _adapt_datetime(value):
    warnings.warn(_DEPRECATED.format(what="datetime adapter"), DeprecationWarning, stacklevel=2)
    return value.isoformat(" ")


def _convert_date(value):
    warnings.warn(_DEPRECATED.format(what="date converter"), DeprecationWarning, stacklevel=2)
    return datetime.date(*map(int, value.split(b"-")))


def _convert_timestamp(value):
    warnings.warn(_DEPRECATED.format(what="timestamp converter"), DeprecationWarning, stacklevel=2)
    date_part, time_part = value.split(b" ")
    year, month, day = map(int, date_part.split(b"-"))
    time_full = time_part.split(b".")
    hours, minutes, seconds = map(int, time_full[0].split(b":"))
    microseconds = int("{:0<6.6}".format(time_full[1].decode())) if len(time_full) == 2 else 0
    return datetime.datetime(year, month, day, hours, minutes, seconds, microseconds)


register_adapter(datetime.date, _adapt_date)
register_adapter(datetime.datetime, _adapt_datetime)
register_converter("date", _convert_date)
register_converter("timestamp", _convert_timestamp)
