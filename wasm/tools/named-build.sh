#!/usr/bin/env bash
# A profiling copy of the package, for `node --cpu-prof` (never committed, never shipped):
# wasm/pkg copied to DIR (default /tmp/weft-pkg-named) with weft_jobs_bg.wasm and
# weft_apps_bg.wasm rebuilt keeping their name sections (wasm-bindgen --keep-debug, no
# --remove-name-section), so that a profile names Rust functions instead of wasm-function[N].
# The code is the same release build (profile wasm-release) as wasm/build.sh's, the apps module
# given the same export table; only the name section is added (the glue JS is the package's).
# Run wasm/build.sh first. Use: `node --cpu-prof ... --weft DIR` (bench/worker-peers.mjs) or
# import DIR/node.js.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-/tmp/weft-pkg-named}
[ -f wasm/pkg/node.js ] || { echo "named-build.sh: build wasm/pkg first (wasm/build.sh)" >&2; exit 1; }
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
rm -rf "$dir" "$dir.parts"
cp -r wasm/pkg "$dir"
for module in jobs:weft_jobs apps:weft_apps; do
  feature=${module%%:*}
  name=${module#*:}
  cargo build -q -p weft-wasm --target wasm32-unknown-unknown --profile wasm-release \
    --no-default-features --features "$feature"
  wasm-bindgen --target web --no-typescript --keep-debug --out-dir "$dir.parts/$name" --out-name "$name" \
    "$target_dir/wasm32-unknown-unknown/wasm-release/weft_wasm.wasm"
  # The package's apps glue takes its multi-value functions from the table `__weft_lazy`
  # (wasm/build.sh): the same rewrite of this module (function indices, and so the names, are
  # unchanged). lazy-exports.mjs rewrites the glue guard-exports.mjs made, so both run here, on
  # this build's own glue, which is then thrown away: the package's is kept.
  if [ "$name" = weft_apps ]; then
    node wasm/tools/guard-exports.mjs "$dir.parts/$name/$name.js" "$dir.parts/$name/${name}_bg.wasm"
    node wasm/tools/lazy-exports.mjs "$dir.parts/$name/$name.js" "$dir.parts/$name/${name}_bg.wasm"
  fi
  cp "$dir.parts/$name/${name}_bg.wasm" "$dir/"
done
rm -rf "$dir.parts"
echo "named-build.sh: $dir (weft_jobs_bg.wasm, weft_apps_bg.wasm with name sections)"
