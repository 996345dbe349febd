#!/usr/bin/env bash
# CPU per request of two filerouter binaries, alternated: on a shared machine whose load moves
# by the minute, servers measured one after the other (bench/cpu.sh) differ by the load as much
# as by the code; here each round runs every server once, the order reversed every other round.
#
#   bench/cpu_pair.sh NEW_BIN OLD_BIN               # examples/hello, GET /users/42
#   ROUNDS=6 FASTAPI=1 bench/cpu_pair.sh NEW OLD    # ... and FastAPI (bench/peer) in each round
#
# Each binary builds its own copy of the project first. Per round and server: start it, 2 s of
# warm-up load, then wrk -t1 -c$CONNS for DURATION; CPU is utime + stime of the server's
# process tree (/proc/PID/stat) over that load, divided by the requests wrk completed. Then one
# connection (wrk -t1 -c1 --latency, DURATION) gives p50. Prints a line per server and round
# and the mean of the rounds.
# Knobs: ROUNDS (4), DURATION (5s), CONNS (32), PROJECT (examples/hello), ENDPOINT (/users/42),
# FASTAPI (0; 1 adds FastAPI, one uvicorn worker, on bench/peer's same endpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
NEW="$(realpath "$1")"
OLD="$(realpath "$2")"
ROUNDS="${ROUNDS:-4}"
DURATION="${DURATION:-5s}"
CONNS="${CONNS:-32}"
PROJECT="${PROJECT:-examples/hello}"
ENDPOINT="${ENDPOINT:-/users/42}"
PORT=8771
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ "${FASTAPI:-0}" = 1 ] && [ ! -x bench/.venv/bin/uvicorn ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/peer/requirements.txt
fi
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
OUT="$(mktemp -d)"
SERVER=""
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null
  rm -rf "$OUT"
}
trap cleanup EXIT
source bench/proc.sh

for label in new old; do
  bin="$NEW"; [ "$label" = old ] && bin="$OLD"
  cp -r "$PROJECT" "$OUT/$label" && rm -rf "$OUT/$label/.cache"
  "$bin" build --project "$OUT/$label" >/dev/null 2>&1
done

start() { # command...
  "$@" >/dev/null 2>&1 &
  SERVER=$!
  for _ in $(seq 400); do curl -fs -o /dev/null "http://127.0.0.1:$PORT$ENDPOINT" && return; sleep 0.05; done
  echo "server did not start: $*" >&2; exit 1
}
stop() { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=""; }
one() { # label command...
  local label="$1"; shift
  start "$@"
  wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$PORT$ENDPOINT" >/dev/null
  local t0 t1 n p50
  t0="$(cpu_ticks "$SERVER")"
  wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$PORT$ENDPOINT" > "$OUT/wrk.txt"
  t1="$(cpu_ticks "$SERVER")"
  n="$(awk '/requests in/{print $1}' "$OUT/wrk.txt")"
  p50="$(wrk -t1 -c1 -d"$DURATION" --latency "http://127.0.0.1:$PORT$ENDPOINT" | awk '$1 == "50%" {print $2}')"
  stop
  awk -v l="$label" -v t=$((t1 - t0)) -v n="$n" -v hz="$(getconf CLK_TCK)" -v p="$p50" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
    'BEGIN {printf "%s %.3f %d %s %s\n", l, t / hz * 1000 / n, n, p, load}' | tee -a "$OUT/rows.txt"
}

echo "server, CPU ms / request, requests, one connection p50, load"
for round in $(seq "$ROUNDS"); do
  order="new old"; [ $((round % 2)) = 0 ] && order="old new"
  for label in $order; do
    bin="$NEW"; [ "$label" = old ] && bin="$OLD"
    one "$label" "$bin" run --project "$OUT/$label" --port "$PORT"
  done
  if [ "${FASTAPI:-0}" = 1 ]; then
    one fastapi "$ROOT/bench/.venv/bin/uvicorn" app:app --app-dir "$ROOT/bench/peer" --port "$PORT" --log-level warning
  fi
done
echo "mean of $ROUNDS rounds:"
awk '{s[$1] += $2; c[$1]++} END {for (l in s) printf "%s %.3f\n", l, s[l] / c[l]}' "$OUT/rows.txt" | sort
