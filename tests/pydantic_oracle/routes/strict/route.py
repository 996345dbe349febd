from typing import Any

from _lib.models import Strict


def POST(body: Strict) -> dict[str, Any]:
    return {"got": body.model_dump()}
