// Operations in JS: an application graph whose every rule lives in the wasm core
// (weft_core::ops). This file only carries: it runs host cells (sync, async, streaming) when the
// core says so, aborts them when the core says so, runs registered selectors over the settled
// snapshots the core hands over, schedules the end-of-tick flush, and turns operation outcomes
// and tool replies into Promises. Worker cells, hosted operations, waits, mailboxes and timers
// (the core's: operation timeouts and tool-call waits too) go through the ordinary Runtime,
// whose registry is the app's own: a JobRegistry the app borrows per call (`appRegistry`).

import { JobRegistry, OpsApp, OpsClaims } from './weft_apps.js';
import { Runtime, WeftError } from './runtime.js';
import { DISPOSED, WAIT_CANCELLED, WAIT_TIMED_OUT, NO_VALUE, NO_COMPUTE } from './codes.js';

/** Creates an application (load its surface with `app.load`). */
export function createApp(options = {}) {
  return new App(options);
}

// The registry calls the app has nothing to react to (reads, the runtime's own subscriptions
// and mailbox reads); the app also takes the registry's outputs before every drain.
const PASS = new Set([
  'job', 'journal', 'jobs', 'endpoint', 'readMailbox', 'mailboxLength', 'closePending',
  'retainedJobs', 'eventsRecorded', 'takeDeliveries', 'unsubscribe',
]);
// The registry calls whose first argument is not the time (the app reacts at its latest time).
const UNTIMED = new Set(['cancelWait', 'observe', 'forget', 'closeOwnerStep', 'withdrawUnpostedInput']);

/**
 * The registry the app's runtime drives: the app's `JobRegistry` behind one wrapper, so each
 * registry method exists once (on `JobRegistry`). The inputs the app reacts to itself (Worker
 * messages, closed transports, timers, the output drain) go to the app, which borrows the
 * registry; every other call goes to the registry, then the app takes the registry's outputs
 * (`onRegistryOutputs`, even when the call threw), as `weft_core::ops::App` is driven.
 */
function appRegistry(app, reg) {
  const wrapper = {};
  for (const name of Object.getOwnPropertyNames(JobRegistry.prototype)) {
    const fn = reg[name];
    if (name === 'constructor' || name.startsWith('__') || typeof fn !== 'function') continue;
    wrapper[name] = PASS.has(name)
      ? fn.bind(reg)
      : (...args) => {
          try {
            return fn.apply(reg, args);
          } finally {
            app.onRegistryOutputs(UNTIMED.has(name) ? undefined : args[0], reg);
          }
        };
  }
  return Object.assign(wrapper, {
    onMessage: (now, endpoint, msg) => app.onMessage(now, reg, endpoint, msg),
    onEndpointClosed: (now, endpoint, reason) => app.onEndpointClosed(now, reg, endpoint, reason),
    pollTimeout: () => app.pollTimeout(reg),
    handleTimeout: (now) => app.handleTimeout(now, reg),
    drainOutputs: () => app.drainOutputs(reg),
    free: () => {
      app.free();
      reg.free();
    },
  });
}

const qualify = (spec) => (spec.scope ? `${spec.scope}/${spec.name}` : spec.name);

function isAsyncIterable(x) {
  return x != null && typeof x[Symbol.asyncIterator] === 'function';
}

function errorArgs(err) {
  const message = String(err?.message ?? err);
  const code = typeof err?.code === 'string' ? err.code : undefined;
  return [message, code];
}

export class App {
  #core;
  // The app's job registry, lent to the core per call.
  #reg;
  #rt;
  #computes = new Map();
  #selectors = new Map();
  #running = new Map();
  #waiters = new Map();
  // Waiting tool calls: call id -> settle(output), until the core's `tool_replied`.
  #toolCalls = new Map();
  #listeners = new Set();
  #flushScheduled = false;
  #notifyScheduled = false;
  #lastRevision = -1;
  #disposed = false;

  constructor({ now, instance, firstOp, firstJobId, retention } = {}) {
    this.#core = new OpsApp({ instance, firstOp, retention });
    this.#reg = new JobRegistry(firstJobId);
    this.#rt = new Runtime({
      now,
      core: appRegistry(this.#core, this.#reg),
      onOutput: (o) => this.#dispatch(o),
      onPumped: () => this.#changed(),
    });
  }

  /** The job runtime whose registry the app uses (Worker endpoints, jobs, mailboxes). */
  get runtime() {
    return this.#rt;
  }

  /** Opens a Worker endpoint for Worker cells (see `Runtime.openWorker`). */
  openWorker(specifier, options) {
    return this.#rt.openWorker(specifier, options);
  }

  /** Opens an in-process endpoint (see `Runtime.openLocal`). */
  openLocal(fn, options) {
    return this.#rt.openLocal(fn, options);
  }

  #cellSpecs(cells) {
    return cells.map((c) => {
      const { compute, worker, ...rest } = c;
      if (worker !== undefined) {
        const endpoint = typeof worker === 'number' ? worker : worker?.id;
        return { ...rest, compute: { kind: 'worker', endpoint } };
      }
      if (typeof compute !== 'function') {
        throw new WeftError('INVALID_GRAPH', `cell ${qualify(c)}: give \`compute\` (a function) or \`worker\` (an endpoint)`);
      }
      return { ...rest, compute: { kind: 'host' } };
    });
  }

  #register(cells) {
    const computes = new Map();
    for (const c of cells) if (typeof c.compute === 'function') computes.set(qualify(c), c.compute);
    return computes;
  }

  /**
   * Publishes the surface and starts the graph. `cells[i]`: `{name, scope?, description?,
   * deps, constants?, gate?: {control, open: [...]}, compute(inputs, ctx) | worker: Endpoint,
   * equality?: 'value' | 'never'}`;
   * `selectors`: `{name: (snapshot, outcome) => result}` (pure functions over a snapshot).
   */
  load({ controls = [], actions = [], cells = [], selectors = {} } = {}) {
    const specCells = this.#cellSpecs(cells);
    const sel = Object.entries(selectors).map(([name, s]) => {
      const fn = typeof s === 'function' ? s : s?.select;
      if (typeof fn !== 'function') throw new WeftError('INVALID_GRAPH', `selector ${name}: give a function`);
      return { name, fn, description: typeof s === 'function' ? '' : (s.description ?? '') };
    });
    this.#computes = this.#register(cells);
    for (const s of sel) this.#selectors.set(s.name, s.fn);
    this.#rt._call((_, now) =>
      this.#core.load(now, this.#reg, {
        controls,
        actions,
        cells: specCells,
        selectors: sel.map(({ name, description }) => ({ name, description })),
      }),
    );
  }

  /** Hot replacement: new cell definitions under a fresh graph instance id. */
  replaceGraph(instance, cells) {
    const specCells = this.#cellSpecs(cells);
    const previous = this.#computes;
    // The new instance's first calculations are dispatched during the call: install first.
    this.#computes = this.#register(cells);
    try {
      this.#rt._call((_, now) => this.#core.replaceGraph(now, this.#reg, instance, specCells));
    } catch (err) {
      this.#computes = previous;
      throw err;
    }
  }

  /** Disposes the graph: calculations end as owner_disposed; controls stay. */
  disposeGraph() {
    this.#rt._call((_, now) => this.#core.disposeGraph(now, this.#reg));
  }

  // ----- writes ------------------------------------------------------------------------------

  #scheduleFlush() {
    if (this.#flushScheduled || this.#disposed) return;
    this.#flushScheduled = true;
    queueMicrotask(() => {
      this.#flushScheduled = false;
      // Disposed in the same tick: the core is freed, there is nothing to flush.
      if (!this.#disposed) this.flush();
    });
  }

  /** Ends the tick now (otherwise it ends at the next microtask checkpoint). */
  flush() {
    return this.#rt._call((_, now) => this.#core.flush(now, this.#reg));
  }

  /** Writes one control. Returns the receipt (the accepted value); effective at the flush. */
  set(name, value, { by = 'user', toolCall } = {}) {
    const r = this.#rt._call((_, now) => this.#core.set(now, name, value, { by, toolCall }));
    this.#scheduleFlush();
    return r;
  }

  /** Writes several controls all-or-nothing. Returns the receipts. */
  setMany(writes, { by = 'user', toolCall } = {}) {
    const r = this.#rt._call((_, now) => this.#core.setMany(now, writes, { by, toolCall }));
    this.#scheduleFlush();
    return r;
  }

  /** Invokes a published action. Returns `{invocation, writes}`. */
  act(name, args = {}, { by = 'user', toolCall } = {}) {
    const r = this.#rt._call((_, now) => this.#core.act(now, name, args, { by, toolCall }));
    this.#scheduleFlush();
    return r;
  }

  // ----- operations --------------------------------------------------------------------------

  /**
   * Starts an operation: `{writes, waitFor, select | selector, onSupersede, onFailure,
   * timeoutMs, by, toolCall}`. Returns its handle; the writes take effect at the flush.
   */
  start(request = {}) {
    const { signal: _signal, ...req } = request;
    const op = this.#rt._call((_, now) => this.#core.observeOp(now, this.#reg, req));
    this.#scheduleFlush();
    return new Operation(this, op);
  }

  /**
   * Starts an operation and resolves with its outcome record. Aborting `signal` cancels the
   * observation (never the calculations) and rejects with WAIT_CANCELLED.
   */
  observe(request = {}) {
    const { signal } = request;
    const op = this.start(request);
    if (signal?.aborted) {
      op.cancel('aborted by the caller');
      return Promise.reject(new WeftError(WAIT_CANCELLED, 'the observation was cancelled', { cause: signal.reason }));
    }
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        op.cancel('aborted by the caller');
        reject(new WeftError(WAIT_CANCELLED, 'the observation was cancelled', { cause: signal.reason }));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      op.wait().then(
        (outcome) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(outcome);
        },
        reject,
      );
    });
  }

  /** A handle on an existing operation. */
  operation(id) {
    return new Operation(this, id);
  }

  /** @internal */
  _outcome(id) {
    return this.#live().outcome(id);
  }

  /** @internal */
  _isFinished(id) {
    return this.#live().isFinished(id);
  }

  /** @internal */
  _cancel(id, reason) {
    return this.#rt._call((_, now) => this.#core.cancelOp(now, this.#reg, id, reason));
  }

  /** @internal calls `resolve()` when the operation ends. */
  _onFinish(id, resolve) {
    let set = this.#waiters.get(id);
    if (!set) this.#waiters.set(id, (set = new Set()));
    set.add(resolve);
    return () => set.delete(resolve);
  }

  /** Submits an independent task running a Worker cell on explicit inputs (a Job). */
  submitTask(cell, overrides = {}, { owner = 'app', origin, toolCall } = {}) {
    const id = this.#rt._call((_, now) => this.#core.submitTask(now, this.#reg, cell, overrides, owner, { origin, toolCall }));
    return this.#rt.job(id);
  }

  /**
   * Hosts a waiting operation as a job of the app's registry (a Job: `wait`, `observe`,
   * mailbox notes for `owner`, `cancel`). Cancelling the job cancels the observation only
   * (calculations continue). Hosting it again returns the same job; a finished operation is
   * refused (INVALID_ARGUMENT).
   */
  hostAsJob(op, { owner = 'agent', origin, toolCall } = {}) {
    const id = typeof op === 'number' ? op : op?.id;
    const job = this.#rt._call((_, now) => this.#core.hostAsJob(now, this.#reg, id, owner, { origin, toolCall }));
    return this.#rt.job(job);
  }

  // ----- the published tools -----------------------------------------------------------------

  /** The agent tools: `list()` (name, description, inputSchema) and `call(name, args, opts)`. */
  get tools() {
    return {
      list: () => this.#live().toolDefinitions(),
      call: (name, args, options) => this.#callTool(name, args, options),
    };
  }

  async #callTool(name, args = {}, { by = 'agent', toolCall, owner = 'agent', signal } = {}) {
    // Not pumped until the reply's receiver is registered: the operation may end while the
    // call's outputs are carried out (a synchronous cell), and the reply with it.
    this.#live(); // after dispose: rejects DISPOSED
    let r;
    try {
      r = this.#rt._raw((_, now) => this.#core.callTool(now, this.#reg, name, args, { by, toolCall, owner }));
    } catch (err) {
      this.#rt._pump();
      throw err;
    }
    if ('ready' in r) {
      this.#rt._pump();
      return r.ready;
    }
    // The core replies (`tool_replied`) when the operation ends or the granted wait elapses
    // (its own timer); an aborted signal ends only this wait.
    const { call } = r;
    const reply = new Promise((resolve, reject) => {
      const cancel = (message) => {
        this.#toolCalls.delete(call);
        if (!this.#disposed) this.#rt._call(() => this.#core.cancelToolWait(call));
        reject(new WeftError(WAIT_CANCELLED, message, { cause: signal.reason }));
      };
      if (signal?.aborted) return cancel('the wait was cancelled');
      const onAbort = () => cancel('the wait was cancelled; the operation continues');
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#toolCalls.set(call, (o) => {
        signal?.removeEventListener('abort', onAbort);
        if (o.error) reject(new WeftError(o.error.code, o.error.message));
        else resolve(o.reply);
      });
    });
    this.#rt._pump();
    return reply;
  }

  // ----- reads -------------------------------------------------------------------------------

  /** The whole application at the current revision (values are the live JS values). */
  snapshot() {
    return this.#live().snapshot();
  }

  /** One cell: `{state, value, valueCalc, final, upToDate, calc, progress, error, provenance}`. */
  cell(name) {
    return this.#live().cell(name);
  }

  /** The report (`full`: constraints, descriptions, calculations, provenance). */
  report({ full = false } = {}) {
    return this.#live().report(full);
  }

  /** Every retained operation, briefly: `{operation, state, by}`. */
  operations() {
    return this.#live().operations();
  }

  /** An operation's whole record (what the `inspect` tool returns). */
  inspect(op) {
    return this.#live().operation(op);
  }

  /** A calculation's record and lifecycle journal. */
  calc(id) {
    return this.#live().calc(id);
  }

  /** The retained calculations of a cell, oldest first. */
  calcsOf(cell) {
    return this.#live().calcsOf(cell);
  }

  /** A write's receipt. */
  receipt(write) {
    return this.#live().receipt(write);
  }

  /** The current application revision. */
  get revision() {
    return this.#live().revision();
  }

  /** `{calcs, writes, operations}` retained by the core. */
  retained() {
    const [calcs, writes, operations] = this.#live().retained();
    return { calcs, writes, operations };
  }

  /** The core, unless the app was disposed (its wasm memory is freed then). */
  #live() {
    if (this.#disposed) throw new WeftError(DISPOSED, 'the app was disposed');
    return this.#core;
  }

  /** Calls `listener(app)` after changes (coalesced per microtask). Returns an unsubscribe. */
  subscribe(listener) {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Terminates endpoints and frees the core. A flush or a listener call still scheduled for
   * this tick is dropped; reads afterwards throw DISPOSED.
   */
  dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#listeners.clear();
    for (const ac of this.#running.values()) ac.abort(new WeftError(DISPOSED, 'app disposed'));
    this.#running.clear();
    const calls = [...this.#toolCalls.values()];
    this.#toolCalls.clear();
    for (const settle of calls) settle({ error: { code: DISPOSED, message: 'the app was disposed' } });
    this.#rt.dispose();
  }

  // ----- carrying out the core's outputs -----------------------------------------------------

  #dispatch(o) {
    switch (o.output) {
      case 'compute':
        this.#compute(o);
        break;
      case 'abort': {
        const ac = this.#running.get(o.calc);
        if (ac) {
          this.#running.delete(o.calc);
          ac.abort(new WeftError(o.code, `calculation ${o.calc} of ${o.cell}: ${o.detail}`));
        }
        break;
      }
      case 'op_finished':
        this.#finished(o);
        break;
      case 'tool_replied': {
        const settle = this.#toolCalls.get(o.call);
        this.#toolCalls.delete(o.call);
        settle?.(o);
        break;
      }
    }
  }

  #report(method, calc, ...args) {
    // A calculation that ignores its abort signal may report after the app was disposed.
    if (this.#disposed) return undefined;
    try {
      return this.#rt._call((_, now) => this.#core[method](now, this.#reg, calc, ...args));
    } catch (err) {
      queueMicrotask(() => {
        throw err;
      });
    }
  }

  #compute(o) {
    const fn = this.#computes.get(o.cell);
    const calc = o.calc;
    if (!fn) {
      this.#report('calcFailed', calc, `no compute function for ${o.cell}`, NO_COMPUTE);
      return;
    }
    // The AbortController is made on first use: a synchronous compute never needs one.
    let ac = null;
    const controller = () => {
      if (!ac) {
        ac = new AbortController();
        this.#running.set(calc, ac);
      }
      return ac;
    };
    const ctx = {
      calc,
      get signal() {
        return controller().signal;
      },
      previous: o.previous,
      progress: (fraction) => this.#report('calcProgress', calc, fraction),
      partial: (value) => this.#report('calcPartial', calc, value),
    };
    const fail = (err) => this.#report('calcFailed', calc, ...errorArgs(err));
    let out;
    try {
      out = fn(o.inputs, ctx);
    } catch (err) {
      if (ac) this.#running.delete(calc);
      fail(err);
      return;
    }
    if (isAsyncIterable(out) || (out != null && typeof out.then === 'function')) controller();
    if (isAsyncIterable(out)) {
      (async () => {
        let any = false;
        try {
          for await (const v of out) {
            any = true;
            this.#report('calcPartial', calc, v);
          }
          if (!any) throw new WeftError(NO_VALUE, 'the async iterable finished without yielding');
          // The last partial is the result: committed once, not again as a final value.
          this.#report('calcFinish', calc);
        } catch (err) {
          fail(err);
        } finally {
          this.#running.delete(calc);
        }
      })();
    } else if (out != null && typeof out.then === 'function') {
      out.then(
        (v) => this.#report('calcDone', calc, v),
        (err) => fail(err),
      ).finally(() => this.#running.delete(calc));
    } else {
      if (ac) this.#running.delete(calc);
      this.#report('calcDone', calc, out);
    }
  }

  #finished(o) {
    // The core names the selector an operation settled with (and sends its snapshot).
    if (o.selector && o.outcome === 'settled') {
      const fn = this.#selectors.get(o.selector);
      try {
        if (typeof fn !== 'function') {
          throw new WeftError('UNKNOWN_SELECTOR', `no selector function \`${o.selector}\` is registered`);
        }
        const value = fn(o.snapshot, this.#core.outcome(o.op));
        this.#core.recordResult(o.op, value);
      } catch (err) {
        // A selector that throws (or is absent) leaves the settled outcome without a result:
        // the core is told, so tool calls waiting on it reply now; report loudly.
        try {
          this.#core.recordNoResult(o.op);
        } catch {
          // Its record is gone (pruned): no call waits on it any more; `err` says why.
        }
        queueMicrotask(() => {
          throw err;
        });
      }
    }
    const set = this.#waiters.get(o.op);
    if (set) {
      this.#waiters.delete(o.op);
      for (const resolve of set) resolve();
    }
  }

  #changed() {
    if (this.#disposed || this.#listeners.size === 0 || this.#notifyScheduled) return;
    if (this.#core.revision() === this.#lastRevision) return;
    this.#notifyScheduled = true;
    queueMicrotask(() => {
      this.#notifyScheduled = false;
      // Disposed since the change (same tick): the core is freed and nobody is listening.
      if (this.#disposed) return;
      this.#lastRevision = this.#core.revision();
      for (const l of this.#listeners) {
        try {
          l(this);
        } catch (err) {
          queueMicrotask(() => {
            throw err;
          });
        }
      }
    });
  }
}

/** A handle on one operation. */
export class Operation {
  #app;

  constructor(app, id) {
    this.#app = app;
    this.id = id;
  }

  /** The outcome record, or null while waiting. */
  get outcome() {
    return this.#app._outcome(this.id);
  }

  /** The whole record (writes, wait set, linked calculations, timeline, outcome). */
  inspect() {
    return this.#app.inspect(this.id);
  }

  /**
   * Resolves with the outcome. Aborting `signal` or reaching `timeoutMs` rejects (codes
   * WAIT_CANCELLED / WAIT_TIMED_OUT) and ends only this wait: the operation continues.
   */
  wait(options = {}) {
    return this._ended(options).then(() => {
      const outcome = this.outcome;
      if (outcome === null) {
        throw new WeftError('PRUNED', `op-${this.id} finished and its record was pruned (retention)`);
      }
      return outcome;
    });
  }

  /** @internal Resolves (with nothing) when the operation ends; rejects like `wait`. */
  _ended({ signal, timeoutMs } = {}) {
    let finished;
    try {
      finished = this.#app._isFinished(this.id);
    } catch (err) {
      return Promise.reject(err); // DISPOSED
    }
    if (finished) return Promise.resolve();
    if (signal?.aborted) {
      return Promise.reject(new WeftError(WAIT_CANCELLED, 'the wait was cancelled', { cause: signal.reason }));
    }
    return new Promise((resolve, reject) => {
      let timer = null;
      const cleanup = () => {
        off();
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const off = this.#app._onFinish(this.id, () => {
        cleanup();
        resolve();
      });
      const onAbort = () => {
        cleanup();
        reject(new WeftError(WAIT_CANCELLED, 'the wait was cancelled; the operation continues', { cause: signal.reason }));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          cleanup();
          reject(new WeftError(WAIT_TIMED_OUT, `wait timed out after ${timeoutMs} ms; the operation continues`));
        }, timeoutMs);
      }
    });
  }

  /** Hosts the operation as a registry job (see `App.hostAsJob`). */
  hostAsJob(options) {
    return this.#app.hostAsJob(this.id, options);
  }

  /** Cancels the observation only (calculations continue). Returns the outcome name. */
  cancel(reason = 'cancelled by the caller') {
    return this.#app._cancel(this.id, reason);
  }
}

// ----- standing desires ------------------------------------------------------------------------

/**
 * Standing desires (weft_core::ops::claims): per named claim the newest desire wins. `acquire`
 * and `release` are the host's work; every rule (one operation at a time per claim, a late
 * acquisition released and never adopted, an error parking the claim) is the core's.
 */
export function createClaims(options) {
  return new Claims(options);
}

const message = (err) => String(err?.message ?? err);
const weftError = (err) => (typeof err?.code === 'string' && !(err instanceof WeftError) ? new WeftError(err.code, err.message) : err);

export class Claims {
  #core = new OpsClaims();
  #acquire;
  #release;
  #now;
  // attempt -> the resource its acquisition gave (until it is released).
  #resources = new Map();
  // claim -> the attempt whose resource is held.
  #held = new Map();
  // claim -> the callbacks of `settled`.
  #waiters = new Map();
  #disposed = false;

  /**
   * `acquire(desire, {claim, attempt})` resolves with the resource or rejects (the claim is
   * parked in `error` until the desire changes or `retry`); `release(resource, {claim,
   * attempt, desire})` resolves when it is gone (a rejection is journaled, the resource is
   * dropped anyway). `now`: the journal's clock (ms, default `performance.now`).
   */
  constructor({ acquire, release, now = () => performance.now() } = {}) {
    if (typeof acquire !== 'function' || typeof release !== 'function') {
      throw new WeftError('INVALID_ARGUMENT', 'createClaims needs `acquire` and `release` functions');
    }
    this.#acquire = acquire;
    this.#release = release;
    this.#now = now;
  }

  #live() {
    if (this.#disposed) throw new WeftError(DISPOSED, 'the claims were disposed');
    return this.#core;
  }

  /** Runs a core call, then carries out the acquisitions and releases it asked for. */
  #step(fn) {
    const core = this.#live();
    let r;
    try {
      r = fn(core, this.#now());
    } catch (err) {
      throw weftError(err);
    }
    for (const o of core.drainOutputs()) {
      if (o.output === 'acquire') this.#acquiring(o);
      else this.#releasing(o);
    }
    this.#notify();
    return r;
  }

  #acquiring({ claim, attempt, desire }) {
    new Promise((resolve) => resolve(this.#acquire(desire, { claim, attempt }))).then(
      (resource) => {
        if (this.#disposed) return this.#drop(resource, { claim, attempt, desire });
        this.#resources.set(attempt, { claim, desire, resource });
        if (this.#step((c, now) => c.acquired(now, claim, attempt))) this.#held.set(claim, attempt);
      },
      (err) => {
        if (!this.#disposed) this.#step((c, now) => c.acquireFailed(now, claim, attempt, message(err)));
      },
    );
  }

  #releasing({ claim, attempt, desire }) {
    const { resource } = this.#resources.get(attempt) ?? {};
    this.#resources.delete(attempt);
    if (this.#held.get(claim) === attempt) this.#held.delete(claim);
    new Promise((resolve) => resolve(this.#release(resource, { claim, attempt, desire }))).then(
      () => {
        if (!this.#disposed) this.#step((c, now) => c.released(now, claim, attempt, undefined));
      },
      (err) => {
        if (!this.#disposed) this.#step((c, now) => c.released(now, claim, attempt, message(err)));
      },
    );
  }

  /** A resource whose claim is gone (disposed): released, errors ignored. */
  #drop(resource, info) {
    new Promise((resolve) => resolve(this.#release(resource, info))).catch(() => {});
  }

  #notify() {
    for (const [claim, set] of this.#waiters) {
      if (this.#core.phase(claim) === 'pending') continue;
      this.#waiters.delete(claim);
      for (const w of set) w.resolve();
    }
  }

  /** Sets what should exist now for `claim` (`null`: nothing). An equal (JSON) desire changes nothing. */
  desire(claim, desire) {
    this.#step((c, now) => c.desire(now, claim, desire ?? null));
  }

  /** Re-attempts a claim parked in `error` with its unchanged desire (UNKNOWN_CLAIM: no such claim). */
  retry(claim) {
    this.#step((c, now) => c.retry(now, claim));
  }

  /** `'idle' | 'pending' | 'active' | 'error'`. */
  phase(claim) {
    return this.#live().phase(claim);
  }

  /** `{phase, desired, held, error, journal: [{at, what, attempt}]}` (`held`: the desire held). */
  state(claim) {
    return this.#live().state(claim);
  }

  /** The resource held for the claim's newest desire, or undefined. */
  held(claim) {
    this.#live();
    return this.#held.has(claim) ? this.#resources.get(this.#held.get(claim))?.resource : undefined;
  }

  /**
   * Resolves with the claim's state once it is not pending (active, idle or error). Aborting
   * `signal` ends only this wait (WAIT_CANCELLED); dispose rejects it (DISPOSED).
   */
  settled(claim, { signal } = {}) {
    try {
      if (this.phase(claim) !== 'pending') return Promise.resolve(this.state(claim));
    } catch (err) {
      return Promise.reject(err);
    }
    if (signal?.aborted) return Promise.reject(new WeftError(WAIT_CANCELLED, 'the wait was cancelled', { cause: signal.reason }));
    return new Promise((resolve, reject) => {
      let set = this.#waiters.get(claim);
      if (!set) this.#waiters.set(claim, (set = new Set()));
      const onAbort = () => {
        set.delete(w);
        reject(new WeftError(WAIT_CANCELLED, 'the wait was cancelled; the claim continues', { cause: signal.reason }));
      };
      const w = {
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve(this.state(claim));
        },
        reject: (err) => {
          signal?.removeEventListener('abort', onAbort);
          reject(err);
        },
      };
      set.add(w);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /**
   * Releases every resource acquired and not yet released (acquisitions still running are
   * released when they arrive), rejects waits with DISPOSED and frees the core.
   */
  dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const [attempt, { claim, desire, resource }] of this.#resources) this.#drop(resource, { claim, attempt, desire });
    this.#resources.clear();
    this.#held.clear();
    const waiters = [...this.#waiters.values()];
    this.#waiters.clear();
    for (const set of waiters) for (const w of set) w.reject(new WeftError(DISPOSED, 'the claims were disposed'));
    this.#core.free();
  }
}
