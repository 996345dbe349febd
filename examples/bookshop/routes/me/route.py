from filerouter import Depends

from _lib.auth import current_user


def GET(request, user: str = Depends(current_user)) -> dict:
    """Who the bearer token belongs to."""
    return {"user": user}
