from typing import Any, Optional

from _lib.models import Coupon, Order


def POST(order: Order, coupon: Optional[Coupon] = None) -> dict[str, Any]:
    total = sum(line.price * line.quantity for line in order.lines)
    if coupon is not None:
        total = total * (100 - coupon.percent) / 100
    return {"lines": len(order.lines), "total": round(total, 2), "city": order.address.city, "coupon": coupon}
