// A Node client of a remote job host, run by node/remote.test.mjs as
// `node --experimental-websocket remote/client.mjs URL TOKEN`: through `weft serve`'s
// `/api/jobs/remote` (script `ticker`: progress `{tick: i}` every `everyMs`, cancel
// acknowledged) it checks progress, a cancel acknowledged across the socket, and a socket
// severed mid-run and resumed within the window with every event delivered once, in order;
// then the diffusion worker (script `diffusion`) runs on the server and stops on an input.
// Prints one JSON line of facts; the test asserts them. Exits non-zero on an exception.
import { createRuntime } from 'weft';

const [url, token] = process.argv.slice(2);
const rt = createRuntime();
const facts = {};
// The sockets the runtime opens, so that the script can sever the current one.
const sockets = [];
class Tracked extends WebSocket {
  constructor(u) {
    super(u);
    sockets.push(this);
  }
}
const ep = rt.openRemote(url, { token, script: 'ticker', resumeWindowMs: 1500, heartbeatMs: 100, label: 'node-client', WebSocket: Tracked });
const ticks = (job) => job.journal().filter((e) => e.type === 'progress').map((e) => e.value.tick);
const until = async (cond, what, ms = 10_000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

// 1. Progress to completion.
const done = ep.submit({ ticks: 4, everyMs: 10 });
facts.done = await done.wait();
facts.doneTicks = ticks(done);
facts.doneRemote = done.info.remote;
facts.session = ep.info.remote.session;

// 2. A cancel acknowledged by the server's worker.
const long = ep.submit({ ticks: 1000, everyMs: 10 });
await until(() => ticks(long).length >= 2, 'progress of the long run');
facts.cancelStatus = long.cancel('enough');
facts.cancelled = await long.wait();

// 3. Sever the socket mid-run (the client closes it); the link resumes within the window.
const cut = ep.submit({ ticks: 30, everyMs: 20 });
await until(() => ticks(cut).length >= 3, 'progress before the cut');
const before = ep.info.remote.disconnects;
sockets.at(-1).close();
await until(() => ep.info.remote.disconnects > before, 'the disconnect');
facts.stateAfterCut = ep.info.remote.state;
facts.cut = await cut.wait();
facts.cutTicks = ticks(cut);
facts.cutSession = ep.info.remote.session;
facts.disconnects = ep.info.remote.disconnects;
facts.resumed = ep.info.events.filter((e) => e.type === 'resumed').length;
facts.state = ep.info.remote.state;
facts.sockets = sockets.length;

// 4. The diffusion worker on the server (its own session): progress, then structured input
// that stops it early (simTime 1e4 is hours of steps: only the stopAt input ends the run).
const dep = rt.openRemote(url, { token, script: 'diffusion', resumeWindowMs: 1500, heartbeatMs: 100, label: 'node-diffusion' });
const sim = dep.submit({ points: 64, simTime: 1e4, chunkMs: 2, partialEveryMs: 1e6 });
await until(() => sim.journal().some((e) => e.type === 'progress'), 'diffusion progress');
const stop = sim.send({ stopAt: 1e-9 });
const simOut = await sim.wait();
facts.diffusion = { outcome: simOut.outcome, points: simOut.value?.points, session: dep.info.remote.session };
facts.diffusionApplied = sim.journal().filter((e) => e.type === 'input_applied').map((e) => e.inputId);
facts.diffusionInput = stop;
rt.close();
console.log(JSON.stringify(facts));
