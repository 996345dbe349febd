from _lib.orders import OrderRecord


def POST(request, order: OrderRecord) -> OrderRecord:
    return order
