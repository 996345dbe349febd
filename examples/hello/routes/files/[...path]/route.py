"""GET /files/{path} — a catch-all segment: the handler gets a list of segments."""


async def GET(request, path: list):
    """Split a file path into its segments.

    :param path: One or more segments, `/files/a/b/c` gives `["a", "b", "c"]`.
    """
    return {"segments": path}
