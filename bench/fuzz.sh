#!/usr/bin/env bash
# Fuzz every parser that sees untrusted bytes, each target for SECONDS (default 60).
#
#   bench/fuzz.sh [SECONDS]        # all targets in fuzz/, one after the other
#   TARGETS="cache_decoder" bench/fuzz.sh 300
#
# Targets (fuzz/fuzz_targets/): route_scan (the route scanner on generated folder trees),
# route_lookup (route table lookup, percent-decoding and the static-file path check on
# generated paths), cache_decoder (the build cache's container, checksum, encryption and
# sections on generated files), http_head (the request-head checks the host does itself),
# sql_guard (route code's SQL text and parameters through the guard and a real database).
# Each starts from the seed corpus in fuzz/seeds/TARGET; what the fuzzer finds new goes to
# target/fuzz-corpus/TARGET (not the repository), crashes to fuzz/artifacts/TARGET.
# Needs cargo-fuzz (`cargo install cargo-fuzz`, installed here if missing) and the pinned
# nightly toolchain. Not part of .ci/run: the first build instruments wasmtime too (slow).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
SECONDS_EACH="${1:-60}"
TARGETS="${TARGETS:-route_scan route_lookup cache_decoder http_head sql_guard}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
# Reuse the componentize-py that the main build installed, if any (the guest is built once).
for tool in target/guest-tools/venv-*/bin/componentize-py; do
  if [ -z "${FILEROUTER_COMPONENTIZE_PY:-}" ] && [ -x "$tool" ]; then
    export FILEROUTER_COMPONENTIZE_PY="$ROOT/$tool"
  fi
done

cd fuzz
# `cargo fuzz build` takes one target or none (all of them).
if [ "$(wc -w <<<"$TARGETS")" -eq 1 ]; then
  cargo fuzz build -O --sanitizer none "$TARGETS" 2>&1 | tail -n 3
else
  cargo fuzz build -O --sanitizer none 2>&1 | tail -n 3
fi
status=0
for target in $TARGETS; do
  corpus="$ROOT/target/fuzz-corpus/$target"
  log="$ROOT/target/fuzz-corpus/$target.log"
  mkdir -p "$corpus"
  echo "== $target: ${SECONDS_EACH}s =="
  if cargo fuzz run -O --sanitizer none "$target" "$corpus" "seeds/$target" -- \
      -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 -max_len=4096 -print_final_stats=1 \
      >"$log" 2>&1; then
    grep -E 'stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added' "$log" || true
    echo "$target: no crash, no leak, no timeout"
  else
    tail -n 30 "$log"
    echo "$target: FAILED (the input is in fuzz/artifacts/$target; full log: $log)"
    status=1
  fi
done
exit $status
