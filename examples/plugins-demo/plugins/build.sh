#!/usr/bin/env bash
# Build the example project's plugins from source (no .wasm is committed):
#   bash examples/plugins-demo/plugins/build.sh
#
# textkit (C): Debian's clang, lld, wasi-libc and libclang-rt-14-dev-wasm32, plus wit-bindgen
#   (crates.io `wit-bindgen-cli` 0.63) and wasm-tools (crates.io) on PATH.
# markdown (Python): the componentize-py that `cargo build` installs into
#   target/guest-tools/venv-0.25.1/ (or $FILEROUTER_COMPONENTIZE_PY).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
componentize="${FILEROUTER_COMPONENTIZE_PY:-$repo/target/guest-tools/venv-0.25.1/bin/componentize-py}"

for tool in clang wit-bindgen wasm-tools; do
  command -v "$tool" >/dev/null || {
    echo "build.sh: $tool is missing (see the comment at the top of this file)" >&2
    exit 1
  }
done
[ -x "$componentize" ] || {
  echo "build.sh: componentize-py not found at $componentize: run \`cargo build --release\` first" >&2
  exit 1
}

# textkit, in C: bindings from the WIT, compiled as a reactor, wrapped into a component.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
wit-bindgen c "$here/textkit/wit" --out-dir "$work/gen" >/dev/null
clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor \
  -I "$work/gen" -o "$work/textkit.core.wasm" \
  "$here/textkit/textkit.c" "$work"/gen/*.c "$work"/gen/*_component_type.o
wasm-tools component new "$work/textkit.core.wasm" -o "$here/textkit/textkit.wasm"
echo "built $here/textkit/textkit.wasm ($(wc -c <"$here/textkit/textkit.wasm") bytes)"

# markdown, in Python.
"$componentize" -d "$here/markdown/wit" -w markdown componentize \
  -p "$here/markdown/src" -o "$here/markdown/markdown.wasm" app >/dev/null
echo "built $here/markdown/markdown.wasm ($(wc -c <"$here/markdown/markdown.wasm") bytes)"
