// Agents on actor nodes through the JS package in Node, on the memory store: the scenarios
// shared with Chromium (IndexedDB), plus a provider model (a local OpenAI-compatible server)
// that receives the node's slice, its system text included.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import * as weft from 'weft';
import { actorAgentScenarios } from '../actor-agent-scenarios.mjs';

const open = (config = {}) => weft.openActorStore({ backend: 'memory', config, title: 'Agents' });
// Real worker_threads Workers.
const worker = (name) =>
  name === 'diffusion' ? new URL('../../../examples/diffusion/worker.js', import.meta.url) : new URL(`../../workers/${name}.js`, import.meta.url);

for (const [name, run] of Object.entries(actorAgentScenarios)) {
  test(`actor agents (Node, memory): ${name}`, { timeout: 30_000 }, () => run({ weft, open, worker }));
}

test('actor agents (Node): an OpenAI-compatible model is sent the node slice and streams deltas', { timeout: 30_000 }, async () => {
  const bodies = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      bodies.push(JSON.parse(body));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = (delta, finish = null) => `data: ${JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.end(chunk({ role: 'assistant', content: 'Hel' }) + chunk({ content: 'lo.' }) + chunk({}, 'stop') + 'data: [DONE]\n\n');
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  try {
    const model = weft.openaiModel({ baseUrl: `http://127.0.0.1:${server.address().port}/v1`, model: 'local', apiKey: 'k' });
    const store = await open();
    const root = store.graph().root;
    const agent = await store.agent(root, { model });
    const deltas = [];
    agent.on('model_delta', (d) => d.type === 'text_delta' && deltas.push(d.text));
    await agent.say('say hello');
    await agent.idle();
    assert.deepEqual(deltas, ['Hel', 'lo.']);
    const answer = store.forkView({ node: root }).transcript.filter((l) => l.role === 'assistant').at(-1);
    assert.equal(answer.text, 'Hello.');
    assert.equal(bodies.length, 1);
    const [system, ...rest] = bodies[0].messages;
    assert.equal(system.role, 'system');
    assert.ok(system.content.includes(root), 'the system text names the node');
    assert.deepEqual(rest.at(-1), { role: 'user', content: 'say hello' });
    assert.ok(bodies[0].tools.some((t) => t.function.name === 'spawn'));
    await store.close();
  } finally {
    server.close();
  }
});

test("actor agents (Node): a job tool given another runtime's endpoint is refused; no job runs on either runtime", { timeout: 30_000 }, async () => {
  const store = await open();
  const root = store.graph().root;
  await store.spawn({ parent: root, id: 'lab', type: 'task', title: 'Lab' });
  // Endpoint ids are per runtime, from 1: A's endpoint and B's have the same id.
  const [rtA, rtB] = [weft.createRuntime(), weft.createRuntime()];
  const runs = { a: 0, b: 0 };
  const epA = rtA.openLocal(() => ++runs.a);
  const epB = rtB.openLocal(() => ++runs.b);
  assert.deepEqual([epA.id, epB.id], [1, 1]);
  const simulate = weft.jobTool({ name: 'simulate', endpoint: epA });
  const model = weft.scriptedModel([{ calls: [{ id: 'j1', name: 'simulate', arguments: {} }] }, { text: 'refused' }]);
  const agent = await store.agent('lab', { model, runtime: rtB, tools: [simulate] });
  await store.message({ node: 'lab', text: 'simulate' });
  await agent.idle();
  const results = store.forkView({ node: 'lab' }).transcript.filter((l) => l.agent?.entry === 'tool_result');
  assert.equal(results.length, 1, JSON.stringify(results));
  assert.deepEqual([results[0].agent.tool, results[0].agent.status, results[0].agent.code], ['simulate', 'failed', 'INVALID_ARGUMENT'], JSON.stringify(results[0]));
  assert.deepEqual([rtA.jobs().length, rtB.jobs().length, agent.state().openJobs], [0, 0, []], 'no job on either runtime');
  assert.deepEqual(runs, { a: 0, b: 0 }, 'neither endpoint ran anything');
  await store.close();
  rtA.close();
  rtB.close();
});
