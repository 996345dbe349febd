from typing import Any

from filerouter import Request
from filerouter.plugins import textkit


def GET(request: Request, title: str) -> Any:
    """The URL slug and counts of `title`, from the C plugin."""
    return {"slug": textkit.slugify(title), **textkit.count(title)}
