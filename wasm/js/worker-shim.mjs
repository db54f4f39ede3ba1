// Runs a DOM-style worker script (`self.onmessage`, `self.postMessage`,
// `self.addEventListener("message")`) outside a browser:
//   * in a Node worker_threads Worker (messages via parentPort, structured clone);
//   * as a child process: `node worker-shim.mjs <script>`, one JSON message per line on
//     stdin/stdout. console output goes to stderr so stdout carries only the protocol.
// Messages that arrive before the script has installed its handler are held, not dropped.
// In a Worker the shim speaks the protocol's `batch` capability for the script (worker-batch.js:
// the script's hello announces it; batch frames are delivered as their messages; replies made
// while handling a message, or in one microtask, go out as one frame). As a child process it
// does not (one JSON message per line, as the native hosts expect).
// In a Worker the shim imports only `node:worker_threads`: a Worker's start-up time is mostly
// the built-in modules it loads, so the child-process helpers are imported in that branch only.
import { isMainThread, parentPort, workerData } from 'node:worker_threads';

const listeners = new Set();
let handler = null;
let ready = false;
const held = [];

function dispatch(data) {
  if (!ready) {
    held.push(data);
    return;
  }
  const event = { type: 'message', data };
  if (handler) handler.call(globalThis, event);
  if (listeners.size > 0) for (const l of listeners) l.call(globalThis, event);
}

const toJson = (_k, v) => (ArrayBuffer.isView(v) && !(v instanceof DataView) ? Array.from(v) : v);

let post;
let script;
if (!isMainThread && parentPort) {
  script = workerData.script;
  const { batching } = await import('./worker-batch.js');
  const b = batching((m, t) => parentPort.postMessage(m, t), dispatch);
  post = b.post;
  parentPort.on('message', b.receive);
} else {
  const [{ resolve }, { pathToFileURL }, { format }, { createInterface }] = await Promise.all([
    import('node:path'),
    import('node:url'),
    import('node:util'),
    import('node:readline'),
  ]);
  const arg = process.argv[process.argv.length - 1];
  script = /^[a-z]+:/i.test(arg) ? arg : pathToFileURL(resolve(arg)).href;
  const out = (...a) => process.stderr.write(format(...a) + '\n');
  console.log = console.info = console.debug = out;
  post = (m) => process.stdout.write(JSON.stringify(m, toJson) + '\n');
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  rl.on('line', (line) => {
    if (!line.trim()) return;
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      process.stderr.write(`weft worker shim: ignored a line that is not JSON\n`);
      return;
    }
    dispatch(msg);
  });
  // The host closing stdin means the endpoint is gone: stop.
  rl.on('close', () => process.exit(0));
}

// `weft/worker` (worker.js), imported by a script that also runs in browsers, does nothing
// under the shim: in a Worker the shim batches itself, as a child process nothing batches.
globalThis.__weftWorkerShim = true;
globalThis.self = globalThis;
globalThis.postMessage = post;
globalThis.addEventListener = (type, fn) => {
  if (type === 'message') listeners.add(fn);
};
globalThis.removeEventListener = (type, fn) => {
  if (type === 'message') listeners.delete(fn);
};
Object.defineProperty(globalThis, 'onmessage', {
  configurable: true,
  get: () => handler,
  set: (fn) => {
    handler = fn;
  },
});
globalThis.close = () => process.exit(0);

await import(script);
ready = true;
for (const m of held.splice(0)) dispatch(m);
