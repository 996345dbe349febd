"""GET / — the smallest possible route."""


async def GET(request):
    """Say hello."""
    return {"message": "hello"}
