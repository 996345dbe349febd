"""The root route: GET / and POST /."""

from filerouter import Request


def GET(request: Request):
    """Say hello.

    :param name: who to greet (optional query parameter)
    """
    name = request.query_params.get("name", "world")
    return {"message": f"Hello, {name}!"}


async def POST(request: Request):
    """Echo the JSON body back."""
    body = await request.json()
    return {"received": body}, 201
