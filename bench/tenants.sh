#!/usr/bin/env bash
# Benchmark: many tenants in one `filerouter run --tenants` process, on this machine.
#
#   BUILD_ONLY=1 bench/tenants.sh                  # the projects, once (slow: builds)
#   flock /work/bench.lock bench/tenants.sh        # TENANTS=100 by default
#
# 1. Generates TENANTS distinct projects (target/bench-tenants/tNNN: a `/` route, a CPU loop
#    route, a path-parameter route, each answering with its own name) and builds each with the
#    real `filerouter build` (kept between runs: built once, ~10 s of CPU per tenant).
# 2. Serves all of them from one process, hosts tNNN.bench, and measures:
#    - time to a cold tenant's first answer (curl, COLD tenants in turn: median and max);
#    - RSS with every tenant loaded (and with none: the process alone);
#    - steady req/s over all tenants (wrk, a Lua script rotating the Host header) and the
#      server's CPU time per request (utime + stime from /proc/PID/stat over the wrk run);
#    - noisy neighbour: tenant B's p50/p99 on `/` alone, then again while tenant A floods
#      `/cpu?ms=100` (a 100 ms CPU loop) with FLOOD connections (default: twice its concurrency
#      cap, so it runs at full concurrency with a queue behind); and how A's requests were
#      answered (200 / 503) meanwhile. B is measured paced (bench/paced.py: RATE req/s for
#      PACED_S seconds, open loop) and closed loop (wrk -c4).
# Knobs: TENANTS, COLD, DURATION, FLOOD, CONCURRENCY (tenants' concurrency cap), QUEUE, RATE,
# PACED_S;
# BUILD_ONLY=1 stops after step 1 (build the projects outside the benchmark lock, then measure).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
N="${TENANTS:-100}"
COLD="${COLD:-10}"
DURATION="${DURATION:-10s}"
CONCURRENCY="${CONCURRENCY:-4}"
FLOOD="${FLOOD:-$((CONCURRENCY * 2))}"
QUEUE="${QUEUE:-16}"
RATE="${RATE:-50}"
PACED_S="${PACED_S:-30}"
PORT="${PORT:-8720}"
ADMIN_PORT="${ADMIN_PORT:-8721}"

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet
BIN="$ROOT/target/release/filerouter"
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
WORK="$ROOT/target/bench-tenants"
mkdir -p "$WORK"

# 1. Projects, built once each (two builds at a time).
gen() {
  local name="$1" dir="$WORK/$1"
  [ -f "$dir/.cache/bundle.bin" ] && return 0
  mkdir -p "$dir/routes/cpu" "$dir/routes/users/[id]"
  printf 'def GET(request):\n    return {"tenant": "%s"}\n' "$name" > "$dir/routes/index.py"
  printf 'import time\n\ndef GET(request, ms: int = 100):\n    end = time.process_time() + ms / 1000\n    n = 0\n    while time.process_time() < end:\n        n += 1\n    return {"tenant": "%s", "spins": n}\n' "$name" > "$dir/routes/cpu/route.py"
  printf 'def GET(request, id: int):\n    return {"tenant": "%s", "id": id}\n' "$name" > "$dir/routes/users/[id]/route.py"
  "$BIN" build --project "$dir" >"$dir.build.log" 2>&1 || { cat "$dir.build.log" >&2; return 1; }
}
export -f gen; export WORK BIN
started=$(date +%s)
seq -f 't%03g' 0 $((N - 1)) | xargs -P 2 -I{} bash -c 'gen {}'
echo "# projects ready ($(( $(date +%s) - started )) s)" >&2
[ -n "${BUILD_ONLY:-}" ] && exit 0

CONFIG="$WORK/tenants.toml"
{
  printf '[server]\nmax_loaded = %d\n\n[defaults]\nmemory_mb = 128\ncpu_ms = 2000\nconcurrency = %d\nqueue = %d\n' "$N" "$CONCURRENCY" "$QUEUE"
  for i in $(seq -f '%03g' 0 $((N - 1))); do
    printf '\n[tenant.t%s]\nhosts = ["t%s.bench"]\nproject = "t%s"\n' "$i" "$i" "$i"
  done
} > "$CONFIG"

OUT="$(mktemp -d)"
"$BIN" run --tenants "$CONFIG" --port "$PORT" --admin "127.0.0.1:$ADMIN_PORT" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$OUT"' EXIT
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$ADMIN_PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
# RSS, and its parts: anonymous memory, and pages of mapped files (the tenants' native code and
# snapshot images, mapped from $FILEROUTER_CACHE_DIR/native: page cache the kernel can drop).
rss_mib() {
  awk '/^VmRSS/ {t=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2} END {printf "%.0f MiB (anonymous %.0f, mapped files %.0f)", t/1024, a/1024, f/1024}' "/proc/$SERVER/status"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
HZ=$(getconf CLK_TCK)
echo "== $N tenants, one process (pid $SERVER) ==" >&2
echo "RSS with no tenant loaded: $(rss_mib)"

# 2. Cold first answers.
times=()
for i in $(seq -f '%03g' 0 $((COLD - 1))); do
  t=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' -H "Host: t$i.bench" "http://127.0.0.1:$PORT/")
  [ "${t%% *}" = 200 ] || { echo "t$i answered ${t%% *}" >&2; cat "$OUT/server.log" >&2; exit 1; }
  times+=("${t#* }")
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "cold tenant, first answer: median %.0f ms, max %.0f ms (%d tenants)\n", a[int((NR+1)/2)]*1000, a[NR]*1000, NR}'

# Every other tenant loaded once.
for i in $(seq -f '%03g' "$COLD" $((N - 1))); do
  curl -fsS -o /dev/null -H "Host: t$i.bench" "http://127.0.0.1:$PORT/"
done
echo "RSS with all $N tenants loaded: $(rss_mib)"

# 3. Steady load over all tenants.
cat > "$OUT/rotate.lua" <<LUA
local n, i = $N, 0
request = function()
  i = (i + 1) % n
  return wrk.format("GET", "/", {["Host"] = string.format("t%03d.bench", i)})
end
LUA
before=$(cpu_ticks)
wrk -t1 -c32 -d"$DURATION" -s "$OUT/rotate.lua" "http://127.0.0.1:$PORT/" > "$OUT/steady.txt"
after=$(cpu_ticks)
reqs=$(awk '/requests in/ {print $1}' "$OUT/steady.txt")
rps=$(awk '/Requests\/sec/ {print $2}' "$OUT/steady.txt")
non2xx=$(awk '/Non-2xx/ {print $NF}' "$OUT/steady.txt")
awk -v r="$rps" -v q="$reqs" -v t=$((after - before)) -v hz="$HZ" -v bad="${non2xx:-0}" \
  'BEGIN {printf "steady, all tenants in turn (wrk -c32): %.0f req/s, %.2f ms CPU per request, non-2xx %s\n", r, t * 1000 / hz / q, bad}'
echo "RSS after the steady run: $(rss_mib)"

# 4. Noisy neighbour: B alone, then B while A floods 100 ms CPU loops. B is measured two ways:
#    - paced (the target's measure): bench/paced.py sends RATE req/s, open loop, so B's latency
#      is what a steady stream of B's users meets whatever the server does (the client runs at
#      nice -10: it shares the 2 cores with the flood, and its own delays are not the server's);
#    - closed loop (wrk -c4): B as greedy as A, using both cores when alone, so it can only get
#      its fair half of them while A floods.
latency() { awk '/^ +50%/ {p50=$2} /^ +99%/ {p99=$2} END {print p50, p99}' "$1"; }
paced() { nice -n -10 python3 bench/paced.py "http://127.0.0.1:$PORT/" --host t001.bench --rate "$RATE" --duration "$PACED_S"; }
echo "tenant B alone, paced ($RATE req/s): $(paced)"
wrk -t1 -c4 -d"$DURATION" --latency -H "Host: t001.bench" "http://127.0.0.1:$PORT/" > "$OUT/alone.txt"
echo "tenant B alone, closed loop (wrk -c4): p50/p99 $(latency "$OUT/alone.txt"), $(awk '/Requests\/sec/ {print $2}' "$OUT/alone.txt") req/s"
flood_s=$(( PACED_S + ${DURATION%s} + 6 ))
wrk -t1 -c"$FLOOD" -d"${flood_s}s" -H "Host: t000.bench" "http://127.0.0.1:$PORT/cpu?ms=100" > "$OUT/flood.txt" &
FLOODER=$!
sleep 3
echo "tenant B while A floods (A: wrk -c$FLOOD on /cpu?ms=100, cap $CONCURRENCY), paced ($RATE req/s): $(paced)"
wrk -t1 -c4 -d"$DURATION" --latency -H "Host: t001.bench" "http://127.0.0.1:$PORT/" > "$OUT/noisy.txt"
echo "tenant B while A floods, closed loop (wrk -c4): p50/p99 $(latency "$OUT/noisy.txt"), $(awk '/Requests\/sec/ {print $2}' "$OUT/noisy.txt") req/s, B non-2xx: $(awk '/Non-2xx/ {print $NF}' "$OUT/noisy.txt")"
wait $FLOODER
echo "tenant A during the flood: $(awk '/requests in/ {print $1}' "$OUT/flood.txt") answers, non-2xx (503 queue full): $(awk '/Non-2xx/ {print $NF}' "$OUT/flood.txt")"
curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | grep -E '^filerouter_(requests_total|tenant_rejected_total|tenant_cpu_seconds_total)\{tenant="t00[01]"' || true
echo "RSS at the end: $(rss_mib)"
