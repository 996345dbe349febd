#!/usr/bin/env bash
# A process's first answers when none of its memory images is in the page cache (a restart on a
# machine that dropped them, a new replica, a tenant's project loaded long after the last
# process that served it): issue 46, point 3's cold first answer.
#
#   PREV_BIN=/path/to/previous/filerouter ROUNDS=3 bench/cold_start.sh    # as root
#
# Before every measured process the kernel's page cache is dropped (`echo 3 >
# /proc/sys/vm/drop_caches`: root only), so its images, compiled guest and build caches are read
# from the disk. Measured, this checkout's release build and PREV_BIN alternating (the order
# reversed every other round), ROUNDS rounds:
# 1. examples/hello under `run`: the first request's time to answer (curl) and the server's CPU
#    for it (every thread's run time, /proc/PID/task/*/schedstat), the process started and
#    answering /healthz on its admin port first.
# 2. `run --tenants` over TENANTS of bench/tenants.sh's projects (built there: BUILD_ONLY=1 with
#    the same PREV_BIN), all of one app: the first answers of the first COLD tenants in turn
#    (the first one maps the app's base image and hashes it, the others are layers over it).
# Before the rounds each binary serves each case once, the page cache dropped first (20 requests
# to hello, and to each of the COLD tenants), as the first process after a build does.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
ROUNDS="${ROUNDS:-3}"
TENANTS="${TENANTS:-100}"
COLD="${COLD:-10}"
PORT="${PORT:-8730}"
ADMIN_PORT="${ADMIN_PORT:-8731}"
[ -w /proc/sys/vm/drop_caches ] || { echo "needs root: it drops the page cache" >&2; exit 1; }

cargo build --release --quiet
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
BINARIES=("$ROOT/target/release/filerouter")
[ -n "${PREV_BIN:-}" ] && BINARIES+=("$PREV_BIN")
OUT="$(mktemp -d)"
SERVER=""
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null; rm -rf "$OUT"' EXIT

work_of() { echo "$ROOT/target/bench-tenants/$(sha256sum "$1" | cut -c1-12)"; }
for BIN in "${BINARIES[@]}"; do
  cp -r examples/hello "$OUT/hello-$(sha256sum "$BIN" | cut -c1-12)"
  "$BIN" build --project "$OUT/hello-$(sha256sum "$BIN" | cut -c1-12)" >/dev/null 2>&1
  [ -f "$(work_of "$BIN")/t000/.cache/bundle.bin" ] || {
    echo "no projects for $BIN: run BUILD_ONLY=1 TENANTS=$TENANTS bench/tenants.sh (with the same PREV_BIN) first" >&2
    exit 1
  }
  printf '[server]\nmax_loaded = %d\n\n[defaults]\nmemory_mb = 128\n' "$TENANTS" > "$(work_of "$BIN")/cold.toml"
  for i in $(seq 0 $((TENANTS - 1))); do
    printf '\n[tenant.t%03d]\nhosts = ["t%03d.bench"]\nproject = "t%03d"\n' "$i" "$i" "$i" >> "$(work_of "$BIN")/cold.toml"
  done
done

# Every thread's CPU time so far, in ns.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{t += $1} END {print t}'; }
start() {
  "$@" --port "$PORT" --admin "127.0.0.1:$ADMIN_PORT" >"$OUT/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 600); do curl -fsS "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "the server did not start:" >&2; cat "$OUT/server.log" >&2; exit 1
}
stop() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""; }
# One request (host $1, path $2): "ms-to-answer ms-of-server-CPU".
first() {
  local before after t
  before=$(cpu_ns "$SERVER")
  t=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' -H "Host: $1" "http://127.0.0.1:$PORT$2")
  [ "${t%% *}" = 200 ] || { echo "$1$2 answered ${t%% *}" >&2; cat "$OUT/server.log" >&2; exit 1; }
  after=$(cpu_ns "$SERVER")
  awk -v t="${t#* }" -v c=$((after - before)) 'BEGIN {printf "%.1f %.1f\n", t * 1000, c / 1e6}'
}
hello() { start "$1" run --project "$OUT/hello-$(sha256sum "$1" | cut -c1-12)"; }
tenants() { start "$1" run --tenants "$(work_of "$1")/cold.toml"; }

# Once, each after the page cache is dropped: a first process, which leaves on the disk what
# every later one finds (filerouter's records of the pages requests read, `sandbox::hot_pages`).
for BIN in "${BINARIES[@]}"; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  hello "$BIN"
  for _ in $(seq 20); do first localhost /users/42 >/dev/null; done
  stop
  sync; echo 3 > /proc/sys/vm/drop_caches
  tenants "$BIN"
  for i in $(seq -f '%03g' 0 $((COLD - 1))); do
    for _ in $(seq 20); do first "t$i.bench" / >/dev/null; done
  done
  stop
done

for round in $(seq "$ROUNDS"); do
  order=("${BINARIES[@]}")
  [ $((round % 2)) = 0 ] && order=($(printf '%s\n' "${BINARIES[@]}" | tac))
  for BIN in "${order[@]}"; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    hello "$BIN"
    echo "round $round $BIN hello first $(first localhost /users/42) second $(first localhost /users/42)"
    stop
    sync; echo 3 > /proc/sys/vm/drop_caches
    tenants "$BIN"
    line=""
    for i in $(seq -f '%03g' 0 $((COLD - 1))); do line="$line $(first "t$i.bench" / | tr ' ' /)"; done
    echo "round $round $BIN tenants$line"
    stop
  done
done | tee "$OUT/rounds.txt"

# The median of the numbers on standard input.
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
echo
echo "medians over $ROUNDS rounds (ms to answer / ms of server CPU):"
for BIN in "${BINARIES[@]}"; do
  mine() { awk -v bin="$BIN" -v what="$1" '$3 == bin && $4 == what' "$OUT/rounds.txt"; }
  echo "$BIN: hello's first request $(mine hello | awk '{print $6}' | median) / $(mine hello | awk '{print $7}' | median)," \
    "its second $(mine hello | awk '{print $9}' | median) / $(mine hello | awk '{print $10}' | median)"
  first_tenant() { mine tenants | awk '{split($5, f, "/"); print f['"$1"']}' | median; }
  others=$(mine tenants | awk '{for (i = 6; i <= NF; i++) {split($i, g, "/"); print g[1]}}')
  echo "$BIN: first tenant $(first_tenant 1) / $(first_tenant 2); the next $((COLD - 1)), all rounds:" \
    "median $(echo "$others" | median), max $(echo "$others" | sort -n | tail -1) ms to answer"
done
