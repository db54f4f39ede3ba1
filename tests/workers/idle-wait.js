// The worker of the idle-wait tests (tests/js/node/worker-idle.test.mjs): what a run does is
// named by its payload's `op`. The shim reports `idleWakes` (messages read after an idle
// `Atomics.wait`) in `self.__weftWorkerShim`; -1 where no shim counts them.
self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true } });
let ticks = 0;
let interval = null;
let after = false;
// Messages read after an idle wait between the start of the last `compile-loop` run and the
// arrival of its cancel (0 when the worker stayed in its event loop while the run was in flight).
let cancelViaWait = null;
const loops = new Map();
const done = (id, value) => self.postMessage({ id, type: 'done', value });
const wakes = () => self.__weftWorkerShim?.idleWakes ?? -1;
const stats = () => ({ idleWakes: wakes(), ticks, after, cancelViaWait });
// The smallest wasm module: compiled off the thread, its promise settled by a platform task
// (work the event loop does that `getActiveResourcesInfo()` does not list).
const emptyModule = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]);

// A handler that returns a promise: its work after the reply (`after`) runs before the worker
// waits idle.
async function replyThenFinish(id) {
  done(id, 'replied');
  await null;
  await null;
  after = true;
}

self.onmessage = (e) => {
  const m = e.data;
  if (m.type === 'cancel') {
    const loop = loops.get(m.id);
    if (loop) {
      loop.cancelled = true;
      if (loop.wakes !== undefined) cancelViaWait = wakes() - loop.wakes;
    }
    return;
  }
  if (m.type !== 'run') return;
  const { op } = m.payload;
  if (op === 'sum') {
    let s = 0;
    for (let i = 0; i < 100; i++) s += i;
    return done(m.id, s);
  }
  if (op === 'stats') return done(m.id, stats());
  // A run that keeps a timer: done from its callback.
  if (op === 'timer') return void setTimeout(() => done(m.id, 'timer'), 2);
  // A ref'd interval of the worker's own, ticking between runs.
  if (op === 'interval-start') {
    interval = setInterval(() => ticks++, 1);
    return done(m.id, stats());
  }
  if (op === 'interval-stop') {
    clearInterval(interval);
    return done(m.id, stats());
  }
  if (op === 'async-after') {
    after = false;
    return replyThenFinish(m.id);
  }
  // A chunked run (1 ms chunks on timers) until cancelled: one progress, then `cancelled`.
  if (op === 'loop') {
    const loop = { cancelled: false };
    loops.set(m.id, loop);
    self.postMessage({ id: m.id, type: 'progress', value: 0 });
    const chunk = () => {
      if (loop.cancelled) {
        loops.delete(m.id);
        return self.postMessage({ id: m.id, type: 'cancelled' });
      }
      setTimeout(chunk, 1);
    };
    chunk();
  }
  // A run of async work without timers (wasm compiles, one after another) until cancelled.
  if (op === 'compile-loop') {
    const loop = { cancelled: false, wakes: wakes() };
    loops.set(m.id, loop);
    self.postMessage({ id: m.id, type: 'progress', value: 0 });
    (async () => {
      while (!loop.cancelled) await WebAssembly.compile(emptyModule);
      loops.delete(m.id);
      self.postMessage({ id: m.id, type: 'cancelled' });
    })();
  }
};
