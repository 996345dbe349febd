from typing import Any

from filerouter import HTMLResponse, HTTPException, Request
from filerouter.plugins import markdown

from _lib.posts import POSTS


def GET(request: Request, slug: str) -> Any:
    """One post as HTML, rendered by the Markdown plugin."""
    source = POSTS.get(slug)
    if source is None:
        raise HTTPException(404, f"no post {slug!r}")
    return HTMLResponse(markdown.to_html(source))
