// The actor graph for JS: the wasm core decides, this module persists. A store is IndexedDB
// (browsers; every batch is one `readwrite` transaction with strict durability, so it lands
// whole or not at all), a `$CHAT_ROOT` directory (Node: `actors-fs.js`, the native store's
// layout, locking and durability) or memory (anywhere). Every mutating method resolves only after the
// store has committed the batch and the core has been told (so a spawned node never accepts
// a message before its lineage is durable).
import { WeftError } from './error.js';
import { CLOSED, UNSUPPORTED, AGENT_OPEN } from './codes.js';
import { lazyModule } from './lazy.js';
import { appTools } from './agent-tools.js';

// The agent host (node-agent.js), imported by the first `openActorStore`: a store's agents
// exist only once a store is open.
let NodeAgent = null;

// The monotonic clock an agent's deadlines are on (see node-agent.js); `Date.now()` is for lines.
const mono = () => Math.floor(performance.now());

// The actor graph is its own WebAssembly module (weft_actors_bg.wasm), loaded on first use.
const wasm = lazyModule('actors', new URL('./weft_actors_bg.wasm', import.meta.url), () => import('./weft_actors.js'));

/** Loads the actor-graph module (`openActorStore` and importing `weft/actors` do this). */
export async function loadActors() {
  await wasm.load();
}


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
  async read(path) {
    return this.files.get(path);
  }
  async apply(batch) {
    const next = new Map(this.files);
    applyOps(next, batch.stages.flat());
    this.files = next;
  }
  close() {}
}

/**
 * Applies a batch's ops, in order, to a Map-like `{get, set, delete, has}` of path → text.
 * The core applies them (`applyStoreOps`: its memory store's rules, path checks included);
 * this only hands it the current texts and writes back what changed.
 */
function applyOps(m, ops) {
  const current = {};
  for (const op of ops) {
    const p = op.op === 'createNode' ? `${op.path}/meta.json` : op.path;
    if (!(p in current)) current[p] = m.get(p) ?? null;
  }
  const glue = wasm.loadSync();
  if (!glue) throw new WeftError('STORE_IO', 'the actor-graph module is not loaded');
  let out;
  try {
    out = glue.applyStoreOps(current, ops);
  } catch (e) {
    throw coded(e);
  }
  for (const [p, v] of Object.entries(out)) {
    if (v === null) {
      if (m.has(p)) m.delete(p);
    } else if (v !== m.get(p)) m.set(p, v);
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
    if (typeof indexedDB === 'undefined') throw new WeftError(UNSUPPORTED, 'IndexedDB is not available here; use backend: "memory"');
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
  read(path) {
    return req(this.db.transaction('files', 'readonly').objectStore('files').get(path));
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
          applyOps(view, batch.stages.flat());
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

// The filesystem backend's loader, installed by the Node entries (`node.js`,
// `entry-actors-node.js`): this module never names `actors-fs.js`, so a browser bundle never
// pulls `node:fs`.
let loadFsBackend = null;

/** @internal Installs the loader of the `fs` backend (`() => import('./actors-fs.js')`). */
export function setFsBackend(load) {
  loadFsBackend = load;
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
  #glue;
  #agents = new Map();
  #opened = false;
  #host;

  constructor(core, backend, report, glue) {
    this.#core = core;
    this.#backend = backend;
    this.#glue = glue;
    /** What open found: `{diagnostics, repairs, recoveryBatch}`. */
    this.report = report;
    // What the agents of this store may do: run in its queue, open a spawned child's agent.
    this.#host = {
      run: (fn) => this.#run(fn),
      openChild: (parent, child) => {
        if (!this.#agents.has(child)) this.#openAgent(child, parent.childOptions(child), Date.now());
      },
      detach: (agent) => {
        if (this.#agents.get(agent.node) === agent) this.#agents.delete(agent.node);
      },
    };
  }

  /**
   * Persists every queued batch in order and acknowledges each to the core; then every agent
   * syncs and handles the outputs its now-durable lines release (a model request the core
   * released while its lines were still queued is asked at the agent's next pump, after they
   * are durable), until nothing new is queued.
   */
  async #persist() {
    for (let round = 0; ; round++) {
      // The agents see the change before it is persisted, so a person's line and the agent's
      // `turn_start` join one batch (the core's group commit) and land in one transaction.
      if (this.#agents.size) {
        const now = Date.now();
        for (const a of [...this.#agents.values()]) a.sync(this.#core, now);
      }
      const batches = this.#core.takeBatches();
      // Done when a round queued nothing and opened no agent (a spawned child's agent syncs
      // in the next round).
      if (round > 0 && batches.length === 0 && !this.#opened) break;
      this.#opened = false;
      for (const batch of batches) {
        try {
          await this.#backend.apply(batch);
        } catch (e) {
          this.#core.fail(batch.id, String(e?.message ?? e));
          throw coded(e);
        }
        this.#core.ack(batch.id);
      }
      if (this.#agents.size === 0) {
        if (batches.length === 0) break;
        continue;
      }
      const now = Date.now();
      for (const a of [...this.#agents.values()]) a.pump(this.#core, now);
    }
    const events = this.#core.drainEvents();
    if (events.length) for (const l of this.#listeners) l(events);
  }

  /** Runs `fn(core, now, glue)` in the store's queue, then persists what it queued. */
  #run(fn, signal) {
    const run = async () => {
      if (this.#closed) throw new WeftError(CLOSED, 'the actor store is closed');
      signal?.throwIfAborted();
      let out;
      try {
        out = fn(this.#core, Date.now(), this.#glue);
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

  #openAgent(node, options, now) {
    const { NodeAgent: Raw } = this.#glue;
    // An app's published tools come first; the host's own tools follow.
    if (options.app) options = { ...options, tools: [...appTools(options.app), ...(options.tools ?? [])] };
    const raw = Raw.open(this.#core, node, { contextTokens: options.contextTokens, recentLines: options.recentLines, interruptGraceMs: options.interruptGraceMs, maxStepsPerTurn: options.maxStepsPerTurn }, now, mono());
    try {
      for (const t of options.tools ?? []) {
        raw.registerTool({ name: t.name, description: t.description, parameters: t.parameters, supportsParallel: t.supportsParallel, mayStartJob: t.mayStartJob === true, safeToCancel: t.safeToCancel });
      }
    } catch (e) {
      // The recovery lines open wrote stay queued (they are true whichever host resumes).
      raw.free();
      throw e;
    }
    const agent = new NodeAgent(this.#host, raw, options);
    this.#agents.set(node, agent);
    this.#opened = true;
    return agent;
  }

  /**
   * Opens the agent of `node` (see `NodeAgent`): its lines are read and a restart's recovery
   * lines written (an unfinished turn `interrupted`, a started call `uncertain`, a job
   * `lost`); user lines not yet answered become its tasks. `options`: `{model?, tools?,
   * contextTokens?, recentLines?, interruptGraceMs?, maxStepsPerTurn?, children?, app?,
   * runtime?}` (`model` defaults to the built-in model; `tools` are host tools `{name,
   * description?, parameters?, supportsParallel?, safeToCancel?, mayStartJob?, run(args,
   * {signal, node, invocation, callId, tool, step, submitJob})}` (or `handler` for `run`),
   * task nodes only; `app`: an ops app whose published tools (`appTools(app)`) the agent
   * gets; `runtime`: the job runtime of the Worker jobs its tools start with
   * `ctx.submitJob` (default `app.runtime`); `children`: the options of the agents of
   * children it spawns, or a function of the child's id, by default the same model and
   * budget without tools). Rejects with AGENT_OPEN when the node has an open agent.
   */
  agent(node, options = {}, { signal } = {}) {
    return this.#run((core, now) => {
      if (this.#agents.has(node)) throw new WeftError(AGENT_OPEN, `node \`${node}\` already has an open agent (store.agentOf)`);
      return this.#openAgent(node, options, now);
    }, signal);
  }

  /**
   * The job journal records the agent of `node` recorded in the store (`nodes/<node>/jobs.jsonl`:
   * each job's milestones, the latest repeating event before each, `elided` counts), of `job`
   * after sequence number `after` (default 0): what an observer that reconnects missed.
   */
  jobJournal(node, job, { after = 0 } = {}) {
    const run = async () => {
      if (this.#closed) throw new WeftError(CLOSED, 'the actor store is closed');
      const text = (await this.#backend.read(`nodes/${node}/jobs.jsonl`)) ?? '';
      return this.#glue.journalAfter(text, job, after);
    };
    // After the batches queued before it are committed.
    const p = this.#queue.then(run, run);
    this.#queue = p.catch(() => {});
    return p;
  }

  /** The open agent of `node`, or null. */
  agentOf(node) {
    return this.#agents.get(node) ?? null;
  }

  /** The open agents, in the order they were opened. */
  agents() {
    return [...this.#agents.values()];
  }

  /**
   * Opens an agent on every node whose chat holds agent lines and has none open (after a
   * reload: the agents resume from the store). `options` as for `agent`, or a function of the
   * node id returning them. Resolves with the agents opened.
   */
  resumeAgents(options = {}, { signal } = {}) {
    return this.#run((core, now) => {
      const opened = [];
      for (const node of core.agentNodes()) {
        if (this.#agents.has(node)) continue;
        opened.push(this.#openAgent(node, typeof options === 'function' ? options(node) ?? {} : options, now));
      }
      return opened;
    }, signal);
  }

  /** Resolves once every open agent (children they spawn included) is idle at the same time. */
  async agentsIdle({ signal } = {}) {
    for (;;) {
      const open = this.agents();
      await Promise.all(open.map((a) => a.idle({ signal }).catch((e) => (a.closed ? null : Promise.reject(e)))));
      const now = this.agents();
      if (now.length === open.length && now.every((a) => a.state().phase === 'idle')) return;
    }
  }

  /**
   * Runs a mutation of the core (see `weft_core::actors::api`) and resolves with its result
   * once the store has committed it. Calls are applied one at a time, in call order.
   */
  mutate(op, args = {}, { signal } = {}) {
    return this.#run((core, now) => core.call(op, now, args), signal);
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

  /** Waits for queued mutations, detaches the agents (see `NodeAgent.close`), then releases the store. */
  async close() {
    await this.#queue;
    for (const a of this.agents()) a.close();
    this.#closed = true;
    await this.#backend.close();
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
 * Opens (or creates) an actor store. `backend`: `"indexeddb"` (default where available),
 * `"fs"` (Node: the `$CHAT_ROOT` directory `root`, the default when `root` is given) or
 * `"memory"` (the default elsewhere); `name`: the IndexedDB database; `root`: the directory
 * (created if needed; one writer at a time, native `weft` included: STORE_LOCKED after
 * `lockTimeoutMs`, default 0); `config`: harness variables (`{ACTOR_WAIT_GRAPH: "enforce"}`);
 * `title`: the session title for a new graph. Opening recovers what an interrupted writer
 * left, before anything else happens.
 */
export async function openActorStore({ backend, name = 'weft-actors', root, lockTimeoutMs = 0, config = {}, title = 'Session' } = {}) {
  const kind = backend ?? (root !== undefined ? 'fs' : typeof indexedDB === 'undefined' ? 'memory' : 'indexeddb');
  if (kind !== 'memory' && kind !== 'indexeddb' && kind !== 'fs') throw new WeftError('INVALID_ARGUMENT', `unknown actor store backend ${JSON.stringify(kind)} (indexeddb, fs or memory)`);
  if (kind === 'fs' && (typeof root !== 'string' || root === '')) throw new WeftError('INVALID_ARGUMENT', 'the "fs" backend needs `root`, the $CHAT_ROOT directory');
  if (kind !== 'fs' && root !== undefined) throw new WeftError('INVALID_ARGUMENT', `\`root\` is for the "fs" backend, not "${kind}"`);
  if (kind === 'fs' && !loadFsBackend) throw new WeftError('INVALID_ARGUMENT', 'the "fs" backend runs in Node only; use "indexeddb" or "memory" here');
  const [glue] = await Promise.all([wasm.load(), NodeAgent ?? import('./node-agent.js').then((m) => (NodeAgent = m.NodeAgent))]);
  const { ActorGraph } = glue;
  let store;
  let address;
  if (kind === 'fs') {
    const { FsBackend } = await loadFsBackend();
    store = await FsBackend.open(root, { lockTimeoutMs });
    address = store.address;
  } else {
    store = kind === 'memory' ? new MemoryBackend() : await IndexedDbBackend.open(name);
    address = kind === 'memory' ? 'memory:' : `idb://${name}`;
  }
  let core;
  try {
    const files = await store.load();
    core = Object.keys(files).length ? ActorGraph.open(config, address, files, Date.now()) : ActorGraph.init(config, address, Date.now(), title);
  } catch (e) {
    await store.close();
    throw coded(e);
  }
  const s = new ActorStore(core, store, core.report, glue);
  for (const n of core.notes) console.warn(`weft actors: ${n}`);
  try {
    await s.sync(); // the init or recovery batch is durable before anything else happens
  } catch (e) {
    await s.close(); // releases the store (a root's writer lock) the caller never gets
    throw e;
  }
  return s;
}

/** Deletes an IndexedDB actor store. */
export function deleteActorStore(name = 'weft-actors') {
  return req(indexedDB.deleteDatabase(name));
}
