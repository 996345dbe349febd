#!/usr/bin/env bash
# Benchmark: many tenants in one `filerouter run --tenants` process, on this machine.
#
#   BUILD_ONLY=1 bench/tenants.sh                           # the projects, once (slow: builds)
#   flock /work/bench.lock bench/tenants.sh                 # TENANTS=100 by default
#   PREV_BIN=/path/to/old/filerouter CONFIGURED=1000 bench/tenants.sh   # both, one run
#
# 1. For each binary measured (this checkout's release build, and PREV_BIN if given: a build
#    cache only opens with the filerouter that wrote it, so each binary has its own projects, in
#    target/bench-tenants/<binary's hash>/), generates TENANTS distinct projects (tNNN: a `/`
#    route, a CPU loop route, a path-parameter route, each answering with its own name) and
#    builds each with that binary's real `filerouter build` (kept between runs).
# 2. Times `filerouter build --force` of one two-route project (compiled-code caches warm).
# 3. Serves all of them from one process, hosts tNNN.bench, and measures:
#    - RSS and PSS (/proc/PID/smaps_rollup: shared pages counted once) with no tenant loaded,
#      then with every tenant loaded; what one idle loaded tenant adds (the second half of the
#      tenants, loaded after the first half filled the memory slots), and the average per
#      loaded tenant with the slots included;
#    - time to a cold tenant's first answer (curl, COLD tenants in turn: median and max);
#    - steady req/s over all tenants (wrk, a Lua script rotating the Host header) and the
#      server's CPU time per request (utime + stime from /proc/PID/stat over the wrk run); the
#      same for one busy tenant alone (as many connections as its concurrency cap);
#    - noisy neighbour (NOISY=1, the default): tenant B's p50/p99 on `/` alone, then again while
#      tenant A floods `/cpu?ms=100` (a 100 ms CPU loop) with FLOOD connections (default: twice
#      its concurrency cap, so it runs at full concurrency with a queue behind); and how A's
#      requests were answered (200 / 503) meanwhile. B is measured paced (bench/paced.py: RATE
#      req/s for PACED_S seconds, open loop) and closed loop (wrk -c4).
# 4. With CONFIGURED above TENANTS, serves again with CONFIGURED tenants in tenants.toml (the
#    ones past TENANTS reuse the projects, each with a data folder of its own, and at most
#    TENANTS are loaded at once) and reports RSS and PSS with none loaded and with TENANTS of
#    them loaded, cold tenants' first answers and CPU per request rotating over the TENANTS
#    loaded, then first answers of COLD tenants past them (each unloads another).
# Knobs: TENANTS, CONFIGURED, COLD, DURATION, FLOOD, CONCURRENCY (tenants' concurrency cap),
# QUEUE, RATE, PACED_S, NOISY, PREV_BIN; BUILD_ONLY=1 stops after step 1 (build the projects
# outside the benchmark lock, then measure).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
. bench/tenant_loads.sh
N="${TENANTS:-100}"
CONFIGURED="${CONFIGURED:-$N}"
COLD="${COLD:-10}"
DURATION="${DURATION:-10s}"
CONCURRENCY="${CONCURRENCY:-4}"
FLOOD="${FLOOD:-$((CONCURRENCY * 2))}"
QUEUE="${QUEUE:-16}"
RATE="${RATE:-50}"
PACED_S="${PACED_S:-30}"
NOISY="${NOISY:-1}"
PORT="${PORT:-8720}"
ADMIN_PORT="${ADMIN_PORT:-8721}"

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
BINARIES=("$ROOT/target/release/filerouter")
[ -n "${PREV_BIN:-}" ] && BINARIES+=("$PREV_BIN")

# The folder of one binary's projects.
work_of() { echo "$ROOT/target/bench-tenants/$(sha256sum "$1" | cut -c1-12)"; }

# 1. Projects, built once each per binary (two builds at a time).
gen() {
  local name="$1" dir="$WORK/$1"
  [ -f "$dir/.cache/bundle.bin" ] && return 0
  mkdir -p "$dir/routes/cpu" "$dir/routes/users/[id]"
  printf 'def GET(request):\n    return {"tenant": "%s"}\n' "$name" > "$dir/routes/index.py"
  printf 'import time\n\ndef GET(request, ms: int = 100):\n    end = time.process_time() + ms / 1000\n    n = 0\n    while time.process_time() < end:\n        n += 1\n    return {"tenant": "%s", "spins": n}\n' "$name" > "$dir/routes/cpu/route.py"
  printf 'def GET(request, id: int):\n    return {"tenant": "%s", "id": id}\n' "$name" > "$dir/routes/users/[id]/route.py"
  "$BIN" build --project "$dir" >"$dir.build.log" 2>&1 || { cat "$dir.build.log" >&2; return 1; }
}
export -f gen
for BIN in "${BINARIES[@]}"; do
  WORK="$(work_of "$BIN")"
  mkdir -p "$WORK"
  export WORK BIN
  started=$(date +%s)
  seq -f 't%03g' 0 $((N - 1)) | xargs -P 2 -I{} bash -c 'gen {}'
  echo "# $BIN: projects ready in $WORK ($(( $(date +%s) - started )) s)" >&2
done
[ -n "${BUILD_ONLY:-}" ] && exit 0

OUT="$(mktemp -d)"
SERVER=""
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null; rm -rf "$OUT"' EXIT

# tenants.toml for `count` tenants: t0000.. reuse the TENANTS projects in turn; past TENANTS
# each has a data folder of its own (else they would share their project's).
write_config() {
  local count="$1" file="$2"
  printf '[server]\nmax_loaded = %d\n\n[defaults]\nmemory_mb = 128\ncpu_ms = 2000\nconcurrency = %d\nqueue = %d\n' "$N" "$CONCURRENCY" "$QUEUE" > "$file"
  for i in $(seq 0 $((count - 1))); do
    local name project
    name=$(printf 't%03d' "$i")
    project=$(printf 't%03d' $((i % N)))
    printf '\n[tenant.%s]\nhosts = ["%s.bench"]\nproject = "%s"\n' "$name" "$name" "$project" >> "$file"
    if [ "$i" -ge "$N" ]; then printf 'data_dir = "../data/%s"\n' "$name" >> "$file"; fi
  done
}

start_server() {
  "$BIN" run --tenants "$1" --port "$PORT" --admin "127.0.0.1:$ADMIN_PORT" >"$OUT/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 300); do curl -fsS "http://127.0.0.1:$ADMIN_PORT/healthz" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "the server did not start:" >&2; cat "$OUT/server.log" >&2; exit 1
}
stop_server() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

# RSS (and its parts: anonymous memory, and pages of mapped files, which the kernel can drop),
# and PSS, in KiB.
memory_kib() {
  awk '/^VmRSS/ {t=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2} END {print t, a, f}' "/proc/$SERVER/status"
  awk '/^Pss:/ {print $2}' "/proc/$SERVER/smaps_rollup"
}
memory() {
  local m
  m=$(memory_kib | tr '\n' ' ')
  awk -v m="$m" 'BEGIN {split(m, v, " "); printf "RSS %.0f MiB (anonymous %.0f, mapped files %.0f), PSS %.0f MiB", v[1]/1024, v[2]/1024, v[3]/1024, v[4]/1024}'
}
pss_kib() { awk '/^Pss:/ {print $2}' "/proc/$SERVER/smaps_rollup"; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$SERVER/status"; }
load_all() { for i in $(seq -f '%03g' "$1" $(($2 - 1))); do curl -fsS -o /dev/null -H "Host: t$i.bench" "http://127.0.0.1:$PORT/"; done; }

# The first answers of tenants `from` to `to` - 1, each not loaded yet, one after the other:
# their times in `times`.
cold_answers() {
  times=()
  for i in $(seq -f '%03g' "$1" $(($2 - 1))); do
    local t
    t=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' -H "Host: t$i.bench" "http://127.0.0.1:$PORT/")
    [ "${t%% *}" = 200 ] || { echo "t$i answered ${t%% *}" >&2; cat "$OUT/server.log" >&2; exit 1; }
    times+=("${t#* }")
  done
}
cold_summary() {
  printf '%s\n' "${times[@]}" | sort -n | awk -v label="$1" '{a[NR]=$1} END {printf "%s: median %.0f ms, max %.0f ms (%d tenants)\n", label, a[int((NR+1)/2)]*1000, a[NR]*1000, NR}'
}

# wrk over `script` (or one host): req/s and CPU per request.
cpu_run() {
  local label="$1" connections="$2" rps ms bad
  shift 2
  read -r rps ms bad < <(wrk_cpu "$SERVER" "$PORT" "$OUT/cpu.txt" -c"$connections" "$@")
  awk -v label="$label" -v c="$connections" -v r="$rps" -v ms="$ms" -v bad="$bad" \
    'BEGIN {printf "%s (wrk -c%d): %.0f req/s, %.2f ms CPU per request, non-2xx %d\n", label, c, r, ms, bad}'
}

measure() {
  WORK="$(work_of "$BIN")"
  echo "== $BIN ($("$BIN" --version)): $N tenants ==" >&2

  # 2. Build time of one two-route project, caches warm (the last of three).
  rm -rf "$OUT/build" && cp -r "$WORK/t000" "$OUT/build" && rm -rf "$OUT/build/.cache"
  for _ in 1 2 3; do
    local t0 t1
    t0=$(date +%s.%N)
    "$BIN" build --force --project "$OUT/build" > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log" >&2; exit 1; }
    t1=$(date +%s.%N)
  done
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "filerouter build --force, a three-route project: %.1f s\n", b - a}'

  # 3. One process, every tenant.
  write_config "$N" "$WORK/tenants.toml"
  start_server "$WORK/tenants.toml"
  echo "with no tenant loaded: $(memory)"
  local pss0 rss0
  pss0=$(pss_kib); rss0=$(rss_kib)
  cold_answers 0 "$COLD"
  cold_summary "cold tenant, first answer"
  local half=$((N / 2)) pss_half rss_half
  load_all "$COLD" "$half"
  pss_half=$(pss_kib); rss_half=$(rss_kib)
  load_all "$half" "$N"
  echo "with all $N tenants loaded: $(memory)"
  # What one more idle tenant costs: the second half's tenants, loaded once and idle since (the
  # process's memory slots, bounded by --workers, are filled by the first half already); and
  # the average over all of them, slots included.
  awk -v p0="$pss_half" -v p1="$(pss_kib)" -v r0="$rss_half" -v r1="$(rss_kib)" -v n="$((N - half))" \
    'BEGIN {printf "one idle loaded tenant adds: PSS %.2f MiB, RSS %.2f MiB (the last %d loaded)\n", (p1 - p0) / n / 1024, (r1 - r0) / n / 1024, n}'
  awk -v p0="$pss0" -v p1="$(pss_kib)" -v r0="$rss0" -v r1="$(rss_kib)" -v n="$N" \
    'BEGIN {printf "average per loaded tenant, memory slots included: PSS %.1f MiB, RSS %.1f MiB\n", (p1 - p0) / n / 1024, (r1 - r0) / n / 1024}'

  write_rotation "$OUT/rotate.lua" "$N"
  cpu_run "rotating over all $N tenants" 32 -s "$OUT/rotate.lua"
  echo "after the rotating run: $(memory)"
  # As many connections as its concurrency cap: more would be shed (503) or queued.
  cpu_run "one busy tenant" "$CONCURRENCY" -H "Host: t001.bench"

  if [ "$NOISY" = 1 ]; then
    # Noisy neighbour: B alone, then B while A floods 100 ms CPU loops. B is measured two ways:
    # - paced (the target's measure): bench/paced.py sends RATE req/s, open loop, so B's latency
    #   is what a steady stream of B's users meets whatever the server does (the client runs at
    #   nice -10: it shares the 2 cores with the flood, and its own delays are not the server's);
    # - closed loop (wrk -c4): B as greedy as A, using both cores when alone, so it can only get
    #   its fair half of them while A floods.
    latency() { awk '/^ +50%/ {p50=$2} /^ +99%/ {p99=$2} END {print p50, p99}' "$1"; }
    paced() { nice -n -10 python3 bench/paced.py "http://127.0.0.1:$PORT/" --host t001.bench --rate "$RATE" --duration "$PACED_S"; }
    echo "tenant B alone, paced ($RATE req/s): $(paced)"
    wrk -t1 -c4 -d"$DURATION" --latency -H "Host: t001.bench" "http://127.0.0.1:$PORT/" > "$OUT/alone.txt"
    echo "tenant B alone, closed loop (wrk -c4): p50/p99 $(latency "$OUT/alone.txt"), $(awk '/Requests\/sec/ {print $2}' "$OUT/alone.txt") req/s"
    local flood_s=$(( PACED_S + ${DURATION%s} + 6 ))
    wrk -t1 -c"$FLOOD" -d"${flood_s}s" -H "Host: t000.bench" "http://127.0.0.1:$PORT/cpu?ms=100" > "$OUT/flood.txt" &
    local flooder=$!
    sleep 3
    echo "tenant B while A floods (A: wrk -c$FLOOD on /cpu?ms=100, cap $CONCURRENCY), paced ($RATE req/s): $(paced)"
    wrk -t1 -c4 -d"$DURATION" --latency -H "Host: t001.bench" "http://127.0.0.1:$PORT/" > "$OUT/noisy.txt"
    echo "tenant B while A floods, closed loop (wrk -c4): p50/p99 $(latency "$OUT/noisy.txt"), $(awk '/Requests\/sec/ {print $2}' "$OUT/noisy.txt") req/s, B non-2xx: $(awk '/Non-2xx/ {print $NF}' "$OUT/noisy.txt")"
    wait $flooder
    echo "tenant A during the flood: $(awk '/requests in/ {print $1}' "$OUT/flood.txt") answers, non-2xx (503 queue full): $(awk '/Non-2xx/ {print $NF}' "$OUT/flood.txt")"
    curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | grep -E '^filerouter_(requests_total|tenant_rejected_total|tenant_cpu_seconds_total)\{tenant="t00[01]"' || true
  fi
  echo "at the end: $(memory)"
  stop_server

  # 4. Many more configured than loaded.
  if [ "$CONFIGURED" -gt "$N" ]; then
    write_config "$CONFIGURED" "$WORK/tenants-$CONFIGURED.toml"
    start_server "$WORK/tenants-$CONFIGURED.toml"
    echo "$CONFIGURED configured, none loaded: $(memory)"
    cold_answers 0 "$COLD"
    cold_summary "$CONFIGURED configured, cold tenant, first answer"
    load_all "$COLD" "$N"
    echo "$CONFIGURED configured, $N loaded: $(memory)"
    cpu_run "$CONFIGURED configured, rotating over the $N loaded" 32 -s "$OUT/rotate.lua"
    # Past max_loaded (= TENANTS): each first answer loads a tenant and unloads the least
    # recently used one.
    cold_answers "$N" "$((N + COLD))"
    cold_summary "$CONFIGURED configured, $N loaded, cold tenant unloading another, first answer"
    echo "$CONFIGURED configured, after those: $(memory)"
    stop_server
  fi
}

for BIN in "${BINARIES[@]}"; do
  measure
done
