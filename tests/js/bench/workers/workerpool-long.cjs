// A long task for workerpool's cancel (it terminates the worker), and the small task.
const workerpool = require('workerpool');
workerpool.worker({
  task({ n }) {
    let s = 0;
    for (let i = 0; i < n; i++) s += i;
    return s;
  },
  long(ms) {
    const end = performance.now() + ms;
    let x = 0;
    while (performance.now() < end) x += Math.sqrt(x + 1);
    return x;
  },
});
