// Agents on actor nodes: the JS host of the core's `NodeAgent` (weft_core::agents). The core
// decides what becomes a line, what the model is shown (the node's slice), when a step may
// run (the wait graph) and what a restart turns into; this file carries the model call, the
// host tools' handlers, abort controllers and one timer. Every call into the core runs in the
// store's queue (`host.run`), and the store persists the lines it queued, acknowledges them,
// syncs every agent and only then releases their outputs: a model is never asked, and a tool
// never started, on the strength of lines a crash could lose.
import { WeftError } from './error.js';
import { CLOSED, ABORTED, NO_RUNTIME, CALL_NOT_RUNNING } from './codes.js';
import { Waiters } from './waiters.js';

export { appTools, jobTool } from './agent-tools.js';

const message = (err) => String(err?.message ?? err);
// The monotonic clock the core's agent deadlines are on (`pollTimeout`), as the job runtime's;
// `now` (Date.now(), from the store's queue) is what lines carry.
const mono = () => Math.floor(performance.now());

/** JSON-like copy of a tool's value (what a result line can hold). */
function jsonValue(v) {
  if (v === undefined) return null;
  return JSON.parse(
    JSON.stringify(v, (_k, x) => {
      if (typeof x === 'bigint') return x.toString();
      if (ArrayBuffer.isView(x) && !(x instanceof DataView)) return Array.from(x);
      return x;
    }) ?? 'null',
  );
}

/** Whether `model` is the built-in deterministic model (or none is given). */
export const isBuiltin = (model) => !model || model.provider === 'builtin';

/**
 * The agent of one actor node. Create with `store.agent(node, options)`; a child its `spawn`
 * tool creates gets an agent of its own (`store.agentOf(child)`).
 */
export class NodeAgent {
  #host;
  #raw;
  #model;
  #tools = new Map();
  #options;
  #modelCall = null;
  // A model request the core released while the lines before it were still queued (a read
  // needs no ack): it is asked at the next pump, once the store made them durable, so no
  // reply is ever shown for a line that was not.
  #deferred = null;
  #calls = new Map();
  #listeners = new Map();
  #idleWaiters = new Waiters();
  #timer = null;
  #closed = false;
  #runtime;
  #jobs = new Map();
  #offNotes = null;

  /** @internal Opened by the store (`store.agent`), inside its queue. */
  constructor(host, raw, options) {
    this.#host = host;
    this.#raw = raw;
    this.#options = options;
    this.#model = options.model ?? null;
    for (const t of options.tools ?? []) this.#tools.set(t.name, t);
    this.#runtime = options.runtime ?? options.app?.runtime ?? null;
    if (this.#runtime) this.#listenNotes();
    /** The node this agent is. */
    this.node = raw.node;
    /** What opening found and repaired: `{interruptedTurn, modelStepInterrupted, uncertainCalls, lostJobs, requeuedMail, pendingTasks}`. */
    this.report = raw.report;
  }

  /** The model (`builtin` when none was given). */
  get model() {
    return this.#model;
  }

  /** Whether a model other than the built-in one answers. */
  get modelConfigured() {
    return !isBuiltin(this.#model);
  }

  /** `{node, phase, turn, waiting, queuedTasks, pendingMail, openJobs}`; `phase` is `idle`, `model_step`, `running_tools`, `interrupted` or `waiting`. */
  state() {
    if (this.#closed) throw new WeftError(CLOSED, 'the agent is closed');
    return this.#raw.state();
  }

  /**
   * A person's message typed into this node (`admitUtterance`): with a model configured the
   * line is appended and this agent takes it (its `spawn` tool decides about drift); with
   * the built-in model the keyword heuristic routes it (a child it spawns gets an agent and
   * the line). Resolves with the operation's result once the line is durable.
   */
  say(text, { signal } = {}) {
    return this.#host.run((core, now, glue) => {
      signal?.throwIfAborted();
      this.#live();
      const out = glue.admitUtterance(core, now, this.node, String(text), this.modelConfigured);
      if (out?.outcome === 'spawned' && typeof out.id === 'string') this.#host.openChild(this, out.id);
      return out;
    });
  }

  /** Interrupts the running turn (a waiting step included): `not_running`, `ended`, `stopping` or `already_interrupting`. */
  interrupt(reason = 'interrupted') {
    return this.#host.run((core, now) => {
      this.#live();
      return this.#raw.interrupt(core, now, mono(), String(reason));
    });
  }

  /** Wakes the agent by the application's choice: its unadmitted mail is admitted in a turn. */
  wake(reason = 'wake') {
    return this.#host.run((core, now) => {
      this.#live();
      this.#raw.wake(core, now, mono(), String(reason));
    });
  }

  /** Records an observation result for this agent (a line; admitted at the next turn start). Task nodes only. */
  observe(source, value) {
    return this.#host.run((core, now) => {
      this.#live();
      return this.#raw.postObservation(core, now, mono(), String(source), jsonValue(value));
    });
  }

  /** The request of the step the model is being asked, or null: `{node, turn, step, system, messages, tools, warnings, lines}`. */
  pendingRequest() {
    return this.#modelCall?.request ?? null;
  }

  /**
   * Listens for the agent's outputs by name (`turn_started`, `model_request`, `start_call`,
   * `call_finished`, `turn_ended`, `waiting`, `wait_over`, `spawned`, `abort_model`, ...),
   * `output` (every output), `model_delta` (`{node, turn, step, type, ...}` while a streaming
   * model runs) or `error` (a failure of the host loop). Returns an unsubscribe function.
   */
  on(event, listener) {
    let set = this.#listeners.get(event);
    if (!set) this.#listeners.set(event, (set = new Set()));
    set.add(listener);
    return () => set.delete(listener);
  }

  /** Resolves once no turn runs or is queued and no model or tool call is pending. */
  idle({ signal } = {}) {
    if (this.#isIdle()) return Promise.resolve();
    return this.#idleWaiters.wait(signal);
  }

  /**
   * Detaches the agent without writing anything: a pending model call and running tools are
   * aborted and their answers ignored. The node's lines stay as they are, so the next
   * `store.agent(node)` resumes it the way a restart does (an unfinished turn is recorded
   * interrupted, a started call uncertain). Interrupt first for a clean end of the turn.
   */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#modelCall?.ac.abort(new WeftError(CLOSED, 'the agent was closed'));
    this.#modelCall = null;
    this.#deferred = null;
    for (const c of this.#calls.values()) c.ac.abort(new WeftError(CLOSED, 'the agent was closed'));
    this.#calls.clear();
    // The jobs continue (their owner is the runtime's to close); the agent stops following them.
    this.#offNotes?.();
    for (const j of this.#jobs.values()) j.stop?.();
    this.#jobs.clear();
    this.#host.detach(this);
    try {
      this.#raw.free();
    } catch {}
    this.#idleWaiters.rejectAll(new WeftError(CLOSED, 'the agent was closed'));
  }

  /** Whether the agent was closed. */
  get closed() {
    return this.#closed;
  }

  // ----- host plumbing (called by the store inside its queue) ----------------------------

  #live() {
    if (this.#closed) throw new WeftError(CLOSED, 'the agent is closed');
  }

  #isIdle() {
    if (this.#closed) return true;
    if (this.#modelCall || this.#deferred || this.#calls.size) return false;
    const s = this.#raw.state();
    return s.phase === 'idle' && s.queuedTasks === 0 && this.#raw.heldOutputs() === 0;
  }

  #emit(event, value) {
    const set = this.#listeners.get(event);
    if (!set?.size) {
      if (event === 'error') console.warn(`weft agent ${this.node}:`, value);
      return;
    }
    for (const l of [...set]) {
      try {
        l(value);
      } catch (err) {
        queueMicrotask(() => {
          throw err;
        });
      }
    }
  }

  /** @internal The options a child spawned by this agent is opened with. */
  childOptions(child) {
    const c = this.#options.children;
    if (typeof c === 'function') return c(child) ?? {};
    return c ?? { model: this.#model, contextTokens: this.#options.contextTokens };
  }

  /** @internal Syncs with the graph only (the store calls it before it persists a change). */
  sync(core, now) {
    if (this.#closed) return;
    try {
      this.#raw.sync(core, now, mono());
    } catch (err) {
      this.#emit('error', err);
    }
  }

  /** @internal Syncs with the graph and handles every output its durable lines release. */
  pump(core, now) {
    if (this.#closed) return;
    try {
      // The store persists and acknowledges every batch it took before it pumps: the lines
      // before a deferred request are durable now.
      const deferred = this.#deferred;
      this.#deferred = null;
      if (deferred) this.#ask(core, deferred);
      this.#raw.sync(core, now, mono());
      for (let o = this.#raw.pollOutput(core); o !== undefined; o = this.#raw.pollOutput(core)) {
        this.#handle(core, o);
      }
    } catch (err) {
      this.#emit('error', err);
    }
    this.#arm();
    if (this.#idleWaiters.size && this.#isIdle()) this.#idleWaiters.resolveAll();
  }

  #handle(core, o) {
    const out = { node: this.node, ...o };
    switch (o.output) {
      case 'model_request':
        if (core.hasBatches()) this.#deferred = o;
        else this.#ask(core, o);
        break;
      case 'abort_model':
        this.#modelCall?.ac.abort(new WeftError(ABORTED, 'the turn was interrupted'));
        this.#modelCall = null;
        this.#deferred = null;
        break;
      case 'start_call':
        this.#start(o);
        break;
      case 'abort_call':
        this.#calls.get(o.invocation)?.ac.abort(new WeftError(ABORTED, 'the turn was interrupted'));
        break;
      case 'call_finished':
        // Settled, or given up (uncertain after an interrupt's grace period): a late
        // settlement of the handler is ignored.
        this.#calls.delete(o.invocation);
        break;
      case 'turn_ended':
        this.#calls.clear();
        this.#modelCall = null;
        break;
      case 'spawned':
        this.#host.openChild(this, o.child);
        break;
    }
    this.#emit(o.output, out);
    this.#emit('output', out);
  }

  /** Re-arms the one timer at the core's next deadline (an interrupt's grace period). */
  #arm() {
    clearTimeout(this.#timer);
    this.#timer = null;
    const at = this.#closed ? undefined : this.#raw.pollTimeout();
    if (at === undefined) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#host.run((core, now) => this.#closed || this.#raw.handleTimeout(core, now, mono())).catch((err) => this.#emit('error', err));
    }, Math.max(0, at - mono()));
  }

  /** Settles work of step/invocation through the store's queue (ignored once closed). */
  #settle(fn) {
    this.#host
      .run((core, now) => {
        if (!this.#closed) fn(core, now);
      })
      .catch((err) => this.#emit('error', err));
  }

  // ----- Worker jobs its calls start ------------------------------------------------------

  #submitJob(tool, inv, endpoint, payload, options = {}) {
    this.#live();
    const rt = this.#runtime;
    if (!rt) throw new WeftError(NO_RUNTIME, 'this agent has no job runtime: open it with `runtime` (or `app`)');
    if (tool.mayStartJob !== true) throw new WeftError('JOB_NOT_DECLARED', `tool \`${tool.name}\` does not declare mayStartJob`);
    if (!endpoint || typeof endpoint.submit !== 'function') throw new WeftError('INVALID_ARGUMENT', '`endpoint` must be an endpoint of the runtime');
    // Its job would run on its own runtime, whose notes never reach this agent's mailbox.
    if (endpoint._runtime !== rt) throw new WeftError('INVALID_ARGUMENT', "`endpoint` belongs to another runtime than the agent's: open it on the agent's runtime");
    const origin = this.#raw.origin(inv);
    if (origin === undefined) throw new WeftError(CALL_NOT_RUNNING, 'the call is no longer running');
    const job = endpoint.submit(payload, { ...options, owner: this.#raw.owner, origin });
    const tracked = { job, seq: 0, stop: null };
    this.#jobs.set(job.id, tracked);
    // The hand-over is a line before any of the job's events is recorded (the store's queue
    // keeps the order; the call's settlement comes after it too).
    this.#settle((core, now) => this.#raw.onCallJob(core, now, mono(), inv, job.id));
    tracked.stop = job.observe((ev) => this.#settle((core, now) => this.#record(core, now, tracked, [ev])));
    return job;
  }

  /** Records the job's journal events not yet recorded (milestones, the latest repeating one). */
  #record(core, now, tracked, events) {
    for (const ev of events) {
      if (ev.type === 'missed' || !(ev.seq > tracked.seq)) continue;
      // The event's `at` is on the runtime's clock (it may be the caller's `now`): the core
      // turns it into wall time against a reading of that same clock.
      this.#raw.recordJobEvent(core, now, this.#runtime.now(), jsonValue(ev));
      tracked.seq = ev.seq;
    }
  }

  /** Completion notes for this agent's owner come from the runtime's mailbox to the node. */
  #listenNotes() {
    const rt = this.#runtime;
    const owner = this.#raw.owner;
    const take = () =>
      this.#settle((core, now) => {
        for (const note of rt.readMailbox(owner)) {
          const tracked = this.#jobs.get(note.job);
          if (tracked) {
            // Everything the journal holds up to the outcome is recorded before the note.
            this.#record(core, now, tracked, tracked.job.journal(tracked.seq + 1));
            tracked.stop?.();
            this.#jobs.delete(note.job);
          }
          this.#raw.deliverNote(core, now, rt.now(), jsonValue(note)); // the note's clock, as above
        }
      });
    this.#offNotes = rt.on('note', (e) => e.owner === owner && take());
    if (rt.mailboxLength(owner) > 0) take();
  }

  #ask(core, o) {
    const input = this.#raw.modelInput(core);
    if (input === undefined) return;
    const step = o.step;
    const ac = new AbortController();
    const request = { session: this.node, toolsVersion: 0, ...input };
    const call = { step, ac, request };
    this.#modelCall = call;
    const current = () => this.#modelCall === call && !this.#closed;
    const onDelta = (e) => {
      if (current()) this.#emit('model_delta', { node: this.node, turn: o.turn, step, ...e });
    };
    const answer = isBuiltin(this.#model)
      ? Promise.resolve(this.#raw.builtinAnswer(core))
      : Promise.resolve().then(() => this.#model(request, { signal: ac.signal, onDelta }));
    answer.then(
      (response) =>
        this.#settle((core, now) => {
          if (!current()) return;
          this.#modelCall = null;
          let r;
          try {
            r = jsonValue(response ?? {});
            this.#raw.onModelResponse(core, now, mono(), step, r);
          } catch (err) {
            this.#raw.onModelError(core, now, mono(), step, `invalid model response: ${message(err)}`);
          }
        }),
      (err) =>
        this.#settle((core, now) => {
          if (!current()) return;
          this.#modelCall = null;
          this.#raw.onModelError(core, now, mono(), step, message(err));
        }),
    );
  }

  #start(o) {
    const inv = o.invocation;
    const tool = this.#tools.get(o.tool);
    const ac = new AbortController();
    const entry = { ac };
    this.#calls.set(inv, entry);
    const done = (settlement) =>
      this.#settle((core, now) => {
        if (this.#calls.get(inv) !== entry) return;
        this.#calls.delete(inv);
        this.#raw.onCallSettled(core, now, mono(), inv, settlement);
      });
    const run = tool?.run ?? tool?.handler;
    if (typeof run !== 'function') {
      done({ failure: 'unknown_tool', detail: o.tool });
      return;
    }
    const ctx = {
      signal: ac.signal,
      node: this.node,
      invocation: inv,
      callId: o.callId,
      tool: o.tool,
      step: o.step,
      owner: this.#raw.owner,
      /** Starts a background job on `endpoint` for this call (see `jobTool`); returns the runtime's Job. */
      submitJob: (endpoint, payload, options) => this.#submitJob(tool, inv, endpoint, payload, options),
    };
    Promise.resolve()
      .then(() => run.call(tool, o.arguments, ctx))
      .then(
        (value) => {
          let v;
          try {
            v = jsonValue(value);
          } catch (err) {
            return done({ failure: 'invalid_result', detail: message(err) });
          }
          done({ value: v });
        },
        (err) => (ac.signal.aborted ? done({ aborted: true }) : done({ error: message(err), code: typeof err?.code === 'string' ? err.code : undefined })),
      );
  }
}
