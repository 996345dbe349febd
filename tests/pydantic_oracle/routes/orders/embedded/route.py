from typing import Annotated

from filerouter import Body

from _lib.models import Order


def POST(order: Annotated[Order, Body(embed=True)]) -> Order:
    return order
