"""Middleware for the example API: every request passes through `middleware` below.

It shows the uses SPEC.md names: request logging, a bearer-token check, per-IP rate limiting
(state across requests lives in `filerouter.kv`), an added response header, and request
validation.
"""

import time
from collections.abc import Awaitable, Callable

from filerouter import JSONResponse, Request, Response, kv

TOKEN = "secret-token"
RATE_LIMIT = 100  # requests per client IP per minute
PUBLIC_PREFIXES = ("/health", "/docs", "/openapi.json", "/logo.svg")


async def middleware(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    started = time.monotonic()

    # Per-IP rate limiting: a counter per client and minute, shared by every request.
    window = int(time.time() // 60)
    count = kv.incr(f"rate:{request.client}:{window}", ttl=60)
    if count > RATE_LIMIT:
        return JSONResponse({"detail": "Too Many Requests"}, status_code=429, headers={"Retry-After": "60"})

    # Request validation: bodies must be JSON.
    if request.method in ("POST", "PUT", "PATCH"):
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith("application/json"):
            return JSONResponse({"detail": "Send JSON (content-type: application/json)"}, status_code=415)

    # Bearer-token check, except for public paths.
    if not request.path.startswith(PUBLIC_PREFIXES):
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse(
                {"detail": "Not authenticated"}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
            )
        request.state.user = "demo"

    response = await call_next(request)

    # An added response header, and a log line.
    elapsed_ms = (time.monotonic() - started) * 1000
    response.headers["X-Process-Time-Ms"] = f"{elapsed_ms:.2f}"
    response.headers["X-RateLimit-Remaining"] = str(max(0, RATE_LIMIT - count))
    print(f"{request.method} {request.path} -> {response.status_code} ({elapsed_ms:.1f} ms)")
    return response
