#!/usr/bin/env bash
# What a database request costs: examples/blog (posts in the project's SQLite database) under
# `filerouter run`, against the same API in FastAPI with the standard library's sqlite3 on a
# file (examples/blog/fastapi_app.py, one uvicorn worker); both in one run.
#
#   bench/data.sh                                          # builds this checkout, then measures
#   FILEROUTER_BIN=target/release/filerouter bench/data.sh # an existing binary (no cargo build)
#   FILEROUTER_BASE=/path/to/older/filerouter bench/data.sh # that binary too, in the same run
#   BACKEND=postgres bench/data.sh                         # on Postgres, against FastAPI + psycopg
#
# Two endpoints: GET /posts/1 (one row by primary key) and POST /posts (one INSERT, committed;
# a wrk Lua script sends a unique title per request, so UNIQUE never fails). Every server and
# endpoint starts on a fresh, migrated database (filerouter: a new --data-dir and --migrate;
# FastAPI: a new BLOG_DB file, migrated at import, WAL mode like filerouter's) and gets post 1
# before the load. Then, as in bench/cpu.sh: a warm-up, and RUNS times a fixed load,
# wrk -t1 -c$CONNS -d$DURATION on loopback; before and after each, /proc/PID/stat of the server
# and its descendants gives CPU time (utime + stime, SQLite's included: it runs in the server's
# threads), divided by the requests wrk completed. The median run is printed.
#
# A third endpoint, GET /ping (a route that returns a constant, added to the copies measured),
# shows what any request costs, so that the rows above it show what the database part adds.
#
# BACKEND=postgres: the same on a throwaway cluster of Debian's Postgres (as bench/orm.sh): for
# filerouter, `run --database-url` on a new database per server and endpoint, with a
# `0001_posts.postgres.sql` beside the migration and without the blog's `PRAGMA foreign_keys`
# (a SQLite statement); against bench/peer/blog_psycopg.py (FastAPI + psycopg 3 and its pool,
# one uvicorn worker) on the same tables. Postgres's own CPU is then shown beside the server's.
# Knobs: DURATION (10s), CONNS (8), RUNS (3), ROUNDS (1: each server once; more alternate the
# servers, and the medians are over every round's runs), WARMUP (2s), FILEROUTER_BIN,
# FILEROUTER_BASE, BACKEND (sqlite).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DURATION="${DURATION:-10s}"
CONNS="${CONNS:-8}"
RUNS="${RUNS:-3}"
ROUNDS="${ROUNDS:-1}"
WARMUP="${WARMUP:-2s}"
BACKEND="${BACKEND:-sqlite}"
PORT=8761
PGPORT=8762
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ ! -x bench/.venv/bin/uvicorn ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/peer/requirements.txt
fi
if [ "$BACKEND" = postgres ] && ! bench/.venv/bin/python -c "import psycopg_pool" 2>/dev/null; then
  bench/.venv/bin/pip install --quiet --disable-pip-version-check "psycopg[binary]==3.3.2" "psycopg-pool==3.2.6"
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

# The tables on Postgres (filerouter's migration variant; the psycopg peer gets the same).
cat > "$OUT/0001_posts.postgres.sql" <<'EOF'
CREATE TABLE posts (
    id         SERIAL PRIMARY KEY,
    title      TEXT NOT NULL UNIQUE,
    body       TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL DEFAULT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
);

CREATE TABLE comments (
    id         SERIAL PRIMARY KEY,
    post_id    INTEGER NOT NULL REFERENCES posts (id) ON DELETE CASCADE,
    author     TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
);
EOF

# A build cache of a copy of examples/blog (without its .data/ and .cache/) per binary, with
# GET /ping added (and on Postgres, its migration variant, and no PRAGMA).
project() { # folder binary
  mkdir "$1"
  cp -r examples/blog/config.py examples/blog/migrations examples/blog/routes "$1/"
  mkdir "$1/routes/ping"
  printf 'def GET():\n    return {"ok": True}\n' > "$1/routes/ping/route.py"
  if [ "$BACKEND" = postgres ]; then
    cp "$OUT/0001_posts.postgres.sql" "$1/migrations/"
    sed -i '/PRAGMA foreign_keys/d' "$1/routes/_lib/db.py"
  fi
  "$2" build --project "$1" >/dev/null 2>&1
}
project "$OUT/blog" "$BIN"
if [ -n "${FILEROUTER_BASE:-}" ]; then
  BASE="$(realpath "$FILEROUTER_BASE")"
  project "$OUT/blog-base" "$BASE"
fi

# The FastAPI peers with GET /ping added.
cat > "$OUT/peer_sqlite.py" <<'EOF'
from fastapi_app import app


@app.get("/ping")
def ping():
    return {"ok": True}
EOF
sed 's/fastapi_app/blog_psycopg/' "$OUT/peer_sqlite.py" > "$OUT/peer_postgres.py"

# Postgres, for BACKEND=postgres: a throwaway cluster as in bench/orm.sh.
if [ "$BACKEND" = postgres ]; then
  PG="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$PG" ] || { echo "BACKEND=postgres needs Debian's postgresql" >&2; exit 1; }
  mkdir "$OUT/pg" && chown postgres "$OUT/pg"
  su postgres -c "$PG/initdb -D $OUT/pg -U postgres --auth=trust" >/dev/null
  su postgres -c "$PG/pg_ctl -D $OUT/pg -o '-p $PGPORT -k $OUT/pg -c listen_addresses=127.0.0.1' -l $OUT/pg/log start" >/dev/null
fi
psql() { command psql -q -h 127.0.0.1 -p "$PGPORT" -U postgres "$@"; }
k=0
new_database() { # name: a role and a database of that name; prints its URL
  psql -c "CREATE ROLE $1 LOGIN CREATEROLE PASSWORD 'bench'" >/dev/null
  psql -c "CREATE DATABASE $1 OWNER $1" >/dev/null
  echo "postgres://$1:bench@127.0.0.1:$PGPORT/$1"
}
pg_ticks() { # CPU ticks of the Postgres server's processes
  [ -n "$PG" ] || { echo 0; return; }
  cpu_ticks "$(head -n 1 "$OUT/pg/postmaster.pid")"
}

# POST /posts with the title "<prefix>-<thread>-<n>": unique across threads and wrk runs.
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
    string.format('{"title":"%s-%d","body":"A post written by bench/data.sh."}', prefix, n))
end
EOF

# The process-tree helpers: tree, cpu_ticks.
source bench/proc.sh
start() { # command... ; sets SERVER and waits for the first answer
  if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$PORT/"; then
    echo "something already listens on port $PORT" >&2; exit 1
  fi
  "$@" >"$OUT/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 600); do curl -fs "http://127.0.0.1:$PORT/posts" >/dev/null && return; sleep 0.05; done
  echo "server did not start: $*" >&2; cat "$OUT/server.log" >&2; exit 1
}
stop() { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

# wrk on one endpoint ("GET /posts/1" or "POST /posts") for a duration; TAG prefixes the
# titles POST sends.
load() { # endpoint duration tag
  local url="http://127.0.0.1:$PORT${1#* }"
  if [ "${1%% *}" = POST ]; then
    wrk -t1 -c"$CONNS" -d"$2" -s "$OUT/post.lua" "$url" -- "$3"
  else
    wrk -t1 -c"$CONNS" -d"$2" "$url"
  fi
}

measure() { # label command... ; each endpoint gets a server on a fresh database
  local label="$1"; shift
  local endpoint
  for endpoint in "GET /ping" "GET /posts/1" "POST /posts"; do
    k=$((k + 1))
    local data="$OUT/data-$label-$k"
    if [ "$BACKEND" = postgres ]; then
      data="$(new_database "bench$k")"
      if [[ "$label" == filerouter* ]]; then
        start "$@" --database-url "$data" --migrate
      else
        psql -d "bench$k" -U "bench$k" -f "$OUT/0001_posts.postgres.sql" >/dev/null
        start env BLOG_PG="postgresql://${data#postgres://}" "$@"
      fi
    elif [[ "$label" == filerouter* ]]; then
      start "$@" --data-dir "$data" --migrate
    else
      mkdir -p "$data"
      start env BLOG_DB="$data/blog.db" "$@"
    fi
    curl -fs -o /dev/null -H 'Content-Type: application/json' \
      -d '{"title":"First post","body":"Hello."}' "http://127.0.0.1:$PORT/posts"
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
      echo "$label ${endpoint// /_} $n $rps $((t1 - t0)) $((p1 - p0)) $errors"
    done
    stop
  done
}

measure_server() { # which: this, base or fastapi
  case "$1" in
    this) measure "filerouter-run" "$BIN" run --project "$OUT/blog" --port "$PORT" ;;
    base) measure "filerouter-base" "$BASE" run --project "$OUT/blog-base" --port "$PORT" ;;
    fastapi)
      if [ "$BACKEND" = postgres ]; then
        measure "fastapi-1-worker" env PYTHONPATH="$ROOT/bench/peer" "$ROOT/bench/.venv/bin/uvicorn" \
          peer_postgres:app --app-dir "$OUT" --port "$PORT" --log-level warning
      else
        measure "fastapi-1-worker" env PYTHONPATH="$ROOT/examples/blog" "$ROOT/bench/.venv/bin/uvicorn" \
          peer_sqlite:app --app-dir "$OUT" --port "$PORT" --log-level warning
      fi ;;
  esac
}

# ROUNDS > 1: the servers in turn, the order reversed every other round, so that a machine
# that gets busier or quieter during the run does not favour the one measured first.
servers=(this); [ -n "${BASE:-}" ] && servers+=(base); servers+=(fastapi)
for round in $(seq "$ROUNDS"); do
  order=("${servers[@]}")
  if [ $((round % 2)) = 0 ]; then
    order=(); for ((j = ${#servers[@]} - 1; j >= 0; j--)); do order+=("${servers[j]}"); done
  fi
  for which in "${order[@]}"; do measure_server "$which"; done
done > "$OUT/raw.txt"

python3 - "$OUT/raw.txt" "$(getconf CLK_TCK)" "$CONNS" "$DURATION" "$RUNS" "$BACKEND" <<'PY'
import statistics, sys
raw, ticks, conns, duration, runs, backend = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
rows = {}
for line in open(raw):
    label, endpoint, n, rps, cpu, pg, errors = line.split()
    rows.setdefault((label, endpoint.replace("_", " ")), []).append(
        (float(rps), int(cpu) / ticks * 1000 / int(n), int(pg) / ticks * 1000 / int(n), int(errors)))
print(f"examples/blog on {backend}, wrk -t1 -c{conns} -d{duration}, median of {runs} runs a round")
print()
pg = backend == "postgres"
print("| server | endpoint | req/s | CPU ms / request |" + (" Postgres's CPU ms / request |" if pg else "") + " errors |")
print("|---|---|---|---|" + ("---|" if pg else "") + "---|")
for (label, endpoint), measured in rows.items():
    med = lambda i: statistics.median(r[i] for r in measured)
    extra = f" {med(2):.3f} |" if pg else ""
    print(f"| {label} | {endpoint} | {med(0):,.0f} | {med(1):.3f} |{extra} {sum(r[3] for r in measured)} |")
PY
