// The small task of the start-up benchmark exposed with comlink in a DOM module Worker.
import * as Comlink from '/tests/js/node_modules/comlink/dist/esm/comlink.mjs';

Comlink.expose({
  task({ n }) {
    let s = 0;
    for (let i = 0; i < n; i++) s += i;
    return s;
  },
});
