import time


def GET(request):
    time.sleep(5)  # past the 1 s time limit: 504
    return {"late": True}
