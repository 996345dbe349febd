from typing import Any

from filerouter import route

from _lib.models import ItemPatch


@route(response_model=ItemPatch, response_model_exclude_unset=True)
def PATCH(item_id: int, patch: ItemPatch) -> Any:
    return patch
