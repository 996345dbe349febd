"""POST /items — read a JSON body."""

from filerouter import HTTPException


async def POST(request):
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
