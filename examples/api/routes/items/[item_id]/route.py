from typing import Any

from filerouter import HTTPException, Request, kv


def GET(request: Request, item_id: int) -> Any:
    """Fetch one item by id."""
    for item in kv.get("items", []):
        if item["id"] == item_id:
            return item
    raise HTTPException(404, f"no item {item_id}")


def DELETE(request: Request, item_id: int) -> Any:
    """Delete one item."""
    items = kv.get("items", [])
    kept = [item for item in items if item["id"] != item_id]
    if len(kept) == len(items):
        raise HTTPException(404, f"no item {item_id}")
    kv.set("items", kept)
    return None
