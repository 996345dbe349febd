from _lib.models import Pair


def POST(pair: Pair[str, int]) -> Pair[str, int]:
    return pair
