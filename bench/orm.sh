#!/usr/bin/env bash
# What an ORM request costs on each backend: bench/projects/sqlalchemy-blog (SQLAlchemy 2's ORM,
# `create_engine(db.url())`) under `filerouter run` on SQLite and on Postgres, against the same
# models and handlers in FastAPI + SQLAlchemy (bench/projects/sqlalchemy-blog/fastapi_app.py, one
# uvicorn worker) on a SQLite file and on the same Postgres (psycopg 3); all in one run.
#
#   flock /work/bench.lock bench/orm.sh
#   FILEROUTER_BIN=target/release/filerouter bench/orm.sh    # an existing binary (no cargo build)
#
# Two endpoints: GET /posts/1 (one post and its comments: two SELECTs) and POST /posts (one
# INSERT, committed; a wrk Lua script sends a unique title per request). Each server and
# endpoint starts on a fresh database with the project's migrations (a new SQLite folder, or a
# Postgres database made for it), and gets post 1 before the load. Then a warm-up, and RUNS
# times wrk -t1 -c$CONNS -d$DURATION on loopback; /proc/PID/stat before and after gives the CPU
# time of the server's process tree, divided by the requests completed, and, on Postgres, the
# CPU of the database server's processes beside it (the same work for both servers, or not:
# that is what the column shows). The median run is printed.
#
# Postgres is Debian's (`postgresql`): a throwaway cluster in a temporary folder on a free
# port, run as the `postgres` user. Without it the Postgres rows are left out.
# Knobs: DURATION (10s), CONNS (8), RUNS (3), WARMUP (2s), FILEROUTER_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DURATION="${DURATION:-10s}"
CONNS="${CONNS:-8}"
RUNS="${RUNS:-3}"
WARMUP="${WARMUP:-2s}"
PORT=8763
PGPORT=8764
PROJECT="$ROOT/bench/projects/sqlalchemy-blog"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
VENV="$ROOT/bench/.venv-orm"
if [ ! -x "$VENV/bin/uvicorn" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r bench/peer/requirements.txt \
    SQLAlchemy==2.0.58 "psycopg[binary]==3.3.2"
fi
if [ -n "${FILEROUTER_BIN:-}" ]; then
  BIN="$(realpath "$FILEROUTER_BIN")"
else
  cargo build --release --quiet
  BIN="$ROOT/target/release/filerouter"
fi
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$ROOT/target/filerouter-cache}"
OUT="$(mktemp -d)"
chmod 755 "$OUT"
SERVER=""
PG=""
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null
  [ -n "$PG" ] && su postgres -c "$PG/pg_ctl -D $OUT/pg -m immediate stop" >/dev/null 2>&1
  rm -rf "$OUT"
}
trap cleanup EXIT

# The project, its packages installed and built once.
cp -r "$PROJECT" "$OUT/blog"
rm -rf "$OUT/blog/.data" "$OUT/blog/.cache"
"$BIN" packages install --project "$OUT/blog" >/dev/null
"$BIN" build --project "$OUT/blog" >/dev/null 2>&1

# Postgres, if this machine has it.
PG="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
if [ -n "$PG" ]; then
  mkdir "$OUT/pg" && chown postgres "$OUT/pg"
  su postgres -c "$PG/initdb -D $OUT/pg -U postgres --auth=trust" >/dev/null
  su postgres -c "$PG/pg_ctl -D $OUT/pg -o '-p $PGPORT -k $OUT/pg -c listen_addresses=127.0.0.1' -l $OUT/pg/log start" >/dev/null
  psql() { command psql -q -h 127.0.0.1 -p "$PGPORT" -U postgres "$@"; }
fi
new_database() { # name: a role and a database of that name; prints its URL
  psql -c "CREATE ROLE $1 LOGIN CREATEROLE PASSWORD 'bench'" >/dev/null
  psql -c "CREATE DATABASE $1 OWNER $1" >/dev/null
  echo "postgres://$1:bench@127.0.0.1:$PGPORT/$1"
}

cat > "$OUT/post.lua" <<'EOF'
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local prefix, n = "", 0
function init(args)
  prefix = (args[1] or "post") .. "-" .. tostring(tid)
end
function request()
  n = n + 1
  return wrk.format("POST", "/posts", {["Content-Type"] = "application/json"},
    string.format('{"title":"%s-%d","body":"A post written by bench/orm.sh."}', prefix, n))
end
EOF

source bench/proc.sh
start() { # command... ; sets SERVER and waits for the first answer
  "$@" >"$OUT/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1200); do curl -fs "http://127.0.0.1:$PORT/posts" >/dev/null && return; sleep 0.05; done
  echo "server did not start: $*" >&2; cat "$OUT/server.log" >&2; exit 1
}
stop() { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=""; }
pg_ticks() { # CPU ticks of the Postgres server's processes
  [ -n "$PG" ] || { echo 0; return; }
  cpu_ticks "$(head -n 1 "$OUT/pg/postmaster.pid")"
}
load() { # endpoint duration tag
  local url="http://127.0.0.1:$PORT${1#* }"
  if [ "${1%% *}" = POST ]; then
    wrk -t1 -c"$CONNS" -d"$2" -s "$OUT/post.lua" "$url" -- "$3"
  else
    wrk -t1 -c"$CONNS" -d"$2" "$url"
  fi
}

k=0
measure() { # label backend (sqlite|postgres)
  local label="$1" backend="$2" endpoint
  for endpoint in "GET /posts/1" "POST /posts"; do
    k=$((k + 1))
    local where
    if [ "$backend" = postgres ]; then
      where="$(new_database "bench$k")"
    else
      where="$OUT/data-$k"
      mkdir -p "$where"
    fi
    case "$label" in
      filerouter*)
        if [ "$backend" = postgres ]; then
          start "$BIN" run --project "$OUT/blog" --port "$PORT" --database-url "$where" --migrate
        else
          start "$BIN" run --project "$OUT/blog" --port "$PORT" --data-dir "$where" --migrate
        fi ;;
      *)
        local url
        if [ "$backend" = postgres ]; then
          psql -d "bench$k" -U "bench$k" -f "$PROJECT/migrations/0001_blog.postgres.sql" >/dev/null
          url="postgresql+psycopg://${where#postgres://}"
        else
          "$VENV/bin/python" -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(open(sys.argv[2]).read()); c.execute('PRAGMA journal_mode=WAL')" \
              "$where/blog.db" "$PROJECT/migrations/0001_blog.sql"
          url="sqlite:///$where/blog.db"
        fi
        start env DATABASE_URL="$url" "$VENV/bin/uvicorn" fastapi_app:app --app-dir "$PROJECT" \
          --port "$PORT" --log-level warning ;;
    esac
    curl -fs -o /dev/null -H 'Content-Type: application/json' \
      -d '{"title":"First post","body":"Hello.","comments":["one","two"]}' "http://127.0.0.1:$PORT/posts"
    curl -fs -o /dev/null "http://127.0.0.1:$PORT/posts/1"
    load "$endpoint" "$WARMUP" warmup >/dev/null
    for i in $(seq "$RUNS"); do
      local t0 t1 p0 p1 n rps errors
      t0="$(cpu_ticks "$SERVER")"; p0="$(pg_ticks)"
      load "$endpoint" "$DURATION" "run$i" > "$OUT/wrk.txt"
      t1="$(cpu_ticks "$SERVER")"; p1="$(pg_ticks)"
      n="$(awk '/requests in/{print $1}' "$OUT/wrk.txt")"
      rps="$(awk '/Requests\/sec/{print $2}' "$OUT/wrk.txt")"
      errors="$(awk '/Non-2xx/{n+=$NF} /Socket errors/{gsub(/,/,""); n+=$4+$6+$8+$10} END{print n+0}' "$OUT/wrk.txt")"
      echo "$label $backend ${endpoint// /_} $n $rps $((t1 - t0)) $((p1 - p0)) $errors"
    done
    stop
  done
}

{
  measure filerouter-run sqlite
  measure fastapi-1-worker sqlite
  if [ -n "$PG" ]; then
    measure filerouter-run postgres
    measure fastapi-1-worker postgres
  fi
} > "$OUT/raw.txt"

python3 - "$OUT/raw.txt" "$(getconf CLK_TCK)" "$CONNS" "$DURATION" "$RUNS" <<'PY'
import statistics, sys
raw, ticks, conns, duration, runs = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
rows = {}
for line in open(raw):
    label, backend, endpoint, n, rps, cpu, pg, errors = line.split()
    rows.setdefault((label, backend, endpoint.replace("_", " ")), []).append(
        (float(rps), int(cpu) / ticks * 1000 / int(n), int(pg) / ticks * 1000 / int(n), int(errors)))
print(f"bench/projects/sqlalchemy-blog, wrk -t1 -c{conns} -d{duration}, median of {runs} runs")
print()
print("| server | backend | endpoint | req/s | CPU ms / request | Postgres's CPU ms / request | errors |")
print("|---|---|---|---|---|---|---|")
for (label, backend, endpoint), measured in rows.items():
    med = lambda i: statistics.median(r[i] for r in measured)
    pg = f"{med(2):.3f}" if backend == "postgres" else "-"
    print(f"| {label} | {backend} | {endpoint} | {med(0):,.0f} | {med(1):.3f} | {pg} | {sum(r[3] for r in measured)} |")
PY
