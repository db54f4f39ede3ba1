// Registry throughput as wasm under Node: submit → progress → succeed N jobs with full
// journals through the raw JobRegistry binding (no transport). Prints jobs/s, events/s and
// memory per retained job (wasm linear memory growth + JS heap growth, first round).
//
//     node --expose-gc tests/js/bench/registry.mjs [N]
import { createRuntime, wasmMemoryBytes } from 'weft';

const n = Number(process.argv[2] ?? 100_000);
let best = null;
let perJob = null;
for (let round = 0; round < 3; round++) {
  globalThis.gc?.();
  const rt = createRuntime();
  const reg = rt.registry;
  const heap0 = process.memoryUsage().heapUsed;
  const wasm0 = wasmMemoryBytes();
  const ep = reg.openEndpoint(0, { owner: 'app', label: 'bench', hello: 'skip' });
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    // One endpoint, dispatched in order: the run's wire id equals the job id here.
    const { job } = reg.submit(i, ep, { n: i }, { owner: 'agent' });
    reg.onMessage(i, ep, { id: job, type: 'progress', value: 0.5 });
    reg.onMessage(i, ep, { id: job, type: 'done', value: i });
    reg.drainOutputs();
  }
  const secs = (performance.now() - t0) / 1000;
  globalThis.gc?.();
  if (reg.jobs().length !== n || reg.job(n).state !== 'succeeded') throw new Error('jobs missing');
  if (round === 0) perJob = (process.memoryUsage().heapUsed - heap0 + wasmMemoryBytes() - wasm0) / n;
  const events = reg.eventsRecorded();
  console.error(`round ${round}: ${(secs * 1000).toFixed(1)} ms`);
  if (!best || secs < best.secs) best = { secs, events };
  rt.dispose();
}
const { secs, events } = best;
console.log(
  `registry (wasm, Node ${process.version}): ${n} jobs, ${events} journal events in ${(secs * 1000).toFixed(1)} ms: ` +
    `${Math.round(n / secs)} jobs/s, ${Math.round(events / secs)} events/s; ` +
    `${Math.round(perJob)} bytes per retained job (wasm memory + JS heap growth${globalThis.gc ? '' : ', run with --expose-gc for a clean figure'})`,
);
