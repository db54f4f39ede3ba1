// Worker round trip: N small tasks through weft's worker_threads endpoints, piscina and
// workerpool, with the same number of threads, all submitted at once. Prints tasks/s and the
// ratio of weft's time to the fastest peer's.
//
//     node tests/js/bench/roundtrip.mjs [N] [threads]
import { createRuntime } from 'weft';
import Piscina from 'piscina';
import workerpool from 'workerpool';

const N = Number(process.argv[2] ?? 10_000);
const THREADS = Number(process.argv[3] ?? 2);
const payload = (i) => ({ n: 100 + (i % 7) });
const here = (p) => new URL(p, import.meta.url);

async function weft() {
  const rt = createRuntime();
  const eps = [];
  for (let t = 0; t < THREADS; t++) eps.push(rt.openWorker(here('./workers/weft-task.js')));
  // Warm up: every worker has said hello and run once.
  await Promise.all(eps.map((ep) => ep.submit(payload(0)).wait()));
  const t0 = performance.now();
  const waits = [];
  for (let i = 0; i < N; i++) waits.push(eps[i % THREADS].submit(payload(i)).wait());
  const outs = await Promise.all(waits);
  const ms = performance.now() - t0;
  if (outs.some((o) => o.outcome !== 'succeeded')) throw new Error('weft: a task failed');
  rt.close();
  return ms;
}

async function piscina() {
  const pool = new Piscina({ filename: here('./workers/piscina-task.mjs').href, minThreads: THREADS, maxThreads: THREADS });
  await Promise.all(Array.from({ length: THREADS * 2 }, (_, i) => pool.run(payload(i))));
  const t0 = performance.now();
  const outs = await Promise.all(Array.from({ length: N }, (_, i) => pool.run(payload(i))));
  const ms = performance.now() - t0;
  if (outs.length !== N) throw new Error('piscina: missing results');
  await pool.destroy();
  return ms;
}

async function wpool() {
  const pool = workerpool.pool(here('./workers/workerpool-task.cjs').pathname, { minWorkers: THREADS, maxWorkers: THREADS, workerType: 'thread' });
  await Promise.all(Array.from({ length: THREADS * 2 }, (_, i) => pool.exec('task', [payload(i)])));
  const t0 = performance.now();
  const outs = await Promise.all(Array.from({ length: N }, (_, i) => pool.exec('task', [payload(i)])));
  const ms = performance.now() - t0;
  if (outs.length !== N) throw new Error('workerpool: missing results');
  await pool.terminate();
  return ms;
}

const runs = { weft, piscina, workerpool: wpool };
const best = {};
for (let round = 0; round < 3; round++) {
  for (const [name, fn] of Object.entries(runs)) {
    const ms = await fn();
    best[name] = Math.min(best[name] ?? Infinity, ms);
  }
}
for (const [name, ms] of Object.entries(best)) {
  console.log(`roundtrip ${name.padEnd(10)} ${N} tasks, ${THREADS} threads: ${ms.toFixed(1)} ms (${Math.round((N / ms) * 1000)} tasks/s)`);
}
const fastestPeer = Math.min(best.piscina, best.workerpool);
console.log(`roundtrip weft / fastest peer = ${(best.weft / fastestPeer).toFixed(2)}x (target <= 1.2x)`);
