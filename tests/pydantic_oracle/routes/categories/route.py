from _lib.models import Category


def POST(category: Category) -> Category:
    return category
