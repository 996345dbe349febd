"""The `filerouter` module that route files import.

Everything here runs inside the WebAssembly sandbox, in a fresh interpreter for every request.
Route files use it like FastAPI::

    from filerouter import Request, HTTPException

    def GET(request: Request, id: int):
        if id == 0:
            raise HTTPException(404, "no such user")
        return {"id": id}
"""

from . import kv, plugins
from .exceptions import HTTPException
from .params import Depends
from .requests import Headers, QueryParams, Request, State
from .responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)

__all__ = [
    "Depends",
    "HTTPException",
    "Headers",
    "HTMLResponse",
    "JSONResponse",
    "PlainTextResponse",
    "QueryParams",
    "RedirectResponse",
    "Request",
    "Response",
    "State",
    "kv",
    "plugins",
]
