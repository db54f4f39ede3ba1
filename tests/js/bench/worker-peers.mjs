// The Worker hot path side by side (issue 16), in one run on one machine, interleaved: raw
// worker_threads postMessage (the floor), comlink, piscina and workerpool (each in its default
// and its best configuration) and weft (the packed package, as a user imports it, with its
// full journal). Prints medians, ranges (min–max over rounds) and ratios.
//
//     cd tests/js && node --expose-gc bench/worker-peers.mjs [--rounds 5] [--n 10000]
//         [--serial 2000] [--only burst,serial,startup,cancel,retained,chromium] [--retained 1000000]
//         [--before DIR] [--before-retained 300000] [--with 'piscina c64,weft (before)']
//         [--threads 1,2] [--weft DIR]
//
// `--before DIR` adds a second weft, the package in DIR (a wasm/pkg built from another
// commit), to every section, interleaved with the rest: before/after in one run.
// `--weft DIR` takes "weft" from the package in DIR instead of `tests/js/node_modules/weft`
// (a package built elsewhere, without repointing the shared symlink).
//
// Sections:
//   burst     N small tasks submitted at once, 1 and 2 threads: ms per N, tasks/s
//   serial    one in flight (submit, await, next), 1 and 2 threads (round robin; "weft idle-first":
//             the endpoint with the fewest in flight, as the pools schedule)
//   startup   a fresh `node` process: `import` of the library → first result (and import alone)
//   cancel    cancel → evidence that the run stopped (2 ms chunks) and cancel → next task done
//             on the same endpoint/pool, p50/p99 (raw, weft and weft (before) sample by sample
//             in turn)
//   retained  submit → done through weft's public JS API (openEndpoint, submit, wait) while
//             finished jobs accumulate: µs/job in the block ending at 10k, 100k, 1M retained
//             jobs; then closing the owner (longest event-loop stall, total time)
//   chromium  the same modes in headless Chromium, with the same rounds, tasks and threads:
//             burst and one in flight against a bare DOM Worker and comlink
//             (bench/worker-browser.mjs), then navigation → first result (bench/startup-browser.mjs,
//             2 × rounds runs), each run here as a child process (`--before DIR` is passed on;
//             they serve wasm/pkg, so `--weft DIR` does not apply to them); both interleave
//             their contenders round by round, as the sections above do
//
// Not a test: figures move with machine load (the program prints `uptime` first).
import { execFileSync, spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { resolve as resolvePath } from 'node:path';
import * as Comlink from 'comlink';
import nodeEndpoint from 'comlink/dist/esm/node-adapter.mjs';
import Piscina from 'piscina';
import workerpool from 'workerpool';
import { cancelRunning } from './cancel-core.mjs';

const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i < 0 ? dflt : args[i + 1];
};
const ROUNDS = Number(flag('rounds', 5));
const N = Number(flag('n', 10_000));
const SERIAL = Number(flag('serial', 2000));
const RETAINED_AFTER = Number(flag('retained', 1_000_000));
// The retained section of `--before` (its cost per job may grow with the count).
const RETAINED_BEFORE = Number(flag('before-retained', 300_000));
const ONLY = new Set(String(flag('only', 'burst,serial,startup,cancel,retained,chromium')).split(','));
// `--threads 1` runs the burst and one-in-flight sections with 1 thread only.
const THREADS = String(flag('threads', '1,2')).split(',').map(Number);
const here = (p) => new URL(p, import.meta.url);
const path = (p) => fileURLToPath(here(p));
const payload = (i) => ({ n: 100 + (i % 7) });
const WEFT = flag('weft', null);
const weftUrl = WEFT ? pathToFileURL(resolvePath(WEFT, 'node.js')).href : null;
const { createRuntime, wasmMemoryBytes } = await import(weftUrl ?? 'weft');
const BEFORE = flag('before', null);
const before = BEFORE ? await import(pathToFileURL(resolvePath(BEFORE, 'node.js')).href) : null;
const CHUNK_MS = 2;

// ----- statistics ---------------------------------------------------------------------------

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const f1 = (x) => x.toFixed(1);
const range = (xs) => `${f1(Math.min(...xs))}–${f1(Math.max(...xs))}`;

// ----- the contenders: each `open(threads)` returns {run(i) → Promise, close()} ---------------

function rawPool(threads, script = path('./workers/raw-task.mjs')) {
  const ws = [];
  const pending = new Map();
  let next = 1;
  for (let t = 0; t < threads; t++) {
    const w = new Worker(script);
    w.on('message', (m) => {
      const p = pending.get(m.id);
      if (!p) return;
      if (m.progress !== undefined) return p.progress?.();
      pending.delete(m.id);
      p.resolve(m);
    });
    ws.push(w);
  }
  return {
    run(i, msg = payload(i)) {
      const id = next++;
      return new Promise((resolve) => {
        pending.set(id, { resolve });
        ws[i % threads].postMessage({ id, ...msg });
      });
    },
    /** A long cooperative run; resolves {started, done} promises, cancel() posts the cancel. */
    long(i) {
      const id = next++;
      let started;
      const startedP = new Promise((r) => (started = r));
      const done = new Promise((resolve) => pending.set(id, { resolve, progress: () => started() }));
      ws[i % threads].postMessage({ id, run: CHUNK_MS });
      return { started: startedP, done, cancel: () => ws[i % threads].postMessage({ id, cancel: true }) };
    },
    close: () => Promise.all(ws.map((w) => w.terminate())),
  };
}

function comlinkPool(threads) {
  const ws = [];
  const remotes = [];
  for (let t = 0; t < threads; t++) {
    const w = new Worker(path('./workers/comlink-task.mjs'));
    ws.push(w);
    remotes.push(Comlink.wrap(nodeEndpoint(w)));
  }
  return {
    run: (i) => remotes[i % threads].task(payload(i)),
    close: () => Promise.all(ws.map((w) => w.terminate())),
  };
}

function piscinaPool(threads, extra = {}, filename = here('./workers/piscina-task.mjs').href) {
  const pool = new Piscina({ filename, minThreads: threads, maxThreads: threads, ...extra });
  return { run: (i, p = payload(i), o) => pool.run(p, o), close: () => pool.destroy() };
}

function workerpoolPool(threads, extra = {}, script = path('./workers/workerpool-task.cjs')) {
  const pool = workerpool.pool(script, { maxWorkers: threads, ...extra });
  return { run: (i, method = 'task', a = [payload(i)]) => pool.exec(method, a), pool, close: () => pool.terminate() };
}

// `idleFirst`: each task goes to the first endpoint with the fewest tasks in flight (counted
// here, by the caller: what piscina's and workerpool's schedulers do inside), not round robin —
// with one in flight always the same endpoint.
function weftPool(threads, script = here('./workers/weft-task.js'), create = createRuntime, idleFirst = false) {
  const rt = create();
  const eps = [];
  for (let t = 0; t < threads; t++) eps.push(rt.openWorker(script));
  const busy = new Array(threads).fill(0);
  const pick = (i) => {
    if (!idleFirst) return i % threads;
    let k = 0;
    for (let t = 1; t < threads; t++) if (busy[t] < busy[k]) k = t;
    return k;
  };
  return {
    rt,
    eps,
    run: (i, p = payload(i)) => {
      const k = pick(i);
      busy[k]++;
      return eps[k]
        .submit(p)
        .wait()
        .then((o) => {
          busy[k]--;
          if (o.outcome !== 'succeeded') throw new Error(`weft: ${JSON.stringify(o)}`);
          return o.value;
        });
    },
    close: () => rt.close(),
  };
}

const contenders = {
  raw: (t) => rawPool(t),
  comlink: (t) => comlinkPool(t),
  piscina: (t) => piscinaPool(t),
  'piscina c64': (t) => piscinaPool(t, { concurrentTasksPerWorker: 64 }),
  'piscina noatomics': (t) => piscinaPool(t, { atomics: 'disabled', useAtomics: false }),
  workerpool: (t) => workerpoolPool(t),
  'workerpool thread+min': (t) => workerpoolPool(t, { workerType: 'thread', minWorkers: t }),
  weft: (t) => weftPool(t),
  'weft idle-first': (t) => weftPool(t, undefined, createRuntime, true),
};
if (before) contenders['weft (before)'] = (t) => weftPool(t, undefined, before.createRuntime);
// `--with raw,weft` runs only those contenders in the burst and one-in-flight sections.
if (flag('with', null)) {
  const keep = new Set(['raw', 'weft', ...flag('with').split(',')]);
  for (const k of Object.keys(contenders)) if (!keep.has(k)) delete contenders[k];
}
const PEERS = { comlink: ['comlink'], piscina: ['piscina', 'piscina c64', 'piscina noatomics'], workerpool: ['workerpool', 'workerpool thread+min'] };

async function timed(name, threads, mode) {
  const pool = contenders[name](threads);
  // Warm up: every thread has started and the code paths are compiled.
  await Promise.all(Array.from({ length: 200 * threads }, (_, i) => pool.run(i)));
  for (let i = 0; i < 200; i++) await pool.run(i);
  const t0 = performance.now();
  if (mode === 'burst') {
    const outs = await Promise.all(Array.from({ length: N }, (_, i) => pool.run(i)));
    if (outs.length !== N) throw new Error(`${name}: missing results`);
  } else {
    for (let i = 0; i < SERIAL; i++) await pool.run(i);
  }
  const ms = performance.now() - t0;
  await pool.close();
  return ms;
}

function report(title, mode, threads, results, count) {
  console.log(`\n${title} (${count} tasks, ${threads} thread${threads > 1 ? 's' : ''}, ${ROUNDS} rounds): median ms [range], tasks/s`);
  const med = Object.fromEntries(Object.entries(results).map(([k, v]) => [k, median(v)]));
  for (const [k, v] of Object.entries(results)) {
    console.log(`  ${k.padEnd(22)} ${f1(med[k]).padStart(8)} ms [${range(v)}]  ${Math.round((count / med[k]) * 1000).toLocaleString('en')}/s`);
  }
  const w = med.weft;
  const line = [`weft/raw rate ${(med.raw / w * 100).toFixed(0)}%`];
  for (const [peer, all] of Object.entries(PEERS)) {
    const names = all.filter((k) => med[k] !== undefined);
    if (names.length === 0) continue;
    const best = names.reduce((a, b) => (med[a] <= med[b] ? a : b));
    line.push(`vs ${peer} (${best === peer ? 'default' : best}) ${(med[best] / w).toFixed(2)}× its rate`);
  }
  if (med['weft (before)'] !== undefined) line.push(`vs weft (before) ${(med['weft (before)'] / w).toFixed(2)}× its rate`);
  console.log(`  ${mode} ${threads}t: ${line.join('; ')}`);
  // The same ratios for weft with idle-first dispatch (only differs from round robin at 2+ threads).
  const wi = med['weft idle-first'];
  if (wi !== undefined && threads > 1) {
    const li = [`weft idle-first/raw rate ${(med.raw / wi * 100).toFixed(0)}%`];
    for (const [peer, all] of Object.entries(PEERS)) {
      const names = all.filter((k) => med[k] !== undefined);
      if (names.length === 0) continue;
      const best = names.reduce((a, b) => (med[a] <= med[b] ? a : b));
      li.push(`vs ${peer} (${best === peer ? 'default' : best}) ${(med[best] / wi).toFixed(2)}× its rate`);
    }
    console.log(`  ${mode} ${threads}t: ${li.join('; ')}`);
  }
}

async function section(mode) {
  for (const threads of THREADS) {
    const results = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
    for (let r = 0; r < ROUNDS; r++) {
      // Rotate the order every round so that no contender always runs first.
      const names = Object.keys(contenders);
      for (let k = 0; k < names.length; k++) {
        const name = names[(k + r) % names.length];
        results[name].push(await timed(name, threads, mode));
      }
    }
    report(mode === 'burst' ? 'Burst' : 'One in flight', mode, threads, results, mode === 'burst' ? N : SERIAL);
  }
}

// ----- start-up: a fresh process, import → first result --------------------------------------

const STARTUP = {
  raw: `const { Worker } = await import('node:worker_threads');
    const t1 = performance.now();
    const w = new Worker(${JSON.stringify(path('./workers/raw-task.mjs'))});
    await new Promise((r) => { w.once('message', r); w.postMessage({ id: 1, n: 100 }); });
    out(t1); await w.terminate();`,
  comlink: `const Comlink = await import('comlink'); const { default: nodeEndpoint } = await import('comlink/dist/esm/node-adapter.mjs');
    const { Worker } = await import('node:worker_threads');
    const t1 = performance.now();
    const w = new Worker(${JSON.stringify(path('./workers/comlink-task.mjs'))});
    await Comlink.wrap(nodeEndpoint(w)).task({ n: 100 });
    out(t1); await w.terminate();`,
  piscina: `const { default: Piscina } = await import('piscina');
    const t1 = performance.now();
    const pool = new Piscina({ filename: ${JSON.stringify(here('./workers/piscina-task.mjs').href)}, minThreads: 1, maxThreads: 1 });
    await pool.run({ n: 100 });
    out(t1); await pool.destroy();`,
  workerpool: `const { default: workerpool } = await import('workerpool');
    const t1 = performance.now();
    const pool = workerpool.pool(${JSON.stringify(path('./workers/workerpool-task.cjs'))}, { maxWorkers: 1 });
    await pool.exec('task', [{ n: 100 }]);
    out(t1); await pool.terminate();`,
  weft: `const { createRuntime } = await import(process.env.WEFT_PKG ?? 'weft');
    const t1 = performance.now();
    const rt = createRuntime();
    const o = await rt.openWorker(${JSON.stringify(path('./workers/weft-task.js'))}).submit({ n: 100 }).wait();
    if (o.outcome !== 'succeeded') throw new Error('weft failed');
    out(t1); rt.close();`,
};

function startupOnce(name) {
  const src = `const t0 = performance.now();
    const out = (t1) => console.log(JSON.stringify({ imp: t1 - t0, first: performance.now() - t0 }));
    ${STARTUP[name === 'weft (before)' ? 'weft' : name]}`;
  // A file beside this one, so that `weft` resolves as it does for a user of tests/js
  // (Workers inherit `--input-type`, so `node -e` will not do).
  const file = path(`./.startup-${process.pid}.mjs`);
  writeFileSync(file, src);
  let r;
  try {
    const env = { ...process.env };
    if (name === 'weft (before)') env.WEFT_PKG = pathToFileURL(resolvePath(BEFORE, 'node.js')).href;
    else if (name === 'weft' && weftUrl) env.WEFT_PKG = weftUrl;
    r = spawnSync(process.execPath, [file], { cwd: path('..'), encoding: 'utf8', env });
  } finally {
    rmSync(file, { force: true });
  }
  if (r.status !== 0) throw new Error(`${name} start-up failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

function startup() {
  const all = [...Object.keys(STARTUP), ...(before ? ['weft (before)'] : [])];
  const res = Object.fromEntries(all.map((k) => [k, { imp: [], first: [] }]));
  for (let r = 0; r < ROUNDS * 2; r++) {
    const names = all;
    for (let k = 0; k < names.length; k++) {
      const name = names[(k + r) % names.length];
      const { imp, first } = startupOnce(name);
      res[name].imp.push(imp);
      res[name].first.push(first);
    }
  }
  console.log(`\nStart-up in a fresh node process (${ROUNDS * 2} runs each): import → first result, import alone; median [range] ms`);
  for (const [k, v] of Object.entries(res)) {
    console.log(`  ${k.padEnd(14)} first result ${f1(median(v.first)).padStart(6)} [${range(v.first)}]   import ${f1(median(v.imp)).padStart(6)} [${range(v.imp)}]`);
  }
  const w = median(res.weft.first);
  console.log(`  weft ÷ piscina ${(w / median(res.piscina.first)).toFixed(2)}×, ÷ comlink ${(w / median(res.comlink.first)).toFixed(2)}×, ÷ raw ${(w / median(res.raw.first)).toFixed(2)}×`);
}

// ----- cancel → acknowledgement, cancel → next done --------------------------------------------

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const SAMPLES = Number(flag('cancel-samples', 200));

// raw and weft take their samples interleaved (one of each in turn, the order rotating), so
// that the machine's load falls on both alike; piscina and workerpool (which terminate the
// worker) run after them. Each `open` returns {sample() → {ack, next}, close()}.
async function cancelWeft(create = createRuntime) {
  const rt = create();
  const ep = rt.openWorker(new URL('../../../examples/diffusion/worker.js', import.meta.url));
  await ep.submit({ points: 20, simTime: 0.0001 }).wait();
  return {
    async sample() {
      const { t0, ack, out } = await cancelRunning(ep, CHUNK_MS);
      if (out.evidence !== 'acknowledged') throw new Error(`weft cancel: ${JSON.stringify(out)}`);
      await ep.submit({ points: 20, simTime: 0.0001 }).wait();
      return { ack, next: performance.now() - t0 };
    },
    close: () => rt.close(),
  };
}

async function cancelRaw() {
  const pool = rawPool(1, path('./workers/raw-diffusion.mjs'));
  await pool.run(0, { n: 100 });
  return {
    async sample() {
      const run = pool.long(0);
      await run.started;
      await sleep(Math.random() * 2 * CHUNK_MS);
      const t0 = performance.now();
      run.cancel();
      await run.done;
      const t1 = performance.now();
      await pool.run(0, { n: 100 });
      return { ack: t1 - t0, next: performance.now() - t0 };
    },
    close: () => pool.close(),
  };
}

async function interleaved(opens) {
  const names = Object.keys(opens);
  const runs = {};
  for (const k of names) runs[k] = await opens[k]();
  const res = Object.fromEntries(names.map((k) => [k, { ack: [], next: [] }]));
  for (let i = 0; i < SAMPLES; i++) {
    for (let j = 0; j < names.length; j++) {
      const k = names[(i + j) % names.length];
      const { ack, next } = await runs[k].sample();
      res[k].ack.push(ack);
      res[k].next.push(next);
    }
  }
  for (const k of names) await runs[k].close();
  return res;
}

async function cancelPiscina() {
  const pool = piscinaPool(1, {}, here('./workers/piscina-diffusion.mjs').href);
  const ack = [];
  const next = [];
  await pool.run(0, { n: 100 });
  for (let i = 0; i < SAMPLES; i++) {
    const ac = new AbortController();
    const p = pool.run(0, { ms: 10_000 }, { signal: ac.signal }).catch((e) => e);
    await sleep(20 + Math.random() * 2 * CHUNK_MS);
    const t0 = performance.now();
    ac.abort();
    if (!((await p) instanceof Error)) throw new Error('piscina: not aborted');
    const t1 = performance.now();
    await pool.run(0, { n: 100 });
    ack.push(t1 - t0);
    next.push(performance.now() - t0);
  }
  await pool.close();
  return { ack, next };
}

async function cancelWorkerpool() {
  // workerpool asks a cancelled worker to clean up and terminates it only after
  // workerTerminateTimeout (default 1 s) when it does not answer, as a busy worker cannot:
  // tuned to 10 ms here.
  const wp = workerpoolPool(1, { workerType: 'thread', workerTerminateTimeout: 10 }, path('./workers/workerpool-long.cjs'));
  const ack = [];
  const next = [];
  await wp.run(0);
  for (let i = 0; i < SAMPLES; i++) {
    const p = wp.pool.exec('long', [10_000]);
    const settled = p.catch((e) => e);
    await sleep(20 + Math.random() * 2 * CHUNK_MS);
    const t0 = performance.now();
    p.cancel();
    if (!((await settled) instanceof Error)) throw new Error('workerpool: not cancelled');
    const t1 = performance.now();
    // workerpool may hand the next task to the worker it is terminating: retry until done.
    for (;;) {
      try {
        await wp.run(0);
        break;
      } catch (err) {
        if (!/terminated/i.test(String(err?.message))) throw err;
      }
    }
    ack.push(t1 - t0);
    next.push(performance.now() - t0);
  }
  await wp.close();
  return { ack, next };
}

async function cancel() {
  console.log(`\nCancel (${SAMPLES} samples each, ${CHUNK_MS} ms chunks; raw and weft interleaved sample by sample; piscina and workerpool terminate the worker, workerpool with workerTerminateTimeout 10 ms): p50 / p99 ms`);
  const opens = { raw: cancelRaw, weft: () => cancelWeft() };
  if (before) opens['weft (before)'] = () => cancelWeft(before.createRuntime);
  const res = await interleaved(opens);
  res.piscina = await cancelPiscina();
  res.workerpool = await cancelWorkerpool();
  for (const name of ['raw', 'weft', 'piscina', 'workerpool', ...(before ? ['weft (before)'] : [])]) {
    const { ack, next } = res[name];
    console.log(
      `  ${name.padEnd(14)} cancel → stopped ${pct(ack, 50).toFixed(2)} / ${pct(ack, 99).toFixed(2)}   cancel → next done ${pct(next, 50).toFixed(2)} / ${pct(next, 99).toFixed(2)}`,
    );
  }
  console.log(`  target: weft p99 cancel → stopped <= ${CHUNK_MS + 1} ms (one chunk + 1 ms)`);
}

// ----- retained jobs through the public JS API -------------------------------------------------

async function retained(label = 'weft', create = createRuntime, memory = wasmMemoryBytes, RETAINED = RETAINED_AFTER) {
  const rt = create();
  // An in-process transport that answers every run with one progress and done, asynchronously
  // (a transport never re-enters the core from its own outputs), in batches like a Worker's.
  const ep = rt.openEndpoint(
    (h) => {
      let batch = [];
      const flush = () => {
        const b = batch;
        batch = [];
        for (const m of b) {
          if (m.type !== 'run') continue;
          h.message({ id: m.id, type: 'progress', value: 0.5 });
          h.message({ id: m.id, type: 'done', value: m.payload.n });
        }
      };
      return {
        post(m) {
          if (batch.length === 0) queueMicrotask(flush);
          batch.push(m);
        },
        terminate() {},
      };
    },
    { hello: 'skip', label: 'retained' },
  );
  const BLOCK = 1000;
  const marks = new Set([10_000, 100_000, 1_000_000, RETAINED]);
  const blocks = [];
  const mem0 = memory();
  let t0 = performance.now();
  let gcStart = 0;
  let blockStart = 0;
  for (let done = 0; done < RETAINED; done += BLOCK) {
    const waits = [];
    for (let i = 0; i < BLOCK; i++) waits.push(ep.submit({ n: done + i }).wait());
    const outs = await Promise.all(waits);
    if (outs[BLOCK - 1].outcome !== 'succeeded') throw new Error('retained: a job failed');
    const retainedNow = done + BLOCK;
    if (retainedNow % 10_000 === 0) {
      const t1 = performance.now();
      blocks.push({ at: retainedNow, us: ((t1 - t0) * 1000) / (retainedNow - blockStart) });
      t0 = t1;
      blockStart = retainedNow;
    }
    if (marks.has(retainedNow)) {
      const b = blocks.at(-1);
      const heap = process.memoryUsage().heapUsed;
      console.error(
        `  retained ${retainedNow}: ${f1(b.us)} µs/job over the last 10k; JS heap ${(heap / 2 ** 20).toFixed(0)} MiB, wasm memory ${((memory() - mem0) / 2 ** 20).toFixed(0)} MiB more`,
      );
    }
  }
  void gcStart;
  // Close the owner while a 1 ms interval measures how long the event loop is blocked.
  let last = performance.now();
  let stall = 0;
  const tick = setInterval(() => {
    const now = performance.now();
    stall = Math.max(stall, now - last);
    last = now;
  }, 1);
  const c0 = performance.now();
  let report;
  if (typeof rt.closeOwnerGradually === 'function') report = await rt.closeOwnerGradually('app');
  else {
    await sleep(5);
    report = rt.closeOwner('app');
  }
  const closeMs = performance.now() - c0;
  await sleep(5);
  clearInterval(tick);
  stall = Math.max(stall, performance.now() - last);
  const at = (k) => blocks.find((b) => b.at === k)?.us;
  const later = blocks.filter((b) => b.at > 10_000).map((b) => b.us);
  console.log(`\nRetained jobs, ${label}, through the public JS API (openEndpoint + submit + wait; submit → progress → done, full journals, ${BLOCK} per batch)`);
  console.log(
    `  µs per job in the 10k block ending at: ${[10_000, 100_000, 1_000_000].filter((k) => k <= RETAINED).map((k) => `${k.toLocaleString('en')} → ${f1(at(k))}`).join(', ')}` +
      `  (${Math.round(1e6 / median(blocks.map((b) => b.us))).toLocaleString('en')} jobs/s median block` +
      (later.length ? `; blocks after 10k: ${range(later)} µs/job` : '') +
      `; ${Math.round((memory() - mem0) / RETAINED)} bytes of wasm memory per retained job)`,
  );
  console.log(
    `  closing the owner of ${RETAINED.toLocaleString('en')} jobs: ${f1(closeMs)} ms in all, longest event-loop stall ${f1(stall)} ms` +
      ` (${rt.closeOwnerGradually ? 'closeOwnerGradually' : 'closeOwner'}; report lists ${report.jobs.length.toLocaleString('en')} jobs)`,
  );
  rt.dispose();
}

// ----- Chromium -------------------------------------------------------------------------------

/** The Chromium programs, one after the other, their output inline; a failure stops the run. */
function chromium() {
  const runs = [
    ['worker-browser.mjs', '--rounds', String(ROUNDS), '--n', String(N), '--serial', String(SERIAL), '--threads', THREADS.join(',')],
    ['startup-browser.mjs', '--runs', String(ROUNDS * 2)],
  ];
  if (WEFT) console.log(`\nChromium: the browser programs serve wasm/pkg; --weft ${WEFT} does not apply to them`);
  for (const [file, ...rest] of runs) {
    const a = [path(`./${file}`), ...rest, ...(BEFORE ? ['--before', BEFORE] : [])];
    console.log(`\nChromium: node bench/${file} ${a.slice(1).join(' ')}`);
    const r = spawnSync(process.execPath, a, { cwd: path('..'), stdio: 'inherit' });
    if (r.status !== 0) throw new Error(`bench/${file} failed (exit ${r.status ?? r.signal})`);
  }
}

// ----- main -----------------------------------------------------------------------------------

console.log(`worker-peers: Node ${process.version}, ${execFileSync('nproc').toString().trim()} cores; uptime: ${execFileSync('uptime').toString().trim()}`);
if (ONLY.has('burst')) await section('burst');
if (ONLY.has('serial')) await section('serial');
if (ONLY.has('startup')) startup();
if (ONLY.has('cancel')) await cancel();
if (ONLY.has('retained')) {
  await retained();
  if (before) await retained('weft (before)', before.createRuntime, before.wasmMemoryBytes, Math.min(RETAINED_AFTER, RETAINED_BEFORE));
}
if (ONLY.has('chromium')) chromium();
console.log(`\nuptime after: ${execFileSync('uptime').toString().trim()}`);
