// Runs a DOM-style worker script (`self.onmessage`, `self.postMessage`,
// `self.addEventListener("message")`) outside a browser:
//   * in a Node worker_threads Worker (messages via parentPort, structured clone);
//   * as a child process: `node worker-shim.mjs <script>`, one JSON message per line on
//     stdin/stdout. console output goes to stderr so stdout carries only the protocol.
// Messages that arrive before the script has installed its handler are held, not dropped.
// In a Worker the shim speaks the protocol's `batch` capability for the script (worker-batch.js:
// the script's hello announces it; batch frames are delivered as their messages; replies made
// while handling a batch, or in one microtask, go out as one frame, held at most about 1 ms;
// the first reply to a single message leaves at once; `close()` sends what is held first). As a child process it does not (one JSON message per
// line, as the native hosts expect).
// As in a DOM Worker, a handler that throws is reported as an uncaught error (a rethrow from a
// microtask: `process.on('uncaughtException')` sees it, else the worker dies with it) and the
// other listeners, and the rest of a batch, still get their messages; `addEventListener`
// honours `once` and `signal`.
// In a Worker the shim imports only `node:worker_threads` of the built-in modules: a Worker's
// start-up time is mostly the built-in modules it loads, so the child-process helpers are
// imported in that branch only.
// The native hosts run this file as `node --eval` text, without its directory: the Worker
// branch alone imports worker-batch.js, and the listener rules below are kept here (the same
// as worker.js's for DOM Workers).
// No top-level await: wasm/build.sh also bundles this file as CommonJS (worker-shim.cjs, what
// `weft` in Node starts its Workers with), since a Worker whose entry is an ES module spends
// ~5 ms setting up Node's ES module loader before its first line; with a CommonJS entry that is
// paid once, for the task script (issue 16).
import { isMainThread, parentPort, workerData } from 'node:worker_threads';

// A handler's error, as uncaught, without unwinding the delivery (Node has no reportError).
const report = (e) =>
  queueMicrotask(() => {
    throw e;
  });

// The `message` listeners, as addEventListener keeps them: one per (listener, capture), `once`
// and `signal` honoured, `handleEvent` objects accepted, a throwing one reported without
// stopping the others. The list is replaced, never changed in place: what a listener adds or
// removes applies from the next message (one removed before its turn is skipped).
let listeners = [];
const capture = (o) => (typeof o === 'boolean' ? o : Boolean(o?.capture));
const drop = (entry) => {
  entry.removed = true;
  listeners = listeners.filter((e) => e !== entry);
};
function listen(fn, options) {
  if (fn === null || (typeof fn !== 'function' && typeof fn !== 'object')) return;
  const o = typeof options === 'object' && options !== null ? options : null;
  if (o?.signal?.aborted) return;
  const c = capture(options);
  if (listeners.some((e) => e.fn === fn && e.capture === c)) return;
  const entry = { fn, capture: c, once: Boolean(o?.once), removed: false };
  listeners = [...listeners, entry];
  o?.signal?.addEventListener('abort', () => drop(entry), { once: true });
}
function unlisten(fn, options) {
  const c = capture(options);
  const entry = listeners.find((e) => e.fn === fn && e.capture === c);
  if (entry) drop(entry);
}

let handler = null;
let ready = false;
const held = [];

function dispatch(data) {
  if (!ready) {
    held.push(data);
    return;
  }
  const event = { type: 'message', data };
  if (handler) {
    try {
      handler.call(globalThis, event);
    } catch (e) {
      report(e);
    }
  }
  for (const entry of listeners) {
    if (entry.removed) continue;
    if (entry.once) drop(entry);
    try {
      if (typeof entry.fn === 'function') entry.fn.call(globalThis, event);
      else entry.fn.handleEvent(event);
    } catch (e) {
      report(e);
    }
  }
}

const toJson = (_k, v) => (ArrayBuffer.isView(v) && !(v instanceof DataView) ? Array.from(v) : v);

let post;
let script;
let flush = () => {};

/** Sets up the transport and the globals, then runs the script and delivers what was held. */
async function start() {
  if (!isMainThread && parentPort) {
    script = workerData.script;
    const { batching } = await import('./worker-batch.js');
    const b = batching((m, t) => parentPort.postMessage(m, t), dispatch);
    post = b.post;
    flush = b.flush;
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
  globalThis.addEventListener = (type, fn, options) => {
    if (type === 'message') listen(fn, options);
  };
  globalThis.removeEventListener = (type, fn, options) => {
    if (type === 'message') unlisten(fn, options);
  };
  Object.defineProperty(globalThis, 'onmessage', {
    configurable: true,
    get: () => handler,
    set: (fn) => {
      handler = fn;
    },
  });
  // What the script posted before closing goes out first (held replies would be lost).
  globalThis.close = () => {
    flush();
    process.exit(0);
  };

  await import(script);
  ready = true;
  for (const m of held.splice(0)) dispatch(m);
}

// A script that fails to load (or throws at its top level) is an uncaught error, as a rejected
// top-level await was: the Worker emits `error` and exits, a child process prints it and exits 1.
start().catch((e) =>
  process.nextTick(() => {
    throw e;
  }),
);
