// A worker that throws an uncaught error mid-run (after one progress message).
self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true } });
self.onmessage = (e) => {
  const m = e.data;
  if (m.type !== 'run') return;
  self.postMessage({ id: m.id, type: 'progress', value: 0.1 });
  setTimeout(() => {
    throw new Error('simulated crash in the middle of a run');
  }, 20);
};
