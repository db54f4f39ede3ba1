// Start-up in headless Chromium (issue 16): navigation → first result of one small task, for
// a bare DOM Worker (the floor), comlink and weft (wasm/pkg, imported as a web app imports
// it), interleaved, each run in a fresh browser context (nothing cached). Prints medians and
// min–max ranges. A program, not a test: the figures move with machine load.
//
//     cd tests/js && node bench/startup-browser.mjs [--runs 10] [--before DIR] [--preload] [--trace]
//
// `--before DIR` adds a second weft package served from DIR (any directory, e.g. a copy of
// wasm/pkg from another commit); both wefts are then served by the same proxy.
// `--preload` gives every contender the hints an app's HTML can carry: `<link rel=modulepreload>`
// for each module of its static import graph (comlink's one file; weft's entry graph, walked
// here) and `<link rel=preload as=fetch crossorigin>` for the .wasm weft's entry loads.
// `--trace` prints, for each run, every request (start → end, ms from navigation start, as the
// browser saw them), when the wasm is compiled (`WebAssembly.*` wrapped) and when the Worker is
// created and answers: where start-up time goes.
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { dirname, extname, join, normalize } from 'node:path';
import { readFileSync } from 'node:fs';
import { launch } from '../lib/browser.mjs';
import { repoRoot, serveStatic } from '../lib/server.mjs';

const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i < 0 ? dflt : args[i + 1];
};
const RUNS = Number(flag('runs', 10));
const BEFORE = flag('before', null);
const PRELOAD = args.includes('--preload');
const TRACE = args.includes('--trace');

console.log(execFileSync('uptime', { encoding: 'utf8' }).trim());
const server = await serveStatic();
// `--before`: the other package under /before-pkg/ on the same origin (a proxy of the static server).
let url = server.url;
let proxy = null;
if (BEFORE) {
  proxy = createServer(async (req, res) => {
    const p = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    // Both packages are served the same way (read here), so that neither pays an extra hop.
    const pkg = /^\/(before|after)-pkg\//.exec(p);
    if (pkg) {
      const dir = pkg[1] === 'before' ? BEFORE : join(repoRoot, 'wasm/pkg');
      const file = normalize(join(dir, p.slice(pkg[0].length)));
      try {
        const body = await readFile(file);
        const type = { '.js': 'text/javascript', '.wasm': 'application/wasm' }[extname(file)] ?? 'application/octet-stream';
        res.writeHead(200, { 'content-type': type, 'cache-control': 'no-store' }).end(body);
      } catch {
        res.writeHead(404).end();
      }
      return;
    }
    const r = await fetch(server.url + req.url);
    res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? '', 'cache-control': 'no-store' });
    res.end(Buffer.from(await r.arrayBuffer()));
  });
  await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${proxy.address().port}`;
}
// A package's static import graph from index.js (as wasm/build.sh walks it) and the .wasm its
// index.js loads at import: the hints of `--preload`.
function hints(dir, base) {
  const seen = new Set();
  const todo = ['index.js'];
  while (todo.length) {
    const f = normalize(todo.pop());
    if (seen.has(f)) continue;
    seen.add(f);
    const text = readFileSync(join(dir, f), 'utf8');
    for (const m of text.matchAll(/(?:^|[\n;}])\s*(?:import|export)\b(?!\s*\()[^'";()]*?['"](\.\/[^'"]+)['"]/g)) todo.push(join(dirname(f), m[1]));
  }
  const wasm = /new URL\(["']\.\/([\w-]+_bg\.wasm)["']/.exec(readFileSync(join(dir, 'index.js'), 'utf8'));
  const pre = [...seen].map((f) => `${base}/${f}`).join(',');
  return `&pre=${encodeURIComponent(pre)}${wasm ? `&prefetch=${encodeURIComponent(`${base}/${wasm[1]}`)}` : ''}`;
}
const weftQuery = (dir, base) => `c=weft&pkg=${base}${PRELOAD ? hints(dir, base) : ''}`;
const contenders = {
  raw: 'c=raw',
  comlink: `c=comlink${PRELOAD ? '&pre=/tests/js/node_modules/comlink/dist/esm/comlink.mjs' : ''}`,
  weft: BEFORE ? weftQuery(join(repoRoot, 'wasm/pkg'), '/after-pkg') : weftQuery(join(repoRoot, 'wasm/pkg'), '/wasm/pkg'),
  ...(BEFORE ? { 'weft (before)': weftQuery(BEFORE, '/before-pkg') } : {}),
};
// `--trace`: marks taken in the page (ms from navigation start) around the wasm compile and the
// Worker, and the requests' timings as the browser reports them.
function traceInPage() {
  const marks = (window.__trace = []);
  const mark = (what) => marks.push([what, performance.now()]);
  for (const k of ['instantiateStreaming', 'instantiate', 'compileStreaming', 'compile']) {
    const f = WebAssembly[k];
    WebAssembly[k] = async function (...a) {
      mark(`WebAssembly.${k} start`);
      try {
        return await f.apply(this, a);
      } finally {
        mark(`WebAssembly.${k} end`);
      }
    };
  }
  const W = window.Worker;
  window.Worker = function (...a) {
    mark('new Worker');
    const w = new W(...a);
    w.addEventListener('message', () => mark('message from the Worker'));
    return w;
  };
  window.Worker.prototype = W.prototype;
}
async function printTrace(name, r, s, page, requests) {
  const origin = await page.evaluate(() => performance.timeOrigin);
  const marks = await page.evaluate(() => window.__trace);
  const rows = requests.map((q) => {
    const t = q.timing();
    return [t.startTime - origin, t.startTime - origin + t.responseEnd, q.url().replace(url, '').replace(/\?.*/, '')];
  });
  const lines = [...rows.map(([a, b, u]) => [a, `${a.toFixed(1).padStart(7)} → ${b.toFixed(1).padStart(7)}  ${u}`]), ...marks.map(([w, t]) => [t, `${t.toFixed(1).padStart(7)}            ${w}`])];
  lines.sort((x, y) => x[0] - y[0]);
  console.log(`\n${name}, run ${r}: first result ${s.first.toFixed(1)} ms, import ${s.imp.toFixed(1)} ms; ${rows.length} requests`);
  for (const [, l] of lines) console.log(`  ${l}`);
}
const browser = await launch();
const res = Object.fromEntries(Object.keys(contenders).map((k) => [k, { first: [], imp: [] }]));
const names = Object.keys(contenders);
for (let r = 0; r < RUNS + 1; r++) {
  for (let k = 0; k < names.length; k++) {
    const name = names[(k + r) % names.length];
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    const requests = [];
    if (TRACE) {
      ctx.on('requestfinished', (q) => requests.push(q));
      await page.addInitScript(traceInPage);
    }
    await page.goto(`${url}/tests/js/bench/startup.html?${contenders[name]}`);
    const s = await (await page.waitForFunction(() => window.startup, null, { timeout: 30_000 })).jsonValue();
    if (TRACE && r > 0 && !s.error) await printTrace(name, r, s, page, requests);
    await ctx.close();
    if (s.error) throw new Error(`${name}: ${s.error}`);
    // The first round warms the browser process (and the server); it is not counted.
    if (r > 0) {
      res[name].first.push(s.first);
      res[name].imp.push(s.imp);
    }
  }
}
await browser.close();
await server.close();
if (proxy) await new Promise((r) => proxy.close(r));

const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const range = (a) => `${Math.min(...a).toFixed(1)}–${Math.max(...a).toFixed(1)}`;
console.log(`\nChromium, navigation → first result (${RUNS} runs each, fresh context): median [range] ms; import alone; import → first result (the same run's difference: the Worker's start and the first task, without the module loading before it)`);
for (const [k, v] of Object.entries(res)) {
  const after = v.first.map((f, i) => f - v.imp[i]);
  console.log(`  ${k.padEnd(14)} first result ${median(v.first).toFixed(1).padStart(6)} [${range(v.first)}]   import ${median(v.imp).toFixed(1).padStart(6)} [${range(v.imp)}]   import → first ${median(after).toFixed(1).padStart(5)} [${range(after)}]`);
}
const w = median(res.weft.first);
console.log(`  weft ÷ comlink ${(w / median(res.comlink.first)).toFixed(2)}×, ÷ raw ${(w / median(res.raw.first)).toFixed(2)}×`);
console.log(execFileSync('uptime', { encoding: 'utf8' }).trim());
