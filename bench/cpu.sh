#!/usr/bin/env bash
# Where a request's cost goes: CPU time, page faults and memory pages restored per request, for
# `filerouter run` of this checkout (memory reset with PAGEMAP_SCAN, and with the copying reset
# of kernels without it: FILEROUTER_PAGEMAP_SCAN=off), the previous filerouter binary (PREV_BIN,
# optional), and FastAPI with one uvicorn worker and with as many workers as filerouter uses
# cores (nproc: the tokio runtime's threads); all in one run.
#
#   bench/cpu.sh                                   # this checkout and FastAPI
#   PREV_BIN=/path/to/old/filerouter bench/cpu.sh  # ... and a previous build beside them
#
# Every server gets the same fixed load after a warm-up: wrk -t1 -c$CONNS -d$DURATION on each
# endpoint. Before and after it, /proc/PID/stat of the server and of all its descendants (the
# uvicorn workers) gives CPU time (utime + stime) and minor and major page faults; each is
# divided by the requests wrk completed. CPU time survives a busy machine better than req/s,
# which is printed beside it. "pages restored" is, for filerouter, what the memory reset copies
# back from the project's memory image after every request, read after a one-connection load
# of the same endpoint on a fresh server (the largest over the slots): the pages the kernel
# reports to the reset's own query (PAGEMAP_SCAN on the server's pagemap: written, present,
# not a file page, not the zero page; for a previous binary before issue 28, wasmtime's query,
# which lacks "present"); without PAGEMAP_SCAN (the -copy row) the image is mapped afresh after
# every request, nothing is copied and the touched pages fault in again. "image pages mapped"
# is, on the same server, how many pages of the slot's image mapping are mapped at all (read or
# written; bench/written_pages.py mapped): what the reset's scan looks at after every request.
# Then one connection at a time (wrk -t1 -c1 --latency for DURATION on the same server): the
# latency a lone client sees, p50 and p99, which hand-offs between threads add to, beside CPU.
# Knobs: DURATION (10s), CONNS (32), RUNS (3: the median is printed), ENDPOINTS, RUN_FLAGS
# (more flags for this checkout's `run`, e.g. --no-access-log), PREV_RESET
# (scan, the default: the previous binary resets slots by PAGEMAP_SCAN as wasmtime asked, as
# builds from wasmtime 50 to issue 28 did; ours: as filerouter's own slots ask since issue 28;
# copy: by a copy, as builds before wasmtime 50), TRACES=1 (a row
# filerouter-run-traced: this checkout's `run` exporting its spans over OTLP/HTTP to a local
# sink, bench/otlp_sink.py, whose own CPU is not counted), PEERS=0 (leave out the -copy row and
# FastAPI).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DURATION="${DURATION:-10s}"
CONNS="${CONNS:-32}"
RUNS="${RUNS:-3}"
ENDPOINTS="${ENDPOINTS:-/users/42 /}"
PORT=8760
CORES="$(nproc)"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ "${PEERS:-1}" != 0 ] && [ ! -x bench/.venv/bin/uvicorn ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/peer/requirements.txt
fi
cargo build --release --quiet
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
OUT="$(mktemp -d)"
SERVER=""
SINK=""
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null
  [ -n "$SINK" ] && kill "$SINK" 2>/dev/null
  rm -rf "$OUT"
}
trap cleanup EXIT

# A build cache of examples/hello for each filerouter binary (their formats may differ).
declare -A BINS=([filerouter-run]="$ROOT/target/release/filerouter")
[ -n "${PREV_BIN:-}" ] && BINS[filerouter-run-previous]="$PREV_BIN"
for label in "${!BINS[@]}"; do
  cp -r examples/hello "$OUT/$label" && rm -rf "$OUT/$label/.cache"
  "${BINS[$label]}" build --project "$OUT/$label" >/dev/null 2>&1
done

# The process-tree helpers: tree, cpu_ticks.
source bench/proc.sh
# utime+stime (ticks), minflt, majflt summed over a process tree.
counters() {
  local t=0 mi=0 ma=0 p f
  for p in $(tree "$1"); do
    f=($(sed 's/^.*) //' /proc/"$p"/stat 2>/dev/null)) || continue
    [ "${#f[@]}" -gt 13 ] || continue
    # after "pid (comm) ": state=0 ppid=1 ... minflt=7 majflt=9 utime=11 stime=12
    mi=$((mi + f[7])); ma=$((ma + f[9])); t=$((t + f[11] + f[12]))
  done
  echo "$t $mi $ma"
}
# Pages of one sandbox memory slot that are private to it (written since mapped from the
# snapshot): the snapshot image's mapping (memfd) and the read-write mappings around it. The
# largest over all slots is printed.
restored_pages() { # PID ours|scan|copy
  python3 bench/written_pages.py "$1" "$2"
}
start() { # command... ; sets SERVER and waits for the first answer
  "$@" >/dev/null 2>&1 &
  SERVER=$!
  for _ in $(seq 400); do curl -fs "http://127.0.0.1:$PORT/" >/dev/null && return; sleep 0.05; done
  echo "server did not start: $*" >&2; exit 1
}
stop() { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

measure() { # label command...
  local label="$1"; shift
  local path restored mapped
  for path in $ENDPOINTS; do
    restored="-"
    mapped="-"
    if [[ "$label" == filerouter* ]]; then
      start "$@"
      wrk -t1 -c1 -d3s "http://127.0.0.1:$PORT$path" >/dev/null
      case "$label" in
        # without PAGEMAP_SCAN filerouter maps the image afresh: nothing is copied, every page
        # a request touches faults in again (the faults column)
        *-copy) restored="remapped" ;;
        *-previous) restored="$(restored_pages "$SERVER" "$(case "${PREV_RESET:-scan}" in copy | ours) echo "$PREV_RESET" ;; *) echo scan ;; esac)")" ;;
        *) restored="$(restored_pages "$SERVER" ours)" ;;
      esac
      mapped="$(restored_pages "$SERVER" mapped)"
      stop
    fi
    start "$@"
    wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$PORT$path" >/dev/null
    for _ in $(seq "$RUNS"); do
      read -r t0 mi0 ma0 < <(counters "$SERVER")
      wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$PORT$path" > "$OUT/wrk.txt"
      read -r t1 mi1 ma1 < <(counters "$SERVER")
      local n rps errors
      n="$(awk '/requests in/{print $1}' "$OUT/wrk.txt")"
      rps="$(awk '/Requests\/sec/{print $2}' "$OUT/wrk.txt")"
      errors="$(awk '/Non-2xx/{n+=$NF} /Socket errors/{gsub(/,/,""); n+=$4+$6+$8+$10} END{print n+0}' "$OUT/wrk.txt")"
      echo "$label $path $n $rps $((t1 - t0)) $((mi1 - mi0)) $((ma1 - ma0)) $restored $mapped $errors" >> "$OUT/cpu.txt"
    done
    wrk -t1 -c1 -d"$DURATION" --latency "http://127.0.0.1:$PORT$path" > "$OUT/one.txt"
    local p50 p99
    p50="$(awk '$1 == "50%" {print $2}' "$OUT/one.txt")"
    p99="$(awk '$1 == "99%" {print $2}' "$OUT/one.txt")"
    sed "s|\$| $p50 $p99|" "$OUT/cpu.txt"
    rm -f "$OUT/cpu.txt"
    stop
  done
}

{
  NEW="$ROOT/target/release/filerouter"
  # shellcheck disable=SC2086 # RUN_FLAGS is a list of flags
  measure "filerouter-run" "$NEW" run --project "$OUT/filerouter-run" --port "$PORT" ${RUN_FLAGS:-}
  if [ "${TRACES:-0}" = 1 ]; then
    python3 bench/otlp_sink.py $((PORT + 1)) &
    SINK=$!
    # shellcheck disable=SC2086
    measure "filerouter-run-traced" env OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$((PORT + 1))" \
      OTEL_SERVICE_NAME=bench "$NEW" run --project "$OUT/filerouter-run" --port "$PORT" ${RUN_FLAGS:-}
    kill "$SINK"; wait "$SINK" 2>/dev/null || true; SINK=""
  fi
  if [ "${PEERS:-1}" != 0 ]; then
    # shellcheck disable=SC2086
    measure "filerouter-run-copy" env FILEROUTER_PAGEMAP_SCAN=off "$NEW" run --project "$OUT/filerouter-run" --port "$PORT" ${RUN_FLAGS:-}
  fi
  if [ -n "${PREV_BIN:-}" ]; then
    measure "filerouter-run-previous" "$PREV_BIN" run --project "$OUT/filerouter-run-previous" --port "$PORT"
  fi
  if [ "${PEERS:-1}" != 0 ]; then
    measure "fastapi-1-worker" "$ROOT/bench/.venv/bin/uvicorn" app:app --app-dir "$ROOT/bench/peer" \
      --port "$PORT" --log-level warning
    measure "fastapi-$CORES-workers" "$ROOT/bench/.venv/bin/uvicorn" app:app --app-dir "$ROOT/bench/peer" \
      --port "$PORT" --log-level warning --workers "$CORES"
  fi
} > "$OUT/raw.txt"
cp "$OUT/raw.txt" "${RAW_OUT:-/dev/null}"

python3 - "$OUT/raw.txt" "$(getconf CLK_TCK)" <<'PY'
import statistics, sys
ticks = int(sys.argv[2])
rows = {}
for line in open(sys.argv[1]):
    label, path, n, rps, cpu, minflt, majflt, restored, mapped, errors, p50, p99 = line.split()
    rows.setdefault((label, path), []).append(
        (float(rps), int(cpu) / ticks * 1000 / int(n), int(minflt) / int(n), int(majflt) / int(n), restored, int(errors), p50, p99, mapped))
def ms(text):
    # wrk's units: us, ms, s
    for unit, scale in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return f"{float(text[: -len(unit)]) * scale:.2f}"
    return text
print("| server | endpoint | req/s | CPU ms / request | minor faults / request | major faults / request | pages restored / request | image pages mapped | errors | one connection p50 / p99 ms |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (label, path), runs in rows.items():
    med = lambda i: statistics.median(r[i] for r in runs)
    restored = runs[0][4]
    restored = f"{int(restored):,}" if restored.isdigit() else restored
    mapped = runs[0][8]
    mapped = f"{int(mapped):,}" if mapped.isdigit() else mapped
    print(f"| {label} | GET {path} | {med(0):,.0f} | {med(1):.3f} | {med(2):.2f} | {med(3):.3f} | {restored} | {mapped} | {sum(r[5] for r in runs)} | {ms(runs[0][6])} / {ms(runs[0][7])} |")
PY
