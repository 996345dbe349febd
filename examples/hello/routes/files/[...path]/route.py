"""GET /files/{path} — a catch-all segment: the handler gets a list of segments."""

from typing import Any

from filerouter import Request


async def GET(request: Request, path: list[str]) -> Any:
    """Split a file path into its segments.

    :param path: One or more segments, `/files/a/b/c` gives `["a", "b", "c"]`.
    """
    return {"segments": path}
