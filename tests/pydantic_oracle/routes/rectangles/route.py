from _lib.models import Rectangle


def POST(rectangle: Rectangle) -> Rectangle:
    return rectangle
