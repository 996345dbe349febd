"""The `filerouter` module that route files import.

Everything here runs inside the WebAssembly sandbox, in a fresh interpreter for every request.
Route files use it like FastAPI::

    from filerouter import Request, HTTPException

    def GET(request: Request, id: int):
        if id == 0:
            raise HTTPException(404, "no such user")
        return {"id": id}
"""

# `passwords` also gives `hashlib` its `pbkdf2_hmac` and `scrypt`, and brings the sandbox's own
# `bcrypt` and `argon2` packages into the snapshot.
from . import db, kv, passwords, plugins
from .environment import env, settings
from .exceptions import HTTPException
from .forms import FormData, UploadFile
from .markers import Body, Cookie, Field, File, Form, Header, Path, Query
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
    "Body",
    "Cookie",
    "Depends",
    "Field",
    "File",
    "Form",
    "FormData",
    "Header",
    "HTTPException",
    "Headers",
    "HTMLResponse",
    "JSONResponse",
    "Path",
    "PlainTextResponse",
    "Query",
    "QueryParams",
    "RedirectResponse",
    "Request",
    "Response",
    "State",
    "UploadFile",
    "db",
    "env",
    "kv",
    "passwords",
    "plugins",
    "settings",
]
