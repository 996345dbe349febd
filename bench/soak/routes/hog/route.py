def GET(request):
    data = []
    while True:  # past the 64 MiB memory cap: 500
        data.append(bytearray(1 << 20))
