// The weft package for browsers (and any environment with a DOM-style `Worker`). It loads the
// jobs-only WebAssembly module (weft_jobs_bg.wasm: the job registry); the ops app and agent
// sessions are in the apps module, loaded by `await loadApps()` or `import 'weft/apps'` (see
// apps.js); frames, actors and models load on first use (lazy.js).
import init, { JobRegistry } from './weft_jobs.js';
import { setRegistryClass } from './runtime.js';
import { appsLoaded, setJobsModule } from './apps.js';
import './dom-worker.js';
// The leaves of the module graph, named here too so that a browser fetches them in the same
// round as the modules above instead of one round later (start-up: fewer sequential fetches).
// Only modules of this graph: each file costs the page a request (waiters.js is agent.js's and
// loads with it).
import './error.js';
import './codes.js';
import './lazy.js';

setJobsModule(await init({ module_or_path: new URL('./weft_jobs_bg.wasm', import.meta.url) }));
// `weft/apps` may have been evaluated first: its registry (the apps module's) then stays.
if (!appsLoaded()) setRegistryClass(JobRegistry);

export { createRuntime, Runtime, Endpoint, Job, WeftError } from './runtime.js';
export { openActorStore, deleteActorStore, ActorStore, loadActors } from './actors.js';
export { appTools, jobTool } from './agent-tools.js';
export { createApp, App, Operation, createClaims, Claims, createAgent, Agent, validateToolArguments, loadApps, wasmMemoryBytes } from './apps.js';
export { scriptedModel } from './scripted-model.js';
export { openaiModel, anthropicModel, builtinModel, resolveModel, loadModels } from './models.js';
export { createFramesEngine, FramesEngine, evidenceFor, loadFrames } from './frames.js';
