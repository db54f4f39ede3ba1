// Model streaming overhead in wasm under Node (issue 10's benchmark, JS half):
//
// 1. Tokens/s parsed: a 10k-token reply (one SSE event per token) in each wire format, fed to
//    `openaiModel` / `anthropicModel` by a `fetch` that answers from memory, so the figure is the
//    codec (weft_models_bg.wasm) plus the JS host loop and nothing of a network. Cut in 4 KiB
//    body chunks (what a socket delivers) and one event per chunk (the worst case), with and
//    without an `onDelta` listener. Target: >= 200 k tokens/s.
// 2. First-delta latency against the scripted local model server: the time from calling the
//    model to its first `onDelta`, next to a bare `fetch` of the same reply to its first body
//    byte; the difference is what weft adds. Medians of N runs.
//
//     node tests/js/bench/model-stream.mjs [TOKENS] [RUNS]
import { anthropicModel, openaiModel } from 'weft';
import { startModelServer } from '../../model-server/server.mjs';

const TOKENS = Number(process.argv[2] ?? 10_000);
const RUNS = Number(process.argv[3] ?? 20);
const enc = new TextEncoder();
const sse = (obj, event) => (event ? `event: ${event}\n` : '') + `data: ${JSON.stringify(obj)}\n\n`;
const token = (i) => (i % 7 === 0 ? ' the' : ` w${i % 100}`);

function openaiBody(n) {
  const c = (delta, finish = null) =>
    sse({ id: 'chatcmpl-b', object: 'chat.completion.chunk', created: 1, model: 'bench', choices: [{ index: 0, delta, finish_reason: finish }] });
  const out = [c({ role: 'assistant', content: '' })];
  for (let i = 0; i < n; i++) out.push(c({ content: token(i) }));
  out.push(c({}, 'stop'));
  out.push(sse({ id: 'chatcmpl-b', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 5, completion_tokens: n, total_tokens: n + 5 } }));
  out.push('data: [DONE]\n\n');
  return out;
}

function anthropicBody(n) {
  const ev = (type, rest) => sse({ type, ...rest }, type);
  const out = [ev('message_start', { message: { id: 'msg_b', type: 'message', role: 'assistant', content: [], model: 'bench', usage: { input_tokens: 5, output_tokens: 1 } } })];
  out.push(ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }));
  for (let i = 0; i < n; i++) out.push(ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: token(i) } }));
  out.push(ev('content_block_stop', { index: 0 }));
  out.push(ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: n } }));
  out.push(ev('message_stop', {}));
  return out;
}

/** Byte chunks: one per event, or the whole body re-cut every `size` bytes. */
function cut(events, size) {
  if (!size) return events.map((e) => enc.encode(e));
  const all = enc.encode(events.join(''));
  const out = [];
  for (let i = 0; i < all.length; i += size) out.push(all.subarray(i, i + size));
  return out;
}

/** A `fetch` answering every request with `chunks` (a streamed 200). */
const memoryFetch = (chunks) => async () =>
  new Response(
    new ReadableStream({
      start(c) {
        for (const ch of chunks) c.enqueue(ch);
        c.close();
      },
    }),
    { status: 200, headers: { 'content-type': 'text/event-stream' } },
  );

const request = { messages: [{ role: 'task', task: 1, input: 'go' }], tools: [] };

async function parseRate(provider, size, withDelta) {
  const events = provider === 'openai' ? openaiBody(TOKENS) : anthropicBody(TOKENS);
  const chunks = cut(events, size);
  const bytes = chunks.reduce((n, c) => n + c.byteLength, 0);
  const make = provider === 'openai' ? openaiModel : anthropicModel;
  const model = make({ baseUrl: 'http://bench.invalid', model: 'bench', fetch: memoryFetch(chunks) });
  let deltas = 0;
  const onDelta = withDelta ? () => deltas++ : undefined;
  const once = async () => {
    const r = await model(request, { onDelta });
    if (r.text.length < TOKENS * 3) throw new Error(`${provider}: short reply (${r.text.length})`);
  };
  // Warm-up: loads the module and lets V8 tier the hot wasm functions up from its baseline
  // compiler (the first reply of a process runs partly in baseline code; `cold` reports it).
  let t = performance.now();
  await once();
  const cold = performance.now() - t;
  for (let i = 0; i < 3; i++) await once();
  const times = [];
  for (let i = 0; i < 9; i++) {
    const t0 = performance.now();
    await once();
    times.push(performance.now() - t0);
  }
  const ms = median(times);
  if (withDelta && deltas < TOKENS) throw new Error('missing deltas');
  return { rate: TOKENS / (ms / 1000), ms, bytes, cold };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function firstDelta(server, provider) {
  const make = provider === 'openai' ? openaiModel : anthropicModel;
  const base = provider === 'openai' ? `${server.url}/v1` : server.url;
  const path = provider === 'openai' ? '/v1/chat/completions' : '/v1/messages';
  const model = make({ baseUrl: base, model: 'bench', apiKey: 'k' });
  const reply = { text: 'a short reply of a few tokens', chunkSize: 4 };
  const weft = [];
  const bare = [];
  for (let i = 0; i < RUNS + 2; i++) {
    server.script([reply, reply]);
    let t0 = performance.now();
    let first = null;
    await model(request, { onDelta: () => (first ??= performance.now() - t0) });
    t0 = performance.now();
    const res = await fetch(`${server.url}${path}`, { method: 'POST', body: '{"model":"bench","stream":true,"messages":[]}' });
    const reader = res.body.getReader();
    // The first body chunk carries the first event (the role/message start, then text).
    await reader.read();
    const bareFirst = performance.now() - t0;
    while (!(await reader.read()).done);
    if (i >= 2) {
      weft.push(first);
      bare.push(bareFirst);
    }
  }
  return { weft: median(weft), bare: median(bare) };
}

const fmt = (n) => Math.round(n).toLocaleString('en-US');
console.log(`model stream parsing in wasm under Node: ${fmt(TOKENS)}-token replies (one SSE event per token), median of 9 after warm-up`);
for (const provider of ['openai', 'anthropic']) {
  for (const [size, label] of [
    [4096, '4 KiB chunks'],
    [0, 'one event per chunk'],
  ]) {
    for (const withDelta of [false, true]) {
      const { rate, ms, bytes, cold } = await parseRate(provider, size, withDelta);
      const flag = rate >= 200_000 ? 'ok' : 'BELOW TARGET';
      console.log(
        `  ${provider.padEnd(9)} ${label.padEnd(20)} ${withDelta ? 'onDelta   ' : 'no onDelta'}  ${fmt(rate).padStart(10)} tokens/s  (${ms.toFixed(1)} ms, ${fmt(bytes)} bytes, first in process ${cold.toFixed(0)} ms; target 200,000: ${flag})`,
      );
    }
  }
}
const server = await startModelServer({ port: 0 });
try {
  console.log(`first-delta latency against the local model server (median of ${RUNS}):`);
  for (const provider of ['openai', 'anthropic']) {
    const { weft, bare } = await firstDelta(server, provider);
    console.log(`  ${provider.padEnd(9)} model call -> first delta ${weft.toFixed(2)} ms; bare fetch -> first byte ${bare.toFixed(2)} ms; added ${(weft - bare).toFixed(2)} ms`);
  }
} finally {
  await server.close();
}
