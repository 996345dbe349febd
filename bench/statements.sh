#!/usr/bin/env bash
# What each SQL statement of a request costs: a route that runs N reads by primary key
# (`SELECT * FROM posts WHERE id = ?` on one connection, each fetched) for N = 0, 1, 10 and
# 100, under `filerouter run` of examples/blog (SQLite), against the same route in FastAPI with
# the standard library's sqlite3 (one uvicorn worker); all in one run, with a previous
# filerouter binary beside them when FILEROUTER_BASE names one. N = 0 only connects and closes.
# A cost per request that grows faster than N is a bug to fix or to explain.
#
#   flock /work/bench.lock bench/statements.sh
#   FILEROUTER_BIN=target/release/filerouter FILEROUTER_BASE=/path/to/old bench/statements.sh
#
# Each server gets a fresh database with 100 posts; per N a warm-up, then RUNS times wrk -t1
# -c$CONNS -d$DURATION; the CPU time of the server's process tree (/proc/PID/stat) over the
# requests completed, median of the runs. Knobs: DURATION (5s), CONNS (8), RUNS (3), WARMUP
# (1s), COUNTS ("0 1 10 100"), FILEROUTER_BIN, FILEROUTER_BASE.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DURATION="${DURATION:-5s}"
CONNS="${CONNS:-8}"
RUNS="${RUNS:-3}"
WARMUP="${WARMUP:-1s}"
COUNTS="${COUNTS:-0 1 10 100}"
PORT=8765
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ ! -x bench/.venv/bin/uvicorn ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/peer/requirements.txt
fi
if [ -n "${FILEROUTER_BIN:-}" ]; then
  BIN="$(realpath "$FILEROUTER_BIN")"
else
  cargo build --release --quiet
  BIN="$ROOT/target/release/filerouter"
fi
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
OUT="$(mktemp -d)"
SERVER=""
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$OUT"; }
trap cleanup EXIT

# The blog with GET /many/{n}, built once per binary.
project() { # folder binary
  mkdir "$1"
  cp -r examples/blog/config.py examples/blog/migrations examples/blog/routes "$1/"
  mkdir -p "$1/routes/many/[n]"
  cat > "$1/routes/many/[n]/route.py" <<'PY'
import sqlite3


def GET(n: int):
    conn = sqlite3.connect("app.db")
    found = 0
    for i in range(n):
        if conn.execute("SELECT * FROM posts WHERE id = ?", (i % 100 + 1,)).fetchone() is not None:
            found += 1
    conn.close()
    return {"found": found}
PY
  "$2" build --project "$1" >/dev/null 2>&1
}
project "$OUT/blog" "$BIN"
if [ -n "${FILEROUTER_BASE:-}" ]; then
  BASE="$(realpath "$FILEROUTER_BASE")"
  project "$OUT/blog-base" "$BASE"
fi
cat > "$OUT/peer_many.py" <<'PY'
import sqlite3

from fastapi_app import DB, app


@app.get("/many/{n}")
def many(n: int):
    conn = sqlite3.connect(DB, check_same_thread=False)
    found = 0
    for i in range(n):
        if conn.execute("SELECT * FROM posts WHERE id = ?", (i % 100 + 1,)).fetchone() is not None:
            found += 1
    conn.close()
    return {"found": found}
PY

source bench/proc.sh
start() { # command...
  "$@" >"$OUT/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 600); do curl -fs "http://127.0.0.1:$PORT/posts" >/dev/null && return; sleep 0.05; done
  echo "server did not start: $*" >&2; cat "$OUT/server.log" >&2; exit 1
}
stop() { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

measure() { # label command...
  local label="$1"; shift
  for i in $(seq 100); do
    curl -fs -o /dev/null -H 'Content-Type: application/json' \
      -d "{\"title\":\"Post $i\",\"body\":\"Hello.\"}" "http://127.0.0.1:$PORT/posts"
  done
  local n
  for n in $COUNTS; do
    wrk -t1 -c"$CONNS" -d"$WARMUP" "http://127.0.0.1:$PORT/many/$n" >/dev/null
    for r in $(seq "$RUNS"); do
      local t0 t1 done
      t0="$(cpu_ticks "$SERVER")"
      wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$PORT/many/$n" > "$OUT/wrk.txt"
      t1="$(cpu_ticks "$SERVER")"
      done="$(awk '/requests in/{print $1}' "$OUT/wrk.txt")"
      echo "$label $n $done $(awk '/Requests\/sec/{print $2}' "$OUT/wrk.txt") $((t1 - t0)) $(awk '/Non-2xx/{n+=$NF} END{print n+0}' "$OUT/wrk.txt")"
    done
  done
}

{
  start "$BIN" run --project "$OUT/blog" --port "$PORT" --data-dir "$OUT/data-run" --migrate
  measure filerouter-run; stop
  if [ -n "${BASE:-}" ]; then
    start "$BASE" run --project "$OUT/blog-base" --port "$PORT" --data-dir "$OUT/data-base" --migrate
    measure filerouter-base; stop
  fi
  mkdir -p "$OUT/data-peer"
  start env BLOG_DB="$OUT/data-peer/blog.db" PYTHONPATH="$ROOT/examples/blog" \
    "$ROOT/bench/.venv/bin/uvicorn" peer_many:app --app-dir "$OUT" --port "$PORT" --log-level warning
  measure fastapi-1-worker; stop
} > "$OUT/raw.txt"

python3 - "$OUT/raw.txt" "$(getconf CLK_TCK)" "$CONNS" "$DURATION" "$RUNS" <<'PY'
import statistics, sys
raw, ticks, conns, duration, runs = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
rows = {}
for line in open(raw):
    label, n, done, rps, cpu, errors = line.split()
    rows.setdefault((label, int(n)), []).append((float(rps), int(cpu) / ticks * 1000 / int(done), int(errors)))
print(f"GET /many/N (N reads by primary key), wrk -t1 -c{conns} -d{duration}, median of {runs} runs")
print()
print("| server | N | req/s | CPU ms / request | CPU ms per statement past N = 0 | errors |")
print("|---|---|---|---|---|---|")
for (label, n), measured in rows.items():
    med = lambda i: statistics.median(r[i] for r in measured)
    zero = rows.get((label, 0))
    per = "-" if n == 0 or zero is None else f"{(med(1) - statistics.median(r[1] for r in zero)) / n:.3f}"
    print(f"| {label} | {n} | {med(0):,.0f} | {med(1):.3f} | {per} | {sum(r[2] for r in measured)} |")
PY
