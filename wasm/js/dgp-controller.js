// The DGP controller's JS host (loaded on first use by `dgp-tools.js`): an HTTP/timer loop over
// the core's run machine (`DgpRun` in the frames WebAssembly module, which decides the requests,
// the events, the retry rule, where a stop is honoured and the report; see
// `weft_core::frames::controller::run` for the call order). This file only sends its requests
// through `fetch`, asks the decision adapter and the text service, keeps its one timer, and
// hands an AbortSignal on as a stop. A stopped run ends with an `interrupted` event and no
// commit in flight; everything it committed has a receipt among its events.

import { WeftError } from './error.js';
import { loaded } from './frames.js';

/** A failure the controller reports like a server's problem (`status`, `code`, `detail`). */
class CallError extends WeftError {
  constructor(problem) {
    super(problem.code, problem.detail);
    this.problem = problem;
  }
}

/** The `{code, detail, status?}` of any failure (the core names a missing code). */
function problemOf(err) {
  if (err instanceof CallError) return err.problem;
  const p = { code: typeof err?.code === 'string' ? err.code : undefined, detail: String(err?.message ?? err) };
  return typeof err?.status === 'number' ? { status: err.status, ...p } : p;
}

/** `fn()`, its coded errors as the package's CallError (a WeftError with `.code` and `.problem`). */
function asProblem(fn) {
  try {
    return fn();
  } catch (err) {
    throw new CallError(problemOf(err));
  }
}

const seed = () => crypto.getRandomValues(new Uint8Array(32));
const now = () => Math.floor(performance.now());

/** The controller behind `createDgpController` (dgp-tools.js, which documents and validates the
 * options and checks `base`); `budget` is its text-service budget (a `DgpBudget`). */
export function openController({ token, adapter, textService, fetch: fetchFn = globalThis.fetch }, base, budget) {
  const glue = loaded();
  /** The surface-list link, once discovery succeeded. */
  let manifest = null;

  /** Sends one request; resolves to `{status, text}`, or `{failure}` when no usable answer came. */
  const exchange = async (method, link, body, headers, signal, timeoutMs) => {
    const target = base.resolve(link);
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    const onAbort = () => ac.abort(signal.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const res = await fetchFn(target, {
        method,
        headers: {
          accept: 'application/json',
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(body == null ? {} : { 'content-type': 'application/json' }),
          ...headers,
        },
        body: body ?? undefined,
        signal: ac.signal,
      });
      return { status: res.status, text: await res.text() };
    } catch (err) {
      return { failure: `${target}: ${err?.message ?? err}` };
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  };

  /** A GET's JSON value; a problem or a transport failure throws (the core reads the answer). */
  const getJson = async (link, signal) => {
    const a = await exchange('GET', link, null, {}, signal, glue.dgpRequestTimeoutMs());
    if (a.failure !== undefined) throw new CallError(JSON.parse(glue.dgpTransportProblem(a.failure)));
    return JSON.parse(asProblem(() => glue.dgpAnswer(a.status, a.text)));
  };

  /** Checks once that the server speaks DGP 0.1; resolves to its surface-list link. */
  const ready = async () => {
    const m = await getJson('/.well-known/dgp');
    manifest ??= asProblem(() => glue.dgpSurfacesLink(JSON.stringify(m)));
    return manifest;
  };

  /** The adapter's judgment, fed to the run. */
  const judge = async (run, out, signal) => {
    try {
      const decided = await adapter(out.decision, out.evidence, out.frame, { signal });
      const resolver = decided?.resolver ?? adapter.resolver;
      if (!resolver) throw new WeftError('INVALID_MESSAGE', 'the decision adapter named no resolver (answer {result, resolver}, or set adapter.resolver)');
      return () => run.handleJudgment(now(), JSON.stringify({ result: decided?.result, resolver }));
    } catch (err) {
      return () => run.handleJudgmentFailure(now(), JSON.stringify(problemOf(err)));
    }
  };

  /** The text service's text, fed to the run. */
  const generate = async (run, out, signal) => {
    try {
      if (typeof textService !== 'function') throw new CallError(JSON.parse(glue.dgpNoTextService()));
      const generated = await textService(out.decision, out.evidence, out.frame, { signal });
      const text = typeof generated === 'string' ? generated : generated?.text;
      if (typeof text !== 'string') throw new CallError(JSON.parse(glue.dgpTransportProblem('the text service answered without `text`')));
      const resolver = (typeof generated === 'object' && generated.resolver) || textService.resolver || { kind: 'llm', provider: 'js-text-service' };
      return () => run.handleText(now(), text, JSON.stringify(resolver));
    } catch (err) {
      return () => run.handleTextFailure(now(), JSON.stringify(problemOf(err)));
    }
  };

  return {
    /** The server's surface list: `[{surface_id, title, state, revision, ...}]`. */
    async surfaces({ signal } = {}) {
      const value = await getJson(await ready(), signal);
      return Array.isArray(value?.surfaces) ? value.surfaces : [];
    },

    /**
     * Drives surface `sid` until it stops: at most `steps` steps, or earlier when `signal`
     * aborts (at a safe point). A failure ends the run with a `stopped` event carrying the
     * problem; the run itself never rejects. Resolves to `SurfaceRun::to_json`'s shape.
     */
    async runSurface(sid, { steps = glue.dgpDefaultSteps(), speculative = false } = {}, { signal, onEvent } = {}) {
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
      /** The core's report, with the very event objects `onEvent` was handed. */
      const report = (r) => ({ ...r, stop: events.at(-1), events });
      try {
        await ready();
      } catch (err) {
        const r = JSON.parse(glue.dgpRunReport(sid, JSON.stringify(problemOf(err))));
        emit(r.stop);
        return report(r);
      }
      const run = new glue.DgpRun(sid, steps, speculative, adapter.modalities ?? [], textService?.modalities ?? [], seed());
      try {
        // A stop asked before the first step is honoured there (`between_steps`).
        let stopFed = signal?.aborted === true;
        if (stopFed) run.handleStop(now());
        const stopped = new Promise((resolve) => {
          if (signal?.aborted) resolve();
          else signal?.addEventListener('abort', () => resolve(), { once: true });
        });
        const STOP = Symbol('stop');
        // The outstanding input (a function that feeds it to the run), or null.
        let pending = null;
        for (;;) {
          for (let text; (text = run.pollOutput()) !== undefined; ) {
            const out = JSON.parse(text);
            switch (out.kind) {
              case 'event':
                emit(out.event);
                break;
              case 'done':
                pending?.catch(() => {});
                return report(out.report);
              case 'http': {
                // A read is abandoned with the run; a write is always carried to its answer.
                const p = exchange(out.method, out.link, out.body, out.headers, out.write ? undefined : signal, out.timeoutMs);
                pending = p.then((a) =>
                  a.failure !== undefined ? () => run.handleHttpFailure(now(), out.id, a.failure, budget) : () => run.handleHttp(now(), out.id, a.status, a.text, budget),
                );
                break;
              }
              case 'judge':
                pending = judge(run, out, signal);
                break;
              case 'generate':
                pending = generate(run, out, signal);
                break;
            }
          }
          // Exactly one of the two is outstanding while the run is not done.
          const due = run.pollTimeout();
          const source = pending ?? new Promise((r) => setTimeout(r, Math.max(0, due - now()))).then(() => () => run.handleTimeout(now()));
          const feed = await Promise.race(stopFed ? [source] : [source, stopped.then(() => STOP)]);
          if (feed === STOP) {
            stopFed = true;
            run.handleStop(now());
            continue;
          }
          pending = null;
          feed();
        }
      } finally {
        run.free();
      }
    },
  };
}
