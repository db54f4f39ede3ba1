// The DGP agent controller as agent tools (`dgp_surfaces`, `dgp_run_surface`), like
// `weft_host::agent::tools` natively, exported by `weft/frames`. The controller's rules, its run
// machine, the base-URL rule, the tool declarations and the reading of a call's arguments are
// the core's (the frames WebAssembly module); this file binds them to JS values and keeps the
// per-surface queue. The controller's HTTP/timer loop is in `dgp-controller.js`, imported on
// first use.

import { WeftError } from './error.js';
import { loaded } from './frames.js';

/** The controller's loop, imported on first use. */
const controllerModule = () => import('./dgp-controller.js');

// ----- the controller's rules (the core's, in the frames module) ------------------------------

const frameText = (frame) => (typeof frame === 'string' ? frame : JSON.stringify(frame));

/**
 * The controller's next move on a frame: `{step: 'quiescent'}` or `{step: 'assess' | 'fulfil' |
 * 'input_required', decisionId}`; throws CAPABILITY_REQUIRED for a frame needing a feature
 * outside `supportedFeatures` (default: every feature weft's controller understands).
 */
export function controllerNextStep(frame, supportedFeatures) {
  return JSON.parse(loaded().controllerNextStep(frameText(frame), supportedFeatures ?? undefined));
}

/**
 * Checks a judgment of `decisionId` against the frame's decision and builds what to record:
 * `{assessment, after: 'commit' | 'speculative' | 'abstained' | 'human_required', commit}`
 * (`commit` is the commit request when an agent may commit it, else null).
 */
export function controllerJudgment(frame, decisionId, { result, resolver, assessmentId, speculative = false }) {
  return JSON.parse(loaded().controllerJudgment(frameText(frame), decisionId, JSON.stringify({ result, resolver, assessmentId, speculative })));
}

/** The result an input decision with a `fulfillment` receives from its service's `text` (checked, never truncated). */
export function fulfilmentResult(frame, decisionId, text) {
  return JSON.parse(loaded().fulfilmentResult(frameText(frame), decisionId, String(text)));
}

/**
 * A DGP 0.1 controller bound to one server (`baseUrl`: https, or plain http to a loopback host
 * unless `allowInsecureHttp`; bearer `token`), one decision adapter and one text service.
 * `adapter(decision, evidencePack, frame, {signal})` resolves to `{result, resolver}` (an
 * AssessmentResult and the Resolver to record; `adapter.resolver` is used when the answer
 * names none); `adapter.modalities` lists the evidence kinds it really reads (default
 * `['text', 'json']`). `textService(decision, evidencePack, frame, {signal})` resolves to
 * `{text, resolver}` (or a string) for input decisions naming a `fulfillment`.
 * `maxServiceCalls` (default 3) bounds its text-service requests over its whole life.
 */
export function createDgpController(options = {}) {
  const { baseUrl, adapter, allowInsecureHttp = false, maxServiceCalls = 3 } = options;
  if (typeof baseUrl !== 'string') throw new WeftError('INVALID_ARGUMENT', '`baseUrl` must be an http(s) URL');
  const glue = loaded();
  const base = new glue.DgpBaseUrl(baseUrl, allowInsecureHttp === true);
  if (typeof adapter !== 'function') throw new WeftError('INVALID_ARGUMENT', '`adapter` must be a function (decision, evidencePack, frame) => {result, resolver}');
  const budget = new glue.DgpBudget(maxServiceCalls);
  let impl = null;
  const load = () =>
    (impl ??= controllerModule().then(
      (m) => m.openController(options, base, budget),
      (err) => {
        impl = null;
        throw err;
      },
    ));
  return {
    /** The server's surface list: `[{surface_id, title, state, revision, ...}]`. */
    async surfaces(o) {
      return (await load()).surfaces(o);
    },
    /**
     * Drives surface `sid` until it stops: at most `steps` steps, or earlier when `signal`
     * aborts (at a safe point). A failure ends the run with a `stopped` event carrying the
     * problem. Resolves to `SurfaceRun::to_json`'s shape.
     */
    async runSurface(sid, opts, io) {
      return (await load()).runSurface(sid, opts, io);
    },
    /** Text-service requests made so far (bounded by `maxServiceCalls`). */
    get serviceCalls() {
      return budget.used;
    },
  };
}

/** The declarations (name, description, JSON Schema, eligibility) of both tools (the core's). */
export function dgpToolDeclarations() {
  return JSON.parse(loaded().dgpToolDeclarations());
}

/**
 * The DGP controller as agent tools: `agent.registerTools(dgpTools({baseUrl, token, adapter}))`.
 * Options are those of {@link createDgpController} plus `steps` (default 8) and `speculative`
 * (default false), the defaults of a run, and `onEvent`, handed every event as it happens.
 * Both tools are parallel-eligible and safe to cancel; two runs of one surface queue. The
 * returned array also carries the `controller`.
 */
export function dgpTools({ steps, speculative = false, onEvent, controller, ...options } = {}) {
  const ctl = controller ?? createDgpController(options);
  const defaultSteps = steps ?? loaded().dgpDefaultSteps();
  // One run per surface at a time: q[0] holds the surface, the others wait in order.
  const queues = new Map();
  const acquire = (sid, signal) => {
    if (signal?.aborted) return Promise.resolve(false);
    let q = queues.get(sid);
    if (!q) queues.set(sid, (q = []));
    if (q.length === 0) {
      q.push(null);
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const onAbort = () => {
        q.splice(q.indexOf(w), 1);
        resolve(false);
      };
      const w = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve(true);
      };
      q.push(w);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  };
  const release = (sid) => {
    const q = queues.get(sid);
    q.shift();
    if (q.length === 0) queues.delete(sid);
    else q[0]();
  };

  const [list, run] = dgpToolDeclarations();
  const tools = [
    {
      ...list,
      // Failures reject with the server's problem code (or TRANSPORT_ERROR).
      handler: async (_args, ctx) => ({ surfaces: await ctl.surfaces({ signal: ctx?.signal }) }),
    },
    {
      ...run,
      handler: async (args, ctx) => {
        const parsed = loaded().dgpRunArguments(JSON.stringify(args ?? {}), defaultSteps, speculative === true);
        if (parsed === undefined) throw new WeftError('INVALID_ARGUMENT', '`surface_id` must be a string');
        const { surfaceId: sid, ...opts } = JSON.parse(parsed);
        const signal = ctx?.signal;
        if (!(await acquire(sid, signal))) {
          const r = JSON.parse(loaded().dgpRunReport(sid));
          onEvent?.(r.stop);
          return { ...r, events: [r.stop] };
        }
        try {
          return await ctl.runSurface(sid, opts, { signal, onEvent });
        } finally {
          release(sid);
        }
      },
    },
  ];
  tools.controller = ctl;
  return tools;
}

// ----- fixtures (the core's, in the frames module) -------------------------------------------

/**
 * Deterministic fixtures reproducing the seed's ThreadDesk walkthroughs (the core's
 * `frames::fixtures::judge`, as `weft agent` uses it); not a model, and labelled so. recovery:
 * `retry` on thread-42 while offered, else `request_reasoning`, else `investigate`; update:
 * `draft_update`, else `finish`; review: `publish` (the controller stops there: it needs a
 * human); any other choice: the first option by id.
 */
export async function dgpFixtureAdapter(decision, _evidence, frame) {
  return JSON.parse(loaded().fixtureJudgment(frameText(frame), decision.decision_id));
}
dgpFixtureAdapter.modalities = ['text', 'json'];

/** Canned texts for the fixture services (`llm.reason`, `llm.generate_text`); not model output. */
export async function dgpFixtureText(decision) {
  return JSON.parse(loaded().fixtureText(decision?.fulfillment?.service_id ?? ''));
}
dgpFixtureText.modalities = ['text', 'json'];
