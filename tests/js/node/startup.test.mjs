// Start-up of the package in Node: `import 'weft'` parses only the glue it needs at once (the
// apps module's, which holds the job registry, and the frames engine's, whose first call may be
// synchronous; not the browsers' jobs-only module); the actor
// graph's and the model codecs' glue are imported on their first (async) use, and work then.
// The Worker shim does not load its child-process helpers (readline...) in a Worker, and
// `weft` starts its Workers from the CommonJS build of the shim (worker-shim.cjs: the Worker's
// only ES module is then the task script); a task script that fails to load closes its endpoint
// with the script's error, ES module or CommonJS alike.
// `import 'weft'` sets no V8 flag (a Worker then starts from Node's code cache); on V8 11 (Node
// 20) the glue calls the exports that return one externref through a Proxy instead (V8 11 aborts
// when such a call, inlined into optimized JS, is deoptimized lazily: wasm/tools/guard-exports.mjs).
// `import 'weft'` compiles no WebAssembly module: the apps module is compiled on its first use,
// and a runtime's first `openWorker` spawns its Worker before that compile (a Worker whose
// endpoint the core refuses is terminated); every entry point works as that first use.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { register } from 'node:module';
import { types } from 'node:util';
import { MessageChannel } from 'node:worker_threads';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { externrefReturns } from '../../../wasm/tools/guard-exports.mjs';
import { lazyExports } from '../../../wasm/tools/lazy-exports.mjs';

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

test("the package's worker shims load no module file of their own in a Worker (worker-batch.js is inside them)", () => {
  for (const file of ['worker-shim.mjs', 'worker-shim.cjs']) {
    const shim = readFileSync(new URL(`./${file}`, import.meta.resolve('weft')), 'utf8');
    // Every import or require left is a built-in module's, or the task script's (\`import(script)\`).
    const specifiers = [...shim.matchAll(/\b(?:import|require)\s*\(\s*(["'][^"']*["'])|\bfrom\s*(["'][^"']*["'])/g)].map((m) => (m[1] ?? m[2]).slice(1, -1));
    assert.ok(specifiers.includes('node:worker_threads'), `${file}: ${specifiers}`);
    for (const s of specifiers) assert.match(s, /^node:/, `${file} imports ${s}`);
    assert.match(shim, /\bimport\(script\)/, file);
    assert.match(shim, /\bbatching\b/, file);
  }
  // The CommonJS build is CommonJS: no static import, no top-level await.
  const cjs = readFileSync(new URL('./worker-shim.cjs', import.meta.resolve('weft')), 'utf8');
  assert.doesNotMatch(cjs, /(^|[;}\n])\s*import\s*[{*\w]/);
  assert.match(cjs, /require\("node:worker_threads"\)/);
});

test('a Worker runs from the CommonJS shim; a task script that throws, does not parse or is missing closes its endpoint with its error', { timeout: 30_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'weft-startup-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ok = `self.postMessage({ type: 'hello', protocol: 'weft-worker/1' });
self.onmessage = (e) => {
  if (e.data.type === 'run') self.postMessage({ id: e.data.id, type: 'done', value: e.data.payload.n + 1 });
};`;
  // The same DOM-style script as an ES module and as CommonJS; each runs.
  writeFileSync(join(dir, 'ok.mjs'), ok);
  writeFileSync(join(dir, 'ok.cjs'), ok);
  writeFileSync(join(dir, 'throws.mjs'), "self.postMessage({ type: 'hello', protocol: 'weft-worker/1' });\nthrow new Error('thrown at load');\n");
  writeFileSync(join(dir, 'throws.cjs'), "throw new Error('thrown at load, CommonJS');\n");
  writeFileSync(join(dir, 'syntax.mjs'), 'self.onmessage = (e => {;\n');
  const { createRuntime } = await import('weft');
  const rt = createRuntime();
  t.after(() => rt.close());
  for (const f of ['ok.mjs', 'ok.cjs']) {
    const o = await rt.openWorker(join(dir, f)).submit({ n: 41 }).wait();
    assert.deepEqual([o.outcome, o.value], ['succeeded', 42], f);
  }
  const failing = {
    'throws.mjs': /thrown at load/,
    'throws.cjs': /thrown at load, CommonJS/,
    'syntax.mjs': /SyntaxError/,
    // The missing script's error names the module that imported it: the CommonJS shim.
    'missing.mjs': /ERR_MODULE_NOT_FOUND[\s\S]*worker-shim\.cjs/,
  };
  for (const [f, why] of Object.entries(failing)) {
    const ep = rt.openWorker(join(dir, f));
    const o = await ep.submit({ n: 1 }).wait();
    // Closed before the run started (failed) or after it was posted (lost): either way the
    // endpoint's reason carries the script's error, and the endpoint takes no more jobs.
    assert.ok(['failed', 'lost'].includes(o.outcome), `${f}: ${JSON.stringify(o)}`);
    assert.match(o.reason ?? o.message, why, f);
    assert.throws(() => ep.submit({ n: 2 }), (e) => e.code === 'ENDPOINT_CLOSED', f);
  }
});

test('import weft sets no V8 flag: a Worker started after it loads from Node\'s code cache', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'weft-startup-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const script = join(dir, 'cache.mjs');
  writeFileSync(
    script,
    `await import(${JSON.stringify(import.meta.resolve('weft'))});
const { Worker } = await import('node:worker_threads');
const w = new Worker('process.exit(0)', { eval: true });
await new Promise((r) => w.once('exit', r));`,
  );
  const env = { ...process.env, NODE_DEBUG_NATIVE: 'CODE_CACHE' };
  delete env.NODE_OPTIONS;
  const r = spawnSync(process.execPath, [script], { env, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const lines = r.stderr.split('\n');
  // Any non-default V8 flag changes V8's flag hash: every built-in compiled after it is rejected.
  assert.deepEqual(lines.filter((l) => / is rejected/.test(l)), []);
  assert.ok(lines.filter((l) => / is accepted/.test(l)).length > 10, 'the Worker\'s built-ins load from the cache');
});

test('on V8 11 each glue calls exactly the exports that return one externref through a Proxy', async () => {
  const dir = new URL('./', import.meta.resolve('weft'));
  const v8of11 = /^11\./.test(process.versions.v8);
  let guarded = 0;
  for (const name of ['weft_jobs', 'weft_apps', 'weft_frames', 'weft_actors', 'weft_models']) {
    const bytes = readFileSync(new URL(`${name}_bg.wasm`, dir));
    const glue = await import(new URL(`${name}.js`, dir).href);
    // The glue's exports (initSync returns those of an instance made earlier: the apps glue's).
    const exports = glue.initSync({ module: bytes });
    const expected = new Set(v8of11 ? externrefReturns(bytes) : []);
    const proxies = Object.keys(exports).filter((k) => types.isProxy(exports[k]));
    assert.deepEqual(proxies.sort(), [...expected].sort(), name);
    for (const k of expected) assert.equal(typeof exports[k], 'function', `${name}.${k}`);
    guarded += proxies.length;
  }
  if (v8of11) {
    assert.ok(externrefReturns(readFileSync(new URL('weft_apps_bg.wasm', dir))).includes('jobregistry_drainOutputs'));
    assert.ok(guarded > 0);
  }
  // The registry works through the Proxies.
  const { createRuntime } = await import('weft');
  const rt = createRuntime();
  const ep = rt.registry.openEndpoint(0, { owner: 'app', label: 'guard', hello: 'skip' });
  const { job } = rt.registry.submit(0, ep, { n: 1 }, { owner: 'agent' });
  rt.registry.onMessage(0, ep, { id: job, type: 'done', value: 7 });
  assert.ok(Array.isArray(rt.registry.drainOutputs()));
  assert.equal(rt.registry.job(job).state, 'succeeded');
  rt.close();
});

test('the apps module exports no function that returns more than one value: the glue takes each from its table', async () => {
  const dir = new URL('./', import.meta.resolve('weft'));
  const bytes = readFileSync(new URL('weft_apps_bg.wasm', dir));
  // V8 11 compiles a wrapper per such export signature when the module is compiled: none is left.
  assert.deepEqual(lazyExports(bytes).names, []);
  const table = WebAssembly.Module.exports(new WebAssembly.Module(bytes)).find((e) => e.name === '__weft_lazy');
  assert.equal(table?.kind, 'table');
  const glue = await import(new URL('weft_apps.js', dir).href);
  const exports = glue.initSync({ module: bytes });
  assert.equal(exports.__weft_lazy, undefined);
  // Functions moved to the table (they return a string or a Result: more than one value) are
  // reachable as before, and called again once taken out.
  const { createRuntime } = await import('weft');
  const rt = createRuntime();
  const ep = rt.registry.openEndpoint(0, { owner: 'app', label: 'lazy', hello: 'skip' });
  for (let i = 1; i <= 2; i++) {
    const { job } = rt.registry.submit(0, ep, { n: i }, { owner: 'agent' });
    // A fresh runtime's endpoint: the i-th job is wire id i.
    rt.registry.onMessage(0, ep, { id: i, type: 'done', value: i });
    assert.ok(Array.isArray(rt.registry.drainOutputs()));
    assert.equal(rt.registry.job(job).state, 'succeeded');
  }
  assert.equal(glue.validateToolArguments({ type: 'object', required: ['a'] }, { a: 1 }).ok, true);
  assert.equal(glue.validateToolArguments({ type: 'object', required: ['a'] }, {}).ok, false);
  rt.close();
});

// A child process that counts the Workers spawned (and terminated) and the WebAssembly modules
// compiled (with how many Workers had been spawned by then), then runs `body` after
// `import 'weft'`; prints what `body` returns, as JSON.
function counted(t, body) {
  const dir = mkdtempSync(join(tmpdir(), 'weft-startup-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const task = join(dir, 'task.js');
  writeFileSync(
    task,
    `self.postMessage({ type: 'hello', protocol: 'weft-worker/1' });
self.onmessage = (e) => {
  if (e.data.type === 'run') self.postMessage({ id: e.data.id, type: 'done', value: 1 });
};`,
  );
  const script = join(dir, 'counted.mjs');
  writeFileSync(
    script,
    `import wt from 'node:worker_threads';
import { syncBuiltinESMExports } from 'node:module';
const spawned = [];
wt.Worker = class extends wt.Worker {
  constructor(...args) {
    super(...args);
    this.terminated = false;
    spawned.push(this);
  }
  terminate() {
    this.terminated = true;
    return super.terminate();
  }
};
syncBuiltinESMExports();
const compiles = [];
WebAssembly.Module = new Proxy(WebAssembly.Module, {
  construct(target, args) {
    compiles.push({ bytes: args[0].byteLength, workers: spawned.length });
    return Reflect.construct(target, args);
  },
});
const task = ${JSON.stringify(task)};
const weft = await import(${JSON.stringify(import.meta.resolve('weft'))});
const out = await (async () => { ${body} })();
console.log(JSON.stringify(out));`,
  );
  const r = spawnSync(process.execPath, [script], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

const appsBytes = () => readFileSync(new URL('weft_apps_bg.wasm', import.meta.resolve('weft'))).byteLength;

test("import weft compiles no module; a first openWorker spawns its Worker before the apps module's compile", (t) => {
  const r = counted(
    t,
    `const afterImport = compiles.length;
    const rt = weft.createRuntime();
    const afterCreate = compiles.length;
    const ep = rt.openWorker(task);
    const afterOpen = [...compiles];
    const o = await ep.submit({}).wait();
    rt.close();
    return { afterImport, afterCreate, afterOpen, outcome: o.outcome, workers: spawned.length };`,
  );
  assert.equal(r.afterImport, 0, 'nothing compiled at import');
  assert.equal(r.afterCreate, 0, 'createRuntime compiles nothing');
  assert.deepEqual(r.afterOpen, [{ bytes: appsBytes(), workers: 1 }], 'the apps module, once, after the Worker was spawned');
  assert.equal(r.outcome, 'succeeded');
  assert.equal(r.workers, 1);
});

test('an openWorker the core refuses throws as before and leaves no Worker running', (t) => {
  const r = counted(
    t,
    `const rt = weft.createRuntime();
    const refused = [];
    for (const options of [{ maxConcurrent: 0 }, { hello: 'bogus' }]) {
      try {
        rt.openWorker(task, options);
        refused.push('opened');
      } catch (err) {
        refused.push(err.code);
      }
    }
    const terminated = spawned.map((w) => w.terminated);
    // (A Worker left running would keep this process alive: stop it, after counting.)
    for (const w of spawned) if (!w.terminated) w.terminate();
    await Promise.all(spawned.map((w) => new Promise((r) => w.once('exit', r))));
    const o = await rt.openWorker(task).submit({}).wait();
    rt.close();
    return { refused, terminated, outcome: o.outcome, workers: spawned.length, compiles: compiles.length };`,
  );
  assert.deepEqual(r.refused, ['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
  assert.deepEqual(r.terminated, [true, true], 'each refused endpoint\'s Worker is terminated');
  assert.equal(r.outcome, 'succeeded', 'the runtime still opens Workers');
  assert.equal(r.workers, 3);
  assert.equal(r.compiles, 1);
});

test("every entry point works as the apps module's first use", (t) => {
  const firstUses = {
    wasmMemoryBytes: 'return weft.wasmMemoryBytes() > 0;',
    validateToolArguments: "return weft.validateToolArguments({ type: 'object', properties: { n: { type: 'number' } } }, { n: 'x' }).ok;",
    createApp: 'return weft.createApp() instanceof weft.App;',
    createClaims: 'return weft.createClaims({ acquire: () => {}, release: () => {} }) instanceof weft.Claims;',
    createAgent: 'return weft.createAgent(weft.createRuntime(), { model: weft.scriptedModel([]) }) instanceof weft.Agent;',
    runtimeJobs: "return new weft.Runtime().jobs('app').length;",
    disposeUnused: 'weft.createRuntime().dispose(); return compiles.length;',
  };
  const expected = {
    wasmMemoryBytes: true,
    validateToolArguments: false,
    createApp: true,
    createClaims: true,
    createAgent: true,
    runtimeJobs: 0,
    disposeUnused: 0,
  };
  for (const [name, body] of Object.entries(firstUses)) {
    assert.deepEqual(counted(t, body), expected[name], name);
  }
});
