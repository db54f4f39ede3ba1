// Operations through the package as a user imports it: host cells run by the JS layer (sync,
// async, streaming), the diffusion lab headless in Node (its evolution on a real worker_threads
// Worker), driven by the same published tools an agent uses, with JSON Schemas checked by ajv.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Ajv from 'ajv';
import { createAgent, createApp, createClaims, scriptedModel, WeftError } from 'weft';
import { labSpec, analytic } from '../../../examples/diffusion-lab/src/graph.js';

const diffusionWorker = new URL('../../../examples/diffusion/worker.js', import.meta.url);
const tick = () => new Promise((r) => setTimeout(r, 0));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(cond, what, timeoutMs = 15_000) {
  const t0 = Date.now();
  for (;;) {
    const v = cond();
    if (v) return v;
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

/** A deferred the test resolves by hand: a slow asynchronous host calculation. */
function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((a, b) => {
    resolve = a;
    reject = b;
  });
  return { promise, resolve, reject };
}

function hostApp() {
  const app = createApp();
  const runs = [];
  app.load({
    controls: [
      { name: 'a', type: 'number', min: 0, max: 10, step: 1, value: 1 },
      { name: 'b', type: 'number', min: 0, max: 10, step: 1, value: 1 },
      { name: 'label', type: 'string', value: 'x' },
    ],
    cells: [
      {
        name: 'slow',
        deps: ['a', 'b'],
        compute: (inputs, ctx) => {
          const d = deferred();
          runs.push({ inputs, ctx, ...d });
          return d.promise;
        },
      },
      {
        name: 'stream',
        deps: ['slow'],
        compute: async function* ({ slow }, ctx) {
          for (let i = 1; i <= 3; i++) {
            await tick();
            ctx.progress(i / 3);
            yield { slow, i };
          }
        },
      },
      { name: 'title', deps: ['label'], compute: ({ label }) => label.toUpperCase() },
    ],
  });
  return { app, runs };
}

test('JS host cells: a superseded async run is aborted, its late result recorded and never adopted', async () => {
  const { app, runs } = hostApp();
  await tick();
  runs[0].resolve(2);
  await until(() => app.cell('stream').state === 'ready', 'initial stream');
  assert.deepEqual(app.cell('stream').value, { slow: 2, i: 3 });

  const op = app.start({ writes: { a: 3 }, waitFor: ['stream'], select: ['a', 'stream'] });
  await tick();
  assert.equal(runs.length, 2);
  assert.deepEqual(runs[1].inputs, { a: 3, b: 1 });
  // The user moves another relevant control while the request's calculation runs.
  app.set('b', 5, { by: 'user' });
  const out = await op.wait();
  assert.equal(out.outcome, 'superseded');
  assert.equal(out.superseded.stage, 'during_execution');
  assert.deepEqual(out.superseded.changedInputs, ['b']);
  assert.equal(out.superseded.by[0].by, 'user');
  assert.equal(out.result, undefined, 'a superseded request has no result');
  assert.equal(runs[1].ctx.signal.aborted, true, 'the superseded run was aborted');
  assert.equal(runs[1].ctx.signal.reason.code, 'SUPERSEDED');
  runs[1].resolve(99); // it ignored its signal: late evidence
  runs[2].resolve(6);
  await until(() => app.cell('stream').state === 'ready' && app.cell('stream').value.slow === 6, 'replacement');
  const journal = app.calc(runs[1].ctx.calc).journal.map((e) => e.type);
  assert.deepEqual(journal, ['scheduled', 'started', 'superseded', 'late']);
  assert.equal(app.cell('slow').value, 6);
  app.dispose();
});

test('JS host cells: writes in one tick coalesce; cancelling one of two waits leaves the other and the calculation', async () => {
  const { app, runs } = hostApp();
  await tick();
  runs[0].resolve(2);
  await until(() => app.cell('stream').state === 'ready', 'initial');
  app.set('a', 4, { by: 'user' });
  const op = app.start({ writes: { b: 4 }, waitFor: ['slow'] });
  await tick();
  assert.equal(runs.length, 2, 'one calculation for both writes');
  assert.deepEqual(runs[1].inputs, { a: 4, b: 4 });
  const ac = new AbortController();
  const first = op.wait({ signal: ac.signal });
  const second = op.wait();
  ac.abort();
  await assert.rejects(first, (e) => e.code === 'WAIT_CANCELLED');
  assert.equal(runs[1].ctx.signal.aborted, false, 'the calculation is untouched');
  runs[1].resolve(8);
  const out = await second;
  assert.equal(out.outcome, 'settled');
  assert.equal(out.inputs.a, 4);
  assert.deepEqual(app.inspect(op.id).journal[1].coalesced, [1]);
  // An unrelated write never disturbs a waiting operation.
  const op2 = app.start({ writes: { a: 5 }, waitFor: ['slow'] });
  await tick();
  app.set('label', 'y', { by: 'user' });
  await tick();
  assert.equal(op2.outcome, null);
  runs[2].resolve(10);
  assert.equal((await op2.wait()).outcome, 'settled');
  // Aborting observe() cancels that observation only.
  const ac2 = new AbortController();
  const p = app.observe({ writes: { a: 6 }, waitFor: ['slow'], signal: ac2.signal });
  await tick();
  ac2.abort();
  await assert.rejects(p, (e) => e.code === 'WAIT_CANCELLED');
  assert.equal(runs[3].ctx.signal.aborted, false);
  app.dispose();
});

test('JS host cells: an error keeps the previous value; the operation fails with the error', async () => {
  const { app, runs } = hostApp();
  await tick();
  runs[0].resolve(2);
  await until(() => app.cell('slow').state === 'ready', 'initial');
  const p = app.observe({ writes: { a: 7 }, waitFor: ['stream', 'title'] });
  await tick();
  runs[1].reject(Object.assign(new Error('diverged'), { code: 'UNSTABLE' }));
  const out = await p;
  assert.equal(out.outcome, 'failed');
  assert.deepEqual(out.failures.map((f) => [f.reason, f.cell, f.code]), [['errored', 'slow', 'UNSTABLE']]);
  assert.equal(out.cells.title.processed, true);
  const slow = app.cell('slow');
  assert.equal(slow.state, 'errored');
  assert.equal(slow.value, 2, 'the latest value survives the error');
  assert.equal(slow.upToDate, false);
  app.dispose();
});

test('JS host cells: hot replacement mid-run disposes the old calculations; the observation settles on the new instance', async () => {
  const { app, runs } = hostApp();
  await tick();
  runs[0].resolve(2);
  await until(() => app.cell('stream').state === 'ready', 'initial');
  const op = app.start({ writes: { a: 2 }, waitFor: ['slow'] });
  await tick();
  const old = runs[1];
  app.replaceGraph(2, [
    { name: 'slow', deps: ['a', 'b'], compute: ({ a, b }) => 100 * a + b },
    { name: 'title', deps: ['label'], compute: ({ label }) => label },
  ]);
  assert.equal(old.ctx.signal.aborted, true);
  assert.equal(old.ctx.signal.reason.code, 'OWNER_DISPOSED');
  const out = await op.wait();
  assert.equal(out.outcome, 'settled');
  assert.equal(out.cells.slow.calc.split(':')[0], '2', 'settled on the new instance');
  assert.equal(app.cell('slow').value, 201);
  assert.ok(app.inspect(op.id).journal.some((e) => e.type === 'graph_replaced' && e.from === 1 && e.to === 2));
  assert.throws(() => app.replaceGraph(2, []), (e) => e.code === 'INVALID_ARGUMENT');
  old.resolve(7); // late: never adopted
  await tick();
  assert.equal(app.cell('slow').value, 201);
  app.dispose();
});

test('JS host cells: a finished stream commits its last value once; an equal recomputation does not trigger dependents', async () => {
  const app = createApp();
  const runs = { sink: 0, after: 0 };
  app.load({
    controls: [{ name: 'a', type: 'number', min: 0, max: 10, step: 1, value: 1 }],
    cells: [
      {
        name: 'stream',
        deps: ['a'],
        compute: async function* ({ a }) {
          for (let i = 1; i <= 3; i++) {
            await tick();
            yield { a, i, data: new Float64Array([a, i]) };
          }
        },
      },
      { name: 'sink', deps: ['stream'], compute: ({ stream }) => (runs.sink++, stream.i) },
      { name: 'parity', deps: ['a'], compute: ({ a }) => ({ odd: a % 2 === 1, bits: new Uint8Array([a % 2]) }) },
      { name: 'after', deps: ['parity'], compute: ({ parity }) => (runs.after++, parity.odd ? 'odd' : 'even') },
    ],
  });
  await until(() => app.cell('stream').state === 'ready' && app.cell('sink').final, 'the stream and its dependent');
  const stream = app.cell('stream');
  assert.equal(stream.value.i, 3);
  const journal = app.calc(stream.valueCalc).journal;
  assert.deepEqual(
    journal.map((e) => e.type),
    ['scheduled', 'started', 'partial', 'partial', 'partial', 'succeeded'],
  );
  assert.equal(journal.at(-1).lastPartial, true, 'the last partial is the result, not committed again');
  assert.equal(runs.sink, 3, 'the dependent ran once per value, not again for the final');
  assert.equal(app.cell('sink').value, 3);

  // a: 1 → 3 leaves `parity` equal (a fresh object with the same content): `after` keeps its value.
  assert.equal(runs.after, 1);
  const out = await app.observe({ writes: { a: 3 }, waitFor: ['parity', 'after'] });
  assert.equal(out.outcome, 'settled');
  assert.equal(out.cells.parity.noop, false, 'parity recomputed');
  assert.equal(out.cells.after.noop, true, 'after is a processed no-op');
  assert.equal(runs.after, 1, 'an equal value does not trigger dependents');
  const parity = app.calc(app.cell('parity').valueCalc).journal.at(-1);
  assert.deepEqual([parity.type, parity.unchanged], ['succeeded', true]);
  const skipped = app.calcsOf('after').at(-1);
  assert.equal(app.calc(skipped).state, 'skipped');
  assert.equal(app.cell('after').upToDate, true);
  // a: 3 → 4 changes it: the dependent runs.
  await app.observe({ writes: { a: 4 }, waitFor: ['after'] });
  assert.equal(runs.after, 2);
  assert.equal(app.cell('after').value, 'even');
  app.dispose();
});

test('JS app retention: the newest finished records are kept, named ones never pruned, pruned ids say PRUNED', async () => {
  const app = createApp({ retention: { operations: 2, calculations: 2, writes: 2 } });
  app.load({
    controls: [{ name: 'x', type: 'number', min: 0, max: 100, value: 0 }],
    cells: [{ name: 'y', deps: ['x'], compute: ({ x }) => 2 * x }],
  });
  const ops = [];
  for (let i = 1; i <= 6; i++) {
    const op = app.start({ writes: { x: i }, waitFor: ['y'], select: ['y'] });
    app.flush();
    assert.equal(op.outcome.result.y, 2 * i);
    ops.push(op);
  }
  app.flush(); // the next input prunes
  const kept = app.retained();
  assert.equal(kept.operations, 2);
  assert.ok(kept.calcs <= 2 + 2 + 1, `calculations kept: ${kept.calcs}`);
  assert.ok(kept.writes <= 2 + 2, `writes kept: ${kept.writes}`);
  assert.deepEqual(app.operations().map((o) => o.operation), [5, 6]);
  assert.throws(() => app.inspect(1), (e) => e.code === 'PRUNED');
  await assert.rejects(ops[0].wait(), (e) => e.code === 'PRUNED');
  assert.equal(app.receipt(1), undefined);
  assert.equal((await ops[5].wait()).outcome, 'settled');
  assert.equal(app.cell('y').value, 12, 'the current value and its calculation stay');
  assert.equal(app.calc(app.cell('y').valueCalc).state, 'succeeded');
  app.dispose();
});

test('headless diffusion lab in Node, driven by the published tools (worker_threads Worker)', { timeout: 60_000 }, async () => {
  const app = createApp();
  const worker = app.openWorker(diffusionWorker);
  app.load(labSpec(worker));

  // The tools and their JSON Schemas.
  const ajv = new Ajv({ strict: false });
  const tools = Object.fromEntries(app.tools.list().map((t) => [t.name, t]));
  assert.deepEqual(Object.keys(tools), ['report', 'set', 'act', 'observe', 'wait', 'inspect', 'cancel']);
  const validate = Object.fromEntries(Object.values(tools).map((t) => [t.name, ajv.compile(t.inputSchema)]));
  assert.equal(validate.observe({ writes: { diffusivity: 0.5 }, waitFor: ['errors'], selector: 'summary' }), true);
  assert.equal(validate.observe({ writes: { diffusivity: 'hot' } }), false);
  assert.equal(validate.observe({ waitFor: ['nonexistent'] }), false);
  assert.equal(validate.set({ name: 'initial', value: 'step' }), true);
  assert.equal(validate.set({ name: 'colour', value: 1 }), false);
  assert.equal(validate.act({ name: 'stop' }), true);
  await assert.rejects(app.tools.call('set', { name: 'colour', value: 1 }), (e) => e.code === 'UNKNOWN_CONTROL' && /diffusivity, points/.test(e.message));
  await assert.rejects(app.tools.call('observe', { writes: { points: 'many' } }), (e) => e.code === 'INVALID_CONTROL_VALUE');

  const report = await app.tools.call('report', {});
  assert.deepEqual(Object.keys(report.cells).sort(), ['errors', 'evolution', 'profile']);
  assert.deepEqual(report.edges.errors, ['cell:profile', 'control:diffusivity', 'control:initial']);

  // 1. Change controls, observe the consequence: settled, with the selector's summary.
  const settled = await app.tools.call('observe', {
    writes: { diffusivity: 0.5, points: 400, simTime: 0.004 },
    waitFor: ['errors'],
    selector: 'summary',
  });
  assert.equal(settled.outcome, 'settled', JSON.stringify(settled));
  assert.equal(settled.result.diffusivity, 0.5);
  assert.equal(settled.result.points, 400);
  assert.ok(settled.result.t >= 0.004 && settled.result.t < 0.0041, `t = ${settled.result.t}`);
  assert.ok(settled.result.l2 > 0 && settled.result.l2 < 1e-3, `l2 = ${settled.result.l2}`);
  // The numbers are the profile's: check one point against the analytic solution directly.
  const prof = app.cell('profile').value;
  assert.ok(Math.abs(prof.u[200] - analytic(200 / 399, prof.t, 0.5)) < 2e-3);

  // 2. A request superseded mid-run by the user: the tool result says so; no replacement answer.
  const slow = app.tools.call('observe', { writes: { points: 2000, simTime: 0.03 }, waitFor: ['errors'], selector: 'summary' });
  await until(() => (app.cell('evolution').progress ?? 0) > 0.05 && app.cell('evolution').state !== 'ready', 'the slow run to progress');
  const running = app.cell('evolution').calc;
  const receipt = app.set('diffusivity', 0.7, { by: 'user' });
  assert.equal(receipt.accepted, 0.7);
  const superseded = await slow;
  assert.equal(superseded.outcome, 'superseded');
  assert.equal(superseded.superseded.stage, 'during_execution');
  assert.deepEqual(superseded.superseded.changedInputs, ['diffusivity']);
  assert.equal(superseded.superseded.by[0].by, 'user');
  assert.equal(superseded.result, undefined);
  assert.match(superseded.message, /superseded while its calculation was running by diffusivity = 0.7/);
  const evo = app.calc(running);
  assert.equal(evo.state, 'superseded');
  // The worker acknowledges the cancel: evidence on the calculation, not a second outcome.
  await until(() => app.calc(running).journal.some((e) => e.type === 'job_ended'), 'cancel acknowledgement');
  assert.equal(app.calc(running).journal.find((e) => e.type === 'job_ended').outcome, 'cancelled');

  // 3. Stopping is a published action; the held evolution makes a new request fail promptly.
  await app.tools.call('act', { name: 'stop' });
  assert.equal(app.cell('evolution').state, 'held');
  const held = await app.tools.call('observe', { writes: { simTime: 0.002 }, waitFor: ['profile'] });
  assert.equal(held.outcome, 'failed');
  assert.equal(held.failures[0].reason, 'held');
  await app.tools.call('act', { name: 'start' });

  // 4. A slow observation returns a handle (hosted as a job); `wait` returns the outcome.
  const handle = await app.tools.call('observe', { writes: { points: 1500, simTime: 0.02 }, waitFor: ['errors'], waitMs: 5 }, { toolCall: 'c7' });
  assert.equal(handle.status, 'waiting');
  assert.equal(typeof handle.job, 'number');
  const done = await app.tools.call('wait', { operation: handle.operation, timeoutMs: 30_000 });
  assert.equal(done.outcome, 'settled');
  assert.equal(done.job, handle.job);
  const notes = app.runtime.readMailbox('agent');
  assert.equal(notes.length, 1);
  assert.equal(notes[0].job, handle.job);
  const record = await app.tools.call('inspect', { operation: handle.operation });
  assert.deepEqual(
    record.journal.map((e) => e.type).filter((t) => t !== 'calculation'),
    ['accepted', 'effective', 'hosted', 'processed', 'outcome'],
  );
  app.dispose();
});

test("weft's own agent drives the lab through the published app tools (schemas enforced before handlers)", { timeout: 60_000 }, async () => {
  const app = createApp();
  app.load(labSpec(app.openWorker(diffusionWorker)));
  const model = scriptedModel([
    {
      calls: [
        { id: 'c1', name: 'report', arguments: {} },
        { id: 'c2', name: 'observe', arguments: { writes: { diffusivity: 'hot' }, waitFor: ['errors'] } },
        { id: 'c3', name: 'observe', arguments: { writes: { diffusivity: 0.4, simTime: 0.003 }, waitFor: ['errors'], selector: 'summary' } },
      ],
    },
    { text: 'done' },
  ]);
  const agent = createAgent(app.runtime, { id: 'lab-agent', model });
  for (const t of app.tools.list()) {
    agent.registerTool({ name: t.name, description: t.description, parameters: t.inputSchema }, (args, ctx) =>
      app.tools.call(t.name, args, { by: 'lab-agent', toolCall: ctx.callId, owner: 'lab-agent' }),
    );
  }
  const turn = await agent.run('Set the diffusivity to 0.4 and report the error norms.');
  assert.equal(turn.end, 'completed');
  const byId = Object.fromEntries(turn.results.map((r) => [r.callId, r]));
  assert.equal(byId.c1.status, 'succeeded');
  assert.deepEqual(Object.keys(byId.c1.value.controls).sort(), ['diffusivity', 'initial', 'points', 'running', 'seed', 'simTime']);
  // The schema the app published rejects a bad argument before the handler runs.
  assert.notEqual(byId.c2.status, 'succeeded');
  assert.equal(byId.c2.started, false);
  assert.equal(byId.c3.status, 'succeeded', JSON.stringify(byId.c3));
  assert.equal(byId.c3.value.outcome, 'settled');
  assert.equal(byId.c3.value.result.diffusivity, 0.4);
  assert.equal(byId.c3.value.writes[0].toolCall, 'c3');
  app.dispose();
});

test('the agent drives all four app tools with real handlers: settled, held, superseded, and a handle passed to wait', { timeout: 90_000 }, async (t) => {
  const app = createApp();
  let agent = null;
  t.after(() => {
    agent?.dispose();
    app.dispose();
  });
  app.load(labSpec(app.openWorker(diffusionWorker)));
  const resultOf = (request, callId) =>
    request.messages.find((m) => m.role === 'tool_result' && m.callId === callId);
  const model = scriptedModel([
    {
      calls: [
        { id: 'c1', name: 'report', arguments: {} },
        { id: 'c2', name: 'set', arguments: { name: 'points', value: 420 } }, // snapped to the step
        { id: 'c3', name: 'act', arguments: { name: 'stop' } },
        { id: 'c4', name: 'observe', arguments: { writes: { simTime: 0.002 }, waitFor: ['profile'] } },
        { id: 'c5', name: 'act', arguments: { name: 'start' } },
        { id: 'c6', name: 'observe', arguments: { writes: { diffusivity: 0.4, simTime: 0.003 }, waitFor: ['errors'], selector: 'summary' } },
      ],
    },
    { calls: [{ id: 'c7', name: 'observe', arguments: { writes: { points: 2000, simTime: 0.03 }, waitFor: ['errors'], selector: 'summary' } }] },
    { calls: [{ id: 'c8', name: 'observe', arguments: { writes: { points: 1500, simTime: 0.02 }, waitFor: ['errors'], waitMs: 5 } }] },
    // The model reads the handle from c8's result and passes it to `wait`.
    (request) => {
      const handle = resultOf(request, 'c8');
      return { calls: [{ id: 'c9', name: 'wait', arguments: { operation: handle.value.operation, timeoutMs: 30_000 } }] };
    },
    { text: 'done' },
  ]);
  agent = createAgent(app.runtime, { id: 'lab-agent', model });
  for (const tool of app.tools.list()) {
    agent.registerTool({ name: tool.name, description: tool.description, parameters: tool.inputSchema }, (args, ctx) =>
      app.tools.call(tool.name, args, { by: 'lab-agent', toolCall: ctx.callId, owner: 'lab-agent' }),
    );
  }
  // The user moves the diffusivity while c7's calculation runs.
  let c7Started = false;
  agent.on('start_call', (o) => {
    if (o.callId === 'c7') c7Started = true;
  });
  const user = (async () => {
    await until(() => c7Started && app.cell('evolution').state !== 'ready' && (app.cell('evolution').progress ?? 0) > 0.05, 'c7 to run', 60_000);
    return app.set('diffusivity', 0.7, { by: 'user' });
  })();
  const turn = await agent.run('Explore the lab: check the stop action, then try a fine grid.');
  assert.equal(turn.end, 'completed', JSON.stringify(turn));
  assert.equal((await user).accepted, 0.7);

  // One result per call, in model order, each from the real handler.
  assert.deepEqual(turn.results.map((r) => r.callId), ['c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', 'c8', 'c9']);
  assert.ok(turn.results.every((r) => r.status === 'succeeded'), JSON.stringify(turn.results.map((r) => [r.callId, r.status, r.message])));
  const [report, set, stop, held, start, settled, superseded, handle, waited] = turn.results.map((r) => r.value);
  assert.deepEqual(Object.keys(report.cells).sort(), ['errors', 'evolution', 'profile']);
  assert.equal(set.control, 'points');
  assert.equal(set.accepted, 400, 'the receipt says the value was snapped');
  assert.deepEqual(set.adjusted, ['snapped']);
  assert.equal(set.by, 'lab-agent');
  assert.equal(stop.action, 'stop');
  assert.equal(stop.writes[0].control, 'running');
  assert.equal(held.outcome, 'failed');
  assert.equal(held.failures[0].reason, 'held', 'observe sees the effect of act');
  assert.equal(start.writes[0].accepted, true);
  assert.equal(settled.outcome, 'settled');
  assert.equal(settled.result.diffusivity, 0.4);
  assert.equal(settled.writes[0].toolCall, 'c6');
  assert.equal(superseded.outcome, 'superseded');
  assert.equal(superseded.superseded.stage, 'during_execution');
  assert.deepEqual(superseded.superseded.changedInputs, ['diffusivity']);
  assert.equal(superseded.superseded.by[0].by, 'user');
  assert.equal(superseded.result, undefined, 'no replacement answer');
  assert.equal(handle.status, 'waiting');
  assert.equal(typeof handle.job, 'number');
  assert.equal(waited.outcome, 'settled');
  assert.equal(waited.job, handle.job);
  assert.equal(waited.inputs.points, 1500);
  assert.equal(waited.inputs.diffusivity, 0.7, 'settled on the user’s value');
  // The hosted observation's job belongs to the agent: its note waits in the mailbox for the
  // next turn, and no model call was made for it.
  assert.equal(model.requests.length, 5);
  await until(() => agent.mailbox().some((m) => m.kind === 'job' && m.note.job === handle.job), 'the job note in the mailbox');
  assert.equal(agent.phase, 'idle');
  assert.equal(model.requests.length, 5);
});

test("an agent on an app's runtime: a job its tool starts notes the agent's mailbox, admitted at the next turn", async (t) => {
  const app = createApp();
  let agent = null;
  t.after(() => {
    agent?.dispose();
    app.dispose();
  });
  app.load({ controls: [{ name: 'a', type: 'number', min: 0, max: 10, step: 1, value: 1 }], cells: [] });
  const release = deferred();
  const ep = app.openLocal(async (payload) => {
    await release.promise;
    return payload.n * 2;
  });
  const model = scriptedModel([
    { calls: [{ id: 's1', name: 'start', arguments: { n: 21 } }] },
    { text: 'started' },
    { text: 'the job finished' },
  ]);
  agent = createAgent(app.runtime, { id: 'app-agent', model });
  agent.registerTool(
    { name: 'start', mayStartJob: true, parameters: { type: 'object', properties: { n: { type: 'integer' } } } },
    (args, ctx) => ({ job: ctx.submitJob(ep, args).id }),
  );
  const turn = await agent.run('start the job');
  assert.equal(turn.results[0].status, 'succeeded', JSON.stringify(turn.results[0]));
  const job = turn.results[0].value.job;
  assert.deepEqual(turn.results[0].jobs, [job], 'handed over to the agent');
  assert.equal(app.runtime.job(job).state, 'running', 'the job outlives the turn');
  release.resolve();
  await until(() => agent.mailbox().some((m) => m.kind === 'job' && m.note.job === job), "the job's note");
  assert.equal(model.requests.length, 2, 'the note called no model');
  const next = await agent.run('what happened?');
  const admitted = next.messages.filter((m) => m.role === 'mail');
  assert.equal(admitted.length, 1, JSON.stringify(next.messages));
  assert.equal(admitted[0].note.job, job);
  assert.equal(admitted[0].note.outcome, 'succeeded');
  assert.equal(app.runtime.job(job).outcome.value, 42);
});

test("an app's runtime has the registry surface a plain runtime has (forget, gradual close)", async (t) => {
  const app = createApp();
  t.after(() => app.dispose());
  app.load({ controls: [{ name: 'a', type: 'number', min: 0, max: 10, step: 1, value: 1 }], cells: [] });
  const ep = app.openLocal((n) => n * 2);
  const done = ep.submit(3, { owner: 'u' });
  assert.deepEqual(await done.wait(), { outcome: 'succeeded', value: 6 });
  assert.equal(app.runtime.forget(done.id), true, 'a finished job is released');
  assert.equal(app.runtime.job(done.id), undefined);
  const jobs = [1, 2, 3].map((n) => ep.submit(n, { owner: 'v' }));
  await Promise.all(jobs.map((j) => j.wait()));
  const report = await app.runtime.closeOwnerGradually('v', { slice: 1 });
  assert.deepEqual(
    report.jobs.map((j) => [j.job, j.outcome]),
    jobs.map((j) => [j.id, 'succeeded']),
  );
  assert.equal(report.unreadNotes.length, 3, "the owner's unread notes are handed back");
});

test('app tools: a selector over synchronous cells reaches a waiting call; a throwing selector replies without a result', async () => {
  const app = createApp();
  let calls = 0;
  app.load({
    controls: [{ name: 'k', type: 'number', min: 0, max: 10, step: 1, value: 1 }],
    cells: [
      { name: 'one', deps: ['k'], compute: ({ k }) => k + 1 },
      { name: 'two', deps: ['one'], compute: ({ one }) => one * 2 },
      { name: 'three', deps: ['two'], compute: ({ two }) => two * 3 },
    ],
    selectors: {
      sum: () => ({ n: ++calls }),
      broken: () => {
        throw new Error('selector bug');
      },
    },
  });
  await tick();
  // The operation settles while the runtime carries out a batch that also holds the next
  // synchronous cell's calculation: the reply still carries the selector's result.
  const r = await app.tools.call('observe', { writes: { k: 3 }, waitFor: ['one'], selector: 'sum' });
  assert.equal(r.outcome, 'settled');
  assert.deepEqual(r.result, { n: 1 });
  // A selector that throws: the call replies (without a result), it does not hang to waitMs.
  // (It is reported as an uncaught error: captured here so the test runner does not fail.)
  const thrown = [];
  process.setUncaughtExceptionCaptureCallback((e) => thrown.push(e));
  try {
    const t0 = Date.now();
    const b = await app.tools.call('observe', { writes: { k: 4 }, waitFor: ['one'], selector: 'broken', waitMs: 20_000 });
    assert.equal(b.outcome, 'settled');
    assert.equal(b.result, undefined);
    assert.ok(Date.now() - t0 < 10_000);
    await tick();
    assert.equal(thrown.length, 1);
    assert.match(thrown[0].message, /selector bug/);
  } finally {
    process.setUncaughtExceptionCaptureCallback(null);
  }
  app.dispose();
});

test('app tools: aborting a waiting call ends that wait only; dispose rejects a pending call DISPOSED', async () => {
  const { app, runs } = hostApp();
  await tick();
  runs[0].resolve(2);
  await until(() => app.cell('stream').state === 'ready', 'initial');
  // Aborted: the call rejects WAIT_CANCELLED, the calculation and the operation continue.
  const ac = new AbortController();
  const aborted = app.tools.call('observe', { writes: { a: 3 }, waitFor: ['slow'] }, { signal: ac.signal });
  await tick();
  assert.equal(runs.length, 2);
  ac.abort();
  await assert.rejects(aborted, (e) => e.code === 'WAIT_CANCELLED');
  assert.equal(runs[1].ctx.signal.aborted, false);
  runs[1].resolve(5);
  await until(() => app.cell('slow').state === 'ready' && app.cell('slow').value === 5, 'the run continued');
  const last = app.operations().at(-1);
  assert.equal(last.state, 'settled', 'the observation continued without its caller');
  // Replied: the call's abort listener is removed (a later abort does nothing).
  const ac2 = new AbortController();
  let removed = 0;
  const remove = ac2.signal.removeEventListener.bind(ac2.signal);
  ac2.signal.removeEventListener = (...args) => {
    removed += 1;
    return remove(...args);
  };
  const replied = app.tools.call('observe', { writes: { a: 4 }, waitFor: ['slow'] }, { signal: ac2.signal });
  await tick();
  runs[2].resolve(6);
  assert.equal((await replied).outcome, 'settled');
  assert.equal(removed, 1);
  ac2.abort();
  // Disposed while a call waits: it rejects DISPOSED; a call after dispose rejects DISPOSED.
  const pending = app.tools.call('observe', { writes: { a: 7 }, waitFor: ['slow'] });
  await tick();
  app.dispose();
  await assert.rejects(pending, (e) => e.code === 'DISPOSED');
  await assert.rejects(app.tools.call('report', {}), (e) => e.code === 'DISPOSED');
});

test('hostAsJob: a waiting operation becomes a job (progress journaled, mailbox note); cancelling the job cancels only the observation', async () => {
  const { app, runs } = hostApp();
  await tick();
  runs[0].resolve(2);
  await until(() => app.cell('stream').state === 'ready', 'initial');
  const op = app.start({ writes: { a: 3 }, waitFor: ['slow'] });
  await tick();
  const job = op.hostAsJob({ owner: 'agent' });
  assert.equal(app.hostAsJob(op.id).id, job.id, 'hosting again gives the same job');
  runs[1].ctx.progress(0.5);
  runs[1].resolve(6);
  const out = await job.wait();
  assert.equal(out.outcome, 'succeeded');
  assert.equal(out.value.operation, op.id);
  assert.equal(out.value.outcome, 'settled');
  assert.equal(out.value.job, job.id);
  assert.ok(job.journal().some((e) => e.type === 'progress' && e.value.progress === 0.5), 'progress on the job journal');
  assert.deepEqual(app.runtime.readMailbox('agent').map((n) => n.job), [job.id]);
  assert.equal(op.hostAsJob().id, job.id, 'a hosted operation keeps its job once finished');
  const quick = app.start({ writes: { label: 'z' }, waitFor: ['title'] });
  await quick.wait();
  assert.throws(() => quick.hostAsJob(), (e) => e.code === 'INVALID_ARGUMENT', 'a finished operation is not hosted');

  const op2 = app.start({ writes: { a: 4 }, waitFor: ['slow'] });
  await tick();
  const job2 = op2.hostAsJob();
  job2.cancel('stopped waiting');
  assert.equal((await job2.wait()).outcome, 'cancelled');
  assert.equal(op2.outcome.outcome, 'cancelled');
  assert.equal(runs[2].ctx.signal.aborted, false, 'the calculation continues');
  app.dispose();
});

test('createClaims: the newest desire wins, a late acquisition is released unadopted; errors park; dispose releases', async () => {
  const log = [];
  const pending = new Map();
  const claims = createClaims({
    acquire: (desire, { claim, attempt }) => {
      log.push(['acquire', claim, attempt, desire]);
      return new Promise((resolve, reject) => pending.set(attempt, { resolve, reject }));
    },
    release: async (resource, { claim, attempt }) => {
      log.push(['release', claim, attempt, resource]);
    },
  });
  claims.desire('worker', { source: 'A' });
  claims.desire('worker', { source: 'B' });
  const ac = new AbortController();
  const cancelled = claims.settled('worker', { signal: ac.signal });
  const settled = claims.settled('worker');
  ac.abort();
  await assert.rejects(cancelled, (e) => e instanceof WeftError && e.code === 'WAIT_CANCELLED');
  assert.equal(claims.phase('worker'), 'pending', 'aborting a wait leaves the claim');
  pending.get(1).resolve('res A');
  await tick();
  assert.deepEqual(log, [
    ['acquire', 'worker', 1, { source: 'A' }],
    ['release', 'worker', 1, 'res A'],
    ['acquire', 'worker', 2, { source: 'B' }],
  ]);
  pending.get(2).resolve('res B');
  const state = await settled;
  assert.equal(state.phase, 'active');
  assert.deepEqual(state.held, { source: 'B' });
  assert.equal(claims.held('worker'), 'res B');
  claims.desire('worker', { source: 'B' });
  assert.equal(log.length, 3, 'an equal (JSON) desire changes nothing');

  claims.desire('mic', 1);
  pending.get(3).reject(new Error('denied'));
  const parked = await claims.settled('mic');
  assert.equal(parked.phase, 'error');
  assert.equal(parked.error, 'denied');
  assert.equal(claims.phase('worker'), 'active', 'claims are independent');
  claims.retry('mic');
  assert.equal(claims.phase('mic'), 'pending');
  assert.throws(() => claims.retry('nothing'), (e) => e instanceof WeftError && e.code === 'UNKNOWN_CLAIM');

  const waiting = claims.settled('mic');
  claims.dispose();
  await assert.rejects(waiting, (e) => e.code === 'DISPOSED');
  await tick();
  assert.deepEqual(log.at(-1), ['release', 'worker', 2, 'res B'], 'dispose releases what is held');
  pending.get(4).resolve('late mic');
  await tick();
  assert.deepEqual(log.at(-1), ['release', 'mic', 4, 'late mic'], 'an acquisition that arrives after dispose is released');
  assert.throws(() => claims.desire('worker', null), (e) => e.code === 'DISPOSED');
});

test('controls named after Object.prototype members reach a cell as own inputs and a select as own keys', async () => {
  const app = createApp();
  const seen = [];
  app.load({
    controls: [
      { name: '__proto__', type: 'number', min: 0, max: 10, step: 1, value: 1 },
      { name: 'toString', type: 'number', min: 0, max: 10, step: 1, value: 2 },
    ],
    cells: [
      {
        name: 'sum',
        deps: ['__proto__', 'toString'],
        compute: (inputs) => {
          seen.push(inputs);
          return inputs.__proto__ + inputs.toString;
        },
      },
    ],
  });
  const out = await app.observe({ writes: { toString: 3 }, waitFor: ['sum'], select: ['__proto__', 'toString', 'sum'] });
  assert.equal(out.outcome, 'settled');
  const inputs = seen.at(-1);
  assert.deepEqual(Object.keys(inputs).sort(), ['__proto__', 'toString']);
  assert.equal(Object.getPrototypeOf(inputs), Object.prototype, 'the prototype is untouched');
  assert.deepEqual(Object.keys(out.result).sort(), ['__proto__', 'sum', 'toString'], 'the selected values');
  assert.equal(Object.getOwnPropertyDescriptor(out.result, '__proto__')?.value, 1);
  assert.equal(app.cell('sum').value, 4);
  app.dispose();
});
