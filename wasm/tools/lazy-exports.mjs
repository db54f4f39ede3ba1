// A step of wasm/build.sh, run on the apps module (weft_apps_bg.wasm and its glue, after
// guard-exports.mjs and init-on-first-use.mjs): the module's functions that return more than one
// value are reached through an exported table, each taken from it on its first call, instead of
// being exports.
//
// Why: compiling a module, V8 11 (Node 20) compiles at once, with TurboFan, a JS-to-wasm wrapper
// for every signature of its function exports that its generic wrapper cannot call — every
// signature with more than one result, which wasm-bindgen gives each export that returns a
// string, a slice or a `Result` (multi-value). The apps module has 137 function exports of 73
// signatures; `new WebAssembly.Module` of it took ~19 ms, ~8.5 ms with no function exported
// (issue 16: Node's `import` → first result of a Worker task, where that compile runs while the
// Worker's thread boots and takes a core from it). A function that is not exported but sits in a
// table gets its wrapper when JS first takes it out (`Table.prototype.get`), for its signature
// alone: a process compiles wrappers for the signatures it calls, when it first calls them.
//
// The .wasm: those exports are removed, a funcref table holding them (in export order) is added
// and exported as `__weft_lazy`, filled by an active element segment. The glue: `wasm` (the
// instance's exports as the glue reads them) gets, for each moved name, a function that takes
// the real one out of the table, puts it in its place and calls it; every later call reaches the
// wasm function directly. The names and their slots are written into the glue.
//
//     node wasm/tools/lazy-exports.mjs GLUE.js MODULE.wasm
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { readModule, readUleb, uleb } from './wasm-module.mjs';

const TABLE_EXPORT = '__weft_lazy';

/**
 * Rewrites a module's bytes: its function exports whose signature has more than one result move
 * to a new exported funcref table. Returns `{ bytes, names }` (`names[i]` is in slot i).
 */
export function lazyExports(bytes) {
  const { sections, tables, exports, resultsOf } = readModule(bytes, 'lazy-exports');
  const section = (id) => sections.find((s) => s.id === id);
  const exp = section(7);
  const tab = section(4);
  if (!exp || !tab) throw new Error('lazy-exports: the module has no export or no table section');
  // The export section, without the moved functions.
  const kept = [];
  const moved = [];
  let done = false;
  for (const e of exports) {
    if (e.name === TABLE_EXPORT) done = true;
    if (e.kind === 0 && resultsOf(e.index)?.length > 1) moved.push({ name: e.name, index: e.index });
    else kept.push(e.bytes);
  }
  if (moved.length === 0) return { bytes, names: [] };
  if (done) throw new Error(`lazy-exports: the module already exports ${TABLE_EXPORT}`);
  const table = tables; // the new table's index
  const name = Buffer.from(TABLE_EXPORT, 'utf8');
  kept.push(Buffer.concat([uleb(name.length), name, Buffer.from([1]), uleb(table)]));
  const exportBody = Buffer.concat([uleb(kept.length), ...kept]);
  // The table section with one more table: funcref, exactly as many slots as moved functions.
  const [tableCount, tableRest] = readUleb(bytes, tab.body);
  const tableBody = Buffer.concat([
    uleb(tableCount + 1),
    bytes.subarray(tableRest, tab.end),
    Buffer.from([0x70, 0x01]),
    uleb(moved.length),
    uleb(moved.length),
  ]);
  // The element section with one more segment: active, explicit table, offset 0, function indices.
  const segment = Buffer.concat([
    Buffer.from([0x02]),
    uleb(table),
    Buffer.from([0x41, 0x00, 0x0b, 0x00]),
    uleb(moved.length),
    ...moved.map((m) => uleb(m.index)),
  ]);
  const elem = section(9);
  let elemBody;
  if (elem) {
    const [count, elemRest] = readUleb(bytes, elem.body);
    elemBody = Buffer.concat([uleb(count + 1), bytes.subarray(elemRest, elem.end), segment]);
  } else {
    elemBody = Buffer.concat([uleb(1), segment]);
  }
  const framed = (id, b) => Buffer.concat([Buffer.from([id]), uleb(b.length), b]);
  const out = [bytes.subarray(0, 8)];
  // Section order: the element section (9) follows export (7) and start (8), precedes the rest.
  const before9 = (id) => id !== 0 && id !== 12 && id < 9;
  let elemWritten = false;
  for (const s of sections) {
    if (!elemWritten && !elem && !before9(s.id) && s.id !== 0) {
      out.push(framed(9, elemBody));
      elemWritten = true;
    }
    if (s.id === 4) out.push(framed(4, tableBody));
    else if (s.id === 7) out.push(framed(7, exportBody));
    else if (s.id === 9) out.push(framed(9, elemBody));
    else out.push(bytes.subarray(s.start, s.end));
  }
  if (!elem && !elemWritten) out.push(framed(9, elemBody));
  return { bytes: Buffer.concat(out), names: moved.map((m) => m.name) };
}

/** The glue text with `wasm` given the moved functions, each taken from the table on first call. */
export function lazyGlue(glue, names) {
  const site = 'wasm = __weftGuardExports(instance.exports);';
  if (glue.split(site).length !== 2) throw new Error(`lazy-exports: the glue does not assign \`${site}\` exactly once (run guard-exports.mjs first)`);
  for (const n of names) {
    if (!glue.includes(`wasm.${n}(`)) throw new Error(`lazy-exports: the glue never calls ${n}`);
  }
  const fn = `
// Added by wasm/build.sh (wasm/tools/lazy-exports.mjs): the functions that return more than one
// value are in the exported table ${TABLE_EXPORT}, not exports (V8 11 compiles a wrapper for each
// of their signatures when the module is compiled); each is taken out of it on its first call.
const __weftLazyNames = ${JSON.stringify(names)};
// (One Object.fromEntries: an object built by spreading and then adding or deleting this many
// properties falls into dictionary mode, and every \`wasm.x\` read would be a lookup.)
function __weftLazyExports(exports) {
    const table = exports.${TABLE_EXPORT};
    const entries = Object.entries(exports).filter(([name]) => name !== '${TABLE_EXPORT}');
    const out = Object.fromEntries([
        ...entries,
        ...__weftLazyNames.map((name, slot) => [name, (...args) => (out[name] = table.get(slot))(...args)]),
    ]);
    return out;
}
`;
  return glue.replace(site, 'wasm = __weftLazyExports(__weftGuardExports(instance.exports));') + fn;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [gluePath, wasmPath] = process.argv.slice(2);
  if (!gluePath || !wasmPath) {
    console.error('usage: node wasm/tools/lazy-exports.mjs GLUE.js MODULE.wasm');
    process.exit(2);
  }
  const { bytes, names } = lazyExports(readFileSync(wasmPath));
  if (!new WebAssembly.Module(bytes)) throw new Error('lazy-exports: the rewritten module does not compile');
  writeFileSync(wasmPath, bytes);
  writeFileSync(gluePath, lazyGlue(readFileSync(gluePath, 'utf8'), names));
}
