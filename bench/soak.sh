#!/usr/bin/env bash
# Soak under faults: hold 80 % of measured capacity for DURATION seconds (default 600) against
# `filerouter dev` serving bench/soak/ (a copy), whose routes mix normal answers with
# timeouts, memory blow-ups, traps, exceptions and huge outputs, while a route file is
# rewritten every 2 s (hot reload) and a share of requests is malformed (garbage, two Host
# headers, no Host, an unknown transfer coding, an oversized body, a lone surrogate in JSON).
#
#   flock /work/bench.lock bench/soak.sh          # 20 s capacity, then 10 minutes
#   DURATION=60 bench/soak.sh                     # a short check
#
# bench/soak.py counts every request as answered with the right status, answered with a wrong
# one, or lost, and samples the server's RSS every 5 s. Exit 0 only if none was lost or
# wrong and RSS from minute 2 to the end stays within 20 %. Loopback only; bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DURATION="${DURATION:-600}"
CAPACITY_S="${CAPACITY_S:-30}"
PORT="${PORT:-8790}"

cargo build --release --quiet
WORK="$(mktemp -d)"
cp -r bench/soak "$WORK/project"
LOG="$WORK/server.log"
RUST_LOG=warn timeout $((DURATION + CAPACITY_S + 120)) \
  target/release/filerouter dev --project "$WORK/project" --port "$PORT" >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 1 300); do
  curl -fsS "http://127.0.0.1:$PORT/ok" >/dev/null 2>&1 && break
  sleep 0.2
done
# RSS and CPU are the filerouter process's own (timeout is its parent).
FR_PID="$(pgrep -P "$SERVER" -x filerouter || echo "$SERVER")"
status=0
SOAK_RELOAD_FILE="$WORK/project/routes/reload/route.py" \
  python3 bench/soak.py "http://127.0.0.1:$PORT" "$FR_PID" "$DURATION" "$CAPACITY_S" || status=$?
echo "server log: $(wc -c <"$LOG") bytes for the whole run" >&2
exit $status
