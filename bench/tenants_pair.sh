#!/usr/bin/env bash
# Benchmark: two filerouter binaries serving the same tenants side by side, loaded in turn, so
# that a shared machine's swings fall on both alike (bench/tenants.sh measures one binary, then
# the other, minutes apart).
#
#   BUILD_ONLY=1 bench/tenants.sh                                  # the projects, once
#   flock /work/bench.lock bench/tenants_pair.sh NEW_BIN OLD_BIN   # ROUNDS=3 by default
#
# Both binaries must embed the same guest (a build cache opens only with the guest that built
# it: tell them apart by their hashes, not by their versions); across guests, compare with
# bench/tenants.sh's PREV_BIN. Both serve the projects bench/tenants.sh built with this
# checkout's release binary
# (target/bench-tenants/<its hash>/, or PROJECTS=<folder>), each from its own process and port,
# with the same tenants.toml. After every tenant is loaded on both, each round loads each
# server in turn for DURATION: one busy tenant (wrk -c4, its concurrency cap), then requests
# rotating over all TENANTS tenants (wrk -c32). Printed: req/s and CPU per request (utime +
# stime of the server from /proc/PID/stat over the load), and at the end each server's memory
# slot counts from its admin metrics.
# Knobs: ROUNDS (3), DURATION (5s), TENANTS (100), PROJECTS, PORT (8750: the second uses +10).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
[ $# -eq 2 ] || { echo "usage: bench/tenants_pair.sh BIN_A BIN_B" >&2; exit 2; }
A="$1" B="$2"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-5s}"
N="${TENANTS:-100}"
PORT="${PORT:-8750}"
PROJECTS="${PROJECTS:-$ROOT/target/bench-tenants/$(sha256sum "$ROOT/target/release/filerouter" | cut -c1-12)}"
[ -f "$PROJECTS/tenants.toml" ] || { echo "no $PROJECTS/tenants.toml: run bench/tenants.sh first" >&2; exit 1; }
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
OUT="$(mktemp -d)"
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$OUT"' EXIT

. bench/tenant_loads.sh
write_rotation "$OUT/rotate.lua" "$N"

# Start binary $1 on port $2 (admin on $2 + 1), load every tenant, warm the rotation.
start() {
  "$1" run --tenants "$PROJECTS/tenants.toml" --port "$2" --admin "127.0.0.1:$(($2 + 1))" \
    > "$OUT/server-$2.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 300); do
    curl -fsS "http://127.0.0.1:$(($2 + 1))/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  # A load that cannot be done at the moment answers 503 with Retry-After: ask again.
  for i in $(seq -f '%03g' 0 $((N - 1))); do
    for _ in $(seq 50); do
      curl -fsS -o /dev/null -H "Host: t$i.bench" "http://127.0.0.1:$2/" 2>/dev/null && break
      sleep 0.2
    done
  done
  wrk -t1 -c32 -d2s -s "$OUT/rotate.lua" "http://127.0.0.1:$2/" >/dev/null
}

# One load of the server with pid $1 on port $2, labelled $3; the rest are wrk's arguments.
load() {
  local pid="$1" port="$2" label="$3" rps ms bad
  shift 3
  read -r rps ms bad < <(wrk_cpu "$pid" "$port" "$OUT/wrk.txt" "$@")
  awk -v label="$label" -v r="$rps" -v ms="$ms" -v bad="$bad" \
    'BEGIN {printf "%-34s %6.0f req/s  %.3f ms CPU / request  non-2xx %d\n", label, r, ms, bad}'
}

start "$A" "$PORT"
start "$B" $((PORT + 10))
echo "A: $A"
echo "B: $B"
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    if [ "$side" = A ]; then pid=${PIDS[0]} port=$PORT; else pid=${PIDS[1]} port=$((PORT + 10)); fi
    load "$pid" "$port" "round $round, $side, one busy tenant" -c4 -H "Host: t001.bench"
  done
  for side in A B; do
    if [ "$side" = A ]; then pid=${PIDS[0]} port=$PORT; else pid=${PIDS[1]} port=$((PORT + 10)); fi
    load "$pid" "$port" "round $round, $side, rotating" -c32 -s "$OUT/rotate.lua"
  done
done
for side in A B; do
  if [ "$side" = A ]; then port=$PORT; else port=$((PORT + 10)); fi
  echo "$side slots: $(curl -s "http://127.0.0.1:$((port + 1))/metrics" \
    | grep -E '^filerouter_memory_slot(s_given_total|_switches_within_base_total|_pages_copied_total)' \
    | sed 's/filerouter_memory_//' | tr '\n' ' ')"
done
