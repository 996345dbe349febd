"""The shapes of the API: the pydantic models of examples/bookshop-fastapi/app.py, unchanged
(tests/port.rs checks that the text below the imports is the same)."""

import datetime
import enum
from typing import Optional

from pydantic import BaseModel, Field


class Genre(str, enum.Enum):
    fiction = "fiction"
    science = "science"
    history = "history"


class BookIn(BaseModel):
    title: str
    author: str
    price: float
    genre: Genre = Genre.fiction
    tags: list[str] = Field(default_factory=list)
    published: Optional[datetime.date] = None


class Book(BaseModel):
    id: int
    title: str
    author: str
    price: float
    genre: Genre
    tags: list[str]
    published: Optional[datetime.date]


class Review(BaseModel):
    rating: int
    comment: Optional[str] = None


class Address(BaseModel):
    street: str
    city: str
    postcode: str


class Line(BaseModel):
    book_id: int
    quantity: int = 1


class Order(BaseModel):
    lines: list[Line]
    address: Address
    gift: bool = False
