#!/usr/bin/env bash
# What WebSockets and idle streams cost: memory per idle WebSocket and per idle Server-Sent
# Events stream with OPEN of each open at once, and messages per second (with server CPU per
# message) on one socket, for `filerouter run` and for FastAPI on uvicorn (one worker), in one
# run, on this machine.
#
#   FILEROUTER_BIN=/path/to/filerouter bench/websockets.sh   # default: target/release/filerouter
#   OPEN=1000 MESSAGES=20000 RUNS=3 bench/websockets.sh
#
# Both sides serve the same routes, as each framework writes them:
#   WS  /echo     accepts, then sends back every text message;
#   GET /idle     an SSE stream that sends one event, then sleeps (its keep-alives aside);
#   GET /         {"ok": true}, to know the server is up.
# filerouter's side is a project in a temporary folder, built with `build` and served with
# `run`, its `server["workers"]` and `sandbox["max_streams"]` raised to OPEN + 64 so that OPEN
# connections fit (each holds a sandbox instance); FastAPI's is one file on `uvicorn --workers 1`
# from tests/.venv (FastAPI 0.165 and websockets 17.4, what the tests pin). The client is one
# Python process (asyncio, the websockets package, raw HTTP for SSE).
#
# Figures (median of RUNS for the rates):
#   KiB/socket   (server memory with OPEN idle sockets open - memory before) / OPEN, memory
#                being the proportional set size summed over the server's process tree
#                (Pss, /proc/PID/smaps_rollup: a page mapped N times counts once);
#   KiB/stream   the same for OPEN idle SSE streams;
#   msgs/s       MESSAGES round trips (send, wait for the echo) on one socket, per second;
#   CPU us/msg   the server's CPU time during them (/proc/PID/stat) per round trip.
# Knobs: FILEROUTER_BIN, OPEN (1000), MESSAGES (10000), RUNS (3), PORT (8773), PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
FILEROUTER_BIN="${FILEROUTER_BIN:-$ROOT/target/release/filerouter}"
OPEN="${OPEN:-1000}"
MESSAGES="${MESSAGES:-10000}"
RUNS="${RUNS:-3}"
PORT="${PORT:-8773}"
PYTHON="${PYTHON:-$ROOT/tests/.venv/bin/python}"

[ -x "$FILEROUTER_BIN" ] || { echo "no filerouter binary at $FILEROUTER_BIN (cargo build --release, or set FILEROUTER_BIN)" >&2; exit 1; }
"$PYTHON" -c "import fastapi.sse, uvicorn, websockets" 2>/dev/null || {
  echo "$PYTHON lacks fastapi, uvicorn or websockets: make tests/.venv (tests/openapi/requirements.txt)" >&2; exit 1; }
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
if curl -s -o /dev/null "http://127.0.0.1:$PORT/"; then echo "port $PORT is already in use" >&2; exit 1; fi
ulimit -n "$(( OPEN * 4 + 1024 ))" 2>/dev/null || ulimit -n "$(ulimit -Hn)"

OUT="$(mktemp -d)"
SERVER=""
source bench/proc.sh
killtree() { [ -n "$1" ] || return 0; kill $(tree "$1") 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
cleanup() { killtree "$SERVER"; rm -rf "$OUT"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

cat > "$OUT/peer_ws.py" <<'PY'
import asyncio

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from fastapi.sse import EventSourceResponse

app = FastAPI()


@app.get("/")
def index():
    return {"ok": True}


@app.websocket("/echo")
async def echo(websocket: WebSocket):
    await websocket.accept()
    try:
        while True:
            await websocket.send_text(await websocket.receive_text())
    except WebSocketDisconnect:
        pass


@app.get("/idle", response_class=EventSourceResponse)
async def idle():
    yield {"open": True}
    await asyncio.sleep(3600)
PY

PROJECT="$OUT/project"
mkdir -p "$PROJECT/routes/echo" "$PROJECT/routes/idle"
cat > "$PROJECT/config.py" <<PY
server = {"workers": $(( OPEN + 64 ))}
sandbox = {"max_streams": $(( OPEN + 32 ))}
PY
cat > "$PROJECT/routes/index.py" <<'PY'
def GET(request):
    return {"ok": True}
PY
cat > "$PROJECT/routes/echo/route.py" <<'PY'
from filerouter import WebSocket, WebSocketDisconnect


async def WEBSOCKET(websocket: WebSocket):
    await websocket.accept()
    try:
        while True:
            await websocket.send_text(await websocket.receive_text())
    except WebSocketDisconnect:
        pass
PY
cat > "$PROJECT/routes/idle/route.py" <<'PY'
import asyncio

from filerouter import route
from filerouter.sse import EventSourceResponse


@route(response_class=EventSourceResponse)
async def GET(request):
    yield {"open": True}
    await asyncio.sleep(3600)
PY
if ! "$FILEROUTER_BIN" build --project "$PROJECT" > "$OUT/build.log" 2>&1; then
  cat "$OUT/build.log" >&2; echo "filerouter build failed" >&2; exit 1
fi

# The client. `sockets PORT N`: opens N WebSockets to /echo (each answers one message, so it is
# open), prints "open", waits for a line on stdin, closes them. `streams PORT N`: the same with
# N SSE streams of /idle (each has sent its first event). `rate PORT M`: M round trips on one
# socket, prints "seconds".
cat > "$OUT/client.py" <<'PY'
import asyncio, sys, time
from websockets.asyncio.client import connect

async def sockets(port, n):
    opened = []
    async def one():
        ws = await connect(f"ws://127.0.0.1:{port}/echo", open_timeout=60, ping_interval=None)
        await ws.send("hi")
        await ws.recv()
        opened.append(ws)
    for start in range(0, n, 50):
        await asyncio.gather(*(one() for _ in range(min(50, n - start))))
    print("open", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await asyncio.gather(*(ws.close() for ws in opened))

async def streams(port, n):
    opened = []
    async def one():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /idle HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        await writer.drain()
        seen = b""
        while b"open" not in seen:
            chunk = await reader.read(4096)
            if not chunk:
                raise SystemExit("a stream ended: " + seen.decode(errors="replace")[:200])
            seen += chunk
        opened.append(writer)
    for start in range(0, n, 50):
        await asyncio.gather(*(one() for _ in range(min(50, n - start))))
    print("open", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for writer in opened:
        writer.close()

async def rate(port, m):
    async with connect(f"ws://127.0.0.1:{port}/echo", ping_interval=None) as ws:
        start = time.perf_counter()
        for i in range(m):
            await ws.send("message %d" % i)
            await ws.recv()
        print(f"{time.perf_counter() - start:.4f}")

kind, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
asyncio.run({"sockets": sockets, "streams": streams, "rate": rate}[kind](port, count))
PY

wait_for() { # url pid log
  for _ in $(seq 600); do
    curl -fs -o /dev/null "$1" && return
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  tail -n 30 "$3" >&2; echo "server did not answer $1" >&2; exit 1
}

# Per-connection memory of `kind` (sockets or streams): prints KiB per connection.
held() { # kind
  local before after fifo="$OUT/fifo" client
  before="$(pss_kib "$SERVER")"
  rm -f "$fifo"; mkfifo "$fifo"
  "$PYTHON" "$OUT/client.py" "$1" "$PORT" "$OPEN" < "$fifo" > "$OUT/held.out" 2>&1 &
  client=$!
  exec 7> "$fifo"
  for _ in $(seq 1200); do grep -q open "$OUT/held.out" 2>/dev/null && break; kill -0 "$client" 2>/dev/null || break; sleep 0.1; done
  grep -q open "$OUT/held.out" || { cat "$OUT/held.out" >&2; echo "the $1 did not all open" >&2; exit 1; }
  sleep 2
  after="$(pss_kib "$SERVER")"
  echo >&7; exec 7>&-
  wait "$client" 2>/dev/null || true
  sleep 3   # the connections close and their instances go back
  awk -v a="$after" -v b="$before" -v n="$OPEN" 'BEGIN{printf "%.0f", (a-b)/n}'
}

TICKS="$(getconf CLK_TCK)"
measure() { # label command...
  local label="$1"; shift
  "$@" > "$OUT/$label.log" 2>&1 &
  SERVER=$!
  wait_for "http://127.0.0.1:$PORT/" "$SERVER" "$OUT/$label.log"
  "$PYTHON" "$OUT/client.py" rate "$PORT" 500 > /dev/null   # warm-up
  local rates="" cpus="" t0 t1 took per_socket per_stream
  for _ in $(seq "$RUNS"); do
    t0="$(cpu_ticks "$SERVER")"
    took="$("$PYTHON" "$OUT/client.py" rate "$PORT" "$MESSAGES")"
    t1="$(cpu_ticks "$SERVER")"
    rates="$rates $(awk -v m="$MESSAGES" -v t="$took" 'BEGIN{printf "%.0f", m/t}')"
    cpus="$cpus $(awk -v d="$((t1 - t0))" -v k="$TICKS" -v m="$MESSAGES" 'BEGIN{printf "%.1f", d/k*1e6/m}')"
  done
  per_socket="$(held sockets)"
  per_stream="$(held streams)"
  killtree "$SERVER"; SERVER=""
  median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
  printf "%-18s %12s %12s %10s %12s\n" "$label" "$per_socket" "$per_stream" "$(echo "$rates" | median)" "$(echo "$cpus" | median)"
}

printf "%-18s %12s %12s %10s %12s\n" "server" "KiB/socket" "KiB/stream" "msgs/s" "CPU us/msg"
measure "filerouter run" "$FILEROUTER_BIN" run --project "$PROJECT" --port "$PORT"
measure "fastapi+uvicorn" "$PYTHON" -m uvicorn --app-dir "$OUT" peer_ws:app --port "$PORT" --workers 1 --log-level warning
