// The diffusion lab (examples/diffusion-lab, built with Vite against the built `weft` package)
// in headless Chromium: an agent drives it through the published tools (set + observe) while a
// person changes a control in the page mid-run; the tool result and the page both say the
// request was superseded; with no model named in the address, the Agent panel says so and the
// built-in model answers. Screenshot: tests/artifacts/diffusion-lab.png.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { launch } from '../lib/browser.mjs';
import { repoRoot, serveStatic } from '../lib/server.mjs';

const dist = join(repoRoot, 'examples/diffusion-lab/dist');
const artifacts = join(repoRoot, 'tests/artifacts');

let server;
let browser;
let page;
const pageErrors = [];

before(async () => {
  assert.ok(existsSync(join(dist, 'index.html')), 'build the lab first: (cd examples/diffusion-lab && npx vite build)');
  server = await serveStatic(dist);
  browser = await launch();
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  await page.goto(`${server.url}/`);
  await page.waitForFunction(() => window.labReady === true && window.lab.app.cell('errors').state === 'ready', null, {
    timeout: 30_000,
  });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

test('lab: published tools settle a request, and a UI change mid-run supersedes the next one', { timeout: 90_000 }, async () => {
  const names = await page.evaluate(() => window.lab.tools.list().map((t) => t.name));
  assert.deepEqual(names, ['report', 'set', 'act', 'observe', 'wait', 'inspect', 'cancel']);

  // An agent sets one control, then observes a change through to the error norms.
  const receipt = await page.evaluate(() => window.lab.tools.call('set', { name: 'simTime', value: 0.0052 }));
  assert.equal(receipt.accepted, 0.005);
  assert.deepEqual(receipt.adjusted, ['snapped']);
  const settled = await page.evaluate(() =>
    window.lab.tools.call('observe', { writes: { diffusivity: 0.8, points: 400 }, waitFor: ['errors'], selector: 'summary' }),
  );
  assert.equal(settled.outcome, 'settled', JSON.stringify(settled));
  assert.equal(settled.result.diffusivity, 0.8);
  assert.equal(settled.result.simTime, 0.005);
  assert.ok(settled.result.l2 > 0 && settled.result.l2 < 1e-3, `l2 ${settled.result.l2}`);
  await page.locator(`[data-op="${settled.operation}"][data-outcome="settled"]`).waitFor();
  await page.locator('[data-effective="diffusivity"]', { hasText: '0.8' }).waitFor();

  // A slow request; while its calculation runs, a person changes the diffusivity in the page.
  await page.evaluate(() => {
    window.pending = window.lab.tools.call('observe', {
      writes: { points: 3000, simTime: 0.04 },
      waitFor: ['errors'],
      selector: 'summary',
    });
  });
  await page.waitForFunction(
    () => {
      const e = window.lab.app.cell('evolution');
      return e.state !== 'ready' && (e.progress ?? 0) > 0.05;
    },
    null,
    { timeout: 30_000 },
  );
  const running = await page.evaluate(() => window.lab.app.cell('evolution').calc);
  await page.locator('[data-control="diffusivity"]').fill('0.6');
  await page.locator('[data-control="diffusivity"]').press('Enter');
  await page.locator('[data-control="diffusivity"]').blur();

  const result = await page.evaluate(() => window.pending);
  assert.equal(result.outcome, 'superseded', JSON.stringify(result));
  assert.equal(result.superseded.stage, 'during_execution');
  assert.deepEqual(result.superseded.changedInputs, ['diffusivity']);
  assert.equal(result.superseded.by[0].by, 'user');
  assert.equal(result.superseded.by[0].accepted, 0.6);
  assert.equal(result.result, undefined, 'the replacement result is never the answer');
  assert.match(result.message, /superseded while its calculation was running by diffusivity = 0.6/);

  // The page says so too: the operation's outcome, its message and the agent tool log.
  const card = page.locator(`[data-op="${result.operation}"]`);
  await card.and(page.locator('[data-outcome="superseded"]')).waitFor();
  assert.match(await card.locator('[data-op-message]').innerText(), /superseded/);
  await page.locator('[data-tool-status="superseded"]').first().waitFor();
  await page.locator('[data-requested="diffusivity"]', { hasText: '0.6 (user)' }).waitFor();
  const journal = await page.evaluate((c) => window.lab.app.calc(c), running);
  assert.equal(journal.state, 'superseded');
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, 'diffusion-lab.png'), fullPage: true });

  // Stopping is a published action (a button here): the evolution holds.
  await page.locator('[data-action="stop"]').click();
  await page.locator('[data-cell="evolution"][data-state="held"]').waitFor();

  // No model in the page's address: the Agent panel says so, and the built-in model answers
  // (it calls no tools).
  await page.waitForFunction(() => window.labAgentReady === true);
  assert.match(await page.locator('[data-model-banner]').innerText(), /No model is configured.*calls no tools/s);
  await page.locator('[data-agent-input]').fill('hello lab');
  await page.locator('[data-agent-input]').press('Enter');
  await page.locator('[data-agent-panel] li[data-entry="turn_end"]').waitFor();
  assert.match(await page.locator('[data-agent-panel] li[data-role="assistant"]').innerText(), /MODEL_NOT_CONFIGURED/);
  assert.equal(await page.locator('[data-agent-call]').count(), 0);
  assert.deepEqual(pageErrors, []);
});
