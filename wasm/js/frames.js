// DGP 0.1 decision frames in JS: the core's engine (WebAssembly) over a declarative app. The
// same rules as `weft serve`: immutable frames, assessments, guarded commits, receipts.
import { WeftError } from './error.js';
import { lazyModule } from './lazy.js';

// The engine is its own WebAssembly module (weft_frames_bg.wasm), loaded on first use.
const wasm = lazyModule('frames', new URL('./weft_frames_bg.wasm', import.meta.url), () => import('./weft_frames.js'));

/** Loads the frames module (importing `weft/frames` does this; in Node the first call does). */
export async function loadFrames() {
  await wasm.load();
}

/** @internal The loaded bindings (NOT_LOADED in a browser before `loadFrames`). */
export function loaded() {
  const glue = wasm.loadSync();
  if (!glue) {
    throw new WeftError('NOT_LOADED', "the frames module is not loaded yet: import 'weft/frames' or await loadFrames() first");
  }
  return glue;
}

const parse = (text) => JSON.parse(text);
const body = (b) => (typeof b === 'string' ? b : JSON.stringify(b));

/** An engine instance; every call takes the current time from `now()`. Records cross into
 * WebAssembly as JSON text; request bodies given as text are parsed strictly there (duplicate
 * keys are refused), objects are stringified first. */
export class FramesEngine {
  #raw;
  #now;
  constructor(raw, now) {
    this.#raw = raw;
    this.#now = now;
  }
  /** The discovery document. */
  manifest() {
    return parse(this.#raw.manifest());
  }
  /** `{dgp, surfaces: [...]}`. */
  surfaces() {
    return parse(this.#raw.surfaces());
  }
  /** `{dgp, graphs: [...]}`. */
  graphs() {
    return parse(this.#raw.graphs());
  }
  /** `{dgp, services: [...]}`. */
  services() {
    return parse(this.#raw.services());
  }
  /** A new immutable frame; `disclosure` is next | horizon | full. */
  frame(surfaceId, { disclosure, horizon } = {}) {
    return parse(this.#raw.frame(this.#now(), surfaceId, disclosure, horizon == null ? undefined : String(horizon)));
  }
  /** The exact stored frame. */
  storedFrame(frameId) {
    return parse(this.#raw.storedFrame(frameId));
  }
  /** Records an assessment (`body`: object, or JSON text parsed strictly). */
  assess(principal, assessment) {
    return parse(this.#raw.assess(this.#now(), principal, body(assessment)));
  }
  /** Commits an assessment under an idempotency key. */
  commit(principal, idempotencyKey, request) {
    return parse(this.#raw.commit(this.#now(), principal, idempotencyKey, body(request)));
  }
  /** Changes the shared policy; every earlier frame becomes stale. */
  bumpPolicy() {
    return this.#raw.bumpPolicy();
  }
  /** Entries of an app read view (e.g. `bulletin`). */
  entries(view) {
    return parse(this.#raw.entries(view));
  }
  /** `{state, revision}` of a surface, or null. */
  surfaceState(surfaceId) {
    return parse(this.#raw.surfaceState(surfaceId));
  }
  /** Records written since the last call: persist them, then pass them as `records` to reopen. */
  takeWrites() {
    return this.#raw.takeWrites();
  }
  /** Frees the WebAssembly memory of this engine. */
  free() {
    this.#raw.free();
  }
}

/** Opens an engine over a declarative app (and the records of an earlier engine, if any). */
export function createFramesEngine({ app, records, frameTtlMs, serviceBudget, idSeed, maxMessageBytes, now = Date.now } = {}) {
  const { FramesEngine: RawEngine } = loaded();
  const seed = idSeed ?? Math.floor(Math.random() * 2 ** 52);
  const raw = new RawEngine(JSON.stringify(app), { frameTtlMs, serviceBudget, idSeed: seed, maxMessageBytes }, records);
  return new FramesEngine(raw, now);
}

/** The evidence of a decision an assessor reading `modalities` may receive; throws UNSUPPORTED_MODALITY. */
export function evidenceFor(frame, decisionId, modalities) {
  return parse(loaded().evidenceFor(typeof frame === 'string' ? frame : JSON.stringify(frame), decisionId, modalities));
}
