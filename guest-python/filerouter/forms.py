"""Form bodies: `application/x-www-form-urlencoded` and `multipart/form-data`, as Starlette reads
them for FastAPI's `await request.form()`, `Form()` and `UploadFile`.

The whole body is already in memory (the host read it, within `sandbox.max_body_bytes`), so
parsing never waits for the network; the number of fields and files is bounded like
Starlette's (1,000 each). A malformed multipart body is a 400. Not for: validating field
values (see `params` and `validation`).
"""

from __future__ import annotations

import io
from email.message import Message
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from .exceptions import HTTPException
from .multidict import MultiDict

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

MAX_FIELDS = 1000
MAX_FILES = 1000


class UploadFile:
    """An uploaded file: `filename`, `content_type`, `headers`, `size`, and its bytes through
    `await read()` (or the file object `file`)."""

    __filerouter_upload__ = True

    def __init__(
        self,
        file: io.BytesIO,
        *,
        size: int | None = None,
        filename: str | None = None,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
    ) -> None:
        self.file = file
        self.size = size
        self.filename = filename
        self.headers: Mapping[str, str] = headers or {}
        self.content_type = content_type

    async def read(self, size: int = -1) -> bytes:
        return self.file.read(size)

    async def seek(self, offset: int) -> None:
        self.file.seek(offset)

    async def write(self, data: bytes) -> None:
        self.file.write(data)

    async def close(self) -> None:
        self.file.close()

    def __repr__(self) -> str:
        return f"UploadFile(filename={self.filename!r}, size={self.size!r}, content_type={self.content_type!r})"


class FormData(MultiDict["str | UploadFile"]):
    """The fields of a form as a multi-dict: `get(name)` gives the last value, `getlist` all.
    Values are `str`, or `UploadFile` for files."""

    async def close(self) -> None:
        for _, value in self._items:
            if isinstance(value, UploadFile):
                await value.close()


def _header_params(value: str) -> Message:
    message = Message()
    message["content-type"] = value
    return message


def parse(content_type: str | None, body: bytes) -> FormData:
    """The `FormData` of a request body; empty for a body that is not a form."""
    message = _header_params(content_type or "")
    kind = message.get_content_type()
    if kind == "application/x-www-form-urlencoded":
        text = body.decode("latin-1")
        try:
            items = parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS, encoding="utf-8")
        except ValueError:
            raise HTTPException(400, f"Too many fields. Maximum number of fields is {MAX_FIELDS}.") from None
        return FormData(items)
    if kind == "multipart/form-data":
        # A str (an RFC 2231 tuple has no `encode` and fails below).
        boundary: Any = message.get_param("boundary")
        if not boundary:
            raise HTTPException(400, "There was an error parsing the body")
        return FormData(_multipart(body, boundary.encode("latin-1")))
    return FormData()


def _disposition(value: str) -> dict[str, str]:
    message = Message()
    message["content-disposition"] = value
    params: dict[str, str] = {}
    for key, val in message.get_params(header="content-disposition", failobj=[])[1:]:
        if isinstance(val, tuple):  # RFC 2231 `filename*=utf-8''...`
            val = bytes(val[2], "latin-1").decode(val[0] or "utf-8", "replace")
        params[key.lower()] = val
    return params


def _multipart(body: bytes, boundary: bytes) -> Iterator[tuple[str, str | UploadFile]]:
    delimiter = b"--" + boundary
    start = body.find(delimiter)
    if start < 0:
        raise HTTPException(400, "There was an error parsing the body")
    chunks = body[start + len(delimiter):].split(b"\r\n" + delimiter)
    fields = files = 0
    for chunk in chunks:
        if chunk.startswith(b"--"):
            return
        if not chunk.startswith(b"\r\n"):
            raise HTTPException(400, "There was an error parsing the body")
        head, sep, data = chunk[2:].partition(b"\r\n\r\n")
        if not sep:
            raise HTTPException(400, "There was an error parsing the body")
        headers: dict[str, str] = {}
        for line in head.split(b"\r\n"):
            key, colon, value = line.partition(b":")
            if colon:
                headers[key.strip().decode("latin-1").lower()] = value.strip().decode("latin-1")
        disposition = _disposition(headers.get("content-disposition", ""))
        name = disposition.get("name")
        if name is None:
            raise HTTPException(400, 'The Content-Disposition header field "name" must be provided.')
        if "filename" in disposition:
            files += 1
            if files > MAX_FILES:
                raise HTTPException(400, f"Too many files. Maximum number of files is {MAX_FILES}.")
            yield name, UploadFile(
                io.BytesIO(data),
                size=len(data),
                filename=disposition["filename"],
                headers=headers,
                content_type=headers.get("content-type"),
            )
        else:
            fields += 1
            if fields > MAX_FIELDS:
                raise HTTPException(400, f"Too many fields. Maximum number of fields is {MAX_FIELDS}.")
            yield name, data.decode("utf-8", "replace")
    raise HTTPException(400, "There was an error parsing the body")
