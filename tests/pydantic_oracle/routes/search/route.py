from typing import Annotated

from filerouter import Query

from _lib.models import Filters


def GET(filters: Annotated[Filters, Query()]) -> Filters:
    return filters
