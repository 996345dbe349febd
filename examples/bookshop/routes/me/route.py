from typing import Any

from filerouter import Depends, Request

from _lib.auth import current_user


def GET(request: Request, user: str = Depends(current_user)) -> dict[str, Any]:
    """Who the bearer token belongs to."""
    return {"user": user}
