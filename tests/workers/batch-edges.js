// The edges of the worker side of `batch` (wasm/js/worker-batch.js), in a browser through
// `weft/worker` (the package's worker.js, imported first), under Node through the package's
// worker shim. A run's payload says what it does:
//   {reuse: k}   one progress object, changed and posted k times (values 1..k), then done;
//   {spin: ms}   busy for ms of its own time, then done;
//   {close: true} done (with v), then self.close();
//   {boom: true} onmessage throws (no reply from it; the `message` listener below replies);
//   {bad: true}  a done whose value cannot be cloned: the DataCloneError, caught at the post,
//                becomes an error reply with the error's name;
//   {own: true}  a progress, then a batch frame of its own (two progress, done 'own');
//   {errors: true} done with the number of errors reported to the worker so far;
//   {listeners: true} done with how many messages a `once` listener and a listener removed
//                by its signal (aborted in its first call) have seen: [1, 1];
//   otherwise    done with the payload's `v`.
if (!globalThis.__weftWorkerShim) await import('/wasm/pkg/worker.js');
let errors = 0;
// Keeps the worker alive through a handler's throw and counts it: in a DOM Worker the error
// event (cancelled), under the Node shim the thread's uncaught-exception handler.
if (globalThis.__weftWorkerShim) {
  process.on('uncaughtException', () => errors++);
} else {
  self.addEventListener('error', (e) => {
    errors++;
    e.preventDefault();
  });
}
self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true, errorCode: true } });
self.onmessage = (e) => {
  const m = e.data;
  if (m.type === 'cancel') return self.postMessage({ id: m.id, type: 'cancelled' });
  if (m.type !== 'run') return;
  const p = m.payload ?? {};
  if (p.boom) throw new Error('boom in onmessage');
  if (p.reuse) {
    const prog = { id: m.id, type: 'progress', value: 0 };
    for (let i = 1; i <= p.reuse; i++) {
      prog.value = i;
      self.postMessage(prog);
    }
    return self.postMessage({ id: m.id, type: 'done', value: p.reuse });
  }
  if (p.spin) {
    const t = performance.now();
    while (performance.now() - t < p.spin);
    return self.postMessage({ id: m.id, type: 'done', value: p.v ?? null });
  }
  if (p.bad) {
    try {
      self.postMessage({ id: m.id, type: 'done', value: { f() {} } });
    } catch (err) {
      self.postMessage({ id: m.id, type: 'error', message: `not cloneable: ${err.name}`, code: err.name });
    }
    return;
  }
  if (p.own) {
    self.postMessage({ id: m.id, type: 'progress', value: 0.25 });
    return self.postMessage({
      type: 'batch',
      messages: [
        { id: m.id, type: 'progress', value: 0.5 },
        { id: m.id, type: 'progress', value: 0.75 },
        { id: m.id, type: 'done', value: 'own' },
      ],
    });
  }
  if (p.errors) return self.postMessage({ id: m.id, type: 'done', value: errors });
  if (p.listeners) return self.postMessage({ id: m.id, type: 'done', value: [onceSeen, signalSeen] });
  self.postMessage({ id: m.id, type: 'done', value: p.v ?? null });
  if (p.close !== undefined) self.close();
};
// A second `message` listener: it answers the runs onmessage threw for (it still runs).
self.addEventListener('message', (e) => {
  const m = e.data;
  if (m.type === 'run' && m.payload?.boom) self.postMessage({ id: m.id, type: 'done', value: 'listener' });
});
let onceSeen = 0;
let signalSeen = 0;
self.addEventListener('message', () => onceSeen++, { once: true });
const stop = new AbortController();
self.addEventListener(
  'message',
  () => {
    signalSeen++;
    stop.abort();
  },
  { signal: stop.signal },
);
