from _lib.models import Point


def POST(points: list[Point]) -> list[Point]:
    return points
