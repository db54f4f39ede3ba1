// Agent sessions: a thin host around the core's `AgentSession`. It owns tool handlers, the
// model call, abort controllers and the timer; the core decides which calls overlap, what an
// interrupt reports, and when mail (job notes, observations, late results) becomes model input.

import { AgentSession } from './weft_apps.js';
import { Deadline, WeftError } from './runtime.js';
import { DISPOSED, CLOSED, ABORTED, ANSWERED } from './codes.js';
import { Waiters } from './waiters.js';

/** Creates an agent session on `runtime` (whose jobs its tools may start). */
export function createAgent(runtime, options = {}) {
  return new Agent(runtime, options);
}

const isAbort = (err, signal) => signal.aborted;

/**
 * The id of `endpoint` (an Endpoint of `rt`, or an id of one) in `rt`'s registry. Ids are
 * numbered per runtime from 1, so another runtime's endpoint would name one of `rt`'s own: it is
 * refused (`INVALID_ARGUMENT`), not resolved by its id.
 */
function endpointId(rt, endpoint) {
  if (typeof endpoint === 'number') return endpoint;
  if (endpoint != null && endpoint._runtime === rt) return endpoint.id;
  throw new WeftError(
    'INVALID_ARGUMENT',
    endpoint?._runtime
      ? "`endpoint` belongs to another runtime than the agent's: open it on the agent's runtime"
      : "`endpoint` must be an endpoint of the agent's runtime (or its id)",
  );
}

/** The controller of calls that can never be aborted (tools not declared safe to cancel). */
const NEVER = new AbortController();

export class Agent {
  #rt;
  #s;
  #model;
  #handlers = new Map();
  #controllers = new Map();
  #modelCall = null;
  #transcript = [];
  #tools = { version: -1, list: [] };
  #pumping = false;
  #again = false;
  #deadline = new Deadline(() => this.#rt.now(), () => this.#call((s, now) => s.handleTimeout(now)));
  #taskWaiters = new Map();
  #turnTask = new Map();
  #idleWaiters = new Waiters();
  #listeners = new Map();
  #unsubscribe = [];
  #closed = false;

  constructor(runtime, { id = 'agent', model, graceMs, maxSteps } = {}) {
    this.#rt = runtime;
    this.#s = new AgentSession({ id, graceMs, maxSteps });
    this.#model = model ?? null;
    this.id = this.#s.id;
    // Completion notes for this agent move into its mailbox; a job's `wake` is an explicit
    // choice to wake it. Progress never reaches the agent.
    this.#unsubscribe.push(
      runtime.on('note', ({ owner }) => {
        if (owner !== this.id) return;
        // Whichever registry the runtime drives (a JobRegistry, or an app's, behind the app's
        // one wrapper) has the agent's registry surface: takeAgentNotes / submitAgentJob.
        const reg = this.#rt.registry;
        this.#call((s, now) => reg.takeAgentNotes(now, s));
      }),
      runtime.on('wake', ({ owner, job }) => {
        if (owner === this.id) this.#call((s, now) => s.jobWake(now, job));
      }),
    );
  }

  /** `idle`, `model_step`, `running_tools` or `interrupted`. */
  get phase() {
    return this.#s.phase;
  }

  /** A summary: phase, turn, step, queued tasks, calls of the running step, counters. */
  get state() {
    return this.#s.state();
  }

  /**
   * Replaces the model: `async (request, {signal, onDelta}) => ({text, calls, usage?})`
   * (`openaiModel`, `anthropicModel`, `builtinModel`, `scriptedModel` or your own).
   */
  setModel(model) {
    this.#model = model;
  }

  /**
   * Declares a tool and binds its handler `async (args, ctx) => value`. Returns the handler
   * id. A step the model was already asked keeps the tools it was shown.
   */
  registerTool(declaration, handler) {
    if (typeof handler !== 'function') throw new WeftError('INVALID_ARGUMENT', 'a tool needs a handler function');
    const { handler: _ignored, ...decl } = declaration;
    const id = this.#call((s) => s.registerTool(decl));
    this.#handlers.set(id, handler);
    return id;
  }

  /**
   * Declares several tools at once: each entry is a declaration with its `handler` (the shape
   * an application's published tool surface can hand over as is). Returns the handler ids.
   */
  registerTools(tools) {
    return Array.from(tools, ({ handler, ...decl }) => this.registerTool(decl, handler));
  }

  /** Removes a tool (calls already selected still run with the binding of their step). */
  unregisterTool(name) {
    this.#call((s) => s.unregisterTool(name));
  }

  /** The current declarations: `{version, tools}`. */
  tools() {
    return this.#s.tools();
  }

  /**
   * The pending model request (`{session, turn, step, toolsVersion, messages, tools}`) while
   * the agent waits for a model step, else null.
   */
  pendingRequest() {
    return this.#s.phase === 'model_step' ? this.#request() : null;
  }

  /**
   * Answers model step `step` yourself with `{text, calls}` — for agents created without a
   * model (a person, a remote process or a test plays the model), or to pre-empt the model. A
   * stale step (STALE_STEP) or a malformed answer (INVALID_RESPONSE) throws and changes nothing.
   */
  respond(step, response) {
    const pending = this.#modelCall?.step === step ? this.#modelCall : null;
    this.#call((s, now) => s.onModelResponseJson(now, step, JSON.stringify(response ?? {})));
    if (pending) {
      // The model's own answer is no longer wanted.
      pending.ac.abort(new WeftError(ANSWERED, 'the step was answered by respond()'));
      if (this.#modelCall === pending) this.#modelCall = null;
    }
  }

  /** Submits a task (FIFO); an idle agent starts its turn at once. Returns the task id. */
  submitTask(input) {
    return this.#call((s, now) => s.submitTask(now, input));
  }

  /**
   * Submits a task and resolves when its turn ends: `{task, turn, end, reason?, message?,
   * text, results}`. Aborting `signal` withdraws the task if it has not started, or
   * interrupts its turn.
   */
  run(input, { signal } = {}) {
    if (signal?.aborted) return Promise.reject(new WeftError(ABORTED, 'aborted before submission', { cause: signal.reason }));
    return new Promise((resolve, reject) => {
      const task = this.submitTask(input);
      const onAbort = () => {
        const turn = [...this.#turnTask].find(([, t]) => t === task)?.[0];
        if (turn === undefined) {
          try {
            this.#s.cancelTask(task);
            this.#taskWaiters.delete(task);
            reject(new WeftError(ABORTED, 'the task was withdrawn before it started', { cause: signal.reason }));
          } catch {
            // It started meanwhile: its turn ends through the interrupt below.
          }
          return;
        }
        this.interrupt(String(signal.reason?.message ?? signal.reason ?? 'aborted'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      // A turn never ends inside `submitTask` (its first step asks the model asynchronously),
      // so the waiter is in place before the turn can end.
      const waiter = (result) => {
        signal?.removeEventListener('abort', onAbort);
        resolve(result);
      };
      waiter.closed = (err) => {
        signal?.removeEventListener('abort', onAbort);
        reject(err);
      };
      this.#taskWaiters.set(task, waiter);
    });
  }

  /** Withdraws a task that has not started. */
  cancelTask(task) {
    this.#s.cancelTask(task);
    this.#taskWaiters.delete(task);
  }

  /** Queues steering input for the running turn's next safe point (NO_ACTIVE_TURN when idle). */
  steer(input) {
    this.#call((s, now) => s.steer(now, input));
  }

  /** The application's explicit choice to wake the agent (it admits its mail in a turn). */
  wake(reason = 'woken by the application') {
    this.#call((s, now) => s.wake(now, reason));
  }

  /**
   * Interrupts the running turn: calls that never started are reported as such (safe to
   * retry); running calls of tools declared `safeToCancel` see their signal abort; started
   * calls are reported with the evidence there is. Jobs they started continue.
   */
  interrupt(reason = 'interrupted') {
    return this.#call((s, now) => s.interrupt(now, reason));
  }

  /** Queues an observation result; it becomes model input at the next turn start. */
  postObservation(source, value) {
    return this.#call((s, now) => s.postObservation(now, source, value));
  }

  /** Sets a standing desire: the latest value is shown at the next turn start; never a task. */
  setStanding(key, value) {
    this.#s.setStanding(key, value);
  }

  /** Unadmitted mail, in arrival order. */
  mailbox() {
    return this.#s.mailbox();
  }

  /** The transcript (what the model is shown), from message `from`. */
  transcript(from = 0) {
    this.#sync();
    return this.#transcript.slice(from);
  }

  /** Resolves once the agent is idle (no turn running and none queued). */
  idle({ signal } = {}) {
    if (this.#s.phase === 'idle') return Promise.resolve();
    return this.#idleWaiters.wait(signal);
  }

  /**
   * Listens for `turn_started`, `turn_ended`, `call_finished`, `mail_queued`, `model_request`,
   * `model_usage` (`{turn, step, inputTokens, outputTokens}`), `start_call`, `abort_call`,
   * `output` (every output of the session), or `model_delta` (`{turn, step, type, ...}`: what
   * a streaming model reports while its step runs — `text_delta`, `tool_call_start`,
   * `tool_call_delta`, `tool_call_end`, `usage`, `finish`). Returns an unsubscribe function.
   */
  on(event, listener) {
    let set = this.#listeners.get(event);
    if (!set) this.#listeners.set(event, (set = new Set()));
    set.add(listener);
    return () => set.delete(listener);
  }

  /**
   * Closes the agent: queued tasks are withdrawn (their `run()` rejects with CLOSED), the
   * running turn is interrupted (its `run()` resolves as interrupted once its started calls
   * settle or the grace period ends), no model is asked again, and the agent detaches from
   * the runtime. Jobs its tools started continue (close their owner on the runtime to dispose
   * them).
   */
  close(reason = 'agent closed') {
    if (this.#closed) return;
    this.#closed = true;
    for (const u of this.#unsubscribe) u();
    for (const task of [...this.#taskWaiters.keys()]) {
      const turn = [...this.#turnTask].find(([, t]) => t === task);
      if (turn) continue;
      try {
        this.#s.cancelTask(task);
        this.#taskWaiters.get(task)?.closed?.(new WeftError(CLOSED, `the agent was closed: ${reason}`));
        this.#taskWaiters.delete(task);
      } catch {
        // Not queued any more.
      }
    }
    this.#modelCall?.ac.abort(new WeftError(CLOSED, 'the agent was closed'));
    this.#modelCall = null;
    this.interrupt(reason);
  }

  /** close(), then free the session's wasm memory; the agent is unusable afterwards. */
  dispose() {
    this.close('agent disposed');
    this.#deadline.clear();
    this.#s.free();
    this.#s = null;
  }

  // ----- host plumbing ------------------------------------------------------------------

  #call(fn) {
    if (this.#s === null) throw new WeftError(DISPOSED, 'the agent was disposed');
    try {
      return fn(this.#s, this.#rt.now());
    } finally {
      this.#pump();
    }
  }

  #pump() {
    if (this.#pumping) {
      // A listener called back into the agent: drain again before returning.
      this.#again = true;
      return;
    }
    this.#pumping = true;
    try {
      do {
        this.#again = false;
        const text = this.#s.drainOutputsJson();
        if (text !== '[]') for (const o of JSON.parse(text)) this.#dispatch(o);
      } while (this.#again);
    } finally {
      this.#pumping = false;
    }
    this.#arm();
    if (this.#idleWaiters.size > 0 && this.#s.phase === 'idle') this.#idleWaiters.resolveAll();
  }

  #emit(event, o, output = true) {
    if (this.#listeners.size === 0) return;
    for (const name of output ? [event, 'output'] : [event]) {
      const set = this.#listeners.get(name);
      if (!set) continue;
      for (const l of set) {
        try {
          l(o);
        } catch (err) {
          queueMicrotask(() => {
            throw err;
          });
        }
      }
    }
  }

  #sync() {
    const base = this.#transcript.length;
    if (this.#s.transcriptLength() === base) return;
    const [text, patches] = this.#s.transcriptJson(base);
    const fresh = JSON.parse(text);
    for (let i = 0; i < patches.length; i += 3) {
      const m = fresh[patches[i]];
      const path = patches[i + 1];
      if (path === 'result.value') m.result.value = patches[i + 2];
      else m[path] = patches[i + 2];
    }
    for (const m of fresh) this.#transcript.push(m);
  }

  #dispatch(o) {
    switch (o.output) {
      case 'model_request':
        this.#ask(o);
        break;
      case 'abort_model':
        this.#modelCall?.ac.abort(new WeftError(ABORTED, 'the turn was interrupted'));
        this.#modelCall = null;
        break;
      case 'start_call':
        this.#start(o);
        break;
      case 'abort_call':
        this.#controllers.get(o.invocation)?.abort(new WeftError(ABORTED, 'the step was interrupted'));
        break;
      case 'call_finished':
        this.#controllers.delete(o.invocation);
        break;
      case 'turn_started':
        if (o.cause.task !== undefined) this.#turnTask.set(o.turn, o.cause.task);
        break;
      case 'turn_ended':
        this.#turnEnded(o);
        break;
      case 'handler_released':
        this.#handlers.delete(o.handler);
        break;
    }
    this.#emit(o.output, o);
  }

  #request() {
    this.#sync();
    const req = this.#s.modelRequest();
    if (req === undefined) return null;
    if (req.toolsVersion !== this.#tools.version) {
      this.#tools = { version: req.toolsVersion, list: this.#s.requestTools().map(({ handler, ...t }) => t) };
    }
    return {
      session: this.id,
      turn: req.turn,
      step: req.step,
      toolsVersion: req.toolsVersion,
      // The transcript so far (read-only: the agent appends to it).
      messages: this.#transcript,
      tools: this.#tools.list,
    };
  }

  #ask(o) {
    const request = this.#request();
    const step = o.step;
    // Without a model the step waits for `respond()`; a closed agent asks no model.
    if (!this.#model || this.#closed) return;
    const ac = new AbortController();
    this.#modelCall = { step, ac };
    const current = () => this.#modelCall?.step === step && !this.#closed;
    // The stream's deltas while the step runs (a model that streams calls `onDelta`).
    const onDelta = (e) => {
      if (current()) this.#emit('model_delta', { step, turn: o.turn, ...e }, false);
    };
    Promise.resolve()
      .then(() => this.#model(request, { signal: ac.signal, onDelta }))
      .then(
        (response) => {
          if (!current()) return;
          this.#modelCall = null;
          let text;
          try {
            text = JSON.stringify(response ?? {});
          } catch (err) {
            this.#call((s, now) => s.onModelError(now, step, `invalid model response: ${err?.message ?? err}`));
            return;
          }
          try {
            this.#call((s, now) => s.onModelResponseJson(now, step, text));
          } catch (err) {
            // A malformed answer changes nothing in the session: the step fails with it.
            this.#call((s, now) => s.onModelError(now, step, `invalid model response: ${err?.message ?? err}`));
          }
        },
        (err) => {
          if (!current()) return;
          this.#modelCall = null;
          this.#call((s, now) => s.onModelError(now, step, String(err?.message ?? err)));
        },
      );
  }

  #start(o) {
    const inv = o.invocation;
    const handler = this.#handlers.get(o.handler);
    // Only calls the core marks cancellable (tools declared safe to cancel) are ever
    // signalled: the others share a signal that never aborts.
    let ac = NEVER;
    if (o.cancellable) {
      ac = new AbortController();
      this.#controllers.set(inv, ac);
    }
    const rt = this.#rt;
    const s = this.#s;
    const ctx = {
      invocation: inv,
      callId: o.callId,
      tool: o.tool,
      step: o.step,
      signal: ac.signal,
      /** `{thread, turn, toolCall}` for jobs this call starts by other means. */
      get origin() {
        return s.origin(inv);
      },
      /**
       * Starts a background job on `endpoint` for this call (the tool must declare
       * `mayStartJob`). The job belongs to the agent, outlives the call and the turn, and its
       * completion note comes to the agent's mailbox. Returns the runtime's Job handle.
       */
      submitJob: (endpoint, payload, options = {}) => {
        const ep = endpointId(rt, endpoint);
        const id = rt._call((reg, now) => reg.submitAgentJob(now, s, inv, ep, payload, options));
        this.#pump();
        return rt.job(id);
      },
    };
    // Handlers run after the current dispatch: the core never re-enters itself.
    if (!handler) {
      Promise.resolve().then(() => this.#settle((s, now) => s.settleUnknownTool(now, inv, o.tool ?? `handler-${o.handler}`)));
      return;
    }
    Promise.resolve()
      .then(() => handler(o.arguments, ctx))
      .then(
        (value) => this.#settle((s, now) => s.settleValue(now, inv, value)),
        (err) =>
          this.#settle((s, now) =>
            isAbort(err, ac.signal)
              ? s.settleAborted(now, inv)
              : s.settleError(now, inv, String(err?.message ?? err), typeof err?.code === 'string' ? err.code : undefined),
          ),
      );
  }

  #settle(fn) {
    try {
      this.#call(fn);
    } catch {
      // Refused by the session (e.g. a duplicate report): nothing changed.
    }
  }

  #turnEnded(o) {
    this.#sync();
    const task = this.#turnTask.get(o.turn);
    this.#turnTask.delete(o.turn);
    const waiter = task !== undefined ? this.#taskWaiters.get(task) : undefined;
    if (!waiter) return;
    this.#taskWaiters.delete(task);
    let start = this.#transcript.length - 1;
    while (start > 0 && !(this.#transcript[start].role === 'turn_start' && this.#transcript[start].turn === o.turn)) start--;
    const messages = this.#transcript.slice(start);
    const texts = messages.filter((m) => m.role === 'assistant' && m.text != null).map((m) => m.text);
    const { output: _o, ...end } = o;
    waiter({
      ...end,
      task,
      text: texts.at(-1) ?? null,
      results: messages.filter((m) => m.role === 'tool_result'),
      messages,
    });
  }

  #arm() {
    if (this.#s === null) return;
    this.#deadline.set(this.#s.pollTimeout());
  }
}
