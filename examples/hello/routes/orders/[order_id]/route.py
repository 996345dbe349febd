"""/orders/{order_id} — a UUID path parameter, and two methods in one file."""

import uuid
from typing import Any

from filerouter import Request


def GET(request: Request, order_id: uuid.UUID) -> Any:
    """Look up an order.

    :param order_id: The order's UUID, such as `6f1c9c1e-0c4b-4b5e-9a53-3a5d6d0e2f10`.
    """
    return {"id": str(order_id), "status": "shipped", "version": order_id.version}


async def DELETE(request: Request, order_id: uuid.UUID) -> Any:
    """Cancel an order."""
    return {"id": str(order_id), "status": "cancelled"}
