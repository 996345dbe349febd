from typing import Any

from filerouter import Request


def handler(request: Request, context: Any) -> dict[str, Any]:
    """The 404 answer: JSON that lists what does exist."""
    stats = context.get_statistics()
    return {
        "detail": "Not Found",
        "path": request.path,
        "hint": f"this API has {stats['total_routes']} routes; see /docs",
    }
