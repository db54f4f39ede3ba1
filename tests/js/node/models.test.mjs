// Model providers in Node: the JS agent with `openaiModel` / `anthropicModel` against the
// scripted local model server (tests/model-server/server.mjs), every scenario in both wire
// formats (tests/js/model-scenarios.mjs, shared with the Chromium test), plus the built-in
// model, the resolution rule and Node-only checks (timeouts, a refused connection).
import { after, before, test } from 'node:test';
import * as weft from 'weft';
import { startModelServer } from '../../model-server/server.mjs';
import { builtinScenario, modelScenarios } from '../model-scenarios.mjs';

let server;

before(async () => {
  server = await startModelServer({ port: 0 });
});

after(async () => {
  await server?.close();
});

for (const provider of ['openai', 'anthropic']) {
  for (const [name, run] of Object.entries(modelScenarios)) {
    test(`${provider}: ${name}`, { timeout: 20_000 }, () => run({ weft, url: server.url, provider }));
  }
}

test('no model configured: the built-in model says so; the resolution rule', { timeout: 20_000 }, () => builtinScenario({ weft }));

test('a silent model times out with MODEL_TIMEOUT; a refused connection is MODEL_CONNECT', { timeout: 20_000 }, async () => {
  server.reset();
  server.script([{ text: 'never finishes', hang: true }]);
  const model = weft.openaiModel({ baseUrl: `${server.url}/v1`, model: 'm', timeouts: { idleMs: 50 } });
  await expectCode(model({ messages: [{ role: 'task', task: 1, input: 'hi' }], tools: [] }), 'MODEL_TIMEOUT');
  for (let i = 0; i < 100 && !server.requests()[0]?.closedByClient; i++) await new Promise((r) => setTimeout(r, 10));
  if (!server.requests()[0].closedByClient) throw new Error('the timed-out connection was not dropped');
  // A port nothing listens on (the server's own, once closed).
  const gone = await startModelServer({ port: 0 });
  await gone.close();
  const refused = weft.anthropicModel({ baseUrl: gone.url, model: 'm', retry: { maxAttempts: 1 } });
  await expectCode(refused({ messages: [], tools: [] }), 'MODEL_CONNECT');
});

async function expectCode(promise, code) {
  try {
    await promise;
  } catch (err) {
    if (!(err instanceof weft.WeftError) || err.code !== code) throw new Error(`expected ${code}, got ${err?.code}: ${err?.message}`);
    return err;
  }
  throw new Error(`expected ${code}, got an answer`);
}
