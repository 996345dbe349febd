"""POST /items — read a JSON body."""

from typing import Any

from filerouter import HTTPException, Request


async def POST(request: Request) -> Any:
    """Echo the JSON body back.

    An empty body is `null`; a body that is not JSON is a 400.
    """
    if not await request.body():
        return {"received": None}
    try:
        body = await request.json()
    except ValueError:
        raise HTTPException(400, "The body is not valid JSON") from None
    return {"received": body}
