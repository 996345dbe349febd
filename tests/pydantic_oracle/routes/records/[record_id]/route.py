from typing import Any

from filerouter import route

from _lib.models import Record, Row


@route(response_model=Record)
def GET(record_id: int) -> Any:
    return Row(record_id, f"record {record_id}", "12.5", ["a", "b"])
