from typing import Literal, Optional

from filerouter import Depends, HTTPException, Query, Request

from _lib import store
from _lib.auth import current_user, pagination
from _lib.models import Book, BookIn, Genre


def GET(
    request: Request,
    page: dict[str, int] = Depends(pagination),
    q: Optional[str] = Query(None, min_length=2, max_length=40),
    genre: Optional[Genre] = None,
    tag: list[str] = Query([]),
    max_price: Optional[float] = Query(None, gt=0),
) -> list[Book]:
    """List books, filtered by text, genre, tags and price."""
    found = [
        b for b in sorted(store.books().values(), key=lambda b: b.id)
        if (q is None or q.lower() in b.title.lower() or q.lower() in b.author.lower())
        and (genre is None or b.genre == genre)
        and all(t in b.tags for t in tag)
        and (max_price is None or b.price <= max_price)
    ]
    return found[page["offset"]:page["offset"] + page["limit"]]


def POST(request: Request, book: BookIn, user: str = Depends(current_user)) -> tuple[Book, Literal[201]]:
    """Add a book (needs a bearer token)."""
    books = store.books()
    if any(b.title == book.title for b in books.values()):
        raise HTTPException(409, f"A book titled {book.title!r} exists")
    new = Book(id=max(books) + 1, **book.model_dump())
    books[new.id] = new
    store.save(books)
    return new, 201
