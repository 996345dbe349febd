#!/usr/bin/env bash
# Per-request cost, one connection at a time: the fresh-instance cost of filerouter (dev: route
# imported in the request; run: route baked into the snapshot) next to FastAPI, in one run.
#
#   bench/latency.sh            # wrk -t1 -c1 on GET /users/42, RUNS times each, median p50/p99
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
RUNS="${RUNS:-3}"
DURATION="${DURATION:-5s}"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ ! -x bench/.venv/bin/uvicorn ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/peer/requirements.txt
fi
cargo build --release --quiet
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
BIN="$ROOT/target/release/filerouter"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"; pkill -f "port 8750" || true' EXIT
cp -r examples/hello "$OUT/hello" && rm -rf "$OUT/hello/.cache"
"$BIN" build --project "$OUT/hello" >/dev/null 2>&1

measure() { # label, command...
  local label="$1"; shift
  "$@" >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 200); do curl -fs http://127.0.0.1:8750/ >/dev/null && break; sleep 0.05; done
  wrk -t1 -c1 -d2s http://127.0.0.1:8750/users/42 >/dev/null
  for _ in $(seq "$RUNS"); do
    wrk -t1 -c1 -d"$DURATION" --latency http://127.0.0.1:8750/users/42 \
      | awk -v l="$label" '/^ +50%/{p50=$2} /^ +99%/{p99=$2} /Requests\/sec/{rps=$2} END{print l, p50, p99, rps}'
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
{
  measure "filerouter-dev" env RUST_LOG=warn "$BIN" dev --project "$OUT/hello" --port 8750
  measure "filerouter-run" "$BIN" run --project "$OUT/hello" --port 8750
  measure "fastapi" "$ROOT/bench/.venv/bin/uvicorn" app:app --app-dir "$ROOT/bench/peer" --port 8750 --log-level warning
} > "$OUT/raw.txt"
python3 - "$OUT/raw.txt" <<'PY'
import statistics, sys
def ms(v):
    return float(v[:-2]) / 1000 if v.endswith("us") else float(v[:-2]) if v.endswith("ms") else float(v[:-1]) * 1000
rows = {}
for line in open(sys.argv[1]):
    label, p50, p99, rps = line.split()
    rows.setdefault(label, []).append((ms(p50), ms(p99), float(rps)))
print("| server (GET /users/42, one connection) | p50 ms | p99 ms | req/s |")
print("|---|---|---|---|")
for label, runs in rows.items():
    print(f"| {label} | {statistics.median(r[0] for r in runs):.2f} | {statistics.median(r[1] for r in runs):.2f} | {statistics.median(r[2] for r in runs):,.0f} |")
PY
