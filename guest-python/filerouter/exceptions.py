"""Exceptions a handler raises on purpose to answer with an error status."""

import http


class HTTPException(Exception):
    """Answer the request with `status_code` and the JSON body `{"detail": detail}`.

    As in FastAPI, `detail` defaults to the status code's reason phrase, and `headers` are added
    to the response.
    """

    def __init__(self, status_code, detail=None, headers=None):
        if detail is None:
            try:
                detail = http.HTTPStatus(status_code).phrase
            except ValueError:
                detail = ""
        super().__init__(status_code, detail)
        self.status_code = status_code
        self.detail = detail
        self.headers = dict(headers or {})

    def __str__(self):
        return f"{self.status_code}: {self.detail}"

    def __repr__(self):
        return f"HTTPException(status_code={self.status_code!r}, detail={self.detail!r})"


class ProjectCodeError(Exception):
    """A mistake in project code that the framework detects, located at a file and line.

    `filename` is a sandbox path (`/routes/...`); `suggestions` are shown on the error page.
    """

    def __init__(self, message, filename=None, lineno=None, suggestions=()):
        super().__init__(message)
        self.msg = message
        self.filename = filename
        self.lineno = lineno
        self.suggestions = list(suggestions)


class HandlerSignatureError(ProjectCodeError, TypeError):
    """A handler whose parameters do not fit its route (a missing path parameter, ...)."""


class ResponseSerializationError(ProjectCodeError, TypeError):
    """A handler returned something that cannot be sent as JSON."""


class NoHandlerError(ProjectCodeError):
    """A route file that defines none of the handler functions."""


class RequestValidationError(Exception):
    """Path or query parameters that do not convert: answered with 422 and FastAPI's body."""

    def __init__(self, errors):
        super().__init__(errors)
        self.errors = errors
