// The main thread's own work per Worker round trip (issue 16), without a Worker: submit → wait
// → the worker's `done` (handed to the transport's message handler at once) → the wait
// settles, through weft's public JS API with full journals and notes. No thread wakes up, so
// on a VM whose cross-thread wake-up latency swings from run to run (worker-peers' one-in-flight
// figures do) this still compares two packages' per-round-trip JS + wasm cost.
//
//     cd tests/js && node bench/roundtrip-cpu.mjs [--rounds 9] [--n 50000] [--before DIR]
//
// `--before DIR`: a package built from another commit, interleaved round by round. Prints the
// median and minimum µs per round trip. Not a test: figures move with machine load.
import { execFileSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { resolve as resolvePath } from 'node:path';

const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i < 0 ? dflt : args[i + 1];
};
const ROUNDS = Number(flag('rounds', 9));
const N = Number(flag('n', 50_000));
const pkgs = [['weft', await import('weft')]];
const BEFORE = flag('before', null);
if (BEFORE) pkgs.push(['weft (before)', await import(pathToFileURL(resolvePath(BEFORE, 'node.js')).href)]);

async function once({ createRuntime }) {
  const rt = createRuntime();
  let h;
  let last;
  const ep = rt.openEndpoint(
    (handlers) => {
      h = handlers;
      return {
        post(m) {
          last = m;
        },
        terminate() {},
      };
    },
    { hello: 'skip', label: 'roundtrip-cpu' },
  );
  let settled = 0;
  const ok = (o) => {
    if (o.outcome !== 'succeeded') throw new Error(`roundtrip-cpu: ${JSON.stringify(o)}`);
    settled++;
  };
  const trip = (i) => {
    ep.submit({ n: i }).wait().then(ok);
    h.message({ id: last.id, type: 'done', value: i });
  };
  for (let i = 0; i < 2000; i++) trip(i);
  await new Promise((r) => setImmediate(r));
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    trip(i);
    // Let the settled waits' reactions run now and then (they are part of the cost).
    if ((i & 1023) === 0) await null;
  }
  await new Promise((r) => setImmediate(r));
  const us = ((performance.now() - t0) * 1000) / N;
  if (settled !== N + 2000) throw new Error(`roundtrip-cpu: ${settled} waits settled of ${N + 2000}`);
  rt.dispose();
  return us;
}

console.log(`roundtrip-cpu: Node ${process.version}; uptime: ${execFileSync('uptime').toString().trim()}`);
const res = pkgs.map(() => []);
for (let r = 0; r < ROUNDS; r++) {
  for (let k0 = 0; k0 < pkgs.length; k0++) {
    const k = (k0 + r) % pkgs.length;
    res[k].push(await once(pkgs[k][1]));
  }
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
for (let k = 0; k < pkgs.length; k++) {
  console.log(`  ${pkgs[k][0].padEnd(14)} ${median(res[k]).toFixed(2)} µs per round trip (median of ${ROUNDS}, min ${Math.min(...res[k]).toFixed(2)}; ${N} round trips each)`);
}
if (BEFORE) console.log(`  weft ÷ weft (before): ${(median(res[0]) / median(res[1])).toFixed(2)}×`);
console.log(`uptime after: ${execFileSync('uptime').toString().trim()}`);
