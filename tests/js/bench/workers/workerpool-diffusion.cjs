// The diffusion loop for workerpool (browser: importScripts; Node: require; one file for both). workerpool cancels
// by terminating the worker, so the loop needs no yielding.
(function () {
  const wp = typeof workerpool !== 'undefined' ? workerpool : require('workerpool');
  function diffuse(points, simTime) {
    const dx = 1 / (points - 1);
    const dt = 0.45 * dx * dx;
    const steps = Math.ceil(simTime / dt);
    let u = new Float64Array(points);
    let next = new Float64Array(points);
    for (let i = 0; i < points; i++) u[i] = Math.exp(-((i * dx - 0.5) ** 2) / 0.005);
    for (let s = 0; s < steps; s++) {
      for (let i = 1; i < points - 1; i++) next[i] = u[i] + 0.45 * (u[i + 1] - 2 * u[i] + u[i - 1]);
      [u, next] = [next, u];
    }
    return u[points >> 1];
  }
  wp.worker({ diffuse });
})();
