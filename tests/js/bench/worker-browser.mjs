// The Worker hot path in headless Chromium (issue 16): small round trips over a bare DOM Worker
// postMessage (the floor), comlink and weft (the package as a web app imports it: createRuntime,
// openWorker, submit + wait, full journals), burst (N submitted at once) and one in flight
// (sequential), 1 and 2 workers (round robin). One page load per round; inside it every
// section runs each contender once, in an order rotated every round. Prints medians, min–max
// over rounds, tasks/s and ratios. A program, not a test: figures move with machine load.
//
//     cd tests/js && node bench/worker-browser.mjs [--rounds 5] [--n 10000] [--serial 2000]
//         [--threads 1,2] [--only burst,serial] [--profile] [--before DIR]
//
// `--before DIR` adds "weft (before)": the package in DIR (a wasm/pkg built from another
// commit) with the plain weft-task.js worker, interleaved with the rest (before/after in one
// run). "weft" runs weft-task-batch.mjs (weft-task.js behind `weft/worker`); with
// `--plain-worker` it runs weft-task.js too (the host side of a change alone).
//
// `--profile` then profiles one weft burst (1 worker) on the page's main thread with the
// Chrome DevTools protocol (Profiler domain) and prints the top functions by self time.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { launch } from '../lib/browser.mjs';
import { repoRoot, serveStatic } from '../lib/server.mjs';

const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i < 0 ? dflt : args[i + 1];
};
const ROUNDS = Number(flag('rounds', 5));
const N = Number(flag('n', 10_000));
const SERIAL = Number(flag('serial', 2000));
const THREADS = String(flag('threads', '1,2')).split(',').map(Number);
const ONLY = new Set(String(flag('only', 'burst,serial')).split(','));
const PROFILE = args.includes('--profile');
const BEFORE = flag('before', null);
const PLAIN = args.includes('--plain-worker');
const NAMES = ['raw', 'comlink', 'weft', ...(BEFORE ? ['weft (before)'] : [])];

console.log(execFileSync('uptime', { encoding: 'utf8' }).trim());
// The before package is served from inside the repository (target/ is not tracked).
let beforeQuery = '';
if (BEFORE) {
  const link = join(repoRoot, 'target', 'worker-browser-before');
  rmSync(link, { force: true, recursive: false });
  mkdirSync(join(repoRoot, 'target'), { recursive: true });
  symlinkSync(resolve(BEFORE), link);
  beforeQuery = '?before=/target/worker-browser-before';
}
if (PLAIN) beforeQuery += `${beforeQuery ? '&' : '?'}plain=1`;
const server = await serveStatic();
const browser = await launch();
const pageUrl = `${server.url}/tests/js/bench/worker-browser.html${beforeQuery}`;

async function openPage() {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e?.stack ?? e)));
  await page.goto(pageUrl);
  try {
    await page.waitForFunction(() => window.ready, null, { timeout: 30_000 });
  } catch (e) {
    throw new Error(`page did not load: ${errors.join('; ') || e.message}`);
  }
  return page;
}

const sections = [];
for (const mode of ['burst', 'serial']) {
  if (!ONLY.has(mode)) continue;
  for (const threads of THREADS) sections.push({ mode, threads, count: mode === 'burst' ? N : SERIAL });
}
const results = sections.map(() => Object.fromEntries(NAMES.map((k) => [k, []])));

for (let r = 0; r < ROUNDS; r++) {
  const page = await openPage();
  for (let s = 0; s < sections.length; s++) {
    const { mode, threads, count } = sections[s];
    for (let k = 0; k < NAMES.length; k++) {
      const name = NAMES[(k + r) % NAMES.length];
      const ms = await page.evaluate(([a, b, c, d]) => window.measure(a, b, c, d), [name, mode, threads, count]);
      results[s][name].push(ms);
    }
  }
  await page.close();
}

const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const f1 = (x) => x.toFixed(1);
const range = (a) => `${f1(Math.min(...a))}–${f1(Math.max(...a))}`;
const title = { burst: 'Chromium, burst (all submitted at once)', serial: 'Chromium, one in flight' };
for (let s = 0; s < sections.length; s++) {
  const { mode, threads, count } = sections[s];
  const res = results[s];
  console.log(`\n${title[mode]} (${count} tasks, ${threads} worker${threads > 1 ? 's' : ''}, ${ROUNDS} rounds): median ms [range], tasks/s`);
  const med = Object.fromEntries(NAMES.map((k) => [k, median(res[k])]));
  for (const k of NAMES) {
    console.log(`  ${k.padEnd(14)} ${f1(med[k]).padStart(8)} ms [${range(res[k])}]  ${Math.round((count / med[k]) * 1000).toLocaleString('en')}/s`);
  }
  const w = med.weft;
  const vsBefore = BEFORE ? `, ÷ weft (before) ${(med['weft (before)'] / w).toFixed(2)}×` : '';
  console.log(`  weft rate ÷ raw ${((med.raw / w) * 100).toFixed(0)}%, ÷ comlink ${(med.comlink / w).toFixed(2)}×${mode === 'burst' ? ' (target: ≥ 1.50×)' : ''}${vsBefore}`);
}

/** Function index → export name of a .wasm file (V8 names unnamed functions `wasm-function[index]`). */
function wasmExports(file) {
  const b = readFileSync(file);
  let p = 8;
  const leb = () => {
    let v = 0;
    let shift = 0;
    for (;;) {
      const byte = b[p++];
      v += (byte & 0x7f) * 2 ** shift;
      shift += 7;
      if (byte < 0x80) return v;
    }
  };
  const names = new Map();
  while (p < b.length) {
    const id = b[p++];
    const size = leb();
    const end = p + size;
    if (id === 7) {
      for (let n = leb(); n > 0; n--) {
        const len = leb();
        const name = b.toString('utf8', p, p + len);
        p += len;
        const kind = b[p++];
        const index = leb();
        if (kind === 0) names.set(index, name);
      }
    }
    p = end;
  }
  return names;
}

if (PROFILE) {
  const page = await openPage();
  await page.evaluate(() => window.prepare('weft', 1));
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
  await cdp.send('Profiler.start');
  const ms = await page.evaluate((n) => window.burst(n), N);
  const { profile } = await cdp.send('Profiler.stop');
  await page.close();
  // Self time per node: the sum of the intervals that ended on a sample of that node.
  const self = new Map();
  for (let i = 0; i < profile.samples.length; i++) {
    self.set(profile.samples[i], (self.get(profile.samples[i]) ?? 0) + (profile.timeDeltas[i] ?? 0));
  }
  const byFn = new Map();
  const exportsOf = new Map();
  const byGroup = new Map();
  let total = 0;
  for (const node of profile.nodes) {
    const us = self.get(node.id) ?? 0;
    const { url, lineNumber } = node.callFrame;
    let { functionName } = node.callFrame;
    if (functionName === '(idle)') continue;
    total += us;
    const wasm = /^wasm-function\[(\d+)\]$/.exec(functionName);
    if (wasm && url.endsWith('.wasm')) {
      const file = join(repoRoot, new URL(url).pathname);
      if (!exportsOf.has(file)) exportsOf.set(file, wasmExports(file));
      const name = exportsOf.get(file).get(Number(wasm[1]));
      if (name) functionName = `${functionName} (export ${name})`;
    }
    const key = `${functionName || '(anonymous)'} ${url ? `${url.replace(server.url, '')}:${lineNumber + 1}` : ''}`.trim();
    byFn.set(key, (byFn.get(key) ?? 0) + us);
    const group = url.endsWith('.wasm') || /wasm/.test(functionName)
      ? 'wasm (incl. js↔wasm stubs)'
      : url.includes('/weft/')
        ? 'weft JS'
        : ['postMessage', 'serialize', 'innerSerialize', 'deserialize'].includes(functionName)
          ? 'postMessage + structured clone'
          : /^\(.*\)$/.test(functionName) && !url
            ? functionName
            : 'other (page, V8 builtins)';
    byGroup.set(group, (byGroup.get(group) ?? 0) + us);
  }
  console.log(`\nProfile of one weft burst (${N} tasks, 1 worker, ${f1(ms)} ms, page main thread, 100 µs sampling): top self time (% of non-idle samples)`);
  const show = (m, top) => {
    for (const [k, us] of [...m].sort((a, b) => b[1] - a[1]).slice(0, top)) {
      console.log(`  ${f1(us / 1000).padStart(7)} ms ${((us / total) * 100).toFixed(1).padStart(5)}%  ${k}`);
    }
  };
  show(byFn, 25);
  console.log('  by kind:');
  show(byGroup, 10);
}

await browser.close();
await server.close();
console.log(execFileSync('uptime', { encoding: 'utf8' }).trim());
