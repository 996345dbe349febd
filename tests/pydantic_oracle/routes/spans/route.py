from _lib.models import Span


def POST(span: Span) -> Span:
    return span
