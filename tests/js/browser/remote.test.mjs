// A Chromium page with a remote endpoint on `weft serve` (`--remote-script ticker=…`), the page
// served from another port (`--remote-origin`): progress, a cancel acknowledged across the
// socket, `ws.close()` + resume with nothing lost, `ws.close()` + no reconnect within the
// window → `lost` with evidence `remote_disconnected`, and the server terminating the session.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { launch } from '../lib/browser.mjs';
import { serveStatic } from '../lib/server.mjs';
import { AGENT, HUMAN, startServe } from '../lib/weft.mjs';

const ticker = fileURLToPath(new URL('../../../node-host/tests/workers/ticker.mjs', import.meta.url));
const diffusion = fileURLToPath(new URL('../../../examples/diffusion/worker.js', import.meta.url));

let site;
let serve;
let browser;
let page;
let wsUrl;

before(async () => {
  site = await serveStatic();
  serve = await startServe([
    '--remote-script',
    `ticker=${ticker}`,
    '--remote-script',
    `diffusion=${diffusion}`,
    '--remote-window-ms',
    '1500',
    '--remote-heartbeat-ms',
    '100',
    '--remote-origin',
    site.url,
  ]);
  wsUrl = `${serve.url.replace(/^http/, 'ws')}/api/jobs/remote`;
  browser = await launch();
  page = await browser.newPage();
  page.on('pageerror', (e) => console.error('page error:', e));
  await page.goto(`${site.url}/tests/js/browser/remote.html`);
  await page.waitForFunction(() => window.remoteReady === true, null, { timeout: 20_000 });
});

after(async () => {
  await browser?.close();
  await serve?.close();
  await site?.close();
});

// Runs in the page: opens a remote endpoint whose sockets the scenario can close or block.
const inPage = async ({ url, token, scenario, script }) => {
  const { createRuntime } = window.weft;
  const sockets = [];
  let blocked = false;
  class Tracked extends WebSocket {
    constructor(u) {
      // Blocked: every reconnect goes to a closed port (the connect fails).
      super(blocked ? 'ws://127.0.0.1:1/api/jobs/remote' : u);
      sockets.push(this);
    }
  }
  const rt = createRuntime();
  const ep = rt.openRemote(url, { token, script, resumeWindowMs: 1500, heartbeatMs: 100, WebSocket: Tracked });
  const ticksOrProgress = (job) => job.journal().filter((e) => e.type === 'progress').length;
  const ticks = (job) => job.journal().filter((e) => e.type === 'progress').map((e) => e.value.tick);
  const until = async (cond, what) => {
    const end = Date.now() + 10_000;
    while (!cond()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const f = {};
  try {
    if (scenario === 'progress-cancel') {
      const done = ep.submit({ ticks: 3, everyMs: 10 });
      f.done = await done.wait();
      f.doneTicks = ticks(done);
      f.remote = done.info.remote;
      f.accepted = done.journal().filter((e) => e.type === 'remote_accepted').length;
      const long = ep.submit({ ticks: 1000, everyMs: 10 });
      await until(() => ticks(long).length >= 2, 'progress');
      f.cancelStatus = long.cancel('enough');
      f.cancelled = await long.wait();
    } else if (scenario === 'close-resume') {
      const cut = ep.submit({ ticks: 30, everyMs: 20 });
      await until(() => ticks(cut).length >= 3, 'progress before the cut');
      f.session = ep.info.remote.session;
      sockets.at(-1).close();
      f.cut = await cut.wait();
      f.cutTicks = ticks(cut);
      f.sessionAfter = ep.info.remote.session;
      f.disconnects = ep.info.remote.disconnects;
      f.resumed = ep.info.events.filter((e) => e.type === 'resumed').length;
    } else if (scenario === 'diffusion-input') {
      // Structured input across the socket: a snapshot (an immediate partial), then stop early.
      // simTime 1e4 is hours of steps: the run ends only by the stopAt input.
      const job = ep.submit({ points: 64, simTime: 1e4, chunkMs: 2, partialEveryMs: 1e6 });
      await until(() => ticksOrProgress(job) >= 1, 'diffusion progress');
      f.capabilities = ep.info.capabilities;
      const snap = job.send({ snapshot: true });
      await until(() => job.journal().some((e) => e.type === 'partial'), 'the snapshot partial');
      const stop = job.send({ stopAt: 1e-9 });
      f.out = await job.wait();
      const j = job.journal();
      f.applied = j.filter((e) => e.type === 'input_applied').map((e) => e.inputId);
      f.inputs = [snap, stop];
      f.points = f.out.value?.points;
    } else if (scenario === 'close-expire') {
      const cut = ep.submit({ ticks: 1000, everyMs: 20 });
      await until(() => ticks(cut).length >= 2, 'progress before the cut');
      f.session = ep.info.remote.session;
      f.remoteJob = cut.info.remote.job;
      blocked = true;
      sockets.at(-1).close();
      f.lost = await cut.wait();
      f.attempts = sockets.length;
    }
  } finally {
    rt.close();
  }
  return f;
};

const run = (scenario, script = 'ticker') => page.evaluate(inPage, { url: wsUrl, token: AGENT, scenario, script });

test('Chromium remote endpoint: progress and a cancel acknowledged across the socket', { timeout: 30_000 }, async () => {
  const f = await run('progress-cancel');
  assert.deepEqual(f.done, { outcome: 'succeeded', value: { ticks: 3 } });
  assert.deepEqual(f.doneTicks, [1, 2, 3]);
  assert.equal(f.accepted, 1);
  assert.match(f.remote.session, /^s-\d+$/);
  assert.equal(f.cancelStatus, 'requested');
  assert.deepEqual(f.cancelled, { outcome: 'cancelled', evidence: 'acknowledged' });
});

test('Chromium remote endpoint: ws.close() mid-run, resumed within the window, nothing lost', { timeout: 30_000 }, async () => {
  const f = await run('close-resume');
  assert.deepEqual(f.cut, { outcome: 'succeeded', value: { ticks: 30 } });
  assert.deepEqual(f.cutTicks, Array.from({ length: 30 }, (_, i) => i + 1));
  assert.equal(f.sessionAfter, f.session);
  // One cut by the page (a busy machine may add a heartbeat-silence one): each resumed.
  assert.ok(f.disconnects >= 1, `disconnects: ${f.disconnects}`);
  assert.equal(f.resumed, f.disconnects);
});

test('Chromium remote endpoint: the diffusion worker on the server takes structured input', { timeout: 30_000 }, async () => {
  const f = await run('diffusion-input', 'diffusion');
  assert.equal(f.out.outcome, 'succeeded', JSON.stringify(f.out).slice(0, 300));
  assert.equal(f.points, 64);
  assert.deepEqual(f.applied, f.inputs);
  assert.equal(f.capabilities?.input, true, JSON.stringify(f.capabilities));
});

test('Chromium remote endpoint: ws.close() and no resume: lost with remote_disconnected; the server terminates the session', { timeout: 30_000 }, async () => {
  const f = await run('close-expire');
  assert.equal(f.lost.outcome, 'lost');
  assert.equal(f.lost.evidence, 'remote_disconnected');
  assert.match(f.lost.reason, /not resumed within 1500 ms/);
  assert.ok(f.attempts >= 2, `reconnects attempted: ${f.attempts}`);
  // The server kept the run through the window (+ grace), then terminated it and recorded why.
  const end = Date.now() + 10_000;
  let tomb;
  while (!tomb) {
    const res = await fetch(`${serve.url}/api/jobs/remote/sessions`, { headers: { authorization: `Bearer ${HUMAN}` } });
    assert.equal(res.status, 200);
    tomb = (await res.json()).tombstones.find((t) => t.session === f.session);
    if (!tomb) {
      assert.ok(Date.now() < end, 'no tombstone for the expired session');
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const job = tomb.jobs.find((j) => j.job === f.remoteJob);
  assert.ok(job, JSON.stringify(tomb));
  assert.equal(job.outcome.outcome, 'lost', JSON.stringify(tomb));
  assert.match(tomb.reason, /not resumed/);
});
