#!/usr/bin/env python3
"""A fixed-rate HTTP client: the latency a light tenant's users see.

    bench/paced.py URL --host NAME --rate 50 --duration 30

Sends GET URL with `Host: NAME` at RATE requests per second for DURATION seconds, open loop:
request i is due at start + i / RATE whatever happened to the others, and its latency runs from
that due time to the last byte of the answer. A slow answer therefore shows in the latency of the
requests behind it instead of slowing the client down (closed-loop tools such as wrk send fewer
requests when the server is slow and so under-report what a steady stream of users meets).
Requests go out over WORKERS persistent connections (keep-alive), request i on connection
i mod WORKERS.

Prints one line: `p50 X ms, p99 Y ms, max Z ms, N answers, E not 2xx, L late` (late: sent more
than 1 ms after its due time because its connection was still busy).
"""

import argparse
import http.client
import threading
import time
import urllib.parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("--host", required=True, help="the Host header")
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds")
    parser.add_argument("--workers", type=int, default=8, help="connections")
    args = parser.parse_args()

    url = urllib.parse.urlsplit(args.url)
    target = url.path or "/"
    if url.query:
        target += "?" + url.query
    total = int(args.rate * args.duration)
    latencies: list[float] = []
    failures = [0, 0]  # not 2xx, late
    lock = threading.Lock()
    start = time.perf_counter() + 0.2

    def worker(first: int) -> None:
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
        for i in range(first, total, args.workers):
            due = start + i / args.rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            late = time.perf_counter() - due > 0.001
            try:
                conn.request("GET", target, headers={"Host": args.host})
                response = conn.getresponse()
                response.read()
                ok = 200 <= response.status < 300
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
                ok = False
            elapsed = time.perf_counter() - due
            with lock:
                latencies.append(elapsed)
                failures[0] += not ok
                failures[1] += late
        conn.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    latencies.sort()

    def percentile(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000

    print(
        f"p50 {percentile(50):.2f} ms, p99 {percentile(99):.2f} ms, max {latencies[-1] * 1000:.2f} ms,"
        f" {len(latencies)} answers, {failures[0]} not 2xx, {failures[1]} late"
    )


if __name__ == "__main__":
    main()
