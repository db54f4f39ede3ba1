// The lazily loaded WebAssembly modules of the package. `weft` itself loads only the job
// registry, agent sessions and the ops app (weft_wasm_bg.wasm); the DGP engine
// (weft_frames_bg.wasm) and the actor graph (weft_actors_bg.wasm) share no Rust state with it
// and are loaded the first time they are needed: by importing `weft/frames` / `weft/actors`,
// by the async entry points (`openActorStore`, `loadFrames`), or, in Node, synchronously on
// the first call.

let readSync = null;

/** @internal Node entry modules install a synchronous file reader (`readFileSync`). */
export function setSyncReader(read) {
  readSync = read;
}

/**
 * One lazily loaded module: `url` of its .wasm, and its wasm-bindgen glue's `init` (async)
 * and `initSync`.
 */
export function lazyModule(url, init, initSync) {
  let loading = null;
  let ready = false;
  const loadSync = () => {
    if (!ready && readSync) {
      initSync({ module: readSync(url) });
      ready = true;
    }
    return ready;
  };
  return {
    /** Loads the module now if the host can read it synchronously (Node); true once loaded. */
    loadSync,
    /** Loads the module (once); resolves when it is ready. */
    load() {
      if (ready || loadSync()) return Promise.resolve();
      loading ??= init({ module_or_path: url }).then(
        () => {
          ready = true;
        },
        (err) => {
          loading = null;
          throw err;
        },
      );
      return loading;
    },
  };
}
