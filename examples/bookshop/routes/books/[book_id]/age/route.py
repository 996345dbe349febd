from typing import Any

from dateutil import parser as dateparser
from dateutil.relativedelta import relativedelta
from filerouter import HTTPException, Query, Request

from _lib import store


def GET(request: Request, book_id: int, on: str = Query(description="A date, in any format dateutil reads")) -> dict[str, Any]:
    """How old a book was on a given date (python-dateutil reads the date)."""
    book = store.find(book_id)
    try:
        when = dateparser.parse(on).date()
    except (ValueError, OverflowError):
        raise HTTPException(400, f"Cannot read the date {on!r}") from None
    if book.published is None:
        raise HTTPException(409, "The book has no publication date")
    age = relativedelta(when, book.published)
    return {"book_id": book_id, "on": when.isoformat(), "years": age.years, "months": age.months}
