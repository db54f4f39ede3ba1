// An unmodified AIUI-style worker (the workerStream protocol only): no hello, no cancel
// acknowledgement — a cancelled run simply stops posting. Payload: {chunks = 50, chunkMs = 5}.
const cancelled = new Set();
self.onmessage = (e) => {
  const m = e.data;
  if (m.type === 'cancel') cancelled.add(m.id);
  if (m.type === 'run') void run(m.id, m.payload ?? {});
};
async function run(id, { chunks = 50, chunkMs = 5 }) {
  for (let i = 1; i <= chunks; i++) {
    const end = Date.now() + chunkMs;
    while (Date.now() < end) {
      // busy work, as a real calculation would do
    }
    self.postMessage({ id, type: 'progress', value: i / chunks });
    await new Promise((r) => setTimeout(r, 0));
    if (cancelled.has(id)) return;
  }
  self.postMessage({ id, type: 'done', value: { chunks } });
}
