// The host loop of the model clients (`wasm/js/models.js`), imported with the models
// WebAssembly module (weft_models_bg.wasm) on the first model step, so `import 'weft'` carries
// neither. Every rule lives in the core's `ModelCall` machine: the request body and headers,
// which statuses are retried and when, SSE parsing, tool-call arguments assembled across
// chunks, error codes. This file only moves bytes: `fetch` + `response.body.getReader()` (the
// same code in browsers and Node 20), one timer at `pollTimeout`, and the AbortSignal.
import { WeftError } from './error.js';
import { lazyModule } from './lazy.js';

const wasm = lazyModule('models', new URL('./weft_models_bg.wasm', import.meta.url), () => import('./weft_models.js'));

/** Loads the WebAssembly module; resolves with its glue. */
export const glue = () => wasm.loadSync() ?? wasm.load();

/** JSON text of transcript values (BigInts as strings, typed arrays as arrays). */
function jsonText(v) {
  return JSON.stringify(v, (_k, x) => {
    if (typeof x === 'bigint') return x.toString();
    if (ArrayBuffer.isView(x) && !(x instanceof DataView)) return Array.from(x);
    return x;
  });
}

/** The package's error for a coded error of the core (`{code, message, stepMessage, ...}`). */
function modelError(e) {
  const err = new WeftError(e.code, e.stepMessage ?? `${e.code}: ${e.message}`);
  if (e.status !== undefined) err.status = e.status;
  if (e.retryAfterMs !== undefined) err.retryAfterMs = e.retryAfterMs;
  return err;
}

const thrown = (e) => (typeof e?.code === 'string' ? modelError({ code: e.code, message: e.message }) : e);
const describe = (e) => String(e?.cause?.message ?? e?.message ?? e);

/**
 * Runs one ModelCall to its `done`: sends what it asks, feeds back heads, body chunks and
 * ends, re-arms one timer at its deadline, aborts on `signal`. Resolves with the response
 * `{text, calls, usage}` or rejects with the coded WeftError.
 */
function drive(raw, maxErrorBody, { signal, onDelta, fetchImpl, now }) {
  return new Promise((resolve, reject) => {
    let finished = false;
    let attempt = 0;
    let conn = null;
    let timer = null;
    let pumping = false;
    let again = false;

    const onAbort = () => {
      if (finished) return;
      raw.abort(describe(signal.reason ?? 'aborted'));
      pump();
    };
    const finish = () => {
      finished = true;
      clearTimeout(timer);
      // Done: drop the connection, if any (a finished stream has nothing left to read).
      conn?.abort();
      conn = null;
      signal?.removeEventListener('abort', onAbort);
    };
    // One timer at the machine's deadline. The idle deadline moves with every chunk, so a
    // pending timer that fires before the deadline is kept rather than re-armed per chunk:
    // the machine ignores an early tick, and the timer is re-armed after it.
    let timerAt = Infinity;
    const arm = () => {
      const at = raw.pollTimeout();
      if (at === undefined) {
        clearTimeout(timer);
        timer = null;
        timerAt = Infinity;
        return;
      }
      if (timer !== null && timerAt <= at) return;
      clearTimeout(timer);
      timerAt = at;
      timer = setTimeout(() => {
        timer = null;
        timerAt = Infinity;
        if (finished) return;
        raw.handleTimeout(now());
        pump();
      }, Math.max(0, at - now()));
    };
    const pump = () => {
      if (finished) return;
      if (pumping) {
        again = true;
        return;
      }
      pumping = true;
      try {
        do {
          again = false;
          const text = raw.drainJson();
          if (text === '[]') continue;
          for (const o of JSON.parse(text)) {
            if (o.output === 'event') {
              if (!onDelta) continue;
              const { output: _o, ...event } = o;
              try {
                onDelta(event);
              } catch (err) {
                queueMicrotask(() => {
                  throw err;
                });
              }
            } else if (o.output === 'send') {
              send(o);
            } else {
              finish();
              if (o.error) reject(modelError(o.error));
              else resolve(o.response);
              return;
            }
          }
        } while (again && !finished);
      } finally {
        pumping = false;
      }
      if (!finished) arm();
    };
    const send = ({ url, headers, body }) => {
      const id = ++attempt;
      conn?.abort();
      const ac = new AbortController();
      conn = ac;
      const live = () => !finished && id === attempt;
      Promise.resolve()
        .then(() => fetchImpl(url, { method: 'POST', headers, body, signal: ac.signal }))
        .then(async (res) => {
          if (!live()) return void res.body?.cancel().catch(() => {});
          raw.onHead(now(), res.status, res.headers.get('retry-after') ?? undefined);
          const reader = res.body?.getReader();
          if (raw.wantsErrorBody()) {
            // A bounded read of the error body; the core classifies it.
            const parts = [];
            let size = 0;
            while (reader && size < maxErrorBody) {
              const { done, value } = await reader.read();
              if (done) break;
              parts.push(value);
              size += value.byteLength;
            }
            reader?.cancel().catch(() => {});
            if (!live()) return;
            const bytes = new Uint8Array(Math.min(size, maxErrorBody));
            let at = 0;
            for (const p of parts) {
              const n = Math.min(p.byteLength, bytes.length - at);
              bytes.set(p.subarray(0, n), at);
              at += n;
            }
            raw.onErrorBody(now(), bytes);
            pump();
            return;
          }
          pump();
          if (!reader) {
            if (live()) raw.onEnd(now());
            pump();
            return;
          }
          for (;;) {
            const { done, value } = await reader.read();
            if (!live()) return void reader.cancel().catch(() => {});
            if (done) raw.onEnd(now());
            else raw.onBody(now(), value);
            pump();
            if (done) return;
          }
        })
        .catch((err) => {
          if (!live()) return;
          raw.onTransportError(now(), describe(err));
          pump();
        });
    };

    if (signal?.aborted) {
      onAbort();
      return;
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    pump();
  });
}

/**
 * The options with a request's system text (an agent on an actor node sends its node's
 * context as `request.system`): after the configured system text, if any.
 */
function withSystem(config, system) {
  if (typeof system !== 'string' || system === '') return config;
  const o = JSON.parse(config);
  o.system = typeof o.system === 'string' && o.system !== '' ? `${o.system}\n\n${system}` : system;
  return JSON.stringify(o);
}

/** One model step of `provider` (`config`: the options as JSON text): `{text, calls, usage}`. */
export async function runModel(config, request, { signal, onDelta } = {}, fetchImpl, now) {
  const g = await glue();
  let raw;
  try {
    raw = new g.ModelCall(now(), withSystem(config, request?.system), jsonText(request?.messages ?? []), jsonText(request?.tools ?? []));
  } catch (err) {
    throw thrown(err);
  }
  try {
    return await drive(raw, g.maxErrorBody(), { signal, onDelta, fetchImpl, now });
  } finally {
    raw.free();
  }
}

/** The built-in model's answer to `request`. */
export async function builtinAnswer(request) {
  const g = await glue();
  return { text: g.builtinAnswer(jsonText(request?.messages ?? [])) };
}

/** The configuration a choice names (JSON), or null when none is configured. */
export async function resolveConfig(choice) {
  const g = await glue();
  try {
    return JSON.parse(g.resolveModelConfig(jsonText(choice)));
  } catch (err) {
    throw thrown(err);
  }
}
