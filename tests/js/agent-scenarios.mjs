// Agent-session scenarios with real async handlers and real Workers, shared by the Node tests
// (worker_threads) and the browser tests (DOM Workers in Chromium). Each scenario receives
// `{createRuntime, createAgent, scriptedModel, worker(name)}` and throws on failure.

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}
function eq(actual, expected, message) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${message}: expected ${e}, got ${a}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const obj = { type: 'object' };

/** Resolves at the first journal event of `type` (replaying history). */
function firstEvent(job, type) {
  return new Promise((resolve) => {
    const stop = job.observe((d) => {
      if (d.type === type) {
        stop();
        resolve(d);
      }
    });
  });
}

/** Resolves once `cond()` holds, polling every few milliseconds (bounded). */
async function until(cond, message, ms = 10_000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting: ${message}`);
    await sleep(5);
  }
}

export const agentScenarios = {
  async 'parallel tools overlap, an exclusive tool runs alone, results keep model order'({ createRuntime, createAgent, scriptedModel }) {
    const rt = createRuntime();
    const log = [];
    const model = scriptedModel([
      {
        text: 'working',
        calls: [
          { id: 'a', name: 'fetch', arguments: { ms: 60 } },
          { id: 'b', name: 'fetch', arguments: { ms: 35 } },
          { id: 'c', name: 'fetch', arguments: '{"ms": 10}' },
          { id: 'd', name: 'save', arguments: { ms: 10 } },
          { id: 'e', name: 'fetch', arguments: { ms: 20 } },
          { id: 'f', name: 'fetch', arguments: { ms: 5 } },
        ],
      },
      { text: 'done' },
    ]);
    const agent = createAgent(rt, { model });
    const body = async ({ ms }, ctx) => {
      log.push(`start ${ctx.callId}`);
      await sleep(ms);
      log.push(`end ${ctx.callId}`);
      return { call: ctx.callId, origin: ctx.origin };
    };
    const schema = { type: 'object', properties: { ms: { type: 'integer', minimum: 0 } }, required: ['ms'] };
    agent.registerTool({ name: 'fetch', parameters: schema, supportsParallel: true }, body);
    agent.registerTool({ name: 'save', parameters: schema }, body);
    const r = await agent.run('go');
    eq(
      log,
      ['start a', 'start b', 'start c', 'end c', 'end b', 'end a', 'start d', 'end d', 'start e', 'start f', 'end f', 'end e'],
      'a, b, c overlap; d runs alone; e, f overlap',
    );
    eq(r.end, 'completed', 'turn end');
    eq(r.text, 'done', 'final text');
    eq(r.results.map((x) => x.callId), ['a', 'b', 'c', 'd', 'e', 'f'], 'model order, not completion order');
    eq(r.results.map((x) => x.value.call), ['a', 'b', 'c', 'd', 'e', 'f'], 'each result keeps its identity');
    eq(r.results[0].value.origin, { thread: 'agent', turn: 'turn-1', toolCall: 'a' }, 'origin of a call');
    eq(model.requests.length, 2, 'two model steps');
    eq(agent.phase, 'idle', 'idle after the turn');
    agent.close();
    rt.close();
  },

  async 'a handler that throws fails its call; the others keep their results'({ createRuntime, createAgent, scriptedModel }) {
    const rt = createRuntime();
    const agent = createAgent(rt, {
      model: scriptedModel([
        {
          calls: [
            { id: 'ok', name: 't', arguments: { n: 1 } },
            { id: 'sync', name: 't', arguments: { n: 0 } },
            { id: 'async', name: 't', arguments: { n: -1 } },
            { id: 'bad', name: 't', arguments: { n: 'x' } },
            { id: 'ok2', name: 't', arguments: { n: 2 } },
          ],
        },
        { text: 'done' },
      ]),
    });
    agent.registerTool(
      { name: 't', parameters: { type: 'object', properties: { n: { type: 'number' } } }, supportsParallel: true },
      (args) => {
        if (args.n === 0) throw new TypeError('synchronous failure');
        if (args.n < 0) return sleep(5).then(() => Promise.reject(Object.assign(new Error('async failure'), { code: 'E_ASYNC' })));
        return sleep(5).then(() => args.n * 10);
      },
    );
    const r = await agent.run('go');
    const by = Object.fromEntries(r.results.map((x) => [x.callId, x]));
    eq([by.ok.status, by.ok.value], ['succeeded', 10], 'ok');
    eq([by.sync.status, by.sync.started, by.sync.message], ['failed', true, 'synchronous failure'], 'sync throw');
    eq([by.async.status, by.async.code, by.async.message], ['failed', 'E_ASYNC', 'async failure'], 'async rejection');
    eq([by.bad.status, by.bad.started, by.bad.code], ['rejected', false, 'INVALID_ARGUMENTS'], 'schema refusal');
    eq([by.ok2.status, by.ok2.value], ['succeeded', 20], 'ok2');
    agent.close();
    rt.close();
  },

  async 'a tool change during a model step never reinterprets the calls that step selected'({ createRuntime, createAgent }) {
    const rt = createRuntime();
    let agent;
    const seen = [];
    const running = { old: 0, max: 0 };
    const oldRead = async ({ path }) => {
      running.old++;
      running.max = Math.max(running.max, running.old);
      await sleep(10);
      running.old--;
      return `old:${path}`;
    };
    const model = async (request) => {
      seen.push({ step: request.step, tools: request.tools.map((t) => `${t.name}:${t.supportsParallel}`) });
      if (request.step === 1) {
        // The application replaces `read` (now exclusive, new handler) and adds `write` while
        // the model is thinking.
        agent.registerTool({ name: 'read', parameters: obj }, async ({ path }) => `new:${path}`);
        agent.registerTool({ name: 'write', parameters: obj, supportsParallel: true }, async () => 'w');
        await sleep(5);
        return { calls: [{ id: 'r1', name: 'read', arguments: { path: 'a' } }, { id: 'r2', name: 'read', arguments: { path: 'b' } }, { id: 'w', name: 'write' }] };
      }
      if (request.step === 2) return { calls: [{ id: 'r3', name: 'read', arguments: { path: 'c' } }] };
      return { text: 'done' };
    };
    agent = createAgent(rt, { model });
    agent.registerTool({ name: 'read', parameters: obj, supportsParallel: true }, oldRead);
    const r = await agent.run('go');
    eq(seen, [
      { step: 1, tools: ['read:true'] },
      { step: 2, tools: ['read:false', 'write:true'] },
      { step: 3, tools: ['read:false', 'write:true'] },
    ], 'each step saw its own snapshot');
    eq(r.results.map((x) => [x.callId, x.status, x.value ?? x.code]), [
      ['r1', 'succeeded', 'old:a'],
      ['r2', 'succeeded', 'old:b'],
      ['w', 'rejected', 'UNKNOWN_TOOL'],
      ['r3', 'succeeded', 'new:c'],
    ], 'step 1 ran with its snapshot, step 2 with the new one');
    eq(running.max, 2, 'the two reads of step 1 overlapped (parallel in their snapshot)');
    agent.close();
    rt.close();
  },

  async 'a Worker job started by a tool outlives the turn; progress never calls the model; its note waits for admission'({ createRuntime, createAgent, scriptedModel, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('aiui'), { hello: 'skip' });
    const model = scriptedModel([
      { calls: [{ id: 'sim', name: 'simulate', arguments: { chunks: 40, chunkMs: 4 } }] },
      { text: 'started it' },
      (request) => {
        const mail = request.messages.filter((m) => m.role === 'mail');
        return { text: `mail: ${mail.map((m) => `${m.kind} ${m.note.summary}`).join(', ')}` };
      },
    ]);
    const agent = createAgent(rt, { id: 'agent-w', model });
    agent.registerTool({ name: 'simulate', parameters: obj, mayStartJob: true }, (args, ctx) => {
      const job = ctx.submitJob(ep, args);
      return { job: job.id };
    });
    const r = await agent.run('simulate');
    eq(r.end, 'completed', 'the turn completed');
    const jobId = r.results[0].value.job;
    eq(r.results[0].jobs, [jobId], 'the call handed its job over');
    const job = rt.job(jobId);
    eq(job.state, 'running', 'the job outlives the turn');
    eq(job.info.owner, 'agent-w', 'the agent owns the job');
    eq(job.info.origin, { thread: 'agent-w', turn: 'turn-1', toolCall: 'sim' }, 'origin');
    const outcome = await job.wait();
    eq(outcome.outcome, 'succeeded', 'job outcome');
    const progress = job.journal().filter((e) => e.type === 'progress').length;
    check(progress >= 40, `many progress events (${progress})`);
    await until(() => agent.mailbox().length === 1, 'the note');
    eq(model.requests.length, 2, 'neither progress nor the note called the model');
    eq(agent.phase, 'idle', 'the agent stays idle');
    const mail = agent.mailbox()[0];
    eq([mail.kind, mail.note.job, mail.note.outcome], ['job', jobId, 'succeeded'], 'the note');
    const r2 = await agent.run('what happened?');
    eq(r2.text, `mail: job job-${jobId} succeeded`, 'the next turn admitted the note');
    eq(agent.mailbox().length, 0, 'admitted mail leaves the mailbox');
    agent.close();
    rt.close();
  },

  async 'interrupting a call that waits on its Worker job: uncertain, handed over, the job continues'({ createRuntime, createAgent, scriptedModel, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('aiui'), { hello: 'skip' });
    const model = scriptedModel([{ calls: [{ id: 'w', name: 'simulate_and_wait', arguments: { chunks: 60, chunkMs: 4 } }] }]);
    const agent = createAgent(rt, { model });
    let job;
    agent.registerTool({ name: 'simulate_and_wait', parameters: obj, mayStartJob: true, safeToCancel: true }, async (args, ctx) => {
      job = ctx.submitJob(ep, args);
      return job.wait({ signal: ctx.signal });
    });
    const turn = agent.run('simulate and wait');
    await until(() => job !== undefined, 'the job');
    await firstEvent(job, 'progress');
    eq(agent.interrupt('user pressed stop'), 'stopping', 'interrupt status');
    const r = await turn;
    eq(r.end, 'interrupted', 'turn end');
    eq(r.reason, 'user pressed stop', 'reason');
    const res = r.results[0];
    eq([res.status, res.started, res.evidence, res.jobs, res.handedOver], ['uncertain', true, 'abort_acknowledged', [job.id], true], 'the call result');
    eq(job.state, 'running', 'the job continues after the interrupt');
    eq(job.info.cancelRequested, false, 'nobody cancelled the job');
    eq((await job.wait()).outcome, 'succeeded', 'the job finished on its own');
    await until(() => agent.mailbox().length === 1, 'the note');
    eq(model.requests.length, 1, 'no model call since');
    agent.close();
    rt.close();
  },

  async 'cancelling before any call started, and calls of later groups that never started'({ createRuntime, createAgent }) {
    const rt = createRuntime();
    let modelSignal;
    let step = 0;
    const model = (request, { signal }) => {
      step++;
      if (step === 1) {
        modelSignal = signal;
        return new Promise(() => {}); // never answers
      }
      if (step === 2) return { calls: [{ id: 'e1', name: 'slow' }, { id: 'e2', name: 'slow' }, { id: 'p', name: 'quick' }] };
      return { text: 'done' };
    };
    const agent = createAgent(rt, { model });
    let started = 0;
    agent.registerTool({ name: 'slow', parameters: obj, safeToCancel: true }, async (_args, ctx) => {
      started++;
      await new Promise((_r, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
    });
    agent.registerTool({ name: 'quick', parameters: obj, supportsParallel: true }, () => 'quick');
    const first = agent.run('one');
    await until(() => modelSignal !== undefined, 'the model call');
    eq(agent.interrupt('stop'), 'ended', 'ended at once');
    const r1 = await first;
    eq([r1.end, r1.results.length, started], ['interrupted', 0, 0], 'nothing started');
    check(modelSignal.aborted, 'the model call was aborted');
    const second = agent.run('two');
    await until(() => started === 1, 'e1 running');
    eq(agent.interrupt('stop again'), 'stopping', 'stopping');
    const r2 = await second;
    eq(r2.results.map((x) => [x.callId, x.status, x.started]), [
      ['e1', 'uncertain', true],
      ['e2', 'not_started', false],
      ['p', 'not_started', false],
    ], 'never-started calls are distinguished from started ones');
    eq(r2.results[1].safeToRetry, true, 'safe to retry');
    eq(started, 1, 'e2 never ran');
    agent.close();
    rt.close();
  },

  async 'a job with wake starts a turn; steering waits for the next safe point'({ createRuntime, createAgent, scriptedModel, worker }) {
    const rt = createRuntime();
    const ep = rt.openWorker(worker('aiui'), { hello: 'skip' });
    const model = scriptedModel([
      (req) => {
        const { wake, job } = req.messages.at(-2).cause;
        return { text: `woken by ${wake} ${job}; ${req.messages.at(-1).kind}` };
      },
      { calls: [{ id: 'q', name: 'quick' }] },
      (req) => ({ text: `after: ${req.messages.slice(-2).map((m) => m.role).join(',')}` }),
    ]);
    const agent = createAgent(rt, { id: 'waker', model });
    let release;
    agent.registerTool({ name: 'quick', parameters: obj }, () => new Promise((r) => (release = r)));
    const turns = [];
    agent.on('turn_ended', (o) => turns.push(o.end));
    const job = ep.submit({ chunks: 5, chunkMs: 2 }, { owner: 'waker', wake: true });
    await job.wait();
    await until(() => turns.length === 1, 'the wake turn');
    const t = agent.transcript();
    eq(t.at(-2).text, `woken by job ${job.id}; job`, 'the wake turn admitted the note');
    const run = agent.run('task');
    await until(() => release !== undefined, 'the tool runs');
    agent.steer('also consider X');
    release('q done');
    const r = await run;
    eq(r.text, 'after: tool_result,steer', 'steering was delivered after the results, before the next step');
    agent.close();
    rt.close();
  },

  async 'observations and standing desires queue without a model call'({ createRuntime, createAgent, scriptedModel }) {
    const rt = createRuntime();
    const model = scriptedModel([(req) => ({ text: JSON.stringify(req.messages.filter((m) => m.role === 'mail' || m.role === 'standing').map((m) => m.value)) })]);
    const agent = createAgent(rt, { model });
    for (let i = 0; i < 100; i++) agent.setStanding('dataset', `D${i}`);
    agent.postObservation('analysis/spectrum', { peak: 3.5, data: new Float64Array([1, 2]) });
    await sleep(10);
    eq(model.requests.length, 0, 'no model call');
    eq(agent.phase, 'idle', 'idle');
    const mail = agent.mailbox();
    check(mail[0].value.data instanceof Float64Array, 'observation values stay JS values (typed arrays included)');
    const r = await agent.run('go');
    eq(JSON.parse(r.text), [{ peak: 3.5, data: { 0: 1, 1: 2 } }, 'D99'], 'admitted: the observation, then the latest standing value only');
    agent.close();
    rt.close();
  },
};
