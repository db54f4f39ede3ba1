// The actor graph for JS: the wasm core decides, this module persists. A store is IndexedDB
// (browsers; every batch is one `readwrite` transaction with strict durability, so it lands
// whole or not at all) or memory (anywhere). Every mutating method resolves only after the
// store has committed the batch and the core has been told (so a spawned node never accepts
// a message before its lineage is durable).
import { WeftError } from './error.js';
import { lazyModule } from './lazy.js';

// The actor graph is its own WebAssembly module (weft_actors_bg.wasm), loaded on first use.
const wasm = lazyModule('actors', new URL('./weft_actors_bg.wasm', import.meta.url), () => import('./weft_actors.js'));

/** Loads the actor-graph module (`openActorStore` and importing `weft/actors` do this). */
export async function loadActors() {
  await wasm.load();
}

const enc = new TextEncoder();
const dec = new TextDecoder();

function coded(err) {
  if (err instanceof WeftError) return err;
  return new WeftError(err?.code ?? 'STORE_IO', String(err?.message ?? err), { cause: err });
}

/** Files in a Map: the memory backend (also the model the IndexedDB backend follows). */
class MemoryBackend {
  constructor() {
    this.files = new Map();
  }
  async load() {
    return Object.fromEntries(this.files);
  }
  async apply(batch) {
    const next = new Map(this.files);
    for (const stage of batch.stages) for (const op of stage) applyOp(next, op);
    this.files = next;
  }
  close() {}
}

/** Applies one op to a Map-like `{get, set, delete, has}` of path → text. */
function applyOp(m, op) {
  switch (op.op) {
    case 'createNode':
      if (m.has(`${op.path}/meta.json`)) throw new WeftError('STORE_IO', `${op.path} already exists`);
      for (const [name, text] of Object.entries(op.files)) m.set(`${op.path}/${name}`, text);
      break;
    case 'put':
      m.set(op.path, op.text);
      break;
    case 'append':
      m.set(op.path, (m.get(op.path) ?? '') + op.text);
      break;
    case 'truncate': {
      const cur = m.get(op.path);
      if (cur !== undefined) m.set(op.path, dec.decode(enc.encode(cur).slice(0, op.len)));
      break;
    }
    case 'rename':
      if (m.has(op.path)) {
        m.set(op.to, m.get(op.path));
        m.delete(op.path);
      }
      break;
    default:
      throw new WeftError('STORE_IO', `unknown store op ${op.op}`);
  }
}

const req = (r) =>
  new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });

/** IndexedDB: one object store `files` (key: path, value: text). */
class IndexedDbBackend {
  static async open(name) {
    if (typeof indexedDB === 'undefined') throw new WeftError('UNSUPPORTED', 'IndexedDB is not available here; use backend: "memory"');
    const open = indexedDB.open(name, 1);
    open.onupgradeneeded = () => open.result.createObjectStore('files');
    const b = new IndexedDbBackend();
    b.db = await req(open);
    return b;
  }
  async load() {
    const tx = this.db.transaction('files', 'readonly');
    const store = tx.objectStore('files');
    const [keys, values] = await Promise.all([req(store.getAllKeys()), req(store.getAll())]);
    return Object.fromEntries(keys.map((k, i) => [k, values[i]]));
  }
  /** The whole batch in one transaction: IndexedDB commits it atomically. */
  apply(batch) {
    return new Promise((resolve, reject) => {
      const tx = this.db.transaction('files', 'readwrite', { durability: 'strict' });
      const store = tx.objectStore('files');
      tx.oncomplete = () => resolve();
      tx.onabort = () => reject(tx.error ?? new WeftError('STORE_IO', 'transaction aborted'));
      tx.onerror = () => {};
      // Reads the current values the ops need, then applies them in order in memory and
      // writes the results: all inside this transaction.
      const paths = new Set();
      for (const stage of batch.stages)
        for (const op of stage) {
          if (op.op === 'createNode') paths.add(`${op.path}/meta.json`);
          else paths.add(op.path);
        }
      const cur = new Map();
      let pending = paths.size;
      const fail = (e) => {
        try {
          tx.abort();
        } catch {}
        reject(coded(e));
      };
      const proceed = () => {
        const view = {
          get: (k) => cur.get(k),
          has: (k) => cur.get(k) !== undefined,
          set: (k, v) => {
            cur.set(k, v);
            store.put(v, k);
          },
          delete: (k) => {
            cur.set(k, undefined);
            store.delete(k);
          },
        };
        try {
          for (const stage of batch.stages) for (const op of stage) applyOp(view, op);
        } catch (e) {
          fail(e);
        }
      };
      if (pending === 0) return proceed();
      for (const p of paths) {
        const r = store.get(p);
        r.onsuccess = () => {
          cur.set(p, r.result);
          if (--pending === 0) proceed();
        };
      }
    });
  }
  close() {
    this.db.close();
  }
}

const MUTATIONS = ['spawn', 'message', 'route', 'status', 'resolve', 'ref', 'narrate', 'wait', 'relate', 'archive', 'reset', 'bookmark', 'epoch', 'export'];
const VIEWS = ['graph', 'linear', 'grid', 'tree', 'temporal', 'fork', 'metathread', 'audit', 'index', 'lineage', 'waits', 'model', 'mailbox'];

/** An actor graph with its store. Create with {@link openActorStore}. */
export class ActorStore {
  #core;
  #backend;
  #queue = Promise.resolve();
  #listeners = new Set();
  #closed = false;

  constructor(core, backend, report) {
    this.#core = core;
    this.#backend = backend;
    /** What open found: `{diagnostics, repairs, recoveryBatch}`. */
    this.report = report;
  }

  /** Persists every queued batch in order; acknowledges each to the core. */
  async #persist() {
    for (const batch of this.#core.takeBatches()) {
      try {
        await this.#backend.apply(batch);
      } catch (e) {
        this.#core.fail(batch.id, String(e?.message ?? e));
        throw coded(e);
      }
      this.#core.ack(batch.id);
    }
    const events = this.#core.drainEvents();
    if (events.length) for (const l of this.#listeners) l(events);
  }

  /**
   * Runs a mutation of the core (see `weft_core::actors::api`) and resolves with its result
   * once the store has committed it. Calls are applied one at a time, in call order.
   */
  mutate(op, args = {}, { signal } = {}) {
    const run = async () => {
      if (this.#closed) throw new WeftError('CLOSED', 'the actor store is closed');
      signal?.throwIfAborted();
      let out;
      try {
        out = this.#core.call(op, Date.now(), args);
      } catch (e) {
        throw coded(e);
      }
      await this.#persist();
      return out;
    };
    const p = this.#queue.then(run, run);
    this.#queue = p.catch(() => {});
    return p;
  }

  /** Reads a view (`graph`, `grid`, `tree`, `linear`, `temporal`, `fork`, …). No I/O. */
  view(name, args = {}) {
    try {
      return this.#core.call(name, Date.now(), args);
    } catch (e) {
      throw coded(e);
    }
  }

  /** Calls `listener(events)` after each committed change; returns an unsubscribe function. */
  onChange(listener) {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Persists anything already queued (the init or recovery batch of open). */
  sync() {
    return this.mutate('lineage');
  }

  /** The change counter. */
  get version() {
    return this.#core.version;
  }

  /** Waits for queued mutations, then releases the store. */
  async close() {
    await this.#queue;
    this.#closed = true;
    this.#backend.close();
  }
}

for (const op of MUTATIONS) {
  ActorStore.prototype[op] = function (args, options) {
    return this.mutate(op, args, options);
  };
}
for (const v of VIEWS) {
  const name = v === 'graph' ? 'graph' : `${v}View`;
  ActorStore.prototype[name] = function (args) {
    return this.view(v, args);
  };
}

/**
 * Opens (or creates) an actor store. `backend`: `"indexeddb"` (default where available) or
 * `"memory"`; `name`: the IndexedDB database; `config`: harness variables
 * (`{ACTOR_WAIT_GRAPH: "enforce"}`); `title`: the session title for a new graph. Opening
 * recovers what an interrupted writer left, before anything else happens.
 */
export async function openActorStore({ backend, name = 'weft-actors', config = {}, title = 'Session' } = {}) {
  const kind = backend ?? (typeof indexedDB === 'undefined' ? 'memory' : 'indexeddb');
  const { ActorGraph } = await wasm.load();
  const store = kind === 'memory' ? new MemoryBackend() : await IndexedDbBackend.open(name);
  const files = await store.load();
  const address = kind === 'memory' ? 'memory:' : `idb://${name}`;
  let core;
  try {
    core = Object.keys(files).length ? ActorGraph.open(config, address, files, Date.now()) : ActorGraph.init(config, address, Date.now(), title);
  } catch (e) {
    store.close();
    throw coded(e);
  }
  const s = new ActorStore(core, store, core.report);
  for (const n of core.notes) console.warn(`weft actors: ${n}`);
  await s.sync(); // the init or recovery batch is durable before anything else happens
  return s;
}

/** Deletes an IndexedDB actor store. */
export function deleteActorStore(name = 'weft-actors') {
  return req(indexedDB.deleteDatabase(name));
}
