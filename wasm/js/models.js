// Model providers in JS: OpenAI Chat Completions (and every compatible server) and Anthropic
// Messages, streaming, as model functions for `createAgent`. The host loop (models-impl.js)
// and the codec (weft_models_bg.wasm, where every rule lives: request, retries, SSE parsing,
// error codes) are loaded on the first model step, so `import 'weft'` carries neither.
import { WeftError } from './error.js';

let impl = null;
const load = () => (impl ??= import('./models-impl.js').catch((err) => {
  impl = null;
  throw err;
}));

/** Loads the models module now (a model also loads it on its first step). */
export async function loadModels() {
  await (await load()).glue();
}

/**
 * A model function speaking `provider`'s wire format: `async (request, { signal, onDelta })
 * => ({ text, calls, usage })`. `onDelta` receives the stream's events as they arrive
 * (`{type: 'text_delta', text}`, `tool_call_start`, `tool_call_delta`, `tool_call_end`,
 * `usage`, `finish`).
 */
function providerModel(provider, options = {}) {
  const { fetch: fetchImpl = globalThis.fetch?.bind(globalThis), now = () => performance.now(), ...config } = options;
  if (typeof fetchImpl !== 'function') throw new WeftError('MODEL_INVALID_CONFIG', 'no fetch: pass options.fetch');
  // In a page, Anthropic wants its opt-in header for direct browser access (the core adds it).
  const text = JSON.stringify({ directBrowserAccess: typeof document !== 'undefined', ...config, provider });
  const model = async (request, opts) => (await load()).runModel(text, request, opts, fetchImpl, now);
  model.provider = provider;
  model.label = `${provider}:${config.model ?? ''}`;
  return model;
}

/** A model on an OpenAI Chat Completions endpoint (OpenAI, Ollama, llama.cpp, vLLM, LM Studio, OpenRouter). */
export function openaiModel(options) {
  return providerModel('openai', options);
}

/** A model on the Anthropic Messages API. */
export function anthropicModel(options) {
  return providerModel('anthropic', options);
}

/**
 * The deterministic built-in model: every answer says that no model is configured (code
 * MODEL_NOT_CONFIGURED in its text) and how to configure one, and repeats the last input.
 * It selects no tools and never pretends to be a model.
 */
export function builtinModel() {
  const model = async (request) => (await load()).builtinAnswer(request);
  model.provider = 'builtin';
  model.label = 'builtin';
  return model;
}

/**
 * The model a configuration names, by the core's resolution rule: `{model?: 'PROVIDER:NAME'
 * | 'PROVIDER', baseUrl?, apiKey?, openaiKey?, anthropicKey?, maxTokens?, ...}` plus the
 * options of `openaiModel`. A base URL alone is OpenAI-compatible; with neither a provider,
 * a base URL nor a key, no model is configured and the built-in model answers
 * (`model.provider === 'builtin'`). Rejects with MODEL_INVALID_CONFIG.
 */
export async function resolveModel(choice = {}) {
  const { model, baseUrl, apiKey, openaiKey, anthropicKey, maxTokens, ...rest } = choice;
  // One key for whichever provider the rule picks.
  const keys = { openaiKey: openaiKey ?? apiKey, anthropicKey: anthropicKey ?? apiKey };
  const config = await (await load()).resolveConfig({ model, baseUrl, maxTokens, ...keys });
  if (config === null) return builtinModel();
  const { label: _l, provider, ...c } = config;
  return providerModel(provider, { ...rest, ...c, apiKey: c.apiKey ?? undefined });
}
