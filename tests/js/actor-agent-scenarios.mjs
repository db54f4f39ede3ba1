// Agents on actor nodes through the JS package (`store.agent(node, options)`), shared by the
// Node tests (memory store) and the browser tests (IndexedDB in Chromium): the same
// semantics on both. Each scenario receives `{weft, open(config?), worker(name)}` (`open`
// resolves with a fresh ActorStore; `worker` names a real Worker script) and throws on failure.

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}
/** JSON with object keys sorted (objects compare by content). */
const canon = (v) =>
  JSON.stringify(v, (_k, x) => (x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : 1))) : x));
function eq(actual, expected, message) {
  const a = canon(actual);
  const e = canon(expected);
  if (a !== e) throw new Error(`${message}: expected ${e}, got ${a}`);
}
async function rejects(p, code, message) {
  try {
    await p;
  } catch (e) {
    if (e?.code === code) return;
    throw new Error(`${message}: expected ${code}, got ${e?.code}: ${e?.message}`);
  }
  throw new Error(`${message}: expected ${code}, it resolved`);
}

/** The node's lines as the store holds them (with their additive `agent` records). */
const lines = (store, node) => store.forkView({ node }).transcript;
const entries = (ls) => ls.filter((l) => l.agent).map((l) => `${l.role}:${l.agent.entry}`);

/** A model whose answers the test gives: `model.pending` holds the unanswered steps. */
function manualModel() {
  const pending = [];
  const requests = [];
  const model = (request, { signal }) =>
    new Promise((resolve, reject) => {
      requests.push(request);
      pending.push({ request, resolve });
      signal.addEventListener('abort', () => reject(signal.reason), { once: true });
    });
  model.pending = pending;
  model.requests = requests;
  return model;
}

async function until(cond, what, ms = 15_000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export const actorAgentScenarios = {
  async 'a turn with the built-in model: user, turn start, answer and turn end are the node lines'({ weft, open }) {
    const store = await open();
    const root = store.graph().root;
    const agent = await store.agent(root);
    eq(agent.report, { interruptedTurn: null, modelStepInterrupted: false, uncertainCalls: [], lostJobs: [], requeuedMail: 0, pendingTasks: 0 }, 'a fresh report');
    check(!agent.modelConfigured, 'no model: the built-in one answers');
    const outputs = [];
    agent.on('output', (o) => outputs.push(o.output));
    const said = await agent.say('hello there');
    eq(said.outcome, 'continued', 'the heuristic keeps a greeting in the node');
    await agent.idle();
    const ls = lines(store, root);
    eq(entries(ls), ['system:turn_start', 'assistant:assistant', 'system:turn_end'], 'the agent lines of one turn');
    const user = ls.findIndex((l) => l.role === 'user' && l.text === 'hello there');
    const start = ls.findIndex((l) => l.agent?.entry === 'turn_start');
    check(user >= 0 && start > user, 'the user line comes before its turn');
    eq(ls[start].agent.taskLine, ls[user].line, 'the turn names its task line');
    const answer = ls.find((l) => l.agent?.entry === 'assistant');
    check(answer.text.includes('MODEL_NOT_CONFIGURED') && answer.text.includes('hello there'), `the built-in answer: ${answer.text}`);
    eq(ls.at(-1).agent.end, 'completed', 'the turn completed');
    eq(outputs, ['turn_started', 'model_request', 'turn_ended'], 'the released outputs');
    eq(agent.state().phase, 'idle', 'idle after the turn');
    // Without a model the keyword heuristic routes drift; the child it spawns gets an agent.
    const drift = await agent.say('Side note: the bot config lives in .github');
    eq(drift.outcome, 'spawned', 'the heuristic spawned a child');
    await store.agentsIdle();
    const child = store.agentOf(drift.id);
    check(child !== null, 'the routed child has an agent');
    const cl = lines(store, drift.id);
    eq(entries(cl), ['system:turn_start', 'assistant:assistant', 'system:turn_end'], 'the child answered its line');
    eq(entries(lines(store, root)).length, 3, 'the root took no turn for the routed line');
    await store.close();
  },

  async 'the model spawns a child with its tool; the child agent answers with a host tool'({ weft, open }) {
    const store = await open();
    const root = store.graph().root;
    const rootModel = weft.scriptedModel([
      { calls: [{ id: 'c1', name: 'spawn', arguments: { type: 'task', title: 'Render docs', message: 'Render the docs, please' } }] },
      { text: 'I started a task for the docs.' },
    ]);
    const childModel = weft.scriptedModel([{ calls: [{ id: 'r1', name: 'render', arguments: { pages: 3 } }] }, { text: 'Rendered 3 pages.' }]);
    const rendered = [];
    const render = {
      name: 'render',
      description: 'Renders pages',
      parameters: { type: 'object', properties: { pages: { type: 'number' } } },
      run: async (args, { signal, node }) => {
        check(signal instanceof AbortSignal, 'the tool gets a signal');
        rendered.push([node, args.pages]);
        return { pages: args.pages };
      },
    };
    const spawned = [];
    const agent = await store.agent(root, { model: rootModel, children: (child) => ({ model: childModel, tools: [render] }) });
    agent.on('spawned', (o) => spawned.push(o.child));
    check(agent.modelConfigured, 'a scripted model is configured');
    await agent.say('We also need the docs rendered');
    await store.agentsIdle();
    eq(spawned, ['render-docs'], 'the spawn tool created the child');
    const child = store.agentOf('render-docs');
    check(child !== null, 'the child has its own agent');
    eq(rendered, [['render-docs', 3]], 'the child ran its host tool');
    const cl = lines(store, 'render-docs');
    const task = cl.find((l) => l.role === 'user');
    eq(task.text, 'Render the docs, please', 'the child first user line is its task');
    eq(cl.find((l) => l.agent?.entry === 'turn_start').agent.taskLine, task.line, 'its turn took that line');
    eq(entries(cl), ['system:turn_start', 'assistant:assistant', 'tool:tool_result', 'assistant:assistant', 'system:turn_end'], 'the child turn');
    eq(cl.at(-2).text, 'Rendered 3 pages.', 'the child answered');
    const rl = lines(store, root);
    // Cadence: the root shows the conversation and a routing marker, no tool noise.
    check(!rl.some((l) => l.role === 'tool' || l.role === 'progress'), 'no tool noise on the discussion surface');
    const marker = rl.find((l) => l.role === 'routing' && l.spawn === 'render-docs');
    check(marker && marker.agent?.entry === 'tool_result', 'the spawn marker is the call result line');
    eq(rl.filter((l) => l.role === 'assistant').at(-1).text, 'I started a task for the docs.', 'the root answered');
    eq(rootModel.requests.length, 2, 'the root model was asked twice');
    eq(rootModel.requests[0].tools.includes('spawn'), true, 'the root is offered spawn');
    eq(childModel.requests[0].tools.includes('render'), true, 'the child is offered its host tool');
    await store.close();
  },

  async 'an agent dropped mid-turn reopens with the turn interrupted and nothing re-runs'({ weft, open }) {
    const store = await open();
    const root = store.graph().root;
    const first = manualModel();
    const agent = await store.agent(root, { model: first });
    await agent.say('a long question');
    eq(first.pending.length, 1, 'the model is being asked');
    eq(agent.state().phase, 'model_step', 'the step runs');
    check(agent.pendingRequest().system.includes(root), 'the request carries the node context');
    agent.close();
    const before = lines(store, root).length;
    // The model answers late: the closed agent writes nothing.
    first.pending[0].resolve({ text: 'too late' });
    await store.sync();
    eq(lines(store, root).length, before, 'a late answer writes nothing');
    const second = weft.scriptedModel([{ text: 'again' }]);
    const again = await store.agent(root, { model: second });
    eq(again.report.interruptedTurn, 1, 'turn 1 was interrupted');
    eq(again.report.modelStepInterrupted, true, 'during a model step');
    eq(again.report.pendingTasks, 0, 'the task is not taken again');
    const end = lines(store, root).at(-1);
    eq([end.agent.entry, end.agent.end, end.agent.reason], ['turn_end', 'interrupted', 'host restarted during a model step'], 'the recovery line');
    await again.idle();
    eq(second.requests.length, 0, 'nothing is re-run');
    eq(again.state().phase, 'idle', 'idle after recovery');
    // The next utterance is a new turn, which the model is asked.
    await again.say('and now?');
    await again.idle();
    eq(second.requests.length, 1, 'the next turn asks the model');
    eq(lines(store, root).at(-1).agent.end, 'completed', 'the next turn completed');
    await store.close();
  },

  async 'an enforced wait blocks the model step, then resumes when the target is terminal'({ weft, open }) {
    const store = await open({ ACTOR_WAIT_GRAPH: 'enforce' });
    const root = store.graph().root;
    await store.spawn({ parent: root, id: 'ci', type: 'task', title: 'CI' });
    await store.wait({ node: root, on: 'ci', mode: 'enforce' });
    const model = weft.scriptedModel([{ text: 'CI is green: shipping.' }]);
    const agent = await store.agent(root, { model });
    const outputs = [];
    agent.on('output', (o) => outputs.push(o.output));
    await agent.say('ship it once CI is green');
    const st = agent.state();
    eq([st.phase, st.waiting], ['waiting', ['ci']], 'the step waits on ci');
    eq(model.requests.length, 0, 'the model is not asked while the wait holds');
    eq(outputs, ['turn_started', 'waiting'], 'waiting is released');
    check(lines(store, root).at(-1).agent.entry === 'wait', 'a wait line');
    await store.status({ node: 'ci', status: 'done', summary: 'green' });
    await agent.idle();
    eq(model.requests.length, 1, 'the step ran once the target was terminal');
    eq(outputs, ['turn_started', 'waiting', 'wait_over', 'model_request', 'turn_ended'], 'the wait resumed by itself');
    eq(entries(lines(store, root)), ['system:turn_start', 'system:wait', 'system:wait_end', 'assistant:assistant', 'system:turn_end'], 'the lines of the waiting turn');
    await store.close();
  },

  async 'interrupts: a waiting step is cancelled; a running call is aborted or given its grace period'({ weft, open }) {
    const store = await open({ ACTOR_WAIT_GRAPH: 'enforce' });
    const root = store.graph().root;
    await store.spawn({ parent: root, id: 'ci', type: 'task', title: 'CI' });
    await store.wait({ node: root, on: 'ci', mode: 'enforce' });
    const model = weft.scriptedModel([]);
    const agent = await store.agent(root, { model });
    await agent.say('wait for CI');
    eq(agent.state().phase, 'waiting', 'waiting');
    eq(await agent.interrupt('never mind'), 'ended', 'a waiting turn ends at once');
    eq(entries(lines(store, root)).slice(-2), ['system:wait_end', 'system:turn_end'], 'the wait is cancelled, the turn ends');
    eq([lines(store, root).at(-2).agent.outcome, lines(store, root).at(-1).agent.end], ['cancelled', 'interrupted'], 'cancelled and interrupted');
    await store.status({ node: 'ci', status: 'done' });
    await agent.idle();
    eq(model.requests.length, 0, 'the cancelled step never runs');

    // A task node whose model calls a cancellable tool and one that ignores its signal.
    await store.spawn({ parent: root, id: 'work', type: 'task', title: 'Work' });
    let aborted = 0;
    const tools = [
      { name: 'cancellable', safeToCancel: true, supportsParallel: true, run: (_a, { signal }) => new Promise((_r, reject) => signal.addEventListener('abort', () => reject((aborted++, signal.reason)))) },
      { name: 'stubborn', supportsParallel: true, run: () => new Promise(() => {}) },
    ];
    const work = weft.scriptedModel([{ calls: [{ id: 'a', name: 'cancellable', arguments: {} }, { id: 'b', name: 'stubborn', arguments: {} }] }]);
    const wa = await store.agent('work', { model: work, tools, interruptGraceMs: 20 });
    const started = [];
    wa.on('start_call', (o) => started.push(o.tool));
    await store.message({ node: 'work', text: 'do both' });
    await store.sync();
    for (let i = 0; started.length < 2 && i < 200; i++) await new Promise((r) => setTimeout(r, 5));
    eq(started, ['cancellable', 'stubborn'], 'both calls started');
    eq(await wa.interrupt('stop'), 'stopping', 'started calls get the grace period');
    await wa.idle();
    eq(aborted, 1, 'the cancellable call was aborted');
    const results = lines(store, 'work').filter((l) => l.agent?.entry === 'tool_result');
    eq(results.map((l) => [l.agent.tool, l.agent.status]).sort(), [['cancellable', 'uncertain'], ['stubborn', 'uncertain']].sort(), 'both calls end uncertain');
    eq(lines(store, 'work').at(-1).agent.end, 'interrupted', 'the turn ended interrupted after the grace period');
    await store.close();
  },

  async 'a task agent drives an app with its published tools and a Worker job; the job note is admitted at the next turn'({ weft, open, worker }) {
    const store = await open();
    const root = store.graph().root;
    await store.spawn({ parent: root, id: 'lab', type: 'task', title: 'Lab' });
    const app = weft.createApp();
    app.load({
      controls: [{ name: 'x', type: 'number', min: 0, max: 100, value: 1 }],
      cells: [{ name: 'y', deps: ['x'], compute: ({ x }) => 2 * x }],
    });
    // A real Worker on the app's runtime: the diffusion calculation, small.
    const ep = app.openWorker(worker('diffusion'));
    const simulate = weft.jobTool({
      name: 'simulate',
      description: 'Runs the diffusion calculation in the background',
      parameters: { type: 'object', properties: { points: { type: 'number' } } },
      endpoint: ep,
      payload: ({ points }) => ({ points, simTime: 0.0005, chunkMs: 2, partialEveryMs: 1e6 }),
    });
    let turn2 = null;
    const model = weft.scriptedModel([
      { calls: [{ id: 's1', name: 'set', arguments: { name: 'x', value: 21 } }] },
      { calls: [{ id: 'o1', name: 'observe', arguments: { waitFor: ['y'], select: ['y'] } }] },
      { calls: [{ id: 'j1', name: 'simulate', arguments: { points: 40 } }] },
      { text: 'y is 42; the simulation runs.' },
      (request) => ((turn2 = request), { text: 'The simulation finished.' }),
    ]);
    const agent = await store.agent('lab', { model, app, tools: [simulate] });
    eq(model.requests.length, 0, 'nothing asked yet');
    await store.message({ node: 'lab', text: 'set x to 21, read y, then simulate' });
    await agent.idle();
    eq(model.requests[0].tools.filter((t) => ['report', 'set', 'act', 'observe', 'wait', 'inspect', 'cancel', 'simulate'].includes(t)).length, 8, 'the app tools and the job tool are offered');
    eq(app.cell('y').value, 42, 'the app took the write');
    let ls = lines(store, 'lab');
    const results = ls.filter((l) => l.agent?.entry === 'tool_result');
    eq(results.map((l) => [l.role, l.agent.tool, l.agent.status]), [['tool', 'set', 'succeeded'], ['tool', 'observe', 'succeeded'], ['tool', 'simulate', 'succeeded']], 'three calls succeeded');
    eq([results[0].agent.value.accepted, results[1].agent.value.outcome, results[1].agent.value.result], [21, 'settled', { y: 42 }], 'the app answered set and observe');
    eq([results[2].agent.handedOver, results[2].agent.jobs], [true, [results[2].agent.value.job]], 'the simulate call handed its job over');
    const jobLine = ls.find((l) => l.agent?.entry === 'job');
    check(jobLine && jobLine.role === 'progress' && jobLine.agent.callId === 'j1', `the job line: ${JSON.stringify(jobLine)}`);
    const jobId = jobLine.agent.job;
    const job = app.runtime.job(jobId);
    eq([job.info.owner, job.info.origin.toolCall], ['agent:lab', 'j1'], 'the job is the agent\'s, attributed to its call');
    eq((await job.wait()).outcome, 'succeeded', 'the Worker job succeeded');
    await until(() => lines(store, 'lab').some((l) => l.agent?.entry === 'mail'), 'the completion note');
    await store.sync();
    ls = lines(store, 'lab');
    const mail = ls.find((l) => l.agent?.entry === 'mail');
    eq([mail.role, mail.agent.kind, mail.agent.note.job, mail.agent.note.outcome], ['completion', 'job', jobId, 'succeeded'], 'the note is a mail line');
    eq([agent.state().pendingMail, agent.state().openJobs, agent.state().phase], [1, [], 'idle'], 'the note waits for the next turn; it starts none');
    eq(model.remaining(), 1, 'the note asked no model');
    // The next turn admits it.
    await store.message({ node: 'lab', text: 'how did it go?' });
    await agent.idle();
    ls = lines(store, 'lab');
    const start = ls.filter((l) => l.agent?.entry === 'turn_start').at(-1);
    eq(start.agent.admitted, [mail.agent.seq], 'the next turn start admits the note');
    check(start.line > mail.line, 'admitted after it was written');
    check(turn2.messages.some((m) => m.role === 'mail' && m.note?.job === jobId && m.note.outcome === 'succeeded'), 'the model is shown the note in the next turn');
    eq(ls.at(-1).agent.end, 'completed', 'the second turn completed');
    // The job's milestones are in the node's jobs.jsonl in the store.
    const journal = await store.jobJournal('lab', jobId);
    const types = journal.map((e) => e.type);
    eq(types.filter((t) => ['submitted', 'started', 'outcome'].includes(t)), ['submitted', 'started', 'outcome'], `the milestones: ${types}`);
    check(types.length <= 6, `bounded: milestones and the latest repeating event (${types})`);
    eq((await store.jobJournal('lab', jobId, { after: journal[0].seq })).length, journal.length - 1, 'read back after a sequence number');
    app.dispose();
    await store.close();
  },

  async 'refusals: host tools on the discussion surface, graph tool names, a second agent'({ weft, open }) {
    const store = await open();
    const root = store.graph().root;
    const tool = { name: 'search', run: () => 1 };
    await rejects(store.agent(root, { tools: [tool] }), 'CADENCE_VIOLATION', 'a work tool on the coordinator');
    await store.spawn({ parent: root, id: 'work', type: 'task', title: 'Work' });
    await rejects(store.agent('work', { tools: [{ name: 'spawn', run: () => 1 }] }), 'AGENT_TOOL_RESERVED', 'a graph tool name');
    await rejects(store.agent('ghost'), 'UNKNOWN_NODE', 'an unknown node');
    const a = await store.agent('work', { tools: [tool] });
    await rejects(store.agent('work'), 'AGENT_OPEN', 'a second agent on a node');
    eq(store.agents().map((x) => x.node), ['work'], 'one agent is open');
    eq(await a.interrupt('nothing runs'), 'not_running', 'interrupting an idle agent');
    await store.close();
    await rejects(a.say('hi'), 'CLOSED', 'the store is closed');
  },
};
