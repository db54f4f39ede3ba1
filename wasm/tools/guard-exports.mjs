// A step of wasm/build.sh, run on each module's wasm-bindgen glue: on V8 11 (Node 20), the glue
// calls every export that returns one `externref` through a Proxy.
//
// Why: TurboFan inlines a JS→wasm call into optimized JS when the export's signature has at most
// one result and only i32/i64/f32/f64/externref types (`CanInlineJSToWasmCall`). If that
// optimized code is deoptimized lazily while the wasm call runs (a JS import the call makes —
// building the returned arrays and objects — invalidates a map it depends on), the deoptimizer
// rebuilds the call's result from the export's wasm return type, and V8 11's
// `Deoptimizer::TranslatedValueForWasmReturnKind` knows only i32, i64, f32 and f64: an
// externref result aborts the process ("Fatal error ... unreachable code", native frame
// `Deoptimizer::DoComputeBuiltinContinuation`; later V8 versions read it as a tagged value).
// `tests/js/bench/registry.mjs` (through `drainOutputs`) crashed so in 14 of 20 runs with the
// inlining on. TurboFan never inlines a call whose target is a Proxy (JSCallReducer leaves a
// constant non-function target alone), so those exports are called through the generic
// wrapper and every other export stays inlinable. Until this step Node's entry turned the
// inlining off for the whole process (`--no-turbo-inline-js-wasm-calls`); any non-default V8
// flag makes Node reject its embedded code cache in every Worker, which then compiles Node's
// bootstrap from source (issue 16: the first Worker's result took ~1.5–2× as long).
//
//     node wasm/tools/guard-exports.mjs GLUE.js MODULE.wasm
//
// (tests/js/node/startup.test.mjs imports `externrefReturns` to check the built package.)
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { readModule } from './wasm-module.mjs';

/** The names of the module's function exports whose signature returns exactly one externref. */
export function externrefReturns(bytes) {
  const { exports, resultsOf } = readModule(bytes, 'guard-exports');
  const found = [];
  for (const { name, kind, index } of exports) {
    const results = kind === 0 ? resultsOf(index) : undefined;
    if (results?.length === 1 && results[0] === 0x6f) found.push(name);
  }
  return found.sort();
}

/** Rewrites the glue at `gluePath` so that it calls `names` through Proxies on V8 11. */
function guard(gluePath, names) {
  const glue = readFileSync(gluePath, 'utf8');
  const site = 'wasm = instance.exports;';
  if (glue.split(site).length !== 2) throw new Error(`guard-exports: ${gluePath} does not assign \`${site}\` exactly once`);
  for (const n of names) {
    if (!glue.includes(`wasm.${n}(`)) throw new Error(`guard-exports: ${gluePath} never calls ${n}`);
  }
  const fn = `
// Added by wasm/build.sh (wasm/tools/guard-exports.mjs): on V8 11 (Node 20) the exports that
// return one externref are called through a Proxy, never inlined into optimized JS (V8 11 aborts
// when such an inlined call is deoptimized lazily).
const __weftExternrefReturns = ${JSON.stringify(names)};
function __weftGuardExports(exports) {
    if (__weftExternrefReturns.length === 0 || !/^11\\./.test(globalThis.process?.versions?.v8 ?? '')) return exports;
    const guarded = { ...exports };
    for (const name of __weftExternrefReturns) guarded[name] = new Proxy(exports[name], {});
    return Object.freeze(guarded);
}
`;
  writeFileSync(gluePath, glue.replace(site, 'wasm = __weftGuardExports(instance.exports);') + fn);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [gluePath, wasmPath] = process.argv.slice(2);
  guard(gluePath, externrefReturns(readFileSync(wasmPath)));
}
