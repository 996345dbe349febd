"""The soak client of bench/soak.sh: load with faults, every request counted.

Usage: soak.py URL PID DURATION_S [CAPACITY_S]

1. Capacity: for CAPACITY_S seconds (default 20), 16 connections send the request mix as fast
   as they are answered; the answers per second are the capacity.
2. Soak: for DURATION_S seconds, requests start at 80 % of that rate on a fixed schedule (open
   loop: a slow answer does not slow the schedule), each on a pooled keep-alive connection or,
   for malformed ones, a fresh one. Every request ends as `ok` (answered with the status its
   kind must get), `wrong` (answered with another status) or `lost` (no answer within 30 s,
   or the connection failed).
3. Meanwhile the server's RSS is sampled every 5 s, and a route file is rewritten every 2 s
   (hot reload in `dev`).

Prints one JSON object with the counts per kind, the rates and the RSS series; exits 1 if
any request was lost or wrong, or RSS from minute 2 on varies by more than 20 %.
"""

import asyncio
import json
import os
import random
import sys
import time

# kind -> (weight, method, path, raw request or None, expected statuses)
MIX = {
    "ok": (50, "GET", "/ok", None, {200}),
    "kv": (10, "POST", "/kv", None, {200}),
    "reload": (8, "GET", "/reload", None, {200}),
    "loud": (4, "GET", "/loud", None, {200}),
    "raise": (4, "GET", "/raise", None, {500}),
    "trap": (3, "GET", "/trap", None, {500}),
    "hog": (3, "GET", "/hog", None, {500}),
    "slow": (2, "GET", "/slow", None, {504}),
    "missing": (4, "GET", "/nothing/here", None, {404}),
    "too_large": (2, "POST", "/kv", "big", {413}),
    "garbage": (3, None, None, b"GARBAGE \x00\x01\r\n\r\n", {400}),
    "two_hosts": (2, None, None, b"GET /ok HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", {400}),
    "no_host": (2, None, None, b"GET /ok HTTP/1.1\r\n\r\n", {400}),
    "bad_coding": (2, None, None,
                   b"POST /kv HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
                   {501}),
    "surrogate": (1, "POST", "/echo", "surrogate", {400}),
}
KINDS = list(MIX)
WEIGHTS = [MIX[k][0] for k in KINDS]
ANSWER_TIMEOUT = 30.0


def request_bytes(kind, host):
    _, method, path, raw, _ = MIX[kind]
    if method is None:
        return raw, True
    body = b""
    if raw == "big":
        body = b"x" * 70000
    elif raw == "surrogate":
        body = b'{"v": "a\\udc80b"}'
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
    if body:
        head += "Content-Type: application/json\r\n"
    return head.encode() + b"\r\n" + body, raw == "big"


async def read_response(reader):
    """The status of one response, its body read and dropped; keep-alive is kept."""
    line = await reader.readline()
    if not line:
        raise ConnectionError("closed")
    status = int(line.split()[1])
    length = None
    chunked = False
    close = False
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value.strip())
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
        elif name == "connection" and "close" in value.lower():
            close = True
    if chunked:
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif length:
        await reader.readexactly(length)
    return status, close


# The server closes a keep-alive connection after `header_timeout_s` (5 s in bench/soak/)
# without a request; like any HTTP client, the pool drops connections idle for longer than
# this, and retries once on a fresh connection when a reused one was closed before any byte
# of the answer came (RFC 9112, section 9.3.1). Such retries are counted.
IDLE_LIMIT = 4.0


class Pool:
    """Keep-alive connections to the server, reused one request at a time."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.idle = []
        self.retries = 0

    async def send(self, data, fresh):
        conn = None
        while not fresh and self.idle:
            reader, writer, since = self.idle.pop()
            if time.monotonic() - since < IDLE_LIMIT:
                conn = (reader, writer)
                break
            writer.close()
        reused = conn is not None
        if conn is None:
            conn = await asyncio.open_connection(self.host, self.port)
        reader, writer = conn
        try:
            writer.write(data)
            await writer.drain()
            status, close = await read_response(reader)
        except (ConnectionError, OSError) as exc:
            writer.close()
            closed_before_answer = isinstance(exc, ConnectionResetError) or str(exc) == "closed"
            if reused and closed_before_answer:
                self.retries += 1
                return await self.send(data, True)
            raise
        except BaseException:
            writer.close()
            raise
        if fresh or close:
            writer.close()
        else:
            self.idle.append((reader, writer, time.monotonic()))
        return status


async def one(pool, kind, host, counts):
    data, fresh = request_bytes(kind, host)
    entry = counts.setdefault(kind, {"ok": 0, "wrong": 0, "lost": 0, "statuses": {}})
    try:
        status = await asyncio.wait_for(pool.send(data, fresh), ANSWER_TIMEOUT)
    except (asyncio.TimeoutError, OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError):
        entry["lost"] += 1
        return
    entry["statuses"][str(status)] = entry["statuses"].get(str(status), 0) + 1
    entry["ok" if status in MIX[kind][4] else "wrong"] += 1


async def capacity(pool, host, seconds):
    counts = {}
    done = 0
    end = time.monotonic() + seconds

    async def worker():
        nonlocal done
        while time.monotonic() < end:
            await one(pool, random.choices(KINDS, WEIGHTS)[0], host, counts)
            done += 1

    await asyncio.gather(*(worker() for _ in range(16)))
    return done / seconds, counts


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def reloader(route_file, end):
    n = 0
    while time.monotonic() < end:
        await asyncio.sleep(2)
        n += 1
        tmp = route_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"VERSION = {n}\n\n\ndef GET(request):\n    return {{'version': VERSION}}\n")
        os.replace(tmp, route_file)
    return n


async def main():
    url, pid, duration = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    capacity_s = float(sys.argv[4]) if len(sys.argv) > 4 else 20.0
    route_file = os.environ.get("SOAK_RELOAD_FILE")
    host, port = url.removeprefix("http://").split(":")
    port = int(port)
    pool = Pool(host, port)
    hostname = f"{host}:{port}"

    rate_max, _ = await capacity(pool, hostname, capacity_s)
    rate = 0.8 * rate_max
    print(f"capacity {rate_max:.0f} req/s; soaking at {rate:.0f} req/s for {duration:.0f} s", file=sys.stderr)

    counts = {}
    rss = []
    start = time.monotonic()
    end = start + duration
    tasks = set()

    async def sampler():
        while time.monotonic() < end:
            rss.append((round(time.monotonic() - start), rss_kib(pid)))
            await asyncio.sleep(5)

    side = [asyncio.create_task(sampler())]
    if route_file:
        side.append(asyncio.create_task(reloader(route_file, end)))
    sent = 0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = int((now - start) * rate)
        while sent < due:
            task = asyncio.create_task(one(pool, random.choices(KINDS, WEIGHTS)[0], hostname, counts))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            sent += 1
        await asyncio.sleep(0.005)
    if tasks:
        await asyncio.wait(tasks, timeout=ANSWER_TIMEOUT + 5)
    reloads = 0
    for task in side:
        result = await task
        if isinstance(result, int):
            reloads = result
    cpu = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    server_cpu_s = (int(cpu[11]) + int(cpu[12])) / ticks

    total = {k: sum(c[k] for c in counts.values()) for k in ("ok", "wrong", "lost")}
    late = [kib for t, kib in rss if t >= 120]
    spread = (max(late) - min(late)) / min(late) if late else 0.0
    report = {
        "capacity_rps": round(rate_max, 1),
        "target_rps": round(rate, 1),
        "achieved_rps": round(sum(total.values()) / duration, 1),
        "duration_s": duration,
        "requests": sum(total.values()),
        **total,
        "hot_reloads": reloads,
        "retried_on_closed_keepalive": pool.retries,
        "server_cpu_s_total": round(server_cpu_s, 1),
        "rss_mib_min2_to_end": [round(min(late) / 1024, 1), round(max(late) / 1024, 1)] if late else None,
        "rss_spread_from_min2": round(spread, 3),
        "rss_mib_series": [(t, round(k / 1024, 1)) for t, k in rss],
        "per_kind": counts,
    }
    print(json.dumps(report, indent=1))
    bad = total["lost"] or total["wrong"] or spread > 0.20
    sys.exit(1 if bad else 0)


asyncio.run(main())
