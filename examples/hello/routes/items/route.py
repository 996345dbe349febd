"""POST /items — read a JSON body."""


async def POST(request):
    """Echo the JSON body back."""
    body = await request.json()
    return {"received": body}
