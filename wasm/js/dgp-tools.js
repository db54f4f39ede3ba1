// The DGP agent controller as agent tools (`dgp_surfaces`, `dgp_run_surface`), like
// `weft_host::agent::tools` natively, exported by `weft/frames`: the controller's rules (the
// core's, in the frames WebAssembly module), the tool declarations, the per-surface queue and
// the fixtures. The controller's I/O is in `dgp-controller.js`, imported on first use.

import { WeftError } from './error.js';
import { loaded } from './frames.js';

/** The controller's I/O and the fixtures, imported on first use. */
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
  const f = typeof frame === 'string' ? JSON.parse(frame) : frame;
  const assessment = {
    dgp: '0.1',
    assessment_id: assessmentId,
    frame_id: f?.frame_id,
    decision_id: decisionId,
    mode: speculative ? 'speculative' : 'live',
    resolver,
    result,
  };
  return { assessment, ...JSON.parse(loaded().controllerJudgment(frameText(frame), JSON.stringify(assessment))) };
}

/** The result an input decision with a `fulfillment` receives from its service's `text` (checked, never truncated). */
export function fulfilmentResult(frame, decisionId, text) {
  return JSON.parse(loaded().fulfilmentResult(frameText(frame), decisionId, String(text)));
}

/** The most steps one `dgp_run_surface` call may take. */
export const DGP_MAX_STEPS = 32;

/** @internal The event of a run stopped at a safe point: nothing of this step is in flight. */
export function interrupted(sid, at, recorded) {
  const v = { surface: sid, event: 'interrupted', at, detail: 'stopped at a safe point: no commit is in flight' };
  if (recorded) {
    v.assessment_id = recorded;
    v.detail = 'stopped at a safe point: the assessment is recorded, not committed';
  }
  return v;
}

/** @internal A run's report `{surface_id, ended, steps, commits, commit_in_doubt, stop, events}`, as `SurfaceRun::to_json`. */
export function runJson(sid, events, stop, steps) {
  let inDoubt = null;
  if (stop.event === 'stopped' && stop.problem?.code === 'TRANSPORT_ERROR') {
    const last = events.findLastIndex((e) => e.event === 'commit_intent');
    if (last >= 0 && !events.slice(last).some((e) => e.event === 'committed')) inDoubt = events[last];
  }
  return {
    surface_id: sid,
    ended: stop.event,
    steps,
    commits: events.filter((e) => e.event === 'committed').map((e) => e.receipt),
    commit_in_doubt: inDoubt,
    stop,
    events,
  };
}

/**
 * A DGP 0.1 controller bound to one server (`baseUrl`, bearer `token`), one decision adapter
 * and one text service. `adapter(decision, evidencePack, frame, {signal})` resolves to
 * `{result, resolver}` (an AssessmentResult and the Resolver to record; `adapter.resolver` is
 * used when the answer names none); `adapter.modalities` lists the evidence kinds it really
 * reads (default `['text', 'json']`). `textService(decision, evidencePack, frame, {signal})`
 * resolves to `{text, resolver}` (or a string) for input decisions naming a `fulfillment`.
 * `maxServiceCalls` (default 3) bounds its text-service requests over its whole life.
 */
export function createDgpController(options = {}) {
  const { baseUrl, adapter } = options;
  if (typeof baseUrl !== 'string' || !/^https?:\/\//.test(baseUrl)) throw new WeftError('INVALID_ARGUMENT', '`baseUrl` must be an http(s) URL');
  if (typeof adapter !== 'function') throw new WeftError('INVALID_ARGUMENT', '`adapter` must be a function (decision, evidencePack, frame) => {result, resolver}');
  const count = { serviceCalls: 0 };
  let impl = null;
  const load = () =>
    (impl ??= controllerModule().then(
      (m) => m.openController(options, count),
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
      return count.serviceCalls;
    },
  };
}

/** The declarations (name, description, JSON Schema, eligibility) of both tools. */
export function dgpToolDeclarations() {
  return [
    {
      name: 'dgp_surfaces',
      description: 'List the decision surfaces of the DGP server: surface_id, title, state and revision of each. Read-only.',
      parameters: { type: 'object', properties: {}, additionalProperties: false },
      supportsParallel: true,
      safeToCancel: true,
    },
    {
      name: 'dgp_run_surface',
      description:
        'Drive one decision surface until it stops: read its frame, judge the next automatic decision, record the ' +
        'assessment and commit it, repeatedly. Returns why it ended (`quiescent`, `input_required`, ' +
        '`human_review_required` — an effect only an authenticated human may commit; the agent never commits it —, ' +
        '`abstained`, `speculative_recorded`, `stopped` with a problem such as STALE_FRAME, `step_budget_reached`, or ' +
        '`interrupted`), the receipts of the commits it made, a commit in doubt if any, and every event. Calls for ' +
        'different surfaces may run together.',
      parameters: {
        type: 'object',
        properties: {
          surface_id: { type: 'string', minLength: 1, maxLength: 200, description: 'The surface to drive (see dgp_surfaces).' },
          max_steps: { type: 'integer', minimum: 1, maximum: DGP_MAX_STEPS, description: 'Judgments before giving up.' },
          speculative: { type: 'boolean', description: 'Record judgments as speculative assessments and stop; never commit.' },
        },
        required: ['surface_id'],
        additionalProperties: false,
      },
      supportsParallel: true,
      safeToCancel: true,
    },
  ];
}

/**
 * The DGP controller as agent tools: `agent.registerTools(dgpTools({baseUrl, token, adapter}))`.
 * Options are those of {@link createDgpController} plus `steps` (default 8) and `speculative`
 * (default false), the defaults of a run, and `onEvent`, handed every event as it happens.
 * Both tools are parallel-eligible and safe to cancel; two runs of one surface queue. The
 * returned array also carries the `controller`.
 */
export function dgpTools({ steps = 8, speculative = false, onEvent, controller, ...options } = {}) {
  const ctl = controller ?? createDgpController(options);
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
        const sid = args?.surface_id;
        if (typeof sid !== 'string') throw new WeftError('INVALID_ARGUMENT', '`surface_id` must be a string');
        const opts = {
          steps: Number.isInteger(args.max_steps) ? Math.min(Math.max(args.max_steps, 1), DGP_MAX_STEPS) : steps,
          speculative: typeof args.speculative === 'boolean' ? args.speculative : speculative,
        };
        const signal = ctx?.signal;
        if (!(await acquire(sid, signal))) {
          const v = { surface: sid, event: 'interrupted', at: 'waiting_for_surface', detail: 'another run of this surface was still going; this one never began' };
          onEvent?.(v);
          return runJson(sid, [v], v, 0);
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
