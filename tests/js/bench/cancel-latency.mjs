// Cancel latency: p50/p99 from cancel() to the evidence that a running diffusion job stopped,
// in Node (worker_threads) and in Chromium (DOM Worker), with workerpool's cancel() beside it.
// Target: weft p99 within one worker chunk (8 ms) + 1 ms.
//
//     node tests/js/bench/cancel-latency.mjs [samples]
import { createRuntime } from 'weft';
import workerpool from 'workerpool';
import { CHUNK_MS, measureWeft, measureWorkerpool } from './cancel-core.mjs';
import { launch } from '../lib/browser.mjs';
import { serveStatic } from '../lib/server.mjs';

const samples = Number(process.argv[2] ?? 100);
const fmt = (name, r) =>
  `cancel-latency ${name.padEnd(22)} n=${r.n} p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  max ${r.max.toFixed(2)} ms`;

const diffusion = new URL('../../../examples/diffusion/worker.js', import.meta.url);
console.log(fmt('weft (Node)', await measureWeft(createRuntime, diffusion, samples)));
console.log(fmt('workerpool (Node)', await measureWorkerpool(workerpool, new URL('./workers/workerpool-diffusion.cjs', import.meta.url).pathname, samples, { workerType: 'thread' })));

const server = await serveStatic();
const browser = await launch();
try {
  const page = await browser.newPage();
  await page.goto(`${server.url}/tests/js/bench/cancel-harness.html`);
  await page.waitForFunction(() => window.ready === true);
  const r = await page.evaluate((n) => window.measure(n), samples);
  console.log(fmt('weft (Chromium)', r.weft));
  console.log(fmt('workerpool (Chromium)', r.workerpool));
} finally {
  await browser.close();
  await server.close();
}
console.log(`cancel-latency target: weft p99 <= ${CHUNK_MS + 1} ms (one ${CHUNK_MS} ms chunk + 1 ms)`);
