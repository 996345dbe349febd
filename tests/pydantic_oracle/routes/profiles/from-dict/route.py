from typing import Any

from filerouter import route

from _lib.models import Profile


@route(response_model=Profile, response_model_exclude_unset=True)
def POST(profile: Profile) -> Any:
    return {"name": profile.name.upper(), "followers": profile.followers + 1, "extra": "dropped"}
