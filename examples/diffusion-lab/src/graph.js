// The diffusion lab's application graph: published controls, actions, cells and a selector.
// Pure JS with no DOM: the web app (src/main.jsx) and the headless Node run
// (tests/js/node/ops.test.mjs) load the same graph into a weft app and drive it with the same
// published tools.

/** Width of the initial Gaussian (the worker's default). */
export const WIDTH = 0.05;

export const controls = [
  { name: 'diffusivity', type: 'number', min: 0.1, max: 2, step: 0.01, unit: 'm²/s', value: 1, description: 'diffusivity κ: how fast heat spreads' },
  { name: 'points', type: 'number', min: 100, max: 4000, step: 100, value: 400, description: 'grid points along the rod' },
  { name: 'simTime', type: 'number', min: 0.001, max: 0.1, step: 0.001, unit: 's', value: 0.01, description: 'simulated time' },
  { name: 'initial', type: 'enum', options: ['gaussian', 'step', 'random'], value: 'gaussian', description: 'initial temperature profile' },
  { name: 'seed', type: 'number', min: 1, max: 1000000, step: 1, value: 1, description: 'seed of the random initial profile' },
  { name: 'running', type: 'boolean', value: true, description: 'whether the evolution runs (the stop/start actions set it)' },
];

export const actions = [
  { name: 'stop', description: 'Stop the evolution: the running calculation is aborted and the cell holds its last value.', effects: [{ set: 'running', to: { value: false } }] },
  { name: 'start', description: 'Let the evolution run again.', effects: [{ set: 'running', to: { value: true } }] },
  { name: 'reseed', description: 'Next seed for the random initial profile.', effects: [{ set: 'seed', to: { increment: 1 } }] },
  { name: 'rerun', description: 'Run the evolution again with unchanged inputs.', effects: [{ rerun: 'evolution' }] },
];

/** The latest profile: the evolution's newest frame, with its peak. */
export function profile({ evolution }) {
  const u = evolution.u;
  let peak = 0;
  for (const v of u) if (v > peak) peak = v;
  return { t: evolution.t, step: evolution.step ?? evolution.steps, steps: evolution.steps, peak, u };
}

/**
 * The exact solution for the initial Gaussian on [0, 1] with u = 0 at both ends (method of
 * images): a Gaussian of variance w² + 2κt, mirrored with alternating signs at the walls.
 */
export function analytic(x, t, kappa, width = WIDTH) {
  const s2 = width * width + 2 * kappa * t;
  const amp = width / Math.sqrt(s2);
  let u = 0;
  for (let n = -3; n <= 3; n++) {
    u += amp * Math.exp(-((x - (0.5 + 2 * n)) ** 2) / (2 * s2));
    u -= amp * Math.exp(-((x - (-0.5 + 2 * n)) ** 2) / (2 * s2));
  }
  return u;
}

/** Numerical error of the profile against the analytic Gaussian: L2 (RMS) and max norms. */
export function errors({ profile, diffusivity }) {
  const n = profile.u.length;
  let sum = 0;
  let max = 0;
  for (let i = 0; i < n; i++) {
    const e = Math.abs(profile.u[i] - analytic(i / (n - 1), profile.t, diffusivity));
    sum += e * e;
    if (e > max) max = e;
  }
  return { t: profile.t, l2: Math.sqrt(sum / n), max };
}

/** What an agent usually wants back: the inputs and the headline numbers, from one snapshot. */
export function summary(snapshot) {
  const c = snapshot.controls;
  const p = snapshot.cells.profile?.value;
  const e = snapshot.cells.errors;
  return {
    diffusivity: c.diffusivity,
    points: c.points,
    simTime: c.simTime,
    initial: c.initial,
    t: p?.t ?? null,
    peak: p?.peak ?? null,
    l2: e?.state === 'ready' ? e.value.l2 : null,
    maxError: e?.state === 'ready' ? e.value.max : null,
  };
}

/** The graph spec for `app.load`, with the evolution running on `worker` (an Endpoint). */
export function labSpec(worker, { partialEveryMs = 100 } = {}) {
  return {
    controls,
    actions,
    cells: [
      {
        name: 'evolution',
        description: 'the heat equation marched by the Worker; streams partial profiles',
        deps: ['diffusivity', 'points', 'simTime', 'initial', 'seed'],
        constants: { partialEveryMs, width: WIDTH },
        gate: { control: 'running', open: [true] },
        worker,
      },
      { name: 'profile', description: 'the newest profile and its peak', deps: ['evolution'], compute: profile },
      {
        name: 'errors',
        description: 'error norms against the analytic Gaussian (held unless the initial profile is gaussian)',
        deps: ['profile', 'diffusivity'],
        gate: { control: 'initial', open: ['gaussian'] },
        compute: errors,
      },
    ],
    selectors: { summary: { description: 'inputs, time reached, peak and error norms', select: summary } },
  };
}
