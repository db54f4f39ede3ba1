// A small fast task ({n} → the sum 0..n-1, {fail} → an error, {progress} → one progress
// first) that speaks the `batch` capability: in a browser through `weft/worker` (the package's
// worker.js, imported first), under Node through the package's worker shim (which announces it
// for any script that sends a hello).
if (!globalThis.__weftWorkerShim) await import('/wasm/pkg/worker.js');
self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true, errorCode: true } });
self.onmessage = (e) => {
  const m = e.data;
  if (m.type === 'cancel') return self.postMessage({ id: m.id, type: 'cancelled' });
  if (m.type !== 'run') return;
  const p = m.payload ?? {};
  if (p.progress) self.postMessage({ id: m.id, type: 'progress', value: p.progress });
  if (p.fail) return self.postMessage({ id: m.id, type: 'error', message: String(p.fail), code: 'E_QUICK' });
  let s = 0;
  for (let i = 0; i < (p.n ?? 0); i++) s += i;
  self.postMessage({ id: m.id, type: 'done', value: s });
};
