from filerouter import HTMLResponse, HTTPException
from filerouter.plugins import markdown

from _lib.posts import POSTS


def GET(request, slug: str):
    """One post as HTML, rendered by the Markdown plugin."""
    source = POSTS.get(slug)
    if source is None:
        raise HTTPException(404, f"no post {slug!r}")
    return HTMLResponse(markdown.to_html(source))
