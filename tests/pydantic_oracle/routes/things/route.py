from typing import Any

from filerouter import route

from _lib.models import Named, Thing


@route(response_model=Named)
def GET() -> Any:
    return Thing(id=7, name="seven", labels=["x"], created="2020-02-02", secret="hidden")
