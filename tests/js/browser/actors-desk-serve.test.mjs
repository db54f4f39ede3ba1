// The actor desk inside `weft serve --chat-root` in headless Chromium: the page asks for the
// human token (an agent token is refused), then works live with it (the event stream carries
// the token); text with bidi controls is shown isolated, as text.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launch } from '../lib/browser.mjs';
import { AGENT, HUMAN, startServe } from '../lib/weft.mjs';

let serve;
let browser;
let chatDir;

before(async () => {
  chatDir = mkdtempSync(join(tmpdir(), 'weft-desk-serve-'));
  serve = await startServe(['--chat-root', join(chatDir, 'chat')]);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await serve?.close();
  if (chatDir) rmSync(chatDir, { recursive: true, force: true });
});

async function api(path, body, token = HUMAN) {
  const res = await fetch(`${serve.url}/api/actors${path}`, {
    method: body ? 'POST' : 'GET',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json() };
}

test('the desk asks for the human token, refuses the agent token, then works live', { timeout: 60_000 }, async () => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 860 } });
  page.on('pageerror', (e) => console.error('page error:', e));
  await page.goto(`${serve.url}/actors/`);
  await page.evaluate(() => {
    window.__sameDocument = true;
  });
  // Without a token nothing is shown but the prompt.
  await page.waitForSelector('[data-testid=token-form]:not(.is-hidden)');
  assert.match(await page.textContent('#token-why'), /needs the human token/);

  await page.fill('#token', AGENT);
  await page.click('[data-testid=token-form] button[type=submit]');
  await page.waitForSelector('[data-testid=token-form]:not(.is-hidden)');
  await page.waitForFunction(() => document.querySelector('#token-why').textContent.includes('not the human token'));

  await page.fill('#token', HUMAN);
  await page.click('[data-testid=token-form] button[type=submit]');
  await page.waitForSelector('[data-testid=token-form].is-hidden', { state: 'attached' });
  await page.click('[data-testid=view-grid]');
  await page.waitForSelector('[data-testid=grid]');

  // A change made elsewhere arrives over the token-carrying event stream.
  const spoof = 'invoice \u202Etxt.exe';
  const made = await api('/spawn', { parent: 'coordinator', id: 'spoof', type: 'task', title: spoof });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  await page.waitForSelector('[data-testid=grid] .tile[data-node="spoof"]', { timeout: 10_000 });
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'no reload happened');

  // The title is text, isolated: its override cannot reorder what surrounds it.
  const title = await page.$eval('[data-testid=grid] .tile[data-node="spoof"] .title', (e) => ({
    text: e.textContent,
    bidi: getComputedStyle(e).unicodeBidi,
    dir: e.getAttribute('dir'),
  }));
  assert.deepEqual(title, { text: spoof, bidi: 'isolate', dir: 'auto' });

  // Messages are shown in <bdi> elements.
  assert.equal((await api('/nodes/spoof/messages', { text: `note \u202Eevil` })).status, 200);
  await page.click('[data-testid=grid] .tile[data-node="spoof"]');
  await page.waitForFunction(() =>
    [...document.querySelectorAll('[data-testid=fork-transcript] li bdi')].some((b) => b.textContent === 'note \u202Eevil'),
  );
  // Ids with bidi controls are refused with the core's code.
  const bad = await api('/spawn', { parent: 'coordinator', id: 'a\u202Eb', title: 'x' });
  assert.deepEqual([bad.status, bad.body.code], [400, 'INVALID_NODE_ID']);
  await page.close();
});
