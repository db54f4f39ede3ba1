// A Node script with remote endpoints on `weft serve` (`--remote-script ticker=…`, `diffusion=…`): progress,
// a cancel acknowledged across the socket, a socket severed mid-run and resumed within the
// window with nothing lost. The script (remote/client.mjs) runs under
// `node --experimental-websocket` (Node 20 has no global WebSocket without it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { AGENT, HUMAN, startServe } from '../lib/weft.mjs';

const ticker = fileURLToPath(new URL('../../../node-host/tests/workers/ticker.mjs', import.meta.url));
const diffusion = fileURLToPath(new URL('../../../examples/diffusion/worker.js', import.meta.url));
const client = fileURLToPath(new URL('../remote/client.mjs', import.meta.url));

test('remote endpoint from a Node script: progress, cancel acknowledged, sever + resume with nothing lost, the diffusion worker on the server', { timeout: 60_000 }, async () => {
  const serve = await startServe([
    '--remote-script',
    `ticker=${ticker}`,
    '--remote-script',
    `diffusion=${diffusion}`,
    '--remote-window-ms',
    '1500',
    '--remote-heartbeat-ms',
    '100',
  ]);
  try {
    const ws = `${serve.url.replace(/^http/, 'ws')}/api/jobs/remote`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--experimental-websocket', '--no-warnings', client, ws, AGENT], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      timeout: 40_000,
    });
    const f = JSON.parse(stdout.trim().split('\n').pop());
    assert.deepEqual(f.done, { outcome: 'succeeded', value: { ticks: 4 } });
    assert.deepEqual(f.doneTicks, [1, 2, 3, 4]);
    assert.equal(f.doneRemote.session, f.session);
    assert.equal(typeof f.doneRemote.job, 'number');
    assert.equal(f.cancelStatus, 'requested');
    assert.deepEqual(f.cancelled, { outcome: 'cancelled', evidence: 'acknowledged' });
    // Severed and resumed: the same session, every tick once and in order, nothing lost.
    assert.equal(f.stateAfterCut, 'waiting');
    assert.deepEqual(f.cut, { outcome: 'succeeded', value: { ticks: 30 } });
    assert.deepEqual(f.cutTicks, Array.from({ length: 30 }, (_, i) => i + 1));
    assert.equal(f.cutSession, f.session);
    // One cut by the script (a busy machine may add a heartbeat-silence one): each resumed.
    assert.ok(f.disconnects >= 1, `disconnects: ${f.disconnects}`);
    assert.equal(f.resumed, f.disconnects);
    assert.equal(f.sockets, f.disconnects + 1);
    // The diffusion worker ran on the server in a session of its own and stopped on the input.
    assert.deepEqual([f.diffusion.outcome, f.diffusion.points], ['succeeded', 64], JSON.stringify(f.diffusion));
    assert.notEqual(f.diffusion.session, f.session);
    assert.deepEqual(f.diffusionApplied, [f.diffusionInput]);
    // The server's side: the client closing its runtime ended the session deliberately (a
    // `close` frame): it is gone, and not as an expired session's tombstone.
    const end = Date.now() + 5000;
    let table;
    for (;;) {
      const res = await fetch(`${serve.url}/api/jobs/remote/sessions`, { headers: { authorization: `Bearer ${HUMAN}` } });
      assert.equal(res.status, 200);
      table = await res.json();
      if (!table.sessions.some((s) => s.session === f.session) || Date.now() > end) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(!table.sessions.some((s) => s.session === f.session), JSON.stringify(table));
    assert.ok(!table.tombstones.some((t) => t.session === f.session), JSON.stringify(table));
  } finally {
    await serve.close();
  }
});
