"""Binding a handler's parameters, as FastAPI does: the request, path, query, header and cookie
parameters, the JSON body or form fields, and `Depends`.

Where each parameter comes from is decided once per function (`specs_of`, baked into the build
snapshot): a `Query`/`Path`/`Header`/`Cookie`/`Body`/`Form`/`File` marker says so; otherwise a
`[name]` folder makes it a path parameter, a dataclass, TypedDict, `dict` or list of records
makes it the JSON body, `UploadFile` a file, and anything else a query parameter. Values are
checked by `validation`, and failures collected as FastAPI (pydantic 2) reports them, so a client
gets the same 422 body from filerouter as from FastAPI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import enum
import inspect
import json
import typing
import uuid
from typing import TYPE_CHECKING, Any, TypeVar, cast


from . import adapters, background, models, validation
from ._sandbox import wit_text
from .exceptions import HandlerSignatureError, HTTPException, RequestValidationError
from .forms import UploadFile
from .markers import Body, File, Form, Param, marker_of
from .requests import Request
from .validation import INVALID, split_annotated

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from .validation import Constraints, Errors

_EMPTY = inspect.Parameter.empty
_UNSET = object()


def kind_of(hint: Any) -> str:
    """The name of the conversion a hint asks for: int, float, str, bool, uuid, enum, list, any."""
    hint, _ = split_annotated(hint)
    if hint is _EMPTY or hint is typing.Any:
        return "any"
    if validation.is_union(hint):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return kind_of(args[0]) if len(args) == 1 else "any"
    origin = typing.get_origin(hint)
    if origin in (list, set, frozenset, tuple, typing.List, typing.Set, typing.Sequence):
        return "list"
    if hint is bool:
        return "bool"
    if hint is int:
        return "int"
    if hint is float:
        return "float"
    if hint is str:
        return "str"
    if hint in (list, set, frozenset, tuple):
        return "list"
    if hint is uuid.UUID:
        return "uuid"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "enum"
    return "any"


def enum_class(hint: Any) -> type[enum.Enum] | None:
    hint, _ = split_annotated(hint)
    origin = typing.get_origin(hint)
    if origin is not None:
        for arg in typing.get_args(hint):
            if isinstance(arg, type) and issubclass(arg, enum.Enum):
                return arg
        return None
    return hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else None


_SCALARS = (int, float, str, bool, bytes, decimal.Decimal, uuid.UUID, datetime.date, datetime.datetime, datetime.time)


def _is_scalar(hint: Any) -> bool:
    hint, _ = split_annotated(hint)
    if hint is _EMPTY or hint is typing.Any or hint is None or hint is type(None):
        return True
    if validation.is_union(hint):
        return all(_is_scalar(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is typing.Literal:
        return True
    if isinstance(hint, type) and issubclass(hint, adapters.BaseModel):
        return False
    if adapters.from_pydantic(hint):  # `EmailStr`, `SecretStr`, `HttpUrl`: one value, as in FastAPI
        return True
    return isinstance(hint, type) and (issubclass(hint, _SCALARS) or issubclass(hint, enum.Enum))


def _is_sequence(hint: Any) -> bool:
    hint, _ = split_annotated(hint)
    if validation.is_union(hint):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return len(args) == 1 and _is_sequence(args[0])
    origin = typing.get_origin(hint)
    return origin in (list, set, frozenset, tuple, typing.List, typing.Set, typing.Sequence) or hint in (
        list, set, frozenset, tuple
    )


def _is_upload(hint: Any) -> bool:
    hint, _ = split_annotated(hint)
    if validation.is_union(hint) or _is_sequence(hint):
        return any(_is_upload(a) for a in typing.get_args(hint))
    return isinstance(hint, type) and issubclass(hint, UploadFile)


def _body_shaped(hint: Any) -> bool:
    """Whether FastAPI reads a parameter of this type from the body: not a scalar, and not a
    sequence of scalars."""
    if _is_scalar(hint):
        return False
    if _is_sequence(hint):
        bare, _ = split_annotated(hint)
        if validation.is_union(bare):
            bare = [a for a in typing.get_args(bare) if a is not type(None)][0]
        args = typing.get_args(bare)
        return bool(args) and not all(_is_scalar(a) for a in args if a is not Ellipsis)
    return True


def type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The function's resolved type hints (`Annotated` kept); unresolvable string annotations
    stay as they are. A class's are its `__init__`'s (a class used as a dependency)."""
    init = getattr(fn, "__init__", None) if isinstance(fn, type) else None
    try:
        if inspect.isfunction(init):
            return typing.get_type_hints(init, include_extras=True)
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return {
            name: p.annotation
            for name, p in inspect.signature(fn).parameters.items()
            if p.annotation is not _EMPTY
        }


@dataclasses.dataclass
class Spec:
    """How one parameter of a function is bound."""

    name: str
    # request, background (the request's `BackgroundTasks`), depends, auto (path if the route
    # has it, else query), path, query, header, cookie, body, form
    location: str
    hint: Any = _EMPTY
    alias: str = ""
    required: bool = True
    default: Any = None
    marker: Param | None = None
    constraints: Constraints | None = None
    many: bool = False
    dependency: Callable[..., Any] | None = None
    use_cache: bool = True
    # The OAuth2 scopes a `Security(..., scopes=[...])` dependency requires.
    scopes: tuple[str, ...] = ()
    # Whether the hint names pydantic: then pydantic validates it (`adapters`), as in FastAPI.
    pydantic: bool = False
    # A `Query()`/`Header()`/`Cookie()`/`Form()` parameter whose type is a pydantic model: each
    # of the model's fields is a parameter of its own (FastAPI's parameter models).
    model: Any = None

    def default_value(self) -> Any:
        if self.marker is not None and self.marker.default_factory is not None:
            return self.marker.default_factory()
        return self.default

    @property
    def description(self) -> str | None:
        return self.marker.description if self.marker is not None else None


class Dependency:
    """A declared dependency, as `Depends(...)` makes it at run time: `dependency` and
    `use_cache`, read when a function's parameters are bound."""

    def __init__(self, dependency: Callable[..., Any] | None = None, *, use_cache: bool = True) -> None:
        self.dependency = dependency
        self.use_cache = use_cache
        self.scopes: tuple[str, ...] = ()  # `filerouter.security.Security` sets them

    def __repr__(self) -> str:
        name = getattr(self.dependency, "__name__", repr(self.dependency))
        return f"Depends({name})"


if TYPE_CHECKING:
    # For type checkers a function returning `Any`, as FastAPI declares it, so that
    # `conn: Database = Depends(get_db)` checks. At run time, the class below.

    def Depends(dependency: Callable[..., Any] | None = None, *, use_cache: bool = True) -> Any:  # noqa: N802
        """Declare a dependency, as in FastAPI: `def GET(request, user=Depends(current_user))`.

        `dependency` is called once per request with parameters bound like a handler's (the
        request, path and query parameters, further `Depends`); its return value is passed in. A
        dependency that `yield`s is set up before the handler and torn down after it, in reverse
        order. With `use_cache` (the default) a dependency used twice in one request runs once.
        """

else:

    class Depends(Dependency):
        pass


def _depends_of(param: inspect.Parameter, hint: Any, metadata: Sequence[Any]) -> Dependency | None:
    marker: object = param.default
    if not isinstance(marker, Dependency):
        marker = next((m for m in metadata if isinstance(m, Dependency)), None)
    if marker is None:
        return None
    if marker.dependency is not None:
        return marker
    if callable(hint) and hint is not _EMPTY:
        found = Dependency(hint, use_cache=marker.use_cache)
        found.scopes = marker.scopes
        return found
    raise HandlerSignatureError(f"Depends() on `{param.name}` names no dependency and has no type hint")


def _spec(param: inspect.Parameter, hints: dict[str, Any]) -> Spec:
    full = hints.get(param.name, _EMPTY)
    hint, metadata = split_annotated(full) if full is not _EMPTY else (_EMPTY, [])
    if _is_request(param.name, hint):
        return Spec(param.name, "request", hint)
    if isinstance(hint, type) and issubclass(hint, background.BackgroundTasks):
        return Spec(param.name, "background", hint)
    if isinstance(hint, type) and getattr(hint, "__filerouter_security_scopes__", False):
        return Spec(param.name, "security_scopes", hint)  # `filerouter.security.SecurityScopes`
    depends = _depends_of(param, hint, metadata)
    if depends is not None:
        return Spec(
            param.name, "depends", hint, dependency=depends.dependency, use_cache=depends.use_cache,
            scopes=depends.scopes,
        )
    marker = marker_of(param, metadata)
    has_default = param.default is not _EMPTY and not isinstance(param.default, Param)
    if marker is not None:
        location = marker.location
        required = marker.required and not has_default
        default = param.default if has_default else (None if marker.required else marker.default)
        constraints = marker.constraints if marker.constraints else None
    else:
        location = "form" if _is_upload(hint) else ("body" if _body_shaped(hint) else "auto")
        required = param.default is _EMPTY
        default = None if required else param.default
        constraints = None
    alias = marker.alias if marker is not None and marker.alias else param.name
    if location == "header" and marker is not None and not marker.alias and marker.convert_underscores:
        alias = param.name.replace("_", "-")
    uses_pydantic = full is not _EMPTY and adapters.involves(full)
    model = None
    if uses_pydantic and marker is not None and location in ("query", "header", "cookie", "form"):
        if isinstance(hint, type) and issubclass(hint, adapters.BaseModel):
            model = hint
    return Spec(
        param.name,
        location,
        full,
        alias=alias,
        required=required,
        default=default,
        marker=marker,
        constraints=constraints,
        many=_is_sequence(hint),
        pydantic=uses_pydantic,
        model=model,
    )


# Test-only replacements of dependencies, FastAPI's `app.dependency_overrides`: set for each call
# from the overrides file that `filerouter dev --overrides FILE` sends (the TestClient's
# `dependency_overrides=`); always empty in production, where no such file is ever sent.
_OVERRIDES: dict[Callable[..., Any], Callable[..., Any]] = {}


def override_dependencies(overrides: Mapping[Callable[..., Any], Callable[..., Any]]) -> None:
    """Use `overrides` ({dependency: replacement}) for this call's dependencies."""
    _OVERRIDES.clear()
    _OVERRIDES.update(overrides)


# fn -> (signature, type hints, specs). Filled per instance in development; `filerouter build`
# fills it for every handler and dependency before the snapshot, so production requests skip
# `inspect`.
_SIGNATURES: dict[Any, tuple[inspect.Signature, dict[str, Any], list[Spec]]] = {}


def _compute(fn: Callable[..., Any]) -> tuple[inspect.Signature, dict[str, Any], list[Spec]]:
    signature = inspect.signature(fn)
    hints = type_hints(fn)
    specs = [
        _spec(p, hints)
        for p in signature.parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return signature, hints, specs


_K = TypeVar("_K")
_V = TypeVar("_V")


def _remembered(cache: dict[_K, _V], key: _K, compute: Callable[[_K], _V]) -> _V:
    """`compute(key)`, kept in `cache` for the next call; worked out each time for a key that
    cannot be hashed (an unhashable callable object: nothing to remember it by)."""
    try:
        found = cache.get(key)
    except TypeError:
        return compute(key)
    if found is None:
        found = cache[key] = compute(key)
    return found


def _computed(fn: Callable[..., Any]) -> tuple[inspect.Signature, dict[str, Any], list[Spec]]:
    return _remembered(_SIGNATURES, fn, _compute)


def signature_of(fn: Callable[..., Any]) -> tuple[inspect.Signature, dict[str, Any]]:
    """`(inspect.signature(fn), type_hints(fn))`, computed once per function."""
    signature, hints, _ = _computed(fn)
    return signature, hints


def specs_of(fn: Callable[..., Any]) -> list[Spec]:
    """How each parameter of `fn` is bound (`Spec`s, in declaration order)."""
    return _computed(fn)[2]


def warm(fn: Callable[..., Any], path_names: Sequence[str] | None = None) -> None:
    """Compute the signatures of `fn` and of its dependencies, and its response model, now (at
    build time); with `path_names` (its route's path parameters, in path order), check that
    `fn` takes them too, so that its requests find the check done."""
    _names_taken(fn, set())
    body_specs(fn)
    yields(fn)
    for spec in _flat(fn, set(), lambda s: s.pydantic):
        adapters.adapter(spec.hint, spec.constraints)
    for spec in _flat(fn, set(), lambda s: not s.pydantic and s.hint is not _EMPTY):
        validation.warm(spec.hint)
    try:
        _warm_dependencies(fn, set())
    except TypeError:  # an unhashable callable object: its requests work it out
        pass
    models.warm(fn, signature_of(fn)[1])
    if path_names is not None:
        check_signature(fn, dict.fromkeys(path_names))


# fn -> whether it is a generator function, sync or async. Filled by `warm` at build time.
_YIELDS: dict[Any, bool] = {}


def yields(fn: Callable[..., Any]) -> bool:
    """Whether `fn` is a generator function, sync or async: a handler whose response streams
    what it yields."""
    return _remembered(_YIELDS, fn, _yields)


def _yields(fn: Callable[..., Any]) -> bool:
    return inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn)


def wants_request(param: inspect.Parameter, hints: dict[str, Any]) -> bool:
    """Whether a parameter receives the `Request` (see `_is_request`)."""
    hint, _ = split_annotated(hints.get(param.name, _EMPTY))
    return _is_request(param.name, hint)


def _is_request(name: str, hint: Any) -> bool:
    """Whether a parameter named `name` with type hint `hint` receives the request: named
    `request`, annotated with `Request` (or `WebSocket`, a kind of request), or named
    `websocket` without another hint."""
    if name == "request" or (isinstance(hint, type) and issubclass(hint, Request)):
        return True
    return name == "websocket" and hint is _EMPTY


def dependency_of(param: inspect.Parameter, hints: dict[str, Any]) -> Callable[..., Any] | None:
    """The callable a parameter depends on, or None if it is not a `Depends` parameter."""
    full = hints.get(param.name, _EMPTY)
    hint, metadata = split_annotated(full) if full is not _EMPTY else (_EMPTY, [])
    depends = _depends_of(param, hint, metadata)
    return depends.dependency if depends is not None else None


def _suggested_signature(
    fn: Callable[..., Any], signature: inspect.Signature, hints: dict[str, Any], path_values: dict[str, Any]
) -> str:
    parts = ["request"]
    for name, value in path_values.items():
        parts.append(f"{name}: list" if isinstance(value, list) else f"{name}: str")
    for param in signature.parameters.values():
        if param.name in path_values or param.name == "request":
            continue
        parts.append(str(param))
    prefix = "async def" if inspect.iscoroutinefunction(fn) else "def"
    return f"{prefix} {fn.__name__}({', '.join(parts)}):"


def _names_taken(fn: Callable[..., Any], seen: set[Any]) -> set[str]:
    """The parameter names of `fn` and of its dependencies, recursively."""
    if fn in seen:
        return set()
    seen.add(fn)
    names = set()
    try:
        specs = specs_of(fn)
    except HandlerSignatureError:
        return {p for p in inspect.signature(fn).parameters}
    for spec in specs:
        names.add(spec.name)
        if spec.location == "path" and spec.alias:
            names.add(spec.alias)
        if spec.dependency is not None:
            names |= _names_taken(spec.dependency, seen)
    return names


# (fn, its route's path parameter names) that `check_signature` passed: filled when a snapshot
# is taken (`warm`), so a request checks its handler only if it imported the route itself.
_CHECKED: set[tuple[Any, tuple[str, ...]]] = set()


def check_signature(fn: Callable[..., Any], path_values: dict[str, Any]) -> None:
    """Raise `HandlerSignatureError` if `fn` cannot take its route's path parameters."""
    key: tuple[Any, tuple[str, ...]] | None = (fn, tuple(path_values))
    try:
        if key in _CHECKED:
            return
    except TypeError:  # an unhashable callable object
        key = None
    _check_signature(fn, path_values)
    if key is not None:
        _CHECKED.add(key)


def _check_signature(fn: Callable[..., Any], path_values: dict[str, Any]) -> None:
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
        hint = hints.get(first.name, _EMPTY)
        if (
            not wants_request(first, hints)
            and first.name not in path_values
            and first.default is _EMPTY
            and hint is _EMPTY
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


def _flat(fn: Callable[..., Any], seen: set[Any], pick: Callable[[Spec], bool]) -> list[Spec]:
    """`pick(spec)` for the specs of `fn` and its dependencies, dependencies first."""
    if fn in seen:
        return []
    seen.add(fn)
    found = []
    for spec in specs_of(fn):
        if spec.dependency is not None:
            found += _flat(spec.dependency, seen, pick)
        elif pick(spec):
            found.append(spec)
    return found


def query_params_of(fn: Callable[..., Any], path_names: Sequence[str], seen: set[Any] | None = None) -> list[Spec]:
    """(parameter, hints) of every query parameter `fn` takes, including its dependencies'."""
    signature, _ = signature_of(fn)
    specs = _flat(fn, set() if seen is None else seen, lambda s: s.location in ("auto", "query"))
    out = []
    for spec in specs:
        if spec.name in path_names:
            continue
        out.append(spec)
    return out


def param_specs(fn: Callable[..., Any]) -> list[Spec]:
    """Every path, query, header and cookie parameter of `fn` and of its dependencies, the
    function's own first, without repeats (by location and name)."""
    own = [s for s in specs_of(fn) if s.location in ("auto", "path", "query", "header", "cookie")]
    rest = _flat(fn, set(), lambda s: s.location in ("auto", "path", "query", "header", "cookie"))
    out, seen = [], set()
    for spec in own + rest:
        key = (spec.location, spec.alias)
        if key not in seen:
            seen.add(key)
            out.append(spec)
    return out


_BODIES: dict[Any, tuple[list[Spec], bool, bool]] = {}


def body_specs(fn: Callable[..., Any]) -> tuple[list[Spec], bool, bool]:
    """`(specs, embed, is_form)` of the body parameters of `fn` and its dependencies. Several
    body parameters, `Body(embed=True)` or form fields are read by name; a single one is the
    whole body."""
    return _remembered(_BODIES, fn, _body_specs)


def _body_specs(fn: Callable[..., Any]) -> tuple[list[Spec], bool, bool]:
    specs = _flat(fn, set(), lambda s: s.location in ("body", "form"))
    is_form = any(s.location == "form" for s in specs)
    embed = is_form or len(specs) > 1 or any(s.marker is not None and s.marker.embed for s in specs)
    return specs, embed, is_form


def _missing(loc: Sequence[Any]) -> dict[str, Any]:
    return {"type": "missing", "loc": list(loc), "msg": "Field required", "input": None}


def _safe_input(item: dict[str, Any]) -> dict[str, Any]:
    value = item.get("input")
    if isinstance(value, (bytes, bytearray)):
        item["input"] = bytes(value).decode("utf-8", "replace")
    elif isinstance(value, UploadFile):
        item["input"] = {"filename": value.filename, "size": value.size, "headers": dict(value.headers)}
    return item


def _is_json(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    main, _, sub = kind.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


class Resolver:
    """Binds one request's handler and dependencies: the per-request dependency cache, the
    parsed body, and the exit stack that tears `yield` dependencies down."""

    def __init__(self, request: Request, path_values: dict[str, Any], stack: contextlib.AsyncExitStack) -> None:
        self.request = request
        self.path_values = path_values
        self.stack = stack
        self.cache: dict[Any, Any] = {}
        self.embed = False
        self._body = _UNSET

    async def kwargs(
        self, fn: Callable[..., Any], check: bool = False, scopes: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """Keyword arguments for calling `fn`: the request, path, query, header and cookie
        parameters, the body, and the values of its dependencies. `scopes` are the OAuth2
        scopes that `Security` declarations above `fn` require (its `SecurityScopes`).

        Raises `RequestValidationError` with every failure, in FastAPI's order.
        """
        if check:
            check_signature(fn, self.path_values)
            specs, self.embed, is_form = body_specs(fn)
            if specs and not is_form:
                self._json_body()  # malformed JSON is the only error FastAPI reports
        kwargs: dict[str, Any] = {}
        groups: dict[str, Errors] = {"depends": [], "path": [], "query": [], "header": [], "cookie": [], "body": []}
        bodies = []
        for spec in specs_of(fn):
            if spec.location == "request":
                kwargs[spec.name] = self.request
            elif spec.location == "background":
                kwargs[spec.name] = background.current()
            elif spec.location == "depends":
                try:
                    dependency = cast("Callable[..., Any]", spec.dependency)  # set for every `depends` spec
                    kwargs[spec.name] = await self.solve(dependency, spec.use_cache, _joined(scopes, spec.scopes))
                except RequestValidationError as invalid:
                    groups["depends"] += invalid.errors
            elif spec.location == "security_scopes":
                kwargs[spec.name] = spec.hint(list(scopes))
            elif spec.location in ("body", "form"):
                bodies.append(spec)
            else:
                self._bind_value(spec, kwargs, groups)
        if bodies:
            await self._bind_body(bodies, kwargs, groups["body"])
        errors = [_safe_input(e) for group in groups.values() for e in group]
        if errors:
            raise RequestValidationError(errors)
        return kwargs

    def _bind_value(self, spec: Spec, kwargs: dict[str, Any], groups: dict[str, Errors]) -> None:
        location = spec.location
        if location == "auto":
            location = "path" if spec.name in self.path_values else "query"
        if spec.model is not None:
            source: Any = {
                "query": self.request.query_params,
                "header": self.request.headers,
                "cookie": self.request.cookies,
            }[location]
            self._bind_model(spec, location, source, kwargs, groups[location])
            return
        if location == "path":
            key = spec.name if spec.name in self.path_values else spec.alias
            raw = self.path_values.get(key)
            alias = key
        else:
            alias = spec.alias
            source = {
                "query": self.request.query_params,
                "header": self.request.headers,
                "cookie": None,
            }[location]
            if location == "cookie":
                raw = self.request.cookies.get(alias)
            elif spec.many:
                raw = source.getlist(alias) or None
            else:
                raw = source.get(alias)
        errors = groups[location]
        if raw is None:
            if not spec.required:
                kwargs[spec.name] = spec.default_value()
                return
            errors.append(_missing([location, alias]))
            return
        check = adapters.validate if spec.pydantic else validation.validate
        value = check(spec.hint, raw, [location, alias], errors, spec.constraints)
        if value is not INVALID:
            kwargs[spec.name] = value

    def _bind_model(self, spec: Spec, location: str, source: Any, kwargs: dict[str, Any], errors: Errors) -> None:
        """A parameter model: its fields read from `source` (the query, headers or cookies) by
        their aliases, what is left over given to the model too (for its `extra` policy),
        checked as one value at `[location]`, as FastAPI's `_request_param_model_to_args`."""
        is_headers = location == "header"
        convert = is_headers and (spec.marker is None or getattr(spec.marker, "convert_underscores", True))
        values: dict[str, Any] = {}
        taken: set[str] = set()
        renamed: dict[str, str] = {}
        present = {key.lower() for key in source.keys()} if is_headers else set(source.keys())
        for field in adapters.model_fields(spec.model):
            aliases = adapters.param_aliases(field, convert_underscores=convert)
            alias, key = next(
                (pair for pair in aliases if (pair[1].lower() if is_headers else pair[1]) in present), aliases[0]
            )
            raw = _model_value(field, source, key, form=False)
            if raw is not None:
                values[alias] = raw
            if is_headers:
                taken.add(key.lower())
                # An unconverted name (`x_token`) is not a header of the model's either.
                taken.update(a.lower() for a, k in aliases if a != k)
                if alias != key:
                    renamed[field.name] = key
            else:
                taken.add(key)
        values.update(_extras(source, taken))
        self._validate_model(spec, values, [location], renamed, kwargs, errors)

    def _bind_form_model(self, spec: Spec, form: Any, kwargs: dict[str, Any], errors: Errors) -> None:
        """A form model (`Annotated[Login, Form()]`): each field read by the first of its
        aliases that has a value (an empty field or file counts as absent), the other form
        fields given to the model too, checked as one value at `["body"]`, as FastAPI's
        `_extract_form_items`."""
        values: dict[str, Any] = {}
        taken: set[str] = set()
        for field in adapters.model_fields(spec.model):
            for alias, _ in adapters.param_aliases(field):
                taken.add(alias)
                raw = _model_value(field, form, alias, form=True)
                if raw is not None:
                    values[alias] = raw
                    break
        values.update(_extras(form, taken))
        self._validate_model(spec, values, ["body"], {}, kwargs, errors)

    def _validate_model(
        self,
        spec: Spec,
        values: dict[str, Any],
        loc: list[Any],
        renamed: dict[str, str],
        kwargs: dict[str, Any],
        errors: Errors,
    ) -> None:
        found_errors: Errors = []
        value = adapters.validate(spec.hint, values, loc, found_errors, spec.constraints)
        if renamed and spec.model.model_config.get("loc_by_alias", True):
            # Errors name the header the client sends (`x-token`), not the field.
            for item in found_errors:
                where = item["loc"]
                if len(where) > 1 and where[1] in renamed:
                    item["loc"] = [where[0], renamed[where[1]], *where[2:]]
        errors.extend(found_errors)
        if value is not INVALID:
            kwargs[spec.name] = value

    def _json_body(self) -> Any:
        """The JSON body: `_UNSET` when there is none, the raw bytes when it is not JSON."""
        if self._body is _UNSET:
            raw = self.request._body
            if not raw:
                self._body = None
            else:
                content_type = self.request.headers.get("content-type")
                if content_type and _is_json(content_type):
                    try:
                        value = json.loads(raw)
                    except json.JSONDecodeError as exc:
                        raise RequestValidationError(
                            [{"type": "json_invalid", "loc": ["body", exc.pos], "msg": "JSON decode error",
                              "input": {}, "ctx": {"error": exc.msg}}]
                        ) from None
                    except UnicodeDecodeError as exc:
                        raise RequestValidationError(
                            [{"type": "json_invalid", "loc": ["body", exc.start], "msg": "JSON decode error",
                              "input": {}, "ctx": {"error": "Invalid UTF-8"}}]
                        ) from None
                    except (RecursionError, ValueError):
                        # Nested deeper than the parser's stack, or a number past CPython's
                        # 4,300 digits: FastAPI's answer to a body it cannot parse for another
                        # reason than its syntax.
                        raise HTTPException(400, "There was an error parsing the body") from None
                    # As `request.json()`: an escaped lone surrogate cannot be sent on anywhere.
                    if b"\\u" in raw and wit_text.find_in(value) is not None:
                        raise HTTPException(
                            400,
                            "The JSON body holds a lone surrogate (a \\uD800-\\uDFFF escape that is not part of a pair)",
                        )
                    self._body = ("value", value)
                else:
                    self._body = ("bytes", bytes(raw))
        return self._body

    async def _bind_body(self, specs: list[Spec], kwargs: dict[str, Any], errors: Errors) -> None:
        is_form = any(s.location == "form" for s in specs)
        if is_form:
            form = await self.request.form()
            for spec in specs:
                if spec.model is not None:
                    self._bind_form_model(spec, form, kwargs, errors)
                    continue
                if spec.many:
                    raw: Any = [v for v in form.getlist(spec.alias) if not _empty_upload(v)] or None
                else:
                    raw = form.get(spec.alias)
                    if raw == "" or _empty_upload(raw):
                        raw = None
                if isinstance(raw, UploadFile) and _wants_bytes(spec.hint):
                    raw = raw.file.getvalue()
                elif spec.many and raw and _wants_bytes(spec.hint):
                    raw = [v.file.getvalue() if isinstance(v, UploadFile) else v for v in raw]  # pyright: ignore[reportGeneralTypeIssues]  (a list here)
                self._finish(spec, raw, ["body", spec.alias], kwargs, errors)
            return
        body = self._json_body()
        if not self.embed:
            spec = specs[0]
            raw = None if body is None else body[1]
            self._finish(spec, raw, ["body"], kwargs, errors, present=body is not None)
            return
        for spec in specs:
            value, present = None, False
            if body is not None and body[0] == "value":
                if not isinstance(body[1], dict):
                    # FastAPI: embedded fields need an object; each one is missing, even
                    # those with a default.
                    errors.append(_missing(["body", spec.alias]))
                    continue
                present = spec.alias in body[1]
                value = body[1].get(spec.alias)
            self._finish(spec, value, ["body", spec.alias], kwargs, errors, present=present)

    def _finish(
        self,
        spec: Spec,
        raw: Any,
        loc: Sequence[Any],
        kwargs: dict[str, Any],
        errors: Errors,
        present: bool | None = None,
    ) -> None:
        present = raw is not None if present is None else present
        if not present:
            if spec.required:
                errors.append(_missing(loc))
            else:
                kwargs[spec.name] = spec.default_value()
            return
        check = adapters.validate if spec.pydantic else validation.validate
        value = check(spec.hint, raw, loc, errors, spec.constraints)
        if value is not INVALID:
            kwargs[spec.name] = value

    async def solve(self, dependency: Callable[..., Any], use_cache: bool = True, scopes: tuple[str, ...] = ()) -> Any:
        """The value of `dependency` for this request (one per set of required scopes)."""
        if _OVERRIDES:
            dependency = _OVERRIDES.get(dependency, dependency)
        key: Any = (dependency, frozenset(scopes)) if scopes else dependency
        if use_cache and key in self.cache:
            return self.cache[key]
        kwargs = await self.kwargs(dependency, scopes=scopes)
        kind, enter = entry_of(dependency)
        if kind == "async with":
            value = await self.stack.enter_async_context(enter(**kwargs))
        elif kind == "with":
            value = self.stack.enter_context(enter(**kwargs))
        else:
            value = dependency(**kwargs)
            if inspect.isawaitable(value):
                value = await value
        if use_cache:
            self.cache[key] = value
        return value


# dependency -> how `Resolver.solve` enters it: ("async with", its async context manager
# factory) for an async generator function, ("with", its context manager factory) for a
# generator function, ("call", itself) otherwise. Filled by `warm` at build time.
_ENTRIES: dict[Any, tuple[str, Callable[..., Any]]] = {}


def entry_of(dependency: Callable[..., Any]) -> tuple[str, Callable[..., Any]]:
    """How a request enters `dependency` (see `_ENTRIES`)."""
    return _remembered(_ENTRIES, dependency, _entry)


def _entry(dependency: Callable[..., Any]) -> tuple[str, Callable[..., Any]]:
    if inspect.isasyncgenfunction(dependency):
        return "async with", contextlib.asynccontextmanager(dependency)
    if inspect.isgeneratorfunction(dependency):
        return "with", contextlib.contextmanager(dependency)
    return "call", dependency


def _warm_dependencies(fn: Callable[..., Any], seen: set[Any]) -> None:
    for spec in specs_of(fn):
        dependency = spec.dependency
        if dependency is None or dependency in seen:
            continue
        seen.add(dependency)
        entry_of(dependency)
        _warm_dependencies(dependency, seen)


def _joined(scopes: tuple[str, ...], more: tuple[str, ...]) -> tuple[str, ...]:
    """`scopes` and then those of `more` it lacks."""
    return scopes + tuple(s for s in more if s not in scopes) if more else scopes


def _model_value(field: adapters.ModelField, source: Any, key: str, *, form: bool) -> Any:
    """The value of a parameter model's field under `key` in `source`, or None when absent: a
    list for a sequence field (of a multi-valued source), one value otherwise; in a form, empty
    fields and empty file inputs are absent (FastAPI's `_get_multidict_value`)."""
    if _is_sequence(field.info.annotation) and hasattr(source, "getlist"):
        found: Any = source.getlist(key)
        if form:
            found = [v for v in found if not _empty_upload(v)]
        return found or None
    found = source.get(key)
    if form and (found == "" or _empty_upload(found)):
        return None
    return found


def _extras(source: Any, taken: set[str]) -> dict[str, Any]:
    """What `source` holds besides the keys `taken`: one value per key, a list for a repeated
    one (FastAPI's `_get_multidict_extras`), for the model's `extra` policy."""
    pairs = source.multi_items() if hasattr(source, "multi_items") else list(source.items())
    grouped: dict[str, list[Any]] = {}
    for key, raw in pairs:
        if key not in taken:
            grouped.setdefault(key, []).append(raw)
    return {key: found[0] if len(found) == 1 else found for key, found in grouped.items()}


def _empty_upload(value: Any) -> bool:
    return isinstance(value, UploadFile) and value.filename == "" and not value.size


def _wants_bytes(hint: Any) -> bool:
    hint, _ = split_annotated(hint)
    if validation.is_union(hint) or _is_sequence(hint):
        return any(_wants_bytes(a) for a in typing.get_args(hint))
    return hint is bytes


__all__ = ["Body", "Depends", "File", "Form", "Resolver", "Spec", "specs_of"]
