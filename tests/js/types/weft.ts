// Typed usage of `weft` (jobs, agents, models, ops, standing desires) as a TypeScript user writes it. Checked with
// `tsc --strict --noEmit` against the packed package (check.mjs); never run.
import {
  createRuntime, createAgent, createApp, createClaims, scriptedModel, openaiModel, anthropicModel, builtinModel,
  WeftError, type ClaimPhase, type ClaimState, type Outcome, type JobEvent, type Delivery, type TurnResult, type ModelErrorCode,
} from 'weft';

export async function jobs(): Promise<number> {
  const rt = createRuntime({ now: () => 0 });
  const ep = rt.openLocal(async (payload: { n: number }, ctx) => {
    ctx.progress(0.5);
    if (ctx.signal.aborted) throw new Error('stopped');
    return payload.n * 2;
  });
  const job = ep.submit<number>({ n: 21 }, { owner: 'agent', origin: { turn: 't1' } });
  const stop = job.observe((d: Delivery) => {
    if (d.type === 'missed') console.log(d.from, d.to);
    else if (d.type === 'outcome' && d.outcome === 'lost') console.log(d.reason.length);
    else if (d.type === 'no_acknowledgement') console.log(d.quietMs + 1);
    else console.log(d.seq, d.type);
  });
  const ac = new AbortController();
  const out: Outcome<number> = await job.wait({ signal: ac.signal, timeoutMs: 1000 });
  stop();
  const events: JobEvent[] = job.journal();
  if (out.outcome === 'succeeded') return out.value + events.length;
  if (out.outcome === 'cancelled') console.log(out.evidence === 'quiet_no_ack');
  rt.dispose();
  return -1;
}

export async function remote(): Promise<string> {
  const rt = createRuntime();
  const ep = rt.openRemote('ws://127.0.0.1:8080/api/jobs/remote', {
    token: 'agent-token', script: 'ticker', resumeWindowMs: 1500, heartbeatMs: 100, WebSocket,
  });
  rt.openRemote(new URL('wss://example.org/api/jobs/remote'), { token: 't', kind: 'sleep', owner: 'agent' });
  const job = ep.submit<{ ticks: number }>({ ticks: 3 });
  const status = job.cancel();
  if (status === 'requested_while_disconnected') console.log(ep.info?.remote?.disconnects);
  const out = await job.wait();
  if (out.outcome === 'lost' && out.evidence === 'remote_disconnected') console.log(out.reason);
  for (const e of job.journal()) if (e.type === 'remote_accepted') console.log(e.session, e.remoteJob + 1);
  const r = ep.info?.remote;
  return `${r?.state ?? 'local'} ${r?.session ?? ''} ${r?.lastSeq ?? 0} ${job.info?.remote?.job ?? 0}`;
}

export async function agents(): Promise<string | null> {
  const rt = createRuntime();
  const model = scriptedModel([{ calls: [{ name: 'add', arguments: { a: 1 } }] }, { text: 'done' }]);
  const agent = createAgent(rt, { id: 'a', model, maxSteps: 8 });
  agent.registerTool(
    { name: 'add', description: 'adds one', parameters: { type: 'object', properties: { a: { type: 'number' } } }, supportsParallel: true },
    async (args: { a: number }) => args.a + 1,
  );
  const off = agent.on('model_delta', (e) => console.log(e.step));
  const r: TurnResult = await agent.run('add one');
  off();
  agent.close();
  return r.end === 'completed' ? r.text : null;
}

export function models(): string[] {
  const a = openaiModel({ baseUrl: 'http://127.0.0.1:11434/v1', model: 'llama3.2' });
  const b = anthropicModel({ apiKey: 'k', model: 'claude-3-5-haiku-latest' });
  const c = builtinModel();
  const failed = (e: unknown): ModelErrorCode | null =>
    e instanceof WeftError && e.code.startsWith('MODEL_') ? (e.code as ModelErrorCode) : null;
  void failed;
  return [a.label, b.provider, c.label];
}

export async function ops(): Promise<unknown> {
  const app = createApp();
  app.load({
    controls: [{ name: 'points', type: 'number', min: 10, max: 1000, value: 100 }],
    cells: [{ name: 'double', deps: ['points'], compute: (inputs: { points: number }) => inputs.points * 2 }],
  });
  const receipt = app.set('points', 200, { by: 'user' });
  const outcome = await app.observe<number>({ waitFor: ['double'] });
  const hosted = app.start({ writes: { points: 300 }, waitFor: ['double'] }).hostAsJob({ owner: 'agent' });
  const same = app.hostAsJob(hosted.id);
  const done = await same.wait({ timeoutMs: 1000 });
  const opOutcome: string | null = done.outcome === 'succeeded' ? done.value.outcome : null;
  app.dispose();
  return [receipt.status, outcome.outcome, opOutcome];
}

export async function claims(): Promise<ClaimPhase> {
  const c = createClaims<{ device: number }, MediaStream | string>({
    acquire: async (desire, { claim, attempt }) => `${claim} ${attempt} ${desire.device}`,
    release: async (resource, { desire }) => console.log(resource, desire.device),
  });
  c.desire('mic', { device: 1 });
  const state: ClaimState<{ device: number }> = await c.settled('mic', { signal: AbortSignal.timeout(1000) });
  const held: MediaStream | string | undefined = c.held('mic');
  if (state.phase === 'error') c.retry('mic');
  c.desire('mic', null);
  console.log(held, state.held?.device);
  const phase = c.phase('mic');
  c.dispose();
  return phase;
}
