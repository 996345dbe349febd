from _lib.models import NoExtras


def POST(body: NoExtras) -> NoExtras:
    return body
