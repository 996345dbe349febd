from _lib.models import Drawing


def POST(drawing: Drawing) -> Drawing:
    return drawing
