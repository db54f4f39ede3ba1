// Start-up of the package in Node: `import 'weft'` parses only the glue it needs at once (the
// apps module's, which holds the job registry, and the frames engine's, whose first call may be
// synchronous; not the browsers' jobs-only module); the actor
// graph's and the model codecs' glue are imported on their first (async) use, and work then.
// The Worker shim does not load its child-process helpers (readline...) in a Worker.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { register } from 'node:module';
import { MessageChannel } from 'node:worker_threads';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// A resolve hook (it runs on the loader thread) reports every module the package loads.
const hooks = `export async function initialize({ port }) { globalThis.port = port; }
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  globalThis.port.postMessage(r.url);
  return r;
}`;
const { port1, port2 } = new MessageChannel();
const loaded = new Set();
port1.on('message', (url) => loaded.add(url.replace(/^.*\//, '')));
port1.unref();
register(`data:text/javascript,${encodeURIComponent(hooks)}`, { data: { port: port2 }, transferList: [port2] });
// The hook thread posts asynchronously: wait until a marker import has been reported.
const settle = async (marker) => {
  await import(`data:text/javascript,export default ${JSON.stringify(marker)}`);
  for (let i = 0; i < 200 && ![...loaded].some((u) => u.includes(encodeURIComponent(marker).slice(0, 8))); i++) {
    await new Promise((r) => setTimeout(r, 5));
  }
};

test('import weft loads the job and frames glue only; actors and models glue on first use', async () => {
  const weft = await import('weft');
  await settle('after-import');
  assert.ok(loaded.has('weft_apps.js'), 'the apps module glue (the job registry, ops, agents)');
  assert.equal(loaded.has('weft_jobs.js'), false, "no glue of the browsers' jobs-only module");
  assert.ok(loaded.has('weft_frames.js'), 'the frames glue (a first call may be synchronous)');
  assert.equal(loaded.has('weft_actors.js'), false, 'no actor-graph glue at import');
  assert.equal(loaded.has('weft_models.js'), false, 'no model glue at import');
  assert.equal(loaded.has('models-impl.js'), false);

  const store = await weft.openActorStore({ backend: 'memory', title: 'Start-up' });
  const t = await store.spawn({ parent: 'coordinator', type: 'task', title: 'lazily loaded' });
  assert.equal(t.id, 'lazily-loaded');
  await store.close();
  await weft.loadModels();
  await settle('after-use');
  assert.ok(loaded.has('weft_actors.js'));
  assert.ok(loaded.has('weft_models.js'));
});

test('a Worker started through the shim does not load its child-process helpers', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'weft-startup-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const script = join(dir, 'modules.js');
  writeFileSync(
    script,
    `self.postMessage({ type: 'hello', protocol: 'weft-worker/1' });
self.onmessage = (e) => {
  if (e.data.type === 'run') self.postMessage({ id: e.data.id, type: 'done', value: process.moduleLoadList.filter((m) => /^NativeModule (readline|util)$/.test(m)) });
};`,
  );
  const { createRuntime } = await import('weft');
  const rt = createRuntime();
  const o = await rt.openWorker(script).submit({}).wait();
  rt.close();
  assert.equal(o.outcome, 'succeeded');
  assert.equal(o.value.includes('NativeModule readline'), false, `loaded: ${o.value}`);
});
