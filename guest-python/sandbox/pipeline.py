"""One request through the project's code: `middleware.py` around the target the host chose.

The host picks the target (a route handler, a `docs.py`/`not-found.py` page, or something it
serves itself) and calls `handle` once, in a fresh instance. Without middleware the target runs
directly. With it, `middleware(request, call_next)` runs first and `call_next` runs the target:
a handler or page in this same instance (so `request.state` set by middleware is what the
handler sees), or, for a target the host serves, a call back to the host (`upstream.respond`),
whose body stays on the host.

`HTTPException` and validation errors become responses where they are raised, so middleware
sees them as responses; any other exception propagates through middleware (which may catch it)
to the host, which shows the error page.

A handler's return annotation is its response model (`filerouter.models`): what it returns is
checked and cut down to it before it becomes a response. Background tasks
(`filerouter.background`) run after the whole response, middleware included, has been handed
to the host (`deliver`), in this same instance.
"""

import contextlib
import inspect
import traceback

import pages
import project
import sockets
import streaming
import wit_text
from filerouter import background, models, operation, params, responses, sse
from filerouter.eventloop import SandboxEventLoop
from filerouter.exceptions import (
    HTTPException,
    ProjectCodeError,
    RequestValidationError,
    ResponseSerializationError,
)
from filerouter.responses import JSONResponse, Response, StreamingResponse, to_response
from wit_world.imports import background as host_background
from wit_world.imports import upstream
from wit_world.imports.types import HttpRequest, Target_Page, Target_Route

# Built before the snapshot: saves creating a loop in every request.
LOOP = SandboxEventLoop()


class HostResponse(Response):
    """What `call_next` returns for a target the host serves: status and headers as the host
    set them; the body stays on the host and is sent as it is, unless middleware replaces the
    whole response."""

    host_body = True

    def __init__(self, answer):
        super().__init__(b"", status_code=answer.status, headers=list(answer.headers))


def run(request, target, sources):
    """The `Response` for `request`; raises what project code did not handle."""
    background.forget()
    return LOOP.run_eagerly(_run(request, target, sources))


async def _run(request, target, sources):
    overrides = project.load_overrides(sources)
    if overrides:  # dev --overrides only; every instance starts without any
        params.override_dependencies(overrides)
    middleware = project.load_root("middleware.py", sources)

    async def call_next(req):
        return await _guarded(_target(req, target, sources))

    if middleware is None:
        return await call_next(request)
    fn = getattr(middleware, "middleware", None)
    if not callable(fn):
        raise ProjectCodeError(
            "middleware.py defines no `middleware` function",
            filename="/project/middleware.py",
            lineno=1,
            suggestions=[
                "Define `async def middleware(request, call_next):` that returns "
                "`await call_next(request)` (or a response of its own)"
            ],
        )
    result = await _guarded(_maybe_await(fn(request, call_next)))
    if result is None:
        code = fn.__code__
        raise ProjectCodeError(
            "middleware() returned None instead of a response",
            filename=code.co_filename,
            lineno=code.co_firstlineno,
            suggestions=["End the middleware with `return await call_next(request)` or return a response"],
        )
    return _response_of(result, fn)


async def _maybe_await(value):
    if inspect.isawaitable(value):
        return await value
    return value


async def _guarded(awaitable):
    """Run `awaitable`; raised `HTTPException`s and validation errors become responses."""
    try:
        return await awaitable
    except HTTPException as exc:
        if exc.status_code in (204, 304):
            # No body, so no content type either (Starlette's handler does the same).
            return Response(status_code=exc.status_code, headers=exc.headers)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
    except RequestValidationError as exc:
        return JSONResponse({"detail": exc.errors}, status_code=422)


async def _target(request, target, sources):
    if isinstance(target, Target_Route):
        return await _route(request, target.value)
    if isinstance(target, Target_Page):
        return await pages.run(request, target.value, sources)
    return HostResponse(upstream.respond(_to_wit_request(request)))


async def _route(request, target):
    module = project.load_route(target.file)
    fn = getattr(module, target.handler, None)
    if not callable(fn):
        return JSONResponse({"detail": "Method Not Allowed"}, status_code=405)
    async with contextlib.AsyncExitStack() as stack:
        if target.handler == "WEBSOCKET":
            # The whole connection runs here; what returns answers a handshake not accepted
            # (`sockets`), or stands for the 101 the host sent already.
            refused = await sockets.run(fn, request, stack)
            return refused if refused is not None else Response(status_code=101)
        resolver = params.Resolver(request, request.path_params, stack)
        kwargs = await resolver.kwargs(fn, check=True)
        if params.yields(fn):
            response = _generator_response(fn(**kwargs), fn)
        else:
            result = await _maybe_await(fn(**kwargs))
            model = models.response_model(fn, params.signature_of(fn)[1])
            if model is not None:
                result = model.apply(result, fn)
            # Built inside the stack: `yield` dependencies are torn down after the handler has
            # returned and its value has become a response.
            response = _response_of(result, fn)
        if isinstance(response, StreamingResponse):
            # A streamed body is produced after this returns: its `yield` dependencies are torn
            # down once the stream has ended (`stream`), as in FastAPI.
            response._filerouter_cleanup = stack.pop_all()
        return response


def _generator_response(items, fn):
    """The response of a handler that `yield`s, as FastAPI makes it: with
    `@route(response_class=EventSourceResponse)` each item is a Server-Sent Event; with another
    response class, that class streams the items as they are; without one, each item is a line
    of JSON Lines (`application/jsonl`)."""
    info = operation.info_of(fn)
    cls = getattr(info, "response_class", None)
    model = models.item_model(fn, params.signature_of(fn)[1])
    if model is not None and not (isinstance(cls, type) and not issubclass(cls, sse.EventSourceResponse)):
        items = _checked(items, model, fn)
    if isinstance(cls, type) and issubclass(cls, sse.EventSourceResponse):
        response = cls(streaming.encoded(items, streaming.sse_items))
        response.headers["cache-control"] = "no-cache"
        response.headers["x-accel-buffering"] = "no"
        response._filerouter_sse = True
        return response
    if isinstance(cls, type) and issubclass(cls, StreamingResponse):
        return cls(items)
    return StreamingResponse(streaming.encoded(items, streaming.jsonl_items), media_type="application/jsonl")


async def _checked(items, model, fn):
    """The items of a `yield`ing handler whose return annotation names their type
    (`-> AsyncIterable[Item]`), each checked and cut down to it as FastAPI does; a
    `ServerSentEvent` goes as it is. An item that does not fit raises
    `ResponseValidationError` there: the stream is cut off and the error logged."""
    iterator = items.__aiter__() if hasattr(items, "__aiter__") else responses.iterate(items)
    try:
        async for item in iterator:
            yield item if isinstance(item, sse.ServerSentEvent) else streaming.Serialized(model.serialize(item, fn))
    finally:
        await streaming.close(iterator)


def stream(response, head):
    """Send the streamed `response` (its WIT `head` first), then tear down what its handler's
    `yield` dependencies hold. None once sent; the response to answer with instead when the
    host refused the stream (`streaming.send`)."""
    encode = response.chunk
    ping = sse._PING_INTERVAL if getattr(response, "_filerouter_sse", False) else None
    cleanup = getattr(response, "_filerouter_cleanup", None)
    try:
        return streaming.send(LOOP, response, head, encode, ping)
    finally:
        if cleanup is not None:
            LOOP.run_until_complete(cleanup.aclose())


def run_tasks(tasks):
    """Run a streamed response's background tasks, after its stream, in this instance."""
    LOOP.run_until_complete(_run_tasks(tasks))


def _response_of(result, fn):
    try:
        return to_response(result)
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


def background_tasks(response):
    """The tasks to run once `response` is sent (its own `background`, then the request's
    `BackgroundTasks`), taken so that they run once."""
    return background.take(response)


def after_response(answer, tasks):
    """Hand the WIT response `answer` to the host now, before the call ends, then run `tasks`
    in order, in this instance. The first task that raises stops the rest (as in FastAPI) and
    its exception propagates, for the host to log as a background failure. Should the host not
    take the answer early (it always does in a request's call), it is this call's answer after
    the tasks, and a failure is printed, never the answer. Whether the host took it."""
    delivered = host_background.respond(answer)
    try:
        LOOP.run_until_complete(_run_tasks(tasks))
    except Exception:
        if delivered:
            raise
        traceback.print_exc()
    return delivered


async def _run_tasks(tasks):
    for task in tasks:
        await task()


def _to_wit_request(request):
    safe = wit_text.safe
    return HttpRequest(
        method=safe(request.method),
        path=safe(request.raw_path),
        query=safe(request.query_string),
        headers=[(safe(k), safe(v)) for k, v in request.headers.items()],
        body=request._body,
        client=safe(request.client),
    )
