// Job-runtime scenarios with real Workers, shared by the Node tests (worker_threads) and the
// browser tests (DOM Workers in Chromium). Each scenario receives an environment
// `{createRuntime, worker(name)}` where `worker(name)` is the URL of tests/workers/<name>.js
// (or "diffusion" for examples/diffusion/worker.js) and throws on failure.

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}
function eq(actual, expected, message) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${message}: expected ${e}, got ${a}`);
}
async function rejectsWith(promise, code, message) {
  try {
    await promise;
  } catch (err) {
    check(err instanceof Error, `${message}: rejection is an Error`);
    eq(err.code, code, `${message}: error code`);
    return err;
  }
  throw new Error(`${message}: expected a rejection with ${code}`);
}
function throwsWith(fn, code, message) {
  try {
    fn();
  } catch (err) {
    check(err instanceof Error, `${message}: thrown value is an Error`);
    eq(err.code, code, `${message}: error code`);
    return err;
  }
  throw new Error(`${message}: expected an error with ${code}`);
}
const types = (job) => job.journal().map((e) => e.type);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Resolves at the first journal event of `type` (replaying history). */
function firstEvent(job, type) {
  return new Promise((resolve) => {
    const stop = job.observe((d) => {
      if (d.type === type) {
        stop();
        resolve(d);
      }
    });
  });
}

/** A diffusion payload that runs for a few seconds (long enough to cancel mid-run). */
const LONG = { points: 800, simTime: 5, chunkMs: 4 };

export const scenarios = {
  async 'cancel before start: cancelled, never started, the worker never saw it'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('diffusion'), { hello: 'await' });
    const job = ep.submit(LONG);
    eq(job.state, 'queued', 'queued until the hello');
    eq(job.cancel('changed my mind'), 'cancelled_before_start', 'cancel status');
    const out = await job.wait();
    eq(out, { outcome: 'cancelled', evidence: 'never_started' }, 'outcome');
    eq(types(job), ['submitted', 'cancel_requested', 'outcome'], 'journal');
    const probe = ep.submit({ points: 20, simTime: 0.0001 });
    eq((await probe.wait()).outcome, 'succeeded', 'probe');
    eq(probe.info.wireId, 1, 'the probe is the first run the worker ever received');
    rt.close();
  },

  async 'cancel while running, acknowledged by the worker'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('diffusion'));
    const job = ep.submit(LONG);
    await firstEvent(job, 'progress');
    eq(job.cancel(), 'requested', 'cancel status');
    eq(job.state, 'running', 'a cancel request alone changes no outcome');
    const out = await job.wait();
    eq(out, { outcome: 'cancelled', evidence: 'acknowledged' }, 'outcome');
    const t = types(job);
    check(t.indexOf('cancel_requested') < t.indexOf('cancel_acknowledged'), 'request before acknowledgement');
    eq(t.at(-1), 'outcome', 'outcome last');
    check(!t.includes('no_acknowledgement'), 'no quiet-period evidence when acknowledged');
    rt.close();
  },

  async 'cancel while running without acknowledgement: cancelled once quiet, and says so'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('aiui'), { hello: 'skip', quietMs: 150 });
    const job = ep.submit({ chunks: 400, chunkMs: 5 });
    await firstEvent(job, 'progress');
    eq(job.cancel(), 'requested', 'cancel status');
    const out = await job.wait();
    eq(out.outcome, 'cancelled', 'outcome');
    eq(out.evidence, 'quiet_no_ack', 'evidence');
    const j = job.journal();
    const noAck = j.find((e) => e.type === 'no_acknowledgement');
    check(noAck && /no acknowledgement available/.test(noAck.note), 'the journal says no acknowledgement was available');
    check(!j.some((e) => e.type === 'cancel_acknowledged'), 'no acknowledgement recorded');
    eq(job.info.capabilities, { input: false, cancelAck: false, errorCode: false }, 'base protocol capabilities');
    rt.close();
  },

  async 'cancelling only the wait (signal or timeout) leaves the job running'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('diffusion'));
    const job = ep.submit({ points: 300, simTime: 0.3, chunkMs: 4 });
    const ac = new AbortController();
    const w = job.wait({ signal: ac.signal });
    ac.abort(new Error('the user closed the panel'));
    const err = await rejectsWith(w, 'WAIT_CANCELLED', 'aborted wait');
    eq(err.name, 'AbortError', 'aborted wait is an AbortError');
    await rejectsWith(job.wait({ timeoutMs: 20 }), 'WAIT_TIMED_OUT', 'wait timeout');
    check(['queued', 'running'].includes(job.state), 'job untouched');
    const pre = new AbortController();
    pre.abort();
    await rejectsWith(job.wait({ signal: pre.signal }), 'WAIT_CANCELLED', 'pre-aborted signal');
    eq((await job.wait()).outcome, 'succeeded', 'the job completes');
    check(!types(job).includes('cancel_requested'), 'no cancel was requested');
    rt.close();
  },

  async 'a job outlives the turn that started it and can be cancelled later'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('diffusion'));
    const turn = new AbortController();
    const job = ep.submit(LONG, { owner: 'agent', origin: { thread: 'th', turn: 'turn-1', toolCall: 'call-7' } });
    const turnWait = job.wait({ signal: turn.signal }).catch((e) => e.code);
    await firstEvent(job, 'progress');
    turn.abort(); // the turn ends
    eq(await turnWait, 'WAIT_CANCELLED', "the turn's wait ended");
    await sleep(30);
    eq(job.state, 'running', 'the job outlived the turn');
    eq(job.cancel('turn-2 decided to stop it'), 'requested', 'later cancel');
    eq((await job.wait()).outcome, 'cancelled', 'outcome');
    const notes = rt.readMailbox('agent');
    eq(notes.length, 1, 'one completion note');
    eq(notes[0].origin, { thread: 'th', turn: 'turn-1', toolCall: 'call-7' }, 'note attributed to the original turn');
    eq(rt.readMailbox('agent').length, 0, 'reading the mailbox takes the notes');
    rt.close();
  },

  async 'two concurrent runs on one Worker, one cancelled'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('diffusion'));
    const a = ep.submit({ points: 300, simTime: 0.15, chunkMs: 3 });
    const b = ep.submit(LONG);
    await Promise.all([firstEvent(a, 'progress'), firstEvent(b, 'progress')]);
    eq(b.cancel(), 'requested', 'cancel b');
    const [oa, ob] = await Promise.all([a.wait(), b.wait()]);
    eq(oa.outcome, 'succeeded', 'a succeeded');
    eq(ob, { outcome: 'cancelled', evidence: 'acknowledged' }, 'b cancelled');
    check(!types(a).some((t) => t.startsWith('cancel')), 'no cancel events on a');
    check(a.journal().every((e) => e.job === a.id) && b.journal().every((e) => e.job === b.id), 'events on the right job');
    check(a.info.wireId !== b.info.wireId, 'distinct wire ids');
    rt.close();
  },

  async 'a Worker that crashes mid-run: the job is lost, with the evidence'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('crash'));
    const job = ep.submit({});
    const out = await job.wait();
    eq(out.outcome, 'lost', 'outcome');
    check(/simulated crash/.test(out.reason), `the reason carries the error: ${out.reason}`);
    const t = types(job);
    check(t.includes('terminated'), 'terminated recorded');
    check(t.indexOf('progress') < t.indexOf('terminated'), 'progress before the crash kept');
    throwsWith(() => ep.submit({}), 'ENDPOINT_CLOSED', 'submit after the crash');
    rt.close();
  },

  async 'unknown ids: cancel of a disposed job, replies for runs never issued'({ createRuntime, worker }) {
    const rt = createRuntime();
    eq(rt.job(424242), undefined, 'no such job');
    const ep = rt.openWorker(worker('diffusion'));
    const job = ep.submit({ points: 20, simTime: 0.0001 }, { owner: 'tmp' });
    await job.wait();
    rt.closeOwner('tmp');
    throwsWith(() => job.cancel(), 'UNKNOWN_JOB', 'cancel after the owner closed');
    const ep2 = rt.openWorker(worker('misbehave'));
    await ep2.submit({}).wait();
    const ev = ep2.info.events.find((e) => e.type === 'unknown_run');
    check(ev && ev.id === 999999 && ev.reply === 'done', 'reply for a run never issued recorded on the endpoint');
    rt.close();
  },

  async 'a late done after the cancel is late evidence, not a second completion'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('stubborn'), { hello: 'skip', quietMs: 80 });
    const job = ep.submit({ ms: 400 }, { owner: 'agent' });
    await sleep(20);
    job.cancel();
    eq((await job.wait()).evidence, 'quiet_no_ack', 'cancelled once quiet');
    // The worker finishes its 400 ms anyway; under load its start (and so its late done) may
    // come later than 400 ms after the submit, so wait for the late record (bounded).
    for (let t = 0; t < 200 && job.journal().at(-1)?.type !== 'late_evidence'; t++) await sleep(50);
    const j = job.journal();
    const late = j.at(-1);
    eq(late.type, 'late_evidence', 'late record appended');
    eq(late.reply.type, 'done', 'late done');
    eq(late.reply.value, 'finished anyway', 'late value kept as evidence');
    eq(job.outcome.outcome, 'cancelled', 'the outcome is unchanged');
    eq(j.filter((e) => e.type === 'outcome').length, 1, 'exactly one outcome');
    eq(rt.readMailbox('agent').length, 1, 'one note');
    rt.close();
  },

  async 'malformed replies are protocol errors and corrupt no run'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('misbehave'));
    const a = ep.submit({ n: 1 });
    const b = ep.submit({ n: 2 });
    eq((await a.wait()).value, 'ok', 'a completes');
    eq((await b.wait()).value, 'ok', 'b completes');
    const info = ep.info;
    check(info.protocolErrors >= 10, `protocol errors recorded on the endpoint (${info.protocolErrors})`);
    const violations = info.events.filter((e) => e.type === 'protocol_error').map((e) => e.violation.violation);
    for (const v of ['not_an_object', 'missing_id', 'bad_id', 'unknown_type', 'wrong_field_type']) {
      check(violations.includes(v), `violation ${v} recorded`);
    }
    eq(a.journal().filter((e) => e.type === 'protocol_error').length, 2, "a's journal shows the two errors naming it");
    eq(info.state, 'ready', 'the endpoint keeps serving');
    rt.close();
  },

  async 'structured input: delivered vs applied; unsupported input refused'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('diffusion'));
    const job = ep.submit(LONG);
    await firstEvent(job, 'started');
    eq(job.send({ snapshot: true }), 'input-1', 'input id');
    await firstEvent(job, 'input_applied');
    job.send({ bogus: 1 }, { inputId: 'bad' });
    await firstEvent(job, 'input_rejected');
    const t = job.journal().filter((e) => e.type.startsWith('input'));
    eq(t.map((e) => [e.type, e.inputId]), [['input_delivered', 'input-1'], ['input_applied', 'input-1'], ['input_delivered', 'bad'], ['input_rejected', 'bad']], 'input records');
    job.cancel();
    await job.wait();
    throwsWith(() => job.send({ snapshot: true }), 'JOB_NOT_RUNNING', 'input after the end');
    const aiui = rt.openWorker(worker('aiui'), { hello: 'skip' });
    const plain = aiui.submit({ chunks: 100 });
    throwsWith(() => plain.send({ x: 1 }), 'INPUT_UNSUPPORTED', 'input to a worker without the capability');
    eq(plain.journal().at(-1).type, 'input_rejected', 'the refusal is recorded');
    rt.close();
  },

  async 'a slow observer is told exactly which events it missed'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('diffusion'));
    const job = ep.submit({ points: 200, simTime: 0.2, chunkMs: 2 });
    const it = job.events({ capacity: 3 });
    await job.wait();
    const seen = new Set();
    let missed = 0;
    for await (const d of it) {
      if (d.type === 'missed') {
        missed++;
        for (let s = d.from; s <= d.to; s++) seen.add(s);
      } else seen.add(d.seq);
    }
    const n = job.journal().length;
    check(missed >= 1, 'the observer fell behind');
    eq(seen.size, n, 'delivered + missed cover the whole journal exactly');
    check(n > 5, 'many events recorded');
    rt.close();
  },

  async 'reuse keys: equal requests stay separate unless reuse is asked for'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('diffusion'));
    const p = { points: 20, simTime: 0.0001 };
    const a = ep.submit(p);
    const b = ep.submit(p);
    check(a.id !== b.id, 'separate jobs');
    const c = ep.submit(p, { reuseKey: 'k' });
    const d = ep.submit({ ...p }, { reuseKey: 'k' });
    eq([d.id, d.reused], [c.id, true], 'reused');
    throwsWith(() => ep.submit({ points: 30 }, { reuseKey: 'k' }), 'REUSE_CONFLICT', 'different payload');
    await Promise.all([a.wait(), b.wait(), c.wait()]);
    rt.close();
  },

  async 'close owner: explicit outcomes, endpoint terminated'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('diffusion'), { owner: 'agent', maxConcurrent: 1 });
    const done = ep.submit({ points: 20, simTime: 0.0001 }, { owner: 'agent' });
    await done.wait();
    const running = ep.submit(LONG, { owner: 'agent' });
    const queued = ep.submit(LONG, { owner: 'agent' });
    await firstEvent(running, 'progress');
    const report = rt.closeOwner('agent');
    eq(report.jobs.map((j) => [j.job, j.was, j.outcome]), [
      [done.id, 'succeeded', 'succeeded'],
      [running.id, 'running', 'lost'],
      [queued.id, 'queued', 'failed'],
    ], 'report');
    eq(report.endpoints, [ep.id], 'endpoint terminated');
    eq(report.unreadNotes.length, 1, 'the unread note is handed back');
    eq(rt.jobs({ owner: 'agent' }).length, 0, 'disposed');
    rt.close();
  },
  async 'a burst through a batching Worker records the journals a non-batching one records'({ createRuntime, worker }) {
    // One sync loop of submits (successes, progress, failures, cancels of runs just sent);
    // the same loop against quick.js (batch) and quick-single.js (no batch).
    const N = 700;
    const payload = (i) => (i % 11 === 0 ? { fail: `f${i}` } : i % 5 === 0 ? { n: i, progress: i / N } : { n: i % 13 });
    const burst = async (name) => {
      const rt = createRuntime();
      const ep = rt.openWorker(worker(name));
      // Ready first (its hello arrived): the burst goes to a running worker.
      await ep.submit({ n: 1 }).wait();
      const jobs = [];
      for (let i = 0; i < N; i++) {
        jobs.push(ep.submit(payload(i)));
        if (i % 97 === 50) jobs[i - 3].cancel('in the burst');
      }
      const outs = await Promise.all(jobs.map((j) => j.wait()));
      // A run's cancel may arrive after its done: late evidence, recorded after the outcome.
      await sleep(50);
      // Times differ between runs; a run's capabilities differ by `batch` only.
      const journals = jobs.map((j) =>
        j.journal().map(({ at, ...e }) => (e.capabilities ? { ...e, capabilities: { ...e.capabilities, batch: undefined } } : e)),
      );
      const info = ep.info;
      rt.close();
      return { outs, journals, info };
    };
    const batched = await burst('quick');
    const single = await burst('quick-single');
    eq(batched.info.capabilities.batch, true, 'quick.js announces batch');
    eq(single.info.capabilities.batch, undefined, 'quick-single.js does not');
    eq(batched.outs, single.outs, 'outcomes');
    for (let i = 0; i < N; i++) eq(batched.journals[i], single.journals[i], `journal of job ${i + 1}`);
    check(batched.journals.some((j) => j.some((e) => e.type === 'late_evidence')), 'a cancel after a done is late evidence');
    eq(single.info.framesSent, 1 + N + Math.floor((N - 51) / 97) + 1, 'one frame per request without batch');
    check(batched.info.framesSent < single.info.framesSent / 20, `far fewer frames with batch (${batched.info.framesSent})`);
    eq(batched.info.protocolErrors + single.info.protocolErrors, 0, 'no protocol errors');
  },

  async 'batch frames: a burst of 1000 goes out in 5 frames and its replies come back in few'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('quick'));
    const first = ep.submit({ n: 3 });
    eq((await first.wait()).value, 3, 'first');
    const before = ep.info;
    eq([before.framesSent, before.framesReceived], [1, 2], 'a lone run and its reply (after the hello) go alone');
    const jobs = [];
    for (let i = 0; i < 1000; i++) jobs.push(ep.submit({ n: i % 7 }));
    // One lone run, then three frames of 256 at the bound; the rest waits for the microtask.
    eq(ep.info.framesSent - before.framesSent, 4, 'frames sent during the loop');
    await Promise.resolve();
    eq(ep.info.framesSent - before.framesSent, 5, 'the rest at the end of the turn');
    const outs = await Promise.all(jobs.map((j) => j.wait()));
    check(outs.every((o, i) => o.outcome === 'succeeded' && o.value === [0, 0, 1, 3, 6, 10, 15][i % 7]), 'every result');
    // At least one frame of replies per frame of runs; more when a delivery outlasts the
    // worker's hold bound (about 1 ms of its own time: a count that depends on its speed).
    const back = ep.info.framesReceived - before.framesReceived;
    check(back >= 5 && back <= 250, `frames of replies: at least one per frame of runs, far fewer than one per reply (${back})`);
    eq(ep.info.protocolErrors, 0, 'no protocol errors');
    // Without batch: one frame per message each way.
    const single = rt.openWorker(worker('quick-single'));
    const s = [];
    for (let i = 0; i < 300; i++) s.push(single.submit({ n: i % 7 }));
    await Promise.all(s.map((j) => j.wait()));
    eq([single.info.framesSent, single.info.framesReceived], [300, 301], 'frames without batch (hello included)');
    rt.close();
  },

  async 'batch, host side: a held or queued payload is the one passed at submit; one that cannot be cloned is refused at submit'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('quick'));
    // Queued until the hello: the payloads are captured at the call, not when they leave.
    const p = { n: 0 };
    const queued = [];
    for (let i = 1; i <= 3; i++) { p.n = i; queued.push(ep.submit(p)); }
    eq((await Promise.all(queued.map((j) => j.wait()))).map((o) => o.value), [0, 1, 3], 'queued before the hello');
    // Ready: the first run goes at once, the rest are held for one frame.
    const held = [];
    for (let i = 4; i <= 7; i++) { p.n = i; held.push(ep.submit(p)); }
    p.n = 100;
    eq((await Promise.all(held.map((j) => j.wait()))).map((o) => o.value), [6, 10, 15, 21], 'held for a batch frame');
    // A payload postMessage could not clone throws at submit and submits nothing; the runs
    // around it still go out (nothing is lost, nothing waits for a flush that never comes).
    const a = ep.submit({ n: 3 });
    let refused = null;
    try {
      ep.submit({ n: 1, f() {} });
    } catch (err) {
      refused = err;
    }
    eq(refused?.name, 'DataCloneError', 'an uncloneable payload is refused at submit (as postMessage refuses it)');
    const b = ep.submit({ n: 4 });
    eq(b.id, a.id + 1, 'nothing was submitted in between (job ids are dense)');
    eq([(await a.wait()).value, (await b.wait()).value], [3, 6], 'the runs around it');
    // Later turns keep batching (a failed submit leaves no stale flush state).
    await Promise.resolve();
    const later = [];
    for (let i = 0; i < 10; i++) later.push(ep.submit({ n: 2 }));
    eq((await Promise.all(later.map((j) => j.wait({ timeoutMs: 5000 })))).every((o) => o.value === 1), true, 'a later burst');
    // Submitted from a listener (inside the runtime's pump): posted once the listener returns,
    // the payload still as it was at the call.
    const q = { n: 0 };
    let fromListener = null;
    const off = rt.on('finished', () => {
      if (fromListener) return;
      q.n = 4;
      fromListener = ep.submit(q);
      q.n = 100;
    });
    await ep.submit({ n: 1 }).wait();
    off?.();
    eq((await fromListener.wait()).value, 6, 'a run submitted from a listener');
    eq(ep.info.protocolErrors, 0, 'no protocol errors');
    rt.close();
    // A runtime with an output handler of its own drains again after a flush: it must stop.
    const rt2 = createRuntime({ onOutput: () => {} });
    const ep2 = rt2.openWorker(worker('quick'));
    await ep2.submit({ n: 2 }).wait();
    const two = [ep2.submit({ n: 3 }), ep2.submit({ n: 4 })];
    eq((await Promise.all(two.map((j) => j.wait({ timeoutMs: 5000 })))).map((o) => o.value), [3, 6], 'held runs with an output handler');
    rt2.close();
  },

  async "batch, worker side: held replies are snapshots, a throwing handler or an uncloneable reply stops nothing, a script's own batch joins the frame"({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('batch-edges'));
    eq((await ep.submit({ v: 0 }).wait()).value, 0, 'ready');
    eq(ep.info.capabilities.batch, true, 'batch announced');
    // One burst: the first run goes alone, the others in one batch frame.
    const sent = ep.info.framesSent;
    const payloads = [{ v: 1 }, { reuse: 3 }, { v: 'a' }, { boom: true }, { v: 'b' }, { bad: true }, { own: true }, { v: 'c' }];
    const jobs = payloads.map((p) => ep.submit(p));
    await Promise.resolve();
    eq(ep.info.framesSent - sent, 2, 'the burst went in two frames');
    // (A bound on the wait only so that a reply never sent fails the check below, by name.)
    const outs = await Promise.all(jobs.map((j) => j.wait({ timeoutMs: 10_000 }).catch((e) => ({ outcome: e.code }))));
    const progress = (j) => j.journal().filter((e) => e.type === 'progress').map((e) => e.value);
    eq(outs.map((o) => o.outcome), ['succeeded', 'succeeded', 'succeeded', 'succeeded', 'succeeded', 'failed', 'succeeded', 'succeeded'], 'outcomes');
    eq(progress(jobs[1]), [1, 2, 3], 'a reused progress object: each post as it was then');
    eq(outs[3].value, 'listener', 'a listener after a throwing onmessage still ran');
    eq([outs[2].value, outs[4].value, outs[7].value], ['a', 'b', 'c'], 'the rest of the batch after the throw was delivered');
    eq(outs[5].code, 'DataCloneError', 'the DataCloneError was thrown at the post, where the script caught it');
    eq([outs[6].value, progress(jobs[6])], ['own', [0.25, 0.5, 0.75]], "the script's own batch frame");
    eq((await ep.submit({ errors: true }).wait()).value, 1, 'the throw was reported to the worker as an uncaught error');
    eq((await ep.submit({ listeners: true }).wait()).value, [1, 1], '`once` and `signal` listener options');
    eq(ep.info.protocolErrors, 0, 'no protocol errors (no batch inside a batch)');
    eq(ep.info.state, 'ready', 'the worker lives on');
    rt.close();
  },

  async 'batch, worker side: a CPU-bound handler does not hold the replies of a batch until its end'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('batch-edges'));
    await ep.submit({ v: 0 }).wait();
    const N = 6;
    const sent = ep.info.framesSent;
    const received = ep.info.framesReceived;
    // Each run is 5 ms of the worker's own time (more than the hold bound).
    const jobs = Array.from({ length: N }, (_, i) => ep.submit({ spin: 5, v: i }));
    await Promise.resolve();
    eq(ep.info.framesSent - sent, 2, 'the first run alone, the others in one batch frame');
    let lastWhenSecond;
    const stop = jobs[1].observe((d) => {
      if (d.type === 'outcome') lastWhenSecond = jobs[N - 1].outcome ?? 'none yet';
    });
    const outs = await Promise.all(jobs.map((j) => j.wait()));
    stop();
    eq(outs.map((o) => o.value), [0, 1, 2, 3, 4, 5], 'results');
    eq(lastWhenSecond, 'none yet', "the first reply of the batch arrived before the batch's last run ended");
    eq(ep.info.framesReceived - received, N, 'one frame per reply');
    rt.close();
  },

  async 'batch, worker side: close() right after replies sends them first'({ createRuntime, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('batch-edges'));
    await ep.submit({ v: 0 }).wait();
    // The first alone, the others in one batch frame; the last closes the worker.
    const jobs = [{ v: 1 }, { v: 2 }, { v: 3, close: true }].map((p) => ep.submit(p));
    const outs = await Promise.all(jobs.map((j) => j.wait()));
    eq(outs, [1, 2, 3].map((value) => ({ outcome: 'succeeded', value })), 'outcomes');
    rt.close();
  },
};
