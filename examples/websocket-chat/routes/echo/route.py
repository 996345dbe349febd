"""Echo: every text message comes back, as FastAPI's WebSocket example does."""

from filerouter import WebSocket, WebSocketDisconnect


async def WEBSOCKET(websocket: WebSocket):
    """Sends back each text message the client sends."""
    await websocket.accept()
    try:
        while True:
            text = await websocket.receive_text()
            await websocket.send_text(f"Message text was: {text}")
    except WebSocketDisconnect:
        pass
