// The actor graph through the JS package in Node (memory store): mutations resolve after the
// store committed them, errors carry the core's codes, views are the core's projections.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openActorStore, WeftError } from 'weft';

test('spawn, route, disambiguate and resolve through the JS API', async () => {
  const s = await openActorStore({ backend: 'memory', title: 'Node' });
  assert.deepEqual(s.report.repairs, []);
  const changes = [];
  s.onChange((e) => changes.push(...e));
  const t = await s.spawn({ parent: 'coordinator', type: 'task', title: 'docs sync', reason: 'multi-repo docs' });
  assert.equal(t.id, 'docs-sync');
  assert.equal(t.markerLine, 2);
  assert.equal(t.gitCloseout, 'coordinator-batch');
  assert.ok(changes.some((c) => c.kind === 'spawned' && c.node === 'docs-sync'));

  const drift = await s.route({ node: 'coordinator', text: 'Side note: the bot config lives in .github' });
  assert.equal(drift.outcome, 'spawned');
  assert.equal(drift.trigger, 'model');
  const d = await s.route({ node: 'coordinator', text: 'Continue the merge or we could also refactor the timeline' });
  assert.equal(d.type, 'disambiguation');
  await assert.rejects(s.message({ node: 'coordinator', text: 'hello?' }), (e) => e instanceof WeftError && e.code === 'ROUTING_PAUSED');
  await assert.rejects(s.message({ node: 'coordinator', text: '50%', role: 'progress' }), { code: 'ROUTING_PAUSED' });
  const r = await s.resolve({ node: d.id, candidates: ['continue', { type: 'task', title: 'refactor timeline' }] });
  assert.deepEqual(r.created, ['refactor-timeline']);
  await assert.rejects(s.message({ node: 'coordinator', text: '50%', role: 'progress' }), { code: 'CADENCE_VIOLATION' });
  assert.equal((await s.message({ node: 'coordinator', text: 'back to it' })).line, 7);

  const g = s.graph();
  assert.deepEqual(
    g.nodes.map((n) => [n.id, n.spawnedBy]),
    [
      ['coordinator', null],
      ['docs-sync', 'coordinator'],
      ['the-bot-config-lives-in-github', 'coordinator'],
      ['disambig-boundary', 'coordinator'],
      ['refactor-timeline', 'coordinator'],
    ],
  );
  assert.deepEqual(s.lineageView(), []);
  assert.equal(s.auditView().problems, 0);
  assert.equal(s.gridView().total, 2);
  await s.close();
});

test('wait graph, bad input and ordering through the JS API', async () => {
  const s = await openActorStore({ backend: 'memory', config: { ACTOR_WAIT_GRAPH: 'warn' } });
  await s.spawn({ parent: 'coordinator', id: 'ci' });
  await s.spawn({ parent: 'coordinator', id: 'release', waitOn: [{ node: 'ci', mode: 'enforce' }] });
  assert.throws(() => s.view('model', { node: 'release' }), { code: 'WAIT_BLOCKED' });
  await s.status({ node: 'ci', status: 'done', summary: 'green' });
  assert.equal(s.view('model', { node: 'release' }).waits[0].outcome, 'terminal');
  await assert.rejects(s.spawn({ parent: 'coordinator', id: '../x' }), { code: 'INVALID_NODE_ID' });
  await assert.rejects(s.spawn({ parent: 'ghost' }), { code: 'UNKNOWN_NODE' });
  await assert.rejects(s.wait({ node: 'ci', on: 'release', mode: 'enforce' }), { code: 'WAIT_CYCLE' });
  await assert.rejects(openActorStore({ backend: 'memory', config: { GIT_CLOSEOUT: 'yolo' } }), { code: 'CONFIG_INVALID' });
  // Concurrent calls are applied in call order, each after the previous one committed.
  const many = await Promise.all(Array.from({ length: 10 }, (_, i) => s.spawn({ parent: 'release', id: `p${i}` })));
  assert.deepEqual(
    many.map((m) => m.markerLine),
    Array.from({ length: 10 }, (_, i) => i + 2),
  );
  const ac = new AbortController();
  ac.abort();
  await assert.rejects(s.narrate({ text: 'x' }, { signal: ac.signal }), { name: 'AbortError' });
  await s.close();
  await assert.rejects(s.narrate({ text: 'x' }), { code: 'CLOSED' });
});
