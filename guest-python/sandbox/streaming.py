"""Sending a streamed response (`StreamingResponse`, a `yield`ing handler, SSE, JSON Lines).

Once middleware has returned the response, `send` hands its head to the host
(`response-stream.start`), then drives its `body_iterator` in the request's event loop: a producer task
takes items from the iterator and puts them in a queue of one; the sender takes them, encodes
them (`encode`) and writes each to the host (`response-stream.write`, which waits while the client has
not read the chunks before: back-pressure reaches the generator through the queue). With a
`ping` interval (SSE), a keep-alive comment goes out whenever the generator yields nothing for
that long.

When the stream is over (the client went away, a stream limit, the server stopping: a `write`
fails, or the event loop hears it from the host while the generator sleeps), the producer is
cancelled and the iterator closed: the generator's `finally` runs (`GeneratorExit`, or
`CancelledError` where it awaited), and the call ends normally. An exception from the
generator propagates (the host logs it and cuts the body off).

Not here: the host's side (`host/src/sandbox/stream.rs`), the response classes
(`filerouter.responses`, `filerouter.sse`).
"""

import asyncio

from componentize_py_types import Err
from filerouter import responses, sse
from filerouter.responses import JSONResponse
from wit_world.imports import response_stream as host_stream

# The largest chunk one host write carries (the host's `MAX_CHUNK`).
MAX_CHUNK = 64 * 1024

# What the producer puts in the queue after the iterator's last item.
_END = object()


class StreamOver(Exception):
    """The host says the stream is over; the text says why."""


def send(loop, response, head, encode, ping=None):
    """Stream `response` (its WIT `head` first): each item of its `body_iterator` through
    `encode` to bytes, in `loop`. Returns None once sent, or the response to answer with
    instead when the host refused the stream (its project is at its cap of open streams)."""
    try:
        host_stream.start(head)
    except Err as refused:
        loop.run_until_complete(close(response.body_iterator))
        print(f"filerouter: the streamed response was refused: {refused.value}")
        return JSONResponse(
            {"detail": "Too many open streams"},
            status_code=503,
            headers={"retry-after": "1"},
        )
    loop.run_until_complete(_pump(loop, response.body_iterator, encode, ping))
    return None


def write(data):
    """Send `data` to the client, in chunks the host takes; raises `StreamOver`."""
    for start in range(0, len(data), MAX_CHUNK):
        try:
            host_stream.write(data[start : start + MAX_CHUNK])
        except Err as over:
            raise StreamOver(over.value) from None


async def _pump(loop, iterator, encode, ping):
    queue = asyncio.Queue(maxsize=1)

    async def produce():
        async for item in iterator:
            await queue.put(item)
        await queue.put(_END)

    producer = asyncio.ensure_future(produce())
    selector = getattr(loop, "_selector", None)
    watch = getattr(selector, "watch_stream", None)
    if watch is not None:
        watch(producer.cancel)
    getter = None
    produced = False
    try:
        while True:
            if getter is None:
                getter = asyncio.ensure_future(queue.get())
            waiting = {getter} if produced else {getter, producer}
            done, _ = await asyncio.wait(waiting, timeout=ping, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                item = getter.result()
                getter = None
                if item is _END:
                    break
                write(encode(item))
            elif producer in done:
                if producer.cancelled():
                    break  # the stream is over: the host said so while the generator waited
                producer.result()  # raises what the generator raised
                produced = True  # it ended normally: its end marker is in the queue
            else:
                write(sse.KEEPALIVE_COMMENT)
    except StreamOver:
        pass
    finally:
        if watch is not None:
            watch(None)
        if getter is not None:
            getter.cancel()
        if not producer.done():
            producer.cancel()
            await asyncio.wait({producer})
        await close(iterator)


async def close(iterator):
    """Close `iterator` if it can be (its generator's `finally` runs)."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()
        return
    closer = getattr(iterator, "close", None)
    if closer is not None:
        closer()


async def encoded(items, encode):
    """The items of a `yield`ing handler (a sync or async generator), each through `encode`:
    what its response's `body_iterator` yields, bytes, as in FastAPI. Closing it closes the
    handler's generator."""
    iterator = items.__aiter__() if hasattr(items, "__aiter__") else responses.iterate(items)
    try:
        async for item in iterator:
            yield encode(item)
    finally:
        await close(iterator)


class Serialized(bytes):
    """An item its item model wrote as JSON already (`pipeline`'s `-> AsyncIterable[Item]`)."""


def sse_items(item):
    """A `yield`ing SSE handler's item as one event."""
    if isinstance(item, Serialized):
        return sse.format_sse_event(data_str=item.decode("utf-8"))
    return sse.event_bytes(item)


def jsonl_items(item):
    """A `yield`ing handler's item as one JSON Lines line."""
    if isinstance(item, Serialized):
        return bytes(item) + b"\n"
    return (sse.json_item(item) + "\n").encode("utf-8")
