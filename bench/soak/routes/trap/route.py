import os


def GET(request):
    os.abort()  # the guest runtime stops: 500
