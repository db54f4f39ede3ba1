// `app.dispose()` in the same tick as a change, in Chromium: no page error, reads throw DISPOSED
// (the scenario is tests/js/dispose-scenarios.mjs, which the Node test runs too).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch } from '../lib/browser.mjs';
import { serveStatic } from '../lib/server.mjs';

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

test('disposing an app in the same tick as a change raises no page error', { timeout: 30_000 }, async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`${server.url}/tests/js/browser/modules.html`);
  const r = await page.evaluate(async () => {
    const { createApp } = await import('/wasm/pkg/entry-apps.js');
    const { disposeInTheSameTick } = await import('/tests/js/dispose-scenarios.mjs');
    const r = await disposeInTheSameTick({ createApp });
    await new Promise((resolve) => setTimeout(resolve, 20));
    return r;
  });
  assert.deepEqual(errors, []);
  assert.equal(r.cases, 5);
  assert.equal(r.listenerCalls, 0);
  assert.deepEqual(r.readCodes, Array(20).fill('DISPOSED'));
  assert.deepEqual(r.waitCodes, Array(5).fill('DISPOSED'));
  assert.equal(r.afterDisposingListener, 0);
  await page.close();
});
