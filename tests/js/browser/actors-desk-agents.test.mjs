// Live agents in the desk, in headless Chromium against a real `weft serve --chat-root` whose
// agents talk to the scripted local model server (tests/model-server/server.mjs, OpenAI
// format): a message typed into the coordinator streams its reply (a partial text is seen
// before the final line), the model's `spawn` tool call makes a child that appears in the
// tree, the enforced wait on it (`wait_on`) shows as "waiting" (also after a page reload
// mid-turn) and the turn resumes by itself once the child's agent calls `set_status` done;
// a page reloaded while a step streams shows the text streamed so far in the live bubble and
// keeps appending the deltas (exactly: no piece doubled or lost); Stop interrupts a turn.
// Without a model the desk says so and the built-in model answers; against a server
// without the agents API (404) the page works as before and routes messages itself.
// Saves tests/artifacts/actors-desk-agents-waiting.png (mid-turn) and actors-desk-agents.png.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launch } from '../lib/browser.mjs';
import { repoRoot } from '../lib/server.mjs';
import { HUMAN, startServe } from '../lib/weft.mjs';
import { startModelServer } from '../../model-server/server.mjs';

const artifacts = join(repoRoot, 'tests', 'artifacts');
let models;
let serve;
let browser;
let chatDir;

before(async () => {
  models = await startModelServer();
  chatDir = mkdtempSync(join(tmpdir(), 'weft-desk-agents-'));
  // The key is read from the variable `--api-key-env` names; the wait graph enforces.
  process.env.WEFT_DESK_AGENTS_TEST_KEY = 'test-key';
  process.env.ACTOR_WAIT_GRAPH = 'enforce';
  serve = await startServe([
    '--chat-root',
    join(chatDir, 'chat'),
    '--model',
    'openai:test-model',
    '--base-url',
    `${models.url}/v1`,
    '--api-key-env',
    'WEFT_DESK_AGENTS_TEST_KEY',
  ]);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await serve?.close();
  await models?.close();
  if (chatDir) rmSync(chatDir, { recursive: true, force: true });
});

/** Opens the desk and gives it the human token; resolves to the page. */
async function openDesk(page, url) {
  await page.goto(`${url}/actors/`);
  await page.waitForSelector('[data-testid=token-form]:not(.is-hidden)');
  await page.fill('#token', HUMAN);
  await page.click('[data-testid=token-form] button[type=submit]');
  await page.waitForSelector('[data-testid=token-form].is-hidden', { state: 'attached' });
}

async function get(url, path) {
  const res = await fetch(`${url}/api/actors${path}`, { headers: { authorization: `Bearer ${HUMAN}` } });
  return { status: res.status, body: await res.json() };
}

/** The chat lines of `node` on disk. */
function lines(node) {
  return readFileSync(join(chatDir, 'chat', 'nodes', node, 'chat.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
}

const coordBadge = '[data-testid=coord-agent] [data-testid=agent-badge]';

test('a live agent streams, spawns a child, waits on it (across a reload) and resumes', { timeout: 90_000 }, async () => {
  const first = 'I will fork a task for the report draft and wait for it.';
  const done = 'All done: the report draft is finished.';
  models.script([
    // The coordinator's first step: a slowly streamed text, then the spawn and an enforced
    // wait on the child.
    {
      text: first,
      chunkSize: 3,
      delayMs: 120,
      calls: [
        { id: 'call-spawn', name: 'spawn', arguments: { type: 'task', title: 'report draft', message: 'Draft the report.' } },
        { id: 'call-wait', name: 'wait_on', arguments: { node: 'report-draft', mode: 'enforce' } },
      ],
    },
    // The child's first turn: it answers but does not finish (the parent keeps waiting).
    { text: 'Drafting the report; tell me when to wrap up.' },
  ]);

  const page = await browser.newPage({ viewport: { width: 1500, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await openDesk(page, serve.url);
  await page.click('[data-testid=view-tree]');
  await page.waitForSelector('[data-testid=tree] .tnode[data-node="coordinator"]');
  // The server runs agents and has a model: no banner.
  const agents = await get(serve.url, '/agents');
  assert.equal(agents.status, 200, JSON.stringify(agents.body));
  assert.equal(agents.body.model.configured, true);
  await page.waitForSelector('[data-testid=model-chip]:not(.is-hidden)');
  assert.equal(await page.isVisible('[data-testid=model-banner]'), false);

  await page.fill('#coord-input', 'Please get the report drafted.');
  await page.press('#coord-input', 'Enter');

  // The reply streams: a partial text in the live bubble before the line lands.
  const partial = await page.waitForFunction(
    (full) => {
      const b = document.querySelector('#coord-lines [data-testid=live-bubble] bdi');
      const t = b?.textContent ?? '';
      return t.length > 0 && t.length < full.length && full.startsWith(t) ? t : null;
    },
    first,
    { timeout: 20_000, polling: 20 },
  );
  assert.ok((await partial.jsonValue()).length < first.length);
  // The bubble is replaced by the assistant line once it is on disk.
  await page.waitForFunction((full) => [...document.querySelectorAll('#coord-lines li.role-assistant:not(.streaming) bdi')].some((b) => b.textContent === full), first, {
    timeout: 20_000,
  });
  await page.waitForSelector('#coord-lines [data-testid=live-bubble]', { state: 'detached' });

  // The model's spawn made a child, which appears in the tree; the coordinator shows the
  // routing marker as one line and waits on the child.
  await page.waitForSelector('[data-testid=tree] .tnode[data-node="report-draft"]', { timeout: 20_000 });
  await page.waitForSelector('#coord-lines li.role-routing');
  await page.waitForSelector(`${coordBadge}[data-phase=waiting]`, { timeout: 20_000 });
  assert.match(await page.textContent(coordBadge), /waiting on report-draft/);
  // The child had its own session: the model was asked with the child's first line.
  await page.waitForFunction(() => document.querySelector('[data-testid=tree] .tnode[data-node="report-draft"] [data-testid=agent-badge][data-phase=idle]'), null, {
    timeout: 20_000,
  });
  const asked = models.requests().map((r) => r.body.messages.filter((m) => m.role === 'user').map((m) => m.content).join('\n'));
  assert.equal(asked.length, 2, 'the parent waits: only its first step and the child were asked');
  assert.match(asked[1], /Draft the report\./);

  // Reload mid-turn: the same state comes back from the server.
  await page.reload();
  await page.waitForSelector('[data-testid=token-form]:not(.is-hidden)');
  await page.fill('#token', HUMAN);
  await page.click('[data-testid=token-form] button[type=submit]');
  await page.waitForSelector('[data-testid=tree] .tnode[data-node="report-draft"]');
  await page.waitForSelector(`${coordBadge}[data-phase=waiting]`);
  assert.match(await page.textContent(coordBadge), /waiting on report-draft/);
  await page.waitForFunction((full) => [...document.querySelectorAll('#coord-lines li.role-assistant bdi')].some((b) => b.textContent === full), first);
  assert.equal(await page.isEnabled('[data-testid=coord-agent] [data-testid=agent-stop]'), true, 'a waiting turn can be stopped');
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, 'actors-desk-agents-waiting.png'), fullPage: true });

  // The person tells the child to finish: its agent calls set_status done; the parent's wait
  // is over and its turn resumes by itself. (The parent's and the child's last steps are
  // asked at about the same time, so both get the same scripted answer.)
  models.script([{ text: 'Wrapping up.', calls: [{ id: 'call-done', name: 'set_status', arguments: { status: 'done', summary: 'The report draft is finished.' } }] }, { text: done }, { text: done }]);
  await page.click('[data-testid=tree] .tnode[data-node="report-draft"]');
  await page.waitForSelector('[data-testid=fork-panel][data-node="report-draft"]');
  await page.fill('#fork-input', 'Wrap up now.');
  await page.press('#fork-input', 'Enter');
  // In the task's fork panel the call shows with its arguments, and its result.
  await page.waitForSelector('[data-testid=fork-transcript] .call[data-tool="set_status"]', { timeout: 20_000 });
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=fork-transcript] li.agent-tool_result')].some((l) => l.textContent.includes('set_status')));
  await page.waitForSelector('[data-testid=tree] .tnode[data-node="report-draft"][data-status="done"]', { timeout: 20_000 });
  await page.waitForFunction((text) => [...document.querySelectorAll('#coord-lines li.role-assistant bdi')].some((b) => b.textContent === text), done, { timeout: 20_000 });
  await page.waitForSelector(`${coordBadge}[data-phase=idle]`, { timeout: 20_000 });
  await page.waitForSelector('#coord-lines li.agent-wait_end');
  await page.waitForFunction((text) => [...document.querySelectorAll('[data-testid=fork-transcript] li.role-assistant bdi')].some((b) => b.textContent === text), done, { timeout: 20_000 });
  await page.waitForSelector('[data-testid=fork-agent] [data-testid=agent-badge][data-phase=idle]', { timeout: 20_000 });

  // On disk: the wait and its end are lines of the coordinator; one turn, completed.
  const coord = lines('coordinator').filter((l) => l.agent);
  const kinds = coord.map((l) => l.agent.entry);
  assert.deepEqual(
    kinds.filter((k) => k === 'wait' || k === 'wait_end' || k === 'turn_start' || k === 'turn_end'),
    ['turn_start', 'wait', 'wait_end', 'turn_end'],
    kinds.join(','),
  );
  assert.equal(coord.find((l) => l.agent.entry === 'wait_end').agent.outcome, 'resumed');
  assert.equal(coord.find((l) => l.agent.entry === 'turn_end').agent.end, 'completed');
  assert.equal(models.requests().length, 5);

  const shot = join(artifacts, 'actors-desk-agents.png');
  await page.screenshot({ path: shot, fullPage: true });
  assert.ok(existsSync(shot));
  // The grid shows the child too, with its status and its agent's badge.
  await page.click('[data-testid=view-grid]');
  await page.waitForSelector('[data-testid=grid] .tile[data-node="report-draft"][data-status="done"] [data-testid=agent-badge][data-phase=idle]');

  // A reload while the step streams: the bubble comes back with the text streamed before the
  // reload and keeps growing. Then Stop: a turn whose model never finishes is interrupted.
  const slow = 'Thinking about it, slowly and with care, one piece at a time.';
  models.script([{ text: slow, chunkSize: 4, delayMs: 150, hang: true }]);
  await page.fill('#coord-input', 'One more thing.');
  await page.press('#coord-input', 'Enter');
  await page.waitForSelector(`${coordBadge}[data-phase=running]`, { timeout: 20_000 });
  const bubbleText = () => document.querySelector('#coord-lines [data-testid=live-bubble] bdi')?.textContent ?? '';
  const seen = await (
    await page.waitForFunction(
      (full) => {
        const t = document.querySelector('#coord-lines [data-testid=live-bubble] bdi')?.textContent ?? '';
        return t.length >= 8 && t.length < full.length / 2 && full.startsWith(t) ? t : null;
      },
      slow,
      { timeout: 20_000, polling: 20 },
    )
  ).jsonValue();
  await page.reload();
  await page.waitForSelector('[data-testid=token-form]:not(.is-hidden)');
  await page.fill('#token', HUMAN);
  await page.click('[data-testid=token-form] button[type=submit]');
  const restored = await (
    await page.waitForFunction(
      (want) => {
        const t = document.querySelector('#coord-lines [data-testid=live-bubble] bdi')?.textContent ?? '';
        return t.length >= want.length ? t : null;
      },
      seen,
      { timeout: 20_000, polling: 20 },
    )
  ).jsonValue();
  assert.ok(restored.startsWith(seen) && slow.startsWith(restored), `${JSON.stringify(seen)} → ${JSON.stringify(restored)}`);
  // The deltas after the reload join the restored text exactly.
  await page.waitForFunction((full) => document.querySelector('#coord-lines [data-testid=live-bubble] bdi')?.textContent === full, slow, { timeout: 20_000 });
  assert.equal(await page.evaluate(bubbleText), slow);
  await page.click('[data-testid=coord-agent] [data-testid=agent-stop]');
  await page.waitForSelector(`${coordBadge}[data-phase=idle]`, { timeout: 20_000 });
  await page.waitForSelector('#coord-lines li.agent-turn_end.turn-not-completed');
  await page.waitForSelector('#coord-lines [data-testid=live-bubble]', { state: 'detached' });
  const last = lines('coordinator').filter((l) => l.agent?.entry === 'turn_end').at(-1);
  assert.equal(last.agent.end, 'interrupted');
  assert.deepEqual(errors, []);
  await page.close();
});

test('without a model the desk says so and the built-in model answers; without the agents API it works as before', { timeout: 60_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'weft-desk-nomodel-'));
  const env = { ...process.env };
  delete process.env.OPENAI_API_KEY;
  delete process.env.ANTHROPIC_API_KEY;
  delete process.env.WEFT_MODEL;
  delete process.env.WEFT_MODEL_BASE_URL;
  const bare = await startServe(['--chat-root', join(dir, 'chat')]);
  Object.assign(process.env, env);
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 860 } });
    await openDesk(page, bare.url);
    await page.waitForSelector('[data-testid=model-banner]:not(.is-hidden)');
    assert.match(await page.textContent('[data-testid=model-banner]'), /No model is configured.*built-in deterministic model answers/s);
    const before = await page.$$eval('#coord-lines li.role-assistant', (l) => l.length);
    await page.fill('#coord-input', 'Hello there.');
    await page.press('#coord-input', 'Enter');
    await page.waitForFunction((n) => document.querySelectorAll('#coord-lines li.role-assistant:not(.streaming)').length > n, before, { timeout: 20_000 });
    await page.waitForSelector(`${coordBadge}[data-phase=idle]`);
    await page.close();

    // An older server without the agents API (404): the page works as before, without the
    // agent parts, and routes messages itself.
    const old = await browser.newPage({ viewport: { width: 1400, height: 860 } });
    await old.route('**/api/actors/agents', (r) => r.fulfill({ status: 404, body: '' }));
    const posted = [];
    old.on('request', (r) => r.method() === 'POST' && posted.push(new URL(r.url()).pathname));
    const errors = [];
    old.on('pageerror', (e) => errors.push(String(e)));
    await openDesk(old, bare.url);
    await old.waitForFunction(() => document.querySelectorAll('#coord-lines li').length > 0);
    await old.fill('#coord-input', 'Routed by the desk.');
    await old.press('#coord-input', 'Enter');
    await old.waitForFunction(() => [...document.querySelectorAll('#coord-lines li bdi')].some((b) => b.textContent === 'Routed by the desk.'));
    assert.deepEqual(posted, ['/api/actors/nodes/coordinator/route']);
    assert.equal(await old.isVisible('[data-testid=model-banner]'), false);
    assert.equal(await old.isVisible('[data-testid=coord-agent]'), false);
    assert.equal(await old.$$eval('[data-testid=agent-badge]', (b) => b.length), 0);
    assert.deepEqual(errors, []);
    await old.close();
  } finally {
    await bare.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
