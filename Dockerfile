# filerouter in a container: build one project, serve it with `filerouter run`.
#
#   docker build --build-arg PROJECT=examples/bookshop -t bookshop .
#   docker run -p 8000:8000 -v bookshop-data:/app/.data bookshop
#
# README "Deploying: a container image, one process or several" says what the image holds and
# where its state lives. No Docker engine runs in CI: tests/container.rs checks this file by
# running its steps in a clean directory (all but `cargo build` and the apt-get installs, which
# it cannot run there; it puts the release binary it tests where `cargo build` leaves it). Keep
# the build stage's project steps free of absolute paths and the runtime stage's RUN to mkdir,
# chown and useradd: that test runs them as they are written.

FROM rust:1-bookworm AS build
# The guest's build script (guest-python/build/) builds the Python guest with componentize-py from PyPI (python3 and its venv
# module); `filerouter packages install` uses the same pip. It compiles the guest's
# pydantic-core with Debian's WASI Rust toolchain: rustc-web, cargo-web, rust-web-src and the
# wasm-ld of the LLVM that rustc uses (lld-N; README, "Pydantic in the sandbox").
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv rustc-web cargo-web rust-web-src \
 && apt-get install -y --no-install-recommends "lld-$(/usr/bin/rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')" \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# rust-toolchain.toml names the toolchain: rustup installs it on this first cargo call.
RUN cargo build --release --locked

# The project to serve: a folder of the build context (routes/, config.py, requirements.txt...).
ARG PROJECT=examples/bookshop
# Its pure-Python packages (requirements.txt or pyproject.toml), from PyPI, into
# $PROJECT/.packages/ with a private venv's pip: `build` bakes them into the cache.
RUN if [ -f "$PROJECT/requirements.txt" ] || [ -f "$PROJECT/pyproject.toml" ]; then \
      python3 -m venv .venv-packages \
      && . .venv-packages/bin/activate \
      && target/release/filerouter packages install --project "$PROJECT"; \
    fi
RUN target/release/filerouter build --project "$PROJECT"
# What `run` needs of the project, in one folder: the build cache, and public/ (static files
# are served from the project folder, never from the cache). Nothing else: no routes/, no
# config.py, no .packages/.
RUN mkdir -p image \
 && cp -a "$PROJECT/.cache" image/.cache \
 && if [ -d "$PROJECT/public" ]; then cp -a "$PROJECT/public" image/public; fi

FROM debian:bookworm-slim
# A user of its own; the data folder and the compiled-code cache are the only places it writes
# (/app itself stays root's, read-only to the server).
RUN useradd --create-home --user-group --uid 10001 filerouter \
 && mkdir -p /app/.data /var/cache/filerouter \
 && chown filerouter:filerouter /app/.data /var/cache/filerouter
COPY --from=build /src/target/release/filerouter /usr/local/bin/filerouter
COPY --from=build /src/image/ /app/
# Native code `run` maps from the build (checked against bundle.bin on every load). If it
# cannot be written (a read-only container), `run` uses the code from bundle.bin in memory.
ENV FILEROUTER_CACHE_DIR=/var/cache/filerouter
USER filerouter
WORKDIR /app
# The project's SQLite database and kv store (db.sqlite3 and its WAL): keep it on a volume.
VOLUME ["/app/.data"]
EXPOSE 8000
# --migrate applies the build's pending migrations (migrations/*.sql, baked into .cache/) before
# serving: a fresh volume starts empty. Several processes on Postgres apply each file once
# (advisory lock). Settings for route code (config.py's `environment`) and FILEROUTER_CACHE_KEY
# for an encrypted cache come from `docker run -e`.
CMD ["filerouter", "run", "--project", "/app", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/app/.data", "--migrate"]
