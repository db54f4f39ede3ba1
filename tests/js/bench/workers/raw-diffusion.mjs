// A cooperative chunked loop over bare worker_threads postMessage: {id, run: chunkMs} starts
// it, {id, cancel} stops it at the next chunk boundary and is acknowledged; {id, n} is the
// small task. The floor for cancel → acknowledgement.
import { parentPort } from 'node:worker_threads';

const cancelled = new Set();
parentPort.on('message', (m) => {
  if (m.cancel) {
    cancelled.add(m.id);
    return;
  }
  if (m.run === undefined) {
    let s = 0;
    for (let i = 0; i < m.n; i++) s += i;
    parentPort.postMessage({ id: m.id, value: s });
    return;
  }
  const chunk = () => {
    if (cancelled.delete(m.id)) return parentPort.postMessage({ id: m.id, cancelled: true });
    const end = performance.now() + m.run;
    let x = 0;
    while (performance.now() < end) x += Math.sqrt(x + 1);
    parentPort.postMessage({ id: m.id, progress: x });
    setImmediate(chunk);
  };
  chunk();
});
