from typing import Any

from _lib.models import Stats


def POST(stats: Stats) -> dict[str, Any]:
    return {"count": stats.count, "big": stats.big}
