#!/usr/bin/env bash
# How cost grows with the work (issue 46, point 4): for `filerouter run` of this checkout,
# FastAPI on one uvicorn worker, and a previous filerouter binary when FILEROUTER_BASE names
# one, all in one run:
#
# - routes: projects of 10, 100 and 1,000 route files (`routes/rI/[id]/route.py`, each
#   `GET(request, id: int)`; FastAPI: as many `@app.get("/rI/{id}")`): `filerouter build`'s
#   wall and CPU time, `run`'s start-up (from exec to the first answer of GET /r0/1, and the
#   CPU it took), the CPU per request of GET /r0/42 and of the last route, under a fixed load;
# - bodies: POST /echo with a body of 1 KiB, 100 KiB and 10 MiB (the route reads it with
#   `await request.body()` and answers its length): CPU per request and req/s.
#
# The third axis, SQL statements per request (1, 10, 100), is bench/statements.sh.
#
#   flock /work/bench.lock bench/growth.sh
#   FILEROUTER_BASE=/path/to/old/filerouter ROUTES="10 100" bench/growth.sh
#
# CPU is utime + stime of the server's process tree (bench/proc.sh) around wrk -t1
# -c$CONNS -d$DURATION, over the requests completed, median of RUNS. Knobs: DURATION (5s),
# CONNS (8), RUNS (3), ROUTES ("10 100 1000"), BODIES ("1024 102400 10485760"),
# FILEROUTER_BIN, FILEROUTER_BASE, PEERS=0 (leave FastAPI out).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DURATION="${DURATION:-5s}"
CONNS="${CONNS:-8}"
RUNS="${RUNS:-3}"
ROUTES="${ROUTES:-10 100 1000}"
BODIES="${BODIES:-1024 102400 10485760}"
PORT=8775
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ "${PEERS:-1}" != 0 ] && [ ! -x bench/.venv/bin/uvicorn ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/peer/requirements.txt
fi
if [ -n "${FILEROUTER_BIN:-}" ]; then
  BIN="$(realpath "$FILEROUTER_BIN")"
else
  cargo build --release --quiet
  BIN="$ROOT/target/release/filerouter"
fi
BINS=("filerouter:$BIN")
[ -n "${FILEROUTER_BASE:-}" ] && BINS+=("filerouter-base:$(realpath "$FILEROUTER_BASE")")
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
OUT="$(mktemp -d)"
SERVER=""
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$OUT"; }
trap cleanup EXIT
source bench/proc.sh
HZ="$(getconf CLK_TCK)"

# project DIR N: N routes, the echo route, and a body limit above the largest body.
project() {
  mkdir -p "$1/routes/echo"
  printf 'sandbox = {"max_body_bytes": 16 * 1024 * 1024}\n' > "$1/config.py"
  for i in $(seq 0 $(($2 - 1))); do
    mkdir -p "$1/routes/r$i/[id]"
    printf 'def GET(request, id: int):\n    return {"route": %d, "id": id}\n' "$i" \
      > "$1/routes/r$i/[id]/route.py"
  done
  cat > "$1/routes/echo/route.py" <<'PY'
async def POST(request):
    body = await request.body()
    return {"bytes": len(body)}
PY
}

# peer DIR N: the same API in FastAPI.
peer() {
  mkdir -p "$1"
  {
    echo 'from fastapi import FastAPI, Request'
    echo 'app = FastAPI()'
    for i in $(seq 0 $(($2 - 1))); do
      printf '@app.get("/r%d/{id}")\ndef r%d(id: int):\n    return {"route": %d, "id": id}\n' "$i" "$i" "$i"
    done
    printf '@app.post("/echo")\nasync def echo(request: Request):\n    body = await request.body()\n    return {"bytes": len(body)}\n'
  } > "$1/app.py"
}

# start URL COMMAND...: SERVER is the pid; UP the milliseconds from exec to the first answer
# of URL, UP_CPU the CPU milliseconds the server used by then.
start() {
  local url="$1"; shift
  local t0 t1
  if curl -fs -o /dev/null "$url"; then
    echo "something already answers on port $PORT" >&2; exit 1
  fi
  t0="$(date +%s%N)"
  "$@" >"$OUT/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 6000); do
    kill -0 "$SERVER" 2>/dev/null || { echo "server exited: $*" >&2; cat "$OUT/server.log" >&2; exit 1; }
    if curl -fs -o /dev/null "$url"; then
      t1="$(date +%s%N)"
      UP="$(( (t1 - t0) / 1000000 ))"
      UP_CPU="$(( $(cpu_ticks "$SERVER") * 1000 / HZ ))"
      return
    fi
    sleep 0.01
  done
  echo "server did not start: $*" >&2; cat "$OUT/server.log" >&2; exit 1
}
stop() { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

# load PATH [LUA]: CPU (µs per request) and RATE (req/s), medians of RUNS.
load() {
  local url="http://127.0.0.1:$PORT$1" script=() cpus=() rates=() t0 t1 done
  [ -n "${2:-}" ] && script=(-s "$2")
  wrk -t1 -c"$CONNS" -d1s "${script[@]}" "$url" >/dev/null
  for _ in $(seq "$RUNS"); do
    t0="$(cpu_ticks "$SERVER")"
    wrk -t1 -c"$CONNS" -d"$DURATION" "${script[@]}" "$url" > "$OUT/wrk.txt"
    t1="$(cpu_ticks "$SERVER")"
    done="$(awk '/requests in/{print $1}' "$OUT/wrk.txt")"
    if grep -q "Non-2xx" "$OUT/wrk.txt"; then
      echo "non-2xx answers on $1:" >&2; cat "$OUT/wrk.txt" "$OUT/server.log" >&2; exit 1
    fi
    cpus+=("$(( (t1 - t0) * 1000000 / HZ / done ))")
    rates+=("$(awk '/Requests\/sec/{print $2}' "$OUT/wrk.txt")")
  done
  CPU="$(printf '%s\n' "${cpus[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')"
  RATE="$(printf '%s\n' "${rates[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')"
}

echo "| server | routes | build s (wall / CPU) | start-up ms (wall / CPU) | CPU µs/req GET /r0/42 | CPU µs/req GET last route | req/s /r0/42 |"
echo "|---|---|---|---|---|---|---|"
for n in $ROUTES; do
  for entry in "${BINS[@]}"; do
    label="${entry%%:*}" bin="${entry#*:}"
    dir="$OUT/$label-$n"
    project "$dir" "$n"
    /usr/bin/time -f "%e %U %S" -o "$OUT/build.time" "$bin" build --project "$dir" >/dev/null 2>&1
    read -r bwall buser bsys < "$OUT/build.time"
    start "http://127.0.0.1:$PORT/r0/1" \
      "$bin" run --project "$dir" --port "$PORT" --data-dir "$OUT/data" --no-access-log
    load /r0/42; first="$CPU" rate="$RATE"
    load "/r$((n - 1))/42"; last="$CPU"
    stop
    echo "| $label | $n | $bwall / $(echo "$buser + $bsys" | bc) | $UP / $UP_CPU | $first | $last | $rate |"
  done
  if [ "${PEERS:-1}" != 0 ]; then
    peer "$OUT/peer-$n" "$n"
    start "http://127.0.0.1:$PORT/r0/1" \
      "$ROOT/bench/.venv/bin/uvicorn" app:app --app-dir "$OUT/peer-$n" --port "$PORT" --log-level warning
    load /r0/42; first="$CPU" rate="$RATE"
    load "/r$((n - 1))/42"; last="$CPU"
    stop
    echo "| fastapi-1-worker | $n | - | $UP / $UP_CPU | $first | $last | $rate |"
  fi
done

echo
echo "| server | body bytes | CPU µs/req POST /echo | req/s |"
echo "|---|---|---|---|"
first_n="${ROUTES%% *}"
for bytes in $BODIES; do
  lua="$OUT/body-$bytes.lua"
  printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/octet-stream"\nwrk.body = string.rep("a", %d)\n' "$bytes" > "$lua"
  for entry in "${BINS[@]}"; do
    label="${entry%%:*}" bin="${entry#*:}"
    start "http://127.0.0.1:$PORT/r0/1" \
      "$bin" run --project "$OUT/$label-$first_n" --port "$PORT" --data-dir "$OUT/data" --no-access-log
    load /echo "$lua"
    stop
    echo "| $label | $bytes | $CPU | $RATE |"
  done
  if [ "${PEERS:-1}" != 0 ]; then
    start "http://127.0.0.1:$PORT/r0/1" \
      "$ROOT/bench/.venv/bin/uvicorn" app:app --app-dir "$OUT/peer-$first_n" --port "$PORT" --log-level warning
    load /echo "$lua"
    stop
    echo "| fastapi-1-worker | $bytes | $CPU | $RATE |"
  fi
done
