// Host tools for agents on actor nodes (`appTools`, `jobTool`): plain functions of the package
// `weft` exports, in a module of their own so that the agent host (node-agent.js) is loaded
// only with an actor store (`openActorStore`), not by every page that imports `weft`.
import { WeftError } from './error.js';

/**
 * An ops app's published tools (`report`, `set`, `act`, `observe`, `wait`, `inspect`,
 * `cancel`) as host tools of a node's agent, with the schemas the app declares: each call
 * runs through `app.tools.call` (by `agent`, attributed to the call id), so every rule (what
 * a write is, when an observation settles) is the app's. A call's signal ends only its wait
 * (the operation continues), so the tools are safe to cancel; they run one at a time.
 * `store.agent(node, {app})` registers them.
 */
export function appTools(app, { by = 'agent' } = {}) {
  return app.tools.list().map((t) => ({
    name: t.name,
    description: t.description,
    parameters: t.inputSchema,
    supportsParallel: false,
    safeToCancel: true,
    run: (args, ctx) => app.tools.call(t.name, args ?? {}, { by, toolCall: ctx.callId, owner: ctx.owner, signal: ctx.signal }),
  }));
}

/**
 * A host tool that starts a background job on a runtime `endpoint` (a Worker's, usually):
 * `payload(args)` (default: the arguments) is submitted with the agent's owner and the call's
 * origin; the call returns `{job}` at once, the job outlives the call and the turn, its
 * milestones are recorded in the node's `jobs.jsonl` and its completion note becomes a
 * `mail` line admitted at the next turn start. Give the agent the endpoint's `runtime`: an
 * agent of another runtime refuses the call (`ctx.submitJob`: INVALID_ARGUMENT, no job).
 */
export function jobTool({ name, description = '', parameters = { type: 'object' }, endpoint, payload = (args) => args, options, supportsParallel = false }) {
  if (!endpoint || typeof endpoint.submit !== 'function') throw new WeftError('INVALID_ARGUMENT', '`endpoint` must be a runtime endpoint');
  return {
    name,
    description,
    parameters,
    supportsParallel,
    mayStartJob: true,
    run: (args, ctx) => {
      const job = ctx.submitJob(endpoint, payload(args), options);
      return { job: job.id, state: job.state };
    },
  };
}
