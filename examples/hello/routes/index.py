"""GET / — the smallest possible route."""

from typing import Any

from filerouter import Request


async def GET(request: Request) -> Any:
    """Say hello."""
    return {"message": "hello"}
