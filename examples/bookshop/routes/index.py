from _lib import store


def GET(request) -> dict:
    """The shop's name and how many books it has."""
    return {"name": "Bookshop", "books": len(store.books())}
