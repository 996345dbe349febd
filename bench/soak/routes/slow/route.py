import time


def GET(request):
    time.sleep(5)  # past the 2 s time limit: 504
    return {"late": True}
