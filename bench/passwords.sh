#!/usr/bin/env bash
# A bcrypt cost-12 verify inside a request against the same verify in native Python on this
# machine, in one run: the host computes the sandbox's `bcrypt` (README, "Password hashing").
#
#   bench/passwords.sh            # N=20 requests, one at a time
#   FILEROUTER_BIN=/path/to/older/filerouter bench/passwords.sh   # another build (no cargo build)
#
# filerouter: `run` of a one-route project (from a build) whose GET checks a password against a
# cost-12 hash made by PyPI's bcrypt; N requests one after the other with curl, after two
# warm-up requests. Latency is curl's total time per request (median and max); CPU is the
# server's utime + stime from /proc/PID/stat over the N requests, divided by N (everything the
# request costs: instance, Python, the hash).
# Native: CPython with PyPI's bcrypt (the pinned one of tests/openapi/requirements.txt, in
# bench/.venv-passwords), `bcrypt.checkpw` of the same password and hash, N times: wall time
# per verify (median and max, perf_counter) and CPU (process_time) per verify.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
N="${N:-20}"
PORT=8761
PASSWORD="correct horse battery staple"
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
VENV="$ROOT/bench/.venv-passwords"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "$(grep -i '^bcrypt==' tests/openapi/requirements.txt)"
fi
if [ -n "${FILEROUTER_BIN:-}" ]; then
  BIN="$(realpath "$FILEROUTER_BIN")"
else
  cargo build --release --quiet
  BIN="$ROOT/target/release/filerouter"
fi
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
OUT="$(mktemp -d)"
SERVER=""
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$OUT"; }
trap cleanup EXIT

HASH="$("$VENV/bin/python" -c "import bcrypt; print(bcrypt.hashpw(b'$PASSWORD', bcrypt.gensalt(12)).decode())")"
mkdir -p "$OUT/project/routes/verify"
cat > "$OUT/project/routes/verify/route.py" <<EOF
import bcrypt

HASH = b"$HASH"


def GET(request):
    return {"ok": bcrypt.checkpw(b"$PASSWORD", HASH)}
EOF
"$BIN" build --project "$OUT/project" >/dev/null 2>&1
"$BIN" run --project "$OUT/project" --port "$PORT" >/dev/null 2>&1 &
SERVER=$!
for _ in $(seq 400); do curl -fs "http://127.0.0.1:$PORT/verify" >/dev/null && break; sleep 0.05; done
curl -fs "http://127.0.0.1:$PORT/verify" | grep -q '"ok":true' || { echo "the route did not verify" >&2; exit 1; }

cpu() { local f; f=($(sed 's/^.*) //' /proc/"$SERVER"/stat)); echo $((f[11] + f[12])); }
t0="$(cpu)"
for _ in $(seq "$N"); do
  curl -fs -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$PORT/verify" >> "$OUT/latency.txt"
done
t1="$(cpu)"
kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""

"$VENV/bin/python" - "$HASH" "$PASSWORD" "$N" "$OUT/latency.txt" "$((t1 - t0))" "$(getconf CLK_TCK)" <<'PY'
import statistics, sys, time
import bcrypt
hashed, password, n = sys.argv[1].encode(), sys.argv[2].encode(), int(sys.argv[3])
latency = [float(x) * 1000 for x in open(sys.argv[4])]
cpu = int(sys.argv[5]) / int(sys.argv[6]) * 1000 / n
bcrypt.checkpw(password, hashed)
walls, cpus = [], []
for _ in range(n):
    w, c = time.perf_counter(), time.process_time()
    assert bcrypt.checkpw(password, hashed)
    walls.append((time.perf_counter() - w) * 1000)
    cpus.append((time.process_time() - c) * 1000)
print(f"bcrypt cost 12, checkpw, {n} times each, one at a time")
print("| where | latency ms (median) | latency ms (max) | CPU ms / verify |")
print("|---|---|---|---|")
print(f"| filerouter run, GET /verify (a request) | {statistics.median(latency):.1f} | {max(latency):.1f} | {cpu:.1f} |")
print(f"| native CPython {sys.version.split()[0]}, bcrypt {bcrypt.__version__} | {statistics.median(walls):.1f} | {max(walls):.1f} | {statistics.median(cpus):.1f} |")
PY
