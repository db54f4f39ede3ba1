// The same actor core in headless Chromium with IndexedDB persistence: mutations resolve after
// the IndexedDB transaction committed, a reload reopens the identical graph, and a store left
// half-written (a torn line, a child without its parent's record) is recovered on open.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch } from '../lib/browser.mjs';
import { serveStatic } from '../lib/server.mjs';

let server;
let browser;
let page;
const NAME = `weft-actors-test-${process.pid}`;

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

const lineage = (g) => g.nodes.map((n) => [n.id, n.type, n.spawnedBy, n.spawned]);

test('IndexedDB: mutations are durable when they resolve; a reload reopens the same graph', { timeout: 30_000 }, async () => {
  const first = await page.evaluate(async (name) => {
    const s = await window.weftActors.openActorStore({ backend: 'indexeddb', name, title: 'Browser' });
    const t = await s.spawn({ parent: 'coordinator', type: 'task', title: 'docs sync' });
    // Already committed: a separate connection sees the child and the parent's record.
    const raw = await window.idbFiles(name);
    const committed = JSON.parse(raw['nodes/coordinator/meta.json']).spawned;
    await s.route({ node: 'coordinator', text: 'Side note: the bot config lives in .github' });
    const d = await s.route({ node: 'coordinator', text: 'Continue the merge or we could also refactor the timeline' });
    let paused = null;
    try {
      await s.message({ node: 'coordinator', text: 'hi' });
    } catch (e) {
      paused = e.code;
    }
    await s.resolve({ node: d.id, candidates: [{ type: 'task', title: 'refactor timeline' }] });
    await s.status({ node: t.id, status: 'running', summary: 'PR open' });
    await s.message({ node: t.id, text: 'Start with the README links.' });
    const g = s.graph();
    await s.close();
    return { g, committed, paused, address: g.nodes[0].id, files: Object.keys(raw).length };
  }, NAME);
  assert.deepEqual(first.committed, ['docs-sync']);
  assert.equal(first.paused, 'ROUTING_PAUSED');
  assert.equal(first.g.nodes.length, 5);

  await page.reload();
  await page.waitForFunction(() => window.actorsReady === true);
  const again = await page.evaluate(async (name) => {
    const s = await window.weftActors.openActorStore({ backend: 'indexeddb', name });
    const out = { g: s.graph(), report: s.report, violations: s.lineageView(), audit: s.auditView(), fork: s.forkView({ node: 'docs-sync' }) };
    await s.close();
    return out;
  }, NAME);
  assert.deepEqual(lineage(again.g), lineage(first.g));
  assert.deepEqual(again.report.repairs, []);
  assert.deepEqual(again.report.diagnostics, []);
  assert.deepEqual(again.violations, []);
  assert.equal(again.audit.problems, 0);
  assert.equal(again.fork.mailbox.summary, 'PR open');
  assert.equal(again.fork.transcript.at(-1).text, 'Start with the README links.');
});

test('IndexedDB: a half-written store is reported and recovered on open', { timeout: 30_000 }, async () => {
  const out = await page.evaluate(async (name) => {
    // Damage the store the way an interrupted writer would: a child created without its
    // parent's record, and a torn last line in the parent's chat.
    await window.idbFiles(name, (store) => {
      const meta = {
        id: 'orphan', type: 'task', address: `idb://${name}/nodes/orphan`, spawnedBy: 'docs-sync', spawned: [],
        status: 'idle', summary: 'half-finished', createdAt: new Date().toISOString(),
      };
      store.put(JSON.stringify(meta, null, 2), 'nodes/orphan/meta.json');
      store.put('', 'nodes/orphan/chat.jsonl');
    });
    const raw = await window.idbFiles(name);
    await window.idbFiles(name, (store) => store.put(raw['nodes/docs-sync/chat.jsonl'] + '{"at":"2026-', 'nodes/docs-sync/chat.jsonl'));
    const s = await window.weftActors.openActorStore({ backend: 'indexeddb', name });
    const first = { report: s.report, violations: s.lineageView(), spawned: s.graph().nodes.find((n) => n.id === 'docs-sync').spawned };
    await s.message({ node: 'orphan', text: 'accepted after recovery' });
    await s.close();
    const s2 = await window.weftActors.openActorStore({ backend: 'indexeddb', name });
    const second = { report: s2.report, violations: s2.lineageView() };
    await s2.close();
    await window.weftActors.deleteActorStore(name);
    return { first, second };
  }, NAME);
  const torn = out.first.report.diagnostics.find((d) => d.code === 'TORN_LINE');
  assert.equal(torn.file, 'nodes/docs-sync/chat.jsonl');
  assert.equal(torn.line, 3);
  assert.ok(out.first.report.repairs.some((r) => r.includes('linked `orphan` into `docs-sync`')), JSON.stringify(out.first.report));
  assert.deepEqual(out.first.spawned, ['orphan']);
  assert.deepEqual(out.first.violations, []);
  assert.deepEqual(out.second.report.repairs, [], 'the recovery was persisted');
  assert.deepEqual(out.second.violations, []);
});
