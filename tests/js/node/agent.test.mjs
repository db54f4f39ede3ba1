// Agent sessions in Node: the shared scenarios with real async handlers and worker_threads
// Workers, plus Node-only checks (weft's schema rules against Ajv, a handler that ignores its
// interrupt, error codes).
import { test } from 'node:test';
import Ajv2020 from 'ajv/dist/2020.js';
import { WeftError, createAgent, createRuntime, jobTool, scriptedModel, validateToolArguments } from 'weft';
import { agentScenarios } from '../agent-scenarios.mjs';

const worker = (name) => new URL(`../../workers/${name}.js`, import.meta.url);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

for (const [name, run] of Object.entries(agentScenarios)) {
  test(`agent (worker_threads): ${name}`, { timeout: 30_000 }, () => run({ createRuntime, createAgent, scriptedModel, worker }));
}

function eq(actual, expected, message) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${message}: expected ${e}, got ${a}`);
}

test('weft validates tool arguments exactly as Ajv (JSON Schema 2020-12) does, on its subset', () => {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
  const schemas = [
    { type: 'object', properties: { path: { type: 'string', minLength: 1, maxLength: 5 } }, required: ['path'], additionalProperties: false },
    { type: 'object', properties: { n: { type: 'integer', minimum: 0, exclusiveMaximum: 10, multipleOf: 2 } } },
    { type: 'object', properties: { x: { type: ['number', 'null'] }, tags: { type: 'array', items: { enum: ['a', 'b', 1] }, uniqueItems: true, maxItems: 2 } } },
    { type: 'object', properties: { v: { oneOf: [{ type: 'integer' }, { type: 'number', minimum: 0 }] }, w: { anyOf: [{ const: 1 }, { type: 'string' }] } } },
    { type: 'object', minProperties: 1, maxProperties: 2, additionalProperties: { type: 'boolean' }, not: { required: ['forbidden'] } },
    { type: 'object', properties: { o: { type: 'object', properties: { deep: { type: 'array', minItems: 1, items: { type: 'object', required: ['k'] } } } } }, allOf: [{ required: ['o'] }] },
  ];
  const instances = [
    {}, { path: '' }, { path: 'abc' }, { path: 'abcdef' }, { path: 'a', extra: 1 }, { path: 3 },
    { n: 4 }, { n: 4.0 }, { n: 5 }, { n: 10 }, { n: -2 }, { n: 2.5 }, { n: '4' },
    { x: null }, { x: 1.5 }, { x: 'no' }, { tags: ['a', 1] }, { tags: ['a', 'a'] }, { tags: ['c'] }, { tags: ['a', 'b', 1] },
    { v: 2 }, { v: 0.5 }, { v: -0.5 }, { v: -1 }, { w: 1 }, { w: 1.0 }, { w: 's' }, { w: 2 },
    { a: true }, { a: true, b: false }, { a: true, b: false, c: true }, { a: 1 }, { forbidden: true },
    { o: {} }, { o: { deep: [] } }, { o: { deep: [{ k: 1 }] } }, { o: { deep: [{}] } }, { o: 1 },
  ];
  let compared = 0;
  for (const schema of schemas) {
    const validate = ajv.compile(schema);
    for (const instance of instances) {
      const ours = validateToolArguments(schema, instance);
      const theirs = validate(instance);
      if (ours.ok !== theirs) {
        throw new Error(`disagreement on ${JSON.stringify(instance)} against ${JSON.stringify(schema)}: weft ${JSON.stringify(ours)}, ajv ${theirs} ${JSON.stringify(validate.errors)}`);
      }
      compared++;
    }
  }
  eq(compared, schemas.length * instances.length, 'every pair compared');
  try {
    validateToolArguments({ type: 'object', properties: { p: { type: 'string', pattern: '^a' } } }, {});
    throw new Error('expected INVALID_SCHEMA');
  } catch (err) {
    eq(err.code, 'INVALID_SCHEMA', 'a schema weft cannot enforce is refused');
  }
});

test('a handler that ignores the interrupt is detached; its late result arrives as mail', { timeout: 10_000 }, async () => {
  const rt = createRuntime();
  const agent = createAgent(rt, { graceMs: 30, model: scriptedModel([{ calls: [{ id: 'slow', name: 'slow' }] }]) });
  let finished = false;
  agent.registerTool({ name: 'slow' }, async () => {
    await sleep(150);
    finished = true;
    return 'finished late';
  });
  const turn = agent.run('go');
  while (agent.state.calls?.[0]?.state !== 'running') await sleep(2);
  eq(agent.interrupt('stop'), 'stopping', 'status');
  const r = await turn;
  eq([r.results[0].status, r.results[0].evidence, r.results[0].abortSent], ['uncertain', 'no_settlement', false], 'result');
  eq(finished, false, 'the turn ended while the handler still ran');
  eq(agent.state.detached, [1], 'detached');
  while (agent.mailbox().length === 0) await sleep(5);
  const mail = agent.mailbox()[0];
  eq([mail.kind, mail.result.callId, mail.result.value], ['late_result', 'slow', 'finished late'], 'late result');
  agent.close();
  rt.close();
});

test('errors carry stable codes and change nothing', async () => {
  const rt = createRuntime();
  const agent = createAgent(rt, { model: scriptedModel([]) });
  const code = (fn) => {
    try {
      fn();
    } catch (err) {
      if (!(err instanceof Error)) throw new Error('not an Error');
      return err.code;
    }
    return 'no error';
  };
  eq(code(() => agent.registerTool({ name: 'bad name' }, () => 1)), 'INVALID_TOOL_NAME', 'name');
  eq(code(() => agent.registerTool({ name: 't', parameters: { type: 'string' } }, () => 1)), 'INVALID_SCHEMA', 'schema');
  eq(code(() => agent.registerTool({ name: 't' })), 'INVALID_ARGUMENT', 'handler');
  eq(code(() => agent.steer('x')), 'NO_ACTIVE_TURN', 'steer when idle');
  eq(code(() => agent.unregisterTool('nope')), 'UNKNOWN_TOOL', 'unregister');
  eq(agent.tools().version, 0, 'nothing was registered');
  const r = await agent.run('go');
  eq([r.end, r.message], ['model_failed', 'the model script is exhausted'], 'a failing model ends the turn');
  check(WeftError.prototype instanceof Error, 'WeftError');
  agent.close();
  rt.close();
});

test("a job tool given another runtime's endpoint is refused (INVALID_ARGUMENT); no job runs on either runtime", async () => {
  // Endpoint ids are per runtime, from 1: A's endpoint and B's have the same id.
  const [rtA, rtB] = [createRuntime(), createRuntime()];
  const runs = { a: 0, b: 0 };
  const epA = rtA.openLocal(() => ++runs.a);
  const epB = rtB.openLocal(() => ++runs.b);
  eq([epA.id, epB.id], [1, 1], 'both endpoints are id 1');
  const model = scriptedModel([
    { calls: [{ id: 'j1', name: 'simulate', arguments: { n: 1 } }, { id: 'j2', name: 'direct', arguments: {} }] },
    { text: 'refused' },
  ]);
  const agent = createAgent(rtB, { model });
  const { run, ...decl } = jobTool({ name: 'simulate', endpoint: epA });
  agent.registerTool(decl, run);
  agent.registerTool({ name: 'direct', mayStartJob: true }, (_args, ctx) => ctx.submitJob(epA, {}).id);
  const turn = await agent.run('simulate');
  eq(turn.end, 'completed', 'the turn ends');
  eq(
    turn.results.map((r) => [r.callId, r.status, r.code]),
    [
      ['j1', 'failed', 'INVALID_ARGUMENT'],
      ['j2', 'failed', 'INVALID_ARGUMENT'],
    ],
    'both calls are refused',
  );
  check(/another runtime/.test(turn.results[0].message), turn.results[0].message);
  // A job would have id 1 in the runtime it was submitted to; neither has one.
  eq([rtA.job(1), rtB.job(1), rtA.jobs().length, rtB.jobs().length], [undefined, undefined, 0, 0], 'no job on either runtime');
  eq(runs, { a: 0, b: 0 }, 'neither endpoint ran anything');
  // The agent's own endpoint, and its id, are accepted.
  const ok = scriptedModel([{ calls: [{ id: 'k1', name: 'own', arguments: {} }] }, { text: 'ok' }]);
  const agent2 = createAgent(rtB, { model: ok });
  agent2.registerTool({ name: 'own', mayStartJob: true }, (_args, ctx) => [ctx.submitJob(epB, {}).id, ctx.submitJob(epB.id, {}).id]);
  const t2 = await agent2.run('own');
  eq(t2.results.map((r) => r.status), ['succeeded'], JSON.stringify(t2.results));
  await Promise.all(t2.results[0].value.map((id) => rtB.job(id).wait()));
  eq(runs, { a: 0, b: 2 }, "the agent's own endpoint ran both");
  agent.close();
  agent2.close();
  rtA.close();
  rtB.close();
});

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

test('run() with an AbortSignal withdraws a queued task or interrupts its turn; close() ends the agent', { timeout: 10_000 }, async () => {
  const rt = createRuntime();
  const never = () => new Promise(() => {});
  const agent = createAgent(rt, { model: never });
  const ids = agent.registerTools([
    { name: 'a', supportsParallel: true, handler: () => 1 },
    { name: 'b', safeToCancel: true, handler: () => 2 },
  ]);
  eq(ids, [1, 2], 'handler ids');
  eq(agent.tools().tools.map((t) => [t.name, t.supportsParallel, t.safeToCancel]), [['a', true, false], ['b', false, true]], 'declarations');
  const first = agent.run('first'); // its turn waits for a model that never answers
  const ac = new AbortController();
  const second = agent.run('second', { signal: ac.signal });
  eq(agent.state.queuedTasks, [2], 'second is queued');
  ac.abort(new Error('not needed'));
  try {
    await second;
    throw new Error('expected a rejection');
  } catch (err) {
    eq(err.code, 'ABORTED', 'a queued task is withdrawn');
  }
  eq(agent.state.queuedTasks, [], 'withdrawn');
  const ac2 = new AbortController();
  const third = agent.run('third', { signal: ac2.signal });
  const fourth = agent.run('fourth');
  const firstDone = first.then((r) => r.end);
  agent.interrupt('next');
  eq(await firstDone, 'interrupted', 'first turn interrupted');
  ac2.abort(new Error('stop the third'));
  const r3 = await third;
  eq([r3.end, r3.reason], ['interrupted', 'stop the third'], 'a running task is interrupted');
  // The fourth task's turn is running now; a fifth is queued. Closing ends both.
  const fifth = agent.run('fifth');
  agent.close('shutting down');
  eq((await fourth).end, 'interrupted', 'the running turn is interrupted');
  try {
    await fifth;
    throw new Error('expected a rejection');
  } catch (err) {
    eq(err.code, 'CLOSED', 'a queued task rejects with CLOSED');
  }
  rt.close();
});

test('without a model, each step waits for respond(): the application plays the model', async () => {
  const rt = createRuntime();
  const agent = createAgent(rt);
  agent.registerTool({ name: 'echo', supportsParallel: true }, (args) => args);
  const requests = [];
  agent.on('model_request', () => requests.push(agent.pendingRequest()));
  const turn = agent.run('hello');
  eq(agent.phase, 'model_step', 'waiting for an answer');
  const r1 = agent.pendingRequest();
  eq([r1.step, r1.tools.map((t) => t.name), r1.messages.map((m) => m.role)], [1, ['echo'], ['turn_start', 'task']], 'the request');
  try {
    agent.respond(1, { calls: [{ id: 'x', name: 'echo' }, { id: 'x', name: 'echo' }] });
    throw new Error('expected INVALID_RESPONSE');
  } catch (err) {
    eq(err.code, 'INVALID_RESPONSE', 'duplicate call ids');
  }
  eq(agent.phase, 'model_step', 'a refused answer changes nothing');
  agent.respond(1, { calls: [{ id: 'a', name: 'echo', arguments: { n: 1 } }] });
  while (agent.phase !== 'model_step') await sleep(1);
  try {
    agent.respond(1, { text: 'late' });
    throw new Error('expected STALE_STEP');
  } catch (err) {
    eq(err.code, 'STALE_STEP', 'an answer for an old step');
  }
  const r2 = agent.pendingRequest();
  eq(r2.messages.at(-1).value, { n: 1 }, 'the tool result is in the request');
  agent.respond(r2.step, { text: 'done' });
  const r = await turn;
  eq([r.end, r.text, requests.length], ['completed', 'done', 2], 'the turn');
  eq(agent.pendingRequest(), null, 'nothing pending');
  agent.dispose();
  rt.dispose();
});
