// The DGP controller's I/O in JS (loaded on first use by `dgp-tools.js`): HTTP through `fetch`,
// the decision adapter and text service calls, and the stop signal. The rules — which decision
// next, what evidence an adapter may see, whether a judgment may be committed, the assessment
// and commit requests — are the core's (the frames WebAssembly module).
//
// Stopping a run: an AbortSignal stops it at its next safe point. Reading a frame and waiting
// for the adapter or the text service are abandoned at once (they change nothing on the
// server); recording an assessment and committing it never are: once the commit intent is
// logged the commit is carried to an answer (retried with the same key and body after a
// transport failure), and the run stops after it. A stopped run ends with an `interrupted`
// event and no commit in flight; everything it committed has a receipt among its events.

import { WeftError } from './error.js';
import { evidenceFor, loadFrames } from './frames.js';
import { controllerJudgment, controllerNextStep, fulfilmentResult, interrupted, runJson } from './dgp-tools.js';

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

/** The controller behind `createDgpController` (dgp-tools.js, which documents and validates the
 * options); `count.serviceCalls` counts its text-service requests. */
export function openController({ baseUrl, token, adapter, textService, fetch: fetchFn = globalThis.fetch, maxServiceCalls = 3 }, count) {
  const base = baseUrl.replace(/\/+$/, '');
  const origin = new URL(base).origin;
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
      if (count.serviceCalls++ >= maxServiceCalls) {
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
