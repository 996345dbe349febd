from typing import Any

from filerouter import route

from _lib.models import Message


@route(response_model=Message)
def GET(code: int) -> Any:
    return {"detail": f"code {code}", "internal": True}
