def GET(request):
    raise RuntimeError("a bug in a handler")  # 500
