from typing import Any

from filerouter import route

from _lib.models import Entity, Price, Product


@route(response_model=Entity)
def GET() -> Any:
    return Product(id=3, sku="ABC-123", price=Price(amount="1.5", currency="EUR"))
