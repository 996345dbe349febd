"""The project's start-up hook: `startup()` in `startup.py` at the project root.

`startup.py` is a root file like `middleware.py`: baked into the build's snapshot, sent with
each call in `dev`. Its `startup` function (`def` or `async def`, no parameters) runs in a fresh
instance of its own, never in the snapshot and never in a request's instance: in `dev` at start
and after every reload, and in `run` once at start, before the first request, against the
project's real data (`kv`, the database) and with the operator's values of `filerouter.env`.
Module globals it sets are gone with its instance: what requests need, it writes to the data.
"""

import inspect

import baked
import pipeline
import project
from filerouter.exceptions import ProjectCodeError

FILE = "startup.py"


def check(module):
    """The module's `startup` function; a `ProjectCodeError` naming `startup.py` when it has none
    that can be called without arguments."""
    fn = getattr(module, "startup", None)
    if not callable(fn):
        raise ProjectCodeError(
            "startup.py defines no `startup` function",
            filename="/project/" + FILE,
            lineno=1,
            suggestions=[
                "Define `def startup():` (or `async def startup():`) in startup.py: it runs when "
                "the server starts (and after every reload in `dev`), for example to seed data "
                "or check settings"
            ],
        )
    try:
        signature = inspect.signature(fn)
        signature.bind()
    except (TypeError, ValueError):
        code = getattr(fn, "__code__", None)
        raise ProjectCodeError(
            "startup() must be callable without arguments",
            filename=code.co_filename if code else "/project/" + FILE,
            lineno=code.co_firstlineno if code else 1,
            suggestions=["Declare it as `def startup():` (it is given nothing; read `filerouter.env`, "
                         "`filerouter.settings`, `kv` or the database inside it)"],
        ) from None
    return fn


def run(sources):
    """Run the project's `startup()`; whether the project has a `startup.py`. Raises what the
    hook raised."""
    module = project.load_root(FILE, sources)
    if module is None:
        return False
    fn = check(module)
    pipeline.LOOP.run_until_complete(pipeline._maybe_await(fn()))
    return True


def check_baked():
    """At build time: refuse a baked `startup.py` without a `startup()` to call (a build error
    naming the file; the hook itself runs when `run` starts)."""
    module = baked.ROOT_MODULES.get(FILE)
    if module is not None:
        check(module)
