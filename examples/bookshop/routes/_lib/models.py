"""The shapes of the API: dataclasses instead of Pydantic models (pydantic-core is native code)."""

import dataclasses
import datetime
import enum
from typing import Optional


class Genre(str, enum.Enum):
    fiction = "fiction"
    science = "science"
    history = "history"


@dataclasses.dataclass
class BookIn:
    title: str
    author: str
    price: float
    genre: Genre = Genre.fiction
    tags: list[str] = dataclasses.field(default_factory=list)
    published: Optional[datetime.date] = None


@dataclasses.dataclass
class Book:
    id: int
    title: str
    author: str
    price: float
    genre: Genre
    tags: list[str]
    published: Optional[datetime.date]


@dataclasses.dataclass
class Address:
    street: str
    city: str
    postcode: str


@dataclasses.dataclass
class Line:
    book_id: int
    quantity: int = 1


@dataclasses.dataclass
class Order:
    lines: list[Line]
    address: Address
    gift: bool = False
