// The weft JS runtime: a thin host around the wasm core. It owns transports, timers and
// Promises; every decision (what a cancel means, when a wait ends, what is late evidence) is
// made by the core's job registry.

import { WeftError } from './error.js';
import { CANCELLED, DISPOSED, TERMINATED, WAIT_CANCELLED, WAIT_TIMED_OUT, UNSUPPORTED } from './codes.js';

export { WeftError };

const defaultNow = () => Math.floor(performance.now());

let workerFactory = null;

// The JobRegistry class a runtime's own registry is created with, on the runtime's first use:
// the jobs-only module's (`weft` in a browser) or the apps module's (Node, `weft/apps`, after
// `loadApps()`: an agent's session and its runtime's registry must live in one WebAssembly
// module). Set by the entry modules and `loadApps`; read when a registry is created, not when
// its runtime is made, so that a runtime made at page start and first used after `loadApps()`
// runs on the apps module.
let JobRegistry = null;
/** @internal Entry modules and `loadApps` install the registry class of the loaded module. */
export function setRegistryClass(registryClass) {
  JobRegistry = registryClass;
}

/** @internal Entry modules install the environment's Worker transport (DOM or worker_threads). */
export function setWorkerFactory(factory) {
  workerFactory = factory;
}

/** Creates a runtime: one job registry with its endpoints, waits and observers. */
export function createRuntime(options = {}) {
  return new Runtime(options);
}

/**
 * The one timer for a core's next deadline (its `pollTimeout()`): re-armed only when the
 * deadline changes, cleared when there is none. `fire` runs when it is due.
 */
export class Deadline {
  #timer = null;
  #at = Infinity;
  #now;
  #fire;

  constructor(now, fire) {
    this.#now = now;
    this.#fire = fire;
  }

  /** Arms the timer for `at` (host milliseconds), or clears it when `at` is null/undefined. */
  set(at) {
    if (at === undefined || at === null) return this.clear();
    if (this.#timer && at === this.#at) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#at = at;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#at = Infinity;
      this.#fire();
    }, Math.max(0, at - this.#now()));
  }

  /** Clears the timer. */
  clear() {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#at = Infinity;
  }
}

export class Runtime {
  // The registry: undefined until its first use (`#create`), null once disposed.
  #r;
  #create = null;
  get #reg() {
    return this.#r === undefined ? (this.#r = this.#create()) : this.#r;
  }
  set #reg(r) {
    this.#r = r;
  }
  #now;
  #deadline = new Deadline(() => this.#now(), () => this.#call((r, now) => r.handleTimeout(now)));
  #pumping = false;
  #endpoints = new Map();
  // Remote endpoints' sockets: endpoint id -> RemoteSocket.
  #remotes = new Map();
  #waits = new Map();
  #subs = new Map();
  #listeners = { finished: new Set(), note: new Set(), wake: new Set() };
  #extra = null;
  #pumped = null;
  // Core calls made through this runtime; a pump drains again only when dispatching made one.
  #calls = 0;
  // The batch the fused calls (submitPump, waitPump, onMessagePump) write into: one array,
  // reused (a fused call never runs inside a pump, so never while this one is read), its
  // entries ending at a `null`; emptied (undefined) once carried out.
  #out = [];
  #batched = false;
  // While `_submit` carries out its call's outputs: its endpoint (-1 otherwise), job and
  // payload, to tell its own run's `send` apart (see #postOwn); while `_send` does: its job,
  // input id (null otherwise) and value; and whether posting that run or input threw (it was
  // withdrawn), and what.
  #ownEp = -1;
  #ownInput = null;
  #ownJob = -1;
  #own = undefined;
  #ownFailed = false;
  #ownErr = undefined;
  // A microtask that flushes the requests the core holds for batch frames is queued.
  #flushQueued = false;
  #queueFlush() {
    if (!this.#flushQueued) {
      this.#flushQueued = true;
      queueMicrotask(this.#flushSends);
    }
  }
  #flushSends = () => {
    this.#flushQueued = false;
    if (!this.#reg) return;
    this.#calls++;
    // Only the runtime's own registry offers batch frames (an app's wrapper never asks).
    this.#reg.flushSends?.();
    this._pump();
  };

  /**
   * `core` (internal): an object with the JobRegistry interface to drive instead of a fresh
   * registry (an app's registry behind its wrapper, `appRegistry` in ops.js); `onOutput` receives the outputs the runtime does not handle;
   * `onPumped` runs after every pump (state may have changed).
   */
  constructor({ now = defaultNow, firstJobId, core, onOutput, onPumped } = {}) {
    const own = core === undefined || core === null;
    // Its own registry is created on first use (in Node the apps module is then instantiated
    // on first use, so a first `openWorker` spawns its Worker before the compile: node.js), of
    // the registry class installed then (`setRegistryClass`): in a browser the apps module's
    // once `loadApps()` has resolved, even for a runtime made before it (apps.js).
    if (own) this.#create = () => new JobRegistry(firstJobId);
    else this.#reg = core;
    // Its own registry is pumped in one call per round (outputs and next deadline); an app's
    // core (a wrapper) drains and polls separately.
    this.#batched = own;
    this.#now = now;
    this.#extra = onOutput ?? null;
    this.#pumped = onPumped ?? null;
  }

  /** The current time on the runtime's clock (ms). */
  now() {
    return this.#now();
  }

  /**
   * Opens a Worker endpoint: a DOM `Worker` in browsers, a `worker_threads` Worker in Node.
   * `specifier` is a script URL/path (or, in browsers, an existing Worker).
   */
  openWorker(specifier, options = {}) {
    if (!workerFactory) throw new WeftError(UNSUPPORTED, 'no Worker transport in this environment');
    // Node's transport spawns the Worker at once (its thread boots while the core opens the
    // endpoint); `abandon()` stops it if the endpoint is refused before it is connected.
    const connect = workerFactory(specifier, options);
    let connected = false;
    try {
      return this.openEndpoint(
        (h) => {
          connected = true;
          return connect(h);
        },
        { label: String(specifier), ...options },
      );
    } finally {
      if (!connected) connect.abandon?.();
    }
  }

  /**
   * Opens an endpoint over any transport. `connect(handlers)` receives
   * `{message(data), undecodable(detail), closed(reason)}` and returns `{post(msg), terminate()}`.
   */
  openEndpoint(connect, options = {}) {
    const spec = {
      owner: options.owner ?? 'app',
      label: options.label ?? 'endpoint',
      hello: options.hello ?? 'await',
      helloTimeoutMs: options.helloTimeoutMs,
      quietMs: options.quietMs,
      maxConcurrent: options.maxConcurrent,
      maxMessageBytes: options.maxMessageBytes,
      // The transport may carry batch frames (used once the worker announces `batch`). The
      // runtime flushes what the core holds at the end of each turn (a microtask); an app's
      // registry is drained by the app, so its endpoints send single messages.
      batchSends: this.#batched && options.batchSends !== false,
    };
    const id = this.#call((r, now) => r.openEndpoint(now, spec));
    const handlers = {
      message: (data) => this.#onMessage(id, data),
      undecodable: (detail) => this.#call((r, now) => r.onUndecodable(now, id, String(detail))),
      closed: (reason) => this.#call((r, now) => r.onEndpointClosed(now, id, String(reason))),
    };
    let transport;
    try {
      transport = connect(handlers);
    } catch (err) {
      this.#call((r, now) => r.onEndpointClosed(now, id, `transport failed to start: ${err?.message ?? err}`));
      throw err;
    }
    const ep = new Endpoint(this, id, transport);
    this.#endpoints.set(id, ep);
    return ep;
  }

  /**
   * Opens an in-process endpoint running `fn(payload, ctx)` for each job. `ctx` has `signal`,
   * `progress(v)`, `partial(v)` and `onInput(handler)`. A run that settles after its signal
   * aborted acknowledges the cancel (by rejecting) or completes (by resolving).
   */
  openLocal(fn, options = {}) {
    const { input = false } = options;
    return this.openEndpoint(
      (h) => {
        const runs = new Map();
        const handle = (m) => {
          if (m.type === 'run') {
            const ac = new AbortController();
            const run = { ac, onInput: null };
            runs.set(m.id, run);
            const ctx = {
              signal: ac.signal,
              progress: (value) => h.message({ id: m.id, type: 'progress', value }),
              partial: (value) => h.message({ id: m.id, type: 'partial', value }),
              onInput: (handler) => {
                run.onInput = handler;
              },
            };
            Promise.resolve()
              .then(() => fn(m.payload, ctx))
              .then(
                (value) => h.message({ id: m.id, type: 'done', value }),
                (err) =>
                  h.message(
                    ac.signal.aborted
                      ? { id: m.id, type: 'cancelled' }
                      : { id: m.id, type: 'error', message: String(err?.message ?? err), code: err?.code },
                  ),
              )
              .finally(() => runs.delete(m.id));
          } else if (m.type === 'cancel') {
            runs.get(m.id)?.ac.abort(new WeftError(CANCELLED, 'cancelled'));
          } else if (m.type === 'input') {
            const run = runs.get(m.id);
            try {
              if (!run?.onInput) throw new Error('this run takes no input');
              run.onInput(m.value);
              h.message({ id: m.id, type: 'input_applied', inputId: m.inputId });
            } catch (err) {
              h.message({ id: m.id, type: 'input_rejected', inputId: m.inputId, message: String(err?.message ?? err) });
            }
          }
        };
        return {
          // Deliver asynchronously: the core never re-enters itself from its own outputs.
          post: (m) => queueMicrotask(() => handle(m)),
          terminate: () => {
            for (const r of runs.values()) r.ac.abort(new WeftError(TERMINATED, 'endpoint terminated'));
            runs.clear();
          },
        };
      },
      { label: 'local', ...options, hello: { declared: { input, cancelAck: true, errorCode: true } } },
    );
  }

  /**
   * Opens an endpoint on a remote job host (`weft serve`'s `/api/jobs/remote`, e.g.
   * `ws://127.0.0.1:8080/api/jobs/remote`): the server runs `script` (a `--remote-script`) or
   * `kind` (a `--remote-kind`); the endpoint behaves like a local one. The core keeps the
   * session: heartbeats, reconnection with backoff, resumption within `resumeWindowMs`
   * (nothing lost, every missed event delivered in order), and `lost` with the evidence
   * `remote_disconnected` when the window passes. `WebSocket`: the constructor to use
   * (default `globalThis.WebSocket`; Node 20 needs `--experimental-websocket`). A payload or
   * input sent to it must be JSON data (its wire is JSON text): the core copies it as JSON
   * data at the call, and refuses what is not with INVALID_JSON, recording nothing (the rule:
   * `jsonData` in wasm/src/js.rs).
   */
  openRemote(url, options = {}) {
    const WS = options.WebSocket ?? globalThis.WebSocket;
    if (typeof WS !== 'function') {
      throw new WeftError(UNSUPPORTED, 'no WebSocket in this environment: pass options.WebSocket (Node 20: run with --experimental-websocket)');
    }
    const spec = {
      owner: options.owner ?? 'app',
      label: options.label ?? String(url),
      maxConcurrent: options.maxConcurrent,
      maxMessageBytes: options.maxMessageBytes,
    };
    const remote = {
      url: String(url),
      token: options.token ?? '',
      script: options.script,
      kind: options.kind,
      windowMs: options.resumeWindowMs,
      heartbeatMs: options.heartbeatMs,
      allowInsecure: options.allowInsecure ?? false,
    };
    // Not pumped yet: the `connect` output needs the socket holder registered first.
    const id = this._raw((r, now) => r.openRemote(now, spec, remote));
    const socket = new RemoteSocket(this, id, WS);
    this.#remotes.set(id, socket);
    const ep = new Endpoint(this, id, { post() {}, terminate: () => socket.close(1000, 'endpoint terminated') });
    this.#endpoints.set(id, ep);
    this._pump();
    return ep;
  }

  /** A handle on an existing job, or undefined. */
  job(id) {
    return this.#reg.job(id) === undefined ? undefined : new Job(this, id, false);
  }

  /** Summaries of retained jobs (finished ones stay until their owner closes). */
  jobs({ owner } = {}) {
    return this.#reg.jobs(owner);
  }

  /** Takes the owner's unread completion notes. */
  readMailbox(owner) {
    return this.#reg.readMailbox(owner);
  }

  /** Number of unread notes. */
  mailboxLength(owner) {
    return this.#reg.mailboxLength(owner);
  }

  /**
   * Releases finished job `id` (record, journal, reuse key) before its owner closes. Returns
   * false, changing nothing, while the job runs or a wait or observer still follows it.
   */
  forget(id) {
    return this.#reg.forget(id);
  }

  /** Disposes what `owner` owns, with an explicit outcome for each unfinished job. */
  closeOwner(owner) {
    return this.#call((r, now) => r.closeOwner(now, owner));
  }

  /**
   * closeOwner in slices: unfinished jobs get their outcome and owned endpoints are terminated
   * at once, and from then on none of the owner's jobs can be found; the finished jobs'
   * records are released `slice` at a time, one slice per macrotask, so that closing a large
   * owner never blocks the event loop for long. Resolves with the same report as closeOwner.
   */
  async closeOwnerGradually(owner, { slice = 4096 } = {}) {
    const { close, pending, report } = this.#call((r, now) => r.beginCloseOwner(now, owner));
    let left = pending;
    while (left > 0 && this.#reg) {
      await macrotask();
      if (!this.#reg) break;
      const { jobs, unreadNotes } = this.#reg.closeOwnerStep(close, slice);
      for (const l of jobs) report.jobs.push(l);
      for (const n of unreadNotes) report.unreadNotes.push(n);
      left = jobs.length + unreadNotes.length === 0 ? 0 : this.#reg.closePending(close);
    }
    return report;
  }

  /** Listens for `finished` ({job, outcome}), `note` ({owner, job}) or `wake` ({owner, job}). */
  on(event, listener) {
    const set = this.#listeners[event];
    if (!set) throw new WeftError('INVALID_ARGUMENT', `unknown event ${event}`);
    set.add(listener);
    return () => set.delete(listener);
  }

  /** Terminates every endpoint (running jobs become `lost`) and stops the timer. */
  close(reason = 'runtime closed') {
    for (const ep of this.#endpoints.values()) ep.terminate(reason);
    this.#deadline.clear();
  }

  /** Closes, then frees the registry's wasm memory. The runtime is unusable afterwards. */
  dispose() {
    this.close('runtime disposed');
    // (A registry never used is never created.)
    if (this.#r !== undefined) this.#reg.free();
    this.#reg = null;
  }

  /** @internal the wasm registry, for bindings built on it. */
  get registry() {
    this.#calls++;
    return this.#reg;
  }

  /** @internal Runs a core call, then carries out its outputs. */
  _call(fn) {
    return this.#call(fn);
  }

  /** @internal Runs a core call without carrying out outputs (the caller pumps). */
  _raw(fn) {
    this.#calls++;
    return fn(this.#reg, this.#now());
  }

  /** @internal */
  _registerSub(id, entry) {
    this.#subs.set(id, entry);
  }

  /** @internal */
  _dropSub(id) {
    this.#subs.delete(id);
    this.#reg.unsubscribe(id);
  }

  /** @internal Carries out every pending output, then re-arms the timer. */
  _pump() {
    if (this.#pumping || !this.#reg) return;
    if (this.#batched) return this.#pumpBatched();
    this.#pumping = true;
    let thrown = NOTHING_THROWN;
    try {
      for (;;) {
        const outs = this.#reg.drainOutputs();
        if (outs.length === 0) break;
        const calls = this.#calls;
        thrown = this.#dispatchAll(outs, 0, outs.length, thrown);
        // Only a core call can queue outputs. An app's core (onOutput) is also called
        // directly by its handler, so it is always drained again.
        if (calls === this.#calls && !this.#extra) break;
      }
    } finally {
      this.#pumping = false;
    }
    if (this.#remotes.size > 0) this.#forgetClosedRemotes();
    this.#arm();
    if (this.#pumped !== null) this.#pumped();
    if (thrown !== NOTHING_THROWN) throw thrown;
  }

  // Carries out `batch[i..end)`, and returns the first error carrying one out threw
  // (`thrown` when it is not NOTHING_THROWN). An output that throws (a transport's post)
  // does not stop the ones after it: an `observed` among them is the only notification its
  // observer gets (the core notifies only when its queue becomes non-empty), a `flush` the
  // only one of its turn. Errors after the first are reported uncaught on a microtask (as a
  // throwing listener's are: `safely`); the pump throws the first once it is over.
  // (One try around the loop, entered again after an output that threw: nothing per output.)
  #dispatchAll(batch, i, end, thrown) {
    while (i < end) {
      try {
        for (; i < end; i++) this.#dispatch(batch[i]);
      } catch (err) {
        i++;
        if (thrown === NOTHING_THROWN) thrown = err;
        else reportUncaught(err);
      }
    }
    return thrown;
  }

  // `_pump` over the runtime's own registry: `pump` drains and reads the next deadline in one
  // call, leaving out the `job_finished` / `note_queued` outputs no listener carries out (the
  // core records them either way).
  // `first`: a batch a call already pumped (`submitPump`, `waitPump`, `onMessagePump`), its
  // deadline at `first[from]`, its outputs after it.
  #pumpBatched(first, from = 0) {
    this.#pumping = true;
    let at;
    // The reused batch ends at its `null`; another at its length.
    const reused = first === this.#out;
    let end = 0;
    if (reused) while (end < first.length && first[end] !== null) end++;
    else if (first !== undefined) end = first.length;
    const reusedEnd = end;
    // An output that throws does not stop the others (see `#dispatchAll`): the first error is
    // thrown once the pump is over.
    let thrown = NOTHING_THROWN;
    try {
      let batch = first;
      let i0 = from;
      for (;;) {
        if (batch === undefined) {
          batch = this.#reg.pump(this.#interest());
          i0 = 0;
          end = batch.length;
        }
        at = batch[i0];
        if (end === i0 + 1) break;
        const calls = this.#calls;
        thrown = this.#dispatchAll(batch, i0 + 1, end, thrown);
        // Only a core call can queue outputs or move the deadline (an `onOutput` handler
        // may call the core directly: then drained again, as `_pump` does).
        if (calls === this.#calls && this.#extra === null) break;
        batch = undefined;
      }
    } finally {
      this.#pumping = false;
      // (What the reused batch held is not kept alive.)
      if (reused) for (let i = 0; i <= reusedEnd; i++) first[i] = undefined;
    }
    if (this.#reg) {
      if (this.#remotes.size > 0) this.#forgetClosedRemotes();
      this.#deadline.set(at);
      if (this.#pumped !== null) this.#pumped();
    }
    if (thrown !== NOTHING_THROWN) throw thrown;
  }

  // `#pumpBatched` of a fused call that had nothing to carry out and no deadline (it
  // returned a number, not the batch): what is left of the pump.
  #pumpedIdle() {
    if (this.#remotes.size > 0) this.#forgetClosedRemotes();
    this.#deadline.clear();
    if (this.#pumped !== null) this.#pumped();
  }

  // The outputs a batched pump builds (bits: 1 `job_finished`, 2 `note_queued`).
  #interest() {
    return this.#extra !== null ? 3
      : (this.#listeners.finished.size > 0 ? 1 : 0) | (this.#listeners.note.size > 0 ? 2 : 0);
  }

  // Whether a core call may pump in the same call (the runtime's own registry, not inside a
  // pump: outputs are then carried out by the pump running).
  #fused() {
    return this.#batched && !this.#pumping;
  }

  /** Drops the socket holders (and endpoint entries) of closed remote endpoints: bounded memory. */
  #forgetClosedRemotes() {
    if (!this.#reg) return;
    for (const [id, socket] of this.#remotes) {
      // A closed endpoint's socket is already gone: only socketless ones are looked up.
      if (socket.live) continue;
      const state = this.#reg.endpoint(id)?.state;
      if (state === undefined || (typeof state === 'object' && state !== null && 'closed' in state)) {
        this.#remotes.delete(id);
        this.#endpoints.delete(id);
      }
    }
  }

  // The hot path of a worker's message (`#call` without a closure per message): the message
  // and the pump in one core call.
  #onMessage(id, data) {
    const reg = this.#reg;
    if (!reg) return;
    this.#calls++;
    if (this.#fused()) {
      let r;
      try {
        r = reg.onMessagePump(this.#now(), id, data, this.#interest(), this.#out);
      } catch (err) {
        this._pump();
        throw err;
      }
      // NaN: the batch is in #out; else there is nothing to carry out and no deadline.
      if (r === r) this.#pumpedIdle();
      else this.#pumpBatched(this.#out, 0);
      return;
    }
    try {
      reg.onMessage(this.#now(), id, data);
    } finally {
      this._pump();
    }
  }

  /**
   * @internal `Endpoint.submit`'s core call, carried out (the hot path: no closure; submit
   * and pump in one core call). Returns the job id, negated when an existing job was reused.
   */
  _submit(endpoint, payload, options) {
    const reg = this.#reg;
    if (!reg) return undefined;
    this.#calls++;
    if (this.#fused()) {
      let r;
      try {
        r = reg.submitPump(this.#now(), endpoint, payload, options, this.#interest(), this.#out);
      } catch (err) {
        this._pump();
        throw err;
      }
      // The job's id alone: nothing to carry out, no deadline; NaN: the batch is in #out.
      if (r === r) {
        this.#pumpedIdle();
        return r;
      }
      r = this.#out[0];
      this.#pumpOwn(endpoint, r, null, payload, true);
      return r;
    }
    // Inside a pump (a listener submitting) the run is posted only once the listener
    // returns: the payload is captured now, as postMessage would capture it.
    const own = !this.#pumping;
    if (!own) payload = capture(payload);
    let r;
    try {
      r = reg.submit(this.#now(), endpoint, payload, options);
    } catch (err) {
      this._pump();
      throw err;
    }
    // (Not `own`: inside a pump, `_pump` returns at once and throws nothing.)
    if (own) this.#pumpOwn(endpoint, r.job, null, payload, false);
    else this._pump();
    return r.reused ? -r.job : r.job;
  }

  /**
   * @internal `Job.send`'s core call, carried out. An input that leaves at once is not copied
   * (the core has it captured otherwise: see `sendInput`): when posting it throws
   * (DataCloneError), `#postOwn` has the core withdraw it at once, before the observers'
   * notification of its event is carried out (no event is left, its input id is free again,
   * the run goes on), and what posting threw is thrown. Inside a pump (a listener sending) it
   * is posted once the listener returns: it is captured now, as postMessage would capture it.
   */
  _send(job, value, inputId) {
    const reg = this.#reg;
    // Nothing to record after dispose() (as `#call`).
    if (!reg) return undefined;
    this.#calls++;
    const own = !this.#pumping;
    if (!own) value = capture(value);
    let id;
    try {
      id = reg.sendInput(this.#now(), job, value, inputId);
    } catch (err) {
      this._pump();
      throw err;
    }
    // Inside a pump the pump running carries out its outputs.
    if (!own) return id;
    this.#pumpOwn(-1, job, id, value, false);
    return id;
  }

  // Carries out the outputs of a `_submit` (its own run: endpoint `ep`, `job`, payload `value`)
  // or a `_send` (its own input: `job`, `inputId`, `value`), telling its own request apart
  // (#postOwn); `fused`: the batch is in #out. When posting the own request threw (it was
  // withdrawn), that error is thrown, and an error of the pump (another output: a transport's
  // post, say) is reported as an uncaught error on a microtask (as a throwing listener's is:
  // `safely`), not lost; otherwise the pump's error is the caller's.
  #pumpOwn(ep, job, inputId, value, fused) {
    this.#ownEp = ep;
    this.#ownJob = job;
    this.#ownInput = inputId;
    this.#own = value;
    try {
      if (fused) this.#pumpBatched(this.#out, 1);
      else this._pump();
    } catch (err) {
      if (!this.#ownFailed) throw err;
      reportUncaught(err);
    } finally {
      this.#ownEp = -1;
      this.#ownJob = -1;
      this.#ownInput = null;
      this.#own = undefined;
    }
    if (this.#ownFailed) {
      const err = this.#ownErr;
      this.#ownFailed = false;
      this.#ownErr = undefined;
      throw err;
    }
  }

  // Posts a `send` while `_submit` or `_send` carries out its outputs. The submit's own run, or
  // the send's own input, left at once, not copied (a queued or held one was copied at the
  // call, so it cannot fail to clone later): when posting it throws (DataCloneError), the
  // core withdraws it at once, while this call's outputs are carried out (the core allows it
  // only then; calls the transport made as it posted do not count): no record, slot, reuse
  // key or event is left of a run; nothing of an input, whose observers' notification comes
  // later in this batch (the core puts the send first) and then has nothing to deliver. The
  // error is kept for the call, which throws it. Should the core refuse the withdrawal (the
  // transport put another request on the wire as it posted), the run or input stays
  // (recorded as sent, never delivered) and the pump throws the refusal (INVALID_ARGUMENT, what
  // posting threw as its `cause`), so that the caller can tell that a job or its input is
  // left. Any other `send`
  // that throws is thrown by the pump once it is over (`#dispatchAll`).
  #postOwn(o) {
    try {
      this.#endpoints.get(o.endpoint)?._post(o.message);
    } catch (err) {
      const m = o.message;
      if (this.#ownFailed) throw err;
      const input = m.type === 'input';
      const own = input
        ? m.inputId === this.#ownInput && m.value === this.#own
        : m.type === 'run' && o.endpoint === this.#ownEp && m.payload === this.#own;
      if (!own) throw err;
      this.#calls++;
      try {
        if (input) this.#reg.withdrawUnpostedInput(this.#ownJob, m.inputId);
        else this.#reg.withdrawUnposted(this.#now(), this.#ownJob);
      } catch (refused) {
        if (refused instanceof Error && refused.cause === undefined) refused.cause = err;
        throw refused;
      }
      this.#ownFailed = true;
      this.#ownErr = err;
    }
  }

  /**
   * @internal `Job.wait`'s core call and its pump: the wait's entry (settling `resolve` /
   * `reject`) is registered before the outputs are carried out (the wait may already be
   * settled among them). Throws what the core throws, having registered nothing.
   */
  _wait(job, timeoutMs, resolve, reject, signal) {
    const reg = this.#reg;
    this.#calls++;
    // The core reads `now` only for a timeout's deadline: no clock read without one.
    const now = timeoutMs === undefined || timeoutMs === null ? 0 : this.#now();
    // Listening to the signal first: its `addEventListener` may be user code that calls into
    // this runtime, which must not run between the call below and the carrying-out of its
    // batch (#out). An abort before the wait exists is applied once it does.
    // A plain wait (no signal, no timeout) can only end `finished`, which resolves: its entry
    // is its `resolve` alone (no WaitEntry per wait); `cancelWait` is called only by a signal.
    const plain = !signal && (timeoutMs === undefined || timeoutMs === null);
    const entry = plain ? resolve : new WaitEntry(this, resolve, reject, signal, timeoutMs);
    let waitId;
    if (this.#fused()) {
      let r;
      try {
        r = reg.waitPump(now, job, timeoutMs, this.#interest(), this.#out);
      } catch (err) {
        if (!plain) entry.unlisten();
        this._pump();
        throw err;
      }
      // As in `_submit`: the wait's id alone, or NaN and the batch in #out.
      const idle = r === r;
      waitId = idle ? r : this.#out[0];
      if (!plain) entry.waitId = waitId;
      this.#waits.set(waitId, entry);
      if (idle) this.#pumpedIdle();
      else this.#pumpBatched(this.#out, 1);
    } else {
      try {
        waitId = reg.wait(now, job, timeoutMs);
      } catch (err) {
        if (!plain) entry.unlisten();
        throw err;
      }
      if (!plain) entry.waitId = waitId;
      this.#waits.set(waitId, entry);
      this._pump();
    }
    if (signal?.aborted && this.#waits.get(waitId) === entry) entry.onAbort();
  }


  #call(fn) {
    // Transport events can still arrive after dispose() (a Worker's exit): nothing to record.
    if (!this.#reg) return undefined;
    this.#calls++;
    try {
      return fn(this.#reg, this.#now());
    } finally {
      this._pump();
    }
  }

  #dispatch(o) {
    switch (o.output) {
      case 'send':
        if (o.endpoint === this.#ownEp || this.#ownInput !== null) this.#postOwn(o);
        else this.#endpoints.get(o.endpoint)?._post(o.message);
        break;
      case 'flush':
        // Requests are held for batch frames: they go out at the end of this turn.
        this.#queueFlush();
        break;
      case 'terminate':
        this.#endpoints.get(o.endpoint)?._terminate();
        break;
      case 'connect':
        this.#remotes.get(o.endpoint)?.connect(o.url);
        break;
      case 'frame':
        this.#remotes.get(o.endpoint)?.send(o.text);
        break;
      case 'close_socket':
        this.#remotes.get(o.endpoint)?.close(o.code, o.reason);
        break;
      case 'wait_settled': {
        const w = this.#waits.get(o.wait);
        if (!w) break;
        this.#waits.delete(o.wait);
        // A plain wait's entry is its `resolve` (it ends `finished` only: see `_wait`).
        if (typeof w === 'function') w(o.result ?? { outcome: o.outcome });
        else w.settle(o);
        break;
      }
      case 'observed':
        this.#subs.get(o.subscription)?.notify();
        break;
      case 'job_finished':
        if (this.#listeners.finished.size > 0) for (const l of this.#listeners.finished) safely(l, { job: o.job, outcome: o.outcome });
        break;
      case 'note_queued':
        if (this.#listeners.note.size > 0) for (const l of this.#listeners.note) safely(l, { owner: o.owner, job: o.job });
        break;
      case 'wake':
        if (this.#listeners.wake.size > 0) for (const l of this.#listeners.wake) safely(l, { owner: o.owner, job: o.job });
        break;
      default:
        this.#extra?.(o);
    }
  }

  #arm() {
    this.#deadline.set(this.#reg.pollTimeout());
  }
}

/**
 * The WebSocket of one remote endpoint: carries the core's `connect`, `frame` and
 * `close_socket` outputs and reports the socket's open, text frames (parsed with JSON.parse)
 * and close back. At most one socket is current; a replaced or closed one is never reported.
 */
class RemoteSocket {
  #rt;
  #id;
  #WS;
  #ws = null;

  constructor(rt, id, WS) {
    this.#rt = rt;
    this.#id = id;
    this.#WS = WS;
  }

  connect(url) {
    // A new connect means a new socket; an old one still open is closed unreported.
    if (this.#ws) this.close(1000, 'replaced by a new connection');
    const id = this.#id;
    const rt = this.#rt;
    // Socket events arrive on later tasks; a constructor failure is reported on one too, so
    // that the core is never re-entered from its own outputs.
    let ws;
    try {
      ws = new this.#WS(url);
    } catch (err) {
      queueMicrotask(() => rt._call((r, now) => r.onSocketClosed(now, id, `connect failed: ${err?.message ?? err}`)));
      return;
    }
    this.#ws = ws;
    let opened = false;
    const current = () => this.#ws === ws;
    const ended = (reason) => {
      if (!current()) return;
      this.#ws = null;
      rt._call((r, now) => r.onSocketClosed(now, id, reason));
    };
    ws.onopen = () => {
      if (!current()) return;
      opened = true;
      rt._call((r, now) => r.onSocketOpen(now, id));
    };
    ws.onmessage = (ev) => {
      if (!current()) return;
      const data = ev.data;
      if (typeof data !== 'string') {
        rt._call((r, now) => r.onUndecodable(now, id, 'a binary frame (the protocol is JSON text)'));
        return;
      }
      let frame;
      try {
        frame = JSON.parse(data);
      } catch (err) {
        rt._call((r, now) => r.onUndecodable(now, id, `a frame that is not JSON: ${err?.message ?? err}`));
        return;
      }
      rt._call((r, now) => r.onSocketFrame(now, id, frame));
    };
    ws.onclose = (ev) => {
      const why = `${ev?.code ?? 1006}${ev?.reason ? ` ${ev.reason}` : ''}`;
      ended(opened ? `socket closed (${why})` : `connect failed (${why})`);
    };
    ws.onerror = (ev) => {
      const detail = ev?.message ?? ev?.error?.message ?? 'socket error';
      ended(opened ? `socket error: ${detail}` : `connect failed: ${detail}`);
      if (ws.readyState < 2) {
        try {
          ws.close();
        } catch {
          // Already closing.
        }
      }
    };
  }

  /** Whether a socket is current (connecting or open). */
  get live() {
    return this.#ws !== null;
  }

  /** Sends a frame's text on the current socket; without an open one it is dropped (the core replays it on resume). */
  send(text) {
    const ws = this.#ws;
    if (ws && ws.readyState === 1) ws.send(text);
  }

  /** Closes the current socket (the core already counts it as closed: it is not reported). */
  close(code, reason) {
    const ws = this.#ws;
    this.#detach();
    if (!ws) return;
    // Browsers accept only 1000 and 3000..4999 from a client, and reasons of ≤ 123 bytes.
    const c = code === 1000 || (code >= 3000 && code <= 4999) ? code : 1000;
    let why = String(reason ?? '');
    while (new TextEncoder().encode(why).length > 123) why = why.slice(0, -1);
    try {
      ws.close(c, why);
    } catch {
      try {
        ws.close();
      } catch {
        // Already closed.
      }
    }
  }

  #detach() {
    const ws = this.#ws;
    this.#ws = null;
    if (ws) {
      // Nothing of a replaced socket is reported any more.
      ws.onopen = ws.onmessage = ws.onerror = null;
      ws.onclose = null;
    }
  }
}

// A value posted later than the call that passed it (one made inside a pump): captured now,
// as postMessage would capture it (a value it cannot copy throws DataCloneError now).
function capture(v) {
  const t = typeof v;
  return (t === 'object' && v !== null) || t === 'function' || t === 'symbol' ? structuredClone(v) : v;
}

/** Resolves after the current macrotask (setImmediate in Node: no 1 ms timer clamp). */
function macrotask() {
  return new Promise((resolve) => (typeof setImmediate === 'function' ? setImmediate(resolve) : setTimeout(resolve, 0)));
}

function safely(listener, arg) {
  try {
    listener(arg);
  } catch (err) {
    reportUncaught(err);
  }
}

// An error no caller can be given: thrown on a microtask, an uncaught error of the host
// (`uncaughtException` in Node, the `error` event in a browser).
function reportUncaught(err) {
  queueMicrotask(() => {
    throw err;
  });
}

// `#dispatchAll`'s "nothing was thrown" (`undefined` can be thrown).
const NOTHING_THROWN = Symbol('nothing thrown');

/** One transport to an execution host. */
export class Endpoint {
  #rt;
  #transport;
  #terminated = false;

  constructor(rt, id, transport) {
    this.#rt = rt;
    this.id = id;
    this.#transport = transport;
  }

  /**
   * Submits a job: `{owner, origin: {thread, turn, toolCall}, reuseKey, note, wake}`. A payload
   * the transport cannot copy (a function, a Proxy) throws DataCloneError and leaves no job
   * (unless the transport put another run on the wire as it posted: then the job stays, never
   * delivered, and the core's INVALID_ARGUMENT refusal is thrown, the DataCloneError its cause).
   * On a remote endpoint a payload that is not JSON data throws INVALID_JSON and leaves no
   * job (the rule: `jsonData` in wasm/src/js.rs; see `Runtime.openRemote`).
   */
  submit(payload, options) {
    // No options cross as `undefined`: the core reads each field of it without a property lookup.
    const r = this.#rt._submit(this.id, payload, options);
    // undefined only after dispose(): the registry is gone.
    if (r === undefined) throw new WeftError(DISPOSED, 'the runtime was disposed');
    return r < 0 ? new Job(this.#rt, -r, true) : new Job(this.#rt, r, false);
  }

  /** The endpoint's state, capabilities and log. */
  get info() {
    return this.#rt.registry.endpoint(this.id);
  }

  /** @internal The runtime it belongs to: ids are per runtime, so an agent refuses another's. */
  get _runtime() {
    return this.#rt;
  }

  /** Terminates the execution host; its running jobs become `lost`. */
  terminate(reason = 'terminated by caller') {
    this.#rt._call((r, now) => r.terminateEndpoint(now, this.id, reason));
  }

  /** @internal */
  _post(message) {
    if (!this.#terminated) this.#transport.post(message);
  }

  /** @internal */
  _terminate() {
    if (this.#terminated) return;
    this.#terminated = true;
    this.#transport.terminate();
  }
}

// `Job.wait`'s promise executor, shared: it hands the settlers over through these (the
// executor runs synchronously inside the Promise constructor, which calls nothing else).
let takenResolve = null;
let takenReject = null;
function takeSettlers(resolve, reject) {
  takenResolve = resolve;
  takenReject = reject;
}

// `Job.wait`'s options when it is given none.
const NO_OPTIONS = Object.freeze({});

/** A pending `Job.wait`: settled by the core's `wait_settled` output (or by its abort signal's cancelWait). */
class WaitEntry {
  constructor(rt, resolve, reject, signal, timeoutMs) {
    this.resolve = resolve;
    this.reject = reject;
    this.signal = signal;
    this.timeoutMs = timeoutMs;
    /** Set once the registry gave the wait its id (an abort before that is applied then). */
    this.waitId = null;
    this.onAbort = null;
    if (signal) {
      this.onAbort = () => {
        if (this.waitId === null) return;
        try {
          rt._call((r) => r.cancelWait(this.waitId));
        } catch {
          // Already settled.
        }
      };
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
  }

  /** Stops listening (the wait was refused). */
  unlisten() {
    if (this.onAbort !== null) this.signal.removeEventListener('abort', this.onAbort);
  }

  settle(o) {
    const signal = this.signal;
    if (this.onAbort !== null) signal.removeEventListener('abort', this.onAbort);
    if (o.end === 'finished') this.resolve(o.result ?? { outcome: o.outcome });
    else if (o.end === 'timed_out')
      this.reject(new WeftError(WAIT_TIMED_OUT, `wait timed out after ${this.timeoutMs} ms; the job continues`));
    else this.reject(new WeftError(WAIT_CANCELLED, 'the wait was cancelled; the job continues', { cause: signal?.reason }));
  }
}

/** A handle on one execution. */
export class Job {
  #rt;

  constructor(rt, id, reused) {
    this.#rt = rt;
    this.id = id;
    this.reused = reused;
  }

  /** `{job, owner, origin, endpoint, state, wireId, capabilities, cancelRequested, outcome, events}`. */
  get info() {
    return this.#rt.registry.job(this.id);
  }

  /** `queued`, `running`, `succeeded`, `failed`, `cancelled` or `lost`. */
  get state() {
    return this.info?.state;
  }

  /** The terminal outcome, or null. */
  get outcome() {
    return this.info?.outcome ?? null;
  }

  /** The journal from sequence number `from` (default 1). */
  journal(from) {
    return this.#rt.registry.journal(this.id, from);
  }

  /** Releases this finished job now (see `Runtime.forget`); false while it still runs or is followed. */
  forget() {
    return this.#rt.forget(this.id);
  }

  /** Asks the execution to stop. Returns `requested`, `cancelled_before_start`, ... */
  cancel(reason = 'cancelled by caller') {
    return this.#rt._call((r, now) => r.cancel(now, this.id, reason));
  }

  /**
   * Sends structured input to a running job that accepts it; returns the input id. A value the
   * transport cannot copy (a function, a Proxy) throws its DataCloneError and changes nothing:
   * no `input_delivered` event, nothing sent, the input id free to be used again; the run goes
   * on. (Should the transport have put something else on the wire as it posted this input,
   * the input cannot be withdrawn: it stays, recorded as delivered, and a `WeftError`
   * `INVALID_ARGUMENT` is thrown, the `DataCloneError` its `cause`.) On a remote endpoint a
   * value that is not JSON data throws `INVALID_JSON` and changes nothing in the same way (the
   * core refuses it before recording: the rule is `jsonData` in wasm/src/js.rs).
   */
  send(value, { inputId } = {}) {
    return this.#rt._send(this.id, value, inputId);
  }

  /**
   * Resolves with the terminal outcome. Aborting `signal` or reaching `timeoutMs` rejects
   * (codes WAIT_CANCELLED / WAIT_TIMED_OUT) and leaves the job running.
   */
  wait(options) {
    // No options object made per call when there are none (as the `= {}` default would).
    const { signal, timeoutMs } = options === undefined ? NO_OPTIONS : options;
    const rt = this.#rt;
    if (signal?.aborted) {
      return Promise.reject(new WeftError(WAIT_CANCELLED, 'the wait was cancelled', { cause: signal.reason }));
    }
    // The promise's settlers are taken by a shared executor (no closure per wait), then the
    // wait is registered as it was inside one: a refusal rejects the promise.
    const promise = new Promise(takeSettlers);
    const resolve = takenResolve;
    const reject = takenReject;
    takenResolve = takenReject = null;
    try {
      rt._wait(this.id, timeoutMs, resolve, reject, signal);
    } catch (err) {
      reject(err);
    }
    return promise;
  }

  /**
   * Calls `listener(delivery)` for each journal event (and `{type:"missed", from, to}` when the
   * bounded queue overflowed). `from`: 1 replays history (default), `"next"` only new events.
   * Returns an unsubscribe function (which stops observation only).
   */
  observe(listener, { from = 1, capacity = 1024 } = {}) {
    const rt = this.#rt;
    const sub = rt._raw((r) => r.observe(this.id, from === 'next' ? undefined : from, capacity));
    rt._registerSub(sub, {
      notify: () => {
        for (const d of rt.registry.takeDeliveries(sub)) safely(listener, d);
      },
    });
    rt._pump();
    return () => rt._dropSub(sub);
  }

  /**
   * Async iteration over journal events; ends after the `outcome` event (or once the job has
   * ended and everything was delivered or reported missed). A consumer slower
   * than `capacity` events receives `{type:"missed"}` records for what it skipped.
   */
  events({ from = 1, capacity = 1024 } = {}) {
    const rt = this.#rt;
    const sub = rt._raw((r) => r.observe(this.id, from === 'next' ? undefined : from, capacity));
    let wake = null;
    let buffered = [];
    let done = false;
    rt._registerSub(sub, {
      notify: () => {
        const w = wake;
        wake = null;
        w?.();
      },
    });
    rt._pump();
    const isFinished = () => {
      const st = rt.registry.job(this.id)?.state;
      return st === undefined || !['queued', 'running'].includes(st);
    };
    const finish = () => {
      if (done) return { value: undefined, done: true };
      done = true;
      rt._dropSub(sub);
      return { value: undefined, done: true };
    };
    return {
      [Symbol.asyncIterator]() {
        return this;
      },
      async next() {
        for (;;) {
          if (done) return { value: undefined, done: true };
          if (buffered.length === 0) buffered = Array.from(rt.registry.takeDeliveries(sub));
          if (buffered.length > 0) {
            const value = buffered.shift();
            if (value.type === 'outcome') finish();
            return { value, done: false };
          }
          // Everything up to the outcome is delivered or reported missed once the job ended.
          if (isFinished()) return finish();
          await new Promise((resolve) => {
            wake = resolve;
          });
        }
      },
      async return() {
        return finish();
      },
    };
  }
}
