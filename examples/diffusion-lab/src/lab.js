// The lab as an application: a weft app with the diffusion graph, its evolution on a DOM
// Worker, and the published agent tools — which this module wraps only to record each call for
// the page (the agent console) and to remember the inputs requested through them. The page's
// node agent (agent.js) calls the same wrapped tools.
import { createApp } from 'weft/apps';
import { labSpec } from './graph.js';

export function createLab() {
  const app = createApp();
  const worker = app.openWorker(new Worker(new URL('../../diffusion/worker.js', import.meta.url), { type: 'module' }));
  app.load(labSpec(worker));

  const calls = [];
  const requested = new Map(); // control → {value, accepted, by, write}
  const listeners = new Set();
  const changed = () => listeners.forEach((l) => l());

  const noteReceipts = (receipts) => {
    for (const r of receipts ?? []) requested.set(r.control, { value: r.requested, accepted: r.accepted, by: r.by, write: r.write });
  };

  /** The published tools, as an agent adapter calls them; every call is logged for the page. */
  const tools = {
    list: () => app.tools.list(),
    async call(name, args = {}, options = {}) {
      const entry = { n: calls.length + 1, name, args, status: 'running', result: null, error: null, operation: null };
      calls.push(entry);
      if (name === 'observe' && args.writes) {
        for (const [k, v] of Object.entries(args.writes)) requested.set(k, { value: v, accepted: null, by: 'agent', write: null });
      }
      changed();
      try {
        const result = await app.tools.call(name, args, { by: 'agent', toolCall: `call-${entry.n}`, ...options });
        entry.result = result;
        entry.status = result?.outcome ?? result?.status ?? 'done';
        entry.operation = result?.operation ?? null;
        if (name === 'set') noteReceipts([result]);
        if (result?.writes) noteReceipts(result.writes);
        return result;
      } catch (err) {
        entry.status = 'error';
        entry.error = `${err.code ?? 'ERROR'}: ${err.message}`;
        throw err;
      } finally {
        changed();
      }
    },
  };

  /** A write from the page's controls (a person). */
  function setFromUi(name, value) {
    const r = app.set(name, value, { by: 'user' });
    noteReceipts([r]);
    changed();
    return r;
  }

  function actFromUi(name) {
    const r = app.act(name, {}, { by: 'user' });
    noteReceipts(r.writes);
    changed();
    return r;
  }

  return {
    app,
    /** The Worker endpoint the evolution runs on (the agent's `simulate` jobs use it too). */
    worker,
    tools,
    calls,
    requested,
    setFromUi,
    actFromUi,
    onChange(l) {
      listeners.add(l);
      const off = app.subscribe(l);
      return () => {
        listeners.delete(l);
        off();
      };
    },
  };
}
