"""The guest's entry point: the `guest` interface of `wit/filerouter.wit`.

componentize-py imports this module at build time and snapshots the interpreter afterwards, so
everything imported here (the `filerouter` module, the standard library set in `preload`, and the
event loop built in `pipeline`) is already in memory when an instance starts. Each exported call then
runs in a fresh instance made from that snapshot.
"""

import inspect
import json
import os
import random

import docstrings
import pipeline
import preload  # noqa: F401  (puts the standard library set into the snapshot)
import project
import settings
import wit_text
from componentize_py_types import Err
from filerouter import params
from filerouter.exceptions import NoHandlerError
from filerouter.requests import Request
from filerouter.responses import jsonable
from wit_world import exports
from wit_world.imports.types import (
    HandlerInfo,
    HandlerParam,
    HttpResponse,
    ParamValue_Segments,
    Target_Route,
)

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


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


def _default_json(default):
    if default is inspect.Parameter.empty or isinstance(default, params.Depends):
        return None
    try:
        return json.dumps(default, default=jsonable, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _describe(method, fn):
    summary, description, texts = docstrings.parse(inspect.getdoc(fn))
    described = []
    signature, hints = params.signature_of(fn)
    own = [
        (p, hints)
        for p in signature.parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and not params.wants_request(p, hints)
        and params.dependency_of(p, hints) is None
    ]
    names = {p.name for p, _ in own}
    from_dependencies = [(p, h) for p, h in params.query_params_of(fn, names) if p.name not in names]
    for param, hints in own + from_dependencies:
        hint = hints.get(param.name, inspect.Parameter.empty)
        enum_cls = params.enum_class(hint)
        described.append(
            HandlerParam(
                name=param.name,
                kind=params.kind_of(hint),
                choices=[wit_text.safe(m.value) for m in enum_cls] if enum_cls else [],
                has_default=param.default is not inspect.Parameter.empty,
                default_json=_default_json(param.default),
                description=wit_text.safe(texts.get(param.name)),
            )
        )
    return HandlerInfo(
        method=method,
        is_async=inspect.iscoroutinefunction(fn),
        doc=wit_text.safe(inspect.getdoc(fn)),
        summary=wit_text.safe(summary),
        description=wit_text.safe(description),
        params=described,
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
            return [_describe(method, fn) for method, fn in _handlers(module)]
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None

    def bake(self, files, routes, root_files):
        try:
            project.bake(files, routes, root_files)
        except BaseException as exc:
            raise Err(project.error_report(exc)) from None

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
