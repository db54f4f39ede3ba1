// The job-runtime scenarios with real DOM Workers in headless Chromium: the page imports the
// built package (/wasm/pkg/index.js) the way a web app does.
import { after, before, test } from 'node:test';
import { launch } from '../lib/browser.mjs';
import { serveStatic } from '../lib/server.mjs';
import { scenarios } from '../scenarios.mjs';

let server;
let browser;
let page;

before(async () => {
  server = await serveStatic();
  browser = await launch();
  page = await browser.newPage();
  page.on('pageerror', (e) => console.error('page error:', e));
  await page.goto(`${server.url}/tests/js/browser/harness.html`);
  await page.waitForFunction(() => window.harnessReady === true, null, { timeout: 20_000 });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

for (const name of Object.keys(scenarios)) {
  test(`Chromium Worker: ${name}`, { timeout: 30_000 }, async () => {
    const r = await page.evaluate((n) => window.runScenario(n), name);
    if (!r.ok) throw new Error(r.error);
  });
}
