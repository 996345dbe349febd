#!/usr/bin/env bash
# What a request costs in `filerouter dev` against `filerouter run`, for a project on SQLAlchemy
# 2's ORM (bench/projects/sqlalchemy-blog: SQLAlchemy from PyPI through `filerouter packages
# install`): CPU time of the server per request (from /proc/PID/stat over N sequential
# requests) and the median latency, for `dev` of the previous binary (PREV_BIN: every request
# imported the project), `dev` of this one (served from its snapshots of the imported
# project) and `run` of a build. Then an edit of a route in this `dev`: how long until a
# request shows it, and until the routes are in a snapshot again.
#
#   PREV_BIN=/path/to/old/filerouter bench/dev_snapshot.sh      # N (20) requests each
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
N="${N:-20}"
PORT="${PORT:-8761}"
PYTHON="${PYTHON:-$ROOT/tests/.venv/bin/python}"
cargo build --release --quiet
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
BIN="$ROOT/target/release/filerouter"
PREV_BIN="${PREV_BIN:-}"
source bench/proc.sh
OUT="$(mktemp -d)"
SERVER=""
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; wait 2>/dev/null; rm -rf "$OUT"; }
trap cleanup EXIT
cp -r bench/projects/sqlalchemy-blog "$OUT/blog"
"$BIN" packages install --project "$OUT/blog" --python "$PYTHON" >/dev/null 2>&1
"$BIN" build --project "$OUT/blog" >/dev/null 2>&1
HZ="$(getconf CLK_TCK)"
URL="http://127.0.0.1:$PORT/posts"

# start BIN MODE: serve the project, and wait until it answers (and, for this `dev`, until it
# serves from the snapshot of its routes).
start() {
  local bin="$1" mode="$2"
  rm -rf "$OUT/data"
  "$bin" "$mode" --project "$OUT/blog" --port "$PORT" --data-dir "$OUT/data" \
    $([ "$mode" = run ] && echo --migrate) >"$OUT/log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1200); do curl -fs -o /dev/null "$URL" && break; sleep 0.1; done
  if [ "$bin" = "$BIN" ] && [ "$mode" = dev ]; then
    for _ in $(seq 600); do grep -q "routes imported once" "$OUT/log" && break; sleep 0.1; done
  fi
  curl -fs -o /dev/null -X POST -H 'content-type: application/json' \
    -d '{"title": "hello", "comments": ["first", "second"]}' "$URL"
}

stop() { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

# measure LABEL: N sequential GETs; CPU ms per request and the median latency.
measure() {
  local before after
  curl -fs -o /dev/null "$URL"
  before="$(cpu_ticks "$SERVER")"
  for _ in $(seq "$N"); do curl -fs -o /dev/null -w '%{time_total}\n' "$URL"; done >"$OUT/times"
  after="$(cpu_ticks "$SERVER")"
  python3 - "$1" "$OUT/times" "$((after - before))" "$HZ" "$N" <<'PY'
import statistics, sys
label, times, ticks, hz, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
latency = statistics.median(float(t) for t in open(times)) * 1000
print(f"| {label} | {ticks / hz * 1000 / n:.1f} | {latency:.1f} |")
PY
}

echo "| server (GET /posts, $N sequential requests) | CPU ms per request | median latency, ms |"
echo "|---|---|---|"
if [ -n "$PREV_BIN" ]; then
  start "$PREV_BIN" dev; measure "dev, previous binary (imports every request)"; stop
fi
start "$BIN" dev; measure "dev (snapshots of the imported project)"
# An edit: until a request shows it, and until the routes are in a snapshot again.
snapshots="$(grep -c "routes imported once" "$OUT/log")"
edited="$(date +%s.%N)"
sed -i 's/"title": p.title,/"title": p.title, "edited": True,/' "$OUT/blog/routes/posts/route.py"
until curl -fs "$URL" | grep -q edited; do sleep 0.02; done
shown="$(date +%s.%N)"
until [ "$(grep -c "routes imported once" "$OUT/log")" -gt "$snapshots" ]; do sleep 0.02; done
snapshot="$(date +%s.%N)"
measure "dev, after the edit"
stop
"$BIN" build --project "$OUT/blog" >/dev/null 2>&1
start "$BIN" run; measure "run (a build)"; stop
python3 -c "print(f'\nan edit of routes/posts/route.py: shown after {$shown - $edited:.2f} s, in a snapshot again after {$snapshot - $edited:.2f} s')"

# The TestClient on the same project: start, then 5 requests, in dev and in run (whose start
# includes the `filerouter build` that finds the build up to date).
FILEROUTER_BIN="$BIN" PYTHONPATH="$ROOT/guest-python" "$PYTHON" - "$OUT/blog" <<'PY'
import sys, time
from filerouter.testing import TestClient
for mode in ("dev", "run"):
    started = time.monotonic()
    with TestClient(sys.argv[1], mode=mode) as client:
        up = time.monotonic()
        for _ in range(5):
            assert client.get("/posts").status_code == 200
        done = time.monotonic()
    print(f"TestClient(mode={mode!r}): started in {up - started:.2f} s, 5 requests in {done - up:.2f} s")
PY
