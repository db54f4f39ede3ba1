// The package's WebAssembly modules in Chromium: importing `weft` downloads only the job
// module (weft_wasm_bg.wasm); the actor graph and the DGP engine are separate modules (glue and
// .wasm) fetched the first time they are used, and the root exports keep working once they are.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch } from '../lib/browser.mjs';
import { serveStatic } from '../lib/server.mjs';

let server;
let browser;

before(async () => {
  server = await serveStatic();
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** A blank page on the test server that records the module files it fetches (the .wasm files
 * and the wasm-bindgen glue of the lazily loaded modules). */
async function page() {
  const p = await browser.newPage();
  const fetched = [];
  p.on('request', (r) => {
    const m = /\/([^/]+\.wasm|weft_(?:frames|actors)\.js)$/.exec(new URL(r.url()).pathname);
    if (m) fetched.push(m[1]);
  });
  p.on('pageerror', (e) => console.error('page error:', e));
  await p.goto(`${server.url}/tests/js/browser/modules.html`);
  return { p, fetched };
}

test('importing weft fetches the job module only; the actor module is fetched by openActorStore', { timeout: 30_000 }, async () => {
  const { p, fetched } = await page();
  const runs = await p.evaluate(async () => {
    const weft = await import('/wasm/pkg/index.js');
    const rt = weft.createRuntime();
    const ep = rt.openLocal(async (payload) => payload * 2);
    const value = await ep.submit(21).wait();
    rt.close();
    return { value, names: Object.keys(weft) };
  });
  assert.equal(runs.value.outcome, 'succeeded');
  assert.equal(runs.value.value, 42);
  for (const name of ['createFramesEngine', 'evidenceFor', 'openActorStore', 'ActorStore', 'loadFrames', 'loadActors']) {
    assert.ok(runs.names.includes(name), `weft exports ${name}`);
  }
  assert.deepEqual(fetched, ['weft_wasm_bg.wasm']);

  const root = await p.evaluate(async () => {
    const weft = await import('/wasm/pkg/index.js');
    const s = await weft.openActorStore({ backend: 'memory', title: 'Lazy' });
    const t = await s.spawn({ parent: 'coordinator', type: 'task', title: 'lazy load' });
    return { id: t.id, nodes: s.graph().nodes.length };
  });
  assert.deepEqual(root, { id: 'lazy-load', nodes: 2 });
  assert.deepEqual(fetched, ['weft_wasm_bg.wasm', 'weft_actors.js', 'weft_actors_bg.wasm']);
  await p.close();
});

test('frames: NOT_LOADED before the module is loaded; weft/frames loads it for the root exports too', { timeout: 30_000 }, async () => {
  const { p, fetched } = await page();
  const out = await p.evaluate(async () => {
    const weft = await import('/wasm/pkg/index.js');
    let before = null;
    try {
      weft.createFramesEngine({ app: {} });
    } catch (e) {
      before = e.code;
    }
    const frames = await import('/wasm/pkg/entry-frames.js');
    const codeOf = (f) => {
      try {
        f();
        return null;
      } catch (e) {
        return e.code;
      }
    };
    return {
      before,
      // The module is loaded now: the engine parses (and refuses) the app itself.
      viaEntry: codeOf(() => frames.createFramesEngine({ app: { name: 'x' } })),
      viaRoot: codeOf(() => weft.createFramesEngine({ app: { name: 'x' } })),
      same: frames.createFramesEngine === weft.createFramesEngine,
    };
  });
  assert.equal(out.before, 'NOT_LOADED');
  assert.ok(out.viaEntry && out.viaEntry !== 'NOT_LOADED', `the engine answered (${out.viaEntry})`);
  assert.equal(out.viaRoot, out.viaEntry);
  assert.equal(out.same, true);
  assert.deepEqual(fetched, ['weft_wasm_bg.wasm', 'weft_frames.js', 'weft_frames_bg.wasm']);
  await p.close();
});
