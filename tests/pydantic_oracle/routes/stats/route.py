from _lib.models import Stats


def POST(stats: Stats) -> Stats:
    return stats
