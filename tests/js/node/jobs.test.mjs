// The job-runtime scenarios with real worker_threads Workers, through the package as a user
// imports it (`import { createRuntime } from 'weft'`).
import { test } from 'node:test';
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
