def GET(request):
    """Who you are, as the middleware's token check found you."""
    return {"hello": request.state.user}
