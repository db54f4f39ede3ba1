// The actor desk in headless Chromium against a real `weft actors desk` on a real $CHAT_ROOT:
// spawn from the tree's `+`, watch a grid tile change status without reloading, open the fork
// panel, scrub the timeline; the spare node directories in the status area, and the warning
// when the store cannot make them. Saves tests/artifacts/actors-desk.png.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { launch } from '../lib/browser.mjs';
import { repoRoot } from '../lib/server.mjs';

function weftBin() {
  if (process.env.WEFT_BIN) return process.env.WEFT_BIN;
  const built = spawnSync('cargo', ['build', '-q', '-p', 'weft-host'], { cwd: repoRoot, stdio: 'inherit' });
  assert.equal(built.status, 0, 'cargo build -p weft-host');
  const meta = JSON.parse(spawnSync('cargo', ['metadata', '--format-version', '1', '--no-deps'], { cwd: repoRoot }).stdout);
  return join(meta.target_directory, 'debug', 'weft');
}

let bin;
let root;
let desk;
let url;
let browser;
let page;

function weft(...args) {
  const r = spawnSync(bin, ['actors', ...args, '--json'], { encoding: 'utf8' });
  assert.equal(r.status, 0, `weft actors ${args.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

async function api(path, body) {
  const res = await fetch(`${url}/api/actors${path}`, {
    method: body ? 'POST' : 'GET',
    headers: { 'content-type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
  });
  const data = await res.json();
  assert.ok(res.ok, `${path}: ${JSON.stringify(data)}`);
  return data;
}

before(async () => {
  bin = weftBin();
  root = join(mkdtempSync(join(tmpdir(), 'weft-desk-')), 'chat');
  weft('init', root, '--title', 'Desk test');
  weft('spawn', root, '--parent', 'coordinator', '--type', 'task', '--title', 'docs sync', '--reason', 'multi-repo docs');
  desk = spawn(bin, ['actors', 'desk', root, '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const first = await new Promise((resolve, reject) => {
    createInterface({ input: desk.stdout }).once('line', resolve);
    desk.once('exit', (c) => reject(new Error(`the desk exited (${c})`)));
  });
  url = first.match(/http:\/\/[^/ ]+/)[0];
  browser = await launch();
  page = await browser.newPage({ viewport: { width: 1400, height: 860 } });
  page.on('pageerror', (e) => console.error('page error:', e));
  await page.goto(`${url}/actors/`);
  await page.evaluate(() => {
    window.__sameDocument = true;
  });
});

after(async () => {
  await browser?.close();
  desk?.kill('SIGKILL');
  if (root) rmSync(join(root, '..'), { recursive: true, force: true });
});

test('spawn from the tree, watch a tile change status live, open the fork panel', { timeout: 60_000 }, async () => {
  await page.click('[data-testid=view-tree]');
  await page.waitForSelector('[data-testid=tree] .tnode[data-node="docs-sync"]');
  // `+` on the coordinator spawns a child on that branch.
  await page.click('.spawn-plus[data-parent="coordinator"]');
  await page.selectOption('#spawn-type', 'task');
  await page.fill('#spawn-title', 'release notes');
  await page.click('[data-testid=spawn-submit]');
  await page.waitForSelector('[data-testid=tree] .tnode[data-node="release-notes"]');
  // The spawn is durable on disk with its lineage.
  const meta = JSON.parse(readFileSync(join(root, 'nodes/release-notes/meta.json'), 'utf8'));
  assert.equal(meta.spawnedBy, 'coordinator');
  assert.equal(meta.gitCloseout, 'coordinator-batch');
  const coord = JSON.parse(readFileSync(join(root, 'nodes/coordinator/meta.json'), 'utf8'));
  assert.deepEqual(coord.spawned, ['docs-sync', 'release-notes']);
  // The coordinator thread shows the routing marker, not the child's lines.
  await page.waitForFunction(() => document.querySelector('#coord-lines').textContent.includes('spawned task `release-notes`'));
  // The graph strip shows the lineage of the selected (new) node.
  await page.waitForSelector('#strip [data-node="coordinator"]');
  await page.waitForSelector('#strip [data-node="release-notes"]');

  // Grid: a status change made elsewhere arrives without reloading the page.
  await page.click('[data-testid=view-grid]');
  await page.waitForSelector('[data-testid=grid] .tile[data-node="release-notes"][data-status="idle"]');
  await api('/nodes/release-notes/status', { status: 'running', summary: 'drafting the notes' });
  await page.waitForSelector('[data-testid=grid] .tile[data-node="release-notes"][data-status="running"]', { timeout: 10_000 });
  await api('/nodes/docs-sync/status', { status: 'blocked', summary: 'needs runner access' });
  await page.waitForSelector('[data-testid=grid] .tile[data-node="docs-sync"][data-status="blocked"]', { timeout: 10_000 });
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'no reload happened');
  assert.match(await page.textContent('#run-chip'), /1 of 2 running/);

  // Fork panel: the full transcript of the node.
  await page.click('[data-testid=grid] .tile[data-node="release-notes"]');
  await page.waitForSelector('[data-testid=fork-panel][data-node="release-notes"]');
  await page.waitForFunction(() => document.querySelector('[data-testid=fork-transcript]').textContent.includes('GIT_CLOSEOUT=coordinator-batch'));
  await page.fill('#fork-input', 'Start from the merged PR list.');
  await page.press('#fork-input', 'Enter');
  await page.waitForFunction(() => document.querySelector('[data-testid=fork-transcript]').textContent.includes('Start from the merged PR list.'));
  const chat = readFileSync(join(root, 'nodes/release-notes/chat.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(chat.at(-1).text, 'Start from the merged PR list.');

  // Temporal scrubber: at the session's start the later nodes were not there yet.
  await page.$eval('[data-testid=scrubber]', (e) => {
    e.value = '0';
    e.dispatchEvent(new Event('input'));
  });
  await page.waitForSelector('[data-testid=grid] .tile[data-node="release-notes"].not-yet');
  await page.click('#scrub-live');
  await page.waitForSelector('[data-testid=grid] .tile[data-node="release-notes"]:not(.not-yet)');

  // Linear: discussion cadence with a compact worker list.
  await page.click('[data-testid=view-linear]');
  await page.waitForSelector('[data-testid=linear] .workers [data-node="release-notes"]');
  await page.click('[data-testid=view-grid]');
  await page.waitForSelector('[data-testid=grid] .tile[data-node="release-notes"]');

  mkdirSync(join(repoRoot, 'tests/artifacts'), { recursive: true });
  const shot = join(repoRoot, 'tests/artifacts/actors-desk.png');
  await page.screenshot({ path: shot, fullPage: true });
  assert.ok(existsSync(shot));
});

test('the status area shows the spare node directories and warns when they cannot be made', { timeout: 60_000 }, async () => {
  // The chip says what the store says (`GET /api/actors/store`), read on refreshes and polls.
  const want = async () => {
    const sp = (await api('/store')).spareNodes;
    return `spare nodes ${sp.ready} ready, ${sp.used} used`;
  };
  assert.equal((await api('/store')).spareNodes.keep, 32);
  await page.waitForSelector('[data-testid=spare-chip]:not(.is-hidden)');
  await page.waitForFunction(async (w) => document.querySelector('[data-testid=spare-chip]').textContent === w, await want(), { timeout: 15_000 });
  assert.ok(await page.$eval('[data-testid=spare-banner]', (e) => e.classList.contains('is-hidden')), 'no warning');
  // `.weft/` replaced by a file: the spawn is refused, the store says it is failing, and the
  // page shows its error.
  rmSync(join(root, '.weft'), { recursive: true, force: true });
  writeFileSync(join(root, '.weft'), 'not a directory');
  const res = await fetch(`${url}/api/actors/spawn`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ parent: 'coordinator', type: 'task', title: 'no room' }),
  });
  assert.equal((await res.json()).code, 'STORE_IO');
  await page.waitForSelector('[data-testid=spare-banner]:not(.is-hidden)', { timeout: 20_000 });
  assert.match(await page.textContent('[data-testid=spare-banner]'), /Spare node directories cannot be made: make a spare in \.weft\/: \.weft\/ cannot be opened/);
  assert.match(await page.textContent('[data-testid=spare-chip]'), /, failing$/);
  assert.ok(await page.$eval('[data-testid=spare-chip]', (e) => e.classList.contains('warn')));
});
