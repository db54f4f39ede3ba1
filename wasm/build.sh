#!/usr/bin/env bash
# Builds the JS package `weft` into wasm/pkg: the release wasm (profile wasm-release: lto,
# opt-level "s"), its wasm-bindgen glue (--target web, which also loads in Node via initSync),
# and the hand-written runtime in wasm/js. Prints the .wasm size raw and gzipped.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
cargo build -p weft-wasm --target wasm32-unknown-unknown --profile wasm-release
out="$root/wasm/pkg"
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
wasm-bindgen --target web --remove-name-section --remove-producers-section --out-dir "$out.tmp" --out-name weft_wasm \
  "$target_dir/wasm32-unknown-unknown/wasm-release/weft_wasm.wasm"
cp wasm/js/*.js wasm/js/*.mjs wasm/js/*.d.ts wasm/js/package.json "$out.tmp/"
rm -rf "$out"
mv "$out.tmp" "$out"
raw=$(stat -c %s "$out/weft_wasm_bg.wasm")
gz=$(gzip -9 -c "$out/weft_wasm_bg.wasm" | wc -c)
all=$(tar -C "$out" -cf - . | gzip -9 | wc -c)
printf 'wasm/pkg: weft_wasm_bg.wasm %d bytes raw, %d bytes gzipped; whole package %d bytes gzipped\n' "$raw" "$gz" "$all"
