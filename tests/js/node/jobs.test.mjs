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
