from typing import Annotated

from filerouter import Cookie

from _lib.models import Session


def GET(cookies: Annotated[Session, Cookie()]) -> Session:
    return cookies
