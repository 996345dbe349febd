from typing import Annotated, Any

from filerouter import Body

from _lib.models import Address


def POST(
    source: Address,
    target: Address,
    note: Annotated[str, Body(max_length=20)] = "",
    priority: Annotated[int, Body(ge=1, le=3)] = 2,
) -> dict[str, Any]:
    return {"from": source.city, "to": target.city, "note": note, "priority": priority}
