from filerouter import Depends, Path, Request

from _lib import store
from _lib.auth import current_user
from _lib.models import Book, BookIn


def GET(request: Request, book_id: int = Path(ge=1)) -> Book:
    """One book."""
    return store.find(book_id)


def PUT(request: Request, book: BookIn, book_id: int = Path(ge=1), user: str = Depends(current_user)) -> Book:
    """Replace a book (needs a bearer token)."""
    store.find(book_id)
    books = store.books()
    books[book_id] = Book(id=book_id, **book.model_dump())
    store.save(books)
    return books[book_id]


def DELETE(request: Request, book_id: int = Path(ge=1), user: str = Depends(current_user)) -> None:
    """Remove a book (needs a bearer token)."""
    store.find(book_id)
    books = store.books()
    del books[book_id]
    store.save(books)
