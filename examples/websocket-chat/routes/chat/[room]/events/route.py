"""GET /chat/ROOM/events: the room's messages as Server-Sent Events, for a reader that does not
talk (a browser's `EventSource`). Each event's `id` is the message's number, so a reconnecting
`EventSource` (which sends `Last-Event-ID`) continues where it stopped."""

import asyncio

from _lib import chat
from filerouter import Header, route
from filerouter.sse import EventSourceResponse, ServerSentEvent


@route(response_class=EventSourceResponse)
async def GET(room: str, last_event_id: int | None = Header(None)):
    """The messages of ROOM from now on (after `Last-Event-ID` when given)."""
    seen = last_event_id if last_event_id is not None else chat.last(room)
    while True:
        for stored in chat.unseen(room, seen):
            seen += 1
            if stored is not None:
                yield ServerSentEvent(raw_data=stored, event="message", id=str(seen))
        await asyncio.sleep(chat.POLL_S)
