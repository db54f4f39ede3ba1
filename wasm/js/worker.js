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
import { batching } from './worker-batch.js';

const scope = globalThis;
if (!scope.__weftWorkerShim && typeof scope.postMessage === 'function' && typeof scope.addEventListener === 'function') {
  const rawPost = scope.postMessage.bind(scope);
  const add = scope.addEventListener.bind(scope);
  const remove = scope.removeEventListener.bind(scope);
  let handler = null;
  const listeners = new Set();
  const call = (event) => {
    if (typeof handler === 'function') handler.call(scope, event);
    if (listeners.size > 0) for (const l of listeners) typeof l === 'function' ? l.call(scope, event) : l.handleEvent(event);
  };
  const { post, receive, heard } = batching(rawPost, (data) => call(new MessageEvent('message', { data })));
  scope.postMessage = post;
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
  // `message` listeners are kept here (options such as `once` are not supported for them).
  scope.addEventListener = (type, fn, options) => {
    if (type === 'message') {
      if (fn) listeners.add(fn);
    } else add(type, fn, options);
  };
  scope.removeEventListener = (type, fn, options) => {
    if (type === 'message') listeners.delete(fn);
    else remove(type, fn, options);
  };
}
