"""Running a route file's `WEBSOCKET` handler over the host's `websocket` interface.

The host calls `handle` for a WebSocket handshake with the target's handler `WEBSOCKET`;
middleware runs around it as for any request (it sees the handshake). `run` binds the handler's
parameters with a `filerouter.WebSocket` standing for the request, calls it, and returns what
answers the handshake when the handler never accepted: 403 (it returned, or closed, before
accepting, or raised `WebSocketException`, as uvicorn answers), the response it gave
`send_denial_response`, or its `HTTPException`'s (through the pipeline). Once accepted, the
101 went out through the host (`websocket.accept`), and the call's own answer is never sent
(`accepted()` tells `dispatcher`).

`HostTransport` is the `Transport` under a `WebSocket` inside the sandbox: `receive` waits in the
request's event loop (`eventloop`'s `watch_socket`: the host waits, holding no thread, until a
message arrives or the loop's next timer is due), so a handler can receive while its other
tasks sleep or poll the kv store. `send` waits while the client has not taken the message
before (back-pressure).

Not here: the public `WebSocket` (`filerouter/websockets.py`), the host's side
(`host/src/sandbox/socket.rs`).
"""

import asyncio
import inspect

from componentize_py_types import Err
from filerouter import params
from filerouter.exceptions import HTTPException, RequestValidationError
from filerouter.responses import JSONResponse
from filerouter.websockets import WebSocket, WebSocketDisconnect, WebSocketException, WebSocketState
from wit_world.imports import websocket as host
from wit_world.imports.types import HttpResponse

# Whether this call accepted its connection (a fresh instance starts with False).
_ACCEPTED = False


def accepted():
    """Whether this call's handler accepted its connection: its answer went out already."""
    return _ACCEPTED


class HostTransport:
    """A `WebSocket`'s connection through the host."""

    def accept(self, subprotocol, headers):
        global _ACCEPTED
        try:
            host.accept(subprotocol, HttpResponse(status=101, headers=headers, body=b"", host_body=False))
        except Err as refused:
            if isinstance(refused.value, host.Refusal_Full):
                print(f"filerouter: the WebSocket was refused: {refused.value.value}")
                raise HTTPException(503, "Too many open connections", headers={"retry-after": "1"}) from None
            raise RuntimeError(refused.value.value) from None
        _ACCEPTED = True

    async def receive(self):
        loop = asyncio.get_running_loop()
        watch = getattr(getattr(loop, "_selector", None), "watch_socket", None)
        if watch is None:
            event = _receive(None)
        else:
            waiter = loop.create_future()
            watch(waiter, _receive)
            try:
                event = await waiter
            finally:
                watch(None)
        if isinstance(event, host.Event_Closed):
            return "closed", event.value
        message = event.value
        if isinstance(message, host.Message_Text):
            return "text", message.value
        return "bytes", bytes(message.value)

    def send(self, kind, data):
        message = host.Message_Text(data) if kind == "text" else host.Message_Binary(data)
        try:
            host.send(message)
        except Err as failed:
            if isinstance(failed.value, host.SendError_Closed):
                code, reason = failed.value.value
                raise WebSocketDisconnect(code, reason) from None
            raise ValueError(failed.value.value) from None

    def close(self, code, reason):
        if not closable(code):
            raise ValueError(f"a server closes a WebSocket with 1000-1003, 1007-1014 or 3000-4999, not {code}")
        if len(reason.encode("utf-8")) > 123:
            raise ValueError("a WebSocket close reason is at most 123 bytes of UTF-8")
        try:
            host.close(code, reason)
        except Err:
            pass  # closed already (the client went away): nothing to do


def closable(code):
    """Whether a server may send close code `code` (RFC 6455, 7.4)."""
    return isinstance(code, int) and (1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999)


def _receive(timeout_ms):
    """The host's next event within `timeout_ms` (None: as long as it takes), or None."""
    try:
        return host.receive(timeout_ms)
    except Err as failed:
        raise RuntimeError(failed.value) from None


async def run(fn, request, stack):
    """Call the `WEBSOCKET` handler `fn` for the handshake `request`; the response that answers
    the handshake when the handler did not accept (see the module's doc)."""
    websocket = WebSocket(request, HostTransport())
    resolver = params.Resolver(websocket, request.path_params, stack)
    try:
        kwargs = await resolver.kwargs(fn, check=True)
    except RequestValidationError as invalid:
        # FastAPI closes with 1008 before accepting, which uvicorn answers with 403.
        return JSONResponse({"detail": invalid.errors}, status_code=403)
    try:
        result = fn(**kwargs)
        if inspect.isawaitable(result):
            await result
    except WebSocketDisconnect:
        pass  # the client went away: the handler ends normally
    except WebSocketException as exc:
        if not websocket.accepted:
            return _refused()
        if websocket.application_state != WebSocketState.DISCONNECTED:
            websocket.application_state = WebSocketState.DISCONNECTED
            code = exc.code if closable(exc.code) else 1008
            reason = exc.reason.encode("utf-8")[:123].decode("utf-8", "ignore")
            HostTransport().close(code, reason)
    if websocket.accepted:
        return None
    if websocket.denial is not None:
        return websocket.denial
    return _refused()


def _refused():
    return JSONResponse({"detail": "WebSocket connection refused"}, status_code=403)
