// `weft/apps` in browsers: everything `weft` exports, with the apps module (weft_apps_bg.wasm:
// the job registry, the ops app and agent sessions) loaded by the import, so `createApp`,
// `createClaims`, `createAgent` and `validateToolArguments` work at once. A page that imports
// only this entry downloads the apps module and not the jobs-only one (`weft`'s); its runtimes
// run on the apps module's registry.
import { loadApps } from './apps.js';
import './dom-worker.js';
// Fetched with this module rather than by `loadApps` one round later (start-up).
import './weft_apps.js';
import './ops.js';
import './agent.js';
import './error.js';
import './codes.js';
import './waiters.js';
import './lazy.js';

await loadApps();

export { createRuntime, Runtime, Endpoint, Job, WeftError } from './runtime.js';
export { openActorStore, deleteActorStore, ActorStore, loadActors } from './actors.js';
export { appTools, jobTool } from './agent-tools.js';
export { createApp, App, Operation, createClaims, Claims, createAgent, Agent, validateToolArguments, loadApps, wasmMemoryBytes } from './apps.js';
export { scriptedModel } from './scripted-model.js';
export { openaiModel, anthropicModel, builtinModel, resolveModel, loadModels } from './models.js';
export { createFramesEngine, FramesEngine, evidenceFor, loadFrames } from './frames.js';
