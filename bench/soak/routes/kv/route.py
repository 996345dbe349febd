from filerouter import kv


def POST(request):
    n = kv.incr("soak:count")
    kv.set(f"soak:recent:{n % 100}", {"n": n}, ttl=30)
    return {"n": n}
