// Agents on actor nodes in headless Chromium on IndexedDB: the scenarios shared with Node
// (the same semantics), and a page reloaded while a model step is pending: the reopened store
// resumes the agent with the turn recorded interrupted ("host restarted"), and nothing re-runs.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch } from '../lib/browser.mjs';
import { serveStatic } from '../lib/server.mjs';
import { actorAgentScenarios } from '../actor-agent-scenarios.mjs';

let server;
let browser;
let page;
const NAME = `weft-actor-agents-${process.pid}`;

before(async () => {
  server = await serveStatic();
  browser = await launch();
  page = await browser.newPage();
  page.on('pageerror', (e) => console.error('page error:', e));
  await page.goto(`${server.url}/tests/js/browser/actors.html`);
  await page.waitForFunction(() => window.actorsReady === true, null, { timeout: 20_000 });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

for (const [i, name] of Object.keys(actorAgentScenarios).entries()) {
  test(`actor agents (Chromium, IndexedDB): ${name}`, { timeout: 30_000 }, async () => {
    const r = await page.evaluate(
      async ({ name, db }) => {
        // `weft/apps`: a scenario drives an ops app (createApp).
        const weft = await import('/wasm/pkg/entry-apps.js');
        const { actorAgentScenarios } = await import('/tests/js/actor-agent-scenarios.mjs');
        let n = 0;
        const names = [];
        const open = (config = {}) => {
          names.push(`${db}-${n++}`);
          return weft.openActorStore({ backend: 'indexeddb', name: names.at(-1), config, title: 'Agents' });
        };
        // Real DOM Workers.
        const worker = (w) => (w === 'diffusion' ? '/examples/diffusion/worker.js' : `/tests/workers/${w}.js`);
        try {
          await actorAgentScenarios[name]({ weft, open, worker });
          return { ok: true };
        } catch (err) {
          return { ok: false, error: String(err?.stack ?? err) };
        } finally {
          for (const x of names) await weft.deleteActorStore(x).catch(() => {});
        }
      },
      { name, db: `${NAME}-s${i}` },
    );
    if (!r.ok) throw new Error(r.error);
  });
}

const chat = (files, node) =>
  files[`nodes/${node}/chat.jsonl`]
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l));

test('actor agents (Chromium): a reload mid-turn resumes the agent from IndexedDB; nothing re-runs', { timeout: 60_000 }, async () => {
  const first = await page.evaluate(async (name) => {
    const weft = await import('/wasm/pkg/index.js');
    const s = await weft.openActorStore({ backend: 'indexeddb', name, title: 'Reload' });
    const root = s.graph().root;
    let asked = 0;
    // A model that never answers: the page goes away while its step is pending.
    const model = () => {
      asked++;
      return new Promise(() => {});
    };
    const a = await s.agent(root, { model });
    await a.say('a long question');
    return { root, asked, phase: a.state().phase, files: await window.idbFiles(name) };
  }, NAME);
  assert.equal(first.asked, 1);
  assert.equal(first.phase, 'model_step');
  const before = chat(first.files, first.root);
  assert.deepEqual(
    before.filter((l) => l.agent).map((l) => l.agent.entry),
    ['turn_start'],
    'the turn start is durable before the model is asked',
  );

  await page.reload();
  await page.waitForFunction(() => window.actorsReady === true);
  const second = await page.evaluate(async (name) => {
    const weft = await import('/wasm/pkg/index.js');
    const s = await weft.openActorStore({ backend: 'indexeddb', name });
    const model = weft.scriptedModel([{ text: 'answered' }]);
    const agents = await s.resumeAgents({ model });
    await s.agentsIdle();
    const out = { nodes: agents.map((a) => a.node), report: agents[0]?.report, requests: model.requests.length, phase: agents[0]?.state().phase };
    await s.close();
    out.files = await window.idbFiles(name);
    return out;
  }, NAME);
  assert.deepEqual(second.nodes, [first.root]);
  assert.equal(second.report.interruptedTurn, 1);
  assert.equal(second.report.modelStepInterrupted, true);
  assert.equal(second.report.pendingTasks, 0);
  assert.equal(second.requests, 0, 'the interrupted step is not asked again');
  assert.equal(second.phase, 'idle');
  const after = chat(second.files, first.root);
  assert.equal(after.length, before.length + 1);
  assert.deepEqual(
    [after.at(-1).role, after.at(-1).agent.entry, after.at(-1).agent.end, after.at(-1).agent.reason],
    ['system', 'turn_end', 'interrupted', 'host restarted during a model step'],
  );

  // Reopening again repeats nothing: the recovery is durable.
  await page.reload();
  await page.waitForFunction(() => window.actorsReady === true);
  const third = await page.evaluate(async (name) => {
    const weft = await import('/wasm/pkg/index.js');
    const s = await weft.openActorStore({ backend: 'indexeddb', name });
    const agents = await s.resumeAgents({ model: weft.scriptedModel([]) });
    const out = { report: agents[0].report, phase: agents[0].state().phase };
    await s.close();
    out.files = await window.idbFiles(name);
    await weft.deleteActorStore(name);
    return out;
  }, NAME);
  assert.equal(third.report.interruptedTurn, null);
  assert.equal(third.phase, 'idle');
  assert.equal(chat(third.files, first.root).length, after.length);
});
