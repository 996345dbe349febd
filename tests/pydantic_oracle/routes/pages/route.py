from _lib.models import Item, Page, Tag


def GET(size: int = 2) -> Page[Item]:
    items = [{"name": f"item {n}", "price": n + 0.5} for n in range(size)]
    return Page[Item](items=items, total=size, next_page=None if size < 3 else 2)


def POST(page: Page[Tag]) -> Page[Tag]:
    return page
