from _lib.models import Item


def POST(item: Item) -> Item:
    return item
