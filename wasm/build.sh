#!/usr/bin/env bash
# Builds the JS package `weft` into wasm/pkg: five release WebAssembly modules of weft-wasm
# (profile wasm-release: lto, opt-level "s"), one per feature, with their wasm-bindgen glue
# (--target web, which also loads in Node via initSync; no generated typings: the public
# types are wasm/js/*.d.ts), and the hand-written runtime in wasm/js, the JS minified. `weft` in
# a browser loads weft_jobs_bg.wasm (the job registry alone); weft_apps_bg.wasm (the registry,
# agent sessions, ops: `weft/apps`, `loadApps()`, and `weft` in Node), weft_frames_bg.wasm,
# weft_actors_bg.wasm and weft_models_bg.wasm (the model providers' codecs) are loaded on first
# use (see wasm/js/lazy.js, wasm/js/apps.js). Prints every module's size raw and gzipped, what a
# browser downloads for `import 'weft'` (a page that never touches apps, frames, actors or a
# model) and for `import 'weft/apps'`, and the whole package, gzipped; fails if `weft`'s static
# import graph reaches the apps module or `weft/apps`'s reaches the jobs-only module (the
# checks run on wasm/pkg.tmp: a failing build leaves the previous wasm/pkg in place).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
out="$root/wasm/pkg"
rm -rf "$out.tmp" "$out.parts"
mkdir -p "$out.tmp" "$out.parts"
# feature:glue name. The five builds share weft-core's compiled crates; each links only
# what its bindings reach (`apps` enables `jobs`).
for module in jobs:weft_jobs apps:weft_apps frames:weft_frames actors:weft_actors models:weft_models; do
  feature=${module%%:*}
  name=${module#*:}
  cargo build -p weft-wasm --target wasm32-unknown-unknown --profile wasm-release \
    --no-default-features --features "$feature"
  wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section \
    --out-dir "$out.parts/$name" --out-name "$name" \
    "$target_dir/wasm32-unknown-unknown/wasm-release/weft_wasm.wasm"
  # On V8 11 (Node 20) the glue calls the exports that return one externref through a Proxy:
  # V8 11 aborts when such a call, inlined into optimized JS, is deoptimized lazily (see there).
  node wasm/tools/guard-exports.mjs "$out.parts/$name/$name.js" "$out.parts/$name/${name}_bg.wasm"
  # Node's `weft` has the apps glue instantiate its module on first use, not at import, so that
  # a first `openWorker` spawns its Worker before the compile (see there).
  # Its functions that return more than one value are taken from an exported table on their
  # first call instead of being exports: V8 11 compiles a wrapper for each of their signatures
  # when the module is compiled, more than half of that compile (see there).
  if [ "$name" = weft_apps ]; then
    node wasm/tools/init-on-first-use.mjs "$out.parts/$name/$name.js"
    node wasm/tools/lazy-exports.mjs "$out.parts/$name/$name.js" "$out.parts/$name/${name}_bg.wasm"
  fi
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
# (The .js files only: esbuild names what it writes .js, so the shim, worker-shim.mjs, would
# leave a stray worker-shim.js; it is bundled on its own below.)
find "$out.tmp" -name '*.js' | xargs "$esbuild" --minify-whitespace --minify-syntax \
  --format=esm --target=es2022 --log-level=error --allow-overwrite --outbase="$out.tmp" --outdir="$out.tmp"
# The runtime's shared modules in one file, core.js (start-up: a browser pays for every file of
# `import 'weft'`'s graph, 16 → 7 files): one instance of each, every importer rewritten to
# import it from core.js, the glue and the modules loaded on first use left as they are (see
# wasm/tools/core-bundle.mjs).
node wasm/tools/core-bundle.mjs "$out.tmp"
# The worker shim with worker-batch.js inside it (its Worker branch imported it, one more module
# load between the Worker's start and the task script): esbuild bundles the dynamic import
# into the file, still evaluated in that branch only; `node:` modules and the script stay
# imports. (The native hosts embed wasm/js/worker-shim.mjs itself: a child process never
# loads worker-batch.js.)
"$esbuild" wasm/js/worker-shim.mjs --bundle --format=esm --platform=node --target=es2022 \
  --minify-whitespace --minify-syntax --log-level=error --allow-overwrite --outfile="$out.tmp/worker-shim.mjs"
# The same shim as CommonJS, worker-shim.cjs: what `weft` in Node starts its Workers with. A
# Worker whose entry is an ES module first sets up Node's ES module loader (~5 ms here) and
# then loads the task script through it as a second module; with a CommonJS entry the loader
# is set up once, for the task script (issue 16). `import(script)` stays an import.
"$esbuild" wasm/js/worker-shim.mjs --bundle --format=cjs --platform=node --target=es2022 \
  --minify-whitespace --minify-syntax --log-level=error --allow-overwrite --outfile="$out.tmp/worker-shim.cjs"
# Every module, raw and gzipped; what a browser downloads for `import 'weft'` and for
# `import 'weft/apps'` (the entry's static import graph and the module it loads at import, each
# file gzipped on its own, as HTTP serves them); the whole package (every file, one gzip stream).
python3 - "$out.tmp" <<'PY'
import gzip, os, re, sys, tarfile, io
out = sys.argv[1]
gz = lambda b: len(gzip.compress(b, 9))
read = lambda f: open(os.path.join(out, f), 'rb').read()
parts = []
for name in ('weft_jobs', 'weft_apps', 'weft_frames', 'weft_actors', 'weft_models'):
    b = read(name + '_bg.wasm')
    parts.append(f'{name}_bg.wasm {len(b)} bytes raw, {gz(b)} gzipped')

def graph(entry):
    seen, todo = set(), [entry]
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
    return seen

weft = graph('index.js')
if weft & {'weft_apps.js', 'ops.js', 'agent.js'}:
    sys.exit(f"wasm/build.sh: import 'weft' statically reaches the apps module: {sorted(weft & {'weft_apps.js', 'ops.js', 'agent.js'})}")
weft.add('weft_jobs_bg.wasm')
# A browser pays a request per file, in rounds: the entry, core.js and the glue, the .wasm
# (wasm/tools/core-bundle.mjs). A new static import of the entry's graph is a decision, not a drift.
if len(weft) > 4:
    sys.exit(f"wasm/build.sh: import 'weft' is {len(weft)} files, more than 4: {sorted(weft)} (see wasm/tools/core-bundle.mjs)")
apps = graph('entry-apps.js')
# Neither the jobs-only glue nor its .wasm (a `new URL('./weft_jobs_bg.wasm', ...)` in a module
# the entry imports is fetched at import).
jobs = sorted(f for f in apps if f == 'weft_jobs.js' or b'weft_jobs_bg.wasm' in read(f))
if jobs:
    sys.exit(f"wasm/build.sh: import 'weft/apps' statically reaches the jobs-only module: {jobs}")
apps.add('weft_apps_bg.wasm')
size = lambda files: sum(gz(read(f)) for f in files)
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode='w') as t:
    t.add(out, arcname='.')
print(f"wasm/pkg: {'; '.join(parts)}")
print(f"wasm/pkg: what a browser downloads for import 'weft' {size(weft)} bytes gzipped ({len(weft)} files); "
      f"for import 'weft/apps' {size(apps)} bytes gzipped ({len(apps)} files); whole package {gz(buf.getvalue())} bytes gzipped")
PY
rm -rf "$out"
mv "$out.tmp" "$out"
