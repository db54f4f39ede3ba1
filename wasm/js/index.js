// The weft package for browsers (and any environment with a DOM-style `Worker`).
import init from './weft_wasm.js';
import { setWorkerFactory } from './runtime.js';
// The leaves of the module graph, named here too so that a browser fetches them in the same
// round as the modules above instead of one round later (start-up: fewer sequential fetches).
import './error.js';
import './codes.js';
import './waiters.js';
import './lazy.js';

const wasm = await init({ module_or_path: new URL('./weft_wasm_bg.wasm', import.meta.url) });

/** Bytes of wasm linear memory in use by the core (it grows, never shrinks). */
export function wasmMemoryBytes() {
  return wasm.memory.buffer.byteLength;
}

/** The DOM Worker transport: an uncaught error terminates the Worker (its runs are lost). */
setWorkerFactory((specifier, options = {}) => (h) => {
  const w =
    typeof Worker !== 'undefined' && specifier instanceof Worker
      ? specifier
      : new Worker(specifier, { type: options.type ?? 'module', name: options.name });
  w.addEventListener('message', (e) => h.message(e.data));
  w.addEventListener('messageerror', () => h.undecodable('messageerror: the message could not be deserialized'));
  w.addEventListener('error', (e) => {
    e.preventDefault?.();
    w.terminate();
    const where = e.filename ? ` (${e.filename}:${e.lineno})` : '';
    h.closed(`worker threw an uncaught error: ${e.message ?? 'unknown error'}${where}; terminated`);
  });
  return { post: (m) => w.postMessage(m), terminate: () => w.terminate() };
});

export { createRuntime, Runtime, Endpoint, Job, WeftError } from './runtime.js';
export { openActorStore, deleteActorStore, ActorStore, loadActors } from './actors.js';
export { appTools, jobTool } from './agent-tools.js';
export { createApp, App, Operation, createClaims, Claims } from './ops.js';
export { createAgent, Agent, scriptedModel } from './agent.js';
export { openaiModel, anthropicModel, builtinModel, resolveModel, loadModels } from './models.js';
export { validateToolArguments } from './weft_wasm.js';
export { createFramesEngine, FramesEngine, evidenceFor, loadFrames } from './frames.js';
