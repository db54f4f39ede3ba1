// Typed usage of `weft/actors`: views are typed (ActorViews.GridView, ...).
import { createApp, type Endpoint } from 'weft';
import {
  appTools,
  builtinModel,
  jobTool,
  openActorStore,
  type NodeAgentTool,
  type NodeToolContext,
  type ActorViews,
  type NodeAgent,
  type NodeAgentOutput,
  type NodeAgentState,
  type NodeModelRequest,
  type SpawnResult,
} from 'weft/actors';

export async function graph(): Promise<string[]> {
  const s = await openActorStore({ backend: 'memory', title: 'demo' });
  const child: SpawnResult = await s.spawn({ parent: s.graph().root, type: 'task', title: 'Render' });
  await s.message({ node: child.id, text: 'hello' });
  await s.status({ node: child.id, status: 'done', summary: 'rendered' });
  const grid: ActorViews.GridView = s.gridView();
  const tree: ActorViews.TreeView = s.treeView();
  const fork: ActorViews.ForkView = s.forkView({ node: child.id });
  const lines = fork.transcript.map((l) => ('corrupt' in l ? `corrupt ${l.line}` : `${l.role}: ${l.text}`));
  const audit = s.auditView();
  await s.close();
  return [...grid.tiles.map((t) => `${t.id} ${t.status} ${t.opacity}`), ...tree.nodes.map((n) => `${n.depth}:${n.id}`), ...lines, String(audit.problems)];
}

// An agent bound to a node: a custom model sees the node's slice; a task child gets host tools.
export async function agentOnNode(): Promise<string[]> {
  const s = await openActorStore({ backend: 'memory', config: { ACTOR_WAIT_GRAPH: 'enforce' } });
  const model = async (request: NodeModelRequest, { signal }: { signal: AbortSignal }) => {
    signal.throwIfAborted();
    return request.system.includes(request.node) ? { text: 'ok' } : { calls: [{ name: 'spawn', arguments: { type: 'task', title: 'Work' } }] };
  };
  const agent: NodeAgent = await s.agent(s.graph().root, {
    model,
    contextTokens: 8000,
    children: (child: string) => ({
      model: builtinModel(),
      tools: [{ name: 'count', parameters: { type: 'object' }, supportsParallel: true, run: async (_args: unknown, { signal, node }) => (signal.aborted ? 0 : node.length) }],
    }),
  });
  const seen: string[] = [];
  const stop = agent.on('output', (o: NodeAgentOutput) => seen.push(o.output === 'spawned' ? `spawned ${o.child}` : o.output));
  agent.on('waiting', (o) => seen.push(o.on.join(',')));
  agent.on('model_delta', (d) => d.type === 'text_delta' && seen.push(d.text));
  const said = await agent.say('hello');
  if (said.outcome === 'spawned') seen.push(said.id);
  await agent.idle();
  const st: NodeAgentState = agent.state();
  const status: string = await agent.interrupt('done');
  const resumed: NodeAgent[] = await s.resumeAgents((node) => ({ model: builtinModel(), contextTokens: node.length * 100 }));
  await s.agentsIdle();
  stop();
  const child = s.agentOf('work');
  agent.close();
  await s.close();
  return [...seen, st.phase, status, String(agent.report.interruptedTurn), String(resumed.length), child?.node ?? 'none'];
}

// A task node's agent drives an app with its published tools and starts Worker jobs.
export async function agentWithAppAndJobs(): Promise<string[]> {
  const s = await openActorStore({ backend: 'memory' });
  await s.spawn({ parent: s.graph().root, id: 'lab', type: 'task', title: 'Lab' });
  const app = createApp();
  app.load({ controls: [{ name: 'x', type: 'number', value: 1 }], cells: [{ name: 'y', deps: ['x'], compute: ({ x }: { x: number }) => 2 * x }] });
  const ep: Endpoint = app.openWorker('worker.js');
  const tools: NodeAgentTool[] = [
    ...appTools(app),
    jobTool({ name: 'simulate', endpoint: ep, payload: (args: { points: number }) => ({ points: args.points }) }),
    {
      name: 'simulate_raw',
      mayStartJob: true,
      run: (args: unknown, ctx: NodeToolContext) => ({ job: ctx.submitJob(ep, args, { note: true }).id, owner: ctx.owner }),
    },
  ];
  const agent: NodeAgent = await s.agent('lab', { model: builtinModel(), tools, runtime: app.runtime });
  const journal = await s.jobJournal('lab', 1, { after: 0 });
  agent.close();
  await s.close();
  return [...tools.map((t) => t.name), ...journal.map((e) => e.type)];
}

// Node: a `$CHAT_ROOT` directory (the native store's layout), resumed from its files.
export async function chatRoot(root: string): Promise<number> {
  const s = await openActorStore({ backend: 'fs', root, lockTimeoutMs: 1000, config: { ACTOR_WAIT_GRAPH: 'warn' } });
  const resumed: NodeAgent[] = await s.resumeAgents({ model: builtinModel() });
  await s.close();
  const again = await openActorStore({ root });
  await again.close();
  return resumed.length;
}
