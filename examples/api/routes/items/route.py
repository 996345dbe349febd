from typing import Any

from filerouter import Depends, HTTPException, Request, kv


def current_user(request: Request) -> str | None:
    """The user the middleware authenticated."""
    user: str | None = getattr(request.state, "user", None)
    return user


def pagination(offset: int = 0, limit: int = 10) -> dict[str, int]:
    if limit > 100:
        raise HTTPException(400, "limit is at most 100")
    return {"offset": offset, "limit": limit}


def GET(
    request: Request, page: dict[str, int] = Depends(pagination), user: str | None = Depends(current_user)
) -> Any:
    """List items.

    :param offset: How many items to skip.
    :param limit: How many items to return (at most 100).
    """
    items = kv.get("items", [])
    return {"user": user, "items": items[page["offset"] : page["offset"] + page["limit"]], "total": len(items)}


async def POST(request: Request) -> Any:
    """Add an item: a JSON object with a `name`."""
    body = await request.json()
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        raise HTTPException(422, "send {\"name\": \"...\"}")
    items = kv.get("items", [])
    item = {"id": kv.incr("item-ids"), "name": body["name"]}
    kv.set("items", items + [item])
    return item, 201
