#!/usr/bin/env bash
# The added cost of one plugin call per request: CPU time of the server per request (from
# /proc/PID/stat over a fixed wrk load, which survives a busy machine better than req/s), for a
# route that calls no plugin, one that calls the C plugin (textkit.slugify) and one that calls
# the Python plugin (markdown.to_html), all in one `filerouter run` of examples/plugins-demo.
#
#   flock /work/bench.lock bench/plugins.sh        # RUNS (3) runs of DURATION (10s) each
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
RUNS="${RUNS:-3}"
DURATION="${DURATION:-10s}"
PORT="${PORT:-8751}"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
BIN="$ROOT/target/release/filerouter"
bash examples/plugins-demo/plugins/build.sh >/dev/null
OUT="$(mktemp -d)"
SERVER=""
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$OUT"; }
trap cleanup EXIT
cp -r examples/plugins-demo "$OUT/demo" && rm -rf "$OUT/demo/.cache"
mkdir -p "$OUT/demo/routes/bench/none" "$OUT/demo/routes/bench/c" "$OUT/demo/routes/bench/py"
cat >"$OUT/demo/routes/bench/none/route.py" <<'PY'
import re

def GET(request):
    return {"slug": re.sub(r"[^a-z0-9]+", "-", "Hello, C World!".lower()).strip("-")}
PY
cat >"$OUT/demo/routes/bench/c/route.py" <<'PY'
from filerouter.plugins import textkit

def GET(request):
    return {"slug": textkit.slugify("Hello, C World!")}
PY
cat >"$OUT/demo/routes/bench/py/route.py" <<'PY'
from filerouter.plugins import markdown

def GET(request):
    return {"html": markdown.to_html("# Hello")}
PY
"$BIN" build --project "$OUT/demo" >/dev/null 2>&1

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
"$BIN" run --project "$OUT/demo" --port "$PORT" >/dev/null 2>&1 &
SERVER=$!
for _ in $(seq 400); do curl -fs "http://127.0.0.1:$PORT/bench/none" >/dev/null && break; sleep 0.05; done
HZ="$(getconf CLK_TCK)"
for path in none c py; do
  wrk -t1 -c4 -d2s "http://127.0.0.1:$PORT/bench/$path" >/dev/null   # warm up
done
for _ in $(seq "$RUNS"); do
  for path in none c py; do
    before="$(cpu_ticks "$SERVER")"
    requests="$(wrk -t1 -c4 -d"$DURATION" "http://127.0.0.1:$PORT/bench/$path" \
      | awk '/requests in/{print $1} /Non-2xx/{bad=$NF} END{if (bad) print "ERRORS", bad > "/dev/stderr"}')"
    after="$(cpu_ticks "$SERVER")"
    echo "$path $requests $((after - before))"
  done
done > "$OUT/raw.txt"
python3 - "$OUT/raw.txt" "$HZ" <<'PY'
import statistics, sys
hz = int(sys.argv[2])
rows = {}
for line in open(sys.argv[1]):
    path, requests, ticks = line.split()
    rows.setdefault(path, []).append((int(requests), int(ticks) / hz * 1000 / max(1, int(requests)), int(requests) / float(10)))
base = statistics.median(r[1] for r in rows["none"])
names = {"none": "no plugin call (same work in route code)", "c": "one call into the C plugin (textkit.slugify)", "py": "one call into the Python plugin (markdown.to_html)"}
print("| route (filerouter run, wrk -t1 -c4) | CPU ms per request | added by the call | requests per run |")
print("|---|---|---|---|")
for path, runs in rows.items():
    cpu = statistics.median(r[1] for r in runs)
    added = "" if path == "none" else f"{cpu - base:+.2f} ms"
    print(f"| {names[path]} | {cpu:.2f} | {added} | {statistics.median(r[0] for r in runs):,} |")
PY
