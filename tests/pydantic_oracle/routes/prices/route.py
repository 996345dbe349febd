from _lib.models import Price


def POST(price: Price) -> Price:
    return price
