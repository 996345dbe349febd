from filerouter.plugins import textkit


def GET(request, title: str):
    """The URL slug and counts of `title`, from the C plugin."""
    return {"slug": textkit.slugify(title), **textkit.count(title)}
