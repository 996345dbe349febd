from filerouter import Depends, HTTPException, kv


def current_user(request):
    """The user the middleware authenticated."""
    return getattr(request.state, "user", None)


def pagination(offset: int = 0, limit: int = 10):
    if limit > 100:
        raise HTTPException(400, "limit is at most 100")
    return {"offset": offset, "limit": limit}


def GET(request, page=Depends(pagination), user=Depends(current_user)):
    """List items.

    :param offset: How many items to skip.
    :param limit: How many items to return (at most 100).
    """
    items = kv.get("items", [])
    return {"user": user, "items": items[page["offset"] : page["offset"] + page["limit"]], "total": len(items)}


async def POST(request):
    """Add an item: a JSON object with a `name`."""
    body = await request.json()
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        raise HTTPException(422, "send {\"name\": \"...\"}")
    items = kv.get("items", [])
    item = {"id": kv.incr("item-ids"), "name": body["name"]}
    kv.set("items", items + [item])
    return item, 201
