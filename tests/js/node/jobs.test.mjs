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
