// The same small task for workerpool.
const workerpool = require('workerpool');
workerpool.worker({
  task({ n }) {
    let s = 0;
    for (let i = 0; i < n; i++) s += i;
    return s;
  },
});
