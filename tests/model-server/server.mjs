// A scripted local model server for tests: speaks OpenAI Chat Completions streaming
// (`POST /v1/chat/completions`) and Anthropic Messages streaming (`POST /v1/messages`) on
// 127.0.0.1, replaying replies a test scripted, and records what it received. No dependencies.
//
//   node tests/model-server/server.mjs [--port N] [--exit-on-stdin-close]
//     prints {"url":"http://127.0.0.1:PORT"} on one line once listening
//   import { startModelServer } from './server.mjs'
//     const s = await startModelServer(); s.script([...]); s.requests(); await s.close();
//
// Control routes: POST /_script {"replies":[...]}, GET /_requests, POST /_reset.
// Replies: {text, chunkSize?, delayMs?, usage?} | {calls:[{id,name,arguments}], text?} |
// {status, headers?, body?} | {text, hang:true} | {raw:[chunks]}.

import http from 'node:http';

const CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-methods': 'POST, GET, OPTIONS',
  'access-control-allow-headers': 'authorization, content-type, x-api-key, anthropic-version, anthropic-dangerous-direct-browser-access, accept',
  'access-control-expose-headers': 'retry-after',
  'access-control-max-age': '600',
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function pieces(text, size) {
  const chars = [...text];
  const out = [];
  for (let i = 0; i < chars.length; i += size) out.push(chars.slice(i, i + size).join(''));
  return out;
}

function sse(obj, event) {
  return (event ? `event: ${event}\n` : '') + `data: ${JSON.stringify(obj)}\n\n`;
}

/** The body chunks of `reply` in OpenAI's format. */
function openaiChunks(reply) {
  const chunk = (delta, finish = null) =>
    sse({ id: 'chatcmpl-test', object: 'chat.completion.chunk', model: 'test', choices: [{ index: 0, delta, finish_reason: finish }] });
  const out = [chunk({ role: 'assistant', content: '' })];
  for (const p of pieces(reply.text ?? '', reply.chunkSize ?? 4)) out.push(chunk({ content: p }));
  (reply.calls ?? []).forEach((c, index) => {
    const args = JSON.stringify(c.arguments ?? {});
    const half = Math.ceil(args.length / 2);
    out.push(chunk({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.name, arguments: args.slice(0, half) } }] }));
    out.push(chunk({ tool_calls: [{ index, function: { arguments: args.slice(half) } }] }));
  });
  if (reply.hang) return out;
  out.push(chunk({}, reply.calls?.length ? 'tool_calls' : 'stop'));
  const u = reply.usage ?? { input: 10, output: 5 };
  out.push(sse({ id: 'chatcmpl-test', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: u.input, completion_tokens: u.output, total_tokens: u.input + u.output } }));
  out.push('data: [DONE]\n\n');
  return out;
}

/** The body chunks of `reply` in Anthropic's format. */
function anthropicChunks(reply) {
  const u = reply.usage ?? { input: 10, output: 5 };
  const ev = (type, rest) => sse({ type, ...rest }, type);
  const out = [ev('message_start', { message: { id: 'msg_test', type: 'message', role: 'assistant', content: [], model: 'test', usage: { input_tokens: u.input, output_tokens: 1 } } })];
  let index = 0;
  if (reply.text !== undefined) {
    out.push(ev('content_block_start', { index, content_block: { type: 'text', text: '' } }));
    out.push(ev('ping', {}));
    for (const p of pieces(reply.text, reply.chunkSize ?? 4)) out.push(ev('content_block_delta', { index, delta: { type: 'text_delta', text: p } }));
    if (reply.hang) return out;
    out.push(ev('content_block_stop', { index }));
    index++;
  }
  for (const c of reply.calls ?? []) {
    const args = JSON.stringify(c.arguments ?? {});
    const half = Math.ceil(args.length / 2);
    out.push(ev('content_block_start', { index, content_block: { type: 'tool_use', id: c.id, name: c.name, input: {} } }));
    out.push(ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: args.slice(0, half) } }));
    out.push(ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: args.slice(half) } }));
    out.push(ev('content_block_stop', { index }));
    index++;
  }
  if (reply.hang) return out;
  out.push(ev('message_delta', { delta: { stop_reason: reply.calls?.length ? 'tool_use' : 'end_turn', stop_sequence: null }, usage: { output_tokens: u.output } }));
  out.push(ev('message_stop', {}));
  return out;
}

/** Starts a server on 127.0.0.1 (port 0: any free port). */
export async function startModelServer({ port = 0 } = {}) {
  let replies = [];
  let requests = [];
  const sockets = new Set();

  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    if (req.method === 'OPTIONS') {
      res.writeHead(204, CORS).end();
      return;
    }
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const text = Buffer.concat(chunks).toString('utf8');
    const json = (status, value) => {
      res.writeHead(status, { ...CORS, 'content-type': 'application/json' });
      res.end(JSON.stringify(value));
    };
    if (url.pathname === '/_script' && req.method === 'POST') {
      replies.push(...(JSON.parse(text).replies ?? []));
      return json(200, { queued: replies.length });
    }
    if (url.pathname === '/_requests') return json(200, requests);
    if (url.pathname === '/_reset' && req.method === 'POST') {
      replies = [];
      requests = [];
      return json(200, {});
    }
    const format = url.pathname === '/v1/chat/completions' ? 'openai' : url.pathname === '/v1/messages' ? 'anthropic' : null;
    if (!format || req.method !== 'POST') return json(404, { error: { message: `no route ${req.method} ${url.pathname}` } });
    let body = null;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    const record = { path: url.pathname, headers: req.headers, body, closedByClient: false, completed: false };
    requests.push(record);
    // A client that drops the connection before the stream completed.
    res.on('close', () => {
      if (!record.completed) record.closedByClient = true;
    });
    const reply = replies.shift() ?? { text: '(no scripted reply)' };
    if (reply.status) {
      res.writeHead(reply.status, { ...CORS, 'content-type': 'application/json', ...(reply.headers ?? {}) });
      res.end(JSON.stringify(reply.body ?? { error: { type: 'error', message: `scripted status ${reply.status}` } }));
      record.completed = true;
      return;
    }
    res.writeHead(200, { ...CORS, 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    const out = reply.raw ?? (format === 'openai' ? openaiChunks(reply) : anthropicChunks(reply));
    for (const c of out) {
      if (res.destroyed) return;
      res.write(c);
      if (reply.delayMs) await sleep(reply.delayMs);
    }
    if (reply.hang) return; // until the client goes away
    record.completed = true;
    res.end();
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${server.address().port}`;
  return {
    url: base,
    /** Queues replies, one per model request. */
    script(more) {
      replies.push(...more);
    },
    /** What the server received so far. */
    requests: () => requests,
    reset() {
      replies = [];
      requests = [];
    },
    close() {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

const isMain = import.meta.url === `file://${process.argv[1]}`;
if (isMain) {
  const args = process.argv.slice(2);
  const at = args.indexOf('--port');
  const s = await startModelServer({ port: at >= 0 ? Number(args[at + 1]) : 0 });
  process.stdout.write(JSON.stringify({ url: s.url }) + '\n');
  if (args.includes('--exit-on-stdin-close')) {
    process.stdin.resume();
    process.stdin.on('end', () => s.close().then(() => process.exit(0)));
    process.stdin.on('close', () => s.close().then(() => process.exit(0)));
  }
  const stop = () => s.close().then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
