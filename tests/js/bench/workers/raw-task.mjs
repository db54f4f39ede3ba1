// The small task of the Worker benchmarks over bare worker_threads postMessage (the floor).
import { parentPort } from 'node:worker_threads';

parentPort.on('message', (m) => {
  let s = 0;
  for (let i = 0; i < m.n; i++) s += i;
  parentPort.postMessage({ id: m.id, value: s });
});
