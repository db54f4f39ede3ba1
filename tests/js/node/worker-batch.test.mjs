// The worker side of `batch` (the package's worker-batch.js) on its own, with a fake clock and
// fake transport: snapshots at the post, the hold bound, a throwing handler, a script's own
// batch frames, transfers, close, and the `message` listener options of weft/worker. The same
// edges with real Workers (Node shim and Chromium) are scenarios in ../scenarios.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRuntime } from 'weft';

const { batching, messageListeners, BATCH_MAX } = await import(new URL('../node_modules/weft/worker-batch.js', import.meta.url));

const HELLO = { type: 'hello', protocol: 'weft-worker/1', capabilities: {} };
const run = (id, payload) => ({ id, type: 'run', payload });
const sizes = (frames) => frames.map(([f]) => (f.type === 'batch' ? f.messages.length : 1));

/** A batching worker side over a fake transport; `onRun(m, post, clock)` handles each run. */
function side(onRun, options = {}) {
  const frames = [];
  const log = [];
  const errors = [];
  const clock = { t: 0 };
  const b = batching(
    // Cloned, with its transfers, as postMessage does.
    (m, t) => {
      const c = structuredClone({ m, t }, { transfer: t ?? [] });
      frames.push(t === undefined ? [c.m] : [c.m, c.t]);
      log.push('frame');
    },
    (m) => {
      log.push(`deliver ${m.id}`);
      onRun(m, b.post, clock);
    },
    { now: () => clock.t, report: (e) => errors.push(e), ...options },
  );
  b.post(HELLO);
  frames.length = 0;
  log.length = 0;
  return { ...b, frames, log, errors, clock };
}

test('a held message is a snapshot: the script may reuse the object it posted', async () => {
  const s = side((m, post) => {
    const prog = { id: m.id, type: 'progress', value: 0 };
    for (let i = 1; i <= 3; i++) {
      prog.value = i;
      post(prog);
    }
  });
  s.receive({ type: 'batch', messages: [run(1), run(2)] });
  assert.deepEqual(
    s.frames[0][0].messages.map((m) => [m.id, m.value]),
    [[1, 1], [1, 2], [1, 3], [2, 1], [2, 2], [2, 3]],
  );
  // Outside a delivery too: the first goes at once, the others wait for the microtask.
  s.frames.length = 0;
  const o = { id: 3, type: 'progress', value: 1 };
  s.post(o);
  o.value = 2;
  s.post(o);
  o.value = 3;
  await Promise.resolve();
  assert.deepEqual(s.frames.map(([f]) => f.value), [1, 2]);
  // Nested values and other objects are snapshots too (what structuredClone makes of them).
  s.frames.length = 0;
  class Point {
    constructor(x) {
      this.x = x;
    }
  }
  const inner = { n: 1, list: [1] };
  s.post({ id: 4, type: 'progress', value: 0 }); // at once: the wire is idle
  s.post({ id: 4, type: 'progress', value: inner });
  inner.n = 2;
  inner.list.push(2);
  s.post({ id: 4, type: 'progress', value: new Point(3) });
  s.post({ id: 4, type: 'progress', value: 'text' });
  assert.throws(() => s.post({ id: 4, type: 'progress', value: Symbol('s') }), { name: 'DataCloneError' });
  assert.throws(() => s.post({ id: 4, type: 'progress', value: () => 1 }), { name: 'DataCloneError' });
  await Promise.resolve();
  assert.deepEqual(s.frames[1][0].messages.map((m) => m.value), [{ n: 1, list: [1] }, { x: 3 }, 'text']);
});

test('a single message: its first reply leaves from the post, no copy; later ones when the delivery ends', () => {
  const s = side((m, post) => {
    const done = { id: m.id, type: 'done', value: 1 };
    post(done);
    s.log.push('posted');
    done.value = 2; // the first went out at the post: as it was then
    post({ id: m.id, type: 'progress', value: 3 });
    post({ id: m.id, type: 'progress', value: 4 });
  });
  s.receive(run(1));
  assert.deepEqual(s.log, ['deliver 1', 'frame', 'posted', 'frame'], 'the first reply left before the handler returned');
  assert.deepEqual(s.frames.map(([f]) => f.value ?? f.messages.map((m) => m.value)), [1, [3, 4]]);
  // The delivery ended with a flush: the wire is idle again.
  s.post({ id: 2, type: 'progress', value: 5 });
  assert.equal(s.frames.length, 3);
});

test('a held Proxy throws DataCloneError at the post, as structuredClone does; an own __proto__ key is kept', async () => {
  const reads = [];
  const proxy = new Proxy({ id: 1, type: 'progress', value: 1 }, { get: (t, k) => (reads.push(k), t[k]) });
  const s = side((m, post) => {
    if (typeof process.getBuiltinModule === 'function') assert.throws(() => post(proxy), { name: 'DataCloneError' });
    else post(proxy); // Node < 20.16 cannot tell a Proxy: copied as the object it shows.
    const parsed = JSON.parse('{"id": 2, "type": "progress", "__proto__": 5, "value": 1}');
    post(parsed);
  });
  s.receive({ type: 'batch', messages: [run(1), run(2)] });
  // (Only its `type`, as any post reads it to tell a hello or a batch.)
  const canTell = typeof process.getBuiltinModule === 'function';
  if (canTell) assert.deepEqual(reads.filter((k) => k !== 'type'), [], 'the Proxy was refused without copying it through its traps');
  else assert.ok(reads.includes('value'), 'copied through its traps');
  assert.deepEqual(
    s.frames[0][0].messages.filter((m) => m.id === 2).map((m) => Object.hasOwn(m, '__proto__') && m.__proto__),
    [5, 5],
    'the own __proto__ key of each held reply',
  );
});

test('an uncloneable message throws its DataCloneError at the post and is not queued', () => {
  const caught = [];
  const s = side((m, post) => {
    try {
      post({ id: m.id, type: 'done', value: m.payload === 'bad' ? { f() {} } : m.payload });
    } catch (err) {
      caught.push(err.name);
      post({ id: m.id, type: 'error', message: err.name });
    }
  });
  s.receive({ type: 'batch', messages: [run(1, 'a'), run(2, 'bad'), run(3, 'c')] });
  assert.deepEqual(caught, ['DataCloneError']);
  assert.deepEqual(s.frames.length, 1);
  assert.deepEqual(s.frames[0][0].messages.map((m) => m.type), ['done', 'error', 'done']);
});

test('a handler that throws is reported and the rest of the batch is delivered', () => {
  const s = side((m, post) => {
    if (m.payload === 'boom') throw new Error('boom');
    post({ id: m.id, type: 'done', value: m.payload });
  });
  s.receive({ type: 'batch', messages: [run(1, 'a'), run(2, 'boom'), run(3, 'c')] });
  assert.deepEqual(s.errors.map((e) => e.message), ['boom']);
  assert.deepEqual(s.frames[0][0].messages.map((m) => m.id), [1, 3]);
  // A single message too.
  s.receive(run(4, 'boom'));
  assert.equal(s.errors.length, 2);
});

test('a held reply waits behind at most the hold bound of the worker’s own work', () => {
  // Each run takes 20 (the bound is 10): its reply leaves before the next run is delivered.
  const slow = side(
    (m, post, clock) => {
      clock.t += 20;
      post({ id: m.id, type: 'done' });
    },
    { holdMs: 10 },
  );
  slow.receive({ type: 'batch', messages: [run(1), run(2), run(3)] });
  assert.deepEqual(slow.log, ['deliver 1', 'frame', 'deliver 2', 'frame', 'deliver 3', 'frame']);
  // Each run takes 1: the replies share frames until the first held one is 10 old.
  const quick = side(
    (m, post, clock) => {
      clock.t += 1;
      post({ id: m.id, type: 'done' });
    },
    { holdMs: 10 },
  );
  quick.receive({ type: 'batch', messages: Array.from({ length: 30 }, (_, i) => run(i)) });
  assert.deepEqual(sizes(quick.frames), [11, 11, 8]);
  // A long run that posts nothing sends what the runs before it left held.
  const mixed = side(
    (m, post, clock) => {
      if (m.payload === 'long') clock.t += 50;
      else post({ id: m.id, type: 'done' });
    },
    { holdMs: 10 },
  );
  mixed.receive({ type: 'batch', messages: [run(1), run(2, 'long'), run(3)] });
  assert.deepEqual(mixed.log, ['deliver 1', 'deliver 2', 'frame', 'deliver 3', 'frame']);
  // Outside a delivery (a loop in a timer): the held ones go when the first is 10 old.
  mixed.frames.length = 0;
  mixed.post({ id: 9, type: 'progress', value: 0 });
  for (let i = 1; i <= 12; i++) {
    mixed.clock.t += 1;
    mixed.post({ id: 9, type: 'progress', value: i });
  }
  assert.deepEqual(sizes(mixed.frames), [1, 11]);
});

test("a script's own batch frame joins the queue, within the bound; alone on an idle wire it goes as it is", async () => {
  const s = side((m, post) => {
    post({ id: m.id, type: 'progress', value: 0 });
    post({ type: 'batch', messages: Array.from({ length: m.payload }, (_, i) => ({ id: m.id, type: 'progress', value: i + 1 })) });
  });
  // (Delivered in a batch frame: the first reply to a single message leaves at once.)
  s.receive({ type: 'batch', messages: [run(1, 2)] });
  assert.deepEqual(s.frames[0][0], {
    type: 'batch',
    messages: [0, 1, 2].map((value) => ({ id: 1, type: 'progress', value })),
  });
  s.frames.length = 0;
  s.receive({ type: 'batch', messages: [run(2, BATCH_MAX + 10)] });
  assert.deepEqual(sizes(s.frames), [BATCH_MAX, 11]);
  assert.ok(s.frames.every(([f]) => f.messages.every((m) => m.type !== 'batch')), 'no batch inside a batch');
  s.frames.length = 0;
  const own = { type: 'batch', messages: [{ id: 3, type: 'done' }, { id: 4, type: 'done' }] };
  s.post(own);
  assert.deepEqual(s.frames, [[own]], 'an idle wire: the frame as the script made it');
});

test('transfers move with their messages to the frame', async () => {
  const s = side((m, post) => {
    const buf = new ArrayBuffer(8);
    new Uint8Array(buf)[0] = m.id;
    post({ id: m.id, type: 'progress', value: 0, buf }, [buf]);
    assert.equal(buf.byteLength, 0, 'the script’s buffer is detached at the post, as postMessage does');
    post({ id: m.id, type: 'done' });
  });
  s.receive({ type: 'batch', messages: [run(1), run(2)] });
  const [[frame, transfer]] = s.frames;
  assert.equal(frame.messages.length, 4);
  assert.deepEqual(transfer, [frame.messages[0].buf, frame.messages[2].buf]);
  assert.deepEqual([new Uint8Array(transfer[0])[0], new Uint8Array(transfer[1])[0]], [1, 2]);
});

test('flush sends what is held at once (close); an incoming batch is unpacked even before a hello', () => {
  const s = side((m, post) => post({ id: m.id, type: 'done' }));
  s.post({ id: 1, type: 'progress', value: 0 }); // at once: the wire is idle
  s.post({ id: 1, type: 'progress', value: 1 }); // held for the microtask
  s.flush();
  assert.deepEqual(sizes(s.frames), [1, 1]);
  // A host told `declared: {batch: true}` sends batches to a script that never says hello.
  const seen = [];
  const b = batching(() => {}, (m) => seen.push(m.id));
  b.receive({ type: 'batch', messages: [run(1), run(2)] });
  assert.deepEqual(seen, [1, 2]);
});

test('message listeners (weft/worker): once, signal, one per listener, handleEvent, a throw stops no other', () => {
  const errors = [];
  const l = messageListeners(null, (e) => errors.push(e.message));
  const seen = [];
  const ac = new AbortController();
  const twice = (e) => seen.push(`twice ${e}`);
  l.add((e) => seen.push(`once ${e}`), { once: true });
  l.add(() => {
    throw new Error('bad listener');
  });
  l.add(twice);
  l.add(twice);
  l.add({ handleEvent: (e) => seen.push(`object ${e}`) });
  l.add((e) => {
    seen.push(`signal ${e}`);
    ac.abort();
  }, { signal: ac.signal });
  l.add(() => seen.push('never'), { signal: AbortSignal.abort() });
  l.dispatch(1);
  l.dispatch(2);
  assert.deepEqual(seen, ['once 1', 'twice 1', 'object 1', 'signal 1', 'twice 2', 'object 2']);
  assert.deepEqual(errors, ['bad listener', 'bad listener']);
  l.remove(twice);
  seen.length = 0;
  l.dispatch(3);
  assert.deepEqual(seen, ['object 3']);
});

test('the Node shim delivers batch frames to a script that never said hello (declared batch)', async () => {
  const rt = createRuntime();
  const ep = rt.openWorker(new URL('../../workers/aiui.js', import.meta.url), { hello: { declared: { batch: true } } });
  const jobs = Array.from({ length: 5 }, () => ep.submit({ chunks: 1, chunkMs: 0 }));
  // (A bound on the wait only so that a run never delivered fails the check, by name.)
  const outs = await Promise.all(jobs.map((j) => j.wait({ timeoutMs: 10_000 }).then((o) => o.outcome, (e) => e.code)));
  assert.deepEqual(outs, Array(5).fill('succeeded'));
  assert.ok(ep.info.framesSent < 5, `the runs shared frames (${ep.info.framesSent})`);
  rt.close();
});
