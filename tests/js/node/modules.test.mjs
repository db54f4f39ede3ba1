// The package's entry points in Node: `weft/frames` and `weft/actors` load only their own
// WebAssembly module and export the same functions as `weft` (one module instance each);
// `weft/apps` is `weft` itself (Node loads the apps module at import).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

const suite = JSON.parse(readFileSync(new URL('../../vectors/frames.json', import.meta.url), 'utf8'));

test('weft/frames runs the engine; weft re-exports the same functions', async () => {
  const frames = await import('weft/frames');
  const e = frames.createFramesEngine({ app: suite.app, now: () => 1_790_000_000_000, idSeed: 7 });
  const f = e.frame('s1');
  assert.equal(f.dgp, '0.1');
  assert.deepEqual(frames.evidenceFor(f, `${f.frame_id}:recovery`, ['text', 'json', 'image']).omittedOptional, []);
  e.free();
  let err;
  try {
    frames.createFramesEngine({ app: { name: 1 } });
  } catch (x) {
    err = x;
  }
  assert.equal(err?.code, 'INVALID_MESSAGE');
  const weft = await import('weft');
  assert.equal(weft.createFramesEngine, frames.createFramesEngine);
  assert.equal(weft.WeftError, frames.WeftError);
});

test('weft/actors opens a store; weft re-exports the same functions', async () => {
  const actors = await import('weft/actors');
  const s = await actors.openActorStore({ backend: 'memory', title: 'Entry' });
  const t = await s.spawn({ parent: 'coordinator', type: 'task', title: 'entry point' });
  assert.equal(t.id, 'entry-point');
  await s.close();
  await assert.rejects(actors.openActorStore({ backend: 'memory', config: { GIT_CLOSEOUT: 'yolo' } }), (e) => e instanceof actors.WeftError && e.code === 'CONFIG_INVALID');
  const weft = await import('weft');
  assert.equal(weft.openActorStore, actors.openActorStore);
});

test('weft/apps is weft in Node: the same functions; loadApps resolves at once', async () => {
  const apps = await import('weft/apps');
  const weft = await import('weft');
  assert.deepEqual(Object.keys(apps).sort(), Object.keys(weft).sort());
  for (const name of ['createRuntime', 'createApp', 'createClaims', 'createAgent', 'validateToolArguments', 'scriptedModel', 'loadApps', 'App', 'Agent']) {
    assert.equal(typeof weft[name], 'function', `weft exports ${name}`);
    assert.equal(apps[name], weft[name], name);
  }
  assert.equal(await weft.loadApps(), undefined);
  // A runtime created before `loadApps` hosts an agent: Node has one registry module.
  const rt = weft.createRuntime();
  const agent = weft.createAgent(rt, { model: weft.scriptedModel([{ text: 'hi' }]) });
  assert.equal((await agent.run('hello')).text, 'hi');
  assert.deepEqual(weft.validateToolArguments({ type: 'object', properties: { n: { type: 'number' } } }, { n: 'x' }).ok, false);
  agent.dispose();
  rt.dispose();
});
