"""WebSockets: Starlette's `WebSocket`, for a route file's `WEBSOCKET` handler.

A route file serves WebSocket connections at its path with a `WEBSOCKET` handler:

    from filerouter import WebSocket, WebSocketDisconnect

    async def WEBSOCKET(websocket: WebSocket, room: str):
        await websocket.accept()
        try:
            async for text in websocket.iter_text():
                await websocket.send_text(f"{room}: {text}")
        except WebSocketDisconnect:
            pass

It takes path parameters, query, header and cookie parameters and `Depends` (security
dependencies included) as an HTTP handler does, and runs inside `middleware.py` (which sees the
handshake request). A `WebSocket` is a `Request` (headers, `query_params`, `cookies`, `state`,
`client`, `url`) with Starlette's methods: `accept`, `receive_text`/`_bytes`/`_json`,
`send_text`/`_bytes`/`_json`, `iter_text`/`_bytes`/`_json`, `close`, the ASGI-style `receive`
and `send`, `send_denial_response`, and `client_state`/`application_state`.

Before `accept`, the handshake can still be refused: `close()`, returning, or raising
`HTTPException` or `WebSocketException` answers it with an HTTP response (403 for the first
three, as uvicorn does; the exception's status for `HTTPException`), or with the response given
to `send_denial_response`. After it, the client's close (or its going away) is
`WebSocketDisconnect` from `receive_*` and `send_*`; a `WebSocketDisconnect` that the handler
does not catch ends it normally, and `WebSocketException(code, reason)` closes the connection
with that code.

Each connection runs in a fresh sandbox instance of its own, for its whole life, under the
stream limits (docs/guides/streaming.md, WebSockets); nothing of it is seen by another
connection. The host side is `host/src/sandbox/socket.rs`; the sandbox's transport is
`guest-python/sandbox/sockets.py`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any, Protocol

from .requests import Request


class WebSocketState(enum.Enum):
    """Where a connection stands (Starlette's names)."""

    CONNECTING = 0
    CONNECTED = 1
    DISCONNECTED = 2
    RESPONSE = 3


class WebSocketDisconnect(Exception):
    """The connection is over: the client closed it (its `code` and `reason`), went away
    (1006), or the server closed it (1001 when stopping or idle)."""

    def __init__(self, code: int = 1000, reason: str | None = None) -> None:
        self.code = code
        self.reason = reason or ""
        super().__init__(code, self.reason)


class WebSocketException(Exception):
    """Raised by a handler (or a dependency) to close the connection with `code`; before
    `accept`, the handshake is refused with 403."""

    def __init__(self, code: int, reason: str | None = None) -> None:
        self.code = code
        self.reason = reason or ""
        super().__init__(code, self.reason)


class Transport(Protocol):
    """The connection under a `WebSocket`: the host's, inside the sandbox (`sockets.py`)."""

    def accept(self, subprotocol: str | None, headers: list[tuple[str, str]]) -> None: ...

    async def receive(self) -> tuple[str, Any]: ...

    def send(self, kind: str, data: str | bytes) -> None: ...

    def close(self, code: int, reason: str) -> None: ...


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


class WebSocket(Request):
    """One WebSocket connection, as Starlette's `WebSocket` offers it to a handler."""

    def __init__(self, request: Request, transport: Transport) -> None:
        # The handshake request's attributes, `state` included (middleware may have set it).
        self.__dict__.update(request.__dict__)
        self._transport = transport
        self.client_state = WebSocketState.CONNECTING
        self.application_state = WebSocketState.CONNECTING
        # What answers the handshake when it is not accepted (`send_denial_response`).
        self.denial: Any = None
        self._accepted = False

    def __repr__(self) -> str:
        return f"WebSocket({self.url})"

    # -- the handshake --------------------------------------------------------------------

    async def accept(
        self,
        subprotocol: str | None = None,
        headers: Iterable[tuple[bytes | str, bytes | str]] | None = None,
    ) -> None:
        """Accept the connection (101 Switching Protocols), with `subprotocol` (one the client
        offered in `Sec-WebSocket-Protocol`) and extra response `headers`."""
        if self.application_state != WebSocketState.CONNECTING:
            raise RuntimeError('Cannot call "accept" once the connection was accepted or closed.')
        pairs = [(_text(name), _text(value)) for name, value in headers or ()]
        self._transport.accept(subprotocol, pairs)
        self._accepted = True
        self.client_state = WebSocketState.CONNECTED
        self.application_state = WebSocketState.CONNECTED

    async def send_denial_response(self, response: Any) -> None:
        """Refuse the handshake with `response` (any `Response`) instead of accepting it."""
        if self.application_state != WebSocketState.CONNECTING:
            raise RuntimeError('Cannot call "send_denial_response" once the connection was accepted or closed.')
        self.denial = response
        self.application_state = WebSocketState.RESPONSE
        self.client_state = WebSocketState.DISCONNECTED

    @property
    def accepted(self) -> bool:
        """Whether `accept` was called (the 101 was sent)."""
        return self._accepted

    # -- receiving -----------------------------------------------------------------------

    async def receive(self) -> dict[str, Any]:
        """The next ASGI message: `websocket.connect` before `accept`, then
        `websocket.receive` (`text` or `bytes`) and at last `websocket.disconnect` (`code`,
        `reason`)."""
        if self.client_state == WebSocketState.CONNECTING:
            return {"type": "websocket.connect"}
        if self.client_state == WebSocketState.DISCONNECTED:
            raise RuntimeError('Cannot call "receive" once a disconnect message has been received.')
        kind, value = await self._transport.receive()
        if kind == "closed":
            code, reason = value
            self.client_state = WebSocketState.DISCONNECTED
            return {"type": "websocket.disconnect", "code": code, "reason": reason}
        return {"type": "websocket.receive", kind: value}

    async def _receive_data(self, kind: str) -> Any:
        if self.application_state != WebSocketState.CONNECTED:
            raise RuntimeError('WebSocket is not connected. Need to call "accept" first.')
        message = await self.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message["code"], message.get("reason"))
        if kind not in message:
            other = "bytes" if kind == "text" else "text"
            raise RuntimeError(f"expected a {kind} message, the client sent {other}")
        return message[kind]

    async def receive_text(self) -> str:
        """The next text message; `WebSocketDisconnect` once the connection is over."""
        text: str = await self._receive_data("text")
        return text

    async def receive_bytes(self) -> bytes:
        """The next binary message; `WebSocketDisconnect` once the connection is over."""
        data: bytes = await self._receive_data("bytes")
        return data

    async def receive_json(self, mode: str = "text") -> Any:
        """The next message (text, or binary with `mode="binary"`) parsed as JSON."""
        if mode not in ("text", "binary"):
            raise RuntimeError('The "mode" argument should be "text" or "binary".')
        if mode == "text":
            return json.loads(await self.receive_text())
        return json.loads((await self.receive_bytes()).decode("utf-8"))

    async def iter_text(self) -> AsyncIterator[str]:
        """Each text message until the connection is over."""
        try:
            while True:
                yield await self.receive_text()
        except WebSocketDisconnect:
            pass

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """Each binary message until the connection is over."""
        try:
            while True:
                yield await self.receive_bytes()
        except WebSocketDisconnect:
            pass

    async def iter_json(self) -> AsyncIterator[Any]:
        """Each message parsed as JSON until the connection is over."""
        try:
            while True:
                yield await self.receive_json()
        except WebSocketDisconnect:
            pass

    # -- sending -------------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        """Send an ASGI message: `websocket.accept`, `websocket.send` (`text` or `bytes`) or
        `websocket.close` (`code`, `reason`)."""
        kind = message.get("type")
        if kind == "websocket.accept":
            await self.accept(message.get("subprotocol"), message.get("headers"))
        elif kind == "websocket.send":
            if message.get("text") is not None:
                await self.send_text(message["text"])
            elif message.get("bytes") is not None:
                await self.send_bytes(message["bytes"])
            else:
                raise RuntimeError('A "websocket.send" message needs "text" or "bytes".')
        elif kind == "websocket.close":
            await self.close(message.get("code", 1000), message.get("reason"))
        else:
            raise RuntimeError(f"Unexpected ASGI message type {kind!r} for a WebSocket.")

    def _send(self, kind: str, data: str | bytes) -> None:
        if self.application_state != WebSocketState.CONNECTED:
            raise RuntimeError('WebSocket is not connected. Need to call "accept" first.')
        try:
            self._transport.send(kind, data)
        except WebSocketDisconnect:
            self.application_state = WebSocketState.DISCONNECTED
            raise

    async def send_text(self, data: str) -> None:
        """Send a text message; `WebSocketDisconnect` once the connection is over."""
        if not isinstance(data, str):
            raise TypeError(f"send_text() takes a str, not {type(data).__name__}")
        self._send("text", data)

    async def send_bytes(self, data: bytes) -> None:
        """Send a binary message; `WebSocketDisconnect` once the connection is over."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"send_bytes() takes bytes, not {type(data).__name__}")
        self._send("bytes", bytes(data))

    async def send_json(self, data: Any, mode: str = "text") -> None:
        """Send `data` as JSON, in a text message (or a binary one with `mode="binary"`)."""
        if mode not in ("text", "binary"):
            raise RuntimeError('The "mode" argument should be "text" or "binary".')
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        if mode == "text":
            self._send("text", text)
        else:
            self._send("bytes", text.encode("utf-8"))

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        """Close the connection with `code` (1000, or 3000 to 4999); before `accept`, refuse
        the handshake (403)."""
        if self.application_state == WebSocketState.CONNECTING:
            self.application_state = WebSocketState.DISCONNECTED
            self.client_state = WebSocketState.DISCONNECTED
            return
        if self.application_state == WebSocketState.DISCONNECTED:
            raise RuntimeError('Cannot call "close" once the connection was closed.')
        self.application_state = WebSocketState.DISCONNECTED
        self._transport.close(code, reason or "")
