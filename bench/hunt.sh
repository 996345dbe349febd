#!/usr/bin/env bash
# The leftover hunts, longer: the tests that look for what one request (or one tenant) leaves
# for the next (tests/isolation.rs, tests/tenant_isolation.rs) with FILEROUTER_HUNT_SCALE times
# their requests. The suite runs them at scale 1 (about a minute of CPU each: 1,000 requests
# of one project on shared slots, 1,300 of three tenants on two slots, each with and without
# PAGEMAP_SCAN); a hunt at scale 10 is 23,000 requests per reset mode.
#
#   flock /work/bench.lock bench/hunt.sh          # SCALE=10
#   SCALE=40 bench/hunt.sh                        # longer still
#
# Exit 0 only if every request of every hunt saw nothing another left. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
export FILEROUTER_CACHE_DIR="${FILEROUTER_CACHE_DIR:-$PWD/target/filerouter-cache}"
started=$SECONDS
FILEROUTER_HUNT_SCALE="${SCALE:-10}" cargo test --release --test suite -- \
  isolation::no_request_sees_another tenant_isolation::
echo "hunts at scale ${SCALE:-10} passed in $((SECONDS - started)) s"
