// Scheduling overhead of agent sessions per tool call in Node (wasm core + the JS agent), for
// steps of 1, 8 and 64 calls with instant handlers (synchronous functions returning a value).
// Each turn: run(task) → the scripted model selects N calls → every call settles → the model
// answers with text. The figure is (time per turn with N calls − time per turn without calls)
// / N: what the scheduler adds per call, including the Promise hop each handler result takes.
// Each figure is the best of three runs.
// Run: `node tests/js/bench/tools.bench.mjs` (after wasm/build.sh and tests/setup.sh).
import { createAgent, createRuntime } from 'weft';

const patterns = {
  parallel: () => 'par',
  exclusive: () => 'exc',
  alternating: (i) => (i % 2 === 0 ? 'par' : 'exc'),
};

function calls(n, pick) {
  return Array.from({ length: n }, (_, i) => ({ id: `c${i}`, name: pick(i), arguments: { i } }));
}

function agentFor(n, pick) {
  const rt = createRuntime();
  const step = n === 0 ? { text: 'nothing to do' } : { calls: calls(n, pick) };
  // A model without the scripted helper's bookkeeping: the two answers of every turn.
  const model = (req) => (req.messages.at(-1).role === 'task' ? step : { text: 'done' });
  const agent = createAgent(rt, { model });
  const schema = { type: 'object', properties: { i: { type: 'integer' } }, required: ['i'] };
  agent.registerTool({ name: 'par', parameters: schema, supportsParallel: true }, (args) => args.i);
  agent.registerTool({ name: 'exc', parameters: schema }, (args) => args.i);
  return { rt, agent };
}

async function run(turns, n, pick) {
  let { rt, agent } = agentFor(n, pick);
  const t0 = performance.now();
  for (let t = 0; t < turns; t++) {
    // A fresh agent now and then keeps the transcript (memory) bounded.
    if (t % 256 === 255) {
      agent.dispose();
      rt.dispose();
      ({ rt, agent } = agentFor(n, pick));
    }
    const r = await agent.run('task');
    if (r.end !== 'completed' || r.results.length !== n) throw new Error(`unexpected turn: ${JSON.stringify(r).slice(0, 300)}`);
  }
  const ms = performance.now() - t0;
  agent.dispose();
  rt.dispose();
  return ms;
}

/** Best of three runs of about `budgetMs` each (the machine may be shared: take the least
 * disturbed run). */
async function perTurnUs(n, pick, budgetMs = 250) {
  let probeTurns = 20;
  let probe = await run(probeTurns, n, pick);
  while (probe < 20) probe = await run((probeTurns *= 4), n, pick);
  const turns = Math.max(20, Math.round((budgetMs / probe) * probeTurns));
  let best = Infinity;
  for (let k = 0; k < 3; k++) best = Math.min(best, ((await run(turns, n, pick)) * 1000) / turns);
  return { turns, us: best };
}

console.log('agent session scheduling overhead per tool call (Node, wasm core + JS agent, instant handlers)');
console.log(`${'pattern'.padEnd(12)} ${'calls'.padStart(6)} ${'turns'.padStart(8)} ${'µs per turn'.padStart(14)} ${'µs per call'.padStart(14)}`);
await perTurnUs(0, patterns.parallel, 200); // warm up
const base = await perTurnUs(0, patterns.parallel);
console.log(`${'(no calls)'.padEnd(12)} ${'0'.padStart(6)} ${String(base.turns).padStart(8)} ${base.us.toFixed(2).padStart(14)} ${'-'.padStart(14)}`);
for (const [name, pick] of Object.entries(patterns)) {
  const perTurn = {};
  for (const n of [1, 8, 64]) {
    const r = await perTurnUs(n, pick);
    perTurn[n] = r.us;
    const perCall = Math.max(0, r.us - base.us) / n;
    console.log(`${name.padEnd(12)} ${String(n).padStart(6)} ${String(r.turns).padStart(8)} ${r.us.toFixed(2).padStart(14)} ${perCall.toFixed(2).padStart(14)}`);
  }
  const marginal = (perTurn[64] - perTurn[8]) / 56;
  console.log(`${name.padEnd(12)} marginal cost of one more call in a step (64 vs 8 calls): ${marginal.toFixed(2)} µs`);
}
console.log('µs per call = (turn with N calls − turn without calls) / N; a turn with calls has a second model step, amortized over N.');
