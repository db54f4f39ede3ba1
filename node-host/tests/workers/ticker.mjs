// A small weft worker for the remote job tests: counts `ticks` ticks, one every `everyMs`
// milliseconds, reporting progress `{tick: i}` for each (so a test can check that every event
// arrived, in order), then `done {ticks}`. A cancel is acknowledged at the next tick.
// Payload: { ticks = 10, everyMs = 20, flood = false }; `flood` writes every tick at once (no
// wait, no cancel check), then `done`.
const cancelled = new Set();

self.postMessage({
  type: 'hello',
  protocol: 'weft-worker/1',
  capabilities: { input: false, cancelAck: true, errorCode: true },
});

self.onmessage = (event) => {
  const m = event.data;
  if (!m || typeof m !== 'object') return;
  if (m.type === 'cancel') cancelled.add(m.id);
  if (m.type === 'run') void run(m.id, m.payload ?? {});
};

async function run(id, { ticks = 10, everyMs = 20, flood = false }) {
  if (flood) {
    for (let i = 1; i <= ticks; i++) self.postMessage({ id, type: 'progress', value: { tick: i } });
    self.postMessage({ id, type: 'done', value: { ticks } });
    return;
  }
  for (let i = 1; i <= ticks; i++) {
    await new Promise((r) => setTimeout(r, everyMs));
    if (cancelled.has(id)) {
      self.postMessage({ id, type: 'cancelled' });
      return;
    }
    self.postMessage({ id, type: 'progress', value: { tick: i } });
  }
  self.postMessage({ id, type: 'done', value: { ticks } });
}
