// Sends malformed replies, a reply for a run id never issued, then a proper `done`.
// In a child process (stdio) mode "rawline" also writes a line that is not JSON.
self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true, errorCode: true } });
self.onmessage = (e) => {
  const m = e.data;
  if (m.type !== 'run') return;
  const id = m.id;
  const mode = m.payload?.mode ?? 'malformed';
  if (mode === 'rawline' && typeof process !== 'undefined' && process.stdout && !globalThis.WorkerGlobalScope) {
    process.stdout.write('this line is not JSON\n');
  }
  self.postMessage('a bare string');
  self.postMessage({ type: 'done', value: 'no id' });
  self.postMessage({ id: String(id), type: 'done', value: 'string id' });
  self.postMessage({ id, type: 'teleport' });
  self.postMessage({ id, type: 'error', message: 42 });
  self.postMessage({ id: 999999, type: 'done', value: 'never issued' });
  setTimeout(() => self.postMessage({ id, type: 'done', value: 'ok' }), 10);
};
