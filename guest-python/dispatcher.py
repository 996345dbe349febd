"""The guest's entry point: the `guest` interface of `wit/filerouter.wit`.

componentize-py imports this module at build time and snapshots the interpreter afterwards, so
everything imported here (the `filerouter` module, the standard library set in `preload`, and the
event loop built in `pipeline`) is already in memory when an instance starts. Each exported call then
runs in a fresh instance made from that snapshot.
"""

import inspect
import os
import random

# First: it puts the standard library set into the snapshot, and imports the sandbox's `sqlite3`
# before anything else (filerouter.db) imports the standard library's by that name.
import preload  # noqa: F401, I001

import describe
import importing
import nonetwork  # noqa: F401  (network errors that say there is no network)
import pipeline
import project
import settings
import warmup
import wit_text
from componentize_py_types import Err
from filerouter import environment
from filerouter.exceptions import NoHandlerError
from filerouter.requests import Request
from wit_world import exports
from wit_world.imports.types import (
    HttpResponse,
    ParamValue_Segments,
    Target_Route,
)

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


def _start_instance():
    # The snapshot froze `random`'s state; without this every instance would draw the same numbers.
    random.seed(os.urandom(32))
    importing.hide()
    # Whatever the build's warm-up read is not this call's: values come from the host anew.
    environment.start_call()


def _handlers(module):
    for method in METHODS:
        fn = getattr(module, method, None)
        if inspect.isfunction(fn) or inspect.iscoroutinefunction(fn):
            yield method, fn


def _require_handlers(module, file):
    """Raise `NoHandlerError` when a route file defines no handler at all."""
    if any(True for _ in _handlers(module)):
        return
    near = [
        name
        for name, value in vars(module).items()
        if callable(value) and name.upper() in METHODS and name not in METHODS
    ]
    suggestions = [f"Rename `{name}` to `{name.upper()}`: handler names are upper case" for name in near]
    suggestions.append(
        "A route file serves the HTTP methods whose functions it defines: "
        + ", ".join(f"`{m}`" for m in METHODS[:5])
        + " (and optionally `HEAD`, `OPTIONS`), e.g. `def GET(request):`"
    )
    raise NoHandlerError(
        f"routes/{file} defines no handler function",
        filename=project.ROUTES_DIR + "/" + file,
        lineno=1,
        suggestions=suggestions,
    )


def _to_wit(response):
    status = response.status_code
    # A 1xx is informational (RFC 9110): it can never be a handler's final answer.
    if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599:
        raise ValueError(f"invalid HTTP status code {status!r}: use an integer from 200 to 599")
    host_body = bool(getattr(response, "host_body", False))
    body = b"" if host_body else bytes(response.body)
    headers = [
        (wit_text.require(k, "a response header name"), wit_text.require(v, f"the response header {k!r}"))
        for k, v in response.headers.items()
    ]
    return HttpResponse(status=status, headers=headers, body=body, host_body=host_body)


class Guest(exports.Guest):
    def inspect_route(self, file):
        _start_instance()
        try:
            module = project.load_route(file)
            _require_handlers(module, file)
            return [describe.describe(method, fn) for method, fn in _handlers(module)]
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None

    def bake(self, files, routes, root_files, packages):
        importing.hide()
        environment.start_call()
        try:
            project.bake(files, routes, root_files, packages)
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None
        # The request path, specialized and with its caches filled, into the snapshot. Only
        # speed depends on it: a failure (a package that patched the standard library, say)
        # leaves a snapshot as correct as without it.
        try:
            warmup.run(_to_wit)
        except Exception:  # noqa: BLE001
            pass

    def handle(self, request, target, root_files):
        _start_instance()
        path_values = {}
        if isinstance(target, Target_Route):
            path_values = {
                p.name: (list(p.value.value) if isinstance(p.value, ParamValue_Segments) else p.value.value)
                for p in target.value.params
            }
        req = Request(
            request.method,
            request.path,
            request.query,
            request.headers,
            request.body,
            client=request.client,
            path_params=path_values,
        )
        try:
            return _to_wit(pipeline.run(req, target, dict(root_files)))
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None

    def load_config(self, source):
        _start_instance()
        try:
            return settings.evaluate(source)
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None


# Last: from here on, standard-library modules outside the snapshot come from the host, and the
# guest's own modules are listed for hiding from route code (importing.py).
importing.install()
importing.seal()
