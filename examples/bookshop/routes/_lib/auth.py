"""Bearer tokens with PyJWT, and the shared dependencies."""

from typing import Annotated, Optional

import jwt
from filerouter import Header, HTTPException, Query

SECRET = "bookshop-demo-secret-key-change-me-0123456789"
USERS = {"alice": "wonderland", "bob": "builder"}


def current_user(authorization: Annotated[Optional[str], Header()] = None) -> str:
    if not authorization or not authorization.startswith("Bearer "):
        raise HTTPException(401, "Not authenticated", headers={"WWW-Authenticate": "Bearer"})
    try:
        claims = jwt.decode(authorization[7:], SECRET, algorithms=["HS256"])
    except jwt.InvalidTokenError:
        raise HTTPException(401, "Invalid token", headers={"WWW-Authenticate": "Bearer"}) from None
    user: str = claims["sub"]
    return user


def pagination(limit: int = Query(10, ge=1, le=50), offset: int = Query(0, ge=0)) -> dict[str, int]:
    return {"limit": limit, "offset": offset}
