from typing import Annotated

from filerouter import Header

from _lib.models import Client


def GET(headers: Annotated[Client, Header()]) -> Client:
    return headers
