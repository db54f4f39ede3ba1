// The same small task exposed with comlink (its Node adapter over worker_threads).
import { parentPort } from 'node:worker_threads';
import * as Comlink from 'comlink';
import nodeEndpoint from 'comlink/dist/esm/node-adapter.mjs';

Comlink.expose(
  {
    task({ n }) {
      let s = 0;
      for (let i = 0; i < n; i++) s += i;
      return s;
    },
  },
  nodeEndpoint(parentPort),
);
