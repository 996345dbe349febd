"""Exceptions a handler raises on purpose to answer with an error status."""

from __future__ import annotations

import http
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


class HTTPException(Exception):
    """Answer the request with `status_code` and the JSON body `{"detail": detail}`.

    As in FastAPI, `detail` defaults to the status code's reason phrase, and `headers` are added
    to the response.
    """

    def __init__(self, status_code: int, detail: Any = None, headers: Mapping[str, str] | None = None) -> None:
        if detail is None:
            try:
                detail = http.HTTPStatus(status_code).phrase
            except ValueError:
                detail = ""
        super().__init__(status_code, detail)
        self.status_code = status_code
        self.detail: Any = detail
        self.headers: dict[str, str] = dict(headers or {})

    def __str__(self) -> str:
        return f"{self.status_code}: {self.detail}"

    def __repr__(self) -> str:
        return f"HTTPException(status_code={self.status_code!r}, detail={self.detail!r})"


class ProjectCodeError(Exception):
    """A mistake in project code that the framework detects, located at a file and line.

    `filename` is a sandbox path (`/routes/...`); `suggestions` are shown on the error page.
    """

    def __init__(
        self,
        message: str,
        filename: str | None = None,
        lineno: int | None = None,
        suggestions: Iterable[str] = (),
    ) -> None:
        super().__init__(message)
        self.msg = message
        self.filename = filename
        self.lineno = lineno
        self.suggestions = list(suggestions)


class HandlerSignatureError(ProjectCodeError, TypeError):
    """A handler whose parameters do not fit its route (a missing path parameter, ...)."""


class ResponseSerializationError(ProjectCodeError, TypeError):
    """A handler returned something that cannot be sent as JSON."""


class ResponseValidationError(ProjectCodeError, ValueError):
    """A handler returned a value that does not fit its response model (its return annotation),
    as FastAPI's `ResponseValidationError`: a 500, with `errors` (FastAPI's error items, `loc`
    starting with `"response"`) in the server's log and the `dev` error page only."""

    def __init__(
        self,
        message: str,
        errors: list[dict[str, Any]],
        filename: str | None = None,
        lineno: int | None = None,
        suggestions: Iterable[str] = (),
    ) -> None:
        super().__init__(message, filename=filename, lineno=lineno, suggestions=suggestions)
        self.errors = errors


class NoHandlerError(ProjectCodeError):
    """A route file that defines none of the handler functions."""


class RequestValidationError(Exception):
    """Path or query parameters that do not convert: answered with 422 and FastAPI's body."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)
        self.errors = errors
