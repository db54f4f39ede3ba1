// A worker that starts a grandchild (`sleep 60`) and writes both pids to `payload.pidFile`, for
// the tests of `weft run`'s process groups. `payload.hold`: the grandchild keeps the worker's
// stdout open. `payload.then`: 'done' (reply, stay alive), 'crash' (exit with status 3 after
// 100 ms, without replying) or 'hang' (stay running). It cannot acknowledge cancels (a cancel
// waits for quiet).
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';

self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: {} });
self.onmessage = (e) => {
  const m = e.data;
  if (m.type !== 'run') return;
  const { pidFile, hold = false, then = 'done' } = m.payload;
  const g = spawn('sleep', ['60'], { stdio: ['ignore', hold ? 'inherit' : 'ignore', 'ignore'] });
  g.unref();
  writeFileSync(pidFile, JSON.stringify({ worker: process.pid, grandchild: g.pid }));
  if (then === 'crash') setTimeout(() => process.exit(3), 100);
  else if (then === 'done') self.postMessage({ id: m.id, type: 'done', value: { grandchild: g.pid } });
};
