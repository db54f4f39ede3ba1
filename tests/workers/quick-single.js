// tests/workers/quick.js without the `batch` capability: its hello says `batch: false` (the
// Node worker shim then passes every message alone), and it never imports `weft/worker`.
self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true, errorCode: true, batch: false } });
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
