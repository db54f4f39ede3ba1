// Registry throughput as wasm under Node: submit → progress → succeed N jobs with full
// journals through the raw JobRegistry binding (no transport), none released, so the block
// ending at N has N jobs retained. Prints jobs/s, events/s, the jobs/s of the 10k-job blocks
// ending at 10k, 100k and 1M retained (when N reaches them: flat means per-job cost does not
// grow with what is retained) and memory per retained job (wasm linear memory growth + JS
// heap growth, first measured round).
//
//     node --expose-gc tests/js/bench/registry.mjs [N] [--rounds 3] [--warmup 3] [--before DIR]
//         [--weft DIR]
//
// `--warmup K` first runs K unmeasured rounds of up to 5k jobs per package (V8 tiers the code
// up meanwhile: without them the first rounds' first block measures compilation). The memory
// figure counts growth past what the warm-up left free: meaningful from N = 100k.
// `--before DIR` adds a second package (a wasm/pkg built from another commit), run in
// alternating rounds with the first: before/after in one session. `--weft DIR` takes the
// measured package from DIR instead of `tests/js/node_modules/weft`.
import { resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i < 0 ? dflt : args[i + 1];
};
const positional = args.filter((a, i) => !a.startsWith('--') && !(i > 0 && args[i - 1].startsWith('--')));
const n = Number(positional[0] ?? 100_000);
const ROUNDS = Number(flag('rounds', 3));
const WARMUP = Number(flag('warmup', 3));
const BLOCK = 10_000;
const MARKS = [10_000, 100_000, 1_000_000].filter((m) => m <= n);
const load = (dir) => (dir ? import(pathToFileURL(resolvePath(dir, 'node.js')).href) : import('weft'));
const packages = [{ name: 'weft', lib: await load(flag('weft', null)) }];
if (flag('before', null)) packages.push({ name: 'weft (before)', lib: await load(flag('before', null)) });

function round({ createRuntime, wasmMemoryBytes }, n) {
  globalThis.gc?.();
  const rt = createRuntime();
  const reg = rt.registry;
  const heap0 = process.memoryUsage().heapUsed;
  const wasm0 = wasmMemoryBytes();
  const ep = reg.openEndpoint(0, { owner: 'app', label: 'bench', hello: 'skip' });
  const blocks = new Map();
  const t0 = performance.now();
  let tb = t0;
  for (let i = 0; i < n; i++) {
    // One endpoint, dispatched in order: the run's wire id equals the job id here.
    const { job } = reg.submit(i, ep, { n: i }, { owner: 'agent' });
    reg.onMessage(i, ep, { id: job, type: 'progress', value: 0.5 });
    reg.onMessage(i, ep, { id: job, type: 'done', value: i });
    reg.drainOutputs();
    if ((i + 1) % BLOCK === 0 && MARKS.includes(i + 1)) {
      const t = performance.now();
      blocks.set(i + 1, (t - tb) / 1000);
    }
    if ((i + 1) % BLOCK === 0) tb = performance.now();
  }
  const secs = (performance.now() - t0) / 1000;
  globalThis.gc?.();
  if (reg.retainedJobs() !== n || reg.job(n).state !== 'succeeded') throw new Error('jobs missing');
  const perJob = (process.memoryUsage().heapUsed - heap0 + wasmMemoryBytes() - wasm0) / n;
  const events = reg.eventsRecorded();
  rt.dispose();
  return { secs, events, perJob, blocks };
}

// Warm-up, not measured: V8 tiers the wasm and JS code up during the first tens of thousands
// of jobs, which would otherwise land in the first block.
for (let w = 0; w < WARMUP; w++) for (const p of packages) round(p.lib, Math.min(n, 5000));
const results = packages.map(() => []);
for (let r = 0; r < ROUNDS; r++) {
  packages.forEach((p, k) => {
    const res = round(p.lib, n);
    results[k].push(res);
    console.error(`round ${r} ${p.name}: ${(res.secs * 1000).toFixed(1)} ms`);
  });
}
const kjobs = (secs, count) => `${Math.round(count / secs / 1000)}k`;
packages.forEach((p, k) => {
  const rs = results[k];
  const best = rs.reduce((a, b) => (b.secs < a.secs ? b : a));
  const marks = MARKS.map(
    (m) => `${m >= 1e6 ? `${m / 1e6}M` : `${m / 1e3}k`} ${kjobs(Math.min(...rs.map((x) => x.blocks.get(m))), BLOCK)}`,
  ).join(', ');
  console.log(
    `registry (wasm, Node ${process.version}, ${p.name}): ${n} jobs, ${best.events} journal events in ${(best.secs * 1000).toFixed(1)} ms: ` +
      `${Math.round(n / best.secs)} jobs/s, ${Math.round(best.events / best.secs)} events/s (best of ${rs.length}); ` +
      `jobs/s in the 10k-job block ending at ${marks} retained; ` +
      `${Math.round(rs[0].perJob)} bytes per retained job (wasm memory + JS heap growth${globalThis.gc ? '' : ', run with --expose-gc for a clean figure'})`,
  );
});
