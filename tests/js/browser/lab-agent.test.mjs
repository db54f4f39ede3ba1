// The diffusion lab's Agent panel (examples/diffusion-lab, built with Vite) in headless
// Chromium: the page's node agent (IndexedDB) talks to the scripted model server started here
// (named in the page's address: ?model=openai:test&baseUrl=…/v1). A person types a message;
// the model calls the lab's published `observe` tool (the control and the cells change as if
// the person had used them) and its Worker job tool `simulate` (the job line shows its
// progress, its completion note arrives); the answer streams in. Stop ends a streaming turn;
// a reload mid-turn resumes from IndexedDB with the turn interrupted and nothing re-asked.
// Screenshot: tests/artifacts/diffusion-lab-agent.png.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { launch } from '../lib/browser.mjs';
import { repoRoot, serveStatic } from '../lib/server.mjs';
import { startModelServer } from '../../model-server/server.mjs';

const dist = join(repoRoot, 'examples/diffusion-lab/dist');
const artifacts = join(repoRoot, 'tests/artifacts');

let server;
let models;
let browser;
let page;
const pageErrors = [];

const ready = () =>
  page.waitForFunction(() => window.labReady === true && window.labAgentReady === true && window.lab.app.cell('errors').state === 'ready', null, {
    timeout: 30_000,
  });

before(async () => {
  assert.ok(existsSync(join(dist, 'index.html')), 'build the lab first: (cd examples/diffusion-lab && npx vite build)');
  server = await serveStatic(dist);
  models = await startModelServer();
  browser = await launch();
  page = await browser.newPage({ viewport: { width: 1280, height: 1100 } });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  await page.goto(`${server.url}/?model=openai:test&baseUrl=${encodeURIComponent(`${models.url}/v1`)}`);
  await ready();
});

after(async () => {
  await browser?.close();
  await models?.close();
  await server?.close();
});

const say = async (text) => {
  await page.locator('[data-agent-input]').fill(text);
  await page.locator('[data-agent-input]').press('Enter');
};
const turnEnds = () => page.locator('[data-agent-panel] li[data-entry="turn_end"]');

test('lab agent: the model drives the published tools and a Worker job; Stop; a reload resumes', { timeout: 120_000 }, async () => {
  const answer = 'κ is 0.5 now and the error norms are ready; a background run at 800 points has started.';
  models.script([
    { calls: [{ id: 'o1', name: 'observe', arguments: { writes: { diffusivity: 0.5 }, waitFor: ['errors'], selector: 'summary' } }] },
    { calls: [{ id: 'j1', name: 'simulate', arguments: { points: 800, simTime: 0.004 } }] },
    { text: answer, chunkSize: 4, delayMs: 50 },
  ]);
  assert.equal(await page.locator('[data-model-banner]').count(), 0, 'a model is configured: no banner');
  assert.match(await page.locator('[data-model-chip]').innerText(), /openai:test/);
  await say('set κ to 0.5 and check the error, then simulate at 800 points');

  // The answer streams into the live line before it becomes the assistant line.
  await page.locator('[data-agent-live]', { hasText: 'κ is 0.5' }).waitFor({ timeout: 30_000 });
  await turnEnds().first().waitFor({ timeout: 30_000 });
  await page.locator('[data-agent-state="idle"]').waitFor();
  const said = page.locator('[data-agent-panel] li[data-role="assistant"] .said');
  assert.equal(await said.last().innerText(), answer);
  assert.equal(await page.locator('[data-agent-live]').count(), 0, 'the line replaced the live text');

  // The model was offered the lab's tools; it called observe, then simulate.
  const reqs = models.requests();
  assert.equal(reqs.length, 3);
  const offered = reqs[0].body.tools.map((t) => t.function.name);
  for (const t of ['report', 'set', 'act', 'observe', 'wait', 'inspect', 'cancel', 'simulate']) assert.ok(offered.includes(t), `offered ${t}: ${offered}`);
  assert.deepEqual(
    await page.locator('[data-agent-call]').evaluateAll((els) => els.map((e) => e.dataset.agentCall)),
    ['observe', 'simulate'],
  );

  // The observe call moved the page's control and settled the cells, exactly like a person.
  await page.locator('[data-effective="diffusivity"]', { hasText: '0.5' }).waitFor();
  await page.locator('[data-requested="diffusivity"]', { hasText: '0.5 (agent)' }).waitFor();
  const result = page.locator('[data-tool-result="observe"][data-result-status="succeeded"]');
  assert.match(await result.innerText(), /settled at revision \d+/);
  const snap = await page.evaluate(() => {
    const s = window.lab.app.snapshot();
    return { diffusivity: s.controls.diffusivity, errors: s.cells.errors.state, logged: window.lab.calls.map((c) => [c.name, c.status]) };
  });
  assert.deepEqual(snap, { diffusivity: 0.5, errors: 'ready', logged: [['observe', 'settled']] });

  // The simulate call handed its job over: the job line runs to 100 %, its note arrives.
  await page.locator('[data-tool-result="simulate"][data-result-status="succeeded"]').waitFor();
  const jobLine = page.locator('[data-job]');
  await page.locator('[data-job][data-job-state="succeeded"]').waitFor({ timeout: 30_000 });
  assert.equal(await jobLine.locator('[data-job-progress]').innerText(), '100%');
  const job = Number(await jobLine.getAttribute('data-job'));
  const mail = page.locator('[data-agent-panel] li[data-role="completion"]');
  await mail.waitFor();
  assert.match(await mail.innerText(), new RegExp(`job ${job} succeeded`));
  const outcome = await page.evaluate((id) => window.lab.app.runtime.job(id).outcome, job);
  assert.equal(outcome.outcome, 'succeeded');
  assert.equal(outcome.value.points, 800, 'the job ran with the arguments over the lab inputs');
  assert.equal(outcome.value.diffusivity, 0.5);
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, 'diffusion-lab-agent.png'), fullPage: true });

  // Stop: a streaming step is aborted and the turn ends interrupted.
  models.script([{ text: 'Comparing the runs', hang: true }]);
  await say('compare both runs');
  await page.locator('[data-agent-live]', { hasText: 'Comparing' }).waitFor({ timeout: 30_000 });
  await page.locator('[data-agent-state="running"]').waitFor();
  await page.locator('[data-agent-stop]').click();
  await turnEnds().nth(1).waitFor();
  assert.match(await turnEnds().nth(1).innerText(), /interrupted/);
  await page.locator('[data-agent-state="idle"]').waitFor();
  assert.equal(models.requests().length, 4);

  // A reload while the next step streams: the turn is recorded interrupted, nothing re-asked.
  models.script([{ text: 'Looking at the profile', hang: true }]);
  await say('and the profile?');
  await page.locator('[data-agent-live]', { hasText: 'Looking' }).waitFor({ timeout: 30_000 });
  assert.equal(models.requests().length, 5);
  await page.reload();
  await ready();
  const resumed = await page.locator('[data-agent-resumed]').innerText();
  assert.match(resumed, /turn 3 was interrupted during a model step/);
  await page.evaluate(() => window.labAgent.agent.idle());
  assert.equal(await turnEnds().count(), 3);
  assert.match(await turnEnds().nth(2).innerText(), /interrupted/);
  await page.locator('[data-agent-state="idle"]').waitFor();
  // The earlier lines came back from IndexedDB (the job line and its note included).
  assert.equal(await said.first().innerText(), answer);
  assert.equal(await page.locator('[data-agent-panel] li[data-role="completion"]').count(), 1);
  // The job's state and progress, read back from its journal in the store.
  await page.locator(`[data-job="${job}"][data-job-state="succeeded"]`).waitFor();
  assert.equal(await page.locator(`[data-job="${job}"] [data-job-progress]`).innerText(), '100%');
  assert.equal(models.requests().length, 5, 'the interrupted step was not asked again');
  assert.deepEqual(pageErrors, []);
});
