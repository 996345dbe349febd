"""Settings and secrets for route code: `os.environ`, `filerouter.env` and `filerouter.settings`.

`config.py` declares the names the project needs and may hold settings of its own::

    environment = {"names": ["JWT_SECRET"], "optional": ["SENTRY_DSN"]}
    settings = {"page_size": 20}

The operator gives the values outside the source (the server's environment or an env file; a
tenant's section of the tenants file), and route code reads them while a request runs::

    import os
    from filerouter import env, settings

    def GET(request):
        secret = env["JWT_SECRET"]            # or os.environ["JWT_SECRET"]
        dsn = env.get("SENTRY_DSN")           # None when the operator gave none
        return {"page_size": settings["page_size"]}

Values exist only while a request runs. Module-level code runs once, when the project is built
(and in `dev` while a route file is imported), before the server has them: reading a declared
name there raises `ReadAtImportError`, naming the line, instead of quietly building a default
into the snapshot. `settings` is `config.py`'s own and can be read anywhere.

Only declared names reach route code; `os.environ` holds nothing else of the host's. Writes to
`os.environ` last for the request (every request runs in a fresh instance).
"""

from __future__ import annotations

import json
import os
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, overload

from ._sandbox import environment as _host

__all__ = ["MissingSettingError", "NotDeclaredError", "ReadAtImportError", "env", "settings"]


class ReadAtImportError(RuntimeError):
    """A declared name was read while a module was imported, before any value exists."""


class MissingSettingError(KeyError):
    """A declared name has no value: `config.py` lists it as optional and the operator gave none."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NotDeclaredError(KeyError):
    """A name `config.py`'s `environment` does not declare: route code cannot be given it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


# What config.py declares: the same for every call of a build, so it may be in the snapshot.
_declared: tuple[frozenset[str], Mapping[str, Any]] | None = None
# This call's values, fetched on first use while a request runs; cleared at every call's start.
_values: dict[str, str] | None = None
# How deep the project's imports are nested: reading a declared name inside one is refused.
_import_depth = 0
# Whether a call from the host runs (a request, a build, a route inspection). Before the first,
# while the guest itself is built, the host services do not exist yet: nothing is declared.
_in_call = False

_NOTHING: tuple[frozenset[str], Mapping[str, Any]] = (frozenset(), types.MappingProxyType({}))


def _declarations() -> tuple[frozenset[str], Mapping[str, Any]]:
    global _declared
    if not _in_call:
        return _NOTHING
    if _declared is None:
        declared = _host.declared()
        _declared = (frozenset(declared.names), types.MappingProxyType(json.loads(declared.settings)))
    return _declared


def _call_values() -> dict[str, str]:
    global _values
    if not _in_call:
        return {}
    if _values is None:
        _values = dict(_host.values())
    return _values


def start_call() -> None:
    """Forget the last call's values (the dispatcher calls this as every call starts)."""
    global _values, _in_call
    _values = None
    _in_call = True
    if isinstance(os.environ, _Environ):
        os.environ.forget_call()


@contextmanager
def importing() -> Iterator[None]:
    """While the project's module code runs (build, or a route file's import in `dev`)."""
    global _import_depth
    _import_depth += 1
    try:
        yield
    finally:
        _import_depth -= 1


def _refuse_at_import(how: str, name: str) -> None:
    if _import_depth and name in _declarations()[0]:
        raise ReadAtImportError(
            f"{how}[{name!r}] is read while a module is imported, but the operator's values exist "
            "only while a request runs (module-level code runs once, at build time, before the "
            "server has them): read it inside the handler, or in a function it calls, for example "
            f"a dependency `def secret() -> str: return env[{name!r}]`"
        )


def _missing(name: str) -> MissingSettingError:
    return MissingSettingError(
        f"{name} has no value: config.py declares it in environment['optional'] and the operator gave "
        "none (the server's environment or the env file; for a tenant, its section of the tenants file)"
    )


def _not_declared(name: str) -> NotDeclaredError:
    return NotDeclaredError(
        f"{name!r} is not declared in config.py: add it to environment['names'] (or ['optional']) "
        "and give its value outside the source"
    )


class Env(Mapping[str, str]):
    """`filerouter.env`: the values of the names `config.py` declares, for this request."""

    def __getitem__(self, name: str) -> str:
        names = _declarations()[0]
        if name not in names:
            raise _not_declared(name)
        _refuse_at_import("env", name)
        try:
            return _call_values()[name]
        except KeyError:
            raise _missing(name) from None

    def __iter__(self) -> Iterator[str]:
        if _import_depth:
            return iter(())
        return iter(sorted(_call_values()))

    def __len__(self) -> int:
        return 0 if _import_depth else len(_call_values())

    def __repr__(self) -> str:
        return f"<filerouter.env: {', '.join(self) or 'no values'}>"

    @overload
    def get(self, name: str, /) -> str | None: ...
    @overload
    def get(self, name: str, /, default: str) -> str: ...
    @overload
    def get(self, name: str, /, default: Any) -> Any: ...
    def get(self, name: str, /, default: Any = None) -> Any:
        """The value of `name`, or `default` when it has none; an undeclared name raises."""
        try:
            return self[name]
        except MissingSettingError:
            return default


class Settings(Mapping[str, Any]):
    """`filerouter.settings`: `config.py`'s `settings` dict, read-only, readable anywhere."""

    def __getitem__(self, name: str) -> Any:
        try:
            return _declarations()[1][name]
        except KeyError:
            raise KeyError(f"{name!r} is not in config.py's settings") from None

    def __iter__(self) -> Iterator[str]:
        return iter(_declarations()[1])

    def __len__(self) -> int:
        return len(_declarations()[1])

    def __repr__(self) -> str:
        return f"<filerouter.settings: {dict(_declarations()[1])!r}>"


class _Environ(os._Environ):  # type: ignore[type-arg]  # os._Environ is private and untyped
    """`os.environ` in the sandbox: its own variables, plus the declared names' values while a
    request runs. A subclass of the standard one, so `isinstance` checks still hold."""

    def __init__(self, base: Mapping[str, str]) -> None:
        identity = lambda value: value  # noqa: E731
        super().__init__(dict(base), identity, identity, identity, identity)
        # Variables of the sandbox itself, and what module-level code wrote (part of the build).
        self._base: dict[str, str] = self._data  # type: ignore[attr-defined]  # (os._Environ's)
        # This call's view: `_base` with the values, made on first use outside an import.
        self._call: dict[str, str] | None = None

    def _current(self) -> dict[str, str]:
        # Before the first call (the guest being built) and during imports, the base itself:
        # what is written then is part of the snapshot, as in any module-level code.
        if _import_depth or not _in_call:
            return self._base
        if self._call is None:
            self._call = dict(self._base)
            self._call.update(_call_values())
        return self._call

    def forget_call(self) -> None:
        self._call = None

    def __getitem__(self, name: str) -> str:
        _refuse_at_import("os.environ", name)
        try:
            return self._current()[name]
        except KeyError:
            if name in _declarations()[0]:
                raise _missing(name) from None
            raise

    def __setitem__(self, name: str, value: str) -> None:
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"str expected, not {type(value if isinstance(name, str) else name).__name__}")
        self._current()[name] = value

    def __delitem__(self, name: str) -> None:
        del self._current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._current()))

    def __len__(self) -> int:
        return len(self._current())

    def __repr__(self) -> str:
        return f"environ({self._current()!r})"

    def copy(self) -> dict[str, str]:
        return dict(self)

    def setdefault(self, name: str, value: str) -> str:  # type: ignore[override]
        if name not in self:
            self[name] = value
        return self[name]


def _install() -> None:
    """Put `_Environ` in place of `os.environ` (once, when the snapshot is made)."""
    if not isinstance(os.environ, _Environ):
        os.environ = _Environ(dict(os.environ))


env = Env()
settings = Settings()
_install()
