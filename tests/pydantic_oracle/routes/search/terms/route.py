from typing import Annotated, Any

from filerouter import Query

from _lib.models import Search


def GET(search: Annotated[Search, Query()]) -> dict[str, Any]:
    return search.model_dump()
