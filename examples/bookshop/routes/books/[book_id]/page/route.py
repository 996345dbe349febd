from filerouter import Cookie, HTMLResponse, Request

from _lib import store
from _lib.pages import templates


def GET(request: Request, book_id: int, theme: str = Cookie("light")) -> HTMLResponse:
    """The book as an HTML page, rendered with Jinja2."""
    book = store.find(book_id)
    return HTMLResponse(templates.get_template("book.html").render(book=book, theme=theme))
