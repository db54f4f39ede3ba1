// The package's WebAssembly modules in Chromium: importing `weft` downloads only the jobs-only
// module (weft_jobs_bg.wasm); the apps module (the ops app and agent sessions), the actor graph
// and the DGP engine are separate modules (glue and .wasm) fetched the first time they are used,
// and the root exports keep working once they are. The network log is the evidence.
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

/** A blank page on the test server that records the module files it fetches (the .wasm files,
 * the wasm-bindgen glue of the lazily loaded modules, and the apps module's JS). */
async function page() {
  const p = await browser.newPage();
  const fetched = [];
  p.on('request', (r) => {
    const m = /^\/wasm\/pkg\/([^/]+\.wasm|weft_(?:frames|actors|apps)\.js|ops\.js|agent\.js)$/.exec(new URL(r.url()).pathname);
    if (m) fetched.push(m[1]);
  });
  p.on('pageerror', (e) => console.error('page error:', e));
  await p.goto(`${server.url}/tests/js/browser/modules.html`);
  return { p, fetched };
}

test('importing weft fetches the jobs-only module only; the actor module is fetched by openActorStore', { timeout: 30_000 }, async () => {
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
  assert.deepEqual(fetched, ['weft_jobs_bg.wasm']);

  const root = await p.evaluate(async () => {
    const weft = await import('/wasm/pkg/index.js');
    const s = await weft.openActorStore({ backend: 'memory', title: 'Lazy' });
    const t = await s.spawn({ parent: 'coordinator', type: 'task', title: 'lazy load' });
    return { id: t.id, nodes: s.graph().nodes.length };
  });
  assert.deepEqual(root, { id: 'lazy-load', nodes: 2 });
  assert.deepEqual(fetched, ['weft_jobs_bg.wasm', 'weft_actors.js', 'weft_actors_bg.wasm']);
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
  assert.deepEqual(fetched, ['weft_jobs_bg.wasm', 'weft_frames.js', 'weft_frames_bg.wasm']);
  await p.close();
});

test('apps: NOT_LOADED before loadApps; an earlier runtime keeps its jobs but hosts no agent (RUNTIME_WITHOUT_APPS); weft/apps is the same functions', { timeout: 30_000 }, async () => {
  const { p, fetched } = await page();
  const codeOf = `(f) => { try { f(); return null; } catch (e) { return e.code + ': ' + e.message; } }`;
  const before = await p.evaluate(async (codeOf) => {
    const code = eval(codeOf);
    const weft = await import('/wasm/pkg/index.js');
    window.early = weft.createRuntime();
    // A job runs on it before the load: its registry is the jobs-only module's.
    const ran = (await window.early.openLocal(async (n) => n * 2).submit(1).wait()).value;
    return {
      ran,
      createApp: code(() => weft.createApp()),
      createClaims: code(() => weft.createClaims({ acquire: () => 1, release: () => {} })),
      createAgent: code(() => weft.createAgent(window.early)),
      validateToolArguments: code(() => weft.validateToolArguments({ type: 'object' }, {})),
      App: typeof weft.App,
      // Plain JS: no module needed.
      scripted: typeof weft.scriptedModel([]),
    };
  }, codeOf);
  for (const name of ['createApp', 'createClaims', 'createAgent', 'validateToolArguments']) {
    assert.match(before[name], /^NOT_LOADED: .*await loadApps\(\)/, name);
  }
  assert.equal(before.ran, 2);
  assert.equal(before.App, 'undefined');
  assert.equal(before.scripted, 'function');
  assert.deepEqual(fetched, ['weft_jobs_bg.wasm'], 'the failed calls fetched nothing');

  const later = await p.evaluate(async (codeOf) => {
    const code = eval(codeOf);
    const weft = await import('/wasm/pkg/index.js');
    await weft.loadApps();
    const app = weft.createApp();
    app.load({ controls: [{ name: 'x', type: 'number', min: 0, max: 10, value: 3 }], cells: [{ name: 'y', deps: ['x'], compute: ({ x }) => x * 2 }] });
    await app.observe({ writes: { x: 4 }, waitFor: ['y'] });
    const y = app.cell('y').value;
    // The runtime used before the load still runs jobs (on the jobs-only module).
    const ep = window.early.openLocal(async (n) => n + 1);
    const early = await ep.submit(41).wait();
    const earlyAgent = code(() => weft.createAgent(window.early));
    // A runtime created now is on the apps module's registry: an agent runs on it.
    const rt = weft.createRuntime();
    const agent = weft.createAgent(rt, { model: weft.scriptedModel([{ text: 'hi' }]) });
    const turn = await agent.run('hello');
    const apps = await import('/wasm/pkg/entry-apps.js');
    const same = ['createApp', 'createClaims', 'createAgent', 'validateToolArguments', 'loadApps', 'createRuntime', 'App', 'Agent', 'scriptedModel', 'wasmMemoryBytes'].filter((n) => typeof weft[n] !== 'function' || apps[n] !== weft[n]);
    const valid = weft.validateToolArguments({ type: 'object', properties: { n: { type: 'number' } } }, { n: 'x' }).ok;
    const isApp = app instanceof weft.App;
    agent.dispose();
    rt.dispose();
    window.early.dispose();
    app.dispose();
    return { y, early: early.value, earlyAgent, text: turn.text, same, valid, isApp, keys: Object.keys(apps).sort().join() === Object.keys(weft).sort().join() };
  }, codeOf);
  assert.equal(later.y, 8);
  assert.equal(later.early, 42);
  assert.match(later.earlyAgent, /^RUNTIME_WITHOUT_APPS: createAgent: this runtime cannot host an agent: jobs ran on it before the apps module was loaded/);
  assert.equal(later.text, 'hi');
  assert.deepEqual(later.same, [], 'weft/apps exports the same functions as weft');
  assert.equal(later.keys, true, 'weft/apps exports what weft does');
  assert.equal(later.valid, false);
  assert.equal(later.isApp, true);
  assert.deepEqual(fetched.slice(0, 1), ['weft_jobs_bg.wasm']);
  assert.deepEqual(fetched.slice(1).sort(), ['agent.js', 'ops.js', 'weft_apps.js', 'weft_apps_bg.wasm']);
  await p.close();
});

test('apps: a runtime created at page start and first used after loadApps hosts an agent; one whose jobs ran before the load still refuses (RUNTIME_WITHOUT_APPS, saying why)', { timeout: 30_000 }, async () => {
  const { p, fetched } = await page();
  const out = await p.evaluate(async () => {
    const weft = await import('/wasm/pkg/index.js');
    // The common pattern: runtimes made at page start, the apps module loaded later.
    const early = weft.createRuntime();
    const used = weft.createRuntime();
    // Jobs run on `used` before the load: its registry is the jobs-only module's.
    const before = (await used.openLocal(async (n) => n * 2).submit(21).wait()).value;
    await weft.loadApps();
    // `early` was not used before the load: it runs its jobs and hosts an agent.
    const job = (await early.openLocal(async (n) => n + 1).submit(41).wait()).value;
    const agent = weft.createAgent(early, { model: weft.scriptedModel([{ text: 'hi' }]) });
    const text = (await agent.run('hello')).text;
    let refused = null;
    try {
      weft.createAgent(used);
    } catch (e) {
      refused = { code: e.code, message: e.message, weft: e instanceof weft.WeftError };
    }
    // The refused runtime keeps running its jobs.
    const after = (await used.openLocal(async (n) => n - 1).submit(43).wait()).value;
    agent.dispose();
    early.dispose();
    used.dispose();
    return { before, job, text, refused, after };
  });
  assert.equal(out.before, 42);
  assert.equal(out.job, 42);
  assert.equal(out.text, 'hi');
  assert.ok(out.refused, 'createAgent refused the runtime whose jobs ran before the load');
  assert.equal(out.refused.code, 'RUNTIME_WITHOUT_APPS');
  assert.equal(out.refused.weft, true);
  assert.match(out.refused.message, /jobs ran on it before the apps module was loaded/);
  assert.match(out.refused.message, /create the runtime for the agent after await loadApps\(\)/i);
  assert.equal(out.after, 42);
  assert.deepEqual(fetched.slice(0, 1), ['weft_jobs_bg.wasm']);
  await p.close();
});

test('importing weft/apps alone fetches the apps module and not the jobs-only one', { timeout: 30_000 }, async () => {
  const { p, fetched } = await page();
  const out = await p.evaluate(async () => {
    const weft = await import('/wasm/pkg/entry-apps.js');
    const app = weft.createApp();
    const ep = app.openLocal(async (n) => n * 2);
    const v = (await ep.submit(21).wait()).value;
    app.dispose();
    return { v, memory: weft.wasmMemoryBytes() > 0 };
  });
  assert.deepEqual(out, { v: 42, memory: true });
  assert.deepEqual(fetched.sort(), ['agent.js', 'ops.js', 'weft_apps.js', 'weft_apps_bg.wasm']);
  await p.close();
});
