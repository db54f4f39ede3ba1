// A step of wasm/build.sh, run on the apps module's wasm-bindgen glue (weft_apps.js): lets an
// entry module have the glue instantiate its module on first use instead of at import.
//
// Why: Node's `weft` needs the apps module for every runtime (a runtime must be able to host an
// agent), and compiling it (~0.9 MB) takes ~20 ms of the main thread. Compiled at import, it
// runs before the first `openWorker` spawns its Worker; compiled on first use, a runtime's first
// `openWorker` spawns the Worker first (wasm/js/node.js) and the compile runs while the Worker's
// thread boots (issue 16).
//
// The glue reaches its instance only through `wasm.<export>`: until it is instantiated, `wasm`
// is a stand-in whose every property read first runs the hook the entry installed with
// `__weftInitOnFirstUse(init)` (`init` calls `initSync`), then reads the real export. Without a
// hook the stand-in reads as empty (a browser instantiates the glue before any use: apps.js).
// Once instantiated, `wasm` is the instance's exports, as before.
//
//     node wasm/tools/init-on-first-use.mjs GLUE.js
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

/** The glue text with `wasm` a stand-in until instantiated, and `__weftInitOnFirstUse` exported. */
export function initOnFirstUse(glue) {
  const edits = [
    ['let wasmModule, wasmInstance, wasm;', 'let wasmModule, wasmInstance, wasm = __weftUninit;', 1],
    ['if (wasm !== undefined) return wasm;', 'if (wasm !== __weftUninit) return wasm;', 2],
  ];
  for (const [from, , count] of edits) {
    if (glue.split(from).length !== count + 1) throw new Error(`init-on-first-use: the glue does not contain \`${from}\` exactly ${count}×`);
  }
  // Every other mention of `wasm` must be a property read (`wasm.x`) or the instantiation
  // (the two checks above: four; the declaration; `wasm = …` and `return wasm` in finalize).
  const bare = glue.match(/(?<![\w.$/-])wasm(?![\w$/-]|\.)/g) ?? [];
  if (bare.length !== 7) throw new Error(`init-on-first-use: the glue mentions \`wasm\` ${bare.length}× other than as \`wasm.x\` (7 expected)`);
  let out = glue;
  for (const [from, to] of edits) out = out.split(from).join(to);
  const standIn = `// Added by wasm/build.sh (wasm/tools/init-on-first-use.mjs): until the module is instantiated,
// \`wasm\` is this stand-in; reading an export through it runs the entry's hook (which calls
// initSync) first.
let __weftInit = null;
let __weftIniting = false;
const __weftUninit = new Proxy(Object.freeze({}), {
    get(_, name) {
        if (wasm === __weftUninit && __weftInit !== null && !__weftIniting) {
            __weftIniting = true;
            try {
                __weftInit();
            } finally {
                __weftIniting = false;
            }
        }
        return wasm === __weftUninit ? undefined : wasm[name];
    },
});
/** @internal The glue runs \`init()\` (which must call initSync) on its first use. */
export function __weftInitOnFirstUse(init) {
    __weftInit = init;
}
`;
  return out.replace('let wasmModule, wasmInstance, wasm = __weftUninit;', `${standIn}let wasmModule, wasmInstance, wasm = __weftUninit;`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [gluePath] = process.argv.slice(2);
  writeFileSync(gluePath, initOnFirstUse(readFileSync(gluePath, 'utf8')));
}
