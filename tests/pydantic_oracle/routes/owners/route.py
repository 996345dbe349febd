from _lib.models import Owner


def POST(owner: Owner) -> Owner:
    return owner
