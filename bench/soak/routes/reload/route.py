VERSION = 0


def GET(request):
    return {"version": VERSION}
