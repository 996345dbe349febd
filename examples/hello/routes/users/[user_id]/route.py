"""GET /users/{user_id} — a dynamic segment converted by its type hint."""


async def GET(request, user_id: int):
    """Fetch one user by numeric id.

    A non-numeric id is a 422, as in FastAPI.

    :param user_id: The user's number.
    """
    return {"id": user_id, "name": "user" + str(user_id)}
