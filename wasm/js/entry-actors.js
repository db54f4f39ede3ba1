// `weft/actors`: the actor graph alone. Importing it loads its WebAssembly module
// (weft_actors_bg.wasm) and nothing of the job runtime.
import { loadActors } from './actors.js';

await loadActors();

export { openActorStore, deleteActorStore, ActorStore, loadActors } from './actors.js';
export { WeftError } from './error.js';
export { NodeAgent, appTools, jobTool } from './node-agent.js';
export { builtinModel, openaiModel, anthropicModel, resolveModel } from './models.js';
