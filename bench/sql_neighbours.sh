#!/usr/bin/env bash
# Benchmark: does heavy SQL of one tenant slow another tenant down? (issue 40, point 3)
#
#   flock /work/bench.lock bench/sql_neighbours.sh
#   PREV_BIN=/path/to/older/filerouter flock /work/bench.lock bench/sql_neighbours.sh   # and an older binary, same run
#
# Two tenants in one `filerouter run --tenants --workers 16`: a victim whose `/` answers a
# small JSON, and an attacker whose `/heavy` runs ONE statement that is heavy however SQLite
# runs it (a `LIKE` of a 9,000-character pattern against a 2 MB text: quadratic, stopped at the
# request's 5 s deadline), and `/instr` (the reported call: `instr` of a 1.2 MB needle in a
# 2.4 MB text). The victim's latency on `/` is measured paced (bench/paced.py: RATE req/s for
# PACED_S s, open loop), first alone, then while ATTACK connections (default 12) keep the
# attacker's route busy. Each line gives the victim's p50/p99/max and the p99 against alone,
# the same as the server timed it (its access log), and at the end the server's CPU time per
# request and the attacker's CPU as the tenant metric counts it
# (`filerouter_tenant_cpu_seconds_total`, from the admin port) beside the process's.
#
# The client runs in the real-time class when it may (`chrt -f`), so that the latency it
# measures is the server's and not its own wait for a CPU on this same machine. A reference
# line comes first: the victim beside ATTACK idle-class busy loops that are not filerouter at
# all, the floor that no scheduling inside the server goes below.
# Knobs: RATE, PACED_S, ATTACK, WORKERS, PREV_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
RATE="${RATE:-50}"
PACED_S="${PACED_S:-20}"
ATTACK="${ATTACK:-12}"
WORKERS="${WORKERS:-16}"
PORT="${PORT:-8740}"
ADMIN="${ADMIN:-8741}"

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet
BIN="$ROOT/target/release/filerouter"
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
WORK="$ROOT/target/bench-sql-neighbours"
mkdir -p "$WORK"

gen() {
  local bin="$1" dir="$2"
  [ -f "$dir/victim/.cache/bundle.bin" ] && [ -f "$dir/attacker/.cache/bundle.bin" ] && return 0
  mkdir -p "$dir/victim/routes" "$dir/attacker/routes/heavy" "$dir/attacker/routes/instr"
  printf 'def GET(request):\n    return {"tenant": "victim"}\n' > "$dir/victim/routes/index.py"
  printf 'def GET(request):\n    return {"tenant": "attacker"}\n' > "$dir/attacker/routes/index.py"
  cat > "$dir/attacker/routes/heavy/route.py" <<'PY'
import sqlite3

TEXT = "a" * 2_000_000
PATTERN = "%" + "a" * 9_000 + "b"

def GET(request):
    conn = sqlite3.connect("app.db")
    try:
        return {"match": conn.execute("SELECT ? LIKE ?", (TEXT, PATTERN)).fetchone()[0]}
    except sqlite3.Error as e:
        return {"stopped": str(e)}
PY
  cat > "$dir/attacker/routes/instr/route.py" <<'PY'
import sqlite3

HAY = "a" * 2_400_000
NEEDLE = "a" * 1_200_000 + "b"

def GET(request):
    conn = sqlite3.connect("app.db")
    return {"at": conn.execute("SELECT instr(?, ?)", (HAY, NEEDLE)).fetchone()[0]}
PY
  for p in victim attacker; do
    "$bin" build --project "$dir/$p" >"$dir/$p.build.log" 2>&1 || { cat "$dir/$p.build.log" >&2; return 1; }
  done
}

HZ=$(getconf CLK_TCK)
if chrt -f 10 true 2>/dev/null; then CLIENT="chrt -f 10"; else CLIENT="nice -n -10"; fi
measure() {
  local bin="$1" label="$2" work="$3"
  mkdir -p "$work"
  gen "$bin" "$work"
  local config="$work/tenants.toml"
  printf '[defaults]\nmemory_mb = 256\ncpu_ms = 30000\nwall_s = 5\nconcurrency = 16\nqueue = 64\n' > "$config"
  for name in victim attacker; do
    printf '\n[tenant.%s]\nhosts = ["%s.bench"]\nproject = "%s"\ndata_dir = "%s/%s-data"\n' "$name" "$name" "$name" "$work" "$name" >> "$config"
  done
  local out; out="$(mktemp -d)"
  RUST_LOG=access=info,warn "$bin" run --tenants "$config" --port "$PORT" --admin "127.0.0.1:$ADMIN" --workers "$WORKERS" >"$out/server.log" 2>&1 &
  local server=$!
  for _ in $(seq 100); do curl -fsS -o /dev/null -H 'Host: victim.bench' "http://127.0.0.1:$PORT/" 2>/dev/null && break; sleep 0.1; done
  curl -fsS -o /dev/null -H 'Host: attacker.bench' "http://127.0.0.1:$PORT/"
  paced() { $CLIENT python3 bench/paced.py "http://127.0.0.1:$PORT/" --host victim.bench --rate "$RATE" --duration "$PACED_S"; }
  # The victim's answers as the server timed them, from access-log line $1 on.
  server_side() {
    tail -n +"$1" "$out/server.log" | { grep -E ' GET / 200 ' || true; } | sed -E 's/.* ([0-9.]+)ms.*/\1/' | sort -n |
      awk '{a[NR] = $1} END {if (NR) printf "server-side p50 %.1f ms, p99 %.1f ms", a[int(NR * 0.5) + 1], a[int(NR * 0.99) + 1]}'
  }
  local from; from=$(($(wc -l <"$out/server.log") + 1))
  local alone; alone=$(paced)
  echo "$label: victim alone, paced ($RATE req/s): $alone; $(server_side "$from")"
  local alone_p99; alone_p99=$(sed -E 's/.*p99 ([0-9.]+) ms.*/\1/' <<<"$alone")
  local spinners=()
  for _ in $(seq "$ATTACK"); do chrt -i 0 python3 -c 'while True: pass' & spinners+=($!); done
  sleep 1
  from=$(($(wc -l <"$out/server.log") + 1))
  local floor; floor=$(paced)
  kill "${spinners[@]}"; wait "${spinners[@]}" 2>/dev/null || true
  echo "$label: victim beside $ATTACK idle-class busy loops (not filerouter): $floor; p99 $(awk -v a="$alone_p99" -v b="$(sed -E 's/.*p99 ([0-9.]+) ms.*/\1/' <<<"$floor")" 'BEGIN {printf "%+.0f%%", (b / a - 1) * 100}') against alone; $(server_side "$from")"
  for attack in heavy instr; do
    local before; before=$(awk '{print $14 + $15}' "/proc/$server/stat")
    local metric_before; metric_before=$(curl -fsS "http://127.0.0.1:$ADMIN/metrics" | awk '/^filerouter_tenant_cpu_seconds_total\{tenant="attacker"\}/ {print $2}')
    wrk -t1 -c"$ATTACK" -d"$((PACED_S + 4))s" --timeout 30s -H "Host: attacker.bench" "http://127.0.0.1:$PORT/$attack" >"$out/attack.txt" 2>&1 &
    local wrk_pid=$!
    sleep 2
    from=$(($(wc -l <"$out/server.log") + 1))
    local noisy; noisy=$(paced)
    wait "$wrk_pid"
    sleep 6
    local after; after=$(awk '{print $14 + $15}' "/proc/$server/stat")
    local metric_after; metric_after=$(curl -fsS "http://127.0.0.1:$ADMIN/metrics" | awk '/^filerouter_tenant_cpu_seconds_total\{tenant="attacker"\}/ {print $2}')
    local p99; p99=$(sed -E 's/.*p99 ([0-9.]+) ms.*/\1/' <<<"$noisy")
    local served; served=$(awk '/requests in/ {print $1}' "$out/attack.txt")
    echo "$label: victim while $ATTACK connections run /$attack: $noisy; p99 $(awk -v a="$alone_p99" -v b="$p99" 'BEGIN {printf "%+.0f%%", (b / a - 1) * 100}') against alone; $(server_side "$from"); attacker answered $served"
    awk -v t=$((after - before)) -v hz="$HZ" -v m0="${metric_before:-0}" -v m1="${metric_after:-0}" -v l="$label" \
      'BEGIN {printf "%s: server CPU %.1f s over the attack; the attacker tenant charged %.1f s\n", l, t / hz, m1 - m0}'
  done
  kill "$server"; wait "$server" 2>/dev/null || true
  rm -rf "$out"
}

work_of() { echo "$WORK/$(sha256sum "$1" | cut -c1-12)"; }
measure "$BIN" "this build" "$(work_of "$BIN")"
if [ -n "${PREV_BIN:-}" ]; then
  measure "$PREV_BIN" "previous ($PREV_BIN)" "$(work_of "$PREV_BIN")"
fi
