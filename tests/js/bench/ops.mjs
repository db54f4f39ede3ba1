// Operation overhead as wasm under Node: N `observe` round trips, each one write and one
// synchronous JS cell — start → flush → the JS host computes the cell → settled → outcome read.
// Paths: the JS API (app.start/flush/outcome), and the published `observe` tool (a Promise
// with the JSON-shaped reply an agent receives). Prints operations/s and memory per retained
// operation (wasm linear memory growth + JS heap growth, first round, retention unbounded), and
// what N round trips leave held under the default retention (1024 of each record).
//
//     node --expose-gc tests/js/bench/ops.mjs [N] [--pkg DIR]
//
// `--pkg DIR`: measure the package built in DIR (e.g. a copy of wasm/pkg kept before a change)
// instead of the installed `weft`, to compare two builds in alternating runs.
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const pkgAt = args.indexOf('--pkg');
const pkg = pkgAt >= 0 ? args.splice(pkgAt, 2)[1] : null;
const { createApp, wasmMemoryBytes } = await import(pkg ? pathToFileURL(resolve(pkg, 'node.js')).href : 'weft');

const n = Number(args[0] ?? 10_000);

const unbounded = { operations: Infinity, calculations: Infinity, writes: Infinity };

function app(retention) {
  const a = createApp({ retention });
  a.load({
    controls: [{ name: 'x', type: 'number', min: 0, max: 1e12, value: 0 }],
    cells: [{ name: 'y', deps: ['x'], compute: ({ x }) => 2 * x }],
  });
  a.flush();
  return a;
}

function apiRound(retention = unbounded) {
  const a = app(retention);
  globalThis.gc?.();
  const heap0 = process.memoryUsage().heapUsed;
  const wasm0 = wasmMemoryBytes();
  const t0 = performance.now();
  for (let i = 1; i <= n; i++) {
    const op = a.start({ writes: { x: i }, waitFor: ['y'], select: ['y'] });
    a.flush();
    const out = op.outcome;
    if (out.outcome !== 'settled' || out.result.y !== 2 * i) throw new Error(JSON.stringify(out));
  }
  const secs = (performance.now() - t0) / 1000;
  globalThis.gc?.();
  const bytes = process.memoryUsage().heapUsed - heap0 + wasmMemoryBytes() - wasm0;
  const kept = a.retained().operations;
  if (retention === unbounded ? kept !== n : kept > 1025) throw new Error(`${kept} operations retained`);
  a.dispose();
  return { secs, bytes };
}

async function toolRound() {
  const a = app();
  const t0 = performance.now();
  for (let i = 1; i <= n; i++) {
    const out = await a.tools.call('observe', { writes: { x: i }, waitFor: ['y'], select: ['y'] });
    if (out.outcome !== 'settled' || out.result.y !== 2 * i) throw new Error(JSON.stringify(out));
  }
  const secs = (performance.now() - t0) / 1000;
  a.dispose();
  return secs;
}

const bounded = apiRound({}).bytes;
let best = Infinity;
let bestTool = Infinity;
let perOp = null;
for (let round = 0; round < 3; round++) {
  const { secs, bytes } = apiRound();
  if (round === 0) perOp = bytes / n;
  best = Math.min(best, secs);
  const t = await toolRound();
  bestTool = Math.min(bestTool, t);
  console.error(`round ${round}: api ${(secs * 1000).toFixed(1)} ms, tool ${(t * 1000).toFixed(1)} ms`);
}
console.log(
  `ops (wasm, Node ${process.version}${pkg ? `, package ${pkg}` : ''}): ${n} observe round trips (one write, one synchronous cell): ` +
    `JS API ${Math.round(n / best)} ops/s (${((best * 1e6) / n).toFixed(1)} µs each), ` +
    `observe tool ${Math.round(n / bestTool)} ops/s (${((bestTool * 1e6) / n).toFixed(1)} µs each); ` +
    `${Math.round(perOp)} bytes per retained operation (wasm memory + JS heap growth, retention unbounded${globalThis.gc ? '' : ', run with --expose-gc for a clean figure'}); ` +
    `${Math.round(bounded / 1024)} KiB held after ${n} round trips under the default retention`,
);
