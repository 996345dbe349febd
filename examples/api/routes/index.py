from typing import Any

from filerouter import Request


def GET(request: Request) -> Any:
    """Who you are, as the middleware's token check found you."""
    return {"hello": request.state.user}
