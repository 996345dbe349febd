def GET(request):
    return {"message": "hello"}
