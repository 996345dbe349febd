"""The guest's entry point: the `guest` interface of `wit/filerouter.wit`.

componentize-py imports this module at build time and snapshots the interpreter afterwards, so
everything imported here (the `filerouter` module, the standard library set in `preload`, pydantic
from `bundled`, and the event loop built in `pipeline`) is already in memory when an instance
starts. Each exported call then runs in a fresh instance made from that snapshot.
"""

import inspect
import os
import random
import sys

# First: it puts the standard library set into the snapshot, and imports the sandbox's `sqlite3`
# before anything else (filerouter.db) imports the standard library's by that name.
import preload  # noqa: F401, I001
# Then pydantic and the packages it imports, built into the guest (bundled.py).
import bundled  # noqa: F401, I001

import alembic_history
import bytecode
import describe
import heap
import immortal
import importing
import lifecycle
import nonetwork  # noqa: F401  (socket errors that say where HTTP calls go instead)
import pipeline
import project
import settings
import sockets
import urllib_outbound  # noqa: F401  (urllib.request through the host's outbound gate)
import warmup
import wit_text
from componentize_py_types import Err, Ok
from filerouter import environment
from filerouter.exceptions import NoHandlerError, ProjectCodeError
from filerouter.requests import Request
from filerouter.responses import StreamingResponse
from sqlite3 import _host as sqlite_host
from wit_world import exports
from wit_world.imports import snapshot
from wit_world.imports.types import (
    HttpResponse,
    ParamValue_Segments,
    RouteInspection,
    Target_Route,
)

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
# A route file's handlers: the HTTP methods', and `WEBSOCKET` for WebSocket connections.
HANDLERS = METHODS + ("WEBSOCKET",)


def _start_instance():
    # The snapshot froze `random`'s state; without this every instance would draw the same numbers.
    # 256 bits from the host as an integer: `seed` hashes bytes or text with SHA-512 first.
    random.seed(int.from_bytes(os.urandom(32)))
    importing.hide()
    # Whatever the build's warm-up read is not this call's: values come from the host anew.
    environment.start_call()


def _handlers(module):
    for method in HANDLERS:
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
        if callable(value) and name.upper() in HANDLERS and name not in HANDLERS
    ]
    suggestions = [f"Rename `{name}` to `{name.upper()}`: handler names are upper case" for name in near]
    suggestions.append(
        "A route file serves the HTTP methods whose functions it defines: "
        + ", ".join(f"`{m}`" for m in METHODS[:5])
        + " (and optionally `HEAD`, `OPTIONS`), e.g. `def GET(request):`, and `WEBSOCKET` for "
        + "WebSocket connections: `async def WEBSOCKET(websocket):`"
    )
    raise NoHandlerError(
        f"routes/{file} defines no handler function",
        filename=project.ROUTES_DIR + "/" + file,
        lineno=1,
        suggestions=suggestions,
    )


def _trailing_slash(module, file):
    """Whether the route file sets `TRAILING_SLASH = True` (its path ends with `/`); any value
    other than True or False is a mistake, reported at the line that set it."""
    value = getattr(module, "TRAILING_SLASH", False)
    if isinstance(value, bool):
        return value
    path = project.ROUTES_DIR + "/" + file
    raise ProjectCodeError(
        f"TRAILING_SLASH must be True or False, not {value!r}",
        filename=path,
        lineno=_assignment_line(path, "TRAILING_SLASH"),
        suggestions=["`TRAILING_SLASH = True` makes the route's path end with `/` (`/products/`); leave it out for `/products`"],
    )


def _assignment_line(path, name):
    """The line of the first `name = ...` in the file at `path` (1 if there is none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if line.startswith(name) and line[len(name) :].lstrip().startswith("="):
                    return number
    except OSError:
        pass
    return 1


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


def _head(response):
    """A streamed response's status and headers, as the host's `stream.start` takes them."""
    status = response.status_code
    if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599:
        raise ValueError(f"invalid HTTP status code {status!r}: use an integer from 200 to 599")
    headers = [
        (wit_text.require(k, "a response header name"), wit_text.require(v, f"the response header {k!r}"))
        for k, v in response.headers.items()
    ]
    return HttpResponse(status=status, headers=headers, body=b"", host_body=False)


def _stream(response):
    """Send a streamed response, then run its background tasks; what `handle` returns."""
    try:
        refused = pipeline.stream(response, _head(response))
        if refused is not None:
            return _to_wit(refused)
        tasks = pipeline.background_tasks(response)
        if tasks:
            pipeline.run_tasks(tasks)
    except BaseException as exc:
        raise Err(project.error_report(exc)) from None
    return _SENT


def _reported(exc):
    """What a call raises for an exception of project code: the host's report of it."""
    return Err(project.error_report(exc))


def _raw(exc):
    """The exception itself (the build's warm-up: see `Guest._serve`)."""
    return exc


# What `handle` returns once the host has taken the response early: it is not sent.
_SENT = HttpResponse(status=200, headers=[], body=b"", host_body=False)


class Guest(exports.Guest):
    def inspect_route(self, file, files):
        _start_instance()
        trailing_slash = False
        project.install_route_sources([(project.ROUTE_SOURCE_PREFIX + name, source) for name, source in files])
        with project.recording_imports() as imports:
            try:
                module = project.load_route(file)
                _require_handlers(module, file)
                trailing_slash = _trailing_slash(module, file)
                handlers = Ok([describe.describe(method, fn) for method, fn in _handlers(module)])
            except BaseException as exc:
                handlers = Err(project.error_report(exc))
        return RouteInspection(
            handlers=handlers,
            trailing_slash=trailing_slash,
            imports=sorted(wit_text.safe(f) for f in imports),
        )

    def bake(self, files, routes, root_files, packages, keep_compiled):
        importing.hide()
        environment.start_call()
        sqlite_host.importing = True
        try:
            project.bake(files, routes, root_files, packages, keep_compiled)
            lifecycle.check_baked()
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None
        finally:
            sqlite_host.importing = False
        # The request path, specialized and with its caches filled, into the snapshot. Only
        # speed depends on it: a failure (a package that patched the standard library, say)
        # leaves a snapshot as correct as without it.
        try:
            warmup.run(self._warm_up)
        except Exception:  # noqa: BLE001
            pass
        warmup.packages()
        # Last: what the host makes immortal before it takes the snapshot. Only speed depends on
        # it too: what was sent before a failure is as valid as the whole list.
        try:
            immortal.send([sys.modules, importing.hidden()], snapshot.immortal)
        except Exception:  # noqa: BLE001
            pass
        # After everything that frees memory: the heap's holes filled, so that requests
        # allocate from its top, on contiguous pages (speed only, like the two above).
        try:
            heap.fill()
        except Exception:  # noqa: BLE001
            pass
        # After all of them, the warm-up's GET once more (`warmup.settle`).
        try:
            warmup.settle(self._warm_up)
        except Exception:  # noqa: BLE001
            pass

    def handle(self, request, target, root_files):
        return self._serve(request, target, root_files, _reported)

    def _warm_up(self, request, target):
        """A warm-up request (`warmup`): no root files, failures raised as they are."""
        return self._serve(request, target, [], _raw)

    def _serve(self, request, target, root_files, failed):
        """`handle`'s work; what project code raised is raised as `failed(exc)`. The build's
        warm-up has it raised as it is: a report's traceback reads source files, and a file
        read during a snapshot would keep the snapshot's view of the file system (none) for
        every later instance."""
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
        project.install_route_sources(root_files)
        try:
            response = pipeline.run(req, target, dict(root_files))
        except BaseException as exc:
            raise failed(exc) from None
        if sockets.accepted():
            return _SENT  # the WebSocket's 101 went out when it was accepted
        if isinstance(response, StreamingResponse):
            return _stream(response)
        try:
            answer = _to_wit(response)
            tasks = pipeline.background_tasks(response)
        except BaseException as exc:
            raise failed(exc) from None
        if not tasks:
            return answer
        # Background tasks: the host sends the answer now; the tasks run after it, here, under
        # the request's limits. What they raise reaches the host as this call's error, which it
        # logs: the response is sent already and never changes.
        try:
            delivered = pipeline.after_response(answer, tasks)
        except BaseException as exc:
            raise failed(exc) from None
        # Sent already: the host has no use for it again (a large body would be copied twice).
        return _SENT if delivered else answer

    def startup(self, root_files):
        _start_instance()
        project.install_route_sources(root_files)
        try:
            return lifecycle.run(dict(root_files))
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None

    def alembic(self, args, report_current):
        _start_instance()
        try:
            return alembic_history.run(args, report_current)
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None

    def compile_packages(self):
        _start_instance()
        try:
            return bytecode.compile_tree(project.PACKAGES_DIR, project.PACKAGES_DIR)
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
