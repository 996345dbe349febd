from typing import Any, Literal, Optional

from filerouter import Body, Header, Request, kv

from _lib import store


def POST(
    request: Request,
    book_id: int,
    rating: int = Body(ge=1, le=5),
    comment: Optional[str] = Body(None, max_length=200),
    x_client: Optional[str] = Header(None),
) -> tuple[dict[str, Any], Literal[201]]:
    """Review a book: `{"rating": 1-5, "comment": "..."}`."""
    store.find(book_id)
    review = {"rating": rating, "comment": comment, "client": x_client}
    count = kv.incr(f"reviews:{book_id}")
    return {"book_id": book_id, "reviews": count, "review": review}, 201
