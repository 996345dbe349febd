#!/usr/bin/env bash
# Benchmark: can a group of tenants fill the instance pool? (issue 30, point 2)
#
#   flock /work/bench.lock bench/neighbours.sh
#   PREV_BIN=/path/to/older/filerouter flock /work/bench.lock bench/neighbours.sh   # and an older binary, same run
#
# Five tenants in one `filerouter run --tenants --workers 16`, every one at `concurrency = 4`:
# four attackers and a victim (projects in target/bench-neighbours, built once). The victim's
# latency on `/` is measured paced (bench/paced.py: RATE req/s for PACED_S s, open loop), first
# alone, then while the four attackers each keep ATTACK connections (default 8: their
# concurrency cap, and as many queued behind) busy on
#   - `/sleep?s=4.5` (a handler blocked in `time.sleep`: holds an instance, uses no CPU), then
#   - `/cpu?ms=500` (a 500 ms CPU loop).
# Each line gives the victim's p50/p99/max as its client saw them and the p99 against the alone
# figure, then the p50/p99 the server timed (its access log: from the request's head read to
# the answer ready; the client's own wake-ups and the network left out), and at the end the
# server's CPU time per request over the whole run (utime + stime from /proc/PID/stat).
# Knobs: RATE, PACED_S, ATTACK, WORKERS, PREV_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
RATE="${RATE:-50}"
PACED_S="${PACED_S:-20}"
ATTACK="${ATTACK:-8}"
WORKERS="${WORKERS:-16}"
PORT="${PORT:-8730}"

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet
BIN="$ROOT/target/release/filerouter"
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
WORK="$ROOT/target/bench-neighbours"
mkdir -p "$WORK"

# The projects, built once each by each binary (in target/bench-neighbours/<binary's hash>/).
gen() {
  local bin="$1" name="$2" dir="$3/$2"
  [ -f "$dir/.cache/bundle.bin" ] && return 0
  mkdir -p "$dir/routes/cpu" "$dir/routes/sleep"
  printf 'def GET(request):\n    return {"tenant": "%s"}\n' "$name" > "$dir/routes/index.py"
  printf 'import time\n\ndef GET(request, ms: int = 500):\n    end = time.process_time() + ms / 1000\n    n = 0\n    while time.process_time() < end:\n        n += 1\n    return {"spins": n}\n' > "$dir/routes/cpu/route.py"
  printf 'import time\n\ndef GET(request, s: float = 4.5):\n    time.sleep(s)\n    return {"slept": s}\n' > "$dir/routes/sleep/route.py"
  "$bin" build --project "$dir" >"$dir.build.log" 2>&1 || { cat "$dir.build.log" >&2; return 1; }
}

HZ=$(getconf CLK_TCK)
measure() {
  local bin="$1" label="$2" work="$3"
  mkdir -p "$work"
  for name in a1 a2 a3 a4 victim; do gen "$bin" "$name" "$work"; done
  local config="$work/tenants.toml"
  {
    printf '[defaults]\nmemory_mb = 128\ncpu_ms = 2000\nwall_s = 10\nconcurrency = 4\nqueue = 64\n'
    for name in a1 a2 a3 a4 victim; do
      printf '\n[tenant.%s]\nhosts = ["%s.bench"]\nproject = "%s"\n' "$name" "$name" "$name"
    done
  } > "$config"
  local out; out="$(mktemp -d)"
  RUST_LOG=access=info,warn "$bin" run --tenants "$config" --port "$PORT" --workers "$WORKERS" >"$out/server.log" 2>&1 &
  local server=$!
  for _ in $(seq 100); do curl -fsS -o /dev/null -H 'Host: victim.bench' "http://127.0.0.1:$PORT/" 2>/dev/null && break; sleep 0.1; done
  for name in a1 a2 a3 a4; do curl -fsS -o /dev/null -H "Host: $name.bench" "http://127.0.0.1:$PORT/"; done
  local before; before=$(awk '{print $14 + $15}' "/proc/$server/stat")
  paced() { nice -n -10 python3 bench/paced.py "http://127.0.0.1:$PORT/" --host victim.bench --rate "$RATE" --duration "$PACED_S"; }
  # The victim's answers as the server timed them, from access-log line $1 on (only the
  # victim asks for `/` while the paced client runs).
  server_side() {
    tail -n +"$1" "$out/server.log" | { grep -E ' GET / 200 ' || true; } | sed -E 's/.* ([0-9.]+)ms.*/\1/' | sort -n |
      awk '{a[NR] = $1} END {if (NR) printf "server-side p50 %.1f ms, p99 %.1f ms", a[int(NR * 0.5) + 1], a[int(NR * 0.99) + 1]}'
  }
  local from; from=$(($(wc -l <"$out/server.log") + 1))
  local alone; alone=$(paced)
  echo "$label: victim alone, paced ($RATE req/s): $alone; $(server_side "$from")"
  local alone_p99; alone_p99=$(sed -E 's/.*p99 ([0-9.]+) ms.*/\1/' <<<"$alone")
  local answers=$((RATE * PACED_S))
  for attack in "sleep?s=4.5" "cpu?ms=500"; do
    local pids=()
    for name in a1 a2 a3 a4; do
      wrk -t1 -c"$ATTACK" -d"$((PACED_S + 6))s" --timeout 20s -H "Host: $name.bench" "http://127.0.0.1:$PORT/$attack" >"$out/$name.txt" 2>&1 &
      pids+=($!)
    done
    sleep 3
    from=$(($(wc -l <"$out/server.log") + 1))
    local noisy; noisy=$(paced)
    wait "${pids[@]}"
    local p99; p99=$(sed -E 's/.*p99 ([0-9.]+) ms.*/\1/' <<<"$noisy")
    local served; served=$(cat "$out"/a?.txt | awk '/requests in/ {n += $1} END {print n}')
    answers=$((answers + RATE * PACED_S + served))
    echo "$label: victim while 4 tenants x $ATTACK connections run /$attack: $noisy; p99 $(awk -v a="$alone_p99" -v b="$p99" 'BEGIN {printf "%+.0f%%", (b / a - 1) * 100}') against alone; $(server_side "$from"); attackers answered $served"
  done
  local after; after=$(awk '{print $14 + $15}' "/proc/$server/stat")
  awk -v t=$((after - before)) -v hz="$HZ" -v q="$answers" -v l="$label" \
    'BEGIN {printf "%s: server CPU %.2f ms per answer over the run (%d answers)\n", l, t * 1000 / hz / q, q}'
  kill "$server"; wait "$server" 2>/dev/null || true
  rm -rf "$out"
}

# A build cache opens only with the filerouter that wrote it: each binary has its projects.
work_of() { echo "$WORK/$(sha256sum "$1" | cut -c1-12)"; }
measure "$BIN" "this build" "$(work_of "$BIN")"
if [ -n "${PREV_BIN:-}" ]; then
  measure "$PREV_BIN" "previous ($PREV_BIN)" "$(work_of "$PREV_BIN")"
fi
