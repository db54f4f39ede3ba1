// The lab's agent: a node agent (weft's `store.agent`) on a task node of an actor graph kept in
// IndexedDB, whose tools are the lab's published tools (the same ops a person's controls
// perform) and one Worker job. The page's Agent panel (AgentPanel.jsx) shows its lines.
//
// The graph is opened once per page: a coordinator (the graph's root) and a task node `lab`
// spawned under it the first time; on a reload both are reused and the agent resumes from the
// store (a turn the reload cut off is recorded interrupted, nothing is re-run).
//
// The model comes from the page's address (`?model=PROVIDER:NAME&baseUrl=URL&apiKey=KEY`,
// resolved by weft's `resolveModel`: a base URL alone is an OpenAI-compatible server). With
// none, the built-in deterministic model answers, which calls no tools.
import { appTools, builtinModel, jobTool, openActorStore, resolveModel } from 'weft/apps';

/** The task node the agent is. */
export const NODE = 'lab';
/** The IndexedDB database of the lab's actor graph. */
export const STORE = 'weft-diffusion-lab';

/** The model choice the page's query parameters name: `{model?, baseUrl?, apiKey?}`. */
export function modelChoice(search = location.search) {
  const q = new URLSearchParams(search);
  const choice = {};
  for (const k of ['model', 'baseUrl', 'apiKey']) if (q.get(k)) choice[k] = q.get(k);
  return choice;
}

/** The lab's Worker job: a background run of the evolution, by default with the lab's inputs. */
function simulateTool(lab) {
  return jobTool({
    name: 'simulate',
    description:
      'Start a background run of the heat equation on the lab Worker, with the current controls overridden by the ' +
      'arguments (e.g. another resolution). It returns a job id at once; the run does not change the controls or ' +
      'cells, and its outcome arrives as a note at the start of the next turn.',
    parameters: {
      type: 'object',
      properties: {
        points: { type: 'number', minimum: 100, maximum: 4000, description: 'grid points' },
        simTime: { type: 'number', minimum: 0.0001, maximum: 0.1, description: 'simulated time (s)' },
        diffusivity: { type: 'number', minimum: 0.1, maximum: 2, description: 'diffusivity κ (m²/s)' },
        initial: { type: 'string', enum: ['gaussian', 'step', 'random'] },
      },
    },
    endpoint: lab.worker,
    payload: (args = {}) => {
      const c = lab.app.snapshot().controls;
      const pick = (k) => args[k] ?? c[k];
      // No partial frames: the job's journal keeps its progress and outcome.
      return { diffusivity: pick('diffusivity'), points: pick('points'), simTime: pick('simTime'), initial: pick('initial'), seed: c.seed, partialEveryMs: 1e6 };
    },
  });
}

/**
 * Opens the lab's actor store and binds the agent of the `lab` task node (see the module
 * doc). Resolves with a controller the panel renders: `{store, agent, model, modelNote,
 * lines(), live, jobs, send(text), stop(), onChange(l)}`.
 */
export async function openLabAgent(lab, { search = location.search, name = STORE } = {}) {
  let model;
  let modelNote = null;
  try {
    model = await resolveModel(modelChoice(search));
  } catch (err) {
    modelNote = `${err.code ?? 'ERROR'}: ${err.message}`;
    model = builtinModel();
  }
  const store = await openActorStore({ backend: 'indexeddb', name, title: 'Diffusion lab' });
  const root = store.graph().root;
  if (!store.graph().nodes.some((n) => n.id === NODE)) {
    await store.spawn({ parent: root, id: NODE, type: 'task', title: 'Diffusion lab' });
  }
  // The published tools through the lab's wrapper (`lab.tools`: the app's `tools.list` and
  // `tools.call`, logged), so the page's tool log records each of the agent's calls too.
  const tools = [...appTools({ tools: lab.tools }), simulateTool(lab)];
  const options = (node) => (node === NODE ? { model, tools, runtime: lab.app.runtime } : { model });
  // Children a model spawned get their agents back too; then the lab's own, if it had no lines yet.
  await store.resumeAgents(options);
  const agent = store.agentOf(NODE) ?? (await store.agent(NODE, options(NODE)));

  const listeners = new Set();
  const ctl = {
    store,
    agent,
    model,
    /** An invalid configuration in the address (the built-in model answers instead), or null. */
    modelNote,
    /** The text of the model step streaming now: `{turn, step, text}` or null. */
    live: null,
    /** The jobs of the node's job lines: job id → `{state, progress, outcome}`, live from the runtime (after a reload: from the store's journal). */
    jobs: new Map(),
    /** The node's lines (the last `limit`). */
    lines: (limit = 80) => store.forkView({ node: NODE }).transcript.slice(-limit),
    state: () => agent.state(),
    /** A person's message to the agent. */
    send: (text) => agent.say(text),
    /** Interrupts the running turn. */
    stop: () => agent.interrupt('stopped from the lab page'),
    onChange(l) {
      listeners.add(l);
      return () => listeners.delete(l);
    },
  };
  // The jobs its calls started: their progress, live from the runtime while this page runs
  // them, else read back from the node's job journal in the store.
  const followJobs = () => {
    for (const l of ctl.lines()) {
      const id = l.agent?.entry === 'job' ? l.agent.job : null;
      if (id == null || ctl.jobs.has(id)) continue;
      const job = lab.app.runtime.job(id);
      const entry = { state: job?.state ?? 'unknown', progress: 0, outcome: null };
      ctl.jobs.set(id, entry);
      if (!job) {
        // Started before a reload: its milestones and last progress are in the node's jobs.jsonl.
        store.jobJournal(NODE, id).then((events) => {
          for (const ev of events) {
            if (ev.type === 'progress' && typeof ev.value === 'number') entry.progress = ev.value;
            if (ev.type === 'outcome') {
              entry.state = entry.outcome = ev.outcome;
              if (ev.outcome === 'succeeded') entry.progress = 1;
            }
          }
          if (!entry.outcome) entry.state = 'ended with the page';
          changed();
        }, (err) => console.warn('lab agent: job journal', err));
        continue;
      }
      const off = job.observe((ev) => {
        if (ev.type === 'started') entry.state = 'running';
        if (ev.type === 'progress' && typeof ev.value === 'number') entry.progress = ev.value;
        if (ev.type === 'outcome') {
          entry.state = entry.outcome = ev.outcome;
          if (ev.outcome === 'succeeded') entry.progress = 1;
          queueMicrotask(() => off());
        }
        changed();
      });
    }
  };
  const changed = () => listeners.forEach((l) => l());
  store.onChange(() => {
    followJobs();
    changed();
  });
  followJobs();
  agent.on('model_delta', (e) => {
    if (e.type !== 'text_delta') return;
    if (!ctl.live || ctl.live.turn !== e.turn || ctl.live.step !== e.step) ctl.live = { turn: e.turn, step: e.step, text: '' };
    ctl.live.text += e.text;
    changed();
  });
  agent.on('output', (o) => {
    // A new step, or the end of the turn: the streamed text is a line now (or was cut off).
    if (['model_request', 'abort_model', 'turn_ended'].includes(o.output)) ctl.live = null;
    changed();
  });
  agent.on('error', (err) => console.warn('lab agent:', err));
  return ctl;
}
