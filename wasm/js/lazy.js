// The lazily loaded WebAssembly modules of the package. `weft` itself loads only the job
// registry, agent sessions and the ops app (weft_wasm_bg.wasm); the DGP engine
// (weft_frames_bg.wasm) and the actor graph (weft_actors_bg.wasm) share no Rust state with it
// and are loaded the first time they are needed: by importing `weft/frames` / `weft/actors`,
// by the async entry points (`openActorStore`, `loadFrames`, `loadActors`), or, in Node,
// synchronously on the first call (frames; the others' first use is async). In browsers their
// wasm-bindgen glue is imported on demand too, so a page that never uses them fetches neither.

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
  let loading = null;
  const loadSync = () => {
    if (!glue && readSync && glues.has(name)) {
      const g = glues.get(name);
      g.initSync({ module: readSync(url) });
      glue = g;
    }
    return glue;
  };
  return {
    /** The loaded glue; loads it now if the host can read synchronously (Node); else null. */
    loadSync,
    /** Loads the module (once); resolves with its glue. */
    load() {
      if (glue || loadSync()) return Promise.resolve(glue);
      loading ??= importGlue()
        .then(async (g) => {
          if (readSync) g.initSync({ module: readSync(url) });
          else await g.default({ module_or_path: url });
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
