#!/usr/bin/env bash
# What an outbound HTTP call costs a request: CPU time per request and req/s of a route that
# makes one call to a local service (`from filerouter import http`: `await http.get(...)`),
# beside the same route without the call, for `filerouter run` and for FastAPI with one shared
# `httpx.AsyncClient` (one uvicorn worker, and as many workers as filerouter uses cores: nproc);
# all in one run, on this machine.
#
#   FILEROUTER_BIN=/path/to/filerouter bench/outbound.sh   # default: target/release/filerouter
#   RUNS=5 DURATION=20s bench/outbound.sh
#
# The service both sides call (the upstream) is a tiny Starlette app on uvicorn (one worker,
# port UPSTREAM_PORT) answering GET /item with a small JSON object; its CPU is not counted for
# either side (printed apart, for reference). Each side serves two endpoints: GET /plain returns
# that JSON object as a literal, GET /proxy fetches it from the upstream and returns r.json().
# filerouter's side is a project made in a temporary folder (config.py allows
# http://127.0.0.1:UPSTREAM_PORT; routes/plain/route.py, routes/proxy/route.py), built with
# `build` and served with `run`; FastAPI's creates its client in the app's lifespan. Before
# measuring, /proxy must answer 200 with the upstream's JSON on every server, or the script
# stops. Note that filerouter opens a connection per call (README: "each call opens its own
# connection") while httpx keeps its connections to the upstream alive.
#
# Every server gets the same fixed load after a warm-up (wrk -t1 -c$CONNS -d2s): wrk -t1
# -c$CONNS -d$DURATION on each endpoint, RUNS times. Before and after each load, /proc/PID/stat
# of the server and of all its descendants (the uvicorn workers) gives CPU time (utime +
# stime), divided by the requests wrk completed: CPU ms per request (the median over the runs;
# req/s, the median too, is printed beside it). "call adds" is CPU ms per request of /proxy
# minus that of /plain, for each server. On a machine with few cores the upstream competes for
# them with the server under load, so req/s of /proxy is bounded by it too; CPU per request
# is the figure to compare.
# Knobs: FILEROUTER_BIN, DURATION (10s), CONNS (32), RUNS (3: the median is printed), PORT
# (8770: the server under load), UPSTREAM_PORT (8771), RAW_OUT (a file to copy the raw rows to).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
FILEROUTER_BIN="${FILEROUTER_BIN:-$ROOT/target/release/filerouter}"
DURATION="${DURATION:-10s}"
CONNS="${CONNS:-32}"
RUNS="${RUNS:-3}"
PORT="${PORT:-8770}"
UPSTREAM_PORT="${UPSTREAM_PORT:-8771}"
CORES="$(nproc)"
ENDPOINTS="/plain /proxy"
UPSTREAM_URL="http://127.0.0.1:$UPSTREAM_PORT/item"

[ -x "$FILEROUTER_BIN" ] || { echo "no filerouter binary at $FILEROUTER_BIN (cargo build --release, or set FILEROUTER_BIN)" >&2; exit 1; }
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ ! -x bench/.venv/bin/uvicorn ]; then
  python3 -m venv bench/.venv
fi
if ! bench/.venv/bin/python -c "import fastapi, httpx, uvicorn" 2>/dev/null; then
  bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/peer/requirements.txt
fi
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
for p in "$PORT" "$UPSTREAM_PORT"; do
  if curl -s -o /dev/null "http://127.0.0.1:$p/"; then echo "port $p is already in use" >&2; exit 1; fi
done

OUT="$(mktemp -d)"
SERVER=""
UPSTREAM=""

# The process-tree helpers: tree, cpu_ticks.
source bench/proc.sh
killtree() { # pid: the process and its descendants, and waits for it
  [ -n "$1" ] || return 0
  kill $(tree "$1") 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  killtree "$SERVER"; killtree "$UPSTREAM"
  rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


# The JSON object every endpoint answers with (also a Python literal: no true, false or null).
ITEM='{"id": 42, "name": "item42", "price": 9.5, "tags": ["a", "b"], "stock": 3}'

# The upstream: the same for both sides.
cat > "$OUT/upstream.py" <<PY
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

ITEM = $ITEM

async def item(request):
    return JSONResponse(ITEM)

app = Starlette(routes=[Route("/item", item)])
PY

# FastAPI's side.
cat > "$OUT/peer_outbound.py" <<PY
import contextlib
import os

import httpx
from fastapi import FastAPI

UPSTREAM = os.environ["UPSTREAM_URL"]
ITEM = $ITEM


@contextlib.asynccontextmanager
async def lifespan(app):
    async with httpx.AsyncClient() as client:
        app.state.client = client
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/plain")
async def plain():
    return ITEM


@app.get("/proxy")
async def proxy():
    r = await app.state.client.get(UPSTREAM)
    return r.json()
PY

# filerouter's side.
PROJECT="$OUT/project"
mkdir -p "$PROJECT/routes/plain" "$PROJECT/routes/proxy" "$PROJECT/public"
cat > "$PROJECT/config.py" <<PY
app_name = "outbound-bench"
outbound = {"allow": ["http://127.0.0.1:$UPSTREAM_PORT"]}
PY
cat > "$PROJECT/routes/plain/route.py" <<PY
ITEM = $ITEM


async def GET(request):
    return ITEM
PY
cat > "$PROJECT/routes/proxy/route.py" <<PY
from filerouter import http


async def GET(request):
    r = await http.get("$UPSTREAM_URL")
    return r.json()
PY
if ! "$FILEROUTER_BIN" build --project "$PROJECT" > "$OUT/build.log" 2>&1; then
  cat "$OUT/build.log" >&2; echo "filerouter build failed" >&2; exit 1
fi

wait_for() { # url pid log
  for _ in $(seq 400); do
    curl -fs -o /dev/null "$1" && return
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  tail -n 30 "$3" >&2; echo "server did not answer $1" >&2; exit 1
}
start() { # label command... ; sets SERVER and waits for the first answer
  local label="$1"; shift
  "$@" > "$OUT/$label.log" 2>&1 &
  SERVER=$!
  wait_for "http://127.0.0.1:$PORT/plain" "$SERVER" "$OUT/$label.log"
}
stop() { killtree "$SERVER"; SERVER=""; }

# /proxy must answer 200 with the upstream's JSON.
check() { # label
  local status
  status="$(curl -s -o "$OUT/proxy.json" -w '%{http_code}' "http://127.0.0.1:$PORT/proxy")"
  if [ "$status" != 200 ] || ! python3 - "$OUT/proxy.json" "$ITEM" <<'PY'
import json, sys
sys.exit(0 if json.load(open(sys.argv[1])) == json.loads(sys.argv[2]) else 1)
PY
  then
    echo "$1: GET /proxy answered $status, not 200 with the upstream's JSON:" >&2
    cat "$OUT/proxy.json" >&2; echo >&2; tail -n 30 "$OUT/$1.log" >&2
    exit 1
  fi
}

measure() { # label command...
  local label="$1"; shift
  start "$label" "$@"
  check "$label"
  local path n rps errors t0 t1 u0 u1
  for path in $ENDPOINTS; do
    wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$PORT$path" >/dev/null
    for _ in $(seq "$RUNS"); do
      t0="$(cpu_ticks "$SERVER")"; u0="$(cpu_ticks "$UPSTREAM")"
      wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$PORT$path" > "$OUT/wrk.txt"
      t1="$(cpu_ticks "$SERVER")"; u1="$(cpu_ticks "$UPSTREAM")"
      n="$(awk '/requests in/{print $1}' "$OUT/wrk.txt")"
      rps="$(awk '/Requests\/sec/{print $2}' "$OUT/wrk.txt")"
      errors="$(awk '/Non-2xx/{n+=$NF} /Socket errors/{gsub(/,/,""); n+=$4+$6+$8+$10} END{print n+0}' "$OUT/wrk.txt")"
      echo "$label $path $n $rps $((t1 - t0)) $((u1 - u0)) $errors"
    done
  done
  check "$label"
  stop
}

"$ROOT/bench/.venv/bin/uvicorn" upstream:app --app-dir "$OUT" --port "$UPSTREAM_PORT" \
  --log-level warning --workers 1 > "$OUT/upstream.log" 2>&1 &
UPSTREAM=$!
wait_for "$UPSTREAM_URL" "$UPSTREAM" "$OUT/upstream.log"

export UPSTREAM_URL
{
  measure "filerouter-run" "$FILEROUTER_BIN" run --project "$PROJECT" --port "$PORT"
  measure "fastapi-1-worker" "$ROOT/bench/.venv/bin/uvicorn" peer_outbound:app --app-dir "$OUT" \
    --port "$PORT" --log-level warning
  measure "fastapi-$CORES-workers" "$ROOT/bench/.venv/bin/uvicorn" peer_outbound:app --app-dir "$OUT" \
    --port "$PORT" --log-level warning --workers "$CORES"
} > "$OUT/raw.txt"
cp "$OUT/raw.txt" "${RAW_OUT:-/dev/null}"

python3 - "$OUT/raw.txt" "$(getconf CLK_TCK)" "$CONNS" "$DURATION" "$RUNS" "$CORES" <<'PY'
import statistics, sys
ticks = int(sys.argv[2])
rows = {}
for line in open(sys.argv[1]):
    label, path, n, rps, cpu, upstream, errors = line.split()
    n = int(n)
    rows.setdefault(label, {}).setdefault(path, []).append(
        (float(rps), int(cpu) / ticks * 1000 / n, int(upstream) / ticks * 1000 / n, int(errors)))
med = lambda runs, i: statistics.median(r[i] for r in runs)
print(f"wrk -t1 -c{sys.argv[3]} -d{sys.argv[4]}, median of {sys.argv[5]} runs, {sys.argv[6]} cores")
print()
print("| server | endpoint | req/s | CPU ms / request | upstream CPU ms / request (not counted) | errors |")
print("|---|---|---|---|---|---|")
for label, paths in rows.items():
    for path, runs in paths.items():
        up = f"{med(runs, 2):.3f}" if path == "/proxy" else "-"
        print(f"| {label} | GET {path} | {med(runs, 0):,.0f} | {med(runs, 1):.3f} | {up} | {sum(r[3] for r in runs)} |")
print()
print("| server | call adds (CPU ms / request) | req/s /plain -> /proxy |")
print("|---|---|---|")
for label, paths in rows.items():
    plain, proxy = paths["/plain"], paths["/proxy"]
    print(f"| {label} | {med(proxy, 1) - med(plain, 1):+.3f} | {med(plain, 0):,.0f} -> {med(proxy, 0):,.0f} |")
PY
