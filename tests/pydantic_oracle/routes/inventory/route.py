from _lib.models import Inventory


def POST(inventory: Inventory) -> Inventory:
    return inventory
