"""The guest's entry point: the `guest` interface of `wit/filerouter.wit`.

componentize-py imports this module at build time and snapshots the interpreter afterwards, so
everything imported here (the `filerouter` module, the standard library set in `preload`, and the
event loop built below) is already in memory when an instance starts. Each exported call then
runs in a fresh instance made from that snapshot.
"""

import inspect
import os
import random

import preload  # noqa: F401  (puts the standard library set into the snapshot)
import project
import settings
from componentize_py_types import Err
from filerouter import params
from filerouter.eventloop import SandboxEventLoop
from filerouter.exceptions import (
    HTTPException,
    NoHandlerError,
    RequestValidationError,
    ResponseSerializationError,
)
from filerouter.requests import Request
from filerouter.responses import JSONResponse, Response
from wit_world import exports
from wit_world.imports.types import (
    HandlerInfo,
    HandlerParam,
    HttpResponse,
    ParamValue_Segments,
)

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")

# Built before the snapshot: saves creating a loop in every request.
_LOOP = SandboxEventLoop()


def _start_instance():
    # The snapshot froze `random`'s state; without this every instance would draw the same numbers.
    random.seed(os.urandom(32))


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


def _describe(method, fn):
    hints = params.type_hints(fn)
    described = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or params.wants_request(param, hints):
            continue
        hint = hints.get(param.name, inspect.Parameter.empty)
        enum_cls = params.enum_class(hint)
        described.append(
            HandlerParam(
                name=param.name,
                kind=params.kind_of(hint),
                choices=[str(m.value) for m in enum_cls] if enum_cls else [],
                has_default=param.default is not inspect.Parameter.empty,
            )
        )
    return HandlerInfo(
        method=method,
        is_async=inspect.iscoroutinefunction(fn),
        doc=inspect.getdoc(fn),
        params=described,
    )


def _to_response(result):
    """What a handler returned, as a `Response` (DECISIONS.md: return values)."""
    if isinstance(result, Response):
        return result
    if result is None:
        return Response(b"", status_code=204)
    if isinstance(result, tuple) and len(result) in (2, 3):
        body, status = result[0], result[1]
        headers = result[2] if len(result) == 3 else None
        if isinstance(body, Response):
            body.status_code = status
            if headers:
                body.headers.update(headers)
            return body
        if body is None:
            return Response(b"", status_code=status, headers=headers)
        return JSONResponse(body, status_code=status, headers=headers)
    return JSONResponse(result)


def _to_wit(response):
    status = response.status_code
    if not isinstance(status, int) or not 100 <= status <= 599:
        raise ValueError(f"invalid HTTP status code {status!r}: use an integer from 100 to 599")
    return HttpResponse(status=status, headers=response.headers.items(), body=bytes(response.body))


async def _call_async(fn, kwargs):
    return await fn(**kwargs)


def _call(fn, request, path_values):
    kwargs = params.bind(fn, request, path_values)
    if inspect.iscoroutinefunction(fn):
        return _LOOP.run_until_complete(_call_async(fn, kwargs))
    result = fn(**kwargs)
    if inspect.isawaitable(result):
        result = _LOOP.run_until_complete(result)
    return result


class Guest(exports.Guest):
    def inspect_route(self, file):
        _start_instance()
        try:
            module = project.load_route(file)
            _require_handlers(module, file)
            return [_describe(method, fn) for method, fn in _handlers(module)]
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None

    def bake(self, files, routes):
        try:
            project.bake(files, routes)
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None

    def handle(self, request, target):
        _start_instance()
        path_values = {
            p.name: (list(p.value.value) if isinstance(p.value, ParamValue_Segments) else p.value.value)
            for p in target.params
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
            module = project.load_route(target.file)
            fn = getattr(module, target.handler, None)
            if not callable(fn):
                response = JSONResponse({"detail": "Method Not Allowed"}, status_code=405)
            else:
                result = _call(fn, req, path_values)
                try:
                    response = _to_response(result)
                except (TypeError, ValueError) as exc:
                    code = fn.__code__
                    raise ResponseSerializationError(
                        f"{fn.__name__}() returned a value that cannot be sent as JSON: {exc}",
                        filename=code.co_filename,
                        lineno=code.co_firstlineno,
                        suggestions=[
                            "Return a dict, list, str, int, float, bool or None, a (body, status) "
                            "tuple, or a Response object",
                            "Convert custom objects first, e.g. with dataclasses.asdict(obj) or vars(obj)",
                        ],
                    ) from exc
        except HTTPException as exc:
            response = JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        except RequestValidationError as exc:
            response = JSONResponse({"detail": exc.errors}, status_code=422)
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None
        try:
            return _to_wit(response)
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None

    def load_config(self, source):
        _start_instance()
        try:
            return settings.evaluate(source)
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None
