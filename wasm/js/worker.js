// `import 'weft/worker'` — the first import of a DOM module Worker script written for weft
// (`self.onmessage` or `self.addEventListener('message')`, `self.postMessage`, a hello): the
// worker then announces and speaks the `batch` capability (see worker-batch.js): fewer, larger
// postMessages in both directions, the same messages to the script, one by one. Under Node
// (worker_threads, the package's worker shim) the shim already does this and this module does
// nothing.
//
// The script's message handlers are kept here and called from one listener of this module, as
// the shim calls them (a batch frame becomes one `message` event per message, in order): no
// second listener runs per message, so a single message costs what it cost without batching.
// A handler that throws is reported (`reportError`: the worker's `error` event, as for any
// listener) and the other listeners, and the rest of a batch, still run. `close()` sends what
// is held first.
//
// Limits:
//   * only handlers installed after this module evaluates are kept here (`self.onmessage =`,
//     `self.addEventListener('message', …)`): import it first — a module imported before it
//     that installs one gets batch frames as they are;
//   * `message` listener options `once` and `signal` are honoured (`capture` only tells two
//     registrations apart); `onmessage` runs before the listeners, wherever it was set; the
//     event is a MessageEvent made here for each message of a batch (its `data` only: no
//     `ports`, `origin`, `source`); `stopImmediatePropagation` does not stop the listeners;
//   * it is an ES module: a classic Worker (`importScripts`) cannot load it; such a worker's
//     hello does not announce `batch`, so it gets single messages (unless it speaks `batch`
//     itself).
import { batching, messageListeners, report } from './worker-batch.js';

const scope = globalThis;
if (!scope.__weftWorkerShim && typeof scope.postMessage === 'function' && typeof scope.addEventListener === 'function') {
  const rawPost = scope.postMessage.bind(scope);
  const add = scope.addEventListener.bind(scope);
  const remove = scope.removeEventListener.bind(scope);
  const rawClose = typeof scope.close === 'function' ? scope.close.bind(scope) : null;
  let handler = null;
  const listeners = messageListeners(scope);
  const call = (event) => {
    if (typeof handler === 'function') {
      try {
        handler.call(scope, event);
      } catch (e) {
        report(e);
      }
    }
    if (listeners.size > 0) listeners.dispatch(event);
  };
  const { post, receive, heard, flush } = batching(rawPost, (data) => call(new MessageEvent('message', { data })));
  scope.postMessage = post;
  if (rawClose !== null)
    scope.close = () => {
      flush();
      rawClose();
    };
  add('message', (e) => {
    const d = e.data;
    if (d !== null && typeof d === 'object' && d.type === 'batch' && Array.isArray(d.messages)) {
      receive(d);
    } else {
      heard();
      call(e);
    }
  });
  Object.defineProperty(scope, 'onmessage', {
    configurable: true,
    get: () => handler,
    set: (fn) => {
      handler = fn;
    },
  });
  scope.addEventListener = (type, fn, options) => {
    if (type === 'message') listeners.add(fn, options);
    else add(type, fn, options);
  };
  scope.removeEventListener = (type, fn, options) => {
    if (type === 'message') listeners.remove(fn, options);
    else remove(type, fn, options);
  };
}
