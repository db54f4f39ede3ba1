// A slow, iterative calculation as a weft worker: the 1-D heat equation u_t = κ u_xx on [0, 1]
// with u = 0 at both ends, solved with the explicit (FTCS) scheme
//   u_i ← u_i + r (u_{i+1} − 2 u_i + u_{i−1}),  r = κ Δt / Δx² ≤ ½ (stability).
//
// Written for a DOM Worker (`self.onmessage`, `self.postMessage`); the same file runs in a
// browser Worker, in Node worker_threads and as a `weft run` child process (the weft shim
// provides `self` outside browsers). It speaks AIUI's workerStream protocol plus the weft
// extensions it announces in its hello: cancel acknowledgement, structured input, error codes.
//
// Payload: { diffusivity = 1, points = 200, simTime = 0.01, initial = "gaussian" | "step" |
//            "random", seed = 1, width = 0.05, chunkMs = 8, partialEveryMs = 100 }
// Progress: the fraction done (a number, as AIUI expects).
// Partial:  { t, step, steps, u }  (at most every partialEveryMs)
// Done:     { t, steps, dt, dx, r, points, diffusivity, initial, seed, u }
// Input:    { snapshot: true } → an immediate partial; { stopAt: fraction } → finish early.

const cancelled = new Set();
const runs = new Map();

self.postMessage({
  type: 'hello',
  protocol: 'weft-worker/1',
  capabilities: { input: true, cancelAck: true, errorCode: true },
});

self.onmessage = (event) => {
  const msg = event.data;
  if (!msg || typeof msg !== 'object') return;
  if (msg.type === 'run') {
    run(msg.id, msg.payload ?? {}).catch((err) =>
      self.postMessage({ id: msg.id, type: 'error', message: String(err?.message ?? err), code: 'INTERNAL' }),
    );
  } else if (msg.type === 'cancel') {
    // Acknowledged at the next chunk boundary, once the loop has actually stopped.
    if (runs.has(msg.id)) cancelled.add(msg.id);
  } else if (msg.type === 'input') {
    const r = runs.get(msg.id);
    if (!r) return;
    const v = msg.value ?? {};
    if (v.snapshot === true) {
      r.snapshot = true;
      self.postMessage({ id: msg.id, type: 'input_applied', inputId: msg.inputId });
    } else if (typeof v.stopAt === 'number' && v.stopAt > 0 && v.stopAt <= 1) {
      r.stopAt = v.stopAt;
      self.postMessage({ id: msg.id, type: 'input_applied', inputId: msg.inputId });
    } else {
      self.postMessage({
        id: msg.id,
        type: 'input_rejected',
        inputId: msg.inputId,
        message: 'input must be {snapshot: true} or {stopAt: fraction in (0, 1]}',
      });
    }
  }
};

/** Validates the payload; returns [params] or throws an Error with `.code`. */
function params(p) {
  const num = (name, dflt, lo, hi) => {
    const v = p[name] ?? dflt;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi) {
      const e = new Error(`${name} must be a finite number in [${lo}, ${hi}], got ${JSON.stringify(v)}`);
      e.code = 'INVALID_PAYLOAD';
      throw e;
    }
    return v;
  };
  const initial = p.initial ?? 'gaussian';
  if (!['gaussian', 'step', 'random'].includes(initial)) {
    const e = new Error(`initial must be "gaussian", "step" or "random", got ${JSON.stringify(initial)}`);
    e.code = 'INVALID_PAYLOAD';
    throw e;
  }
  return {
    diffusivity: num('diffusivity', 1, 1e-9, 1e6),
    points: Math.round(num('points', 200, 3, 100000)),
    simTime: num('simTime', 0.01, 0, 1e6),
    seed: Math.round(num('seed', 1, 0, 2 ** 31)),
    width: num('width', 0.05, 1e-6, 1),
    chunkMs: num('chunkMs', 8, 0.1, 10000),
    partialEveryMs: num('partialEveryMs', 100, 0, 1e7),
    initial,
  };
}

/** A deterministic generator (mulberry32) so `random` initial conditions are reproducible. */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function initialProfile(q) {
  const u = new Float64Array(q.points);
  const dx = 1 / (q.points - 1);
  const rand = rng(q.seed);
  for (let i = 0; i < q.points; i++) {
    const x = i * dx;
    if (q.initial === 'gaussian') u[i] = Math.exp(-((x - 0.5) ** 2) / (2 * q.width * q.width));
    else if (q.initial === 'step') u[i] = Math.abs(x - 0.5) < q.width ? 1 : 0;
    else u[i] = rand();
  }
  u[0] = 0;
  u[q.points - 1] = 0;
  return u;
}

const now = () => (typeof performance !== 'undefined' ? performance.now() : Date.now());
// Yield a real macrotask between chunks, so queued `cancel` / `input` messages are delivered.
// setImmediate (Node) and a MessageChannel message (browsers) avoid the 1 ms minimum and the
// 4 ms clamping that nested setTimeout(0) calls get.
const yieldChannel = typeof setImmediate === 'function' ? null : new MessageChannel();
const yieldQueue = [];
if (yieldChannel) yieldChannel.port1.onmessage = () => yieldQueue.shift()?.();
const macrotask = () =>
  new Promise((resolve) => {
    if (!yieldChannel) return setImmediate(resolve);
    yieldQueue.push(resolve);
    yieldChannel.port2.postMessage(null);
  });

async function run(id, payload) {
  let q;
  try {
    q = params(payload);
  } catch (err) {
    self.postMessage({ id, type: 'error', message: err.message, code: err.code });
    return;
  }
  const state = { snapshot: false, stopAt: 1 };
  runs.set(id, state);
  const dx = 1 / (q.points - 1);
  const dt = (0.45 * dx * dx) / q.diffusivity; // r = 0.45, inside the stability limit of 1/2
  const r = (q.diffusivity * dt) / (dx * dx);
  const steps = Math.max(1, Math.ceil(q.simTime / dt));
  let u = initialProfile(q);
  let next = new Float64Array(q.points);
  let step = 0;
  let lastPartial = now();
  try {
    while (step < steps) {
      const chunkEnd = now() + q.chunkMs;
      // Work until the chunk's time budget is spent (checking the clock every 64 steps).
      while (step < steps && (step & 63 || now() < chunkEnd)) {
        for (let i = 1; i < q.points - 1; i++) next[i] = u[i] + r * (u[i + 1] - 2 * u[i] + u[i - 1]);
        [u, next] = [next, u];
        step++;
      }
      if (step >= steps * state.stopAt) break;
      self.postMessage({ id, type: 'progress', value: step / steps });
      if (state.snapshot || now() - lastPartial >= q.partialEveryMs) {
        state.snapshot = false;
        lastPartial = now();
        self.postMessage({ id, type: 'partial', value: { t: step * dt, step, steps, u: Array.from(u) } });
      }
      await macrotask();
      if (cancelled.has(id)) {
        self.postMessage({ id, type: 'cancelled' });
        return;
      }
    }
    self.postMessage({ id, type: 'progress', value: 1 });
    self.postMessage({
      id,
      type: 'done',
      value: {
        t: step * dt,
        steps: step,
        dt,
        dx,
        r,
        points: q.points,
        diffusivity: q.diffusivity,
        initial: q.initial,
        seed: q.seed,
        u: Array.from(u),
      },
    });
  } finally {
    runs.delete(id);
    cancelled.delete(id);
  }
}
