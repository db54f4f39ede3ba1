// The apps module in browsers: the ops app (`createApp`, `createClaims`) and agent sessions
// (`createAgent`, `validateToolArguments`) live in weft_apps_bg.wasm, a module that also holds
// the job registry (an app and an agent borrow their runtime's registry, so both must be in one
// module). `import 'weft'` loads only the jobs-only module (weft_jobs_bg.wasm); this one loads
// with `await loadApps()` or `import 'weft/apps'`, and before that the functions below throw
// NOT_LOADED. A runtime creates its job registry on its first use (an endpoint opened, a job
// submitted, `createAgent` itself), of the module loaded then: once this one is loaded, every
// runtime first used afterwards runs on its registry, a runtime made at page start included,
// and can host an agent. A runtime used before the load (jobs ran on it) keeps running its
// jobs on the jobs-only module but cannot host an agent (RUNTIME_WITHOUT_APPS: loading does
// not move its registry).
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

/** Loads the apps module (once). After it, `createApp` etc. are synchronous, and every runtime
 * whose registry is created afterwards (on its first use) runs on its registry. */
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
 * RUNTIME_WITHOUT_APPS when the runtime was used before it was: its registry, created on its
 * first use, is in the jobs-only module; a runtime first used after the load, wherever it was
 * made, hosts an agent). */
export function createAgent(runtime, options) {
  need('createAgent');
  // (A runtime not used yet creates its registry here, of the apps module.)
  const reg = runtime?.registry;
  if (reg && typeof reg.takeAgentNotes !== 'function') {
    throw new WeftError(
      RUNTIME_WITHOUT_APPS,
      "createAgent: this runtime cannot host an agent: jobs ran on it before the apps module was loaded (it was used, an endpoint opened or a job submitted, before loadApps() resolved, so its job registry is in the jobs-only module, and an agent's session must be in the same module as its runtime's registry; loading does not move a registry). It keeps running its jobs. Create the runtime for the agent after await loadApps() (or import 'weft/apps'), or load the apps module before this runtime's first use",
    );
  }
  return agent.createAgent(runtime, options);
}

/** Checks tool arguments against a JSON schema (NOT_LOADED before the apps module is loaded). */
export function validateToolArguments(schema, args) {
  need('validateToolArguments');
  return glue.validateToolArguments(schema, args);
}
