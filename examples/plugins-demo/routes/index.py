from typing import Any

from filerouter import Request
from filerouter.plugins import markdown, textkit

from _lib.posts import POSTS


def GET(request: Request) -> Any:
    """Every post, with its slug (C) and outline (Python)."""
    out: list[dict[str, Any]] = []
    for key, source in POSTS.items():
        outline = markdown.outline(source)
        out.append(
            {
                "post": key,
                "title": outline[0]["text"],
                "slug": textkit.slugify(outline[0]["text"]),
                "outline": outline,
                "words": textkit.count(source)["words"],
            }
        )
    return out
