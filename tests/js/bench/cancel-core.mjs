// Cancel-latency measurement shared by Node and Chromium: time from `cancel()` to the
// evidence that the run stopped, for a running diffusion job.
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export const CHUNK_MS = 8;

export function percentiles(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const at = (p) => s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
  return { n: s.length, p50: at(50), p99: at(99), max: s.at(-1) };
}

/** One weft sample on endpoint `ep` (a diffusion worker): submits a run of `chunkMs` chunks,
 * waits until it reports progress, then a random part of two chunks, and cancels it.
 * `t0`: when `cancel()` was called; `ack`: ms from it to the outcome; `out`: the outcome. */
export async function cancelRunning(ep, chunkMs = CHUNK_MS) {
  const job = ep.submit({ points: 400, simTime: 50, chunkMs });
  await new Promise((resolve) => {
    const stop = job.observe((d) => {
      if (d.type === 'progress') {
        stop();
        resolve();
      }
    });
  });
  await sleep(Math.random() * 2 * chunkMs);
  const t0 = performance.now();
  job.cancel();
  const out = await job.wait();
  return { t0, ack: performance.now() - t0, out };
}

/** weft: cancel() → outcome `cancelled` (acknowledged by the worker at its next chunk boundary). */
export async function measureWeft(createRuntime, diffusionUrl, samples) {
  const rt = createRuntime();
  const ep = rt.openWorker(diffusionUrl);
  const lat = [];
  for (let i = 0; i < samples; i++) {
    const { ack, out } = await cancelRunning(ep);
    lat.push(ack);
    if (out.evidence !== 'acknowledged') throw new Error(`unexpected outcome ${JSON.stringify(out)}`);
  }
  rt.close();
  return percentiles(lat);
}

/** workerpool: promise.cancel() → rejection (workerpool terminates the worker to cancel). */
export async function measureWorkerpool(workerpool, script, samples, options = {}) {
  const pool = workerpool.pool(script, { maxWorkers: 1, ...options });
  await pool.exec('diffuse', [50, 0.00001]);
  const lat = [];
  for (let i = 0; i < samples; i++) {
    const p = pool.exec('diffuse', [400, 50]);
    const settled = p.catch((e) => e);
    await sleep(20 + Math.random() * 2 * CHUNK_MS);
    const t0 = performance.now();
    p.cancel();
    const err = await settled;
    lat.push(performance.now() - t0);
    if (!(err instanceof Error)) throw new Error('workerpool task was not cancelled');
  }
  await pool.terminate(true);
  return percentiles(lat);
}
