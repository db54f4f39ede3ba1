// The DGP agent controller in JS, bound as agent tools (`dgp_surfaces`, `dgp_run_surface`) like
// `weft_host::agent::tools` natively. The rules — which decision next, what evidence an adapter
// may see, whether a judgment may be committed, the assessment and commit requests — are the
// core's (the frames WebAssembly module); this file does the I/O: HTTP through `fetch`, the
// decision adapter and text service calls, the per-surface queue and the stop signal.
//
// Stopping a run: an AbortSignal stops it at its next safe point. Reading a frame and waiting
// for the adapter or the text service are abandoned at once (they change nothing on the
// server); recording an assessment and committing it never are: once the commit intent is
// logged the commit is carried to an answer (retried with the same key and body after a
// transport failure), and the run stops after it. A stopped run ends with an `interrupted`
// event and no commit in flight; everything it committed has a receipt among its events.

import { WeftError } from './error.js';
import { controllerJudgment, controllerNextStep, evidenceFor, fulfilmentResult, loadFrames } from './frames.js';

/** The most steps one `dgp_run_surface` call may take. */
export const DGP_MAX_STEPS = 32;

const STOPPED = Symbol('stopped');
const TIMEOUT_MS = 30_000;

/** A failure talking to a server: a problem it answered (`status`, `code`, `detail`) or a
 * transport failure (code TRANSPORT_ERROR: no usable answer, the outcome is unknown). */
class CallError extends WeftError {
  constructor(problem) {
    super(problem.code, problem.detail);
    this.problem = problem;
  }
}

const transport = (detail) => new CallError({ code: 'TRANSPORT_ERROR', detail });

/** The event-log form of any failure. */
function problemOf(err) {
  if (err instanceof CallError) return err.problem;
  const p = { code: typeof err?.code === 'string' ? err.code : 'ADAPTER_ERROR', detail: String(err?.message ?? err) };
  return typeof err?.status === 'number' ? { status: err.status, ...p } : p;
}

function randomId(prefix) {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return `${prefix}-${Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')}`;
}

/** A surface id as one path segment (the same escaping as the core's `path_segment`). */
const segment = (s) => Array.from(new TextEncoder().encode(s), (b) => (/[A-Za-z0-9\-._~]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`)).join('');

/** `p`'s value, or STOPPED if `signal` aborts first (p is then left to settle unobserved). */
function unless(signal, p) {
  if (signal?.aborted) {
    p.catch(() => {});
    return Promise.resolve(STOPPED);
  }
  if (!signal) return p;
  return new Promise((resolve, reject) => {
    const onAbort = () => resolve(STOPPED);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

/** The event of a run stopped at a safe point: nothing of this step is in flight. */
function interrupted(sid, at, recorded) {
  const v = { surface: sid, event: 'interrupted', at, detail: 'stopped at a safe point: no commit is in flight' };
  if (recorded) {
    v.assessment_id = recorded;
    v.detail = 'stopped at a safe point: the assessment is recorded, not committed';
  }
  return v;
}

/** `{surface_id, ended, steps, commits, commit_in_doubt, stop, events}`, as `SurfaceRun::to_json`. */
function runJson(sid, events, stop, steps) {
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
 */
export function createDgpController({ baseUrl, token, adapter, textService, fetch: fetchFn = globalThis.fetch, maxServiceCalls = 3 } = {}) {
  if (typeof baseUrl !== 'string' || !/^https?:\/\//.test(baseUrl)) throw new WeftError('INVALID_ARGUMENT', '`baseUrl` must be an http(s) URL');
  if (typeof adapter !== 'function') throw new WeftError('INVALID_ARGUMENT', '`adapter` must be a function (decision, evidencePack, frame) => {result, resolver}');
  const base = baseUrl.replace(/\/+$/, '');
  const origin = new URL(base).origin;
  let serviceCalls = 0;
  let manifest = null;

  /** Resolves a server-provided link: an absolute path, or a URL on the configured origin. */
  const url = (link) => {
    if (link.startsWith('/') && !link.startsWith('//')) return base + link;
    let u = null;
    try {
      u = new URL(link);
    } catch {
      // not a URL
    }
    if (u && u.origin === origin) return link;
    throw new CallError({ status: 0, code: 'UNTRUSTED_LINK', detail: `link \`${link}\` leaves the configured origin` });
  };

  /** The answer's JSON text (and value); problems and transport failures throw CallError. */
  const send = async (method, link, body, headers = {}, signal) => {
    const target = url(link);
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new Error(`no answer within ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    const onAbort = () => ac.abort(signal.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    let status;
    let text;
    try {
      const res = await fetchFn(target, {
        method,
        headers: {
          accept: 'application/json',
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...headers,
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: ac.signal,
      });
      status = res.status;
      text = await res.text();
    } catch (err) {
      throw transport(`${target}: ${err?.message ?? err}`);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
    let value = null;
    try {
      value = JSON.parse(text);
    } catch (err) {
      if (status >= 200 && status < 300) throw transport(`unreadable JSON answer: ${err.message}`);
    }
    if (status < 200 || status >= 300) {
      throw new CallError({ status, code: typeof value?.code === 'string' ? value.code : `HTTP_${status}`, detail: typeof value?.detail === 'string' ? value.detail : '' });
    }
    return { text, value };
  };

  /** Loads the rules (the frames module) and checks once that the server speaks DGP 0.1. */
  const ready = async () => {
    await loadFrames();
    if (manifest) return manifest;
    const { value } = await send('GET', '/.well-known/dgp');
    if (value?.dgp !== '0.1') throw new CallError({ status: 0, code: 'INVALID_MESSAGE', detail: 'the server does not speak DGP 0.1' });
    return (manifest = value);
  };

  const pack = (frame, frameText, decisionId, modalities) => {
    const { evidenceIds, omittedOptional } = evidenceFor(frameText, decisionId, modalities);
    const byId = new Map((frame.observations ?? []).map((e) => [e.evidence_id, e]));
    return { evidence: evidenceIds.map((id) => byId.get(id)), omittedOptional };
  };

  /** One step on `sid`: resolves to the stop event (emitted), or null when a commit was made. */
  const step = async (sid, { speculative }, signal, emit) => {
    const read = await unless(signal, send('GET', `/dgp/surfaces/${segment(sid)}/frame`, undefined, {}, signal));
    if (read === STOPPED) return end(interrupted(sid, 'reading_frame'), emit);
    const { text: frameText, value: frame } = read;
    emit({ surface: sid, event: 'frame', frame_id: frame.frame_id, read_set: frame.read_set, decisions: (frame.decisions ?? []).map((d) => d.node_id) });
    const next = controllerNextStep(frameText);
    if (next.step === 'quiescent') return end({ surface: sid, event: 'quiescent' }, emit);
    if (next.step === 'input_required') return end({ surface: sid, event: 'input_required', decision_id: next.decisionId }, emit);
    const decision = frame.decisions.find((d) => d.decision_id === next.decisionId);
    let result;
    let resolver;
    if (next.step === 'fulfil') {
      if (speculative) {
        return end({ surface: sid, event: 'stopped', reason: 'speculative mode assesses choices only; it does not buy generation' }, emit);
      }
      if (typeof textService !== 'function') throw new CallError({ status: 0, code: 'SERVICE_UNAVAILABLE', detail: 'no text service is configured for input nodes' });
      const evidence = pack(frame, frameText, next.decisionId, textService.modalities ?? ['text', 'json']);
      if (serviceCalls++ >= maxServiceCalls) {
        throw new CallError({ status: 409, code: 'CLIENT_BUDGET_EXHAUSTED', detail: 'this controller reached its service-call limit' });
      }
      const generated = await unless(signal, Promise.resolve().then(() => textService(decision, evidence, frame, { signal })));
      if (generated === STOPPED) return end(interrupted(sid, 'fulfilling'), emit);
      const text = typeof generated === 'string' ? generated : generated?.text;
      if (typeof text !== 'string') throw transport('the text service answered without `text`');
      resolver = (typeof generated === 'object' && generated.resolver) || textService.resolver || { kind: 'llm', provider: 'js-text-service' };
      emit({ surface: sid, event: 'service_text', service_id: decision.fulfillment?.service_id ?? null, chars: [...text].length });
      result = fulfilmentResult(frameText, next.decisionId, text);
    } else {
      const evidence = pack(frame, frameText, next.decisionId, adapter.modalities ?? ['text', 'json']);
      const decided = await unless(signal, Promise.resolve().then(() => adapter(decision, evidence, frame, { signal })));
      if (decided === STOPPED) return end(interrupted(sid, 'judging'), emit);
      result = decided?.result;
      resolver = decided?.resolver ?? adapter.resolver;
      if (!resolver) throw new WeftError('INVALID_MESSAGE', 'the decision adapter named no resolver (answer {result, resolver}, or set adapter.resolver)');
    }
    // Checked against the decision before anything is recorded.
    const judged = controllerJudgment(frameText, next.decisionId, { result, resolver, assessmentId: randomId('a'), speculative });
    // The judgment is not recorded: nothing reached the server in this step.
    if (signal?.aborted) return end(interrupted(sid, 'before_recording'), emit);
    const req = judged.assessment;
    // Recording is not abandoned half way: its outcome would be unknown.
    await send('POST', '/dgp/assessments', req);
    emit({ surface: sid, event: 'assessed', assessment: req });
    switch (judged.after) {
      case 'speculative':
        return end({ surface: sid, event: 'speculative_recorded', assessment_id: req.assessment_id }, emit);
      case 'abstained':
        return end({ surface: sid, event: 'abstained', assessment_id: req.assessment_id }, emit);
      case 'human_required':
        return end({ surface: sid, event: 'human_review_required', frame_id: frame.frame_id, assessment_id: req.assessment_id }, emit);
    }
    // Recorded, never committed: a commit needs this step's intent, which is not logged.
    if (signal?.aborted) return end(interrupted(sid, 'before_commit', req.assessment_id), emit);
    const key = randomId('k');
    // The intent is logged before the request: after an unknown outcome the same key and body
    // are retried, never a new key. From here on a stop waits for the answer.
    emit({ surface: sid, event: 'commit_intent', idempotency_key: key, request: judged.commit });
    for (let attempt = 1; ; attempt++) {
      try {
        const { value: receipt } = await send('POST', '/dgp/commits', judged.commit, { 'idempotency-key': key });
        emit({ surface: sid, event: 'committed', receipt });
        return null;
      } catch (err) {
        if (!(err instanceof CallError && err.problem.code === 'TRANSPORT_ERROR' && attempt < 4)) throw err;
        emit({ surface: sid, event: 'commit_retry', idempotency_key: key, detail: err.problem.detail });
        await new Promise((r) => setTimeout(r, 200 * attempt));
      }
    }
  };

  const end = (v, emit) => {
    emit(v);
    return v;
  };

  return {
    /** The server's surface list: `[{surface_id, title, state, revision, ...}]`. */
    async surfaces({ signal } = {}) {
      const m = await ready();
      const { value } = await send('GET', typeof m.links?.surfaces === 'string' ? m.links.surfaces : '/dgp/surfaces', undefined, {}, signal);
      return Array.isArray(value?.surfaces) ? value.surfaces : [];
    },

    /** Text-service requests made so far (bounded by `maxServiceCalls`). */
    get serviceCalls() {
      return serviceCalls;
    },

    /**
     * Drives surface `sid` until it stops: at most `steps` steps, or earlier when `signal`
     * aborts (at a safe point). A failure ends the run with a `stopped` event carrying the
     * problem; the run itself never rejects. Resolves to `SurfaceRun::to_json`'s shape.
     */
    async runSurface(sid, { steps = 8, speculative = false } = {}, { signal, onEvent } = {}) {
      const events = [];
      const emit = (v) => {
        events.push(v);
        try {
          onEvent?.(v);
        } catch (err) {
          queueMicrotask(() => {
            throw err;
          });
        }
      };
      let n = 0;
      let stop;
      try {
        await ready();
      } catch (err) {
        stop = end({ surface: sid, event: 'stopped', problem: problemOf(err) }, emit);
        return runJson(sid, events, stop, n);
      }
      for (;;) {
        if (n === steps) {
          stop = end({ surface: sid, event: 'step_budget_reached' }, emit);
          break;
        }
        if (signal?.aborted) {
          stop = end(interrupted(sid, 'between_steps'), emit);
          break;
        }
        n++;
        try {
          stop = await step(sid, { speculative }, signal, emit);
          if (stop) break;
        } catch (err) {
          stop = end({ surface: sid, event: 'stopped', problem: problemOf(err) }, emit);
          break;
        }
      }
      return runJson(sid, events, stop, n);
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
      handler: async (_args, ctx) => {
        try {
          return { surfaces: await ctl.surfaces({ signal: ctx?.signal }) };
        } catch (err) {
          if (err instanceof CallError) throw new WeftError(err.problem.code, err.problem.detail || err.problem.code);
          throw err;
        }
      },
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

// ----- fixtures ------------------------------------------------------------------------------

const FIXTURE_RESOLVER = { kind: 'rule', provider: 'weft-fixture', model: 'deterministic-fixtures-not-a-model' };

/**
 * Deterministic fixtures reproducing the seed's ThreadDesk walkthroughs (the native
 * `FixtureAdapter`); not a model, and labelled so. recovery: `retry` on thread-42 while
 * offered, else `request_reasoning`, else `investigate`; update: `draft_update`, else `finish`;
 * review: `publish` (the controller stops there: it needs a human); any other choice: the
 * first option by id.
 */
export async function dgpFixtureAdapter(d, _evidence, frame) {
  const answered = (answer) => ({ result: { status: 'answered', answer }, resolver: FIXTURE_RESOLVER });
  const offered = (id) => (d.options ?? []).some((o) => o.id === id);
  if (d.kind === 'probability') return answered({ probability: 0.5 });
  if (d.kind === 'score') return answered({ score: 0 });
  if (d.kind === 'input') throw new WeftError('INVALID_ANSWER', 'the fixture adapter does not write free input');
  const rules = {
    recovery: [frame.surface_id === 'thread-42' && 'retry', 'request_reasoning', 'investigate'],
    update: ['draft_update', 'finish'],
    review: ['publish'],
  };
  const pick = (rules[d.node_id] ?? []).find((id) => id && offered(id)) ?? (d.options ?? []).map((o) => o.id).sort()[0];
  if (pick === undefined) throw new WeftError('INVALID_CHOICE', 'no options');
  return answered({ choice: pick, input: {} });
}
dgpFixtureAdapter.modalities = ['text', 'json'];

/** Canned texts for the fixture services (`llm.reason`, `llm.generate_text`); not model output. */
export async function dgpFixtureText(d) {
  const text =
    d.fulfillment?.service_id === 'llm.reason'
      ? 'FIXTURE ANALYSIS: the runner exit does not identify a reliable cause, and the log does not justify ' +
        'repeated retries. An engineer should inspect the runner configuration and collect more logs.'
      : 'FIXTURE DRAFT: the simulated CI retry completed successfully. No real tests were executed. ' +
        'This update awaits human review and has not been sent anywhere.';
  return { text, resolver: { kind: 'rule', provider: 'weft-fixture', model: 'canned-text-not-a-model' } };
}
dgpFixtureText.modalities = ['text', 'json'];
