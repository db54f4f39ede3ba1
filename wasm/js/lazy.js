// The lazily loaded WebAssembly modules of the package. `weft` in a browser loads only the job
// registry (weft_jobs_bg.wasm); the apps module (weft_apps_bg.wasm: the registry again, agent
// sessions and the ops app, see apps.js), the DGP engine (weft_frames_bg.wasm) and the actor
// graph (weft_actors_bg.wasm) are loaded the first time they are needed: by importing
// `weft/apps` / `weft/frames` / `weft/actors`, by the async entry points (`loadApps`,
// `openActorStore`, `loadFrames`, `loadActors`), or, in Node, synchronously on the first call
// (frames; Node's `weft` loads the apps module at import; the others' first use is async). In
// browsers their wasm-bindgen glue is imported on demand too, so a page that never uses them
// fetches neither.

let readSync = null;
const glues = new Map();

/**
 * @internal Node entry modules install a synchronous file reader (`readFileSync`) and the
 * glue modules (imported statically there) of the modules that must load on first use
 * without a Promise. A module whose glue is not given here (its first use is async anyway)
 * has its glue imported on that first use and its .wasm read with the same reader.
 */
export function setSyncLoading(read, modules) {
  readSync = read;
  for (const [name, glue] of Object.entries(modules)) glues.set(name, glue);
}

/**
 * One lazily loaded module: its `name`, the `url` of its .wasm, and `importGlue()` returning
 * its wasm-bindgen glue module (`default` = async init, `initSync`, the bindings).
 */
export function lazyModule(name, url, importGlue) {
  let glue = null;
  let exports = null;
  let loading = null;
  const loadSync = () => {
    if (!glue && readSync && glues.has(name)) {
      const g = glues.get(name);
      exports = g.initSync({ module: readSync(url) });
      glue = g;
    }
    return glue;
  };
  return {
    /** The loaded glue; loads it now if the host can read synchronously (Node); else null. */
    loadSync,
    /** Bytes of the module's linear memory once it is loaded; else 0. */
    memoryBytes: () => exports?.memory.buffer.byteLength ?? 0,
    /** Loads the module (once); resolves with its glue. */
    load() {
      if (glue || loadSync()) return Promise.resolve(glue);
      loading ??= importGlue()
        .then(async (g) => {
          exports = readSync ? g.initSync({ module: readSync(url) }) : await g.default({ module_or_path: url });
          glue = g;
          return g;
        })
        .catch((err) => {
          loading = null;
          throw err;
        });
      return loading;
    },
  };
}
