"""An asyncio event loop that works inside the WASI sandbox.

The default loop needs `socket.socketpair()` for its self-pipe, and WASI has no sockets. Route
code never waits on file descriptors here (there are none it may open), so the loop's selector
only has to sleep until the next timer is due. That is enough for `asyncio.sleep`, `gather`,
tasks, queues and locks.
"""

import asyncio
import selectors
import time


class _TimerOnlySelector(selectors.BaseSelector):
    """A selector with nothing to watch: `select` sleeps until the loop's next timer."""

    def __init__(self):
        self._map = {}

    def register(self, fileobj, events, data=None):
        raise OSError("waiting on files or sockets is not available in the filerouter sandbox")

    def unregister(self, fileobj):
        raise KeyError(fileobj)

    def select(self, timeout=None):
        if timeout is None:
            raise RuntimeError(
                "the handler awaits something that can never complete "
                "(no timers are pending and the sandbox has no sockets)"
            )
        if timeout > 0:
            time.sleep(timeout)
        return []

    def close(self):
        self._map.clear()

    def get_map(self):
        return self._map


class SandboxEventLoop(asyncio.SelectorEventLoop):
    """`asyncio.SelectorEventLoop` without the self-pipe (no thread ever wakes the loop)."""

    def __init__(self):
        super().__init__(selector=_TimerOnlySelector())

    def _make_self_pipe(self):
        pass

    def _close_self_pipe(self):
        pass

    def _write_to_self(self):
        pass
