// The worker side of the `batch` capability of the Worker protocol (weft-worker/1; the rules
// are the core's, core/src/jobs/wire.rs): a worker that announces `batch` in its hello may
// receive `{type: "batch", messages: [...]}` frames and may send them. `batching` wraps a
// worker's post function and its message delivery so that a DOM-style script needs to know
// nothing of it:
//   * the script's hello goes out with `capabilities.batch: true` added (unless the script
//     says `batch: false`); before it, and without it, every message goes out alone;
//   * an incoming batch frame is delivered as its messages, one by one, in order;
//   * what the script posts while a batch (or, under the shim, a message) is being delivered
//     goes out in one frame when the delivery ends; at other times (after an await, from a
//     timer, in a DOM Worker's handler of a single message) a message goes out at once while
//     the wire is idle — nothing sent since the worker last heard from the host or since the
//     last flush, the core's rule for the host side — and later ones at the end of the
//     microtask; a lone message goes out as itself, never as a batch of one; at most BATCH_MAX
//     messages share a frame (transfer lists are kept).
// Used by worker-shim.mjs (Node worker_threads) and worker.js (`weft/worker`, DOM Workers).

/** The most messages one batch frame carries (the core's `wire::BATCH_MAX`). */
export const BATCH_MAX = 256;

const isHello = (m) => m !== null && typeof m === 'object' && m.type === 'hello';

/**
 * `rawPost(message, transfer?)` posts one frame; `deliver(message)` hands one message to the
 * script. Returns `{post(message, transfer?), receive(frame), heard()}`: the script's post
 * function, what the transport calls with each frame it receives, and what it calls when it
 * delivers a frame itself (the wire is idle again).
 */
export function batching(rawPost, deliver) {
  let announced = false;
  let queue = [];
  let transfers = null;
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

  const post = (m, transfer) => {
    const list = Array.isArray(transfer) ? transfer : (transfer?.transfer ?? null);
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
      return send(m, list);
    }
    if (!announced) return send(m, list);
    if (depth === 0 && !busy && queue.length === 0) {
      busy = true;
      return send(m, list);
    }
    queue.push(m);
    if (list !== null && list.length > 0) (transfers ??= []).push(...list);
    if (queue.length >= BATCH_MAX) flush();
    else if (depth === 0 && !scheduled) {
      scheduled = true;
      queueMicrotask(flush);
    }
  };

  const receive = (frame) => {
    busy = false;
    depth++;
    try {
      if (announced && frame !== null && typeof frame === 'object' && frame.type === 'batch' && Array.isArray(frame.messages)) {
        for (const m of frame.messages) deliver(m);
      } else {
        deliver(frame);
      }
    } finally {
      depth--;
      if (depth === 0) flush();
    }
  };

  const heard = () => {
    busy = false;
  };

  return { post, receive, heard };
}
