// Start-up in headless Chromium (issue 16): navigation → first result of one small task, for
// a bare DOM Worker (the floor), comlink and weft (wasm/pkg, imported as a web app imports
// it), interleaved, each run in a fresh browser context (nothing cached). Prints medians and
// min–max ranges. A program, not a test: the figures move with machine load.
//
//     cd tests/js && node bench/startup-browser.mjs [--runs 10] [--before DIR]
//
// `--before DIR` adds a second weft package served from DIR (any directory, e.g. a copy of
// wasm/pkg from another commit); both wefts are then served by the same proxy.
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';
import { launch } from '../lib/browser.mjs';
import { repoRoot, serveStatic } from '../lib/server.mjs';

const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i < 0 ? dflt : args[i + 1];
};
const RUNS = Number(flag('runs', 10));
const BEFORE = flag('before', null);

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
const contenders = { raw: 'c=raw', comlink: 'c=comlink', weft: BEFORE ? 'c=weft&pkg=/after-pkg' : 'c=weft', ...(BEFORE ? { 'weft (before)': 'c=weft&pkg=/before-pkg' } : {}) };
const browser = await launch();
const res = Object.fromEntries(Object.keys(contenders).map((k) => [k, { first: [], imp: [] }]));
const names = Object.keys(contenders);
for (let r = 0; r < RUNS + 1; r++) {
  for (let k = 0; k < names.length; k++) {
    const name = names[(k + r) % names.length];
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    await page.goto(`${url}/tests/js/bench/startup.html?${contenders[name]}`);
    const s = await (await page.waitForFunction(() => window.startup, null, { timeout: 30_000 })).jsonValue();
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
console.log(`\nChromium, navigation → first result (${RUNS} runs each, fresh context): median [range] ms; import alone`);
for (const [k, v] of Object.entries(res)) {
  console.log(`  ${k.padEnd(14)} first result ${median(v.first).toFixed(1).padStart(6)} [${range(v.first)}]   import ${median(v.imp).toFixed(1).padStart(6)} [${range(v.imp)}]`);
}
const w = median(res.weft.first);
console.log(`  weft ÷ comlink ${(w / median(res.comlink.first)).toFixed(2)}×, ÷ raw ${(w / median(res.raw.first)).toFixed(2)}×`);
console.log(execFileSync('uptime', { encoding: 'utf8' }).trim());
