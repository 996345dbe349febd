"""An asyncio event loop that works inside the WASI sandbox.

The default loop needs `socket.socketpair()` for its self-pipe, and WASI has no sockets. Route
code never waits on file descriptors here (there are none it may open); what it waits on is
timers and the host's outbound HTTP calls (`filerouter.http`). So the loop's selector sleeps
until the next timer is due, or, while calls are pending, asks the host for those with news
(one `outbound.wait` for all of them, so `asyncio.gather` of calls waits for the slowest, not
the sum), or, while a WebSocket handler awaits a message, waits for that (`watch_socket`).
That is enough for `asyncio.sleep`, `gather`, tasks, queues, locks, HTTP calls and sockets.
"""

from __future__ import annotations

import asyncio
import math
import selectors
import time
from typing import TYPE_CHECKING, Any, TypeVar

from ._sandbox import outbound as _outbound
from ._sandbox import stream as _stream

# While a response streams and outbound calls are pending, how often (ms) the loop looks whether
# the stream is over (its client went away) between the host's waits for the calls.
_STREAM_CHECK_MS = 250
# While a WebSocket handler awaits a message and outbound calls are pending, how often (ms) the
# loop looks for the message between the host's waits for the calls.
_SOCKET_CHECK_MS = 20

T = TypeVar("T")

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping

    from _typeshed import FileDescriptorLike


class _TimerOnlySelector(selectors.BaseSelector):
    """A selector with nothing to watch: `select` sleeps until the loop's next timer."""

    def __init__(self) -> None:
        self._map: dict[FileDescriptorLike, selectors.SelectorKey] = {}
        # Outbound calls awaited by tasks: call number -> what to run once it has news.
        self._outbound: dict[int, list[Callable[[], object]]] = {}
        # While a response streams: what to run once the host says the stream is over (the
        # client went away, a limit, shutdown); None otherwise.
        self._stream_over: list[Callable[[], object]] | None = None
        # While a WebSocket handler awaits the next message: the future it awaits, and how
        # to ask the host for the message (within a time in ms, None: as long as it takes).
        self._socket_waiter: asyncio.Future[Any] | None = None
        self._socket_next: Callable[[int | None], object] | None = None

    def watch_socket(self, waiter: asyncio.Future[Any] | None, receive: Callable[[int | None], object] | None = None) -> None:
        """Give `waiter` the WebSocket's next event, which `receive(ms)` asks the host for
        (from `select`); None: stop."""
        self._socket_waiter = waiter
        self._socket_next = receive

    def _socket_receive(self, ms: int | None) -> None:
        """Wait up to `ms` (None: as long as it takes) for the WebSocket's next event, for
        the waiter `watch_socket` gave."""
        waiter, receive = self._socket_waiter, self._socket_next
        if waiter is None or receive is None or waiter.done():
            return
        try:
            event = receive(ms)
        except Exception as failed:  # the host refused: hand the error to the handler
            self._socket_waiter = None
            waiter.set_exception(failed)
            return
        if event is not None:
            self._socket_waiter = None
            waiter.set_result(event)

    def watch_stream(self, callback: Callable[[], object] | None) -> None:
        """Run `callback` (from the loop) once the streamed response is over; None: stop."""
        self._stream_over = None if callback is None else [callback]

    def _stream_wait(self, ms: int) -> None:
        """Wait up to `ms` for the stream to be over (the host's `response-stream.wait`, holding no
        thread); if it is, run what `watch_stream` gave."""
        callbacks = self._stream_over
        if callbacks is not None and _stream.wait(ms):
            self._stream_over = None
            for callback in callbacks:
                callback()

    def watch_outbound(self, call: int, callback: Callable[[], object]) -> None:
        """Run `callback` (from the loop) once outbound call `call` has news."""
        self._outbound.setdefault(call, []).append(callback)

    def register(self, fileobj: FileDescriptorLike, events: int, data: Any = None) -> selectors.SelectorKey:
        raise OSError("waiting on files or sockets is not available in the filerouter sandbox")

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self._socket_waiter is not None and not self._outbound:
            # The host waits (holding no thread) for a message or until the next timer.
            self._socket_receive(None if timeout is None else max(0, math.ceil(timeout * 1000)))
            return []
        if self._outbound:
            # The host waits (holding no thread) until one call has news or the next timer.
            ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
            if self._socket_waiter is not None:
                ms = _SOCKET_CHECK_MS if ms is None else min(ms, _SOCKET_CHECK_MS)
            elif self._stream_over is not None:
                ms = _STREAM_CHECK_MS if ms is None else min(ms, _STREAM_CHECK_MS)
            for call in _outbound.wait(list(self._outbound), ms):
                for callback in self._outbound.pop(call, []):
                    callback()
            self._stream_wait(0)
            self._socket_receive(0)
            return []
        if timeout is None:
            raise RuntimeError(
                "the handler awaits something that can never complete "
                "(no timers are pending and the sandbox has no sockets)"
            )
        if timeout > 0:
            if self._stream_over is not None:
                # Sleeping between chunks: wake at once when the client goes away.
                self._stream_wait(max(1, math.ceil(timeout * 1000)))
            else:
                time.sleep(timeout)
        return []

    def close(self) -> None:
        self._map.clear()

    def get_map(self) -> Mapping[FileDescriptorLike, selectors.SelectorKey]:
        return self._map


class SandboxEventLoop(asyncio.SelectorEventLoop):
    """`asyncio.SelectorEventLoop` without the self-pipe (no thread ever wakes the loop)."""

    def __init__(self) -> None:
        super().__init__(selector=_TimerOnlySelector())

    def _make_self_pipe(self) -> None:
        pass

    def _close_self_pipe(self) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def run_eagerly(self, coro: Coroutine[Any, Any, T]) -> T:
        """`run_until_complete(coro)`, with the coroutine started at once, as a task that
        `asyncio.eager_task_factory` makes: a request whose handler never waits (most of
        them) completes inside this call, without the loop's rounds of scheduling. A
        coroutine that waits on something, or that scheduled other callbacks (a task it
        created), continues in `run_until_complete`, which runs what is ready as it always
        would: the first step of a task created and not awaited runs either way.

        Inside the first step, as inside any task, the loop is running (`get_running_loop`)
        and the task is current (`current_task`, `asyncio.timeout`).
        """
        # CPython's set-up and clean-up of a running loop, kept apart for subclasses such as
        # this one since 3.13; typeshed does not list them, nor the ready queue.
        self._run_forever_setup()  # type: ignore[attr-defined]
        try:
            task = asyncio.Task(coro, loop=self, eager_start=True)
        finally:
            self._run_forever_cleanup()  # type: ignore[attr-defined]
        if not task.done() or self._ready:  # type: ignore[attr-defined]
            return self.run_until_complete(task)
        return task.result()
