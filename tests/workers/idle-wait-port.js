// A worker of the idle-wait tests that also listens on `parentPort` itself (a Node script under
// the shim may): its listener must see every message, as the shim's handler does.
import { parentPort } from 'node:worker_threads';

let seen = 0;
parentPort.on('message', () => seen++);
self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true } });
self.onmessage = (e) => {
  const m = e.data;
  if (m.type !== 'run') return;
  self.postMessage({ id: m.id, type: 'done', value: { seen, idleWakes: self.__weftWorkerShim?.idleWakes ?? -1 } });
};
