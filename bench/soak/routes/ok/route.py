def GET(request):
    return {"ok": True}
