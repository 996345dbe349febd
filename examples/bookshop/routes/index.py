from typing import Any

from filerouter import Request

from _lib import store


def GET(request: Request) -> dict[str, Any]:
    """The shop's name and how many books it has."""
    return {"name": "Bookshop", "books": len(store.books())}
