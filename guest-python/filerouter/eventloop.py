"""An asyncio event loop that works inside the WASI sandbox.

The default loop needs `socket.socketpair()` for its self-pipe, and WASI has no sockets. Route
code never waits on file descriptors here (there are none it may open), so the loop's selector
only has to sleep until the next timer is due. That is enough for `asyncio.sleep`, `gather`,
tasks, queues and locks.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from _typeshed import FileDescriptorLike


class _TimerOnlySelector(selectors.BaseSelector):
    """A selector with nothing to watch: `select` sleeps until the loop's next timer."""

    def __init__(self) -> None:
        self._map: dict[FileDescriptorLike, selectors.SelectorKey] = {}

    def register(self, fileobj: FileDescriptorLike, events: int, data: Any = None) -> selectors.SelectorKey:
        raise OSError("waiting on files or sockets is not available in the filerouter sandbox")

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise RuntimeError(
                "the handler awaits something that can never complete "
                "(no timers are pending and the sandbox has no sockets)"
            )
        if timeout > 0:
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
