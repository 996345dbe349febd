from typing import Any

from filerouter import File, Form, Request, UploadFile

from _lib import store


async def POST(request: Request, book_id: int, cover: UploadFile = File(), caption: str = Form("")) -> dict[str, Any]:
    """Upload a cover image (multipart form)."""
    store.find(book_id)
    data = await cover.read()
    return {"book_id": book_id, "filename": cover.filename, "content_type": cover.content_type, "bytes": len(data), "caption": caption}
