// The weft package for Node: the same runtime, with `worker_threads` Workers. Every runtime runs
// on the apps module (weft_apps_bg.wasm: the job registry, the ops app, agent sessions), so
// `loadApps()` has nothing to do and `weft/apps` is this module. The module is compiled and
// instantiated synchronously on its first use (the glue's, wasm/tools/init-on-first-use.mjs: a
// runtime's first core call, `createApp`, `createAgent`, ...), not at import, and a runtime
// creates its registry on first use too: `createRuntime().openWorker(...)` spawns the Worker
// first, and the compile (~20 ms) runs while the Worker's thread boots.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { initSync, JobRegistry, __weftInitOnFirstUse } from './weft_apps.js';
import './node-reader.js';
import { setWorkerFactory, setRegistryClass } from './runtime.js';
import { setFsBackend } from './actors.js';

// Node 20's V8 11 aborts when an inlined JS→wasm call that returns an externref is deoptimized
// lazily: the glue calls those exports through a Proxy there (wasm/tools/guard-exports.mjs), so
// no V8 flag is set (one would make Node reject its code cache in every Worker).
let wasm = null;
const apps = () => (wasm ??= initSync({ module: readFileSync(new URL('./weft_apps_bg.wasm', import.meta.url)) }));
__weftInitOnFirstUse(apps);
setRegistryClass(JobRegistry);

/** Node's runtimes run on the apps module (compiled on its first use): resolves at once. */
export async function loadApps() {}

/** Bytes of wasm linear memory in use by the core (it grows, never shrinks); compiles the apps
 * module if nothing has used it yet. */
export function wasmMemoryBytes() {
  return apps().memory.buffer.byteLength;
}

// `openActorStore({ root })`: a `$CHAT_ROOT` directory (loaded on first use; browsers never name it).
setFsBackend(() => import('./actors-fs.js'));

// The shim as CommonJS (wasm/build.sh): the Worker's first module load is then the task script.
const shim = new URL('./worker-shim.cjs', import.meta.url);

function scriptUrl(specifier) {
  if (specifier instanceof URL) return specifier.href;
  const s = String(specifier);
  return /^[a-z]+:/i.test(s) ? s : pathToFileURL(resolve(s)).href;
}

/**
 * The worker_threads transport. The script is written for a DOM Worker (`self.onmessage`,
 * `self.postMessage`); a shim provides those globals, so the same file runs in browsers too.
 */
// The Worker is spawned when `openWorker` is called, before the core opens the endpoint (its
// thread boots meanwhile; its events arrive on later tasks, after `connect` has attached the
// handlers). A spawn that throws is reported by `connect`, as a transport that failed to start;
// an endpoint the core refuses `abandon`s the Worker.
setWorkerFactory((specifier, options = {}) => {
  let w = null;
  let failed = null;
  try {
    w = new Worker(shim, { workerData: { script: scriptUrl(specifier) } });
    if (options.unref) w.unref();
  } catch (err) {
    failed = { err };
  }
  const connect = (h) => {
    if (failed) throw failed.err;
    w.on('message', h.message);
    w.on('messageerror', (err) => h.undecodable(`messageerror: ${err?.message ?? err}`));
    w.on('error', (err) => h.closed(`worker threw an uncaught error: ${err?.stack ?? err}`));
    w.on('exit', (code) => h.closed(`worker exited with code ${code}`));
    return { post: (m) => w.postMessage(m), terminate: () => void w.terminate() };
  };
  connect.abandon = () => {
    if (!w) return;
    w.on('error', () => {});
    void w.terminate();
  };
  return connect;
});

export { createRuntime, Runtime, Endpoint, Job, WeftError } from './runtime.js';
export { openActorStore, deleteActorStore, ActorStore, loadActors } from './actors.js';
export { appTools, jobTool } from './agent-tools.js';
export { createApp, App, Operation, createClaims, Claims } from './ops.js';
export { createAgent, Agent } from './agent.js';
export { scriptedModel } from './scripted-model.js';
export { openaiModel, anthropicModel, builtinModel, resolveModel, loadModels } from './models.js';
export { validateToolArguments } from './weft_apps.js';
export { createFramesEngine, FramesEngine, evidenceFor, loadFrames } from './frames.js';
