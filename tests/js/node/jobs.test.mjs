// The job-runtime scenarios with real worker_threads Workers, through the package as a user
// imports it (`import { createRuntime } from 'weft'`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRuntime } from 'weft';
import { scenarios } from '../scenarios.mjs';

const worker = (name) =>
  name === 'diffusion'
    ? new URL('../../../examples/diffusion/worker.js', import.meta.url)
    : new URL(`../../workers/${name}.js`, import.meta.url);

for (const [name, run] of Object.entries(scenarios)) {
  test(`worker_threads: ${name}`, { timeout: 30_000 }, () => run({ createRuntime, worker }));
}

test('in-process jobs: progress, cancel acknowledged by the body settling, failure codes', async () => {
  const rt = createRuntime();
  const ep = rt.openLocal(async (payload, ctx) => {
    for (let i = 0; i < payload.steps; i++) {
      ctx.progress(i / payload.steps);
      await new Promise((r) => setTimeout(r, 2));
      ctx.signal.throwIfAborted();
    }
    if (payload.fail) throw Object.assign(new Error('bad input'), { code: 'E_BAD' });
    return payload.steps;
  });
  const ok = ep.submit({ steps: 5 });
  const out = await ok.wait();
  if (out.outcome !== 'succeeded' || out.value !== 5) throw new Error(JSON.stringify(out));
  const bad = ep.submit({ steps: 1, fail: true });
  const f = await bad.wait();
  if (f.outcome !== 'failed' || f.code !== 'E_BAD') throw new Error(JSON.stringify(f));
  const long = ep.submit({ steps: 1000 });
  await new Promise((r) => setTimeout(r, 10));
  long.cancel();
  const c = await long.wait();
  if (c.outcome !== 'cancelled' || c.evidence !== 'acknowledged') throw new Error(JSON.stringify(c));
  rt.close();
});

test('a queued payload is copied at submit: a Proxy is refused as structuredClone refuses it; a submit answered from its reuse key copies nothing', async () => {
  const rt = createRuntime();
  let release;
  const gate = new Promise((r) => (release = r));
  const ep = rt.openLocal(async (payload) => (payload.wait ? gate : payload.n), { maxConcurrent: 1 });
  const first = ep.submit({ wait: true });
  // Queued behind the first: captured at the call.
  const reads = [];
  const proxy = new Proxy({ n: 1 }, { get: (t, k) => (reads.push(k), t[k]) });
  if (typeof process.getBuiltinModule === 'function') {
    assert.throws(() => ep.submit(proxy), { name: 'DataCloneError' });
    assert.deepEqual(reads, [], 'refused without reading it through its traps');
  } else {
    // Node < 20.16 cannot tell a Proxy (no util.types.isProxy without an import): it is copied
    // as the object it shows, as in browsers.
    ep.submit(proxy).cancel();
    assert.ok(reads.includes('n'), 'copied through its traps');
  }
  let getter = 0;
  const counted = {
    get n() {
      getter++;
      return 2;
    },
  };
  const keyed = ep.submit(counted, { reuseKey: 'k' });
  const copied = getter;
  assert.ok(copied >= 1, 'the queued payload was read (copied) at submit');
  getter = 0;
  const again = ep.submit(counted, { reuseKey: 'k' });
  assert.equal(again.reused, true);
  assert.equal(again.id, keyed.id);
  // Answered from the key: read once, to compare it with the kept payload, and not copied.
  assert.equal(getter, 1, 'no copy of a payload answered from its reuse key');
  release(0);
  assert.deepEqual((await keyed.wait()).value, 2);
  await first.wait();
  rt.dispose();
});

test('forget releases one finished job before its owner closes; a running or followed job stays', async () => {
  const rt = createRuntime();
  let release;
  const gate = new Promise((r) => (release = r));
  const ep = rt.openLocal(async (payload) => (payload.wait ? gate : payload.n), { owner: 'a' });
  const done = ep.submit({ n: 1 }, { owner: 'a' });
  await done.wait();
  const running = ep.submit({ wait: true }, { owner: 'a' });
  if (rt.forget(running.id) !== false) throw new Error('a running job was forgotten');
  const stop = done.observe(() => {});
  if (done.forget() !== false) throw new Error('an observed job was forgotten');
  stop();
  if (done.forget() !== true) throw new Error('a finished job was not forgotten');
  if (rt.job(done.id) !== undefined || done.info !== undefined) throw new Error('the forgotten job is still retained');
  if (rt.jobs({ owner: 'a' }).map((j) => j.job).join() !== String(running.id)) throw new Error('jobs() lists a forgotten job');
  if (rt.forget(done.id) !== false) throw new Error('forgetting twice succeeded');
  release(2);
  await running.wait();
  if (running.forget() !== true) throw new Error('the settled job was not forgotten');
  rt.dispose();
});

test('closeOwnerGradually: outcomes at once, jobs unknown at once, records released in bounded slices', async () => {
  const rt = createRuntime();
  let release;
  const gate = new Promise((r) => (release = r));
  const ep = rt.openLocal(async (payload) => (payload.wait ? gate : payload.n), { owner: 'host' });
  const N = 300;
  const jobs = [];
  for (let i = 0; i < N; i++) jobs.push(ep.submit({ n: i }, { owner: 'big' }));
  await Promise.all(jobs.map((j) => j.wait()));
  const running = ep.submit({ wait: true }, { owner: 'big' });
  const waited = running.wait();
  const finished = [];
  rt.on('finished', (e) => finished.push(e));
  const held = rt.registry.retainedJobs();
  if (held !== N + 1) throw new Error(`retained ${held}, expected ${N + 1}`);
  // The slices run in later macrotasks; between them the event loop turns.
  let turns = 0;
  const ticker = setInterval(() => turns++, 0);
  const closing = rt.closeOwnerGradually('big', { slice: 50 });
  // Synchronously: the running job has its outcome and no job of the owner can be found.
  if (finished.length !== 1 || finished[0].job !== running.id || finished[0].outcome !== 'lost') throw new Error(JSON.stringify(finished));
  if (rt.jobs({ owner: 'big' }).length !== 0 || rt.job(jobs[0].id) !== undefined) throw new Error('closed jobs are still visible');
  if (rt.registry.retainedJobs() !== N + 1) throw new Error('records released before the slices ran');
  const report = await closing;
  clearInterval(ticker);
  release(0);
  if ((await waited).outcome !== 'lost') throw new Error('the wait did not end with the outcome');
  if (rt.registry.retainedJobs() !== 0) throw new Error(`${rt.registry.retainedJobs()} records left`);
  if (report.jobs.length !== N + 1 || report.jobs.at(-1).was !== 'running' || report.jobs.at(-1).outcome !== 'lost') throw new Error('report lines');
  if (report.jobs.some((l, i) => l.job !== (i < N ? jobs[i].id : running.id))) throw new Error('report order');
  if (report.unreadNotes.length !== N) throw new Error(`unread notes ${report.unreadNotes.length}`);
  // 2N + 1 items (N notes, N + 1 records) in slices of 50: at least that many macrotasks.
  if (turns < 1) throw new Error('the close never yielded to the event loop');
  rt.dispose();
});

test('worker replies are size-checked to the byte whatever their shape; listeners see only what follows them', async () => {
  const rt = createRuntime();
  const posted = [];
  let h;
  const ep = rt.openEndpoint((handlers) => {
    h = handlers;
    return { post: (m) => posted.push(m), terminate() {} };
  }, { hello: 'skip', maxMessageBytes: 200 });
  const run = () => {
    const job = ep.submit({ n: 1 });
    return { job, id: posted.at(-1).id };
  };
  const journalTypes = (job) => job.journal().map((e) => e.type);
  // {id, type: 'done', value: <string of n>} weighs 55 + n (the size rule of the bindings),
  // and with the string nested as {s} 60 + n; the limit is 200.
  const cases = [
    [(id, n) => ({ id, type: 'done', value: 'x'.repeat(n) }), 145],
    [(id, n) => ({ id, type: 'done', value: { s: 'x'.repeat(n) } }), 140],
  ];
  for (const [reply, most] of cases) {
    const a = run();
    h.message(reply(a.id, most + 1));
    const refused = a.job.journal().at(-1);
    if (refused.type !== 'protocol_error' || refused.violation.violation !== 'oversized') throw new Error(JSON.stringify(refused));
    h.message(reply(a.id, most));
    const o = await a.job.wait();
    if (o.outcome !== 'succeeded') throw new Error(JSON.stringify(o));
  }
  // A reply that is not a plain object (a Map, a class instance) is judged as before.
  const b = run();
  h.message(new Map([['id', b.id]]));
  h.message(Object.assign(Object.create({ inherited: 1 }), { id: b.id, type: 'progress', value: 0.5 }));
  h.message({ id: b.id, type: 'done', value: null });
  if ((await b.job.wait()).value !== null) throw new Error('done with null');
  if (journalTypes(b.job).join() !== 'submitted,started,progress,outcome') throw new Error(journalTypes(b.job).join());
  // The Map has no readable `type` or `id`: a protocol error of the endpoint only.
  const errors = ep.info.events.filter((e) => e.type === 'protocol_error');
  if (errors.length !== 3 || errors[2].violation.violation !== 'missing_type') throw new Error(JSON.stringify(errors));
  // A `finished` listener attached late sees the jobs that finish after it, none before;
  // every journal keeps its events either way.
  const c = run();
  h.message({ id: c.id, type: 'done', value: 1 });
  const seen = [];
  rt.on('finished', (e) => seen.push(e));
  const d = run();
  h.message({ id: d.id, type: 'done', value: 2 });
  await d.job.wait();
  if (seen.length !== 1 || seen[0].job !== d.job.id || seen[0].outcome !== 'succeeded') throw new Error(JSON.stringify(seen));
  if (journalTypes(c.job).at(-1) !== 'outcome' || journalTypes(d.job).at(-1) !== 'outcome') throw new Error('journals');
  const report = rt.closeOwner('app');
  // Every job left a completion note, read or not by a listener.
  if (report.unreadNotes.length !== 5) throw new Error(`unread notes ${report.unreadNotes.length}`);
  rt.dispose();
});

test('the worker side of `batch` (worker-batch.js): announce, unpack in order, one frame per delivery, the bound', async () => {
  const { batching, BATCH_MAX } = await import(new URL('../node_modules/weft/worker-batch.js', import.meta.url));
  // The bound is the core's (wire::BATCH_MAX).
  const wire = readFileSync(new URL('../../../core/src/jobs/wire.rs', import.meta.url), 'utf8');
  assert.equal(BATCH_MAX, Number(/pub const BATCH_MAX: usize = (\d+);/.exec(wire)[1]));
  const frames = [];
  const seen = [];
  // A clock that stands still: the hold bound (a time) never splits a frame here, so the
  // frame counts below do not depend on the machine's speed (the bound has its own tests).
  const { post, receive } = batching(
    (m, t) => frames.push(t === undefined ? [m] : [m, t]),
    (m) => {
      seen.push(m);
      if (m.type === 'run') post({ id: m.id, type: 'done', value: m.payload });
    },
    { now: () => 0 },
  );
  // Before the hello nothing is batched; the hello announces `batch`.
  post({ id: 0, type: 'progress', value: 0 });
  post({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true } });
  assert.deepEqual(frames.splice(0), [
    [{ id: 0, type: 'progress', value: 0 }],
    [{ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true, batch: true } }],
  ]);
  // A batch is delivered as its messages, in order; the replies made meanwhile are one frame.
  const runs = [1, 2, 3].map((id) => ({ id, type: 'run', payload: id * 10 }));
  receive({ type: 'batch', messages: runs });
  assert.deepEqual(seen.splice(0), runs);
  assert.deepEqual(frames.splice(0), [[{ type: 'batch', messages: runs.map((r) => ({ id: r.id, type: 'done', value: r.payload })) }]]);
  // A single message: its one reply goes alone, not as a batch of one.
  receive({ id: 4, type: 'run', payload: 40 });
  assert.deepEqual(frames.splice(0), [[{ id: 4, type: 'done', value: 40 }]]);
  // Outside a delivery: the first at once (the wire is idle), the rest at the microtask, with
  // their transfer lists (a held message is a snapshot: its buffer is moved to it at the post).
  const buf = new ArrayBuffer(8);
  post({ id: 5, type: 'progress', value: 1 });
  post({ id: 5, type: 'progress', value: 2 }, [buf]);
  post({ id: 5, type: 'done', value: 3 });
  assert.deepEqual(frames.splice(0), [[{ id: 5, type: 'progress', value: 1 }]]);
  assert.equal(buf.byteLength, 0, 'transferred at the post');
  await Promise.resolve();
  const [[held, moved]] = frames.splice(0);
  assert.deepEqual(held, { type: 'batch', messages: [{ id: 5, type: 'progress', value: 2 }, { id: 5, type: 'done', value: 3 }] });
  assert.equal(moved.length, 1);
  assert.equal(moved[0].byteLength, 8);
  // At most BATCH_MAX replies share a frame.
  receive({ type: 'batch', messages: Array.from({ length: BATCH_MAX + 10 }, (_, i) => ({ id: 100 + i, type: 'run', payload: i })) });
  assert.deepEqual(frames.splice(0).map(([f]) => f.messages?.length ?? 1), [BATCH_MAX, 10]);
  // A hello saying `batch: false` turns it off: every message alone again (a batch frame
  // received is still delivered as its messages: a host may have been told otherwise).
  post({ type: 'hello', capabilities: { batch: false } });
  receive({ type: 'batch', messages: runs });
  assert.deepEqual(seen.slice(-3), runs, 'a batch frame is unpacked even unannounced');
  assert.deepEqual(frames.splice(0).map(([f]) => f.type), ['hello', 'done', 'done', 'done'], 'its replies alone');
  post({ id: 9, type: 'done' });
  post({ id: 9, type: 'done' });
  assert.deepEqual(frames.splice(0).map(([f]) => f.type), ['done', 'done']);
});

test("a wait's signal is listened to after the wait's own batch ran: an addEventListener that calls into the runtime does not disturb it", async () => {
  const rt = createRuntime();
  const ep = rt.openLocal(async (payload) => payload.n);
  const inner = [];
  // A signal-like object whose addEventListener is user code that submits and waits on the
  // same runtime (a fused call that reuses the runtime's output array).
  const signal = {
    aborted: false,
    addEventListener() {
      const j = ep.submit({ n: 2 });
      inner.push(j.wait({ timeoutMs: 5_000 }));
    },
    removeEventListener() {},
  };
  const outer = ep.submit({ n: 1 });
  // A timeout gives the wait a deadline, so its call returns a batch (not the idle shortcut).
  const got = await outer.wait({ timeoutMs: 5_000, signal });
  assert.equal(got.value, 1);
  assert.equal(inner.length, 1, 'the signal was listened to once');
  assert.equal((await inner[0]).value, 2);
  rt.dispose();
});

test('a submit whose run cannot be posted (an uncloneable payload sent at once, not copied) throws DataCloneError and leaves no job: no record, slot, reuse key, event or note', async () => {
  const rt = createRuntime();
  const ep = rt.openWorker(worker('quick'), { maxConcurrent: 1 });
  const first = ep.submit({ n: 3 });
  assert.equal((await first.wait()).value, 3); // ready and idle: the next run leaves at once
  const heard = [];
  for (const k of ['finished', 'note', 'wake']) rt.on(k, (e) => heard.push([k, e.job]));
  const recorded = rt.registry.eventsRecorded();
  const notes = rt.registry.mailboxLength('app');
  const framesSent = ep.info.framesSent;
  for (const payload of [{ n: 1, f() {} }, new Proxy({ n: 2 }, {})]) {
    assert.throws(() => ep.submit(payload, { reuseKey: 'k', wake: true }), { name: 'DataCloneError' });
    assert.deepEqual(rt.jobs().map((j) => j.job), [first.id]);
    assert.equal(rt.registry.eventsRecorded(), recorded);
  }
  assert.equal(rt.registry.mailboxLength('app'), notes);
  assert.equal(ep.info.framesSent, framesSent);
  // The slot and the key are free: the next submit runs at once, under the id not used.
  const next = ep.submit({ n: 4 }, { reuseKey: 'k' });
  assert.equal(next.reused, false);
  assert.equal(next.id, first.id + 1);
  assert.equal(next.info.state, 'running');
  assert.equal((await next.wait()).value, 6);
  assert.deepEqual(heard, [['finished', next.id], ['note', next.id]]);
  rt.dispose();
});

test("a transport whose post refuses a payload (as a DOM Worker's postMessage does): the submit leaves no job and the run's wire id is issued again; an input it refuses throws and changes nothing", () => {
  const rt = createRuntime();
  const sent = [];
  const ep = rt.openEndpoint(() => ({ post: (m) => sent.push(structuredClone(m)), terminate() {} }), {
    hello: { declared: { input: true, cancelAck: true } },
  });
  assert.throws(() => ep.submit({ f() {} }), { name: 'DataCloneError' });
  assert.deepEqual(rt.jobs(), []);
  assert.deepEqual(sent, []);
  const job = ep.submit({ n: 1 });
  assert.deepEqual(sent, [{ id: 1, type: 'run', payload: { n: 1 } }]);
  const seen = [];
  job.observe((d) => seen.push(d.type), { from: 'next' });
  const journal = job.journal();
  const recorded = rt.registry.eventsRecorded();
  const frames = ep.info.framesSent;
  // The caller gets the throw; no event, nothing sent, nothing reported; the run goes on.
  assert.throws(() => job.send({ g() {} }), { name: 'DataCloneError' });
  assert.throws(() => job.send(new Proxy({ g: 1 }, {}), { inputId: 'k' }), { name: 'DataCloneError' });
  assert.equal(job.info.state, 'running');
  assert.deepEqual(rt.jobs().map((j) => j.job), [job.id]);
  assert.deepEqual(job.journal(), journal);
  assert.equal(rt.registry.eventsRecorded(), recorded);
  assert.equal(ep.info.framesSent, frames);
  assert.deepEqual(sent.length, 1);
  // Both ids are free: sent again with values it can copy, each is delivered once.
  assert.equal(job.send({ g: 1 }, { inputId: 'k' }), 'k');
  assert.equal(job.send({ g: 2 }), 'input-2');
  assert.deepEqual(sent.slice(1), [
    { id: 1, type: 'input', inputId: 'k', value: { g: 1 } },
    { id: 1, type: 'input', inputId: 'input-2', value: { g: 2 } },
  ]);
  assert.deepEqual(job.journal().slice(journal.length).map((e) => [e.type, e.inputId]), [['input_delivered', 'k'], ['input_delivered', 'input-2']]);
  assert.deepEqual(seen, ['input_delivered', 'input_delivered'], 'observers saw only the delivered inputs');
  rt.dispose();
});

/** Runs `fn`, then lets the microtasks run: the errors reported uncaught meanwhile. */
async function uncaughtDuring(fn) {
  const saved = process.listeners('uncaughtException');
  const errors = [];
  process.removeAllListeners('uncaughtException');
  process.on('uncaughtException', (e) => errors.push(e));
  try {
    fn();
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    process.removeAllListeners('uncaughtException');
    for (const l of saved) process.on('uncaughtException', l);
  }
  return errors;
}

/**
 * An endpoint whose post runs the hook set by `onNextPost` first (a transport calling into the
 * runtime as it posts), once, then records a copy of the message in `sent`.
 */
function hookedEndpoint(rt, sent, options = { hello: { declared: { input: true, cancelAck: true } } }) {
  let hook = null;
  const ep = rt.openEndpoint(
    () => ({
      post: (m) => {
        const h = hook;
        hook = null;
        h?.();
        sent.push(structuredClone(m));
      },
      terminate() {},
    }),
    options,
  );
  return { ep, onNextPost: (f) => (hook = f) };
}

test("a submit or send whose own post fails while another output of its pump throws: withdrawn all the same (no ghost job, no input event), the caller gets its DataCloneError, the other error is reported uncaught; the next calls work", async () => {
  const rt = createRuntime();
  const hello = { hello: { declared: { input: true, cancelAck: true } } };
  const sent = [];
  // Endpoint a's post runs a hook first (a transport calling into the runtime), then copies.
  const { ep: a, onNextPost } = hookedEndpoint(rt, sent, hello);
  const b = rt.openEndpoint(() => ({ post() { throw new Error('endpoint b is down'); }, terminate() {} }), hello);
  // Submitted inside a's post: b's run is posted by the same pump, after a's, and throws.
  const onB = [];
  onNextPost(() => onB.push(b.submit({ n: 2 })));
  let uncaught = await uncaughtDuring(() => assert.throws(() => a.submit({ n: 1, f() {} }), { name: 'DataCloneError' }));
  assert.deepEqual(uncaught.map((e) => e.message), ['endpoint b is down']);
  assert.deepEqual(rt.jobs().map((j) => j.job), [onB[0].id], "no ghost of a's job");
  assert.deepEqual(sent, []);
  const job = a.submit({ n: 3 });
  assert.equal(job.info.state, 'running');
  assert.deepEqual(sent, [{ id: 1, type: 'run', payload: { n: 3 } }], "a's wire id is issued again");
  // The same for an input.
  const journal = job.journal();
  onNextPost(() => onB.push(b.submit({ n: 4 })));
  uncaught = await uncaughtDuring(() => assert.throws(() => job.send({ f() {} }), { name: 'DataCloneError' }));
  assert.deepEqual(uncaught.map((e) => e.message), ['endpoint b is down']);
  assert.deepEqual(job.journal(), journal);
  assert.equal(job.send({ v: 1 }), 'input-1');
  assert.deepEqual(sent.at(-1), { id: 1, type: 'input', inputId: 'input-1', value: { v: 1 } });
  assert.equal(a.submit({ n: 5 }).info.state, 'running');
  assert.deepEqual(sent.at(-1), { id: 2, type: 'run', payload: { n: 5 } });
  rt.dispose();
});

test("a listener's Job.send whose post throws: the pump carrying it out still carries out the rest of its batch (the observer hears of the input and of the outcome); the first error is thrown, the next reported uncaught", async () => {
  const rt = createRuntime();
  let h;
  const posted = [];
  const ep = rt.openEndpoint((handlers) => {
    h = handlers;
    return {
      post: (m) => {
        if (m.type === 'input' && m.value.boom) throw new Error(`transport refused ${m.inputId}`);
        posted.push(m.type);
      },
      terminate() {},
    };
  }, { hello: { declared: { input: true, cancelAck: true } } });
  const job = ep.submit({});
  const seen = [];
  job.observe((d) => {
    seen.push(d.type);
    // Sent inside the pump carrying out the progress event: posted by that pump.
    if (d.type === 'progress') {
      job.send({ boom: true }, { inputId: 'x' });
      job.send({ boom: true }, { inputId: 'y' });
    }
  }, { from: 'next' });
  const uncaught = await uncaughtDuring(() => assert.throws(() => h.message({ id: 1, type: 'progress', value: 0.5 }), { message: 'transport refused x' }));
  assert.deepEqual(uncaught.map((e) => e.message), ['transport refused y']);
  // Sent inside a pump, the inputs were not the caller's own: they stay recorded.
  assert.deepEqual(seen, ['progress', 'input_delivered', 'input_delivered']);
  h.message({ id: 1, type: 'done', value: 1 });
  assert.equal(job.state, 'succeeded');
  assert.deepEqual(seen, ['progress', 'input_delivered', 'input_delivered', 'outcome'], 'the observer still hears');
  assert.deepEqual(job.journal().map((e) => e.type), ['submitted', 'started', 'progress', 'input_delivered', 'input_delivered', 'outcome']);
  assert.deepEqual(posted, ['run']);
  rt.dispose();
});

test('a Job.send copied at the call (it joins a batch frame) whose post throws: the caller gets the error, the input stays recorded, and the observer hears of it and of what follows', async () => {
  const rt = createRuntime();
  let h;
  const posted = [];
  const ep = rt.openEndpoint((handlers) => {
    h = handlers;
    return {
      post: (m) => {
        if (JSON.stringify(m).includes('boom')) throw new Error('transport refused');
        posted.push(m.type);
      },
      terminate() {},
    };
  }, { hello: { declared: { input: true, cancelAck: true, batch: true } } });
  const job = ep.submit({});
  ep.submit({}); // held for the turn's batch frame: the input joins it
  const seen = [];
  job.observe((d) => seen.push(d.type), { from: 'next' });
  const events = [];
  const iterated = (async () => {
    for await (const d of job.events({ from: 'next' })) events.push(d.type);
  })();
  assert.throws(() => job.send({ boom: true }), /transport refused/);
  assert.deepEqual(seen, ['input_delivered']);
  h.message({ id: 1, type: 'done', value: 1 });
  assert.equal(job.state, 'succeeded');
  assert.deepEqual(seen, ['input_delivered', 'outcome']);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(events, ['input_delivered', 'outcome'], 'an events() iterator is not left waiting');
  await iterated;
  assert.deepEqual(posted, ['run']);
  rt.dispose();
});

test("a submit whose run cannot be posted but cannot be withdrawn either (its transport put another run on the wire first): the caller gets the core's refusal, the post's DataCloneError its cause, and the job stays", async () => {
  const rt = createRuntime();
  const sent = [];
  const { ep, onNextPost } = hookedEndpoint(rt, sent);
  const nested = [];
  onNextPost(() => nested.push(ep.submit({ n: 2 })));
  let thrown;
  const uncaught = await uncaughtDuring(() => {
    try {
      ep.submit({ n: 1, f() {} });
    } catch (e) {
      thrown = e;
    }
  });
  assert.deepEqual(uncaught, []);
  assert.equal(thrown?.code, 'INVALID_ARGUMENT', String(thrown));
  assert.equal(thrown.cause?.name, 'DataCloneError');
  assert.deepEqual(sent, [{ id: 2, type: 'run', payload: { n: 2 } }], 'only the nested run went out');
  assert.deepEqual(rt.jobs().map((j) => [j.job, j.state]), [[1, 'running'], [nested[0].id, 'running']], 'the job stays');
  rt.dispose();
});

test("an input that cannot be posted but cannot be withdrawn either (its transport put a run on the wire first): the caller gets the core's refusal, the post's DataCloneError its cause, and the input stays recorded", async () => {
  const rt = createRuntime();
  const sent = [];
  const { ep, onNextPost } = hookedEndpoint(rt, sent);
  const job = ep.submit({ n: 1 });
  sent.length = 0;
  onNextPost(() => ep.submit({ n: 2 }));
  let thrown;
  const uncaught = await uncaughtDuring(() => {
    try {
      job.send({ f() {} }, { inputId: 'x' });
    } catch (e) {
      thrown = e;
    }
  });
  assert.deepEqual(uncaught, []);
  assert.equal(thrown?.code, 'INVALID_ARGUMENT', String(thrown));
  assert.equal(thrown.cause?.name, 'DataCloneError');
  assert.deepEqual(sent, [{ id: 2, type: 'run', payload: { n: 2 } }], 'only the nested run went out');
  assert.equal(job.journal().at(-1).type, 'input_delivered', 'the input stays recorded');
  rt.dispose();
});

/** Resolves at the first journal event `pick` accepts (replaying history). */
function firstEvent(job, pick) {
  return new Promise((resolve) => {
    const stop = job.observe((d) => {
      if (pick(d)) {
        stop();
        resolve(d);
      }
    });
  });
}

test('a real Worker: an input postMessage cannot copy throws DataCloneError and changes nothing (no event, nothing sent, its id free again); one held behind a run for a batch frame is copied at the call', { timeout: 30_000 }, async () => {
  const rt = createRuntime();
  const ep = rt.openWorker(worker('diffusion'));
  const job = ep.submit({ points: 800, simTime: 5, chunkMs: 4 });
  await firstEvent(job, (d) => d.type === 'started');
  const seen = [];
  job.observe((d) => d.type.startsWith('input') && seen.push([d.type, d.inputId]), { from: 'next' });
  // One synchronous stretch: no worker message is handled meanwhile.
  const journal = job.journal().length;
  const recorded = rt.registry.eventsRecorded();
  const frames = ep.info.framesSent;
  for (const value of [{ snapshot: true, f() {} }, new Proxy({ snapshot: true }, {})]) {
    assert.throws(() => job.send(value, { inputId: 'same' }), { name: 'DataCloneError' });
  }
  assert.throws(() => job.send({ snapshot: () => true }), { name: 'DataCloneError' });
  assert.equal(job.journal().length, journal);
  assert.equal(rt.registry.eventsRecorded(), recorded);
  assert.equal(ep.info.framesSent, frames);
  assert.equal(job.info.state, 'running');
  assert.equal(job.send({ snapshot: true }, { inputId: 'same' }), 'same');
  assert.equal(job.send({ snapshot: true }), 'input-2', 'the withdrawn inputs took no number');
  // A second run goes out in the turn's batch frame: an input now would join it, so it is
  // copied at the call (and refused there).
  const other = ep.submit({ points: 10, simTime: 0.01, chunkMs: 1 });
  assert.throws(() => job.send({ f() {} }), { name: 'DataCloneError' });
  await firstEvent(job, (d) => d.type === 'input_applied' && d.inputId === 'input-2');
  assert.deepEqual(seen, [
    ['input_delivered', 'same'],
    ['input_delivered', 'input-2'],
    ['input_applied', 'same'],
    ['input_applied', 'input-2'],
  ]);
  assert.deepEqual(job.journal().filter((e) => e.type.startsWith('input')).map((e) => [e.type, e.inputId]), seen);
  assert.equal((await other.wait()).outcome, 'succeeded');
  job.cancel();
  await job.wait();
  rt.dispose();
});

// Both WebAssembly modules that hold a job registry (the jobs-only one of `import 'weft'` in a
// browser, the apps one) run their registries in one page once `loadApps()` has loaded the
// second, and their glue shares one JS file: a worker's message read for one module must land
// in that module's memory, also after either memory grew (readReply in wasm/src/jobs.rs).
test('two modules’ registries read their workers’ replies into their own memory', async () => {
  const { Runtime } = await import('weft');
  const dir = new URL('./', import.meta.resolve('weft'));
  const jobsGlue = await import(new URL('weft_jobs.js', dir).href);
  jobsGlue.initSync({ module: readFileSync(new URL('weft_jobs_bg.wasm', dir)) });
  const a = createRuntime();
  const b = new Runtime({ core: new jobsGlue.JobRegistry() });
  const open = (rt, label) => {
    let h;
    const ep = rt.openEndpoint(
      (handlers) => {
        h = handlers;
        return { post() {}, terminate() {} };
      },
      { hello: 'skip', label },
    );
    return { ep, reply: (m) => h.message(m) };
  };
  const ea = open(a, 'apps module');
  const eb = open(b, 'jobs module');
  // Wire ids are per endpoint: 1, 2, ... in submission order.
  for (let round = 0; round < 3; round++) {
    const ja = [];
    const jb = [];
    for (let i = 0; i < 200; i++) {
      ja.push(ea.ep.submit({ i }));
      jb.push(eb.ep.submit({ i }));
    }
    const wa = ja.map((j) => j.wait());
    const wb = jb.map((j) => j.wait());
    // Odd jobs of the apps module end with a number, even ones with an object (handed back
    // as the same object).
    const values = [];
    for (let i = 0; i < 200; i++) {
      const id = round * 200 + i + 1;
      values.push(i % 2 ? 1000 + i : { v: 1000 + i });
      ea.reply({ id, type: 'progress', value: i / 200 });
      eb.reply({ id, type: 'progress', value: -i });
      ea.reply({ id, type: 'done', value: values[i] });
      eb.reply({ id, type: 'error', message: `b${i}`, code: 'E_B' });
    }
    const [ra, rb] = [await Promise.all(wa), await Promise.all(wb)];
    for (let i = 0; i < 200; i++) {
      assert.deepEqual(ra[i], { outcome: 'succeeded', value: values[i] });
      assert.equal(ra[i].value, values[i]);
      assert.equal(rb[i].outcome, 'failed');
      assert.equal(rb[i].message, `b${i}`);
      assert.equal(rb[i].code, 'E_B');
      const progress = jb[i].journal().find((e) => e.type === 'progress');
      assert.equal(progress.value, -i);
      assert.equal(ja[i].journal().find((e) => e.type === 'progress').value, i / 200);
    }
  }
  // One module's messages in a row while its memory grows (long error messages are copied
  // into it): each is read into the grown memory, not into the old buffer.
  const grown = [];
  for (let i = 0; i < 40; i++) grown.push(eb.ep.submit({ i }));
  const waits = grown.map((j) => j.wait());
  const memory = (glue) => glue.initSync({ module: readFileSync(new URL('weft_jobs_bg.wasm', dir)) }).memory.buffer.byteLength;
  const before = memory(jobsGlue);
  for (let i = 0; i < 40; i++) {
    eb.reply({ id: 601 + i, type: 'progress', value: 7 + i });
    eb.reply({ id: 601 + i, type: 'error', message: String(i).padEnd(1 << 18, '.') });
  }
  assert.ok(memory(jobsGlue) > before, 'the jobs module’s memory grew');
  const outs = await Promise.all(waits);
  for (let i = 0; i < 40; i++) {
    assert.equal(outs[i].outcome, 'failed');
    assert.equal(outs[i].message.length, 1 << 18);
    assert.equal(parseInt(outs[i].message, 10), i);
    assert.equal(grown[i].journal().find((e) => e.type === 'progress').value, 7 + i);
  }
  a.dispose();
  b.dispose();
});
