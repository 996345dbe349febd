from typing import Any

import jwt
from filerouter import Form, HTTPException, Request

from _lib.auth import SECRET, USERS


def POST(request: Request, username: str = Form(min_length=3), password: str = Form()) -> dict[str, Any]:
    """Trade a username and password (a form) for a bearer token."""
    if USERS.get(username) != password:
        raise HTTPException(401, "Incorrect username or password")
    return {"access_token": jwt.encode({"sub": username}, SECRET, algorithm="HS256"), "token_type": "bearer"}
