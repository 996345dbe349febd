#!/usr/bin/env bash
# Benchmark: filerouter against FastAPI on the same four endpoints, on this machine, in one run.
#
#   bench/run.sh            # three servers, wrk on loopback, one table with ratios
#
# filerouter serves examples/hello (the same endpoints as bench/peer/app.py) twice: with
# `filerouter dev` (route file imported in every request) and with `filerouter run` from a
# build cache (route modules baked into the snapshot). Both make a fresh sandbox instance for
# every request. FastAPI runs bench/peer/app.py on one uvicorn worker with the versions
# pinned in bench/peer/requirements.txt. bench/peer/bench.sh (the peer's own script) measures
# each: req/s, p50/p99 latency, RSS, and time from launch to the first 200.
# Knobs: RUNS, DURATION, CONNS, THREADS, WARMUP, COLD_RUNS (see bench/peer/bench.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

if ! command -v wrk >/dev/null; then
  apt-get update -qq && apt-get install -y -qq wrk >/dev/null
fi
if [ ! -x bench/.venv/bin/uvicorn ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/peer/requirements.txt
fi
cargo build --release --quiet
# Compile the guest once (cached), so cold starts measure a normal start.
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
timeout 120 target/release/filerouter dev --project examples/hello --port 0 >/dev/null 2>&1 &
warm=$!; sleep 8; kill $warm 2>/dev/null || true; wait $warm 2>/dev/null || true

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
FR_PORT=8710 PEER_PORT=8711
export FILES=1 RUNS="${RUNS:-3}" DURATION="${DURATION:-10s}"

echo "== filerouter dev (access log off: RUST_LOG=warn) ==" >&2
RUST_LOG=warn LABEL=filerouter COLD_CMD="env RUST_LOG=warn $ROOT/target/release/filerouter dev --project $ROOT/examples/hello --port $FR_PORT" \
  bench/peer/bench.sh "http://127.0.0.1:$FR_PORT" | tee "$OUT/fr.txt" >&2
echo "== filerouter run (build cache of a copy of examples/hello) ==" >&2
cp -r examples/hello "$OUT/hello"
rm -rf "$OUT/hello/.cache"
target/release/filerouter build --project "$OUT/hello" >&2
LABEL=filerouter-run COLD_CMD="$ROOT/target/release/filerouter run --project $OUT/hello --port $FR_PORT" \
  bench/peer/bench.sh "http://127.0.0.1:$FR_PORT" | tee "$OUT/run.txt" >&2
echo "== FastAPI, 1 uvicorn worker ==" >&2
LABEL=fastapi COLD_CMD="$ROOT/bench/.venv/bin/uvicorn app:app --app-dir $ROOT/bench/peer --port $PEER_PORT --log-level warning" \
  bench/peer/bench.sh "http://127.0.0.1:$PEER_PORT" | tee "$OUT/peer.txt" >&2

# One table: the row of each endpoint from every report, and filerouter / FastAPI.
python3 - "$OUT/fr.txt" "$OUT/run.txt" "$OUT/peer.txt" <<'PY'
import re, sys

def parse(path):
    rows, cold = {}, None
    for line in open(path):
        m = re.match(r"# cold start .*median ([\d.]+)", line)
        if m:
            cold = float(m.group(1))
        m = re.match(r"(GET|POST) (\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+(\d+)", line)
        if m:
            rows[f"{m.group(1)} {m.group(2)}"] = [float(m.group(i)) for i in (3, 4, 5)] + [m.group(6), int(m.group(7))]
    return rows, cold

dev, dev_cold = parse(sys.argv[1])
run, run_cold = parse(sys.argv[2])
peer, peer_cold = parse(sys.argv[3])
print("| endpoint | dev req/s | run req/s | FastAPI req/s | run / FastAPI | dev / FastAPI | p50 / p99 ms: dev | run | FastAPI | RSS MiB: dev / run / FastAPI | errors |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for name in peer:
    a, r, b = dev.get(name), run.get(name), peer[name]
    if not a or not r:
        continue
    print(f"| {name} | {a[0]:,.0f} | {r[0]:,.0f} | {b[0]:,.0f} | {r[0] / b[0]:.2f} | {a[0] / b[0]:.2f} "
          f"| {a[1]:.2f} / {a[2]:.2f} | {r[1]:.2f} / {r[2]:.2f} | {b[1]:.2f} / {b[2]:.2f} "
          f"| {a[3]} / {r[3]} / {b[3]} | {a[4]}/{r[4]}/{b[4]} |")
if dev_cold and run_cold and peer_cold:
    print(f"| launch to first 200 | {dev_cold:.0f} ms | {run_cold:.0f} ms | {peer_cold:.0f} ms | {run_cold / peer_cold:.2f} | {dev_cold / peer_cold:.2f} | | | | | |")
PY
