"""GET /users — query parameters by name, FastAPI-style, described in the docstring."""

from typing import Any

from filerouter import Request

NAMES = ["user" + str(i) for i in range(1, 51)]


def GET(request: Request, q: str | None = None, limit: int = 10, offset: int = 0) -> Any:
    """List users, optionally filtered by name.

    Query parameters are the handler's parameters after the path parameters: a default makes
    one optional, the type hint converts it (`?limit=abc` is a 422).

    :param q: Only users whose name contains this text.
    :param limit: How many users to return, at most 100.
    :param offset: How many matching users to skip first.
    """
    names = [n for n in NAMES if q is None or q in n]
    start = max(offset, 0)
    page = names[start : start + max(min(limit, 100), 0)]
    return {"total": len(names), "items": [{"id": int(n[4:]), "name": n} for n in page]}
