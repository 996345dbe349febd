from typing import Any

from filerouter import route

from _lib.models import Record, Thing


@route(response_model=Record)
def GET(record_id: int) -> Any:
    return Thing(id=record_id, title="no price")
