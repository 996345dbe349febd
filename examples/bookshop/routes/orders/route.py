from typing import Any, Literal, Optional

from filerouter import Body, Depends, HTTPException, Request

from _lib import store
from _lib.auth import current_user
from _lib.models import Order


def POST(request: Request, order: Order, coupon: Optional[str] = Body(None, pattern=r"^[A-Z]{4}\d{2}$"), user: str = Depends(current_user)) -> tuple[dict[str, Any], Literal[201]]:
    """Place an order: `{"order": {...}, "coupon": "SAVE10"}`."""
    total = 0.0
    for line in order.lines:
        if line.quantity < 1:
            raise HTTPException(422, "Quantities start at 1")
        total += store.find(line.book_id).price * line.quantity
    if coupon:
        total *= 0.9
    return {"user": user, "city": order.address.city, "items": sum(l.quantity for l in order.lines), "total": round(total, 2), "gift": order.gift}, 201
