// JS helpers of the ops bindings (wasm/src/ops.rs): each builds or fills an object in one call
// into JS, where js_sys's Reflect.set costs a call (behind a try/catch) per property.

// A `compute` output (its fields in this order).
export function mkCompute(calc, cell, inputs, previous) {
  return { output: 'compute', calc, cell, inputs, previous };
}
// An `op_finished` output (`selector` null without one, `snapshot` only when given).
export function mkFinished(op, outcome, selector, snapshot) {
  const o = { op, outcome, output: 'op_finished', selector: selector ?? null };
  if (snapshot !== undefined) o.snapshot = snapshot;
  return o;
}
// An own property `k` = `v` on a plain object the bindings made. A name the object inherits
// (`__proto__`, `toString`, … — control, cell and input names may be any of them) is defined,
// not assigned: an assignment would call `__proto__`'s setter, or throw where
// `Object.prototype` is frozen.
export function setProp(o, k, v) {
  if (k in o) Object.defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
  else o[k] = v;
}
// An `observeOp` request's fields read once each into `out` (reused between calls):
// writes, waitFor, selector, select, onSupersede, onFailure, timeoutMs, by, toolCall.
// Returns the mask of those present (neither undefined nor null): bit i for field i.
const REQUEST = ['writes', 'waitFor', 'selector', 'select', 'onSupersede', 'onFailure', 'timeoutMs', 'by', 'toolCall'];
export function readObserve(req, out) {
  let mask = 0;
  const obj = req !== null && (typeof req === 'object' || typeof req === 'function');
  for (let i = 0; i < REQUEST.length; i++) {
    const v = obj ? req[REQUEST[i]] : undefined;
    out[i] = v;
    if (v !== undefined && v !== null) mask |= 1 << i;
  }
  return mask;
}
