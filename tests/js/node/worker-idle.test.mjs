// The Node Worker's idle wait (worker-shim.mjs, `openWorker`'s `atomics: true`): an idle worker
// blocks in `Atomics.wait` and reads the host's next message with `receiveMessageOnPort`.
// These check what it must keep: a run in flight, a worker's own timers and a handler's work
// after its reply keep the worker in its event loop, a cancel reaches a running job, and
// without `atomics: true` the worker never waits. Counts and outcomes only, no timing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRuntime } from 'weft';
import { scenarios } from '../scenarios.mjs';

const script = new URL('../../workers/idle-wait.js', import.meta.url);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Resolves once `job` has reported progress (it is running in the worker).
const firstProgress = (job) =>
  new Promise((resolve) => {
    const stop = job.observe((d) => {
      if (d.type === 'progress') {
        stop();
        resolve();
      }
    });
  });

async function run(ep, op) {
  const out = await ep.submit({ op }).wait();
  assert.equal(out.outcome, 'succeeded', JSON.stringify(out));
  return out.value;
}

test('an idle worker reads the next run after its idle wait (one in flight)', async () => {
  const rt = createRuntime();
  try {
    const ep = rt.openWorker(script, { atomics: true });
    for (let i = 0; i < 30; i++) assert.equal(await run(ep, 'sum'), 4950);
    const { idleWakes } = await run(ep, 'stats');
    assert.ok(idleWakes > 0, `messages read after an idle wait: ${idleWakes}`);
  } finally {
    rt.close();
  }
});

test('by default (and with atomics: false) the worker never waits idle', async () => {
  const rt = createRuntime();
  try {
    for (const options of [undefined, { atomics: false }]) {
      const ep = rt.openWorker(script, options);
      for (let i = 0; i < 30; i++) assert.equal(await run(ep, 'sum'), 4950);
      assert.equal((await run(ep, 'stats')).idleWakes, 0);
    }
  } finally {
    rt.close();
  }
});

test("a run that keeps a timer completes; the worker's own interval keeps it out of the wait", async () => {
  const rt = createRuntime();
  try {
    const ep = rt.openWorker(script, { atomics: true });
    for (let i = 0; i < 5; i++) assert.equal(await run(ep, 'timer'), 'timer');
    const start = await run(ep, 'interval-start');
    for (let i = 0; i < 5; i++) {
      assert.equal(await run(ep, 'sum'), 4950);
      await sleep(10);
    }
    const stop = await run(ep, 'interval-stop');
    // The interval ran between the runs, and no message came through an idle wait meanwhile.
    assert.ok(stop.ticks - start.ticks >= 5, `interval ticks between runs: ${stop.ticks - start.ticks}`);
    assert.equal(stop.idleWakes, start.idleWakes);
  } finally {
    rt.close();
  }
});

test("a handler's work after its reply runs before the worker waits idle", async () => {
  const rt = createRuntime();
  try {
    const ep = rt.openWorker(script, { atomics: true });
    for (let i = 0; i < 10; i++) {
      assert.equal(await run(ep, 'async-after'), 'replied');
      assert.equal((await run(ep, 'stats')).after, true);
    }
    assert.ok((await run(ep, 'stats')).idleWakes > 0);
  } finally {
    rt.close();
  }
});

test('a cancel reaches a running job of a worker that waited idle before', async () => {
  const rt = createRuntime();
  try {
    const ep = rt.openWorker(script, { atomics: true });
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 10; i++) await run(ep, 'sum');
      const before = (await run(ep, 'stats')).idleWakes;
      const job = ep.submit({ op: 'loop' });
      await firstProgress(job);
      job.cancel();
      const out = await job.wait();
      assert.equal(out.outcome, 'cancelled');
      assert.equal(out.evidence, 'acknowledged');
      for (let i = 0; i < 10; i++) await run(ep, 'sum');
      assert.ok((await run(ep, 'stats')).idleWakes > before, 'the worker waits idle again after the cancelled run');
    }
  } finally {
    rt.close();
  }
});

test('a run in flight keeps the worker out of the wait: its cancel arrives through the event loop', async () => {
  const rt = createRuntime();
  try {
    const ep = rt.openWorker(script, { atomics: true });
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 10; i++) await run(ep, 'sum');
      // Async work the resource check cannot see (off-thread wasm compiles), no timers.
      const job = ep.submit({ op: 'compile-loop' });
      await firstProgress(job);
      job.cancel();
      const out = await job.wait();
      assert.equal(out.outcome, 'cancelled');
      assert.equal(out.evidence, 'acknowledged');
      assert.equal((await run(ep, 'stats')).cancelViaWait, 0);
    }
  } finally {
    rt.close();
  }
});

test('a script listening on parentPort itself gets every message (the worker does not wait idle)', async () => {
  const rt = createRuntime();
  try {
    const ep = rt.openWorker(new URL('../../workers/idle-wait-port.js', import.meta.url), { atomics: true });
    let last;
    for (let i = 0; i < 20; i++) last = await run(ep, 'any');
    // Its listener (registered after the shim's, so it runs after the handler) had seen the 19
    // runs before the last.
    assert.equal(last.seen, 19);
    assert.equal(last.idleWakes, 0);
  } finally {
    rt.close();
  }
});

// The job-runtime scenarios of jobs.test.mjs again, every Worker opened with `atomics: true`.
const worker = (name) =>
  name === 'diffusion'
    ? new URL('../../../examples/diffusion/worker.js', import.meta.url)
    : new URL(`../../workers/${name}.js`, import.meta.url);
const withAtomics = (options) => {
  const rt = createRuntime(options);
  const open = rt.openWorker.bind(rt);
  rt.openWorker = (specifier, o = {}) => open(specifier, { atomics: true, ...o });
  return rt;
};
for (const [name, run] of Object.entries(scenarios)) {
  test(`worker_threads, atomics: true: ${name}`, { timeout: 30_000 }, () => run({ createRuntime: withAtomics, worker }));
}
