#!/usr/bin/env bash
# Builds the JS package `weft` into wasm/pkg: four release WebAssembly modules of weft-wasm
# (profile wasm-release: lto, opt-level "s"), one per feature, with their wasm-bindgen glue
# (--target web, which also loads in Node via initSync; no generated typings: the public
# types are wasm/js/*.d.ts), and the hand-written runtime in wasm/js, the JS minified. `weft` loads
# weft_wasm_bg.wasm (jobs, agent sessions, ops); weft_frames_bg.wasm, weft_actors_bg.wasm and
# weft_models_bg.wasm (the model providers' codecs) are loaded on first use (see
# wasm/js/lazy.js). Prints every module's size raw and gzipped, the package without the lazily
# loaded .wasm files (what a page that imports `weft` and never touches frames, actors or a
# model downloads, at most) and the whole package, gzipped.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
out="$root/wasm/pkg"
rm -rf "$out.tmp" "$out.parts"
mkdir -p "$out.tmp" "$out.parts"
# feature:glue name. The four builds share weft-core's compiled crates; each links only
# what its bindings reach.
for module in jobs:weft_wasm frames:weft_frames actors:weft_actors models:weft_models; do
  feature=${module%%:*}
  name=${module#*:}
  cargo build -p weft-wasm --target wasm32-unknown-unknown --profile wasm-release \
    --no-default-features --features "$feature"
  wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section \
    --out-dir "$out.parts/$name" --out-name "$name" \
    "$target_dir/wasm32-unknown-unknown/wasm-release/weft_wasm.wasm"
done
# Merge the modules; snippets (inline JS) of the shared bindings must agree.
for part in "$out.parts"/*; do
  (cd "$part" && find . -type f) | while read -r f; do
    if [ -e "$out.tmp/$f" ] && ! cmp -s "$part/$f" "$out.tmp/$f"; then
      echo "wasm/build.sh: $f differs between modules" >&2
      exit 1
    fi
    mkdir -p "$(dirname "$out.tmp/$f")"
    cp "$part/$f" "$out.tmp/$f"
  done
done
rm -rf "$out.parts"
cp wasm/js/*.js wasm/js/*.mjs wasm/js/*.d.ts wasm/js/package.json "$out.tmp/"
# The package's JS without comments and whitespace (esbuild, wasm/tools; tests/setup.sh installs
# it): the hand-written modules' documentation is in the .d.ts files and wasm/js, and a browser
# that imports `weft` downloads half the JS bytes gzipped. Names are kept (no identifier
# mangling: stack traces and class names read as in wasm/js).
esbuild=wasm/tools/node_modules/.bin/esbuild
if [ ! -x "$esbuild" ]; then
  echo "wasm/build.sh: $esbuild is missing: run tests/setup.sh (or npm ci in wasm/tools)" >&2
  exit 1
fi
find "$out.tmp" -name '*.js' -o -name '*.mjs' | xargs "$esbuild" --minify-whitespace --minify-syntax \
  --format=esm --target=es2022 --log-level=error --allow-overwrite --outbase="$out.tmp" --outdir="$out.tmp"
rm -rf "$out"
mv "$out.tmp" "$out"
# Every module, raw and gzipped; what a browser downloads for `import 'weft'` (the entry's
# static import graph and the job module, each file gzipped on its own, as HTTP serves them);
# the whole package (every file, one gzip stream).
python3 - "$out" <<'PY'
import gzip, os, re, sys, tarfile, io
out = sys.argv[1]
gz = lambda b: len(gzip.compress(b, 9))
read = lambda f: open(os.path.join(out, f), 'rb').read()
parts = []
for name in ('weft_wasm', 'weft_frames', 'weft_actors', 'weft_models'):
    b = read(name + '_bg.wasm')
    parts.append(f'{name}_bg.wasm {len(b)} bytes raw, {gz(b)} gzipped')
seen, todo = set(), ['index.js']
while todo:
    f = os.path.normpath(todo.pop())
    if f in seen:
        continue
    seen.add(f)
    text = read(f).decode()
    # static imports and re-exports at a statement's start (minified: after `;` or `}`), not
    # `import('./x')`, which loads on first use
    for m in re.finditer(r"""(?:^|[\n;}])\s*(?:import|export)\b(?!\s*\()[^'";()]*?['"](\./[^'"]+)['"]""", text):
        todo.append(os.path.join(os.path.dirname(f), m.group(1)))
seen.add('weft_wasm_bg.wasm')
weft = sum(gz(read(f)) for f in seen)
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode='w') as t:
    t.add(out, arcname='.')
print(f"wasm/pkg: {'; '.join(parts)}; import 'weft' in a browser {weft} bytes gzipped "
      f"({len(seen)} files); whole package {gz(buf.getvalue())} bytes gzipped")
PY
