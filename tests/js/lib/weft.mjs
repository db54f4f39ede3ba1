// The native `weft` binary for JS tests: builds it (a no-op when current), starts `weft serve`
// on a free loopback port with a temporary data directory, runs `weft agent`.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { repoRoot } from './server.mjs';

export const HUMAN = 'human-token-for-js-tests';
export const AGENT = 'agent-token-for-js-tests';

let binary;
/** Path of the debug `weft` binary, built if needed. */
export function weftBinary() {
  if (process.env.WEFT_BIN) return process.env.WEFT_BIN;
  if (!binary) {
    execFileSync('cargo', ['build', '--quiet', '-p', 'weft-host', '--bin', 'weft'], { cwd: repoRoot, stdio: 'inherit' });
    const meta = JSON.parse(execFileSync('cargo', ['metadata', '--format-version', '1', '--no-deps'], { cwd: repoRoot }));
    binary = join(meta.target_directory, 'debug', 'weft');
  }
  return binary;
}

/** Starts `weft serve`; resolves to {url, close}. */
export async function startServe(extra = []) {
  const dir = mkdtempSync(join(tmpdir(), 'weft-js-'));
  const child = spawn(weftBinary(), ['serve', '--listen', '127.0.0.1:0', '--data-dir', dir, ...extra], {
    env: { ...process.env, WEFT_HUMAN_TOKEN: HUMAN, WEFT_AGENT_TOKEN: AGENT },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`weft serve exited with ${code}`)));
    lines.once('line', (l) => resolve(l.match(/http:\/\/\S+/)[0].replace(/\/$/, '')));
  });
  lines.on('line', () => {});
  return {
    url,
    close: async () => {
      const done = new Promise((r) => child.once('exit', r));
      child.kill('SIGINT');
      await done;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Runs `weft agent` against `url`; resolves to its JSON-line events. */
export function runAgent(url, args = []) {
  const out = execFileSync(weftBinary(), ['agent', '--base-url', url, ...args], {
    env: { ...process.env, WEFT_AGENT_TOKEN: AGENT },
    encoding: 'utf8',
  });
  return out.trim().split('\n').map((l) => JSON.parse(l));
}
