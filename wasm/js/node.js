// The weft package for Node: the same runtime, with `worker_threads` Workers.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { initSync } from './weft_wasm.js';
import { setWorkerFactory } from './runtime.js';

initSync({ module: readFileSync(new URL('./weft_wasm_bg.wasm', import.meta.url)) });

const shim = new URL('./worker-shim.mjs', import.meta.url);

function scriptUrl(specifier) {
  if (specifier instanceof URL) return specifier.href;
  const s = String(specifier);
  return /^[a-z]+:/i.test(s) ? s : pathToFileURL(resolve(s)).href;
}

/**
 * The worker_threads transport. The script is written for a DOM Worker (`self.onmessage`,
 * `self.postMessage`); a shim provides those globals, so the same file runs in browsers too.
 */
setWorkerFactory((specifier, options = {}) => (h) => {
  const w = new Worker(shim, { workerData: { script: scriptUrl(specifier) } });
  w.on('message', (d) => h.message(d));
  w.on('messageerror', (err) => h.undecodable(`messageerror: ${err?.message ?? err}`));
  w.on('error', (err) => h.closed(`worker threw an uncaught error: ${err?.stack ?? err}`));
  w.on('exit', (code) => h.closed(`worker exited with code ${code}`));
  if (options.unref) w.unref();
  return { post: (m) => w.postMessage(m), terminate: () => void w.terminate() };
});

export { createRuntime, Runtime, Endpoint, Job, WeftError } from './runtime.js';
export { createFramesEngine, FramesEngine, evidenceFor } from './frames.js';
