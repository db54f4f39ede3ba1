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
// In a Worker opened with `atomics: true` (`openWorker` in Node; off by default), an idle
// worker waits for the host's next message in `Atomics.wait` (see the Worker branch below).
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
import { isMainThread, parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';

/** The longest idle wait in `Atomics.wait` (ms) before the worker returns to its event loop. */
const WAIT_MS = 20;

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
// Set in a Worker with the idle wait: told of each thenable a handler returns (its work goes on).
let pendingWork = null;
const returned = (r) => {
  if (pendingWork !== null && r !== null && (typeof r === 'object' || typeof r === 'function') && typeof r.then === 'function') {
    pendingWork(r);
  }
};

function dispatch(data) {
  if (!ready) {
    held.push(data);
    return;
  }
  const event = { type: 'message', data };
  if (handler) {
    try {
      returned(handler.call(globalThis, event));
    } catch (e) {
      report(e);
    }
  }
  for (const entry of listeners) {
    if (entry.removed) continue;
    if (entry.once) drop(entry);
    try {
      returned(typeof entry.fn === 'function' ? entry.fn.call(globalThis, event) : entry.fn.handleEvent(event));
    } catch (e) {
      report(e);
    }
  }
}

const toJson = (_k, v) => (ArrayBuffer.isView(v) && !(v instanceof DataView) ? Array.from(v) : v);

// What the shim tells the script (and tests): `idleWakes`, the messages read after an idle wait.
const shimState = { idleWakes: 0 };

let post;
let script;
let flush = () => {};
if (!isMainThread && parentPort) {
  script = workerData.script;
  const { batching } = await import('./worker-batch.js');
  // (No idle wait where Node cannot list what keeps the event loop alive.)
  const wake = typeof process.getActiveResourcesInfo === 'function' ? (workerData.wake ?? null) : null;
  if (wake === null) {
    const b = batching((m, t) => parentPort.postMessage(m, t), dispatch);
    post = b.post;
    flush = b.flush;
    parentPort.on('message', b.receive);
  } else {
    // The idle wait (`openWorker`'s `atomics: true`; what piscina's `atomics: 'sync'` does): the host bumps `wake[0]` after every frame it posts, and notifies when `wake[1]`
    // says the worker waits. Once the worker is idle — every `run` delivered has had its
    // `done`, `error` or `cancelled` sent, no promise a handler returned is pending, and nothing
    // keeps the event loop alive (no ref'd timer, socket, file request or other port:
    // `getActiveResourcesInfo()` lists this port alone; no `message` listener on parentPort but
    // the shim's) — it blocks in `Atomics.wait` from a microtask queued after the delivery, and
    // reads what the host posts with `receiveMessageOnPort`: it wakes on a futex and stays in
    // the same turn, instead of going through the event loop's async handle and a `message`
    // event.
    // A run in flight (a handler awaiting async work, a chunked run with its timers) keeps the
    // worker in its event loop, so a cancel arrives as before. A wait lasts at most WAIT_MS, and
    // then the worker returns to its event loop until its next run ends: what the check cannot
    // see (an unref'd timer, a `process.nextTick` or promise callback queued after an idle
    // run's last reply, a wasm compile's completion) waits at most that long, or until the
    // host's next message.
    const running = new Set();
    let pending = 0;
    let depth = 0;
    let queued = false;
    const settled = () => {
      if (--pending === 0 && running.size === 0 && depth === 0) idle();
    };
    pendingWork = (r) => {
      pending++;
      r.then(settled, settled);
    };
    const deliver = (m) => {
      if (m !== null && typeof m === 'object' && m.type === 'run') running.add(m.id);
      depth++;
      try {
        dispatch(m);
      } finally {
        depth--;
      }
      if (depth === 0 && running.size === 0 && pending === 0) idle();
    };
    const ended = (m) => {
      if (m === null || typeof m !== 'object') return;
      const t = m.type;
      if ((t === 'done' || t === 'error' || t === 'cancelled') && running.delete(m.id)) {
        if (running.size === 0 && pending === 0 && depth === 0) idle();
      }
    };
    const b = batching((m, t) => {
      parentPort.postMessage(m, t);
      if (m !== null && typeof m === 'object' && m.type === 'batch' && Array.isArray(m.messages)) {
        for (const x of m.messages) ended(x);
      } else ended(m);
    }, deliver);
    const enter = () => {
      queued = false;
      if (running.size > 0 || pending > 0 || !ready) return;
      const res = process.getActiveResourcesInfo();
      if (res.length > 1 || (res.length === 1 && res[0] !== 'MessagePort')) return;
      // A script listening on parentPort itself would miss what receiveMessageOnPort reads.
      if (parentPort.listenerCount('message') !== 1) return;
      for (;;) {
        const seen = Atomics.load(wake, 0);
        const e = receiveMessageOnPort(parentPort);
        if (e !== undefined) {
          // One message per turn, as the event loop delivers them: the microtasks its handler
          // queued run before the next (delivered from here again if the worker is still idle).
          shimState.idleWakes++;
          b.receive(e.message);
          return;
        }
        // wake[1] tells the host a notify is needed (none while the worker is not waiting).
        Atomics.store(wake, 1, 1);
        const r = Atomics.wait(wake, 0, seen, WAIT_MS);
        Atomics.store(wake, 1, 0);
        if (r === 'timed-out') return;
      }
    };
    // (A promise's reaction, not `queueMicrotask` or `process.nextTick`: those cost a tenth of
    // a round trip more here.)
    const resolved = Promise.resolve();
    const idle = () => {
      if (queued) return;
      queued = true;
      resolved.then(enter);
    };
    post = b.post;
    flush = b.flush;
    parentPort.on('message', b.receive);
  }
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
globalThis.__weftWorkerShim = shimState;
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
