// Model providers in headless Chromium: the page imports the package as a web app with agents
// does (/wasm/pkg/entry-apps.js, `weft/apps`) and its agent streams from the scripted model server started here in
// the Node test process, on another origin (so every request is a CORS request, preflighted
// for its key headers). The scenarios are tests/js/model-scenarios.mjs, in both wire formats.
// The models WebAssembly module and the host loop (models-impl.js) are fetched on the first
// model step, not by `import 'weft'`.
import { after, before, test } from 'node:test';
import { launch } from '../lib/browser.mjs';
import { serveStatic } from '../lib/server.mjs';
import { startModelServer } from '../../model-server/server.mjs';
import { modelScenarios } from '../model-scenarios.mjs';

let server;
let models;
let browser;
let page;
const fetched = [];

before(async () => {
  server = await serveStatic();
  models = await startModelServer({ port: 0 });
  browser = await launch();
  page = await browser.newPage();
  page.on('pageerror', (e) => console.error('page error:', e));
  page.on('request', (r) => {
    const m = /\/(weft_[a-z]+(?:_bg\.wasm|\.js)|models-impl\.js)$/.exec(new URL(r.url()).pathname);
    if (m) fetched.push(m[1]);
  });
  await page.goto(`${server.url}/tests/js/browser/modules.html`);
});

after(async () => {
  await browser?.close();
  await models?.close();
  await server?.close();
});

const run = (name, provider) =>
  page.evaluate(
    async ({ name, provider, url }) => {
      try {
        const weft = await import('/wasm/pkg/entry-apps.js');
        const { modelScenarios } = await import('/tests/js/model-scenarios.mjs');
        await modelScenarios[name]({ weft, url, provider });
        return { ok: true };
      } catch (err) {
        return { ok: false, error: String(err?.stack ?? err) };
      }
    },
    { name, provider, url: models.url },
  );

test('importing weft does not fetch the models module', { timeout: 30_000 }, async () => {
  const names = await page.evaluate(async () => Object.keys(await import('/wasm/pkg/index.js')));
  for (const n of ['openaiModel', 'anthropicModel', 'builtinModel', 'resolveModel']) {
    if (!names.includes(n)) throw new Error(`weft exports ${n}`);
  }
  if (fetched.some((f) => f.startsWith('weft_models') || f === 'models-impl.js')) throw new Error(`fetched ${fetched}`);
});

for (const provider of ['openai', 'anthropic']) {
  for (const name of Object.keys(modelScenarios)) {
    test(`Chromium, ${provider}: ${name}`, { timeout: 30_000 }, async () => {
      const r = await run(name, provider);
      if (!r.ok) throw new Error(r.error);
    });
  }
}

test('the models module and its host loop were fetched once, on the first model step', () => {
  for (const file of ['weft_models_bg.wasm', 'weft_models.js', 'models-impl.js']) {
    const n = fetched.filter((f) => f === file).length;
    if (n !== 1) throw new Error(`${file} fetched ${n} times (${fetched})`);
  }
});
