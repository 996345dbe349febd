#!/usr/bin/env bash
# What pydantic costs a request: CPU time per request, req/s and memory pages written per request
# of `POST /model` (a 10-field pydantic model as body and return annotation) and `POST /dataclass`
# (the same ten fields as a dataclass, filerouter's own checks), for `filerouter run` of this
# checkout, the previous filerouter binary (PREV_BIN, optional: measured on /dataclass only, as
# its guest may have no pydantic) and FastAPI + pydantic with one uvicorn worker; all in one run, the same body
# (bench/pydantic/order.lua). Also the size of each build's cache (the project's snapshot).
#
#   bench/pydantic.sh                                   # this checkout and FastAPI
#   PREV_BIN=/path/to/old/filerouter bench/pydantic.sh  # ... and a previous build beside them
#   PREV_HAS_PYDANTIC=1 PREV_BIN=... bench/pydantic.sh   # ... measured on /model too
#
# Every server gets the same fixed load after a warm-up: wrk -t1 -c$CONNS -d$DURATION per
# endpoint, RUNS times (the median is printed). CPU time is utime + stime of the server and its
# children from /proc/PID/stat (bench/proc.sh) divided by the requests wrk completed: it
# survives a busy machine better than req/s, printed beside it. "pages written" is the largest
# number of pages of a sandbox memory slot written since it was mapped from the memory image,
# after a one-connection load (what the memory reset copies back after each request).
# Knobs: DURATION (10s), CONNS (32), RUNS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DURATION="${DURATION:-10s}"
CONNS="${CONNS:-32}"
RUNS="${RUNS:-3}"
PORT=8761
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ ! -x bench/.venv/bin/uvicorn ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/peer/requirements.txt
fi
cargo build --release --quiet
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
OUT="$(mktemp -d)"
SERVER=""
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$OUT"; }
trap cleanup EXIT
source bench/proc.sh

declare -A BINS=([filerouter-run]="$ROOT/target/release/filerouter")
[ -n "${PREV_BIN:-}" ] && BINS[filerouter-run-previous]="$PREV_BIN"
for label in "${!BINS[@]}"; do
  cp -r bench/pydantic "$OUT/$label" && rm -rf "$OUT/$label/.cache"
  if [ "$label" = filerouter-run-previous ] && [ -z "${PREV_HAS_PYDANTIC:-}" ]; then
    # A previous binary may have no pydantic in its guest: it serves /dataclass only.
    rm -rf "$OUT/$label/routes/model"
    sed -i 's/^from pydantic.*//; /^class Order(BaseModel)/,/^$/d' "$OUT/$label/routes/_lib/orders.py"
  fi
  "${BINS[$label]}" build --project "$OUT/$label" >/dev/null
  echo "cache $label $(du -sk "$OUT/$label/.cache" | cut -f1)" >> "$OUT/sizes.txt"
done

start() { # command... ; sets SERVER and waits for the first answer
  "$@" >/dev/null 2>&1 &
  SERVER=$!
  for _ in $(seq 600); do curl -fs "http://127.0.0.1:$PORT/" >/dev/null && return; sleep 0.05; done
  echo "server did not start: $*" >&2; exit 1
}
stop() { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

measure() { # label command...
  local label="$1"; shift
  local path written
  for path in /model /dataclass; do
    if [ "$label" = filerouter-run-previous ] && [ ! -d "$OUT/$label/routes${path}" ]; then
      continue
    fi
    written="-"
    start "$@"
    wrk -t1 -c1 -d3s -s bench/pydantic/order.lua "http://127.0.0.1:$PORT$path" >/dev/null
    [[ "$label" == filerouter* ]] && written="$(bench/written_pages.py "$SERVER")"
    wrk -t1 -c"$CONNS" -d2s -s bench/pydantic/order.lua "http://127.0.0.1:$PORT$path" >/dev/null
    for _ in $(seq "$RUNS"); do
      local t0 t1 n rps errors
      t0="$(cpu_ticks "$SERVER")"
      wrk -t1 -c"$CONNS" -d"$DURATION" -s bench/pydantic/order.lua "http://127.0.0.1:$PORT$path" > "$OUT/wrk.txt"
      t1="$(cpu_ticks "$SERVER")"
      n="$(awk '/requests in/{print $1}' "$OUT/wrk.txt")"
      rps="$(awk '/Requests\/sec/{print $2}' "$OUT/wrk.txt")"
      errors="$(awk '/Non-2xx/{n+=$NF} /Socket errors/{gsub(/,/,""); n+=$4+$6+$8+$10} END{print n+0}' "$OUT/wrk.txt")"
      echo "$label $path $n $rps $((t1 - t0)) $written $errors" >> "$OUT/raw.txt"
    done
    stop
  done
}

for label in "${!BINS[@]}"; do
  measure "$label" "${BINS[$label]}" run --project "$OUT/$label" --port "$PORT"
done
measure "fastapi-1-worker" "$ROOT/bench/.venv/bin/uvicorn" fastapi_app:app --app-dir "$ROOT/bench/pydantic" \
  --port "$PORT" --log-level warning

python3 - "$OUT/raw.txt" "$OUT/sizes.txt" "$(getconf CLK_TCK)" <<'PY'
import statistics, sys
ticks = int(sys.argv[3])
rows = {}
for line in open(sys.argv[1]):
    label, path, n, rps, cpu, written, errors = line.split()
    rows.setdefault((label, path), []).append((float(rps), int(cpu) / ticks * 1000 / int(n), written, int(errors)))
print("| server | endpoint | req/s | CPU ms / request | pages written / request | errors |")
print("|---|---|---|---|---|---|")
for (label, path), runs in sorted(rows.items()):
    med = lambda i: statistics.median(r[i] for r in runs)
    written = runs[0][2]
    written = f"{int(written):,}" if written.isdigit() else written
    print(f"| {label} | POST {path} | {med(0):,.0f} | {med(1):.3f} | {written} | {sum(r[3] for r in runs)} |")
for line in open(sys.argv[2]):
    _, label, kib = line.split()
    print(f"build cache of bench/pydantic ({label}): {int(kib) / 1024:.1f} MiB")
PY
