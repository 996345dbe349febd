#!/usr/bin/env bash
# What recording costs (issue 47): CPU time per request of `filerouter run` on the blog example,
# recording off, on with nothing kept (--record: every request taped in memory, only 5xx kept,
# and this load has none), and on with every trace kept (--record-sample 1: each request's tape
# serialized, redacted and written to disk, the store pruned to its bounds); and the bytes of a
# kept trace. CPU is utime + stime of the server from /proc/PID/stat (bench/proc.sh) before and
# after a fixed wrk load, divided by the requests wrk completed.
#
#   bench/replay.sh                      # GET /posts/1 and GET /posts (a list of 10 posts)
#   DURATION=20s CONNS=8 RUNS=5 bench/replay.sh
#   PREV=/work/prev-47/target/release/filerouter bench/replay.sh
#
# Knobs: DURATION (10s), CONNS (8), RUNS (3: the median is printed), ENDPOINTS, PREV (a
# filerouter binary from before recording existed: its "off" is measured too, on a build it
# made itself, so "off" can be compared with a binary that has no recording code at all).
# The variants run interleaved (each run of each variant in turn), so a change in the
# machine's load spreads over all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DURATION="${DURATION:-10s}"
CONNS="${CONNS:-8}"
RUNS="${RUNS:-3}"
ENDPOINTS="${ENDPOINTS:-/posts/1 /posts}"
PORT=8770
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
BIN="$ROOT/target/release/filerouter"
OUT="$(mktemp -d)"
SERVER=""
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null
  rm -rf "$OUT"
}
trap cleanup EXIT
source bench/proc.sh

cp -r examples/blog "$OUT/blog" && rm -rf "$OUT/blog/.cache" "$OUT/blog/.data"
"$BIN" build --project "$OUT/blog" >/dev/null 2>&1
PREV="${PREV:-}"
if [ -n "$PREV" ]; then
  cp -r examples/blog "$OUT/blog-prev" && rm -rf "$OUT/blog-prev/.cache" "$OUT/blog-prev/.data"
  "$PREV" build --project "$OUT/blog-prev" >/dev/null 2>&1
fi

# start LABEL FLAGS...: a fresh data folder with 10 posts, the server's pid in SERVER. The
# label off-prev runs PREV on its own build.
start() {
  local label="$1"; shift
  local bin="$BIN" project="$OUT/blog"
  if [ "$label" = off-prev ]; then bin="$PREV"; project="$OUT/blog-prev"; fi
  rm -rf "$project/.data"
  "$bin" run --project "$project" --port "$PORT" --migrate --no-access-log "$@" \
    >"$OUT/$label.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/posts" >/dev/null 2>&1 && break
    sleep 0.1
  done
  for i in $(seq 1 10); do
    curl -sf -X POST -H 'content-type: application/json' \
      -d "{\"title\":\"post $i\",\"body\":\"$(printf 'text %.0s' $(seq 1 20))\"}" \
      "http://127.0.0.1:$PORT/posts" >/dev/null
  done
}

stop() { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

# measure ENDPOINT: "microseconds-of-CPU-per-request requests-per-second" for one wrk load.
measure() {
  local url="http://127.0.0.1:$PORT$1" before after out reqs secs hz
  wrk -t1 -c"$CONNS" -d2s "$url" >/dev/null 2>&1   # warm-up
  before="$(cpu_ticks "$SERVER")"
  out="$(wrk -t1 -c"$CONNS" -d"$DURATION" "$url")"
  after="$(cpu_ticks "$SERVER")"
  reqs="$(echo "$out" | awk '/requests in/ {print $1}')"
  secs="$(echo "$out" | awk '/Requests\/sec/ {print $2}')"
  hz="$(getconf CLK_TCK)"
  echo "$(( (after - before) * 1000000 / hz / reqs )) $secs"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf '%-28s %-12s %14s %10s\n' variant endpoint "CPU µs/req" "req/s"
declare -A FLAGS=(
  [off-prev]=""
  [off]=""
  [record]="--record"
  [record-keep-all]="--record --record-sample 1 --record-max 1000 --record-max-mb 512"
)
VARIANTS="off record record-keep-all"
[ -n "$PREV" ] && VARIANTS="off-prev $VARIANTS"
declare -A CPUS RATES
for endpoint in $ENDPOINTS; do
  for _ in $(seq 1 "$RUNS"); do
    for variant in $VARIANTS; do
      # shellcheck disable=SC2086
      start "$variant" ${FLAGS[$variant]}
      read -r cpu rate < <(measure "$endpoint")
      CPUS[$variant]+="$cpu "; RATES[$variant]+="$rate "
      stop
    done
  done
  for variant in $VARIANTS; do
    printf '%-28s %-12s %14s %10s   (runs: %s)\n' "$variant" "$endpoint" \
      "$(printf '%s\n' ${CPUS[$variant]} | median)" "$(printf '%s\n' ${RATES[$variant]} | median)" \
      "${CPUS[$variant]% }"
    CPUS[$variant]=""; RATES[$variant]=""
  done
done

# Bytes per kept trace, per endpoint: one request each, recorded and kept.
start bytes --record --record-sample 1
for endpoint in $ENDPOINTS; do
  rm -rf "$OUT/blog/.data/traces"
  curl -sf "http://127.0.0.1:$PORT$endpoint" >/dev/null
  sleep 1
  printf 'bytes per trace, GET %-12s %s\n' "$endpoint" \
    "$(cat "$OUT"/blog/.data/traces/*.json | wc -c)"
done
stop
