// Base protocol (no hello): ignores cancels, stays silent for payload.ms, then posts `done` —
// after a cancel this `done` arrives late.
self.onmessage = (e) => {
  const m = e.data;
  if (m.type === 'run') setTimeout(() => self.postMessage({ id: m.id, type: 'done', value: 'finished anyway' }), m.payload?.ms ?? 300);
};
