// `scriptedModel`: plain JS, in a module of its own so that `weft` exports it in browsers without
// loading the apps module (agent sessions, see apps.js).
import { WeftError } from './error.js';
import { SCRIPT_EXHAUSTED } from './codes.js';

/**
 * A deterministic model for tests and examples: answers each step with the next response of
 * the script (an object `{text, calls}` or a function of the request returning one). Once the
 * script is exhausted, steps fail with SCRIPT_EXHAUSTED. `model.requests` records what each
 * step was shown.
 */
export function scriptedModel(responses = []) {
  const queue = [...responses];
  const requests = [];
  const model = async (request) => {
    requests.push({
      turn: request.turn,
      step: request.step,
      messages: request.messages.length,
      tools: request.tools.map((t) => t.name),
      toolsVersion: request.toolsVersion,
    });
    if (queue.length === 0) throw new WeftError(SCRIPT_EXHAUSTED, 'the model script is exhausted');
    const next = queue.shift();
    return typeof next === 'function' ? next(request) : next;
  };
  model.requests = requests;
  model.push = (...more) => queue.push(...more);
  model.remaining = () => queue.length;
  return model;
}
