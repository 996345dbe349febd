"""The books, kept in filerouter.kv: every request runs in a fresh sandbox instance, so the
FastAPI app's module-level dict becomes a key in the project's key-value store."""

import dataclasses
import datetime
from typing import Any

from filerouter import HTTPException, kv

from _lib.models import Book, Genre

SEED = [
    Book(1, "Dune", "Frank Herbert", 9.5, Genre.fiction, ["classic", "space"], datetime.date(1965, 8, 1)),
    Book(2, "Cosmos", "Carl Sagan", 12.0, Genre.science, ["space"], datetime.date(1980, 10, 1)),
    Book(3, "SPQR", "Mary Beard", 15.25, Genre.history, ["rome"], datetime.date(2015, 10, 20)),
]


def _encode(book: Book) -> dict[str, Any]:
    data = dataclasses.asdict(book)
    data["genre"] = book.genre.value
    data["published"] = book.published.isoformat() if book.published else None
    return data


def _decode(data: dict[str, Any]) -> Book:
    published = datetime.date.fromisoformat(data["published"]) if data["published"] else None
    return Book(**{**data, "genre": Genre(data["genre"]), "published": published})


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
