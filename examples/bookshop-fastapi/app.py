"""A small bookshop API in FastAPI: the original that examples/bookshop ports to filerouter.

Run it with `uvicorn app:app --port 8001` from this folder (requirements.txt lists what it
needs). tests/port.rs sends the same requests to it and to the port and compares the answers.
"""

import datetime
import enum
from typing import Annotated, Optional

import jwt
from dateutil import parser as dateparser
from dateutil.relativedelta import relativedelta
from fastapi import Body, Cookie, Depends, FastAPI, File, Form, Header, HTTPException, Path, Query, UploadFile
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import BaseModel, Field

SECRET = "bookshop-demo-secret-key-change-me-0123456789"
USERS = {"alice": "wonderland", "bob": "builder"}

app = FastAPI(title="Bookshop", version="1.0.0")
templates = Environment(
    loader=FileSystemLoader(__file__.rsplit("/", 1)[0] + "/templates"),
    autoescape=select_autoescape(),
)


# The API's models, from here to BOOKS: examples/bookshop/routes/_lib/models.py holds the same
# text after its imports (tests/port.rs checks), so the port uses exactly these pydantic models.
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


BOOKS: dict[int, Book] = {
    1: Book(id=1, title="Dune", author="Frank Herbert", price=9.5, genre=Genre.fiction, tags=["classic", "space"], published=datetime.date(1965, 8, 1)),
    2: Book(id=2, title="Cosmos", author="Carl Sagan", price=12.0, genre=Genre.science, tags=["space"], published=datetime.date(1980, 10, 1)),
    3: Book(id=3, title="SPQR", author="Mary Beard", price=15.25, genre=Genre.history, tags=["rome"], published=datetime.date(2015, 10, 20)),
}
REVIEWS: dict[int, list[dict]] = {}


def current_user(authorization: Annotated[Optional[str], Header()] = None) -> str:
    if not authorization or not authorization.startswith("Bearer "):
        raise HTTPException(401, "Not authenticated", headers={"WWW-Authenticate": "Bearer"})
    try:
        claims = jwt.decode(authorization[7:], SECRET, algorithms=["HS256"])
    except jwt.InvalidTokenError:
        raise HTTPException(401, "Invalid token", headers={"WWW-Authenticate": "Bearer"}) from None
    return claims["sub"]


def pagination(limit: int = Query(10, ge=1, le=50), offset: int = Query(0, ge=0)) -> dict:
    return {"limit": limit, "offset": offset}


def find(book_id: int) -> Book:
    book = BOOKS.get(book_id)
    if book is None:
        raise HTTPException(404, f"Book {book_id} not found")
    return book


@app.get("/")
def index() -> dict:
    return {"name": "Bookshop", "books": len(BOOKS)}


@app.post("/token")
def token(username: str = Form(min_length=3), password: str = Form()) -> dict:
    if USERS.get(username) != password:
        raise HTTPException(401, "Incorrect username or password")
    return {"access_token": jwt.encode({"sub": username}, SECRET, algorithm="HS256"), "token_type": "bearer"}


@app.get("/me")
def me(user: str = Depends(current_user)) -> dict:
    return {"user": user}


@app.get("/books")
def list_books(
    page: dict = Depends(pagination),
    q: Optional[str] = Query(None, min_length=2, max_length=40),
    genre: Optional[Genre] = None,
    tag: list[str] = Query([]),
    max_price: Optional[float] = Query(None, gt=0),
) -> list[Book]:
    found = [
        b for b in sorted(BOOKS.values(), key=lambda b: b.id)
        if (q is None or q.lower() in b.title.lower() or q.lower() in b.author.lower())
        and (genre is None or b.genre == genre)
        and all(t in b.tags for t in tag)
        and (max_price is None or b.price <= max_price)
    ]
    return found[page["offset"]:page["offset"] + page["limit"]]


@app.post("/books", status_code=201)
def create_book(book: BookIn, user: str = Depends(current_user)) -> Book:
    if any(b.title == book.title for b in BOOKS.values()):
        raise HTTPException(409, f"A book titled {book.title!r} exists")
    new = Book(id=max(BOOKS) + 1, **book.model_dump())
    BOOKS[new.id] = new
    return new


@app.get("/books/{book_id}")
def get_book(book_id: int = Path(ge=1)) -> Book:
    return find(book_id)


@app.put("/books/{book_id}")
def replace_book(book: BookIn, book_id: int = Path(ge=1), user: str = Depends(current_user)) -> Book:
    find(book_id)
    BOOKS[book_id] = Book(id=book_id, **book.model_dump())
    return BOOKS[book_id]


@app.delete("/books/{book_id}", status_code=204)
def delete_book(book_id: int = Path(ge=1), user: str = Depends(current_user)) -> None:
    find(book_id)
    del BOOKS[book_id]


@app.post("/books/{book_id}/reviews", status_code=201)
def add_review(
    book_id: int,
    rating: int = Body(ge=1, le=5),
    comment: Optional[str] = Body(None, max_length=200),
    x_client: Optional[str] = Header(None),
) -> dict:
    find(book_id)
    review = {"rating": rating, "comment": comment, "client": x_client}
    REVIEWS.setdefault(book_id, []).append(review)
    return {"book_id": book_id, "reviews": len(REVIEWS[book_id]), "review": review}


@app.get("/books/{book_id}/age")
def book_age(book_id: int, on: str = Query(description="A date, in any format dateutil reads")) -> dict:
    book = find(book_id)
    try:
        when = dateparser.parse(on).date()
    except (ValueError, OverflowError):
        raise HTTPException(400, f"Cannot read the date {on!r}") from None
    if book.published is None:
        raise HTTPException(409, "The book has no publication date")
    age = relativedelta(when, book.published)
    return {"book_id": book_id, "on": when.isoformat(), "years": age.years, "months": age.months}


@app.get("/books/{book_id}/page", response_class=HTMLResponse)
def book_page(book_id: int, theme: str = Cookie("light")) -> str:
    book = find(book_id)
    return templates.get_template("book.html").render(book=book, theme=theme)


@app.post("/orders", status_code=201)
def place_order(order: Order, coupon: Optional[str] = Body(None, pattern=r"^[A-Z]{4}\d{2}$"), user: str = Depends(current_user)) -> dict:
    total = 0.0
    for line in order.lines:
        if line.quantity < 1:
            raise HTTPException(422, "Quantities start at 1")
        total += find(line.book_id).price * line.quantity
    if coupon:
        total *= 0.9
    return {"user": user, "city": order.address.city, "items": sum(l.quantity for l in order.lines), "total": round(total, 2), "gift": order.gift}


@app.post("/books/{book_id}/cover")
async def upload_cover(book_id: int, cover: UploadFile = File(), caption: str = Form("")) -> dict:
    find(book_id)
    data = await cover.read()
    return {"book_id": book_id, "filename": cover.filename, "content_type": cover.content_type, "bytes": len(data), "caption": caption}
