// ThreadDesk's browser UI in real Chromium against a real `weft serve`: two tabs (a note in one,
// the stale action refused in the other), text rendered as text, verified images, the agent
// token refused for publication, a human publishing, and live updates (another principal's
// commit and a policy change shown without a reload; a cut stream reconnects and catches up). Screenshots go to tests/artifacts/.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launch } from '../lib/browser.mjs';
import { repoRoot } from '../lib/server.mjs';
import { AGENT, HUMAN, runAgent, startServe } from '../lib/weft.mjs';

const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mP8/x8AAwMCAO+/l6cAAAAASUVORK5CYII=', 'base64');
const artifacts = join(repoRoot, 'tests', 'artifacts');
const HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> ✓ Before another retry, check the DB migration.';

let serve;
let browser;

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  serve = await startServe();
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await serve?.close();
});

async function openTab(token, { live = true } = {}) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
  const page = await ctx.newPage();
  page.on('pageerror', (e) => console.error('page error:', e));
  // A tab without live updates (its stream cut, as on a lost connection) keeps the frame it read.
  if (!live) await page.route('**/threaddesk/events', (route) => route.abort());
  await page.goto(`${serve.url}/`);
  await page.fill('#token', token);
  await connect(page);
  return page;
}

async function connect(page) {
  const before = await page.getAttribute('body', 'data-ready');
  await page.click('#connect button[type=submit]');
  await page.waitForFunction((b) => document.body.getAttribute('data-ready') !== b, before);
}

const card = (page, surface) => page.locator(`article[data-surface="${surface}"]`);

test('two tabs: a note in one makes the other tab’s action stale; text stays text', { timeout: 60_000 }, async () => {
  const a = await openTab(HUMAN);
  const b = await openTab(HUMAN, { live: false });
  const frameB = await card(b, 'thread-42').getAttribute('data-frame');

  // Tab A adds a note full of markup.
  await card(a, 'thread-42').locator('section[data-node="note"] textarea').fill(HOSTILE);
  const ready = await a.getAttribute('body', 'data-ready');
  await card(a, 'thread-42').locator('section[data-node="note"] button').click();
  await a.waitForFunction((r) => document.body.getAttribute('data-ready') !== r, ready);
  const note = card(a, 'thread-42').locator('[data-evidence="note-0"] pre');
  assert.equal(await note.textContent(), HOSTILE, 'rendered as text');
  assert.equal(await a.evaluate(() => window.__pwned), undefined, 'no script ran');
  assert.equal(await a.locator('#threads script').count(), 0);
  assert.equal(await a.locator('#threads img[src="x"]').count(), 0);

  // Tab B (its live stream cut) still shows the old frame; its retry is refused as stale.
  assert.equal(await b.getAttribute('#live', 'data-state'), 'reconnecting');
  assert.equal(await card(b, 'thread-42').getAttribute('data-frame'), frameB);
  await card(b, 'thread-42').locator('button[data-option="retry"]').click();
  const err = card(b, 'thread-42').locator('[data-role="error"]');
  await err.filter({ hasText: 'STALE_FRAME' }).waitFor();
  assert.match(await err.textContent(), /another tab/);
  assert.match(await b.locator('#alert').textContent(), /STALE_FRAME/);
  await b.screenshot({ path: join(artifacts, 'threaddesk-stale-tab.png'), fullPage: true });

  // Refreshing B reads a new frame that includes the note, still as text.
  await connect(b);
  assert.notEqual(await card(b, 'thread-42').getAttribute('data-frame'), frameB);
  assert.equal(await card(b, 'thread-42').locator('[data-evidence="note-0"] pre').textContent(), HOSTILE);
  assert.match(await card(b, 'thread-42').locator('[data-role="meta"]').textContent(), /thread:thread-42@2/);
  await a.context().close();
  await b.context().close();
});

test('images are verified before display; a tampered blob is not shown', { timeout: 60_000 }, async () => {
  const page = await openTab(HUMAN);
  const section = card(page, 'thread-73').locator('section[data-node="attach_image"]');
  await section.locator('input[type=file]').setInputFiles({ name: 'evidence.png', mimeType: 'image/png', buffer: PNG });
  const ready = await page.getAttribute('body', 'data-ready');
  await section.locator('button').click();
  await page.waitForFunction((r) => document.body.getAttribute('data-ready') !== r, ready);
  const img = card(page, 'thread-73').locator('[data-evidence="image-0"] img[data-verified="true"]');
  await img.waitFor();
  assert.ok(await img.evaluate((i) => i.complete && i.naturalWidth === 1), 'the verified image decodes');

  // The same page, but the server's bytes are swapped in transit: the hash check refuses them.
  await page.route('**/dgp/blobs/**', (route) => route.fulfill({ status: 200, contentType: 'image/png', body: Buffer.concat([PNG.subarray(0, 60), Buffer.alloc(8)]) }));
  await connect(page);
  await card(page, 'thread-73').locator('[data-image-error="image-0"]').waitFor();
  assert.equal(await card(page, 'thread-73').locator('[data-evidence="image-0"] img').count(), 0);
  assert.match(await card(page, 'thread-73').locator('[data-image-error="image-0"]').textContent(), /integrity check failed/);
  await page.context().close();
});

test('publication: the agent token is refused whatever the page shows; a human publishes', { timeout: 60_000 }, async () => {
  const events = runAgent(serve.url, ['--surface', 'thread-42']);
  assert.equal(events.at(-1).event, 'human_review_required');

  const agentTab = await openTab(AGENT);
  await card(agentTab, 'thread-42').locator('button[data-option="publish"]').click();
  await card(agentTab, 'thread-42').locator('[data-role="error"]').filter({ hasText: 'HUMAN_APPROVAL_REQUIRED' }).waitFor();

  const human = await openTab(HUMAN);
  const draft = await card(human, 'thread-42').locator('[data-evidence="draft"] pre').textContent();
  assert.match(draft, /FIXTURE DRAFT/);
  const ready = await human.getAttribute('body', 'data-ready');
  await card(human, 'thread-42').locator('button[data-option="publish"]').click();
  await human.waitForFunction((r) => document.body.getAttribute('data-ready') !== r, ready);
  assert.deepEqual(await human.locator('#bulletin li').allTextContents(), [draft]);
  const receipt = JSON.parse(await human.locator('#receipt').textContent());
  assert.equal(receipt.status, 'succeeded');
  assert.equal(receipt.submitted_by, 'human-local');
  assert.match(await card(human, 'thread-42').locator('[data-role="meta"]').textContent(), /State: published/);
  await human.screenshot({ path: join(artifacts, 'threaddesk-published.png'), fullPage: true });
  await agentTab.context().close();
  await human.context().close();
});

test('notes past the frame budget are counted and paged in with "Show earlier"', { timeout: 60_000 }, async () => {
  const own = await startServe(['--extra-threads', '1']);
  try {
    const call = async (path, body, key) => {
      const headers = { Authorization: `Bearer ${AGENT}` };
      if (body) headers['Content-Type'] = 'application/json';
      if (key) headers['Idempotency-Key'] = key;
      const r = await fetch(`${own.url}${path}`, { method: body ? 'POST' : 'GET', headers, body: body && JSON.stringify(body) });
      assert.equal(r.status, 200, path);
      return r.json();
    };
    // 24 notes of 4,000 characters: more than one 64 KiB frame shows.
    for (let i = 0; i < 24; i++) {
      const f = await call('/dgp/surfaces/thread-1000/frame');
      const decision_id = `${f.frame_id}:note`;
      const a = { dgp: '0.1', assessment_id: `a-page-${i}`, frame_id: f.frame_id, decision_id, mode: 'live', resolver: { kind: 'rule' },
        result: { status: 'answered', answer: { value: { text: `${String(i).padStart(2, '0')} ${'n'.repeat(3996)}` } } } };
      await call('/dgp/assessments', a);
      await call('/dgp/commits', { dgp: '0.1', frame_id: f.frame_id, decision_id, assessment_id: a.assessment_id }, `k-page-${i}`);
    }
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    page.on('pageerror', (e) => console.error('page error:', e));
    await page.goto(`${own.url}/`);
    await page.fill('#token', HUMAN);
    await connect(page);
    const c = card(page, 'thread-1000');
    const notes = c.locator('[data-evidence^="note-"]:not([data-evidence="note-log"])');
    const first = await notes.count();
    assert.ok(first > 0 && first < 24, `the frame shows the newest notes only (${first})`);
    assert.match(await c.locator('[data-log="note"] [data-role="log-count"]').textContent(), /^24 note item\(s\); showing the newest \d+$/);
    assert.equal(await c.locator('[data-evidence="note-23"] pre').textContent(), `23 ${'n'.repeat(3996)}`);
    const more = c.locator('[data-role="earlier-button"]');
    while (await more.count()) {
      const before = await notes.count();
      await more.click();
      await page.waitForFunction(([s, n]) => document.querySelectorAll(`article[data-surface="${s}"] [data-evidence^="note-"]`).length > n, ['thread-1000', before]);
    }
    assert.equal(await notes.count(), 24);
    assert.equal(await c.locator('[data-evidence="note-0"] pre').textContent(), `00 ${'n'.repeat(3996)}`);
    assert.match(await c.locator('[data-log="note"] [data-role="log-count"]').textContent(), /showing the newest 24 \(all\)/);
    await ctx.close();
  } finally {
    await own.close();
  }
});

test('live: another principal’s commit and a policy change show without a reload; a cut stream catches up', { timeout: 60_000 }, async () => {
  const call = async (path, body, key, token = AGENT) => {
    const headers = { Authorization: `Bearer ${token}` };
    if (body) headers['Content-Type'] = 'application/json';
    if (key) headers['Idempotency-Key'] = key;
    const r = await fetch(`${serve.url}${path}`, { method: body ? 'POST' : 'GET', headers, body: body && JSON.stringify(body) });
    assert.equal(r.status, 200, path);
    return r.json();
  };
  const agentNote = async (text) => {
    const f = await call('/dgp/surfaces/thread-73/frame');
    const decision_id = `${f.frame_id}:note`;
    const a = { dgp: '0.1', assessment_id: `a-${randomUUID()}`, frame_id: f.frame_id, decision_id, mode: 'live', resolver: { kind: 'rule' },
      result: { status: 'answered', answer: { value: { text } } } };
    await call('/dgp/assessments', a);
    return call('/dgp/commits', { dgp: '0.1', frame_id: f.frame_id, decision_id, assessment_id: a.assessment_id }, `k-${randomUUID()}`);
  };
  const page = await openTab(HUMAN);
  await page.waitForSelector('#live[data-state="live"]');
  await page.evaluate(() => { window.__sameDocument = true; });
  const c = card(page, 'thread-73');
  const other = await card(page, 'thread-42').getAttribute('data-frame');

  // The agent commits a note through the HTTP API: the open page shows it, in place.
  const receipt = await agentNote('live note from the agent');
  await c.locator('[data-evidence^="note-"] pre', { hasText: 'live note from the agent' }).waitFor();
  assert.equal(await c.getAttribute('data-revision'), String(receipt.state_revision));
  assert.match(await c.locator('[data-role="meta"]').textContent(), new RegExp(`thread:thread-73@${receipt.state_revision}`));
  assert.equal(await card(page, 'thread-42').getAttribute('data-frame'), other, 'only the changed thread was re-read');

  // A policy change makes every frame stale: every card re-reads it.
  const { policy_ref } = await call('/threaddesk/policy', {}, undefined, HUMAN);
  await page.waitForFunction((p) => Array.from(document.querySelectorAll('article [data-role="meta"]')).every((m) => m.textContent.includes(p)), policy_ref);
  assert.notEqual(await card(page, 'thread-42').getAttribute('data-frame'), other);

  // The stream is cut: the page says so; a commit made meanwhile is shown once it reconnects.
  await page.route('**/threaddesk/events', (route) => route.abort());
  await connect(page);
  await page.waitForSelector('#live[data-state="reconnecting"]');
  await agentNote('note made while the page was not listening');
  assert.equal(await c.locator('[data-evidence^="note-"] pre', { hasText: 'not listening' }).count(), 0);
  await page.unroute('**/threaddesk/events');
  await page.waitForSelector('#live[data-state="live"]');
  await c.locator('[data-evidence^="note-"] pre', { hasText: 'note made while the page was not listening' }).waitFor();
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'no reload');
  await page.context().close();
});
