def GET(request):
    """Liveness check (public: no token needed)."""
    return {"status": "ok"}
