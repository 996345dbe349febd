from filerouter import HTTPException, kv


def GET(request, item_id: int):
    """Fetch one item by id."""
    for item in kv.get("items", []):
        if item["id"] == item_id:
            return item
    raise HTTPException(404, f"no item {item_id}")


def DELETE(request, item_id: int):
    """Delete one item."""
    items = kv.get("items", [])
    kept = [item for item in items if item["id"] != item_id]
    if len(kept) == len(items):
        raise HTTPException(404, f"no item {item_id}")
    kv.set("items", kept)
    return None
