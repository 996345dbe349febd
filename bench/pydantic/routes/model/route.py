from _lib.orders import Order


def POST(request, order: Order) -> Order:
    return order
