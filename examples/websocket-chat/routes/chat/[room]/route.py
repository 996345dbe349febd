"""A chat room: `ws://HOST/chat/ROOM?name=ann`.

Each connection runs in a sandbox instance of its own, so the room lives in the kv store
(`routes/_lib/chat.py`): what a client says is posted there, and every connection, while it
waits for its client, sends its client what others posted, ten times a second.
"""

import asyncio

from _lib import chat
from filerouter import WebSocket, WebSocketDisconnect


async def WEBSOCKET(websocket: WebSocket, room: str, name: str = "guest"):
    """Joins ROOM as `name`: what the client sends goes to everyone in the room, as
    `{"from": name, "text": ...}`; joining and leaving are announced."""
    await websocket.accept()
    seen = chat.last(room)
    chat.post(room, {"from": "server", "text": f"{name} joined"})

    async def relay():
        nonlocal seen
        while True:
            for stored in chat.unseen(room, seen):
                seen += 1
                if stored is not None:
                    await websocket.send_text(stored)
            await asyncio.sleep(chat.POLL_S)

    relaying = asyncio.ensure_future(relay())
    try:
        while True:
            text = await websocket.receive_text()
            chat.post(room, {"from": name, "text": text[:2000]})
    except WebSocketDisconnect:
        chat.post(room, {"from": "server", "text": f"{name} left"})
    finally:
        relaying.cancel()
