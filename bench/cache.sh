#!/usr/bin/env bash
# Benchmark of the build cache (issue: production build/run):
#
#   bench/cache.sh
#
# 1. Size of each cache section before and after zstd at levels 1, 6 and 9 (examples/hello).
# 2. Time from launch to the first answered request, `filerouter run` against `filerouter dev`,
#    on generated projects with 10, 100 and 1,000 route files (median of RUNS launches).
# Throughput of run against dev and FastAPI on the peer's endpoints is bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
RUNS="${RUNS:-5}"
cargo build --release --quiet
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
BIN="$ROOT/target/release/filerouter"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

echo "## Cache size by zstd level (examples/hello)"
echo
echo "| level | section | before | after | reduction |"
echo "|---|---|---|---|---|"
for level in 1 6 9; do
  rm -rf "$OUT/hello" && cp -r examples/hello "$OUT/hello" && rm -rf "$OUT/hello/.cache"
  "$BIN" build --project "$OUT/hello" --compression "$level" >/dev/null 2>&1
  python3 - "$OUT/hello/.cache/manifest.json" "$level" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
total_raw = total_packed = 0
for s in m["sections"]:
    total_raw += s["raw"]; total_packed += s["compressed"]
    print(f"| {sys.argv[2]} | {s['name']} | {s['raw']:,} B | {s['compressed']:,} B | {100 * (1 - s['compressed'] / s['raw']):.0f} % |")
print(f"| {sys.argv[2]} | all | {total_raw:,} B | {total_packed:,} B | {100 * (1 - total_packed / total_raw):.0f} % |")
PY
done

echo
echo "## Launch to first answered request (median of $RUNS)"
echo
echo "| route files | dev | run | dev / run |"
echo "|---|---|---|---|"
for n in 10 100 1000; do
  P="$OUT/p$n"
  python3 - "$P" "$n" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
os.makedirs(f"{root}/routes", exist_ok=True)
open(f"{root}/routes/index.py", "w").write("def GET(request):\n    return {'ok': True}\n")
for i in range(n - 1):
    d = f"{root}/routes/section{i % 10}/item{i}/[item_id]"
    os.makedirs(d, exist_ok=True)
    open(f"{d}/route.py", "w").write(
        f'"""Item family {i}."""\n\n'
        f"def GET(request, item_id: int):\n    return {{'family': {i}, 'id': item_id}}\n\n"
        f"def DELETE(request, item_id: int):\n    return None\n"
    )
PY
  "$BIN" build --project "$P" >/dev/null 2>&1
  python3 - "$BIN" "$P" "$RUNS" <<'PY'
import statistics, subprocess, sys, time, urllib.request
binary, project, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])

def first_answer(command):
    port = 8790
    started = time.perf_counter()
    proc = subprocess.Popen(command + ["--project", project, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as r:
                    if r.status == 200:
                        return (time.perf_counter() - started) * 1000
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit(f"{command} exited")
                time.sleep(0.002)
    finally:
        proc.terminate(); proc.wait()

dev = statistics.median(first_answer([binary, "dev"]) for _ in range(runs))
run = statistics.median(first_answer([binary, "run"]) for _ in range(runs))
n = sum(1 for _ in __import__("pathlib").Path(project, "routes").rglob("*.py"))
print(f"| {n} | {dev:.0f} ms | {run:.0f} ms | {dev / run:.1f}x |")
PY
done
