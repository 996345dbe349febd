async def POST(request):
    return await request.json()  # a lone surrogate in the JSON: 400
