// Remote endpoints of the JS runtime against a scripted WebSocket double (`opts.WebSocket`): the
// runtime carries the core's connect / frame / close_socket outputs and reports the socket's
// open, frames and close; the test plays the host's frames. No server, no real socket.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createApp, createRuntime, WeftError } from 'weft';

const URL_ = 'ws://127.0.0.1:9/api/jobs/remote';
const LIMITS = { maxFrameBytes: 1 << 20, replayFrames: 4096, replayBytes: 4 << 20 };
const HELLO = { type: 'hello', protocol: 'weft-worker/1', capabilities: { input: false, cancelAck: true, errorCode: true } };

/** A WebSocket double: records what the client sends; the test opens, feeds and drops it. */
function fakeSockets() {
  const sockets = [];
  let refuse = false;
  class FakeSocket {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.sent = [];
      this.closedWith = null;
      this.onopen = this.onmessage = this.onclose = this.onerror = null;
      sockets.push(this);
      // A refused connect: the browser's error + close, on a later task.
      if (refuse) setTimeout(() => this.drop(1006), 1);
    }
    send(text) {
      assert.equal(this.readyState, 1, 'sent on a socket that is not open');
      this.sent.push(JSON.parse(text));
    }
    close(code, reason) {
      this.closedWith = { code, reason };
      this.readyState = 3;
    }
    // ----- the test's side -----
    open() {
      this.readyState = 1;
      this.onopen?.({});
    }
    serve(frame) {
      this.onmessage?.({ data: typeof frame === 'string' ? frame : JSON.stringify(frame) });
    }
    drop(code = 1006) {
      this.readyState = 3;
      this.onerror?.({ message: 'connection reset' });
      this.onclose?.({ code, reason: '' });
    }
    msgs() {
      return this.sent.filter((f) => f.t === 'msg');
    }
  }
  return {
    FakeSocket,
    sockets,
    set refuse(v) {
      refuse = v;
    },
  };
}

const until = async (cond, what, ms = 5000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
};

/** Opens a remote endpoint and plays welcome + the host worker's hello. */
function openLive(rt, fake, opts = {}) {
  const ep = rt.openRemote(URL_, { token: 'tok', script: 'ticker', WebSocket: fake.FakeSocket, heartbeatMs: 60_000, ...opts });
  const ws = fake.sockets.at(-1);
  ws.open();
  ws.serve({ t: 'welcome', session: 's-1', secret: 'sec', windowMs: opts.resumeWindowMs ?? 30_000, heartbeatMs: 60_000, limits: LIMITS });
  ws.serve({ t: 'msg', seq: 1, ack: 0, body: HELLO });
  return { ep, ws };
}

test('remote (fake socket): hello, progress, a disconnect resumed with the cancel delivered, nothing lost', async () => {
  const rt = createRuntime();
  const fake = fakeSockets();
  const ep = rt.openRemote(URL_, { token: 'tok', script: 'ticker', WebSocket: fake.FakeSocket, resumeWindowMs: 3000, heartbeatMs: 60_000, label: 'ticker' });
  assert.equal(fake.sockets.length, 1);
  const ws = fake.sockets[0];
  assert.equal(ws.url, URL_);
  assert.equal(ep.info.remote.state, 'connecting');
  ws.open();
  assert.equal(ws.sent.length, 1);
  const hello = ws.sent[0];
  assert.deepEqual(
    { t: hello.t, token: hello.token, open: hello.open, windowMs: hello.windowMs, heartbeatMs: hello.heartbeatMs, label: hello.label },
    { t: 'hello', token: 'tok', open: { script: 'ticker' }, windowMs: 3000, heartbeatMs: 60_000, label: 'ticker' },
  );
  ws.serve({ t: 'welcome', session: 's-1', secret: 'sec', windowMs: 3000, heartbeatMs: 60_000, limits: LIMITS });
  assert.equal(ep.info.remote.state, 'live');
  assert.equal(ep.info.remote.session, 's-1');

  // Runs queue until the host forwards its worker's hello.
  const job = ep.submit({ ticks: 3 });
  assert.equal(job.state, 'queued');
  assert.equal(ws.msgs().length, 0);
  ws.serve({ t: 'msg', seq: 1, ack: 0, body: HELLO });
  assert.equal(job.state, 'running');
  const [run] = ws.msgs();
  assert.equal(run.seq, 1);
  assert.equal(run.body.type, 'run');
  assert.deepEqual(run.body.payload, { ticks: 3 });
  const wire = run.body.id;
  ws.serve({ t: 'accepted', seq: 2, ack: 1, id: wire, job: 41 });
  ws.serve({ t: 'msg', seq: 3, ack: 1, body: { id: wire, type: 'progress', value: { tick: 1 } } });
  // A frame that is not JSON is the endpoint's protocol error; the run is untouched.
  ws.serve('{not json');
  assert.equal(job.state, 'running');
  assert.ok(ep.info.events.some((e) => e.type === 'protocol_error'), JSON.stringify(ep.info.events));
  assert.equal(ep.info.remote.lastSeq, 3);

  // The socket drops: nothing is lost yet; a cancel is recorded and waits for the resume.
  ws.drop(1006);
  assert.equal(ep.info.remote.state, 'waiting');
  assert.equal(ep.info.remote.disconnects, 1);
  assert.equal(job.state, 'running');
  assert.equal(job.cancel('stop'), 'requested_while_disconnected');
  await until(() => fake.sockets.length === 2, 'the reconnect');
  const ws2 = fake.sockets[1];
  assert.equal(ws.closedWith, null, 'the dropped socket is not closed again');
  ws2.open();
  const resume = ws2.sent[0];
  assert.deepEqual(
    { t: resume.t, token: resume.token, session: resume.session, secret: resume.secret, ack: resume.ack },
    { t: 'resume', token: 'tok', session: 's-1', secret: 'sec', ack: 3 },
  );
  // The host applied the run (client seq 1): the cancel (seq 2) is replayed, once.
  ws2.serve({ t: 'resumed', ack: 1 });
  assert.equal(ep.info.remote.state, 'live');
  const cancels = ws2.msgs().filter((m) => m.body.type === 'cancel');
  assert.equal(cancels.length, 1, JSON.stringify(ws2.sent));
  assert.equal(cancels[0].body.id, wire);
  assert.equal(ws2.msgs().filter((m) => m.body.type === 'run').length, 0, 'the applied run was replayed');
  // What the host sent meanwhile arrives in order; a replay of an applied frame is ignored.
  ws2.serve({ t: 'msg', seq: 3, ack: 2, body: { id: wire, type: 'progress', value: { tick: 1 } } });
  ws2.serve({ t: 'msg', seq: 4, ack: 2, body: { id: wire, type: 'progress', value: { tick: 2 } } });
  ws2.serve({ t: 'msg', seq: 5, ack: 2, body: { id: wire, type: 'cancelled' } });
  const out = await job.wait();
  assert.deepEqual(out, { outcome: 'cancelled', evidence: 'acknowledged' });
  const journal = job.journal();
  assert.deepEqual(journal.filter((e) => e.type === 'progress').map((e) => e.value.tick), [1, 2]);
  const accepted = journal.find((e) => e.type === 'remote_accepted');
  assert.equal(accepted.session, 's-1');
  assert.equal(accepted.remoteJob, 41);
  assert.deepEqual(job.info.remote, { session: 's-1', job: 41 });
  assert.equal(ep.info.remote.lastSeq, 5);
  assert.equal(journal.filter((e) => e.type === 'cancel_requested').length, 1);
  // Closing the runtime ends the session deliberately: a `close` frame, then the socket closes.
  rt.close();
  assert.equal(ws2.sent.at(-1).t, 'close');
  assert.equal(ws2.closedWith?.code, 1000);
  assert.equal(fake.sockets.length, 2);
});

test('remote (fake socket): past the resumption window running jobs are lost with remote_disconnected', async () => {
  const rt = createRuntime();
  const fake = fakeSockets();
  const { ep, ws } = openLive(rt, fake, { resumeWindowMs: 400 });
  const running = ep.submit({ ticks: 100 });
  const [run] = ws.msgs();
  ws.serve({ t: 'accepted', seq: 2, ack: 1, id: run.body.id, job: 7 });
  ws.serve({ t: 'msg', seq: 3, ack: 1, body: { id: run.body.id, type: 'progress', value: { tick: 1 } } });
  fake.refuse = true;
  ws.drop(1006);
  const queued = ep.submit({ ticks: 1 });
  assert.equal(queued.state, 'queued');
  assert.throws(() => running.send({ x: 1 }), (e) => e.code === 'REMOTE_DISCONNECTED' || e.code === 'INPUT_UNSUPPORTED');
  const out = await running.wait();
  assert.equal(out.outcome, 'lost');
  assert.equal(out.evidence, 'remote_disconnected');
  const q = await queued.wait();
  assert.equal(q.outcome, 'failed');
  assert.equal(q.started, false);
  assert.equal(ep.info.remote.state, 'closed');
  assert.ok(fake.sockets.length >= 2, 'no reconnect was attempted');
  const attempts = fake.sockets.length;
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(fake.sockets.length, attempts, 'it kept reconnecting after the window');
  rt.close();
});

test('remote (fake socket): terminate sends close and loses running jobs as terminated; refusals', async () => {
  const rt = createRuntime();
  const fake = fakeSockets();
  const { ep, ws } = openLive(rt, fake);
  const job = ep.submit({ ticks: 100 });
  assert.equal(ws.msgs().length, 1);
  ep.terminate('done here');
  assert.equal(ws.sent.at(-1).t, 'close');
  assert.equal(ws.closedWith?.code, 1000);
  const out = await job.wait();
  assert.equal(out.outcome, 'lost');
  assert.equal(out.evidence, 'terminated');

  // A refused hello closes the endpoint before any run.
  const ep2 = rt.openRemote(URL_, { token: 'bad', kind: 'sleep', WebSocket: fake.FakeSocket });
  const ws2 = fake.sockets.at(-1);
  const early = ep2.submit({ ms: 10 });
  ws2.open();
  assert.deepEqual(ws2.sent[0].open, { kind: 'sleep' });
  ws2.serve({ t: 'refused', code: 'REMOTE_UNAUTHENTICATED', message: 'bad token' });
  const e = await early.wait();
  assert.equal(e.outcome, 'failed');
  assert.equal(e.started, false);
  assert.equal(ep2.info.remote.state, 'closed');
  assert.notEqual(ws2.closedWith, null, 'the refused socket was left open');

  // Argument and environment refusals are WeftErrors with codes.
  const code = (fn) => {
    try {
      fn();
    } catch (err) {
      return err.code;
    }
    return 'no error';
  };
  assert.equal(code(() => rt.openRemote('ws://example.com/api/jobs/remote', { token: 't', script: 'x', WebSocket: fake.FakeSocket })), 'INVALID_ARGUMENT');
  assert.equal(code(() => rt.openRemote(URL_, { token: 't', script: 'x', kind: 'y', WebSocket: fake.FakeSocket })), 'INVALID_ARGUMENT');
  const saved = Object.getOwnPropertyDescriptor(globalThis, 'WebSocket');
  delete globalThis.WebSocket;
  try {
    assert.equal(code(() => rt.openRemote(URL_, { token: 't', script: 'x' })), 'UNSUPPORTED');
  } finally {
    if (saved) Object.defineProperty(globalThis, 'WebSocket', saved);
  }
  assert.ok(new WeftError('X', 'y') instanceof Error);
  rt.close();
});

test("remote (fake socket): an app's Worker cell runs on a remote endpoint of the app's runtime", async () => {
  const app = createApp();
  const fake = fakeSockets();
  const { ep, ws } = openLive(app.runtime, fake);
  app.load({
    controls: [{ name: 'a', type: 'number', min: 0, max: 10, step: 1, value: 3 }],
    cells: [{ name: 'double', deps: ['a'], worker: ep }],
  });
  const [run] = ws.msgs();
  assert.equal(run.body.type, 'run');
  assert.deepEqual(run.body.payload, { a: 3 });
  const wire = run.body.id;
  ws.serve({ t: 'accepted', seq: 2, ack: 1, id: wire, job: 7 });
  ws.serve({ t: 'msg', seq: 3, ack: 1, body: { id: wire, type: 'progress', value: 0.5 } });
  assert.equal(app.snapshot().cells.double.progress, 0.5, 'the remote run moves its cell');
  ws.serve({ t: 'msg', seq: 4, ack: 1, body: { id: wire, type: 'done', value: 6 } });
  const cell = app.snapshot().cells.double;
  assert.deepEqual([cell.state, cell.value], ['ready', 6]);
  app.dispose();
});

// What crosses a remote endpoint is JSON data (its wire is JSON text). A value that is not is
// refused at the call with INVALID_JSON, as a Worker endpoint refuses what it cannot clone
// (DataCloneError): no job, no event, no frame, the input id free again; nothing is dropped or
// changed silently.
function notJson() {
  const cycle = { n: 1 };
  cycle.self = cycle;
  return [
    ['a function', { n: 1, f: () => 1 }, /payload\.f is a function/],
    ['a cycle', cycle, /payload\.self is a cycle: it refers back to payload/],
    ['a BigInt', { n: 10n }, /payload\.n is a BigInt/],
  ];
}

test('remote (fake socket): a payload or input that is not JSON data is refused with INVALID_JSON, nothing recorded; valid ones go on', async () => {
  const rt = createRuntime();
  const fake = fakeSockets();
  const ep = rt.openRemote(URL_, { token: 'tok', script: 'ticker', WebSocket: fake.FakeSocket, heartbeatMs: 60_000 });
  const ws = fake.sockets.at(-1);
  ws.open();
  ws.serve({ t: 'welcome', session: 's-1', secret: 'sec', windowMs: 30_000, heartbeatMs: 60_000, limits: LIMITS });
  ws.serve({ t: 'msg', seq: 1, ack: 0, body: { ...HELLO, capabilities: { ...HELLO.capabilities, input: true } } });
  const job = ep.submit({ ticks: 100 });
  assert.equal(job.state, 'running');
  const sent = () => JSON.stringify(ws.sent);
  const jobsBefore = JSON.stringify(rt.jobs());
  const journal = JSON.stringify(job.journal());
  const framesBefore = sent();

  for (const [what, value, message] of notJson()) {
    // A submit: refused, no job.
    let thrown = null;
    try {
      ep.submit(value);
    } catch (e) {
      thrown = e;
    }
    assert.equal(thrown?.code, 'INVALID_JSON', `${what}: ${thrown}`);
    assert.ok(thrown instanceof Error);
    assert.match(thrown.message, message, what);
    assert.match(thrown.message, /remote endpoint/, what);
    assert.equal(JSON.stringify(rt.jobs()), jobsBefore, `${what}: a job was recorded`);
    // An input: refused, no event, nothing sent; the run goes on.
    thrown = null;
    try {
      job.send(value);
    } catch (e) {
      thrown = e;
    }
    assert.equal(thrown?.code, 'INVALID_JSON', `${what}: ${thrown}`);
    assert.match(thrown.message, new RegExp(message.source.replace(/payload/g, 'input')), what);
    assert.equal(JSON.stringify(job.journal()), journal, `${what}: the journal changed`);
    assert.equal(sent(), framesBefore, `${what}: a frame was sent`);
    assert.equal(job.state, 'running');
  }

  // The input id was not used: the next input is the first.
  assert.equal(job.send({ x: 1 }), 'input-1');
  const input = ws.msgs().at(-1).body;
  assert.deepEqual([input.type, input.inputId, input.value], ['input', 'input-1', { x: 1 }]);
  assert.deepEqual(job.journal().at(-1).type, 'input_delivered');
  // A later valid submit gets the next job id and its run frame.
  const next = ep.submit({ ticks: 1 });
  assert.equal(next.id, job.id + 1);
  assert.deepEqual(ws.msgs().at(-1).body.payload, { ticks: 1 });
  rt.close();
});

test('remote (fake socket): the JSON data rule: undefined properties left out, toJSON applied (a Date as its ISO string), copied at the call; NaN, Infinity, undefined elements, holes, a Map, a typed array, a symbol refused', () => {
  const rt = createRuntime();
  const fake = fakeSockets();
  // Not live yet: the runs queue, and leave once the host's worker says hello.
  const ep = rt.openRemote(URL_, { token: 'tok', script: 'ticker', WebSocket: fake.FakeSocket, heartbeatMs: 60_000 });
  const ws = fake.sockets.at(-1);
  const when = new Date(Date.UTC(2026, 11, 3, 17, 0, 0));
  const payload = { a: 1, gone: undefined, when, nested: { list: [1, 'two', null, true, -0], shared: null }, money: { toJSON: () => '1.50 EUR' } };
  const shared = { s: 1 };
  payload.nested.shared = [shared, shared];
  const queued = ep.submit(payload);
  assert.equal(queued.state, 'queued');
  // Changed after the call: what crosses is the value at the call.
  payload.a = 2;
  payload.nested.list.push('later');
  const expected = { a: 1, when: '2026-12-03T17:00:00.000Z', nested: { list: [1, 'two', null, true, 0], shared: [{ s: 1 }, { s: 1 }] }, money: '1.50 EUR' };
  assert.deepEqual(queued.journal()[0].payload, expected, 'the journal records the JSON data that crosses');
  ws.open();
  ws.serve({ t: 'welcome', session: 's-1', secret: 'sec', windowMs: 30_000, heartbeatMs: 60_000, limits: LIMITS });
  ws.serve({ t: 'msg', seq: 1, ack: 0, body: HELLO });
  assert.equal(queued.state, 'running');
  assert.deepEqual(ws.msgs().at(-1).body.payload, expected);

  const refused = (value) => {
    try {
      ep.submit(value);
    } catch (e) {
      assert.equal(e.code, 'INVALID_JSON', String(e));
      // (What is not JSON data, after the rule's summary.)
      return e.message.slice(e.message.indexOf('): ') + 3);
    }
    return 'accepted';
  };
  // Nested 100 deep crosses (what a frame can carry: the core's MAX_JSON_DEPTH); 101 is refused
  // (beyond 127 the frame's value used to become null).
  const nest = (n) => {
    let v = 1;
    for (let i = 0; i < n; i++) v = i % 2 ? { v } : [v];
    return v;
  };
  assert.equal(refused(nest(100)), 'accepted');
  assert.equal(JSON.stringify(ws.msgs().at(-1).body.payload), JSON.stringify(nest(100)));
  const jobs = rt.jobs().length;
  assert.match(refused(nest(101)), /^payload is nested more than 100 arrays or objects deep/);
  assert.match(refused(nest(200)), /^payload is nested more than 100/);
  assert.match(refused({ x: NaN }), /^payload\.x is NaN/);
  assert.match(refused([1, Infinity]), /^payload\[1\] is Infinity/);
  assert.match(refused(undefined), /^payload is undefined/);
  assert.match(refused([1, undefined]), /^payload\[1\] is undefined/);
  assert.match(refused([1, , 3]), /^payload\[1\] is a hole/);
  assert.match(refused({ m: new Map() }), /^payload\.m is a Map, not a plain object/);
  assert.match(refused({ 'a b': new Float32Array(2) }), /^payload\["a b"\] is a Float32Array/);
  assert.match(refused({ s: Symbol('s') }), /^payload\.s is a symbol/);
  assert.match(refused({ get boom() { throw new Error('no'); } }), /^reading payload\.boom threw: no/);
  assert.equal(rt.jobs().length, jobs, 'a refused submit left a job');
  rt.close();
});
