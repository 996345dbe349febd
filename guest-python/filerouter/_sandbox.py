"""Where the package meets the host: componentize-py's bindings, or stand-ins outside the sandbox.

Inside the sandbox, `kv`, `passwords`, `plugins` and `environment` (settings and secrets) call
the host through the bindings componentize-py generates from `wit/`, and text crosses through
the guest's `wit_text`. They are imported here, once, as the guest is built: the guest hides
componentize-py's modules from route code before it runs (importing.py), so a later import by
name would fail.

Outside the sandbox (the `filerouter` wheel on your machine, where pytest, mypy and editors
import this package) there is no host: `import filerouter` still works, with the same names and
types, and each service is a stand-in that raises `OutsideSandboxError` when used, naming what
to use instead (`filerouter.testing.TestClient` runs the project in the real sandbox).
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = [
    "INSIDE",
    "Err",
    "OutsideSandboxError",
    "environment",
    "refuse_outside",
    "kv",
    "outbound",
    "passwords",
    "plugins",
    "stream",
    "trace",
    "wit_text",
]


class OutsideSandboxError(RuntimeError):
    """A service of the sandbox's host was used outside the sandbox."""


def refuse_outside(service: str) -> NoReturn:
    """Raise `OutsideSandboxError` for `filerouter.SERVICE`."""
    raise OutsideSandboxError(
        f"filerouter.{service} works only inside filerouter's sandbox, where route code runs; "
        "on this machine, test routes through the server instead: "
        "filerouter.testing.TestClient('path/to/project') serves the project in the sandbox"
    )


class _StandIn:
    """A bindings module outside the sandbox: every name is a class that cannot be made or
    called, so `isinstance` checks are simply false and calls say where they work."""

    def __init__(self, service: str) -> None:
        self._service = service
        self._names: dict[str, type] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        made = self._names.get(name)
        if made is None:
            service = self._service

            def refuse(cls: type, *args: Any, **kwargs: Any) -> NoReturn:
                refuse_outside(service)

            made = self._names[name] = type(name, (), {"__new__": refuse, "__module__": f"filerouter.{service}"})
        return made


class _TextOutside:
    """`wit_text` outside the sandbox: only its pure checks are ever reached there."""

    @staticmethod
    def has_lone_surrogate(text: str) -> bool:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False

    def __getattr__(self, name: str) -> Any:
        refuse_outside("requests")


try:
    import wit_text  # type: ignore[import-not-found]  # the guest's own module
    from componentize_py_types import Err  # type: ignore[import-not-found]
    from wit_world.imports import environment, kv, outbound, passwords, plugins  # type: ignore[import-not-found]
    # (mypy reports the missing module once, on the line above; pyright on each line.)
    from wit_world.imports import response_stream as stream  # type: ignore[import-not-found, unused-ignore]
    from wit_world.imports import trace  # type: ignore[import-not-found, unused-ignore]

    INSIDE = True
except ImportError:
    INSIDE = False
    wit_text = _TextOutside()
    environment = _StandIn("settings")
    kv = _StandIn("kv")
    outbound = _StandIn("http")
    passwords = _StandIn("passwords")
    plugins = _StandIn("plugins")
    stream = _StandIn("responses")
    trace = _StandIn("trace")

    class Err(Exception):  # type: ignore[no-redef]  # componentize-py's, inside the sandbox
        """A host call's `err`; never raised outside the sandbox."""

        value: Any = None
