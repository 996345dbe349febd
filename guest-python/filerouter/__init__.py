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
from . import db, http, kv, passwords, plugins, security, sse, status, trace, websockets
from .background import BackgroundTasks
from .environment import env, settings
from .exceptions import HTTPException
from .forms import FormData, UploadFile
from .markers import Body, Cookie, Field, File, Form, Header, Path, Query
from .models import asdict, fields_set
from .operation import route
from .params import Depends
from .requests import Headers, QueryParams, Request, State
from .responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from .sse import EventSourceResponse, ServerSentEvent
from .websockets import WebSocket, WebSocketDisconnect, WebSocketException, WebSocketState
from .security import (
    APIKeyCookie,
    APIKeyHeader,
    APIKeyQuery,
    HTTPAuthorizationCredentials,
    HTTPBasic,
    HTTPBasicCredentials,
    HTTPBearer,
    OAuth2PasswordBearer,
    OAuth2PasswordRequestForm,
    Security,
    SecurityScopes,
)

__all__ = [
    "APIKeyCookie",
    "APIKeyHeader",
    "APIKeyQuery",
    "BackgroundTasks",
    "Body",
    "Cookie",
    "Depends",
    "EventSourceResponse",
    "Field",
    "File",
    "Form",
    "FormData",
    "Header",
    "Headers",
    "HTMLResponse",
    "HTTPAuthorizationCredentials",
    "HTTPBasic",
    "HTTPBasicCredentials",
    "HTTPBearer",
    "HTTPException",
    "JSONResponse",
    "OAuth2PasswordBearer",
    "OAuth2PasswordRequestForm",
    "Path",
    "PlainTextResponse",
    "Query",
    "QueryParams",
    "RedirectResponse",
    "Request",
    "Response",
    "Security",
    "SecurityScopes",
    "ServerSentEvent",
    "State",
    "StreamingResponse",
    "UploadFile",
    "WebSocket",
    "WebSocketDisconnect",
    "WebSocketException",
    "WebSocketState",
    "asdict",
    "db",
    "env",
    "fields_set",
    "http",
    "kv",
    "passwords",
    "plugins",
    "route",
    "security",
    "settings",
    "sse",
    "status",
    "trace",
    "websockets",
]
