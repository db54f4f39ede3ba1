// The DOM Worker transport of the browser entries (`weft`, `weft/apps`): installed once, by
// whichever of them is evaluated first.
import { setWorkerFactory } from './runtime.js';

/** The DOM Worker transport: an uncaught error terminates the Worker (its runs are lost). */
setWorkerFactory((specifier, options = {}) => (h) => {
  const w =
    typeof Worker !== 'undefined' && specifier instanceof Worker
      ? specifier
      : new Worker(specifier, { type: options.type ?? 'module', name: options.name });
  w.addEventListener('message', (e) => h.message(e.data));
  w.addEventListener('messageerror', () => h.undecodable('messageerror: the message could not be deserialized'));
  w.addEventListener('error', (e) => {
    e.preventDefault?.();
    w.terminate();
    const where = e.filename ? ` (${e.filename}:${e.lineno})` : '';
    h.closed(`worker threw an uncaught error: ${e.message ?? 'unknown error'}${where}; terminated`);
  });
  return { post: (m) => w.postMessage(m), terminate: () => w.terminate() };
});
