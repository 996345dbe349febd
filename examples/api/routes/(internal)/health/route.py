from typing import Any

from filerouter import Request


def GET(request: Request) -> Any:
    """Liveness check (public: no token needed)."""
    return {"status": "ok"}
