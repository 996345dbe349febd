"""Binding a handler's parameters: path parameters and query parameters, converted by type hint.

Conversion failures are collected as FastAPI (pydantic 2) reports them, so a client gets the same
422 body from filerouter as from FastAPI.
"""

import contextlib
import enum
import inspect
import typing
import uuid

from .exceptions import HandlerSignatureError, RequestValidationError
from .requests import Request

_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def _to_int(raw):
    text = raw.strip()
    if text[:1] in "+-":
        digits = text[1:]
    else:
        digits = text
    if not digits.isascii() or not digits.isdigit():
        raise _Invalid("int_parsing", "Input should be a valid integer, unable to parse string as an integer")
    return int(text)


def _to_float(raw):
    try:
        if "_" in raw:
            raise ValueError(raw)
        return float(raw)
    except ValueError:
        raise _Invalid("float_parsing", "Input should be a valid number, unable to parse string as a number") from None


def _to_bool(raw):
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise _Invalid("bool_parsing", "Input should be a valid boolean, unable to interpret input")


def _to_uuid(raw):
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise _Invalid(
            "uuid_parsing", "Input should be a valid UUID, unable to parse string as a UUID"
        ) from None


def _expected(choices):
    quoted = [repr(str(c)) for c in choices]
    if len(quoted) <= 1:
        return "".join(quoted)
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _to_enum(cls, raw):
    for member in cls:
        if str(member.value) == raw:
            return member
    expected = _expected([m.value for m in cls])
    raise _Invalid("enum", f"Input should be {expected}", {"expected": expected})


class _Invalid(Exception):
    def __init__(self, type_, msg, ctx=None):
        super().__init__(msg)
        self.type = type_
        self.msg = msg
        self.ctx = ctx


def kind_of(hint):
    """The name of the conversion a hint asks for: int, float, str, bool, uuid, enum, list, any."""
    if hint is inspect.Parameter.empty or hint is typing.Any:
        return "any"
    origin = typing.get_origin(hint)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return kind_of(args[0]) if len(args) == 1 else "any"
    if origin in (list, typing.List):
        return "list"
    if hint is bool:
        return "bool"
    if hint is int:
        return "int"
    if hint is float:
        return "float"
    if hint is str:
        return "str"
    if hint is list:
        return "list"
    if hint is uuid.UUID:
        return "uuid"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "enum"
    return "any"


def enum_class(hint):
    origin = typing.get_origin(hint)
    if origin is not None:
        for arg in typing.get_args(hint):
            if isinstance(arg, type) and issubclass(arg, enum.Enum):
                return arg
        return None
    return hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else None


def convert(hint, raw):
    """Convert the text `raw` (or a list of texts, for a catch-all) by the hint `hint`."""
    kind = kind_of(hint)
    if isinstance(raw, list):
        if kind == "list":
            args = typing.get_args(hint)
            if args and kind_of(args[0]) not in ("any", "str", "list"):
                return [convert(args[0], item) for item in raw]
        return list(raw)
    if kind == "int":
        return _to_int(raw)
    if kind == "float":
        return _to_float(raw)
    if kind == "bool":
        return _to_bool(raw)
    if kind == "uuid":
        return _to_uuid(raw)
    if kind == "enum":
        return _to_enum(enum_class(hint), raw)
    return raw


def type_hints(fn):
    """The function's resolved type hints; unresolvable string annotations stay as they are."""
    try:
        return typing.get_type_hints(fn)
    except Exception:
        return {
            name: p.annotation
            for name, p in inspect.signature(fn).parameters.items()
            if p.annotation is not inspect.Parameter.empty
        }


# fn -> (signature, type hints). Filled per instance in development; `filerouter build` fills it
# for every handler and dependency before the snapshot, so production requests skip `inspect`.
_SIGNATURES = {}


def signature_of(fn):
    """`(inspect.signature(fn), type_hints(fn))`, computed once per function."""
    try:
        found = _SIGNATURES.get(fn)
    except TypeError:  # an unhashable callable object: nothing to remember it by
        return inspect.signature(fn), type_hints(fn)
    if found is None:
        found = _SIGNATURES[fn] = (inspect.signature(fn), type_hints(fn))
    return found


def warm(fn):
    """Compute the signatures of `fn` and of its dependencies now (at build time)."""
    _names_taken(fn, set())


def wants_request(param, hints):
    """Whether a parameter receives the `Request`: named `request` or annotated with `Request`."""
    hint = hints.get(param.name, inspect.Parameter.empty)
    return param.name == "request" or (isinstance(hint, type) and issubclass(hint, Request))


def _suggested_signature(fn, signature, hints, path_values):
    parts = ["request"]
    for name, value in path_values.items():
        parts.append(f"{name}: list" if isinstance(value, list) else f"{name}: str")
    for param in signature.parameters.values():
        if param.name in path_values or param.name == "request":
            continue
        parts.append(str(param))
    prefix = "async def" if inspect.iscoroutinefunction(fn) else "def"
    return f"{prefix} {fn.__name__}({', '.join(parts)}):"


def _names_taken(fn, seen):
    """The parameter names of `fn` and of its dependencies, recursively."""
    if fn in seen:
        return set()
    seen.add(fn)
    signature, hints = signature_of(fn)
    names = set()
    for param in signature.parameters.values():
        names.add(param.name)
        try:
            dependency = dependency_of(param, hints)
        except HandlerSignatureError:
            dependency = None
        if dependency is not None:
            names |= _names_taken(dependency, seen)
    return names


def check_signature(fn, path_values):
    """Raise `HandlerSignatureError` if `fn` cannot take its route's path parameters."""
    signature, hints = signature_of(fn)
    params = signature.parameters
    code = getattr(fn, "__code__", None)
    where = {"filename": code.co_filename if code else None, "lineno": code.co_firstlineno if code else None}
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    taken = _names_taken(fn, set())
    missing = [name for name in path_values if name not in taken and not takes_any]
    if missing:
        names = ", ".join(f"`{n}`" for n in missing)
        raise HandlerSignatureError(
            f"{fn.__name__}() does not accept the path parameter {names} of its route",
            suggestions=[
                "Every [name] folder in the route's path becomes a parameter of the same name: "
                + _suggested_signature(fn, signature, hints, path_values)
            ],
            **where,
        )
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if positional:
        first = positional[0]
        hint = hints.get(first.name, inspect.Parameter.empty)
        if (
            not wants_request(first, hints)
            and first.name not in path_values
            and first.default is inspect.Parameter.empty
            and hint is inspect.Parameter.empty
        ):
            raise HandlerSignatureError(
                f"the first parameter of {fn.__name__}() is `{first.name}`, but handlers receive "
                "the request first",
                suggestions=[
                    "Name the first parameter `request` (or annotate it with `Request`): "
                    + _suggested_signature(fn, signature, hints, path_values)
                ],
                **where,
            )


class Depends:
    """Declare a dependency, as in FastAPI: `def GET(request, user=Depends(current_user))`.

    `dependency` is called once per request with parameters bound like a handler's (the
    request, path and query parameters, further `Depends`); its return value is passed in. A
    dependency that `yield`s is set up before the handler and torn down after it, in reverse
    order. With `use_cache` (the default) a dependency used twice in one request runs once.
    """

    def __init__(self, dependency=None, *, use_cache=True):
        self.dependency = dependency
        self.use_cache = use_cache

    def __repr__(self):
        name = getattr(self.dependency, "__name__", repr(self.dependency))
        return f"Depends({name})"


def dependency_of(param, hints):
    """The callable a parameter depends on, or None if it is not a `Depends` parameter."""
    marker = param.default
    if not isinstance(marker, Depends):
        return None
    if marker.dependency is not None:
        return marker.dependency
    hint = hints.get(param.name)
    if callable(hint):
        return hint
    raise HandlerSignatureError(f"Depends() on `{param.name}` names no dependency and has no type hint")


def query_params_of(fn, path_names, seen=None):
    """(parameter, hints) of every query parameter `fn` takes, including its dependencies'."""
    seen = set() if seen is None else seen
    if fn in seen:
        return []
    seen.add(fn)
    signature, hints = signature_of(fn)
    found = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or wants_request(param, hints):
            continue
        dependency = dependency_of(param, hints)
        if dependency is not None:
            found += query_params_of(dependency, path_names, seen)
        elif param.name not in path_names:
            found.append((param, hints))
    return found


class Resolver:
    """Binds one request's handler and dependencies: the per-request dependency cache and the
    exit stack that tears `yield` dependencies down."""

    def __init__(self, request, path_values, stack):
        self.request = request
        self.path_values = path_values
        self.stack = stack
        self.cache = {}

    async def kwargs(self, fn, check=False):
        """Keyword arguments for calling `fn`: the request, path and query parameters, and the
        values of its dependencies.

        Raises `RequestValidationError` with every conversion failure, as FastAPI reports them.
        """
        if check:
            check_signature(fn, self.path_values)
        signature, hints = signature_of(fn)
        kwargs = {}
        errors = []
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            if wants_request(param, hints):
                kwargs[param.name] = self.request
                continue
            dependency = dependency_of(param, hints)
            if dependency is not None:
                try:
                    kwargs[param.name] = await self.solve(dependency, param.default.use_cache)
                except RequestValidationError as invalid:
                    errors += invalid.errors
                continue
            self._bind_value(param, hints, kwargs, errors)
        if errors:
            raise RequestValidationError(errors)
        return kwargs

    def _bind_value(self, param, hints, kwargs, errors):
        hint = hints.get(param.name, inspect.Parameter.empty)
        if param.name in self.path_values:
            location, raw = "path", self.path_values[param.name]
        else:
            location = "query"
            if kind_of(hint) == "list":
                raw = self.request.query_params.getlist(param.name) or None
            else:
                raw = self.request.query_params.get(param.name)
            if raw is None:
                if param.default is not inspect.Parameter.empty:
                    kwargs[param.name] = param.default
                    return
                errors.append(
                    {"type": "missing", "loc": [location, param.name], "msg": "Field required", "input": None}
                )
                return
        try:
            kwargs[param.name] = convert(hint, raw)
        except _Invalid as invalid:
            error = {"type": invalid.type, "loc": [location, param.name], "msg": invalid.msg, "input": raw}
            if invalid.ctx:
                error["ctx"] = invalid.ctx
            errors.append(error)

    async def solve(self, dependency, use_cache=True):
        """The value of `dependency` for this request."""
        if use_cache and dependency in self.cache:
            return self.cache[dependency]
        kwargs = await self.kwargs(dependency)
        if inspect.isasyncgenfunction(dependency):
            value = await self.stack.enter_async_context(contextlib.asynccontextmanager(dependency)(**kwargs))
        elif inspect.isgeneratorfunction(dependency):
            value = self.stack.enter_context(contextlib.contextmanager(dependency)(**kwargs))
        else:
            value = dependency(**kwargs)
            if inspect.isawaitable(value):
                value = await value
        if use_cache:
            self.cache[dependency] = value
        return value
