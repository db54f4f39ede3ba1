// The conformance vectors (tests/vectors/{jobs,tools,ops}.json) through the package's public JS
// API in Chromium: the same runner (tests/js/vectors/runner.mjs) and the same pinned counts as
// in Node, with the browser build of the package: the jobs suite on `weft` (`/wasm/pkg/index.js`,
// the jobs-only WebAssembly module), the tools and ops suites (agents, apps, claims) on
// `weft/apps` (`/wasm/pkg/entry-apps.js`, the apps module), each suite on a fresh page.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch } from '../lib/browser.mjs';
import { serveStatic } from '../lib/server.mjs';
import { EXPECTED, counts } from '../vectors/runner.mjs';

let server;
let browser;

before(async () => {
  server = await serveStatic();
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.close();
});

for (const [name, want] of Object.entries(EXPECTED)) {
  test(`${name} vectors through the public JS API in Chromium`, { timeout: 30_000 }, async () => {
    const page = await browser.newPage();
    page.on('pageerror', (e) => console.error('page error:', e));
    const wasm = [];
    page.on('request', (r) => /\.wasm$/.test(r.url()) && wasm.push(new URL(r.url()).pathname.replace(/^.*\//, '')));
    await page.goto(`${server.url}/tests/js/browser/vectors.html`);
    const report = await page.evaluate(async (name) => {
      const weft = await import(name === 'jobs' ? '/wasm/pkg/index.js' : '/wasm/pkg/entry-apps.js');
      const { runSuite } = await import('/tests/js/vectors/runner.mjs');
      const suite = await (await fetch(`/tests/vectors/${name}.json`)).json();
      const r = await runSuite(weft, suite);
      return {
        results: r.results.map(({ name, status, failures }) => ({ name, status, failures })),
        skippedSteps: r.skippedSteps,
        unseenResults: r.unseenResults,
      };
    }, name);
    await page.close();
    assert.deepEqual(wasm, [name === 'jobs' ? 'weft_jobs_bg.wasm' : 'weft_apps_bg.wasm']);
    const failed = report.results.filter((r) => r.status === 'failed');
    assert.deepEqual(failed.map((r) => `${r.name}\n  ${r.failures.join('\n  ')}`), []);
    assert.deepEqual(counts(report), want);
  });
}
