"""Work a handler leaves for after its response: FastAPI's `BackgroundTasks`.

A handler (or a dependency) takes a parameter annotated `BackgroundTasks` and adds tasks to it::

    from filerouter import BackgroundTasks, kv

    def write_log(message: str) -> None:
        kv.set("last-log", message)

    def POST(request, email: str, tasks: BackgroundTasks):
        tasks.add_task(write_log, f"notified {email}")
        return {"message": "Notification sent in the background"}

The host sends the response first; then the same sandbox instance runs the tasks, in the order
they were added, `def` and `async def` alike, under the request's own limits (`cpu_ms`,
`wall_s`, `memory_mb`, which count the handler's time and the tasks' together). A task that
raises is logged with its traceback, and the tasks after it do not run (as in FastAPI); the
response is already sent and never changes. A task that overruns the limits is stopped and
logged. Response objects take `background=` too (`JSONResponse(..., background=task)`), as in
Starlette: those tasks run first, then the parameter's.

Every request runs in a fresh instance, so a task sees what the request left (`kv`, the
database, the values of `filerouter.env`) and nothing else; what it needs from the request,
pass as arguments.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, ParamSpec

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

P = ParamSpec("P")

__all__ = ["BackgroundTask", "BackgroundTasks"]


class BackgroundTask:
    """One call to make after the response: `func(*args, **kwargs)`, sync or async."""

    def __init__(self, func: Callable[P, Any], *args: P.args, **kwargs: P.kwargs) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
            getattr(func, "__call__", None)
        )

    async def __call__(self) -> None:
        result = self.func(*self.args, **self.kwargs)
        if inspect.isawaitable(result):
            await result

    def __repr__(self) -> str:
        name = getattr(self.func, "__qualname__", None) or repr(self.func)
        return f"BackgroundTask({name})"


class BackgroundTasks(BackgroundTask):
    """The tasks of one request, run in order after its response is sent."""

    def __init__(self, tasks: Sequence[BackgroundTask] | None = None) -> None:
        self.tasks: list[BackgroundTask] = list(tasks) if tasks else []

    def add_task(self, func: Callable[P, Any], *args: P.args, **kwargs: P.kwargs) -> None:
        """Call `func(*args, **kwargs)` after the response is sent."""
        if not callable(func):
            raise TypeError(f"add_task() needs a function to call, not {type(func).__name__}")
        self.tasks.append(BackgroundTask(func, *args, **kwargs))

    async def __call__(self) -> None:
        for task in self.tasks:
            await task()

    def __len__(self) -> int:
        return len(self.tasks)

    def __repr__(self) -> str:
        return f"BackgroundTasks({self.tasks!r})"


# The request's own `BackgroundTasks`: every handler and dependency parameter of that type gets
# this one. A module global is per request, since every request runs in a fresh instance.
_current: BackgroundTasks | None = None


def current() -> BackgroundTasks:
    """This request's `BackgroundTasks`, made on first use."""
    global _current
    if _current is None:
        _current = BackgroundTasks()
    return _current


def take(response: object) -> list[BackgroundTask]:
    """The tasks to run after `response`: its own `background`, then the request's; forgotten
    here so that they run once."""
    global _current
    found: list[BackgroundTask] = []
    own = getattr(response, "background", None)
    if isinstance(own, BackgroundTasks):
        found += own.tasks
    elif isinstance(own, BackgroundTask):
        found.append(own)
    if _current is not None:
        found += _current.tasks
        _current = None
    return found


def forget() -> None:
    """Drop whatever the last call added (a call that failed before its response)."""
    global _current
    _current = None
