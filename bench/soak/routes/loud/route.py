import sys


def GET(request):
    chunk = "\x1b[31mnoise\x1b[0m " * 4096
    for _ in range(32):  # about 1.5 MB of output, capped by the host
        sys.stdout.write(chunk)
    return {"loud": True}
