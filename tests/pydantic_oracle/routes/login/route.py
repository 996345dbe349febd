from typing import Annotated, Any

from filerouter import Form

from _lib.models import Login


def POST(form: Annotated[Login, Form()]) -> dict[str, Any]:
    return {"username": form.username, "remember": form.remember, "scopes": form.scopes}
