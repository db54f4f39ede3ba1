// The small task of the round-trip benchmark, as a weft worker (DOM-style).
self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true } });
self.onmessage = (e) => {
  const m = e.data;
  if (m.type !== 'run') return;
  let s = 0;
  for (let i = 0; i < m.payload.n; i++) s += i;
  self.postMessage({ id: m.id, type: 'done', value: s });
};
