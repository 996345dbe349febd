#!/usr/bin/env bash
# What a database request costs: examples/blog (posts in the project's SQLite database) under
# `filerouter run`, against the same API in FastAPI with the standard library's sqlite3 on a
# file (examples/blog/fastapi_app.py, one uvicorn worker); both in one run.
#
#   bench/data.sh                                          # builds this checkout, then measures
#   FILEROUTER_BIN=target/release/filerouter bench/data.sh # an existing binary (no cargo build)
#
# Two endpoints: GET /posts/1 (one row by primary key) and POST /posts (one INSERT, committed;
# a wrk Lua script sends a unique title per request, so UNIQUE never fails). Every server and
# endpoint starts on a fresh, migrated database (filerouter: a new --data-dir and --migrate;
# FastAPI: a new BLOG_DB file, migrated at import, WAL mode like filerouter's) and gets post 1
# before the load. Then, as in bench/cpu.sh: a warm-up, and RUNS times a fixed load,
# wrk -t1 -c$CONNS -d$DURATION on loopback; before and after each, /proc/PID/stat of the server
# and its descendants gives CPU time (utime + stime, SQLite's included: it runs in the server's
# threads), divided by the requests wrk completed. The median run is printed.
# Knobs: DURATION (10s), CONNS (8), RUNS (3), WARMUP (2s), FILEROUTER_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DURATION="${DURATION:-10s}"
CONNS="${CONNS:-8}"
RUNS="${RUNS:-3}"
WARMUP="${WARMUP:-2s}"
PORT=8761
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

# A build cache of a copy of examples/blog (without its .data/ and .cache/).
mkdir "$OUT/blog"
cp -r examples/blog/config.py examples/blog/migrations examples/blog/routes "$OUT/blog/"
"$BIN" build --project "$OUT/blog" >/dev/null 2>&1

# POST /posts with the title "<prefix>-<thread>-<n>": unique across threads and wrk runs.
cat > "$OUT/post.lua" <<'EOF'
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local prefix, n = "", 0
function init(args)
  prefix = (args[1] or "post") .. "-" .. tostring(tid)
end
function request()
  n = n + 1
  return wrk.format("POST", "/posts", {["Content-Type"] = "application/json"},
    string.format('{"title":"%s-%d","body":"A post written by bench/data.sh."}', prefix, n))
end
EOF

# The process-tree helpers: tree, cpu_ticks.
source bench/proc.sh
start() { # command... ; sets SERVER and waits for the first answer
  if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$PORT/"; then
    echo "something already listens on port $PORT" >&2; exit 1
  fi
  "$@" >"$OUT/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 600); do curl -fs "http://127.0.0.1:$PORT/posts" >/dev/null && return; sleep 0.05; done
  echo "server did not start: $*" >&2; cat "$OUT/server.log" >&2; exit 1
}
stop() { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

# wrk on one endpoint ("GET /posts/1" or "POST /posts") for a duration; TAG prefixes the
# titles POST sends.
load() { # endpoint duration tag
  local url="http://127.0.0.1:$PORT${1#* }"
  if [ "${1%% *}" = POST ]; then
    wrk -t1 -c"$CONNS" -d"$2" -s "$OUT/post.lua" "$url" -- "$3"
  else
    wrk -t1 -c"$CONNS" -d"$2" "$url"
  fi
}

measure() { # label command... ; each endpoint gets a server on a fresh database
  local label="$1"; shift
  local endpoint k=0
  for endpoint in "GET /posts/1" "POST /posts"; do
    k=$((k + 1))
    local data="$OUT/data-$label-$k"
    if [[ "$label" == filerouter* ]]; then
      start "$@" --data-dir "$data" --migrate
    else
      mkdir -p "$data"
      start env BLOG_DB="$data/blog.db" "$@"
    fi
    curl -fs -o /dev/null -H 'Content-Type: application/json' \
      -d '{"title":"First post","body":"Hello."}' "http://127.0.0.1:$PORT/posts"
    curl -fs -o /dev/null "http://127.0.0.1:$PORT/posts/1"
    load "$endpoint" "$WARMUP" warmup >/dev/null
    for i in $(seq "$RUNS"); do
      local t0 t1 n rps errors
      t0="$(cpu_ticks "$SERVER")"
      load "$endpoint" "$DURATION" "run$i" > "$OUT/wrk.txt"
      t1="$(cpu_ticks "$SERVER")"
      n="$(awk '/requests in/{print $1}' "$OUT/wrk.txt")"
      rps="$(awk '/Requests\/sec/{print $2}' "$OUT/wrk.txt")"
      errors="$(awk '/Non-2xx/{n+=$NF} /Socket errors/{gsub(/,/,""); n+=$4+$6+$8+$10} END{print n+0}' "$OUT/wrk.txt")"
      echo "$label ${endpoint// /_} $n $rps $((t1 - t0)) $errors"
    done
    stop
  done
}

{
  measure "filerouter-run" "$BIN" run --project "$OUT/blog" --port "$PORT"
  measure "fastapi-1-worker" "$ROOT/bench/.venv/bin/uvicorn" fastapi_app:app \
    --app-dir "$ROOT/examples/blog" --port "$PORT" --log-level warning
} > "$OUT/raw.txt"

python3 - "$OUT/raw.txt" "$(getconf CLK_TCK)" "$CONNS" "$DURATION" "$RUNS" <<'PY'
import statistics, sys
raw, ticks, conns, duration, runs = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
rows = {}
for line in open(raw):
    label, endpoint, n, rps, cpu, errors = line.split()
    rows.setdefault((label, endpoint.replace("_", " ")), []).append(
        (float(rps), int(cpu) / ticks * 1000 / int(n), int(errors)))
print(f"examples/blog, wrk -t1 -c{conns} -d{duration}, median of {runs} runs")
print()
print("| server | endpoint | req/s | CPU ms / request | errors |")
print("|---|---|---|---|---|")
for (label, endpoint), measured in rows.items():
    med = lambda i: statistics.median(r[i] for r in measured)
    print(f"| {label} | {endpoint} | {med(0):,.0f} | {med(1):.3f} | {sum(r[2] for r in measured)} |")
PY
