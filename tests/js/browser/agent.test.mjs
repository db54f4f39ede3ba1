// The agent-session scenarios in headless Chromium: real async handlers, DOM Workers as job
// endpoints, the package imported as a web app imports it (/wasm/pkg/index.js).
import { after, before, test } from 'node:test';
import { launch } from '../lib/browser.mjs';
import { serveStatic } from '../lib/server.mjs';
import { agentScenarios } from '../agent-scenarios.mjs';

let server;
let browser;
let page;

before(async () => {
  server = await serveStatic();
  browser = await launch();
  page = await browser.newPage();
  page.on('pageerror', (e) => console.error('page error:', e));
  await page.goto(`${server.url}/tests/js/browser/agent-harness.html`);
  await page.waitForFunction(() => window.harnessReady === true, null, { timeout: 20_000 });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

for (const name of Object.keys(agentScenarios)) {
  test(`agent (Chromium Worker): ${name}`, { timeout: 30_000 }, async () => {
    const r = await page.evaluate((n) => window.runScenario(n), name);
    if (!r.ok) throw new Error(r.error);
  });
}
