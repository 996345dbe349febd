from typing import Any

from filerouter import route

from _lib.models import Person


@route(response_model=Person, response_model_by_alias=False)
def POST(person: Person) -> Any:
    return person
