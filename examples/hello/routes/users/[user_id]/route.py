"""GET /users/{user_id} — a dynamic segment converted by its type hint."""

from typing import Any

from filerouter import Request


async def GET(request: Request, user_id: int) -> Any:
    """Fetch one user by numeric id.

    A non-numeric id is a 422, as in FastAPI.

    :param user_id: The user's number.
    """
    return {"id": user_id, "name": "user" + str(user_id)}
