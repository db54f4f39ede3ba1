// The worker side of the `batch` capability of the Worker protocol (weft-worker/1; the rules
// are the core's, core/src/jobs/wire.rs): a worker that announces `batch` in its hello may
// receive `{type: "batch", messages: [...]}` frames and may send them. `batching` wraps a
// worker's post function and its message delivery so that a DOM-style script needs to know
// nothing of it:
//   * the script's hello goes out with `capabilities.batch: true` added (unless the script
//     says `batch: false`); before it, and without it, every message goes out alone;
//   * an incoming batch frame is delivered as its messages, one by one, in order (always: a
//     host may have been told the worker speaks `batch` before its hello); a message whose
//     handler throws does not stop the others: the error is reported (`reportError`, or
//     rethrown from a microtask) as an uncaught one, the worker's error handling sees it;
//   * what the script posts while a batch is being delivered goes out in one frame when the
//     delivery ends; at other times a message goes out at once while the wire is idle —
//     nothing sent since the worker last heard from the host or since the last flush, the
//     core's rule for the host side — and later ones at the end of the microtask, or (while a
//     single message is delivered) when its delivery ends: the reply to a lone request leaves
//     from the handler's post, with no copy and no clock read (the one-in-flight round trip);
//     a lone message goes out as itself, never as a batch of one; at most BATCH_MAX messages
//     share a frame (transfer lists are kept);
//   * a held message never waits behind more than about HOLD_MS of the worker's own work:
//     the held ones go out when the first of them is older than that (checked at each post
//     and after each delivered message), and after a delivered message that took that long
//     (its successor likely will too), so a CPU-bound handler's replies leave one by one;
//   * a held message is a snapshot taken at the post (structuredClone): the script may reuse
//     or change the object afterwards, and a message that cannot be cloned throws its
//     DataCloneError at the post, as postMessage does, and is not queued;
//   * a script that speaks `batch` itself may post its own batch frames: their messages join
//     the queue (a frame never holds a batch inside a batch).
// Used by worker-shim.mjs (Node worker_threads) and worker.js (`weft/worker`, DOM Workers).

/** The most messages one batch frame carries (the core's `wire::BATCH_MAX`). */
export const BATCH_MAX = 256;

/** How long (ms of the worker's own time) a held message may wait for more to share its frame. */
export const HOLD_MS = 1;

// A Proxy, which structuredClone refuses (DataCloneError) where a hand copy would read it
// through its traps: told apart where the platform can (Node >= 20.16, util.types.isProxy:
// the shim's Workers); a DOM Worker cannot, and there a Proxy of a plain object is copied as
// the object it shows.
const isProxy = globalThis.process?.getBuiltinModule?.('node:util')?.types?.isProxy ?? (() => false);

// A held message's snapshot: what structuredClone gives, without its cost for the common
// reply (a plain object of primitives: a copy of its own enumerable string-keyed fields is
// that clone); anything else (a Proxy too) through structuredClone (which throws
// DataCloneError).
const snapshotOf = (clone) => (m) => {
  const t = typeof m;
  if (t !== 'object' && t !== 'function' && t !== 'symbol') return m;
  if (m === null) return m;
  if (t === 'object' && !isProxy(m) && Object.getPrototypeOf(m) === Object.prototype) {
    const c = {};
    for (const k of Object.keys(m)) {
      const v = m[k];
      const tv = typeof v;
      // (An own `__proto__` key would set the copy's prototype: structuredClone copies it.)
      if ((tv === 'object' && v !== null) || tv === 'function' || tv === 'symbol' || k === '__proto__') return clone(m);
      c[k] = v;
    }
    return c;
  }
  return clone(m);
};

const isHello = (m) => m !== null && typeof m === 'object' && m.type === 'hello';
const isBatch = (m) => m !== null && typeof m === 'object' && m.type === 'batch' && Array.isArray(m.messages);

/**
 * Reports an error thrown by a message handler as an uncaught one without unwinding the
 * caller (the rest of a batch is still delivered): `reportError` where the platform has it
 * (DOM Workers: the worker's `error` event), else a rethrow from a microtask (Node: the
 * process's uncaught-exception handling, as a throw in a `message` listener).
 */
export const report =
  typeof globalThis.reportError === 'function'
    ? (e) => globalThis.reportError(e)
    : (e) =>
        queueMicrotask(() => {
          throw e;
        });

/**
 * The `message` listeners of a script, as `addEventListener` keeps them: one per (listener,
 * capture), `once` and `signal` honoured, objects with `handleEvent` accepted, a throwing
 * listener reported (`report`) without stopping the others. Used by worker.js; worker-shim.mjs
 * keeps a copy (the native hosts run it as `--eval` text, without this file).
 */
export function messageListeners(thisArg, onError = report) {
  let list = [];
  const capture = (o) => (typeof o === 'boolean' ? o : Boolean(o?.capture));
  const drop = (entry) => {
    entry.removed = true;
    list = list.filter((e) => e !== entry);
  };
  return {
    get size() {
      return list.length;
    },
    add(fn, options) {
      if (fn === null || (typeof fn !== 'function' && typeof fn !== 'object')) return;
      const signal = typeof options === 'object' && options !== null ? options.signal : undefined;
      if (signal?.aborted) return;
      const c = capture(options);
      if (list.some((e) => e.fn === fn && e.capture === c)) return;
      const entry = { fn, capture: c, once: Boolean(typeof options === 'object' && options?.once), removed: false };
      list = [...list, entry];
      signal?.addEventListener('abort', () => drop(entry), { once: true });
    },
    remove(fn, options) {
      const c = capture(options);
      const entry = list.find((e) => e.fn === fn && e.capture === c);
      if (entry) drop(entry);
    },
    // `list` is replaced, never changed in place: what a listener adds or removes applies
    // from the next event (a listener removed before its turn is skipped).
    dispatch(event) {
      for (const entry of list) {
        if (entry.removed) continue;
        if (entry.once) drop(entry);
        try {
          if (typeof entry.fn === 'function') entry.fn.call(thisArg, event);
          else entry.fn.handleEvent(event);
        } catch (e) {
          onError(e);
        }
      }
    },
  };
}

/**
 * `rawPost(message, transfer?)` posts one frame; `deliver(message)` hands one message to the
 * script. Returns `{post(message, transfer?), receive(frame), heard(), flush()}`: the script's
 * post function, what the transport calls with each frame it receives, what it calls when it
 * delivers a frame itself (the wire is idle again), and what sends the held messages now (before
 * the worker closes). `options.now` (a clock in ms, default `performance.now`), `options.holdMs`
 * (default HOLD_MS) and `options.report` (what a throwing `deliver` is reported to, default
 * `report`) are for tests.
 */
export function batching(rawPost, deliver, options = {}) {
  const now = options.now ?? (() => performance.now());
  const holdMs = options.holdMs ?? HOLD_MS;
  const onError = options.report ?? report;
  const clone = typeof structuredClone === 'function' ? structuredClone : null;
  const snapshot = clone === null ? null : snapshotOf(clone);
  let announced = false;
  let queue = [];
  let transfers = null;
  let heldSince = 0;
  let depth = 0;
  let scheduled = false;
  let busy = false;

  const send = (m, t) => (t === null || t.length === 0 ? rawPost(m) : rawPost(m, t));
  const flush = () => {
    scheduled = false;
    busy = false;
    if (queue.length === 0) return;
    const q = queue;
    const t = transfers;
    queue = [];
    transfers = null;
    send(q.length === 1 ? q[0] : { type: 'batch', messages: q }, t);
  };
  // A frame sent because the queue was full or held too long: the wire is not idle (the next
  // message is held, not sent alone).
  const flushBusy = () => {
    flush();
    busy = true;
  };
  // Queues snapshots (`t`: their transfer list, moved with them to one frame).
  const hold = (msgs, t) => {
    const at = now();
    if (t !== null) {
      if (queue.length + msgs.length > BATCH_MAX) flushBusy();
      if (queue.length === 0) heldSince = at;
      queue.push(...msgs);
      (transfers ??= []).push(...t);
      if (queue.length >= BATCH_MAX) flushBusy();
    } else {
      for (const m of msgs) {
        if (queue.length === 0) heldSince = at;
        queue.push(m);
        if (queue.length >= BATCH_MAX) flushBusy();
      }
    }
    if (queue.length > 0 && at - heldSince >= holdMs) flushBusy();
    else if (queue.length > 0 && depth === 0 && !scheduled) {
      scheduled = true;
      queueMicrotask(flush);
    }
  };

  const post = (m, transfer) => {
    const list = Array.isArray(transfer) ? transfer : (transfer?.transfer ?? null);
    const t = list !== null && list.length > 0 ? list : null;
    if (isHello(m)) {
      // A hello goes out at once, after what was posted before it.
      flush();
      const caps = m.capabilities;
      if (caps === null || typeof caps !== 'object' || caps.batch !== false) {
        m = { ...m, capabilities: { ...(caps !== null && typeof caps === 'object' ? caps : {}), batch: true } };
        announced = true;
      } else {
        announced = false;
      }
      return send(m, t);
    }
    if (!announced) return send(m, t);
    const batch = isBatch(m);
    if (depth === 0 && !busy && queue.length === 0 && (!batch || m.messages.length <= BATCH_MAX)) {
      // (busy once sent: a post that throws, e.g. DataCloneError, sent nothing.)
      send(m, t);
      busy = true;
      return;
    }
    if (clone === null) {
      // No snapshot possible: at once, after what is held.
      flush();
      send(m, t);
      busy = true;
      return;
    }
    // The snapshot: what the script changes afterwards is not sent; a DataCloneError is the
    // caller's, here, and nothing is queued.
    const body = batch ? m.messages : m;
    const snap = t !== null ? clone({ body, t }, { transfer: t }) : batch ? body.map(snapshot) : snapshot(body);
    const msgs = t === null ? snap : snap.body;
    if (batch && t !== null && msgs.length > BATCH_MAX) {
      // Beyond the bound, with transfers that cannot be split: as the script made it (the
      // host refuses it).
      flush();
      send({ type: 'batch', messages: msgs }, snap.t);
      busy = true;
      return;
    }
    hold(batch ? msgs : [msgs], t === null ? null : snap.t);
  };

  const deliverOne = (m) => {
    try {
      deliver(m);
    } catch (e) {
      onError(e);
    }
  };

  const receive = (frame) => {
    busy = false;
    if (!isBatch(frame)) {
      // A single message: its first reply leaves at once, from the post (the wire is idle),
      // the later ones when the delivery ends, as after a batch.
      deliverOne(frame);
      flush();
      return;
    }
    depth++;
    try {
      let last = now();
      for (const m of frame.messages) {
        deliverOne(m);
        if (queue.length > 0) {
          const at = now();
          // Held too long, or this message alone took the bound: send what is held.
          if (at - Math.min(last, heldSince) >= holdMs) flush();
          last = at;
        } else last = now();
      }
    } finally {
      depth--;
      if (depth === 0) flush();
    }
  };

  const heard = () => {
    busy = false;
  };

  return { post, receive, heard, flush };
}
