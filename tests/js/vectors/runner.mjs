// The conformance vectors (tests/vectors/{jobs,tools,ops}.json) through the PUBLIC JS API of
// the weft package.
//
// The core's own runner (core/src/conformance.rs and the per-suite `vectors.rs`) drives the
// Rust types; this file is its JS port, driving what a user of the package calls instead, so
// that the bindings (wasm/src) and the JS hosts (wasm/js) meet the vectors too. It imports no
// weft module itself: the caller passes the package (`import * as weft from 'weft'` in Node,
// `import('/wasm/pkg/index.js')` in Chromium), so the same file runs in both. Matching
// (`subset`, the step checks, the step loop) follows conformance.rs exactly.
//
// How a vector maps onto the public API:
// - time: `createRuntime({ now })` / `createApp({ now })` read a simulated clock; the hosts'
//   deadline timers are `setTimeout`s on a fake timer queue installed for the duration of a
//   suite run (the run awaits microtasks only, so no real timer runs while the fake is
//   installed). Before a step, every timer due at or before its `at` fires with the clock at
//   its own deadline, as the Rust driver fires `handle_timeout(deadline)`.
// - transport: `runtime.openEndpoint(connect)` with a fake transport; `message` /
//   `endpoint_closed` steps call the handlers it was given, and what the runtime posts or
//   terminates is recorded.
// - outputs: the registry's outputs are not public; the runner rebuilds each one from the
//   public effect the runtime gives it, in the order the runtime carries them out: `send` and
//   `terminate` (the fake transport), `job_finished`, `note_queued`, `wake` (`runtime.on`),
//   `wait_settled` (a `Job.wait` settles; its position is the moment the runtime releases the
//   wait's abort signal, which it does synchronously while dispatching the output; its `end`
//   and `outcome` come from how the Promise settles). The agent's outputs are public
//   (`agent.on('output')`); the App's are rebuilt like the registry's (see the ops suite).
// - ids the package never issued (a job or endpoint number with no handle) are answered as the
//   Rust driver's own `inspect` answers a missing job: UNKNOWN_JOB / UNKNOWN_ENDPOINT.
// - wait and subscription numbers are not returned by the public API (it returns a Promise and
//   an unsubscribe function); the runner numbers them in call order from 1, as the registry does.
// - standing-desire vectors (`"kind": "claims"`) run through `createClaims`: its `acquire` and
//   `release` record the outputs and return Promises that the steps settle.
//
// What cannot be expressed is listed, with the reason, in SKIPS (whole vectors), STEP_SKIPS
// (single steps) and UNSEEN_RESULTS (a result the API does not return); what fails through JS
// although the core passes it is in KNOWN_DISAGREEMENTS. EXPECTED pins the counts.

const STAGED_ACROSS_TIME =
  'the vector keeps a write staged while time passes (accepted at one `at`, flushed at a later one); the JS App ' +
  'ends every tick at the microtask checkpoint, so time never passes with a write staged';
const ONE_REPORT =
  'a claim\'s acquisition is reported by how the Promise `acquire` returned settles: the Claims report each ' +
  'attempt they started once, so a report for an attempt no longer in flight or for a claim that does not ' +
  'exist cannot be made through the public API';

/** Vectors the public API cannot express, by suite and name, with the reason. */
export const SKIPS = {
  tools: {},
  ops: {
    'coherent result selection: a write accepted while the result is being computed is not mixed into the settled snapshot':
      STAGED_ACROSS_TIME,
    'graph hot replacement under onSupersede follow, then a rerun of an awaited cell after it was processed: the operation settles only when every awaited cell is ready in one snapshot (recorded property-test case)':
      STAGED_ACROSS_TIME,
    'a finished stream commits its last value once: finish makes the last partial the result, and dependents computed from it become final without recomputing':
      'a host calculation finishes a stream (`finish`) only by ending the async iterable its compute returned, and ' +
      'whether compute returns a Promise (for `done`) or an iterable is fixed when it is called, before the ' +
      'vector says which it will be',
  },
  jobs: {
    'a slow observer is told which sequence numbers it missed; unsubscribe stops observation only':
      'no public observer holds a bounded queue until an explicit take: Job.observe takes the deliveries at every ' +
      '`observed` output (so the queue never overflows and `missed` cannot occur), and Job.events hides the ' +
      '`observed` output and takes on next(); the vector needs both `observed` outputs and an explicit `take`',
  },
};

/**
 * Ops whose result the public API does not return, by suite, with the reason: such a step is
 * applied and its outputs and errors are checked, its `expect` is not (counted as
 * `unseenResults`).
 */
export const UNSEEN_RESULTS = {
  ops: {
    done: {
      fields: null,
      reason:
        'a host calculation ends by resolving the Promise its compute returned; the App reports the value to the ' +
        'core itself and keeps the report (`applied`, `late`, ...) to itself',
    },
    retained: {
      fields: ['pruned'],
      reason: '`App.retained()` returns what is kept (`{calcs, writes, operations}`), not the pruned counts',
    },
  },
};

/**
 * Single steps the public API cannot express, by suite, vector name and step index, with the
 * reason. The vector's other steps and its final state still run.
 */
const ONE_SETTLEMENT =
  'a call settles through its handler: the Agent starts a handler only for a started call and settles it once ' +
  'with how its Promise ends, so a report for a call that never started, a second report or a report for an ' +
  'invocation that does not exist cannot be made through the public API (the session refusal this step expects ' +
  'is swallowed by the host, never surfaced)';

export const STEP_SKIPS = {
  jobs: {},
  ops: {
    'standing desire: a desire that changes during acquisition makes the late resource released, never adopted; the newest desire is applied next': {
      10: ONE_REPORT,
      11: ONE_REPORT,
    },
  },
  tools: {
    'unknown tools and invalid arguments are refused before anything runs; refused calls separate no groups': {
      3: ONE_SETTLEMENT,
    },
    'interrupting mid-group: acknowledged aborts and unsettled calls are uncertain; a late result arrives as mail': {
      11: ONE_SETTLEMENT,
    },
    'stale, duplicate and undeclared reports are refused and change nothing': {
      6:
        'the Agent has no public form of `on_call_job` (a running call reporting a job it did not submit through ' +
        'the session): a handler can only `ctx.submitJob`, which submits and hands over in one',
      8: ONE_SETTLEMENT,
      9: ONE_SETTLEMENT,
    },
  },
};

/**
 * Vectors that fail through the JS API although the core passes them: real disagreements
 * between the package and the vectors, by suite and name, with a precise description.
 */
export const KNOWN_DISAGREEMENTS = {
  jobs: {},
  tools: {},
  ops: {},
};

/**
 * What each suite must give through the JS API, in Node and in Chromium: vectors in the file,
 * passed, skipped (SKIPS), known disagreements, steps skipped (STEP_SKIPS) and expectations
 * not checked (UNSEEN_RESULTS). The tests assert these exactly, so a vector dropped, renamed or
 * newly failing is noticed.
 */
export const EXPECTED = {
  jobs: { total: 30, passed: 29, skipped: 1, disagrees: 0, skippedSteps: 0, unseenResults: 0 },
  tools: { total: 23, passed: 23, skipped: 0, disagrees: 0, skippedSteps: 5, unseenResults: 0 },
  ops: { total: 36, passed: 33, skipped: 3, disagrees: 0, skippedSteps: 2, unseenResults: 8 },
};

/** The counts of a `runSuite` report, in the shape of EXPECTED. */
export function counts({ results, skippedSteps, unseenResults }) {
  const n = (status) => results.filter((r) => r.status === status).length;
  return { total: results.length, passed: n('passed'), skipped: n('skipped'), disagrees: n('disagrees'), skippedSteps, unseenResults };
}

// ----- matching: a port of conformance::subset and conformance::check_step -----------------

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const show = (v) => (v === undefined ? 'undefined' : JSON.stringify(v));

/**
 * Compares `actual` against the subset `expected` (conformance::subset): objects need only the
 * keys they name (a null expectation also matches a missing key), arrays must have the same
 * length, a string stands for an object whose `type` (or else `output`) is that string, numbers
 * compare by value. Returns the first mismatch, or null.
 */
export function subset(expected, actual, path) {
  if (typeof expected === 'string' && isObject(actual)) {
    const t = 'type' in actual ? actual.type : actual.output;
    return t === expected ? null : `${path}: expected \`${expected}\`, got ${show(actual)}`;
  }
  if (isObject(expected) && isObject(actual)) {
    for (const [k, ev] of Object.entries(expected)) {
      const p = `${path}.${k}`;
      if (Object.hasOwn(actual, k) && actual[k] !== undefined) {
        const e = subset(ev, actual[k], p);
        if (e) return e;
      } else if (ev !== null) {
        return `${p}: missing (expected ${show(ev)})`;
      }
    }
    return null;
  }
  if (Array.isArray(expected) && Array.isArray(actual)) {
    if (expected.length !== actual.length) {
      return `${path}: expected ${expected.length} items, got ${actual.length}: ${show(actual)}`;
    }
    for (let i = 0; i < expected.length; i++) {
      const e = subset(expected[i], actual[i], `${path}[${i}]`);
      if (e) return e;
    }
    return null;
  }
  if (typeof expected === 'number' && typeof actual === 'number' && expected === actual) return null;
  if (deepEqual(expected, actual)) return null;
  return `${path}: expected ${show(expected)}, got ${show(actual)}`;
}

function deepEqual(a, b) {
  if (a === b) return true;
  // serde_json has no undefined: a missing value is null.
  if ((a === null || a === undefined) && (b === null || b === undefined)) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a).filter((k) => a[k] !== undefined);
    const kb = Object.keys(b).filter((k) => b[k] !== undefined);
    return ka.length === kb.length && ka.every((k) => deepEqual(a[k], b[k]));
  }
  return false;
}

/** conformance::check_step: `expectError`, `expect` (the call's result) and `outputs`. */
function checkStep(ctx, step, result, outputs, failures) {
  const want = step.expectError;
  if (result.error) {
    const { code, message } = result.error;
    if (want === undefined) failures.push(`${ctx}: unexpected error ${code}: ${message}`);
    else if (want !== code) failures.push(`${ctx}: expected error ${show(want)}, got ${code}: ${message}`);
  } else if (want !== undefined) {
    failures.push(`${ctx}: expected error ${show(want)}, call succeeded: ${show(result.value ?? null)}`);
  } else if ('expect' in step) {
    const e = subset(step.expect, result.value ?? null, 'result');
    if (e) failures.push(`${ctx}: ${e}`);
  }
  if ('outputs' in step) {
    const e = subset(step.outputs, outputs, 'outputs');
    if (e) failures.push(`${ctx}: ${e}`);
  }
}

/** conformance::each_step: `at` defaults to the previous step's; time never goes back. */
async function eachStep(v, failures, each) {
  let lastAt = 0;
  const steps = v.steps ?? [];
  for (let index = 0; index < steps.length; index++) {
    const json = steps[index];
    const at = Number.isInteger(json.at) && json.at >= 0 ? json.at : lastAt;
    if (at < lastAt) {
      failures.push(`step ${index}: time goes backwards (${at} < ${lastAt})`);
      break;
    }
    lastAt = at;
    const op = typeof json.op === 'string' ? json.op : '';
    // A step that needs no microtask runs synchronously: awaiting it would end an App's tick.
    const r = each({ index, at, op, json, ctx: `step ${index} (${op})` }, failures);
    if (r && typeof r.then === 'function') await r;
  }
}

function checkFinal(v, failures, state) {
  if (v.expect !== undefined && v.expect !== null) {
    const e = subset(v.expect, state(), 'final');
    if (e) failures.push(e);
  }
}

// ----- simulated time ---------------------------------------------------------------------

/** A simulated clock with the timer queue the runtime's `setTimeout` calls land in. */
class FakeTime {
  now = 0;
  #timers = [];
  #seq = 0;

  setTimeout = (fn, ms = 0, ...args) => {
    const t = { at: this.now + Math.max(0, Number(ms) || 0), seq: this.#seq++, fn: () => fn(...args) };
    this.#timers.push(t);
    return t;
  };

  clearTimeout = (t) => {
    const i = this.#timers.indexOf(t);
    if (i >= 0) this.#timers.splice(i, 1);
  };

  /**
   * Fires every timer due at or before `at`, each with the clock at its deadline; then the
   * clock reads `at`. Returns a Promise only when a timer fired (its reactions ran).
   */
  advance(at) {
    if (!this.#timers.some((t) => t.at <= at)) {
      this.now = Math.max(this.now, at);
      return undefined;
    }
    return this.#fire(at);
  }

  async #fire(at) {
    for (;;) {
      let next = null;
      for (const t of this.#timers) if (t.at <= at && (!next || t.at < next.at || (t.at === next.at && t.seq < next.seq))) next = t;
      if (!next) break;
      this.#timers.splice(this.#timers.indexOf(next), 1);
      this.now = Math.max(this.now, next.at);
      next.fn();
      await settle();
    }
    this.now = Math.max(this.now, at);
  }

  /** Back to time 0 with no timers (between vectors). */
  reset() {
    this.now = 0;
    this.#timers = [];
  }

  /** Installs the fake timers globally; returns the function that restores the real ones. */
  install() {
    const real = { setTimeout: globalThis.setTimeout, clearTimeout: globalThis.clearTimeout };
    globalThis.setTimeout = this.setTimeout;
    globalThis.clearTimeout = this.clearTimeout;
    return () => {
      globalThis.setTimeout = real.setTimeout;
      globalThis.clearTimeout = real.clearTimeout;
    };
  }
}

/** Lets Promise reactions run (microtasks only: no real timer runs while fakes are installed). */
async function settle() {
  for (let i = 0; i < 8; i++) await Promise.resolve();
}

// ----- the jobs suite ------------------------------------------------------------------------

const errorOf = (err) => ({ code: err?.code ?? 'NOT_A_WEFT_ERROR', message: String(err?.message ?? err) });

/** One runtime, its fake transports and the outputs rebuilt from the public effects. */
class JobsHarness {
  constructor(weft, time, rt = weft.createRuntime({ now: () => time.now })) {
    this.weft = weft;
    this.time = time;
    this.rt = rt;
    this.outputs = [];
    this.endpoints = new Map(); // id -> { ep, handlers }
    this.waits = 0;
    this.liveWaits = new Map(); // number -> { ac, record }
    this.rt.on('finished', (e) => this.outputs.push({ output: 'job_finished', job: e.job, outcome: e.outcome }));
    this.rt.on('note', (e) => this.outputs.push({ output: 'note_queued', owner: e.owner, job: e.job }));
    this.rt.on('wake', (e) => this.outputs.push({ output: 'wake', owner: e.owner, job: e.job }));
  }

  /** The outputs since the last call. */
  drain() {
    const o = this.outputs;
    this.outputs = [];
    return o;
  }

  endpoint(s) {
    const id = s.endpoint;
    const e = this.endpoints.get(id);
    if (!e) throw Object.assign(new Error(`unknown endpoint ${id}`), { code: 'UNKNOWN_ENDPOINT' });
    return e;
  }

  job(s) {
    const j = this.rt.job(s.job);
    if (!j) throw Object.assign(new Error(`unknown job ${s.job}`), { code: 'UNKNOWN_JOB' });
    return j;
  }

  apply(op, s) {
    switch (op) {
      case 'open_endpoint': {
        let hello;
        if (s.hello === 'skip') hello = 'skip';
        else if (isObject(s.hello) && 'declared' in s.hello) hello = { declared: s.hello.declared };
        else hello = 'await';
        const entry = { ep: null, handlers: null, id: null };
        const ep = this.rt.openEndpoint(
          (h) => {
            entry.handlers = h;
            return {
              post: (message) => this.outputs.push({ output: 'send', endpoint: entry.id, message: structuredClone(message) }),
              terminate: () => this.outputs.push({ output: 'terminate', endpoint: entry.id }),
            };
          },
          {
            owner: s.owner ?? 'app',
            label: s.label ?? 'worker',
            hello,
            helloTimeoutMs: hello === 'await' ? (s.helloTimeoutMs ?? 1000) : undefined,
            quietMs: s.quietMs,
            maxConcurrent: s.maxConcurrent,
            maxMessageBytes: s.maxMessageBytes,
            batchSends: s.batchSends,
          },
        );
        entry.ep = ep;
        entry.id = ep.id;
        this.endpoints.set(ep.id, entry);
        return { endpoint: ep.id };
      }
      case 'submit': {
        const { ep } = this.endpoint(s);
        const options = { owner: s.owner ?? 'agent', wake: s.wake ?? false, note: s.note ?? true };
        if ('origin' in s) options.origin = s.origin;
        if (typeof s.reuseKey === 'string') options.reuseKey = s.reuseKey;
        const job = ep.submit(s.payload ?? null, options);
        return { job: job.id, reused: job.reused };
      }
      case 'message':
        this.endpoint(s).handlers.message(structuredClone(s.msg));
        return null;
      case 'endpoint_closed':
        this.endpoint(s).handlers.closed(s.reason ?? 'closed');
        return null;
      case 'terminate_endpoint':
        this.endpoint(s).ep.terminate(s.reason ?? 'terminated');
        return null;
      case 'cancel':
        return this.job(s).cancel(s.reason ?? 'test');
      case 'input': {
        const options = typeof s.inputId === 'string' ? { inputId: s.inputId } : {};
        return { inputId: this.job(s).send(s.value ?? null, options) };
      }
      case 'wait':
        return { wait: this.wait(s) };
      case 'cancel_wait': {
        // Aborting the wait's signal is the public cancel. Aborting a wait that already ended
        // does nothing (an AbortSignal never throws), so a number with no live wait is
        // answered as the registry answers it.
        const w = this.liveWaits.get(s.wait);
        if (!w || w.record.end !== undefined) throw Object.assign(new Error(`unknown wait ${s.wait}`), { code: 'UNKNOWN_WAIT' });
        this.liveWaits.delete(s.wait);
        w.ac.abort();
        return null;
      }
      case 'read_mailbox':
        return this.rt.readMailbox(s.owner ?? 'agent');
      case 'close_owner':
        return this.rt.closeOwner(s.owner ?? 'agent');
      case 'advance':
        return null;
      case 'inspect':
        return this.job(s).info;
      default:
        throw Object.assign(new Error(`unknown op \`${op}\``), { code: 'VECTOR' });
    }
  }

  /** Job.wait, with the settlement recorded where the runtime dispatches it. */
  wait(s) {
    const job = this.job(s);
    const id = ++this.waits;
    const ac = new AbortController();
    const record = { output: 'wait_settled', wait: id, job: job.id };
    const signal = ac.signal;
    const remove = signal.removeEventListener.bind(signal);
    // The runtime releases the signal first thing when the registry settles the wait.
    signal.removeEventListener = (...args) => {
      this.outputs.push(record);
      return remove(...args);
    };
    this.liveWaits.set(id, { ac, record });
    const options = { signal };
    if (Number.isInteger(s.timeoutMs)) options.timeoutMs = s.timeoutMs;
    job.wait(options).then(
      (r) => Object.assign(record, { end: 'finished', outcome: r.outcome, result: r }),
      (err) =>
        Object.assign(record, {
          end: err?.code === 'WAIT_TIMED_OUT' ? 'timed_out' : err?.code === 'WAIT_CANCELLED' ? 'cancelled' : `error ${err?.code}`,
        }),
    );
    return id;
  }

  /** conformance::jobs_state through the public API. */
  state() {
    const jobs = {};
    const owners = new Set();
    for (const info of this.rt.jobs()) {
      jobs[String(info.job)] = { ...info, journal: this.rt.job(info.job).journal() };
      owners.add(info.owner);
    }
    const endpoints = {};
    for (const [id, { ep }] of this.endpoints) {
      const info = ep.info;
      if (info !== undefined) endpoints[String(id)] = info;
    }
    const mailboxes = {};
    // The final state is read last: taking the notes here changes nothing the vector sees.
    for (const owner of owners) mailboxes[owner] = this.rt.readMailbox(owner);
    return { jobs, endpoints, mailboxes };
  }
}

async function runJobsVector(weft, time, v) {
  const failures = [];
  const h = new JobsHarness(weft, time);
  // A step with `sameTurn` leaves the host's turn open (conformance.rs): it and the next step
  // run in one synchronous stretch, with no microtask between them (the runtime flushes the
  // requests held for batch frames in a microtask).
  let openTurn = null;
  const apply = (step) => {
    try {
      return { value: h.apply(step.op, step.json) };
    } catch (err) {
      return { error: errorOf(err) };
    }
  };
  try {
    await eachStep(v, failures, (step) => {
      if (openTurn !== null && openTurn !== step.at) failures.push(`${step.ctx}: a host turn does not span time`);
      const run = () => {
        const result = apply(step);
        if (step.json.sameTurn === true) {
          openTurn = step.at;
          checkStep(step.ctx, step.json, result, h.drain(), failures);
          return undefined;
        }
        openTurn = null;
        return settle().then(() => checkStep(step.ctx, step.json, result, h.drain(), failures));
      };
      const advanced = time.advance(step.at);
      return advanced === undefined ? run() : advanced.then(run);
    });
    checkFinal(v, failures, () => h.state());
  } finally {
    h.rt.dispose();
  }
  return failures;
}


// ----- the tools suite: one Agent (createAgent) over one runtime -----------------------------
//
// Session outputs are public (`agent.on('output')`); registry outputs are rebuilt as in the
// jobs suite and compared with `jobOutputs`. The model is a function whose answer the runner
// holds: `model` answers the pending step with `agent.respond(step, response)`, `model_error`
// rejects the held answer. A tool handler returns a Promise the runner holds per invocation:
// `settle` resolves it (`value`) or rejects it (`error` + `code`, or `aborted`), and
// `submit_job` calls the handler context's `submitJob`. `state` is `agent.state` with the mail
// items of `agent.mailbox()` (the public state carries their count).

class ToolsHarness {
  constructor(weft, time, v) {
    this.jobs = new JobsHarness(weft, time);
    this.models = new Map(); // step -> { reject }
    this.calls = new Map(); // invocation -> { resolve, reject, ctx, signal }
    this.script = [...(v.script ?? [])];
    this.outputs = [];
    const cfg = v.session ?? {};
    const model = (request, { signal }) =>
      new Promise((_resolve, reject) => {
        this.models.set(request.step, { reject, signal });
      });
    this.agent = weft.createAgent(this.jobs.rt, { id: cfg.id ?? 'agent', graceMs: cfg.graceMs, maxSteps: cfg.maxSteps, model });
    this.agent.on('output', (o) => this.outputs.push(o));
  }

  drain() {
    const o = this.outputs;
    this.outputs = [];
    return o;
  }

  handler = (_args, ctx) =>
    new Promise((resolve, reject) => {
      this.calls.set(ctx.invocation, { resolve, reject, ctx });
    });

  pendingStep() {
    const r = this.agent.pendingRequest();
    if (!r) throw Object.assign(new Error('no model request is pending'), { code: 'VECTOR' });
    return r.step;
  }

  call(s) {
    const c = this.calls.get(s.invocation);
    if (!c) throw Object.assign(new Error(`no handler call ${s.invocation} is running`), { code: 'VECTOR' });
    return c;
  }

  apply(op, s) {
    const a = this.agent;
    switch (op) {
      case 'register':
        return { handler: a.registerTool(s.tool, this.handler) };
      case 'unregister':
        a.unregisterTool(s.name ?? '');
        return null;
      case 'task':
        return { task: a.submitTask(s.input ?? null) };
      case 'cancel_task':
        a.cancelTask(s.task);
        return null;
      case 'steer':
        a.steer(s.input ?? null);
        return null;
      case 'wake':
        a.wake(s.reason ?? 'app');
        return null;
      case 'post':
        return { seq: a.postObservation(s.source ?? 'observation', s.value ?? null) };
      case 'standing':
        a.setStanding(s.key ?? 'desire', s.value ?? null);
        return null;
      case 'model': {
        let response = s.response;
        if (response === undefined) {
          if (this.script.length === 0) throw Object.assign(new Error('the script is exhausted'), { code: 'VECTOR' });
          response = this.script.shift();
        }
        a.respond(Number.isInteger(s.step) ? s.step : this.pendingStep(), response);
        return null;
      }
      case 'model_error': {
        const step = this.pendingStep();
        const m = this.models.get(step);
        if (!m) throw Object.assign(new Error(`the model was not asked step ${step}`), { code: 'VECTOR' });
        m.reject(new Error(s.message ?? 'model failed'));
        return null;
      }
      case 'settle': {
        const c = this.call(s);
        this.calls.delete(s.invocation);
        if (s.aborted === true) c.reject(new Error('aborted'));
        else if (typeof s.error === 'string') c.reject(Object.assign(new Error(s.error), typeof s.code === 'string' ? { code: s.code } : {}));
        else c.resolve(s.value ?? null);
        return null;
      }
      case 'submit_job': {
        const c = this.call(s);
        const { ep } = this.jobs.endpoint(s);
        const job = c.ctx.submitJob(ep, s.payload ?? null, { wake: s.wake ?? false, note: s.note ?? true });
        return { job: job.id };
      }
      case 'interrupt':
        return a.interrupt(s.reason ?? 'user');
      case 'state':
        return this.state();
      case 'transcript':
        return a.transcript(s.from ?? 0);
      case 'model_request': {
        const r = a.pendingRequest();
        if (!r) throw Object.assign(new Error('no model request is pending'), { code: 'VECTOR' });
        // The step's new input: everything after the model's last answer in this turn.
        let last = 0;
        for (let i = r.messages.length - 1; i >= 0; i--) {
          const role = r.messages[i].role;
          if (role === 'turn_start') {
            last = i;
            break;
          }
          if (role === 'assistant') {
            last = i + 1;
            break;
          }
        }
        return {
          turn: r.turn,
          step: r.step,
          toolsVersion: r.toolsVersion,
          tools: r.tools.map((t) => t.name),
          input: r.messages.slice(last),
        };
      }
      default:
        return this.jobs.apply(op, s);
    }
  }

  state() {
    return { ...this.agent.state, mailbox: this.agent.mailbox() };
  }
}

async function runToolsVector(weft, time, v, stepSkips, tally) {
  const failures = [];
  const h = new ToolsHarness(weft, time, v);
  try {
    await eachStep(v, failures, async (step) => {
      await time.advance(step.at);
      if (step.index in stepSkips) {
        // What the timers emitted belongs to the skipped step.
        tally.skippedSteps++;
        h.drain();
        h.jobs.drain();
        return;
      }
      let result;
      try {
        result = { value: h.apply(step.op, step.json) };
      } catch (err) {
        result = { error: errorOf(err) };
      }
      await settle();
      checkStep(step.ctx, step.json, result, h.drain(), failures);
      const jobOutputs = h.jobs.drain();
      if ('jobOutputs' in step.json) {
        const e = subset(step.json.jobOutputs, jobOutputs, 'jobOutputs');
        if (e) failures.push(`${step.ctx}: ${e}`);
      }
    });
    checkFinal(v, failures, () => ({ session: h.state(), transcript: h.agent.transcript(0), jobs: h.jobs.state() }));
  } finally {
    h.agent.dispose();
    h.jobs.rt.dispose();
  }
  return failures;
}


// ----- the ops suite: one App (createApp) with host cells the runner computes --------------
//
// The graph's host cells get a compute function that records the `compute` output (cell,
// calc, inputs, previous) and returns a Promise the runner holds per calculation: `done`
// resolves it, `fail` rejects it; `partial` and `progress` call the context's `partial` and
// `progress`. The `abort` output is the abort event of the calculation's signal; `op_finished`
// is an operation's `wait()` settling, positioned where the App releases its abort signal
// (synchronously while it dispatches the output). Worker cells run on fake-transport
// endpoints, opened on `app.runtime` before the graph loads. A selector returns the value the
// vector's `record_result` step for that operation records (the JS App records a selector's
// return value itself when the operation settles).

const pairsToObject = (v) => {
  if (v === undefined || v === null) return {};
  if (Array.isArray(v)) return Object.fromEntries(v);
  return v;
};

const vectorError = (message) => Object.assign(new Error(message), { code: 'VECTOR' });

class OpsHarness {
  constructor(weft, time, v) {
    const limit = (k) => (Number.isInteger(v.retention?.[k]) ? v.retention[k] : undefined);
    const retention = {};
    for (const k of ['operations', 'calculations', 'writes']) if (limit(k) !== undefined) retention[k] = limit(k);
    this.app = weft.createApp({ now: () => time.now, instance: v.instance ?? 1, retention });
    this.jobs = new JobsHarness(weft, time, this.app.runtime);
    this.calcs = new Map(); // calc -> { resolve, reject, ctx }
    this.snapshots = new Map(); // op -> the snapshot its selector was given
    this.toolWaits = new Map(); // op -> the tool call waiting on it
    this.grants = []; // the waits granted to tool calls, checked when they reply (checkGrants)
    this.time = time;
    this.vector = v;
  }

  get outputs() {
    return this.jobs.outputs;
  }

  drain() {
    return this.jobs.drain();
  }

  compute(cell) {
    return (inputs, ctx) => {
      this.outputs.push({ output: 'compute', calc: ctx.calc, cell, inputs: structuredClone(inputs), previous: ctx.previous ?? null });
      const signal = ctx.signal;
      signal.addEventListener('abort', () =>
        // The core pairs each abort reason with its code (superseded/SUPERSEDED, held/HELD,
        // owner_disposed/OWNER_DISPOSED); the signal's reason carries the code.
        this.outputs.push({
          output: 'abort',
          calc: ctx.calc,
          cell,
          reason: String(signal.reason?.code).toLowerCase(),
          code: signal.reason?.code,
          message: signal.reason?.message,
        }),
      );
      return new Promise((resolve, reject) => this.calcs.set(ctx.calc, { resolve, reject, ctx }));
    };
  }

  cells(specs) {
    return (specs ?? []).map((c) => {
      const { compute, ...rest } = c;
      if (compute?.kind === 'worker') return { ...rest, worker: compute.endpoint };
      const name = c.scope ? `${c.scope}/${c.name}` : c.name;
      return { ...rest, compute: this.compute(name) };
    });
  }

  /** The value the vector's `record_result` for operation `op` records (undefined: none). */
  recorded(op) {
    const r = (this.vector.steps ?? []).find((s) => s.op === 'record_result' && s.operation === op && s.expectError === undefined);
    return r?.value;
  }

  load() {
    const g = this.vector.graph ?? {};
    const selectors = {};
    for (const sel of g.selectors ?? []) {
      selectors[sel.name] = {
        description: sel.description ?? '',
        select: (snapshot, outcome) => {
          this.snapshots.set(outcome.operation, snapshot);
          return this.recorded(outcome.operation);
        },
      };
    }
    this.app.load({ controls: g.controls ?? [], actions: g.actions ?? [], cells: this.cells(g.cells), selectors });
  }

  /** Records `op_finished` for `op` where the App dispatches it. */
  follow(op) {
    const ac = new AbortController();
    const signal = ac.signal;
    const record = { output: 'op_finished', op: op.id };
    const remove = signal.removeEventListener.bind(signal);
    signal.removeEventListener = (...args) => {
      // The App has the outcome when it resolves the operation's waiters.
      record.outcome = op.outcome?.outcome;
      // A selector runs (on the snapshot the core sends) before the waiters are released.
      if (this.snapshots.has(op.id)) record.snapshot = this.snapshots.get(op.id);
      this.outputs.push(record);
      return remove(...args);
    };
    if (op.outcome !== null) {
      // Finished while starting: its output was dispatched inside the call.
      this.outputs.push(Object.assign(record, { outcome: op.outcome.outcome }));
      return;
    }
    op.wait({ signal }).catch(() => {
      // PRUNED (retention) or DISPOSED: the outcome was read when it was dispatched.
    });
  }

  calcId(s) {
    if (typeof s.calc === 'string') return s.calc;
    if (typeof s.cell !== 'string') throw vectorError('step needs `calc` or `cell`');
    const c = this.app.cell(s.cell).calc;
    if (c === null || c === undefined) throw vectorError(`cell \`${s.cell}\` has no calculation in flight`);
    return c;
  }

  held(s) {
    const calc = this.calcId(s);
    const h = this.calcs.get(calc);
    if (!h) throw vectorError(`no host calculation ${calc} was started`);
    return [calc, h];
  }

  apply(op, s) {
    const app = this.app;
    const actor = { by: s.by ?? 'agent' };
    if (typeof s.toolCall === 'string') actor.toolCall = s.toolCall;
    switch (op) {
      case 'set':
        if (typeof s.name !== 'string') throw vectorError('set needs `name`');
        return app.set(s.name, s.value ?? null, actor);
      case 'set_many':
        return app.setMany(pairsToObject(s.writes), actor);
      case 'flush':
        return { revision: app.flush() ?? null };
      case 'act':
        if (typeof s.name !== 'string') throw vectorError('act needs `name`');
        return app.act(s.name, pairsToObject(s.args), actor);
      case 'observe': {
        const req = { writes: pairsToObject(s.writes), waitFor: s.waitFor ?? [], ...actor };
        if (typeof s.selector === 'string') req.selector = s.selector;
        else if (Array.isArray(s.select)) req.select = s.select;
        req.onSupersede = s.onSupersede === 'follow' ? 'follow' : 'end';
        req.onFailure = s.onFailure === 'collect' ? 'collect' : 'end';
        if (Number.isInteger(s.timeoutMs)) req.timeoutMs = s.timeoutMs;
        const o = app.start(req);
        this.follow(o);
        return { operation: o.id };
      }
      case 'done': {
        const [calc, h] = this.held(s);
        h.resolve(s.value ?? null);
        return { calc };
      }
      case 'fail': {
        const [calc, h] = this.held(s);
        const err = new Error(s.message ?? 'failed');
        if (typeof s.code === 'string') err.code = s.code;
        h.reject(err);
        return { calc };
      }
      case 'partial': {
        const [calc, h] = this.held(s);
        return { calc, report: h.ctx.partial(s.value ?? null) };
      }
      case 'progress': {
        const [calc, h] = this.held(s);
        return { calc, report: h.ctx.progress(typeof s.value === 'number' ? s.value : NaN) };
      }
      case 'message':
      case 'endpoint_closed':
        return this.jobs.apply(op, s);
      case 'cancel_op':
        return app.operation(s.operation).cancel(s.reason ?? 'test');
      case 'host_as_job': {
        const job = app.operation(s.operation).hostAsJob({ owner: s.owner ?? 'agent' });
        return { job: job.id };
      }
      case 'cancel_job':
        return this.jobs.apply('cancel', s);
      case 'wait_job':
        return this.jobs.apply('wait', s);
      case 'cancel_wait':
      case 'read_mailbox':
        return this.jobs.apply(op, s);
      case 'replace_graph':
        app.replaceGraph(s.instance, this.cells(s.cells));
        return null;
      case 'dispose_graph':
        app.disposeGraph();
        return null;
      case 'record_result':
        // The selector returned this value when the operation settled (see `recorded`); a
        // refused recording has no public form (the App records only what a selector returns).
        if (s.expectError !== undefined) throw vectorError('recording a refused result is not expressible');
        return null;
      case 'submit_task': {
        if (typeof s.cell !== 'string') throw vectorError('needs `cell`');
        const job = app.submitTask(s.cell, pairsToObject(s.overrides), { owner: s.owner ?? 'agent' });
        return { job: job.id };
      }
      case 'tools':
        return app.tools.list();
      case 'tool':
        return this.tool(s, actor);
      case 'tool_reply': {
        const call = this.toolWaits.get(s.operation);
        if (!call) throw vectorError(`no tool call waits on operation ${s.operation}`);
        return {
          [LATER]: () => {
            if (!call.settled) return { error: errorOf(vectorError('the waiting tool call has not replied')) };
            this.toolWaits.delete(s.operation);
            return call.error ? { error: errorOf(call.error) } : { value: call.value };
          },
        };
      }
      case 'inspect':
        return app.inspect(s.operation);
      case 'calc':
        return app.calc(this.calcId(s));
      case 'calcs_of':
        return app.calcsOf(s.cell);
      case 'cell':
        return app.cell(s.name);
      case 'report':
        return app.report({ full: s.full ?? false });
      case 'snapshot':
        return app.snapshot();
      case 'retained': {
        const r = app.retained();
        return { calculations: r.calcs, writes: r.writes, operations: r.operations, jobs: app.runtime.jobs().length };
      }
      case 'state':
        return this.state();
      case 'advance':
        return null;
      default:
        throw vectorError(`unknown op \`${op}\``);
    }
  }

  /**
   * A published tool call (`app.tools.call`). It answers once microtasks ran: with its reply,
   * or, while it waits on an operation (one it started, or `args.operation`), with `{wait}`
   * and the `grant` the step's `waitMs` is checked against (checkGrants); `tool_reply` then
   * takes the reply it gives when the operation ends or the wait elapses.
   */
  tool(s, actor) {
    const { app, time } = this;
    const since = time.now;
    const before = new Set(app.operations().map((o) => o.operation));
    const call = { settled: false };
    app.tools.call(s.name, s.args ?? {}, { ...actor, owner: s.owner ?? 'agent' }).then(
      (value) => Object.assign(call, { settled: true, value, at: time.now }),
      (error) => Object.assign(call, { settled: true, error, at: time.now }),
    );
    const started = app.operations().map((o) => o.operation).filter((id) => !before.has(id));
    for (const id of started) this.follow(app.operation(id));
    return {
      [LATER]: () => {
        if (call.settled) return call.error ? { error: errorOf(call.error) } : { value: call.value };
        const op = started[0] ?? s.args?.operation;
        this.toolWaits.set(op, call);
        return { value: { wait: op }, grant: { call, since } };
      },
    };
  }

  /**
   * The waits granted to tool calls (a waiting `tool` step's `waitMs`), from when each call
   * replied — the only public effect of a grant: with a handle exactly when the wait elapsed,
   * with an outcome no later; a call still waiting at the end must be within its wait.
   */
  checkGrants(failures) {
    for (const { ctx, waitMs, call, since } of this.grants) {
      if (!call.settled) {
        if (this.time.now - since >= waitMs) failures.push(`${ctx}: the granted wait of ${waitMs} ms elapsed without a reply`);
        continue;
      }
      const elapsed = call.at - since;
      const handle = call.value?.status === 'waiting';
      if (handle ? elapsed !== waitMs : elapsed > waitMs) {
        failures.push(`${ctx}: granted ${waitMs} ms, the call replied with ${handle ? 'a handle' : 'its outcome'} after ${elapsed} ms`);
      }
    }
  }

  /** ops::vectors::state_json, as far as the public API lists it. */
  state() {
    const s = this.app.snapshot();
    const operations = {};
    for (const o of this.app.operations()) operations[String(o.operation)] = this.app.inspect(o.operation);
    const calcs = {};
    for (const cell of Object.keys(s.cells ?? {})) for (const c of this.app.calcsOf(cell)) calcs[c] = this.app.calc(c);
    return { ...s, operations, calcs, jobs: this.jobs.state().jobs };
  }
}

/** Ops whose effect is a Promise settling (`cancel_job`: the waits on the job it finishes). */
const ASYNC_OPS = new Set(['done', 'fail', 'tool', 'tool_reply', 'cancel_job']);

/** A step result known only once microtasks ran (a Promise's settlement). */
const LATER = Symbol('later');

/** The vector with its named graph and prelude resolved (ops::vectors::run_suite). */
function resolveOps(suite, v) {
  const out = { ...v };
  if (typeof v.graph === 'string') out.graph = suite.graphs?.[v.graph];
  if (typeof v.prelude === 'string') out.steps = [...(suite.preludes?.[v.prelude] ?? []), ...(v.steps ?? [])];
  return out;
}

async function runOpsVector(weft, time, v, stepSkips, tally) {
  if (v.kind === 'claims') return runClaimsVector(weft, time, v, stepSkips, tally);
  const failures = [];
  const h = new OpsHarness(weft, time, v);
  try {
    (v.endpoints ?? []).forEach((e, i) => {
      try {
        h.jobs.apply('open_endpoint', e);
      } catch (err) {
        failures.push(`endpoint ${i}: ${err?.message ?? err}`);
      }
    });
    try {
      h.load();
    } catch (err) {
      failures.push(`load: ${err?.code} ${err?.message ?? err}`);
    }
    await settle();
    const initial = h.drain();
    if ('loadOutputs' in v) {
      const e = subset(v.loadOutputs, initial, 'loadOutputs');
      if (e) failures.push(e);
    }
    await eachStep(v, failures, (step) => {
      const due = time.advance(step.at);
      return due ? due.then(() => opsStep(h, v, step, failures, stepSkips, tally)) : opsStep(h, v, step, failures, stepSkips, tally);
    });
    h.checkGrants(failures);
    checkFinal(v, failures, () => h.state());
  } finally {
    h.app.dispose();
  }
  return failures;
}

/** One step of an ops vector; returns a Promise only when it lets microtasks run. */
function opsStep(h, v, step, failures, stepSkips, tally) {
  if (step.index in stepSkips) {
    tally.skippedSteps++;
    h.drain();
    return undefined;
  }
  let result;
  try {
    result = { value: h.apply(step.op, step.json) };
  } catch (err) {
    result = { error: errorOf(err) };
  }
  const check = () => {
    if (typeof result.value?.[LATER] === 'function') result = result.value[LATER]();
    let json = step.json;
    if (result.grant) {
      // The granted wait is checked when the call replies (OpsHarness.checkGrants).
      if (isObject(json.expect) && 'waitMs' in json.expect) {
        const { waitMs, ...expect } = json.expect;
        h.grants.push({ ctx: step.ctx, waitMs, ...result.grant });
        json = { ...json, expect };
      }
      result = { value: result.value };
    }
    const u = tally.unseen[step.op];
    if (u && 'expect' in json && !result.error) {
      if (u.fields === null) {
        json = { ...json };
        delete json.expect;
        tally.unseenResults++;
      } else if (isObject(json.expect) && u.fields.some((f) => f in json.expect)) {
        const expect = { ...json.expect };
        for (const f of u.fields) delete expect[f];
        json = { ...json, expect };
        tally.unseenResults++;
      }
    }
    checkStep(step.ctx, json, result, h.drain(), failures);
  };
  // The App ends a tick at the microtask checkpoint (its scheduled flush); a vector ends
  // it with `flush`. Steps of one `at` therefore run in one synchronous stretch, and
  // microtasks run only when the next step is later, or when this step's effect is a
  // Promise settling (a host calculation's result).
  const next = v.steps[step.index + 1];
  if (!next || (next.at ?? step.at) > step.at || ASYNC_OPS.has(step.op)) return settle().then(check);
  check();
  return undefined;
}

/**
 * A standing-desire vector (ops::vectors::run_claims_vector) through `weft.createClaims`: the
 * `acquire` and `release` it is given record the outputs and return Promises the steps settle
 * (`acquired` resolves an acquisition, `acquire_failed` rejects it, `released` settles a
 * release, rejecting with the step's `error`). An `acquired` step's `adopted` is whether the
 * resource it gave is the claim's held one afterwards (`claims.held`).
 */
async function runClaimsVector(weft, time, v, stepSkips, tally) {
  const failures = [];
  const outputs = [];
  const inFlight = new Map(); // "acquire 1" | "release 1" -> { resolve, reject }
  const claims = weft.createClaims({
    now: () => time.now,
    acquire: (desire, { claim, attempt }) => {
      outputs.push({ output: 'acquire', claim, attempt, desire });
      return new Promise((resolve, reject) => inFlight.set(`acquire ${attempt}`, { resolve, reject }));
    },
    release: (_resource, { claim, attempt, desire }) => {
      outputs.push({ output: 'release', claim, attempt, desire });
      return new Promise((resolve, reject) => inFlight.set(`release ${attempt}`, { resolve, reject }));
    },
  });
  const report = (what, attempt) => {
    const p = inFlight.get(`${what} ${attempt}`);
    if (!p) throw vectorError(`no ${what} of attempt ${attempt} is in flight`);
    inFlight.delete(`${what} ${attempt}`);
    return p;
  };
  try {
    await eachStep(v, failures, async (step) => {
      time.advance(step.at);
      if (step.index in stepSkips) {
        tally.skippedSteps++;
        outputs.length = 0;
        return;
      }
      const s = step.json;
      const claim = typeof s.claim === 'string' ? s.claim : 'c';
      const attempt = s.attempt;
      let result;
      try {
        switch (step.op) {
          case 'desire':
            claims.desire(claim, s.desire ?? null);
            result = { value: null };
            break;
          case 'acquired': {
            const resource = { claim, attempt };
            report('acquire', attempt).resolve(resource);
            await settle();
            result = { value: { adopted: claims.held(claim) === resource } };
            break;
          }
          case 'acquire_failed':
            report('acquire', attempt).reject(new Error(s.error ?? 'failed'));
            result = { value: null };
            break;
          case 'released': {
            const p = report('release', attempt);
            if (typeof s.error === 'string') p.reject(new Error(s.error));
            else p.resolve();
            result = { value: null };
            break;
          }
          case 'retry':
            claims.retry(claim);
            result = { value: null };
            break;
          case 'state':
            result = { value: claims.state(claim) };
            break;
          default:
            failures.push(`step ${step.index}: unknown op \`${step.op}\``);
            return;
        }
      } catch (err) {
        result = { error: errorOf(err) };
      }
      await settle();
      checkStep(step.ctx, s, result, outputs.splice(0), failures);
      if ('phase' in s && s.phase !== claims.phase(claim)) {
        failures.push(`${step.ctx}: phase ${claims.phase(claim)} (expected ${show(s.phase)})`);
      }
    });
  } finally {
    claims.dispose();
  }
  return failures;
}

// ----- suites -------------------------------------------------------------------------------

const RUNNERS = { jobs: runJobsVector, tools: runToolsVector, ops: runOpsVector };

/**
 * Runs every vector of `suite` (the parsed JSON file) through `weft` (the package's module).
 * Resolves to `{ suite, results: [{ name, status: 'passed' | 'failed' | 'skipped' |
 * 'disagrees', failures, reason? }] }`.
 */
export async function runSuite(weft, suite) {
  const kind = suite.suite;
  const run = RUNNERS[kind];
  if (!run) throw new Error(`no JS runner for suite \`${kind}\``);
  const skips = SKIPS[kind] ?? {};
  const known = KNOWN_DISAGREEMENTS[kind] ?? {};
  // What ran only in part: steps skipped (STEP_SKIPS), expectations not checked (UNSEEN_RESULTS).
  const tally = { unseen: UNSEEN_RESULTS[kind] ?? {}, unseenResults: 0, skippedSteps: 0 };
  const time = new FakeTime();
  const restore = time.install();
  const results = [];
  try {
    for (const raw of suite.vectors) {
      const v = kind === 'ops' ? resolveOps(suite, raw) : raw;
      const name = v.name ?? '<unnamed>';
      if (name in skips) {
        results.push({ name, status: 'skipped', failures: [], reason: skips[name] });
        continue;
      }
      time.reset();
      let failures;
      try {
        failures = await run(weft, time, v, STEP_SKIPS[kind]?.[name] ?? {}, tally);
      } catch (err) {
        failures = [`the runner threw: ${err?.stack ?? err}`];
      }
      const status = failures.length === 0 ? 'passed' : name in known ? 'disagrees' : 'failed';
      results.push({ name, status, failures, reason: known[name] });
    }
  } finally {
    restore();
  }
  return { suite: kind, results, unseenResults: tally.unseenResults, skippedSteps: tally.skippedSteps };
}
