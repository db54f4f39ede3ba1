// Start-up in browsers (issue 16): a page pays for every module file of `import 'weft'`'s static
// graph (Chromium: 15 files took 50–80 ms on localhost, one 56 KB file ~15 ms). This step of
// wasm/build.sh puts the runtime's shared modules (CORE below) into one file, core.js, and
// keeps one instance of each: every package file that imported one of them imports it from
// core.js instead, under a prefixed name (`runtime$createRuntime`), and each CORE file becomes a
// re-export of core.js (live bindings: `export let App` stays live). The wasm-bindgen glue and
// the modules loaded on first use stay separate files, so `import 'weft'` still fetches no apps
// module and `import 'weft/apps'` no jobs-only one. The glue files carry their snippets and the
// browser entries the DOM Worker transport (see below): `import 'weft'` fetches index.js, then
// core.js and weft_jobs.js, then the .wasm.
//
//     node wasm/tools/core-bundle.mjs DIR     (DIR: the package after the minify step)
import { build } from 'esbuild';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
// The modules of `import 'weft'`'s graph that hold the runtime (not the glue, not dom-worker.js:
// it installs the DOM Worker transport, which Node's entry must not evaluate).
const CORE = ['runtime.js', 'apps.js', 'error.js', 'codes.js', 'lazy.js', 'actors.js', 'agent-tools.js', 'scripted-model.js', 'models.js', 'frames.js'];
const stem = (f) => f.replace(/\.js$/, '').replace(/-/g, '_');
const minify = { minifyWhitespace: true, minifySyntax: true, format: 'esm', target: 'es2022', logLevel: 'error' };

// Each CORE module's export names, from esbuild's metafile (nothing is executed).
const exportsOf = {};
for (const f of CORE) {
  const r = await build({ ...minify, entryPoints: [join(dir, f)], bundle: true, write: false, metafile: true, outdir: '/out', plugins: [allExternal()] });
  exportsOf[f] = Object.values(r.metafile.outputs)[0].exports;
  if (exportsOf[f].includes('default')) throw new Error(`core-bundle: ${f} has a default export`);
}
const prefixed = (f) => exportsOf[f].map((n) => `${stem(f)}$${n}`);

/** Every import stays as it is (external). */
function allExternal() {
  return { name: 'external', setup: (b) => b.onResolve({ filter: /.*/ }, (a) => (a.kind === 'entry-point' ? null : { path: a.path, external: true })) };
}
/** Imports of CORE modules become imports of core.js (prefixed names); the rest stay as they are. */
function toCore() {
  return {
    name: 'to-core',
    setup(b) {
      b.onResolve({ filter: /.*/ }, (a) => {
        if (a.kind === 'entry-point') return null;
        const f = a.path.replace(/^\.\//, '');
        if (a.kind === 'import-statement' && CORE.includes(f)) return { path: f, namespace: 'core' };
        return { path: a.path, external: true };
      });
      b.onLoad({ filter: /.*/, namespace: 'core' }, (a) => ({
        contents: `export { ${exportsOf[a.path].map((n) => `${stem(a.path)}$${n} as ${n}`).join(', ')} } from './core.js';`,
        loader: 'js',
        resolveDir: dir,
      }));
    },
  };
}

// core.js: the CORE modules, bundled, each export under its prefixed name. Their imports of one
// another are bundled; every other import (glue, modules loaded on first use) stays external.
const entry = CORE.map((f) => `export { ${exportsOf[f].map((n) => `${n} as ${stem(f)}$${n}`).join(', ')} } from './${f}';`).join('\n');
await build({
  ...minify,
  stdin: { contents: entry, resolveDir: dir, sourcefile: 'core-entry.js' },
  bundle: true,
  outfile: join(dir, 'core.js'),
  plugins: [
    {
      name: 'core-only',
      setup: (b) =>
        b.onResolve({ filter: /.*/ }, (a) => (a.kind === 'import-statement' && CORE.includes(a.path.replace(/^\.\//, '')) ? null : { path: a.path, external: true })),
    },
  ],
});

// Every other module that imports a CORE module: rewritten to import it from core.js.
const importsCore = (text) => CORE.some((f) => new RegExp(`from\\s*["']\\./${f.replace('.', '\\.')}["']|import\\s*["']\\./${f.replace('.', '\\.')}["']`).test(text));
for (const f of readdirSync(dir)) {
  if (!/\.m?js$/.test(f) || f === 'core.js' || CORE.includes(f)) continue;
  const text = readFileSync(join(dir, f), 'utf8');
  if (!importsCore(text)) continue;
  await build({ ...minify, entryPoints: [join(dir, f)], bundle: true, outfile: join(dir, f), allowOverwrite: true, plugins: [toCore()] });
}
// Fewer files in the round of requests after the entry (issue 16, stop 34: 5 → 2 files for
// `import 'weft'` brought navigation → first result in Chromium 3–23 ms sooner in four
// interleaved runs of bench/startup-browser.mjs, e.g. 158.5 → 147.5 ms over 60):
// each wasm-bindgen glue carries its snippets (the inline JS of the bindings: stateless helpers
// and a scratch view keyed by the module's memory, so a copy per glue is safe), and the browser
// entries carry the DOM Worker transport (dom-worker.js) instead of importing it.
const inlineOnly = (keep) => ({
  name: 'inline-only',
  setup: (b) => b.onResolve({ filter: /.*/ }, (a) => (a.kind === 'entry-point' || keep(a.path) ? null : { path: a.path, external: true })),
});
for (const f of readdirSync(dir).filter((f) => /^weft_\w+\.js$/.test(f))) {
  await build({ ...minify, entryPoints: [join(dir, f)], bundle: true, outfile: join(dir, f), allowOverwrite: true, plugins: [inlineOnly((p) => p.startsWith('./snippets/'))] });
}
for (const f of ['index.js', 'entry-apps.js']) {
  await build({ ...minify, entryPoints: [join(dir, f)], bundle: true, outfile: join(dir, f), allowOverwrite: true, plugins: [inlineOnly((p) => p === './dom-worker.js')] });
}
// Nothing imports them any more.
rmSync(join(dir, 'snippets'), { recursive: true });
rmSync(join(dir, 'dom-worker.js'));
for (const f of readdirSync(dir).filter((f) => /\.m?js$/.test(f))) {
  const text = readFileSync(join(dir, f), 'utf8');
  if (/["']\.\/(snippets\/|dom-worker\.js)/.test(text.replace(/"\.\/snippets\/[^"]+":/g, ''))) throw new Error(`core-bundle: ${f} still imports a file this step removed`);
}
// The CORE files: re-exports of core.js (for any importer outside the package's own files).
for (const f of CORE) writeFileSync(join(dir, f), `export{${prefixed(f).map((p, i) => `${p} as ${exportsOf[f][i]}`).join(',')}}from"./core.js";\n`);
