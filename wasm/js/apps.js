// The apps module in browsers: the ops app (`createApp`, `createClaims`) and agent sessions
// (`createAgent`, `validateToolArguments`) live in weft_apps_bg.wasm, a module that also holds
// the job registry (an app and an agent borrow their runtime's registry, so both must be in one
// module). `import 'weft'` loads only the jobs-only module (weft_jobs_bg.wasm); this one loads
// with `await loadApps()` or `import 'weft/apps'`, and before that the functions below throw
// NOT_LOADED. Once it is loaded, every new runtime is created over its registry; a runtime
// created earlier keeps running jobs on the jobs-only module but cannot host an agent
// (RUNTIME_WITHOUT_APPS: loading does not change it).
import { WeftError } from './error.js';
import { RUNTIME_WITHOUT_APPS } from './codes.js';
import { lazyModule } from './lazy.js';
import { setRegistryClass } from './runtime.js';

const wasm = lazyModule('apps', new URL('./weft_apps_bg.wasm', import.meta.url), () => import('./weft_apps.js'));

let glue = null;
let ops = null;
let agent = null;
let loading = null;
/** The classes of the apps module: undefined until `loadApps()` resolves. */
export let App, Operation, Claims, Agent;

/** Loads the apps module (once). After it, `createApp` etc. are synchronous, and new runtimes
 * run on its registry. */
export function loadApps() {
  loading ??= Promise.all([wasm.load(), import('./ops.js'), import('./agent.js')])
    .then(([g, o, a]) => {
      setRegistryClass(g.JobRegistry);
      ({ App, Operation, Claims } = o);
      ({ Agent } = a);
      [glue, ops, agent] = [g, o, a];
    })
    .catch((err) => {
      loading = null;
      throw err;
    });
  return loading;
}

/** @internal Whether the apps module is loaded (its registry is then the one runtimes use). */
export const appsLoaded = () => glue !== null;

// The jobs-only module's exports, once `weft` (index.js) has loaded it.
let jobsModule = null;
/** @internal index.js hands over the jobs-only module it loaded. */
export function setJobsModule(exports) {
  jobsModule = exports;
}

/** Bytes of wasm linear memory in use by the job registries: the jobs-only module's and the
 * apps module's, whichever are loaded (they grow, never shrink). */
export function wasmMemoryBytes() {
  return (jobsModule?.memory.buffer.byteLength ?? 0) + wasm.memoryBytes();
}

function need(what) {
  if (!glue) throw new WeftError('NOT_LOADED', `${what}: the apps module is not loaded yet: import 'weft/apps' or await loadApps() first`);
}

/** An ops app (NOT_LOADED before the apps module is loaded). */
export function createApp(options) {
  need('createApp');
  return ops.createApp(options);
}

/** A claims board (NOT_LOADED before the apps module is loaded). */
export function createClaims(options) {
  need('createClaims');
  return ops.createClaims(options);
}

/** An agent session on `runtime` (NOT_LOADED before the apps module is loaded;
 * RUNTIME_WITHOUT_APPS when the runtime was created before it was: its registry is in the
 * jobs-only module, and only a runtime created after the load can host an agent). */
export function createAgent(runtime, options) {
  need('createAgent');
  const reg = runtime?.registry;
  if (reg && typeof reg.takeAgentNotes !== 'function') {
    throw new WeftError(
      RUNTIME_WITHOUT_APPS,
      "createAgent: this runtime was created before the apps module was loaded (its job registry is in the jobs-only module, an agent's session must be in the same module): create the runtime after await loadApps() or import 'weft/apps'",
    );
  }
  return agent.createAgent(runtime, options);
}

/** Checks tool arguments against a JSON schema (NOT_LOADED before the apps module is loaded). */
export function validateToolArguments(schema, args) {
  need('validateToolArguments');
  return glue.validateToolArguments(schema, args);
}
