"""The books, kept in filerouter.kv: every request runs in a fresh sandbox instance, so the
FastAPI app's module-level dict becomes a key in the project's key-value store."""

import datetime
from typing import Any

from filerouter import HTTPException, kv

from _lib.models import Book, Genre

SEED = [
    Book(id=1, title="Dune", author="Frank Herbert", price=9.5, genre=Genre.fiction, tags=["classic", "space"], published=datetime.date(1965, 8, 1)),
    Book(id=2, title="Cosmos", author="Carl Sagan", price=12.0, genre=Genre.science, tags=["space"], published=datetime.date(1980, 10, 1)),
    Book(id=3, title="SPQR", author="Mary Beard", price=15.25, genre=Genre.history, tags=["rome"], published=datetime.date(2015, 10, 20)),
]


def _encode(book: Book) -> dict[str, Any]:
    return book.model_dump(mode="json")


def _decode(data: dict[str, Any]) -> Book:
    return Book.model_validate(data)


def books() -> dict[int, Book]:
    stored = kv.get("books")
    if stored is None:
        return {b.id: b for b in SEED}
    return {int(k): _decode(v) for k, v in stored.items()}


def save(all_books: dict[int, Book]) -> None:
    kv.set("books", {str(k): _encode(v) for k, v in all_books.items()})


def find(book_id: int) -> Book:
    book = books().get(book_id)
    if book is None:
        raise HTTPException(404, f"Book {book_id} not found")
    return book
