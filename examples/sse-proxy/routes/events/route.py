"""GET /events: read the upstream's streamed body as it arrives and pass each line on as one
Server-Sent Event (`event: token`), then `event: done` with the count. The browser's
`EventSource` shows each token as the upstream sends it, not once the upstream has finished."""

from filerouter import Request, http, route, settings
from filerouter.sse import EventSourceResponse, ServerSentEvent


@route(response_class=EventSourceResponse)
async def GET(request: Request):
    count = 0
    pending = b""
    async with http.AsyncClient(timeout=30).stream("GET", settings["upstream"]) as upstream:
        async for chunk in upstream.aiter_bytes():
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield ServerSentEvent(data=line.decode(), event="token", id=str(count))
                count += 1
    yield ServerSentEvent(data=count, event="done")
