// The `fs` backend of `openActorStore` in Node: a real `$CHAT_ROOT` directory in the native
// store's layout. The agent scenarios shared with the memory store and Chromium (IndexedDB) run
// on it; a Node process killed mid-stream resumes in another process with the turn interrupted
// and nothing re-run; the native `weft actors` reads what JS wrote with identical lineage (and
// the other way round), the writer lock excludes native and JS writers both ways; a symbolic
// link inside the root is refused and its target never written.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import * as weft from 'weft';
import { actorAgentScenarios } from '../actor-agent-scenarios.mjs';
import { weftBinary } from '../lib/weft.mjs';
import { startModelServer } from '../../model-server/server.mjs';

const base = mkdtempSync(join(tmpdir(), 'weft-actors-fs-'));
after(() => rmSync(base, { recursive: true, force: true }));
let roots = 0;
const freshRoot = () => join(base, `root-${++roots}`);

/** The node's lines as the store holds them. */
const lines = (store, node) => store.forkView({ node }).transcript;
/** The lines of `nodes/<node>/chat.jsonl` on disk. */
const chatOnDisk = (root, node) =>
  readFileSync(join(root, 'nodes', node, 'chat.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
const cli = (...args) => spawnSync(weftBinary(), ['actors', ...args], { encoding: 'utf8' });
const cliJson = (...args) => {
  const r = cli(...args, '--json');
  assert.equal(r.status, 0, `weft actors ${args.join(' ')}: ${r.stdout}${r.stderr}`);
  return JSON.parse(r.stdout);
};

/** A graph view without `version` (the in-memory change counter of the process that opened it). */
const lineage = ({ version, ...view }) => (assert.equal(typeof version, 'number'), view);

const open = (config = {}) => weft.openActorStore({ root: freshRoot(), config, title: 'Agents' });
const worker = (name) =>
  name === 'diffusion' ? new URL('../../../examples/diffusion/worker.js', import.meta.url) : new URL(`../../workers/${name}.js`, import.meta.url);

for (const [name, run] of Object.entries(actorAgentScenarios)) {
  test(`actor agents (Node, fs): ${name}`, { timeout: 30_000 }, () => run({ weft, open, worker }));
}

test('the fs backend writes the $CHAT_ROOT layout; one writer at a time; root needs fs', { timeout: 30_000 }, async () => {
  const root = freshRoot();
  const s = await weft.openActorStore({ root, title: 'Layout' });
  assert.equal(s.graph().root, 'coordinator');
  const t = await s.spawn({ parent: 'coordinator', type: 'task', title: 'docs sync' });
  await s.message({ node: t.id, text: 'hello' });
  for (const f of ['graph.json', 'orchestrator/meta.jsonl', 'nodes/coordinator/meta.json', 'nodes/coordinator/chat.jsonl', `nodes/${t.id}/meta.json`, `nodes/${t.id}/chat.jsonl`]) {
    assert.ok(statSync(join(root, f)).isFile(), f);
  }
  assert.equal(chatOnDisk(root, t.id).at(-1).text, 'hello');
  // Nothing pending is left behind: the staging directory is empty, no temporary beside a record.
  assert.deepEqual(readdirSync(join(root, '.weft')), []);
  assert.deepEqual(readdirSync(join(root, 'nodes', 'coordinator')).sort(), ['chat.jsonl', 'meta.json']);
  // A second writer (this process or another) is refused while the first holds the root.
  await assert.rejects(weft.openActorStore({ root }), (e) => e instanceof weft.WeftError && e.code === 'STORE_LOCKED' && e.message.includes(`pid ${process.pid}`));
  await s.close();
  const again = await weft.openActorStore({ root });
  assert.deepEqual(again.report.repairs, []);
  assert.deepEqual(
    again.graph().nodes.map((n) => [n.id, n.spawnedBy]),
    [
      ['coordinator', null],
      ['docs-sync', 'coordinator'],
    ],
  );
  await again.close();
  await assert.rejects(weft.openActorStore({ backend: 'fs' }), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(weft.openActorStore({ backend: 'memory', root }), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(weft.openActorStore({ backend: 'disk' }), { code: 'INVALID_ARGUMENT' });
});

test('a Node process killed mid-stream: the next process resumes, the turn interrupted, nothing re-run', { timeout: 60_000 }, async () => {
  const root = freshRoot();
  const server = await startModelServer();
  try {
    // The model streams a few deltas and never finishes: the child is killed mid-stream.
    server.script([{ text: 'a partial answer that never ends', chunkSize: 4, hang: true }]);
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import * as weft from 'weft';
         const [root, url] = process.argv.slice(1);
         const store = await weft.openActorStore({ root, title: 'Crash' });
         const agent = await store.agent(store.graph().root, { model: weft.openaiModel({ baseUrl: url + '/v1', model: 'm', apiKey: 'k' }) });
         let said = false;
         agent.on('model_delta', (d) => { if (d.type === 'text_delta' && !said) { said = true; console.log('streaming'); } });
         await agent.say('a long question');`,
        root,
        server.url,
      ],
      { cwd: fileURLToPath(new URL('..', import.meta.url)), stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const exited = new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
    try {
      const first = await new Promise((resolve, reject) => {
        createInterface({ input: child.stdout }).once('line', resolve);
        exited.then((e) => reject(new Error(`the child exited before streaming: ${JSON.stringify(e)}`)));
      });
      assert.equal(first, 'streaming');
      // The child holds the root: another process's writer is refused.
      await assert.rejects(weft.openActorStore({ root }), { code: 'STORE_LOCKED' });
      const onDisk = chatOnDisk(root, 'coordinator');
      assert.deepEqual(
        onDisk.filter((l) => l.agent).map((l) => l.agent.entry),
        ['turn_start'],
        'the turn start is durable before the model is asked',
      );
    } finally {
      // Killed mid-stream (and never left running when an assertion above fails).
      child.kill('SIGKILL');
    }
    assert.deepEqual(await exited, { code: null, signal: 'SIGKILL' });
    assert.equal(server.requests().length, 1);

    // The kernel released the dead writer's lock; this process opens the root.
    const store = await weft.openActorStore({ root });
    const model = weft.openaiModel({ baseUrl: `${server.url}/v1`, model: 'm', apiKey: 'k' });
    const agents = await store.resumeAgents({ model });
    assert.deepEqual(
      agents.map((a) => a.node),
      ['coordinator'],
    );
    const [agent] = agents;
    assert.equal(agent.report.interruptedTurn, 1);
    assert.equal(agent.report.modelStepInterrupted, true);
    assert.equal(agent.report.pendingTasks, 0, 'the interrupted task is not taken again');
    await store.agentsIdle();
    const end = lines(store, 'coordinator').at(-1);
    assert.deepEqual([end.agent.entry, end.agent.end, end.agent.reason], ['turn_end', 'interrupted', 'host restarted during a model step']);
    assert.equal(server.requests().length, 1, 'nothing is re-run');
    assert.ok(!lines(store, 'coordinator').some((l) => l.agent?.entry === 'assistant'), 'no answer was made up for the killed step');

    // The next message is a new turn, which the model answers.
    server.script([{ text: 'the answer' }]);
    await agent.say('and now?');
    await agent.idle();
    assert.equal(server.requests().length, 2);
    const ls = lines(store, 'coordinator');
    assert.equal(ls.filter((l) => l.agent?.entry === 'assistant').at(-1).text, 'the answer');
    assert.equal(ls.at(-1).agent.end, 'completed');
    await store.close();
    // What the store showed is what the files hold.
    assert.deepEqual(
      chatOnDisk(root, 'coordinator').map((l) => l.text),
      ls.map((l) => l.text),
    );
  } finally {
    await server.close();
  }
});

test('the native `weft actors` reads a root JS wrote with identical lineage, and JS reads what it writes', { timeout: 120_000 }, async () => {
  const root = freshRoot();
  const store = await weft.openActorStore({ root, title: 'Shared' });
  // Lineage from user gestures, a drift spawn and an agent's turns with a spawned child.
  await store.spawn({ parent: 'coordinator', type: 'task', title: 'docs sync', reason: 'multi-repo docs' });
  await store.route({ node: 'coordinator', text: 'Side note: the bot config lives in .github' });
  const agent = await store.agent('coordinator');
  await agent.say('hello there');
  await agent.say('Side note: the release notes need a changelog');
  await store.agentsIdle();
  const jsGraph = store.graph();
  const jsTree = store.treeView();
  assert.ok(jsGraph.nodes.length >= 4, `nodes: ${jsGraph.nodes.map((n) => n.id)}`);
  // While JS holds the root, a native writer is refused (the same lock); a native reader reads.
  const locked = cli('message', root, '--node', 'coordinator', '--text', 'x', '--json', '--lock-timeout-ms', '0');
  assert.equal(locked.status, 75, locked.stderr);
  assert.equal(JSON.parse(locked.stdout).error.code, 'STORE_LOCKED');
  assert.ok(JSON.parse(locked.stdout).error.message.includes(`pid ${process.pid}`));
  const native = cliJson('graph', root);
  assert.deepEqual(lineage(native), lineage(jsGraph), 'the graph view: the same nodes, spawn edges and lineage');
  assert.deepEqual(cliJson('graph', root, '--view', 'tree'), jsTree);
  assert.equal(cliJson('audit', root).problems, 0);
  await store.close();

  // The native writer appends to and spawns in the root; JS reopens it and sees its lineage.
  assert.equal(cliJson('message', root, '--node', 'docs-sync', '--text', 'from native').node, 'docs-sync');
  assert.equal(cliJson('spawn', root, '--parent', 'docs-sync', '--id', 'native-child', '--title', 'Native child').id, 'native-child');
  const nativeAfter = cliJson('graph', root);
  const again = await weft.openActorStore({ root });
  assert.deepEqual(again.report.repairs, []);
  assert.deepEqual(lineage(again.graph()), lineage(nativeAfter));
  assert.deepEqual(
    lines(again, 'docs-sync').slice(-2).map((l) => [l.role, l.text]),
    [
      ['user', 'from native'],
      ['routing', '→ spawned task `native-child`'],
    ],
  );
  assert.deepEqual(again.lineageView(), []);
  // The agent resumes from the files after the native writes: nothing to redo.
  const resumed = await again.resumeAgents();
  assert.deepEqual(resumed.map((a) => a.report.interruptedTurn), resumed.map(() => null));
  await again.close();
});

test('a native writer holding .weft-lock keeps JS out until it lets go', { timeout: 30_000 }, async () => {
  const root = freshRoot();
  await (await weft.openActorStore({ root })).close();
  // What the native writer does: an exclusive flock(2) on $CHAT_ROOT/.weft-lock.
  writeFileSync(join(root, '.weft-lock'), 'pid 1 (weft actors spawn)');
  const holder = spawn('flock', ['-x', join(root, '.weft-lock'), 'sh', '-c', 'echo held; exec cat'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise((r) => holder.once('exit', r));
  try {
    assert.equal(await new Promise((r) => createInterface({ input: holder.stdout }).once('line', r)), 'held');
    await assert.rejects(weft.openActorStore({ root }), (e) => e.code === 'STORE_LOCKED' && e.message.includes('weft actors spawn'));
    // Waiting for the lock: the store's flock(1) waits (seen among this process's children)
    // and is granted once the holder exits.
    const waiting = weft.openActorStore({ root, lockTimeoutMs: 20_000 });
    const flockWaiting = () => execFileSync('ps', ['--ppid', String(process.pid), '-o', 'args='], { encoding: 'utf8' }).includes('flock -x -E 75 -w 20');
    while (!flockWaiting()) await new Promise((r) => setTimeout(r, 10));
    holder.stdin.end();
    await exited;
    const s = await waiting;
    assert.equal(s.graph().root, 'coordinator');
    await s.close();
  } finally {
    if (holder.exitCode === null && holder.signalCode === null) holder.kill('SIGKILL');
    await exited;
  }
});

test('a symbolic link inside the root is refused, and its target is never written', { timeout: 30_000 }, async () => {
  const root = freshRoot();
  const s = await weft.openActorStore({ root });
  const t = await s.spawn({ parent: 'coordinator', type: 'task', title: 'work' });
  const outside = join(base, `outside-${roots}`);
  mkdirSync(outside);
  const target = join(outside, 'chat.jsonl');
  const content = '{"role":"user","text":"not the store\'s"}\n';
  writeFileSync(target, content);
  const before = statSync(target);
  // A link planted while the store runs: the next write there is refused.
  const chat = join(root, 'nodes', t.id, 'chat.jsonl');
  unlinkSync(chat);
  symlinkSync(target, chat);
  await assert.rejects(s.message({ node: t.id, text: 'through the link?' }), (e) => e instanceof weft.WeftError && e.code === 'SYMLINK_REFUSED' && e.message.includes(`nodes/${t.id}/chat.jsonl`));
  await s.close();
  // Opening a root with the link is refused before anything is written.
  await assert.rejects(weft.openActorStore({ root }), { code: 'SYMLINK_REFUSED' });
  assert.equal(readFileSync(target, 'utf8'), content);
  assert.equal(statSync(target).mtimeMs, before.mtimeMs);
  assert.ok(lstatSync(chat).isSymbolicLink(), 'the link is left as it was');
  // A linked node directory is refused the same way; the lock is released after a refusal.
  unlinkSync(chat);
  writeFileSync(chat, '');
  const dir = join(root, 'nodes', 'elsewhere');
  symlinkSync(outside, dir);
  await assert.rejects(weft.openActorStore({ root }), (e) => e.code === 'SYMLINK_REFUSED' && e.message.includes('nodes/elsewhere'));
  assert.deepEqual(readdirSync(outside), ['chat.jsonl']);
  unlinkSync(dir);
  await (await weft.openActorStore({ root })).close();
});

test('a hard link inside the root is never written through: a log gets a copy of its own, the lock is refused', { timeout: 30_000 }, async () => {
  const root = freshRoot();
  const s = await weft.openActorStore({ root });
  const t = await s.spawn({ parent: 'coordinator', type: 'task', title: 'work' });
  const outside = join(base, `outside-hard-${roots}`);
  mkdirSync(outside);
  const chat = join(root, 'nodes', t.id, 'chat.jsonl');
  const target = join(outside, 'chat.jsonl');
  // A second name planted while the store runs (the chat's own bytes, now shared with a file
  // outside the root): the next append goes to a copy of its own, the other name is untouched.
  linkSync(chat, target);
  const content = readFileSync(target, 'utf8');
  const before = statSync(target);
  await s.message({ node: t.id, text: 'not through the link' });
  assert.equal(readFileSync(target, 'utf8'), content);
  assert.equal(statSync(target).mtimeMs, before.mtimeMs);
  assert.equal(statSync(target).nlink, 1, 'the link is broken');
  assert.equal(statSync(chat).nlink, 1);
  assert.ok(readFileSync(chat, 'utf8').startsWith(content));
  assert.ok(lines(s, t.id).some((l) => l.text === 'not through the link'));
  assert.ok(!readdirSync(join(root, 'nodes', t.id)).some((n) => n.includes('.weft-tmp')));
  await s.close();
  // A lock file with a second name is refused before the pid is written into it.
  const lockTarget = join(outside, 'lock');
  writeFileSync(lockTarget, 'outside');
  unlinkSync(join(root, '.weft-lock'));
  linkSync(lockTarget, join(root, '.weft-lock'));
  await assert.rejects(weft.openActorStore({ root }), (e) => e instanceof weft.WeftError && e.code === 'HARD_LINK_REFUSED' && e.message.includes('.weft-lock'));
  assert.equal(readFileSync(lockTarget, 'utf8'), 'outside');
  unlinkSync(join(root, '.weft-lock'));
  const r = await weft.openActorStore({ root });
  assert.ok(lines(r, t.id).some((l) => l.text === 'not through the link'));
  await r.close();
});

test('opening recovers what a crashed writer left: whole staged nodes move in, the rest is removed', { timeout: 30_000 }, async () => {
  const root = freshRoot();
  await (await weft.openActorStore({ root })).close();
  const hash = (t) => createHash('sha256').update(t).digest().subarray(0, 8).toString('hex');
  const staged = (batch, id, files, cut = 0) => {
    const name = `.new,${batch},${Object.entries(files)
      .map(([n, t]) => `${n}=${Buffer.byteLength(t)}=${hash(t)}`)
      .join('+')},${id}`;
    const dir = join(root, '.weft', name);
    mkdirSync(dir);
    for (const [n, t] of Object.entries(files)) writeFileSync(join(dir, n), cut ? t.slice(0, -cut) : t);
  };
  const meta = (id) => JSON.stringify({ id, type: 'task', address: join(root, 'nodes', id), spawnedBy: 'coordinator', spawned: [], status: 'idle', summary: '', awaitingUser: false, title: id, topic: id, hidden: false, createdAt: '2026-01-01T00:00:00.000Z' }) + '\n';
  // Torn in its own stage (nothing durable names it): removed. Temporaries: removed.
  staged(7, 'torn', { 'meta.json': meta('torn'), 'chat.jsonl': '' }, 3);
  mkdirSync(join(root, '.weft', '.tmp-half-8'));
  writeFileSync(join(root, 'nodes', 'coordinator', 'meta.json.weft-tmp-spare'), '{}');
  writeFileSync(join(root, 'graph.json.weft-tmp-3-0-1'), '{}');
  const s = await weft.openActorStore({ root });
  assert.deepEqual(readdirSync(join(root, '.weft')), []);
  assert.ok(!existsSync(join(root, 'nodes', 'torn')));
  assert.deepEqual(readdirSync(join(root, 'nodes', 'coordinator')).sort(), ['chat.jsonl', 'meta.json']);
  assert.ok(!readdirSync(root).some((n) => n.includes('.weft-tmp')));
  assert.deepEqual(
    s.graph().nodes.map((n) => n.id),
    ['coordinator'],
  );
  await s.close();
  // Whole (its stage was durable before the next began): renamed into place, as natively; the
  // native reader agrees with what JS then reads.
  staged(9, 'whole', { 'meta.json': meta('whole'), 'chat.jsonl': '' });
  const s2 = await weft.openActorStore({ root });
  assert.deepEqual(readdirSync(join(root, '.weft')), []);
  assert.ok(statSync(join(root, 'nodes', 'whole', 'meta.json')).isFile());
  const ids = s2.graph().nodes.map((n) => n.id);
  assert.deepEqual(ids, ['coordinator', 'whole']);
  // The core completes the half-finished spawn from the child record.
  assert.ok(s2.report.repairs.some((r) => r.includes('`whole`') && r.includes('half-finished spawn')), JSON.stringify(s2.report.repairs));
  await s2.close();
  assert.deepEqual(
    cliJson('graph', root).nodes.map((n) => n.id),
    ids,
  );
});
