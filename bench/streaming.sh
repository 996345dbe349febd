#!/usr/bin/env bash
# What a Server-Sent Events stream costs: time to first byte, events per second and CPU per event
# of one SSE stream, for `filerouter run` and for FastAPI 0.135+ (`fastapi.sse`) on uvicorn
# (one worker), in one run, on this machine.
#
#   FILEROUTER_BIN=/path/to/filerouter bench/streaming.sh   # default: target/release/filerouter
#   RUNS=5 EVENTS=50000 bench/streaming.sh
#
# Both sides serve the same two routes, as each framework writes them:
#   GET /sse?n=N    a `yield`ing path operation with response_class=EventSourceResponse that
#                   yields N small dicts ({"i": i, "text": "token"}) as fast as it can;
#   GET /first      the same with n=1: the first (and only) event as soon as the stream starts.
# filerouter's side is a project made in a temporary folder, built with `build` and served with
# `run --workers 2`; FastAPI's is one file on `uvicorn --workers 1` from tests/.venv (FastAPI
# 0.165, what the tests pin). The client is Python's http.client reading the chunked body
# (bench/streaming_client.py is written here, in the temporary folder), on the same machine.
#
# Figures, each the median of RUNS:
#   ttfb     ms from sending GET /first to the first byte of the body (21 requests per run);
#   events/s EVENTS events of GET /sse read to the end, divided by the seconds it took;
#   CPU/event  the server's CPU time (utime + stime of it and its descendants, /proc/PID/stat)
#            during that stream, in microseconds per event.
# Knobs: FILEROUTER_BIN, EVENTS (20000), RUNS (3), PORT (8772), PYTHON (tests/.venv/bin/python).
# Run it on a quiet machine: the figures are per-core CPU and wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
FILEROUTER_BIN="${FILEROUTER_BIN:-$ROOT/target/release/filerouter}"
EVENTS="${EVENTS:-20000}"
RUNS="${RUNS:-3}"
PORT="${PORT:-8772}"
PYTHON="${PYTHON:-$ROOT/tests/.venv/bin/python}"

[ -x "$FILEROUTER_BIN" ] || { echo "no filerouter binary at $FILEROUTER_BIN (cargo build --release, or set FILEROUTER_BIN)" >&2; exit 1; }
"$PYTHON" -c "import fastapi.sse, uvicorn" 2>/dev/null || {
  echo "$PYTHON has no fastapi.sse or uvicorn: make tests/.venv (tests/.venv/filerouter-requirements.txt)" >&2; exit 1; }
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
if curl -s -o /dev/null "http://127.0.0.1:$PORT/"; then echo "port $PORT is already in use" >&2; exit 1; fi

OUT="$(mktemp -d)"
SERVER=""
source bench/proc.sh
killtree() { [ -n "$1" ] || return 0; kill $(tree "$1") 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
cleanup() { killtree "$SERVER"; rm -rf "$OUT"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# FastAPI's side.
cat > "$OUT/peer_sse.py" <<'PY'
from fastapi import FastAPI
from fastapi.sse import EventSourceResponse

app = FastAPI()


@app.get("/sse", response_class=EventSourceResponse)
async def sse(n: int = 1000):
    for i in range(n):
        yield {"i": i, "text": "token"}


@app.get("/first", response_class=EventSourceResponse)
async def first():
    yield {"i": 0, "text": "token"}
PY

# filerouter's side.
PROJECT="$OUT/project"
mkdir -p "$PROJECT/routes/sse" "$PROJECT/routes/first" "$PROJECT/public"
cat > "$PROJECT/config.py" <<'PY'
app_name = "streaming-bench"
PY
cat > "$PROJECT/routes/sse/route.py" <<'PY'
from filerouter import route
from filerouter.sse import EventSourceResponse


@route(response_class=EventSourceResponse)
async def GET(request, n: int = 1000):
    for i in range(n):
        yield {"i": i, "text": "token"}
PY
cat > "$PROJECT/routes/first/route.py" <<'PY'
from filerouter import route
from filerouter.sse import EventSourceResponse


@route(response_class=EventSourceResponse)
async def GET(request):
    yield {"i": 0, "text": "token"}
PY
if ! "$FILEROUTER_BIN" build --project "$PROJECT" > "$OUT/build.log" 2>&1; then
  cat "$OUT/build.log" >&2; echo "filerouter build failed" >&2; exit 1
fi

# The client: `ttfb PORT COUNT` prints the median ms to the first body byte of GET /first;
# `stream PORT N` reads GET /sse?n=N to its end and prints "seconds events".
cat > "$OUT/client.py" <<'PY'
import http.client, statistics, sys, time

def ttfb(port, count):
    times = []
    for _ in range(count):
        conn = http.client.HTTPConnection("127.0.0.1", port)
        start = time.perf_counter()
        conn.request("GET", "/first")
        response = conn.getresponse()
        response.read(1)
        times.append((time.perf_counter() - start) * 1000)
        response.read()
        conn.close()
    print(f"{statistics.median(times):.2f}")

def stream(port, n):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    start = time.perf_counter()
    conn.request("GET", f"/sse?n={n}")
    response = conn.getresponse()
    body = response.read()
    took = time.perf_counter() - start
    events = body.count(b"\n\n")
    if response.status != 200 or events != n:
        sys.exit(f"GET /sse?n={n}: status {response.status}, {events} events")
    print(f"{took:.4f} {events}")

{"ttfb": ttfb, "stream": stream}[sys.argv[1]](int(sys.argv[2]), int(sys.argv[3]))
PY

wait_for() { # url pid log
  for _ in $(seq 400); do
    curl -fs -o /dev/null "$1" && return
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  tail -n 30 "$3" >&2; echo "server did not answer $1" >&2; exit 1
}

TICKS="$(getconf CLK_TCK)"
measure() { # label command...
  local label="$1"; shift
  "$@" > "$OUT/$label.log" 2>&1 &
  SERVER=$!
  wait_for "http://127.0.0.1:$PORT/first" "$SERVER" "$OUT/$label.log"
  "$PYTHON" "$OUT/client.py" stream "$PORT" 2000 > /dev/null   # warm-up
  local ttfbs="" rates="" cpus="" t0 t1 line took events
  for _ in $(seq "$RUNS"); do
    ttfbs="$ttfbs $("$PYTHON" "$OUT/client.py" ttfb "$PORT" 21)"
    t0="$(cpu_ticks "$SERVER")"
    line="$("$PYTHON" "$OUT/client.py" stream "$PORT" "$EVENTS")"
    t1="$(cpu_ticks "$SERVER")"
    read -r took events <<< "$line"
    rates="$rates $(awk -v e="$events" -v t="$took" 'BEGIN{printf "%.0f", e/t}')"
    cpus="$cpus $(awk -v d="$((t1 - t0))" -v k="$TICKS" -v e="$events" 'BEGIN{printf "%.1f", d/k*1e6/e}')"
  done
  killtree "$SERVER"; SERVER=""
  median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
  printf "%-22s %10s %12s %14s\n" "$label" "$(echo "$ttfbs" | median)" "$(echo "$rates" | median)" "$(echo "$cpus" | median)"
}

printf "%-22s %10s %12s %14s\n" "server" "ttfb ms" "events/s" "CPU us/event"
measure "filerouter run" "$FILEROUTER_BIN" run --project "$PROJECT" --port "$PORT" --workers 2
measure "fastapi+uvicorn" "$PYTHON" -m uvicorn --app-dir "$OUT" peer_sse:app --port "$PORT" --workers 1 --log-level warning
