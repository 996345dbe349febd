from _lib.models import Event


def POST(event: Event) -> Event:
    return event
