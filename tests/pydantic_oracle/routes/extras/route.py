from typing import Any

from _lib.models import KeepsExtras


def POST(body: KeepsExtras) -> Any:
    return body
