//! Bindings of the job registry. The JS runtime (`wasm/js/runtime.js`) owns the transports and
//! timers; every decision is made by `weft_core::jobs::Registry`.

use js_sys::Array;
use wasm_bindgen::prelude::*;
use weft_core::jobs::wire::{Capabilities, Reply, Violation, WireRequest};
use weft_core::jobs::{
    CancelEvidence, Delivery, EndpointId, EndpointSpec, EventKind, Hello, InputRejector, Job,
    JobEvent, JobId, JobsError, Origin, Outcome, Output, OwnerId, Registry, RegistryConfig,
    RemoteSpec, RemoteTarget, Submit, SubscriptionId, WaitEnd, WaitId,
};

#[cfg(feature = "apps")]
use crate::agent::AgentSession;
use crate::js::{
    Js, Msg, array, error, json, mono, ms, object, opt, opt_bool, opt_f64, opt_string, set,
};

// Object builders: one JS call per object instead of one per property (hot paths).
#[wasm_bindgen(inline_js = r#"
const END = ['finished', 'timed_out', 'cancelled'];
const KIND = ['succeeded', 'failed', 'cancelled', 'lost'];
const EVIDENCE = ['never_started', 'acknowledged', 'quiet_no_ack'];
export function outSend(endpoint, id, kind, value, inputId) {
  const message = kind === 0 ? { id, type: 'run', payload: value }
    : kind === 1 ? { id, type: 'cancel' } : { id, type: 'input', inputId, value };
  return { output: 'send', endpoint, message };
}
// A batch frame of requests: `spec` holds [kind, id] pairs (kinds as in outSend), `values`
// the run payloads and the inputs' [inputId, value], in order.
export function outBatch(endpoint, spec, values) {
  const n = spec.length >> 1;
  const messages = new Array(n);
  for (let i = 0, v = 0; i < n; i++) {
    const kind = spec[2 * i], id = spec[2 * i + 1];
    if (kind === 0) messages[i] = { id, type: 'run', payload: values[v++] };
    else if (kind === 1) messages[i] = { id, type: 'cancel' };
    else { const inputId = values[v++]; messages[i] = { id, type: 'input', inputId, value: values[v++] }; }
  }
  return { output: 'send', endpoint, message: { type: 'batch', messages } };
}
// Requests are held for a batch frame: the host calls flushSends() before it yields.
const FLUSH = Object.freeze({ output: 'flush' });
// A Proxy, which structuredClone refuses (DataCloneError) where a hand copy would read it
// through its traps: told apart where the platform can (Node >= 20.16, util.types.isProxy);
// a browser cannot, and there a Proxy of a plain object is copied as the object it shows.
const isProxy = globalThis.process?.getBuiltinModule?.('node:util')?.types?.isProxy ?? (() => false);
// A payload's snapshot at submit, for a run that does not leave within the call (held for a
// batch frame, queued): what structuredClone gives (postMessage's clone), without its cost for
// the common payload, a plain object of primitives; anything else (a Proxy too) through
// structuredClone, which throws DataCloneError (the submit then changes nothing).
export function snapshotPayload(m) {
  const t = typeof m;
  if (t !== 'object' || m === null) return t === 'function' || t === 'symbol' ? structuredClone(m) : m;
  if (!isProxy(m) && Object.getPrototypeOf(m) === Object.prototype) {
    const c = {};
    for (const k of Object.keys(m)) {
      const v = m[k];
      const tv = typeof v;
      if ((tv === 'object' && v !== null) || tv === 'function' || tv === 'symbol' || k === '__proto__') return structuredClone(m);
      c[k] = v;
    }
    return c;
  }
  return structuredClone(m);
}
export function outWait(wait, job, end, outcome) {
  const o = { output: 'wait_settled', wait, job, end: END[end] };
  if (outcome !== undefined) { o.outcome = outcome.outcome; o.result = outcome; }
  return o;
}
// `outWait` of a success and its outcome (`mkOutcome`'s) in one call: a job's usual end.
export function outWaitSucceeded(wait, job, value, num) {
  const result = { outcome: 'succeeded', value: num === undefined ? value : num };
  return { output: 'wait_settled', wait, job, end: 'finished', outcome: 'succeeded', result };
}
export function outJob(kind, job, outcome, owner) {
  switch (kind) {
    case 0: return { output: 'job_finished', job, outcome: KIND[outcome] };
    case 1: return { output: 'note_queued', owner, job };
    case 2: return { output: 'wake', owner, job };
    case 3: return { output: 'terminate', endpoint: job };
    case 5: return FLUSH;
    default: return { output: 'observed', subscription: job };
  }
}
// `num`: a numeric value, passed as a number (not boxed on the Rust side).
export function mkOutcome(kind, value, num, message, code, started, evidence, quietMs, reason) {
  switch (kind) {
    case 0: return { outcome: 'succeeded', value: num === undefined ? value : num };
    case 1: return { outcome: 'failed', message, code: code ?? null, started };
    case 2: { const o = { outcome: 'cancelled', evidence: EVIDENCE[evidence] }; if (evidence === 2) o.quietMs = quietMs; return o; }
    default: return code == null ? { outcome: 'lost', reason } : { outcome: 'lost', reason, evidence: code };
  }
}
export function mkSubmitted(job, reused) { return { job, reused }; }
// Submit options read in one call (JobRegistry.submit), in the order the fields were read one
// by one: returns the owner when it is a string; out: [note, wake] (1 true, 0 false, -1 not a
// boolean), [origin neither undefined nor null, reuseKey a string] (1 / 0).
export function readSubmit(o, out) {
  if (o === null || (typeof o !== 'object' && typeof o !== 'function')) {
    out[0] = -1; out[1] = -1; out[2] = 0; out[3] = 0;
    return undefined;
  }
  const owner = o.owner, origin = o.origin, reuseKey = o.reuseKey, note = o.note, wake = o.wake;
  out[0] = typeof note === 'boolean' ? +note : -1;
  out[1] = typeof wake === 'boolean' ? +wake : -1;
  out[2] = origin !== undefined && origin !== null ? 1 : 0;
  out[3] = typeof reuseKey === 'string' ? 1 : 0;
  return typeof owner === 'string' ? owner : undefined;
}
// A pump's batch: the next deadline first (undefined when none), then the outputs.
export function mkBatch(deadline, a, b, c) {
  return a === undefined ? [deadline] : b === undefined ? [deadline, a]
    : c === undefined ? [deadline, a, b] : [deadline, a, b, c];
}
// The batch of a call that also pumps (submitPump, waitPump, onMessagePump), written into
// the runtime's reusable array `out` from index 0: the call's result first (submit, wait),
// the next deadline, then the outputs; returns the next index. Entries are written by index
// (the array is never shortened: no new backing store per call); the Rust side writes the
// further outputs with `set` and a `null` after the last (no entry is ever null).
export function fillBatch(out, lead, deadline, a, b, c) {
  let i = 0;
  if (lead !== undefined) out[i++] = lead;
  out[i++] = deadline;
  if (a !== undefined) {
    out[i++] = a;
    if (b !== undefined) {
      out[i++] = b;
      if (c !== undefined) out[i++] = c;
    }
  }
  return i;
}
// A worker's message read in one call (JobRegistry.onMessage). out: [kind (index into
// KINDS, -1: read it field by field), id present, id, value tag, value number, fits]. A
// message is read here only when it is a non-array object whose `type` is a known name and
// whose `id` is a number or absent; every rule is checked in Rust on what this reads.
const KINDS = ['hello', 'partial', 'progress', 'done', 'error', 'cancelled', 'input_applied', 'input_rejected', 'batch'];
const leaf = (x) => {
  switch (typeof x) {
    case 'string': return x.length + 2;
    case 'number': case 'bigint': return 24;
    case 'boolean': case 'undefined': return 5;
    case 'object': return x === null ? 4 : -1;
    default: return 8;
  }
};
// `readReply`'s numbers go into six f64s of the calling module's memory at `at`, through one
// view kept between calls (not a typed array made per call), made again when that memory grew
// (its old buffer is detached: the view's length is 0) or another module calls (two modules
// share this file: `weft` and `weft/apps` in one page).
let scratchMem = null;
let scratchAt = -1;
let scratch = new Float64Array(0);
export function readReply(m, limit, mem, at) {
  if (scratch.length === 0 || mem !== scratchMem || at !== scratchAt) {
    scratchMem = mem;
    scratchAt = at;
    scratch = new Float64Array(mem.buffer, at, 6);
  }
  return readReplyInto(m, limit, scratch);
}
function readReplyInto(m, limit, out) {
  out[0] = -1;
  if (typeof m !== 'object' || m === null || Array.isArray(m) || ArrayBuffer.isView(m) || m instanceof ArrayBuffer) return undefined;
  const kind = KINDS.indexOf(m.type);
  if (kind < 0) return undefined;
  // A batch frame: out[1] its length (-1: `messages` is no array), the messages returned.
  if (kind === 8) {
    const list = m.messages;
    out[0] = 8;
    out[1] = Array.isArray(list) ? list.length : -1;
    return list;
  }
  const id = m.id;
  if (id !== undefined && typeof id !== 'number') return undefined;
  // approxSize's sum (js.rs) for a flat object.
  let size = 0;
  for (const k in m) {
    const s = leaf(m[k]);
    if (s < 0) { size = -1; break; }
    size += k.length + 4 + s;
  }
  const v = m.value;
  out[0] = kind;
  out[1] = id === undefined ? 0 : 1;
  out[2] = id === undefined ? 0 : id;
  // -1: a nested value; the size is then walked on demand (js.rs's approxSize).
  out[5] = size < 0 ? -1 : size <= limit ? 1 : 0;
  switch (typeof v) {
    case 'undefined': out[3] = 6; return undefined;
    case 'number': out[3] = 4; out[4] = v; return undefined;
    case 'boolean': out[3] = 5; out[4] = v ? 1 : 0; return undefined;
    default: if (v === null) { out[3] = 0; return undefined; } out[3] = 2; return v;
  }
}
// A batch frame's messages read in one call: readReply's six numbers per message in `out`,
// and per message [the message, its value when not inline] in the returned list.
export function readBatch(list, limit, out) {
  const n = list.length;
  const held = new Array(2 * n);
  const o = [0, 0, 0, 0, 0, 0];
  for (let i = 0; i < n; i++) {
    const m = list[i];
    const v = readReplyInto(m, limit, o);
    // A batch inside is read field by field (the core refuses it).
    if (o[0] === 8) o[0] = -1;
    for (let k = 0; k < 6; k++) out[6 * i + k] = o[k];
    held[2 * i] = m;
    held[2 * i + 1] = v;
  }
  return held;
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = outSend)]
    fn out_send(
        endpoint: f64,
        id: f64,
        kind: u32,
        value: &JsValue,
        input_id: Option<String>,
    ) -> JsValue;
    #[wasm_bindgen(js_name = outWait)]
    fn out_wait(wait: f64, job: f64, end: u32, outcome: &JsValue) -> JsValue;
    /// A `wait_settled` of a job that succeeded, with its outcome (`num`: a numeric value).
    #[wasm_bindgen(js_name = outWaitSucceeded)]
    fn out_wait_succeeded(wait: f64, job: f64, value: &JsValue, num: Option<f64>) -> JsValue;
    #[wasm_bindgen(js_name = outJob)]
    fn out_job(kind: u32, job: f64, outcome: u32, owner: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = mkOutcome)]
    #[allow(clippy::too_many_arguments)]
    fn mk_outcome(
        kind: u32,
        value: &JsValue,
        num: Option<f64>,
        message: Option<String>,
        code: Option<String>,
        started: bool,
        evidence: u32,
        quiet_ms: f64,
        reason: Option<String>,
    ) -> JsValue;
    #[wasm_bindgen(js_name = mkSubmitted)]
    fn mk_submitted(job: f64, reused: bool) -> JsValue;
    #[wasm_bindgen(js_name = readSubmit)]
    fn read_submit(opts: &JsValue, out: &mut [f64]) -> Option<String>;
    #[wasm_bindgen(catch, js_name = snapshotPayload)]
    fn snapshot_payload(v: &JsValue) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(js_name = mkBatch)]
    fn mk_batch(deadline: Option<f64>, a: &JsValue, b: &JsValue, c: &JsValue) -> Array;
    #[wasm_bindgen(js_name = fillBatch)]
    fn fill_batch(
        out: &Array,
        lead: Option<f64>,
        deadline: Option<f64>,
        a: &JsValue,
        b: &JsValue,
        c: &JsValue,
    ) -> u32;
    /// Reads `msg` (see there), its six numbers written at `at` in this module's `memory`.
    #[wasm_bindgen(js_name = readReply)]
    fn read_reply(msg: &JsValue, limit: f64, memory: &JsValue, at: u32) -> JsValue;
    #[wasm_bindgen(js_name = readBatch)]
    fn read_batch(list: &JsValue, limit: f64, out: &mut [f64]) -> Vec<JsValue>;
    #[wasm_bindgen(js_name = outBatch)]
    fn out_batch(endpoint: f64, spec: &[f64], values: Vec<JsValue>) -> JsValue;
}

/// The message types `readReply` knows, in its order.
const KINDS: [&str; 9] = [
    "hello",
    "partial",
    "progress",
    "done",
    "error",
    "cancelled",
    "input_applied",
    "input_rejected",
    "batch",
];

/// `readReply`'s six numbers (and the value it returned) as a `Msg`.
fn msg_of(raw: JsValue, kind: &'static str, out: &[f64], v: JsValue, limit: usize) -> Msg {
    let value = match out[3] as u32 {
        0 => Some(Js::Null),
        4 => Some(Js::Num(out[4])),
        5 => Some(Js::Bool(out[4] != 0.0)),
        6 => None,
        _ => Some(Js::Val(v)),
    };
    Msg {
        raw,
        kind,
        id: (out[1] != 0.0).then_some(out[2]),
        value,
        limit,
        fits: (out[5] >= 0.0).then_some(out[5] != 0.0),
        messages: None,
    }
}

/// A batch frame (`readReply` said so: `out[1]` is the length of its `messages`, -1 when
/// that is no array) as a `Msg` whose messages are pre-read in one JS call, when it is within
/// the bound; beyond it (or not an array) the core reads what it needs itself.
fn batch_payload(raw: JsValue, list: JsValue, len: f64, limit: usize) -> Js {
    let messages = if len < 0.0 || len as usize > weft_core::jobs::wire::BATCH_MAX {
        (!list.is_undefined()).then(|| Js::from_js(list))
    } else {
        let n = len as usize;
        let mut out = vec![0.0f64; 6 * n];
        let mut held = read_batch(&list, limit as f64, &mut out).into_iter();
        let mut items = Vec::with_capacity(n);
        for o in out.chunks_exact(6) {
            let (m, v) = (
                held.next().unwrap_or(JsValue::UNDEFINED),
                held.next().unwrap_or(JsValue::UNDEFINED),
            );
            items.push(
                match usize::try_from(o[0] as i64).ok().and_then(|k| KINDS.get(k)) {
                    Some(&kind) => Js::Msg(Box::new(msg_of(m, kind, o, v, limit))),
                    None => Js::from_js(m),
                },
            );
        }
        Some(Js::Items(items.into()))
    };
    Js::Msg(Box::new(Msg {
        raw,
        kind: "batch",
        id: None,
        value: None,
        limit,
        fits: None,
        messages,
    }))
}

/// Where `readReply` writes a message's six numbers: a buffer of this module's memory that
/// JS writes through one view kept between calls (a typed array made per call, as a `&mut
/// [f64]` argument makes, was ~70 ns of each message), and the memory itself.
struct ReplyScratch {
    numbers: std::cell::Cell<[f64; 6]>,
    memory: JsValue,
}

thread_local! {
    static REPLY: ReplyScratch = ReplyScratch {
        numbers: std::cell::Cell::new([0.0; 6]),
        memory: wasm_bindgen::memory(),
    };
}

/// A worker's message as the core's payload: read in one JS call when it has the usual shape
/// (see `readReply`), field by field otherwise.
/// `spare`: a box left by an earlier message, reused (no allocation per message).
fn reply_payload(msg: JsValue, limit: usize, spare: &mut Option<Box<Msg>>) -> Js {
    let (v, out) = REPLY.with(|r| {
        let v = read_reply(&msg, limit as f64, &r.memory, r.numbers.as_ptr() as u32);
        (v, r.numbers.get())
    });
    let Some(&kind) = usize::try_from(out[0] as i64)
        .ok()
        .and_then(|k| KINDS.get(k))
    else {
        return Js::from_js(msg);
    };
    if kind == "batch" {
        return batch_payload(msg, v, out[1], limit);
    }
    let m = msg_of(msg, kind, &out, v, limit);
    match spare.take() {
        Some(mut b) => {
            *b = m;
            Js::Msg(b)
        }
        None => Js::Msg(Box::new(m)),
    }
}

/// Output kinds a pump may leave out (bits of `pump`'s `interest`).
const WANT_FINISHED: u32 = 1;
const WANT_NOTES: u32 = 2;

/// Whether a pump with `interest` hands `o` to the runtime (the core records every event and
/// note either way).
fn wanted_output(o: &Output<Js>, interest: u32) -> bool {
    match o {
        Output::JobFinished { .. } => interest & WANT_FINISHED != 0,
        Output::NoteQueued { .. } => interest & WANT_NOTES != 0,
        _ => true,
    }
}

/// The portable job registry, as a JS class. Times are milliseconds on a monotonic clock the
/// caller chooses (the JS runtime uses `performance.now()`).
#[wasm_bindgen]
pub struct JobRegistry {
    pub(crate) inner: Registry<Js>,
    owner_strings: std::collections::HashMap<String, JsValue>,
    /// `pump`'s buffer of drained outputs (empty between calls).
    pending: Vec<Output<Js>>,
    /// The box of the last worker message read (emptied: it holds no JS value).
    spare_msg: Option<Box<Msg>>,
    /// A `flush` output was handed out since the last `flushSends`.
    flush_asked: bool,
}

impl Default for JobRegistry {
    fn default() -> Self {
        Self::new(None)
    }
}

#[wasm_bindgen]
impl JobRegistry {
    /// A new registry; job ids start at `firstJobId` (default 1).
    #[wasm_bindgen(constructor)]
    pub fn new(first_job_id: Option<f64>) -> JobRegistry {
        JobRegistry {
            inner: Registry::new(RegistryConfig {
                first_job_id: first_job_id.map(ms).unwrap_or(1).max(1),
            }),
            owner_strings: Default::default(),
            pending: Vec::new(),
            spare_msg: None,
            flush_asked: false,
        }
    }

    /// Registers an endpoint. `spec`: `{owner, label, hello: "await"|"skip"|{declared:caps},
    /// helloTimeoutMs, quietMs, maxConcurrent, maxMessageBytes}`.
    #[wasm_bindgen(js_name = openEndpoint)]
    pub fn open_endpoint(&mut self, now: f64, spec: JsValue) -> Result<f64, JsValue> {
        let mut s = EndpointSpec::new(
            opt_string(&spec, "owner").unwrap_or_else(|| "app".into()),
            opt_string(&spec, "label").unwrap_or_else(|| "worker".into()),
        );
        s.hello = match opt(&spec, "hello") {
            Some(h) if h.as_string().as_deref() == Some("skip") => Hello::Skip,
            Some(h) if h.as_bool() == Some(false) => Hello::Skip,
            Some(h) if h.is_object() => {
                let declared = opt(&h, "declared").unwrap_or(h);
                Hello::Declared(Capabilities {
                    input: opt_bool(&declared, "input").unwrap_or(false),
                    cancel_ack: opt_bool(&declared, "cancelAck").unwrap_or(false),
                    error_code: opt_bool(&declared, "errorCode").unwrap_or(false),
                    batch: opt_bool(&declared, "batch").unwrap_or(false),
                })
            }
            Some(h) if h.as_string().as_deref() != Some("await") && h.as_bool() != Some(true) => {
                return Err(crate::js::coded_error(
                    "INVALID_ARGUMENT",
                    "hello must be \"await\", \"skip\" or {declared: {input, cancelAck, errorCode}}",
                ));
            }
            _ => Hello::Await {
                timeout_ms: opt_f64(&spec, "helloTimeoutMs").map(ms).unwrap_or(1000),
            },
        };
        if let Some(q) = opt_f64(&spec, "quietMs") {
            s.quiet_ms = ms(q);
        }
        if let Some(m) = opt_f64(&spec, "maxConcurrent") {
            if m < 1.0 {
                return Err(crate::js::coded_error(
                    "INVALID_ARGUMENT",
                    "maxConcurrent must be at least 1",
                ));
            }
            s.max_concurrent = Some(m as usize);
        }
        if let Some(m) = opt_f64(&spec, "maxMessageBytes") {
            s.max_message_bytes = m as usize;
        }
        s.batch_sends = opt_bool(&spec, "batchSends").unwrap_or(false);
        Ok(self.inner.open_endpoint(mono(now), s).0 as f64)
    }

    /// Opens an endpoint on a remote job host (`weft serve`'s `/api/jobs/remote`); emits a
    /// `connect` output. `spec`: `{owner, label, maxConcurrent, maxMessageBytes}`; `remote`:
    /// `{url, token, script | kind, windowMs, heartbeatMs, allowInsecure}`. The host reports its
    /// socket with `onSocketOpen`, `onSocketFrame`, `onUndecodable` and `onSocketClosed` and
    /// performs the `frame` and `close_socket` outputs.
    #[wasm_bindgen(js_name = openRemote)]
    pub fn open_remote(
        &mut self,
        now: f64,
        spec: JsValue,
        remote: JsValue,
    ) -> Result<f64, JsValue> {
        let mut s = EndpointSpec::new(
            opt_string(&spec, "owner").unwrap_or_else(|| "app".into()),
            opt_string(&spec, "label").unwrap_or_else(|| "remote".into()),
        );
        if let Some(m) = opt_f64(&spec, "maxConcurrent") {
            if m < 1.0 {
                return Err(crate::js::coded_error(
                    "INVALID_ARGUMENT",
                    "maxConcurrent must be at least 1",
                ));
            }
            s.max_concurrent = Some(m as usize);
        }
        if let Some(m) = opt_f64(&spec, "maxMessageBytes") {
            s.max_message_bytes = m as usize;
        }
        let target = match (opt_string(&remote, "script"), opt_string(&remote, "kind")) {
            (Some(script), None) => RemoteTarget::Script(script),
            (None, Some(kind)) => RemoteTarget::Kind(kind),
            _ => {
                return Err(crate::js::coded_error(
                    "INVALID_ARGUMENT",
                    "a remote endpoint opens exactly one of `script` or `kind`",
                ));
            }
        };
        let url = opt_string(&remote, "url").unwrap_or_default();
        let mut r = RemoteSpec::new(
            url,
            opt_string(&remote, "token").unwrap_or_default(),
            target,
        );
        if let Some(w) = opt_f64(&remote, "windowMs") {
            r.window_ms = ms(w);
        }
        if let Some(h) = opt_f64(&remote, "heartbeatMs") {
            r.heartbeat_ms = ms(h);
        }
        r.allow_insecure = opt_bool(&remote, "allowInsecure").unwrap_or(false);
        self.inner
            .open_remote(mono(now), s, r)
            .map(|e| e.0 as f64)
            .map_err(|e| error(&e))
    }

    /// The socket of a remote endpoint opened (sends hello or resume).
    #[wasm_bindgen(js_name = onSocketOpen)]
    pub fn on_socket_open(&mut self, now: f64, endpoint: f64) -> Result<(), JsValue> {
        self.inner
            .on_socket_open(mono(now), EndpointId(endpoint as u64))
            .map_err(|e| error(&e))
    }

    /// One text frame of a remote endpoint's socket, decoded with `JSON.parse` (a frame that
    /// does not decode goes to `onUndecodable`).
    #[wasm_bindgen(js_name = onSocketFrame)]
    pub fn on_socket_frame(
        &mut self,
        now: f64,
        endpoint: f64,
        frame: JsValue,
    ) -> Result<(), JsValue> {
        self.inner
            .on_socket_frame(mono(now), EndpointId(endpoint as u64), &Js::from_js(frame))
            .map_err(|e| error(&e))
    }

    /// The socket of a remote endpoint closed, or its connect failed (inside the resumption
    /// window the registry reconnects and resumes).
    #[wasm_bindgen(js_name = onSocketClosed)]
    pub fn on_socket_closed(
        &mut self,
        now: f64,
        endpoint: f64,
        reason: &str,
    ) -> Result<(), JsValue> {
        self.inner
            .on_socket_closed(mono(now), EndpointId(endpoint as u64), reason)
            .map_err(|e| error(&e))
    }

    /// A message from the endpoint's worker, passed through untouched.
    #[wasm_bindgen(js_name = onMessage)]
    pub fn on_message(&mut self, now: f64, endpoint: f64, msg: JsValue) -> Result<(), JsValue> {
        let id = EndpointId(endpoint as u64);
        let msg = match self.inner.endpoint(id) {
            Some(ep) => reply_payload(msg, ep.max_message_bytes, &mut self.spare_msg),
            None => Js::from_js(msg),
        };
        let r = self.inner.on_message(mono(now), id, &msg);
        // The box is kept for the next message, without the message itself.
        if let Js::Msg(mut b) = msg {
            b.raw = JsValue::UNDEFINED;
            b.value = None;
            b.messages = None;
            self.spare_msg = Some(b);
        }
        r.map_err(|e| error(&e))
    }

    /// A message the transport could not decode (e.g. `messageerror`).
    #[wasm_bindgen(js_name = onUndecodable)]
    pub fn on_undecodable(&mut self, now: f64, endpoint: f64, detail: &str) -> Result<(), JsValue> {
        self.inner
            .on_undecodable(mono(now), EndpointId(endpoint as u64), detail)
            .map_err(|e| error(&e))
    }

    /// The worker went away on its own (threw, exited, disconnected).
    #[wasm_bindgen(js_name = onEndpointClosed)]
    pub fn on_endpoint_closed(
        &mut self,
        now: f64,
        endpoint: f64,
        reason: &str,
    ) -> Result<(), JsValue> {
        self.inner
            .on_endpoint_closed(mono(now), EndpointId(endpoint as u64), reason)
            .map_err(|e| error(&e))
    }

    /// Terminates the endpoint (emits a `terminate` output; running jobs become `lost`).
    #[wasm_bindgen(js_name = terminateEndpoint)]
    pub fn terminate_endpoint(
        &mut self,
        now: f64,
        endpoint: f64,
        reason: &str,
    ) -> Result<(), JsValue> {
        self.inner
            .terminate_endpoint(mono(now), EndpointId(endpoint as u64), reason)
            .map_err(|e| error(&e))
    }

    /// Submits a job. `opts`: `{owner, origin: {thread, turn, toolCall}, reuseKey, note, wake}`.
    /// Returns `{job, reused}`.
    pub fn submit(
        &mut self,
        now: f64,
        endpoint: f64,
        payload: JsValue,
        opts: Option<JsValue>,
    ) -> Result<JsValue, JsValue> {
        let r = self.submit_inner(now, endpoint, payload, opts)?;
        Ok(mk_submitted(r.job.0 as f64, r.reused))
    }

    /// `submit` and `pump` in one call (the runtime's hot path), the pump written into `out`
    /// (see `batch_into`): `[job, deadline, ...outputs]`, the job's id negated when an existing
    /// job was reused; returns NaN, or the job's id alone when there is nothing to carry out
    /// and no deadline. On an error nothing is pumped.
    #[wasm_bindgen(js_name = submitPump)]
    pub fn submit_pump(
        &mut self,
        now: f64,
        endpoint: f64,
        payload: JsValue,
        opts: Option<JsValue>,
        interest: u32,
        out: &Array,
    ) -> Result<f64, JsValue> {
        let r = self.submit_inner(now, endpoint, payload, opts)?;
        let job = r.job.0 as f64;
        Ok(self.batch_into(interest, Some(if r.reused { -job } else { job }), out))
    }

    /// Withdraws the run of a job just submitted whose `send` the transport refused
    /// (`postMessage` threw `DataCloneError`): no record, slot, reuse key or event is left (see
    /// `Registry::withdraw_unposted`; valid only in the submitting call).
    #[wasm_bindgen(js_name = withdrawUnposted)]
    pub fn withdraw_unposted(&mut self, now: f64, job: f64) -> Result<(), JsValue> {
        self.inner
            .withdraw_unposted(mono(now), JobId(job as u64))
            .map_err(|e| error(&e))
    }

    /// `wait` and `pump` in one call: `[wait, deadline, ...outputs]` in `out` (the wait's own
    /// `wait_settled` among them when the job has already ended), or the wait's id alone (see
    /// `submitPump`). On an error nothing is pumped.
    #[wasm_bindgen(js_name = waitPump)]
    pub fn wait_pump(
        &mut self,
        now: f64,
        job: f64,
        timeout_ms: Option<f64>,
        interest: u32,
        out: &Array,
    ) -> Result<f64, JsValue> {
        let w = self.wait(now, job, timeout_ms)?;
        Ok(self.batch_into(interest, Some(w), out))
    }

    /// `onMessage` and `pump` in one call: `[deadline, ...outputs]` in `out` as `pump`
    /// returns them, and NaN; 0, leaving `out` as it was, when there is nothing to carry out
    /// and no deadline. On an error nothing is pumped.
    #[wasm_bindgen(js_name = onMessagePump)]
    pub fn on_message_pump(
        &mut self,
        now: f64,
        endpoint: f64,
        msg: JsValue,
        interest: u32,
        out: &Array,
    ) -> Result<f64, JsValue> {
        self.on_message(now, endpoint, msg)?;
        Ok(self.batch_into(interest, None, out))
    }
}

impl JobRegistry {
    fn submit_inner(
        &mut self,
        now: f64,
        endpoint: f64,
        payload: JsValue,
        opts: Option<JsValue>,
    ) -> Result<weft_core::jobs::Submitted, JsValue> {
        // The options' fields are read in one JS call (`readSubmit`); origin and reuse key
        // are read again only when present, before the payload is captured.
        let mut flags = [-1.0f64, -1.0, 0.0, 0.0];
        let owner = opts
            .as_ref()
            .and_then(|o| read_submit(o, &mut flags))
            .unwrap_or_else(|| "app".into());
        let endpoint = EndpointId(endpoint as u64);
        let mut origin = None;
        let mut reuse_key = None;
        if let Some(opts) = &opts {
            if flags[2] != 0.0
                && let Some(o) = opt(opts, "origin")
            {
                origin = Some(Origin {
                    thread: opt_string(&o, "thread"),
                    turn: opt_string(&o, "turn"),
                    tool_call: opt_string(&o, "toolCall"),
                    ..Origin::default()
                });
            }
            if flags[3] != 0.0 {
                reuse_key = opt_string(opts, "reuseKey");
            }
        }
        // Captured at the call, as postMessage would: a run held for a batch frame or queued
        // leaves later, and the caller may reuse the object meanwhile. A submit answered from
        // its reuse key creates no run: nothing to capture.
        let answered = reuse_key
            .as_deref()
            .is_some_and(|k| self.inner.holds_reuse_key(&OwnerId::new(owner.as_str()), k));
        let payload = if answered || self.inner.sends_at_once(endpoint) {
            payload
        } else {
            snapshot_payload(&payload)?
        };
        let mut req = Submit::new(owner, endpoint, Js::from_js(payload));
        req.reuse_key = reuse_key;
        // No options (`undefined` or `null`): the defaults, without reading a field.
        if opts.is_some() {
            if let Some(o) = origin {
                req.origin = o;
            }
            req.note = flags[0] != 0.0;
            req.wake = flags[1] == 1.0;
        }
        self.inner.submit(mono(now), req).map_err(|e| error(&e))
    }

    /// What `pump` returns.
    fn batch(&mut self, interest: u32) -> Array {
        // The drained outputs go through a buffer kept between calls (no allocation per pump).
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend(self.inner.drain_outputs());
        let deadline = self.poll_timeout();
        let mut wanted = pending.drain(..).filter(|o| wanted_output(o, interest));
        let (a, b, c) = (wanted.next(), wanted.next(), wanted.next());
        let more = c.is_some();
        let mut js = |o: Option<Output<Js>>| match o {
            Some(o) => self.output_js(o),
            None => JsValue::UNDEFINED,
        };
        let (a, b, c) = (js(a), js(b), js(c));
        let batch = mk_batch(deadline, &a, &b, &c);
        if more {
            for o in wanted.by_ref() {
                batch.push(&self.output_js(o));
            }
        }
        drop(wanted);
        self.pending = pending;
        if let Some(f) = self.flush_output() {
            batch.push(&f);
        }
        batch
    }

    /// `batch` for the calls that pump in the same call, into the runtime's reusable array:
    /// `out` gets `lead?, deadline, ...outputs, null` from index 0 and NaN is returned; without
    /// a deadline and with nothing to carry out (a burst's held submits and their waits) `out`
    /// is left as it was and `lead` (0 without one) returned: no JS call and no array.
    fn batch_into(&mut self, interest: u32, lead: Option<f64>, out: &Array) -> f64 {
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend(self.inner.drain_outputs());
        let deadline = self.poll_timeout();
        let mut wanted = pending.drain(..).filter(|o| wanted_output(o, interest));
        let (a, b, c) = (wanted.next(), wanted.next(), wanted.next());
        if a.is_none() && deadline.is_none() && !self.flush_due() {
            drop(wanted);
            self.pending = pending;
            return lead.unwrap_or(0.0);
        }
        let more = c.is_some();
        let mut js = |o: Option<Output<Js>>| match o {
            Some(o) => self.output_js(o),
            None => JsValue::UNDEFINED,
        };
        let (a, b, c) = (js(a), js(b), js(c));
        let mut i = fill_batch(out, lead, deadline, &a, &b, &c);
        if more {
            for o in wanted.by_ref() {
                out.set(i, self.output_js(o));
                i += 1;
            }
        }
        drop(wanted);
        self.pending = pending;
        if let Some(f) = self.flush_output() {
            out.set(i, f);
            i += 1;
        }
        out.set(i, JsValue::NULL);
        f64::NAN
    }
}

#[wasm_bindgen]
impl JobRegistry {
    /// Asks the job's execution to stop; returns the status name.
    pub fn cancel(&mut self, now: f64, job: f64, reason: &str) -> Result<String, JsValue> {
        self.inner
            .cancel(mono(now), JobId(job as u64), reason)
            .map(|s| s.as_str().to_owned())
            .map_err(|e| error(&e))
    }

    /// Delivers structured input; returns the input id. The value is captured at the call
    /// (`snapshotPayload`: a value that cannot be copied throws `DataCloneError`, nothing
    /// recorded) when it could not be withdrawn should its post fail (it leaves in a batch
    /// frame, or its event is read at once: `Registry::input_withdrawable`); otherwise it is
    /// handed on as is, and a post that throws is taken back with `withdrawUnpostedInput`.
    #[wasm_bindgen(js_name = sendInput)]
    pub fn send_input(
        &mut self,
        now: f64,
        job: f64,
        value: JsValue,
        input_id: Option<String>,
    ) -> Result<String, JsValue> {
        let job = JobId(job as u64);
        let value = if self.inner.input_withdrawable(job) {
            value
        } else {
            snapshot_payload(&value)?
        };
        self.inner
            .send_input(mono(now), job, input_id, Js::from_js(value))
            .map_err(|e| error(&e))
    }

    /// Withdraws input `inputId` of `job` whose `send` the transport refused (`postMessage`
    /// threw `DataCloneError`): no event is left, the input id is free again, the run goes on
    /// (see `Registry::withdraw_unposted_input`; valid only in the sending call).
    #[wasm_bindgen(js_name = withdrawUnpostedInput)]
    pub fn withdraw_unposted_input(&mut self, job: f64, input_id: &str) -> Result<(), JsValue> {
        self.inner
            .withdraw_unposted_input(JobId(job as u64), input_id)
            .map_err(|e| error(&e))
    }

    /// Starts a wait; ends with a `wait_settled` output.
    pub fn wait(&mut self, now: f64, job: f64, timeout_ms: Option<f64>) -> Result<f64, JsValue> {
        self.inner
            .wait(mono(now), JobId(job as u64), timeout_ms.map(ms))
            .map(|w| w.0 as f64)
            .map_err(|e| error(&e))
    }

    /// Cancels a wait (the job keeps running).
    #[wasm_bindgen(js_name = cancelWait)]
    pub fn cancel_wait(&mut self, wait: f64) -> Result<(), JsValue> {
        self.inner
            .cancel_wait(WaitId(wait as u64))
            .map_err(|e| error(&e))
    }

    /// Subscribes to a job's journal (`from`: replay from that sequence number).
    pub fn observe(&mut self, job: f64, from: Option<f64>, capacity: f64) -> Result<f64, JsValue> {
        self.inner
            .observe(JobId(job as u64), from.map(ms), capacity as usize)
            .map(|s| s.0 as f64)
            .map_err(|e| error(&e))
    }

    /// Takes a subscription's queued deliveries (events and `{type:"missed"}` ranges).
    #[wasm_bindgen(js_name = takeDeliveries)]
    pub fn take_deliveries(&mut self, sub: f64) -> Result<Array, JsValue> {
        let d = self
            .inner
            .take_deliveries(SubscriptionId(sub as u64))
            .map_err(|e| error(&e))?;
        Ok(array(d.iter().map(|d| match d {
            Delivery::Event(e) => event_js(e),
            Delivery::Missed { job, from, to } => object(&[
                ("type", "missed".into()),
                ("job", (job.0 as f64).into()),
                ("from", (*from as f64).into()),
                ("to", (*to as f64).into()),
            ]),
        })))
    }

    /// Stops an observation.
    pub fn unsubscribe(&mut self, sub: f64) -> bool {
        self.inner.unsubscribe(SubscriptionId(sub as u64))
    }

    /// Takes the owner's unread completion notes.
    #[wasm_bindgen(js_name = readMailbox)]
    pub fn read_mailbox(&mut self, owner: &str) -> JsValue {
        json(&self.inner.read_mailbox(&OwnerId::new(owner)))
    }

    /// Number of unread notes of the owner.
    #[wasm_bindgen(js_name = mailboxLength)]
    pub fn mailbox_length(&self, owner: &str) -> f64 {
        self.inner.mailbox_len(&OwnerId::new(owner)) as f64
    }

    /// Releases one finished job (its record, journal and reuse key) now, instead of when its
    /// owner closes. False, and nothing changes, while it runs or a wait, observer or live
    /// reuse key still names it.
    pub fn forget(&mut self, job: f64) -> bool {
        self.inner.forget(JobId(job as u64))
    }

    /// Disposes what the owner owns; returns the report.
    #[wasm_bindgen(js_name = closeOwner)]
    pub fn close_owner(&mut self, now: f64, owner: &str) -> JsValue {
        json(&self.inner.close_owner(mono(now), &OwnerId::new(owner)))
    }

    /// Closes the owner but for releasing its jobs' records (every unfinished job gets its
    /// outcome now; none of its jobs can be found any more). Returns `{close, pending,
    /// report}`, the report without `jobs`: `closeOwnerStep` releases them in slices.
    #[wasm_bindgen(js_name = beginCloseOwner)]
    pub fn begin_close_owner(&mut self, now: f64, owner: &str) -> JsValue {
        let c = self
            .inner
            .begin_close_owner(mono(now), &OwnerId::new(owner));
        let o = object(&[
            ("close", (c.close.0 as f64).into()),
            ("pending", (c.pending as f64).into()),
        ]);
        set(&o, "report", json(&c.report));
        o
    }

    /// Hands over up to `budget` items of a close begun by `beginCloseOwner`: `{jobs,
    /// unreadNotes}` (report lines `{job, was, outcome, summary}` and notes), both empty once
    /// everything is handed over.
    #[wasm_bindgen(js_name = closeOwnerStep)]
    pub fn close_owner_step(&mut self, close: f64, budget: f64) -> JsValue {
        let close = weft_core::jobs::CloseId(close as u64);
        let s = self.inner.close_owner_step(close, budget.max(1.0) as usize);
        object(&[
            ("jobs", json(&s.jobs)),
            ("unreadNotes", json(&s.unread_notes)),
        ])
    }

    /// Records and notes a close begun by `beginCloseOwner` has yet to hand over.
    #[wasm_bindgen(js_name = closePending)]
    pub fn close_pending(&self, close: f64) -> f64 {
        self.inner
            .close_pending(weft_core::jobs::CloseId(close as u64)) as f64
    }

    /// Job records held, including those of closed owners not yet released.
    #[wasm_bindgen(js_name = retainedJobs)]
    pub fn retained_jobs(&self) -> f64 {
        self.inner.retained_jobs() as f64
    }

    /// The next deadline (ms), if any.
    #[wasm_bindgen(js_name = pollTimeout)]
    pub fn poll_timeout(&self) -> Option<f64> {
        self.inner.poll_timeout().map(|t| t.as_ms() as f64)
    }

    /// Fires the timers due at `now`.
    #[wasm_bindgen(js_name = handleTimeout)]
    pub fn handle_timeout(&mut self, now: f64) {
        self.inner.handle_timeout(mono(now));
    }

    /// All pending outputs, as JS objects (`{output: "send" | "terminate" | ...}`).
    #[wasm_bindgen(js_name = drainOutputs)]
    pub fn drain_outputs(&mut self) -> Array {
        // Through the buffer kept between calls (no allocation per drain).
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend(self.inner.drain_outputs());
        let out = Array::new();
        for o in pending.drain(..) {
            out.push(&self.output_js(o));
        }
        self.pending = pending;
        if let Some(f) = self.flush_output() {
            out.push(&f);
        }
        out
    }

    /// The host's turn ends: the requests held for batch frames go out (see the `flush`
    /// output); carry out the outputs next (`pump` / `drainOutputs`).
    #[wasm_bindgen(js_name = flushSends)]
    pub fn flush_sends(&mut self) {
        self.flush_asked = false;
        self.inner.flush_sends();
    }

    /// `drainOutputs` and `pollTimeout` in one call: `[deadline, ...outputs]` (the deadline is
    /// `undefined` when there is none). `interest` (bits: 1 `job_finished`, 2 `note_queued`)
    /// names the outputs the caller carries out; the others are drained without building their
    /// objects (the core records every event and note either way).
    pub fn pump(&mut self, interest: u32) -> Array {
        self.batch(interest)
    }

    /// A job summary (`undefined` when unknown).
    pub fn job(&self, job: f64) -> JsValue {
        self.inner
            .job(JobId(job as u64))
            .map(job_js)
            .unwrap_or(JsValue::UNDEFINED)
    }

    /// The job's journal from sequence number `from` (default 1).
    pub fn journal(&self, job: f64, from: Option<f64>) -> Result<Array, JsValue> {
        let j = self
            .inner
            .job(JobId(job as u64))
            .ok_or_else(|| error(&JobsError::UnknownJob(JobId(job as u64))))?;
        let from = from.map(ms).unwrap_or(1);
        Ok(array(
            j.journal().iter().filter(|e| e.seq >= from).map(event_js),
        ))
    }

    /// Summaries of the retained jobs, optionally of one owner.
    pub fn jobs(&self, owner: Option<String>) -> Array {
        match owner {
            Some(o) => {
                let o = OwnerId::new(o);
                array(self.inner.jobs_of(&o).map(job_js))
            }
            None => array(self.inner.jobs().map(job_js)),
        }
    }

    /// An endpoint's summary with its log (`undefined` when unknown).
    pub fn endpoint(&self, endpoint: f64) -> JsValue {
        match self.inner.endpoint(EndpointId(endpoint as u64)) {
            Some(e) => {
                let mut v = e.to_json();
                v["events"] = e.events().iter().map(|e| e.to_json()).collect();
                if let Some(r) = self.inner.remote_info(e.id) {
                    v["remote"] = serde_json::json!({
                        "url": r.url,
                        "session": r.session,
                        "state": r.state,
                        "disconnects": r.disconnects,
                        "lastSeq": r.last_seq,
                        "buffered": r.buffered,
                    });
                }
                json(&v)
            }
            None => JsValue::UNDEFINED,
        }
    }

    /// Journal events recorded since creation (for benchmarks).
    #[wasm_bindgen(js_name = eventsRecorded)]
    pub fn events_recorded(&self) -> f64 {
        self.inner.events_recorded() as f64
    }
}

fn caps_js(c: &Capabilities) -> JsValue {
    let o = object(&[
        ("input", c.input.into()),
        ("cancelAck", c.cancel_ack.into()),
        ("errorCode", c.error_code.into()),
    ]);
    // Shown only when announced, as in the core's JSON.
    if c.batch {
        set(&o, "batch", true);
    }
    o
}

fn origin_js(o: &Origin) -> JsValue {
    json(o)
}

/// The outcome as `{outcome, value | message, code, started | evidence, quietMs | reason}`.
pub fn outcome_js(o: &Outcome<Js>) -> JsValue {
    let undef = JsValue::UNDEFINED;
    match o {
        // A number crosses as an f64 argument: boxing it into a JsValue in Rust costs a
        // wasm-bindgen cast call per outcome.
        Outcome::Succeeded { value: Js::Num(n) } => {
            mk_outcome(0, &undef, Some(*n), None, None, false, 0, 0.0, None)
        }
        Outcome::Succeeded { value } => {
            mk_outcome(0, &value.to_js(), None, None, None, false, 0, 0.0, None)
        }
        Outcome::Failed {
            message,
            code,
            started,
        } => mk_outcome(
            1,
            &undef,
            None,
            Some(message.clone()),
            code.clone(),
            *started,
            0,
            0.0,
            None,
        ),
        Outcome::Cancelled { evidence } => {
            let (e, q) = match evidence {
                CancelEvidence::NeverStarted => (0, 0.0),
                CancelEvidence::Acknowledged => (1, 0.0),
                CancelEvidence::Quiet { quiet_ms } => (2, *quiet_ms as f64),
            };
            mk_outcome(2, &undef, None, None, None, false, e, q, None)
        }
        // The lost evidence rides in the `code` slot.
        Outcome::Lost { reason, evidence } => mk_outcome(
            3,
            &undef,
            None,
            None,
            Some(evidence.as_str().into()),
            false,
            0,
            0.0,
            Some(reason.clone()),
        ),
    }
}

fn job_js(j: &Job<Js>) -> JsValue {
    object(&[
        ("job", (j.id.0 as f64).into()),
        ("owner", j.owner.0.as_str().into()),
        ("origin", origin_js(&j.origin)),
        ("endpoint", (j.endpoint.0 as f64).into()),
        ("state", j.state.as_str().into()),
        (
            "wireId",
            j.wire_id
                .map(|w| JsValue::from(w as f64))
                .unwrap_or(JsValue::NULL),
        ),
        (
            "capabilities",
            j.capabilities
                .as_ref()
                .map(caps_js)
                .unwrap_or(JsValue::NULL),
        ),
        ("cancelRequested", j.cancel_requested_at.is_some().into()),
        (
            "outcome",
            j.outcome().map(outcome_js).unwrap_or(JsValue::NULL),
        ),
        ("events", (j.journal().len() as f64).into()),
        (
            "remote",
            j.remote
                .as_ref()
                .map(|r| {
                    object(&[
                        ("session", r.session.as_str().into()),
                        ("job", (r.job.0 as f64).into()),
                    ])
                })
                .unwrap_or(JsValue::NULL),
        ),
    ])
}

fn violation_js(v: &Violation) -> JsValue {
    let o = json(v);
    set(&o, "message", v.describe());
    o
}

fn reply_js(r: &Reply<Js>) -> JsValue {
    let o = object(&[("type", r.kind().into())]);
    if let Some(id) = r.id() {
        set(&o, "id", id as f64);
    }
    match r {
        Reply::Hello {
            protocol,
            capabilities,
        } => {
            set(
                &o,
                "protocol",
                protocol
                    .as_deref()
                    .map(JsValue::from_str)
                    .unwrap_or(JsValue::NULL),
            );
            set(&o, "capabilities", caps_js(capabilities));
        }
        Reply::Partial { value, .. }
        | Reply::Progress { value, .. }
        | Reply::Done { value, .. } => {
            set(&o, "value", value.to_js());
        }
        Reply::Error { message, code, .. } => {
            set(&o, "message", message.as_str());
            if let Some(c) = code {
                set(&o, "code", c.as_str());
            }
        }
        Reply::Cancelled { .. } => {}
        Reply::InputApplied { input_id, .. } => set(&o, "inputId", input_id.as_str()),
        Reply::InputRejected {
            input_id, message, ..
        } => {
            set(&o, "inputId", input_id.as_str());
            set(&o, "message", message.as_str());
        }
    }
    o
}

/// A journal event as a JS object; values are the original JS values.
pub fn event_js(e: &JobEvent<Js>) -> JsValue {
    let o = object(&[
        ("job", (e.job.0 as f64).into()),
        ("seq", (e.seq as f64).into()),
        ("at", (e.at.as_ms() as f64).into()),
        ("source", e.source.label().into()),
        ("type", e.kind.name().into()),
    ]);
    match &e.kind {
        EventKind::Submitted { payload, reuse_key } => {
            set(&o, "payload", payload.to_js());
            if let Some(k) = reuse_key {
                set(&o, "reuseKey", k.as_str());
            }
        }
        EventKind::Started {
            wire_id,
            capabilities,
        } => {
            set(&o, "wireId", *wire_id as f64);
            set(&o, "capabilities", caps_js(capabilities));
        }
        EventKind::Progress { value } | EventKind::Partial { value } => {
            set(&o, "value", value.to_js())
        }
        EventKind::InputDelivered { input_id } | EventKind::InputApplied { input_id } => {
            set(&o, "inputId", input_id.as_str())
        }
        EventKind::InputRejected {
            input_id,
            by,
            reason,
        } => {
            set(&o, "inputId", input_id.as_str());
            set(
                &o,
                "by",
                match by {
                    InputRejector::Registry => "registry",
                    InputRejector::Worker => "worker",
                },
            );
            set(&o, "reason", reason.as_str());
        }
        EventKind::CancelRequested { reason } | EventKind::Terminated { reason } => {
            set(&o, "reason", reason.as_str())
        }
        EventKind::CancelAcknowledged => {}
        EventKind::NoAcknowledgement { quiet_ms } => {
            set(&o, "quietMs", *quiet_ms as f64);
            set(
                &o,
                "note",
                "no acknowledgement available: the worker does not announce cancelAck",
            );
        }
        EventKind::ProtocolError { violation } => {
            set(&o, "violation", violation_js(violation));
            set(&o, "message", violation.describe());
        }
        EventKind::Finished { outcome } => {
            let oc = outcome_js(outcome);
            js_sys::Object::assign(
                o.unchecked_ref::<js_sys::Object>(),
                oc.unchecked_ref::<js_sys::Object>(),
            );
        }
        EventKind::LateEvidence { reply } => set(&o, "reply", reply_js(reply)),
        EventKind::RemoteAccepted {
            session,
            remote_job,
        } => {
            set(&o, "session", session.as_str());
            set(&o, "remoteJob", remote_job.0 as f64);
        }
        EventKind::RemoteMissed { progress, partial } => {
            set(&o, "progress", *progress as f64);
            set(&o, "partial", *partial as f64);
        }
    }
    o
}

fn kind_code(k: weft_core::jobs::OutcomeKind) -> u32 {
    use weft_core::jobs::OutcomeKind::*;
    match k {
        Succeeded => 0,
        Failed => 1,
        Cancelled => 2,
        Lost => 3,
    }
}

impl JobRegistry {
    /// Whether the next pump hands out a `flush` output (see `flush_output`).
    fn flush_due(&self) -> bool {
        !self.flush_asked && self.inner.holds_sends()
    }

    /// `{output: "flush"}` once per turn in which requests are held for a batch frame: the
    /// host then calls `flushSends` before it yields.
    fn flush_output(&mut self) -> Option<JsValue> {
        // Once until the next `flushSends` (a pump that drains again finds no output and
        // stops); the runtime carries it out even when an output before it throws
        // (`#dispatchAll`).
        if !self.flush_due() {
            return None;
        }
        self.flush_asked = true;
        Some(out_job(5, 0.0, 0, &JsValue::UNDEFINED))
    }

    fn owner_js(&mut self, owner: &OwnerId) -> JsValue {
        if let Some(v) = self.owner_strings.get(&owner.0) {
            return v.clone();
        }
        let v = JsValue::from_str(&owner.0);
        if self.owner_strings.len() < 1024 {
            self.owner_strings.insert(owner.0.clone(), v.clone());
        }
        v
    }

    pub(crate) fn output_js(&mut self, o: Output<Js>) -> JsValue {
        let none = JsValue::UNDEFINED;
        match o {
            Output::Send { endpoint, request } => {
                let ep = endpoint.0 as f64;
                match request {
                    WireRequest::Run { id, payload } => {
                        out_send(ep, id as f64, 0, &payload.to_js(), None)
                    }
                    WireRequest::Cancel { id } => out_send(ep, id as f64, 1, &none, None),
                    WireRequest::Input {
                        id,
                        input_id,
                        value,
                    } => out_send(ep, id as f64, 2, &value.to_js(), Some(input_id)),
                }
            }
            Output::SendBatch { endpoint, requests } => {
                let mut spec = Vec::with_capacity(2 * requests.len());
                let mut values = Vec::with_capacity(requests.len());
                for r in requests {
                    match r {
                        WireRequest::Run { id, payload } => {
                            spec.extend([0.0, id as f64]);
                            values.push(payload.to_js());
                        }
                        WireRequest::Cancel { id } => spec.extend([1.0, id as f64]),
                        WireRequest::Input {
                            id,
                            input_id,
                            value,
                        } => {
                            spec.extend([2.0, id as f64]);
                            values.push(JsValue::from_str(&input_id));
                            values.push(value.to_js());
                        }
                    }
                }
                out_batch(endpoint.0 as f64, &spec, values)
            }
            Output::Terminate { endpoint } => out_job(3, endpoint.0 as f64, 0, &none),
            Output::WaitSettled { wait, job, end } => {
                let (code, outcome) = match end {
                    // The record may be released already (closing an owner releases its
                    // jobs in the same call): the wait then settles with the outcome's kind.
                    WaitEnd::Finished(kind) => match self.inner.held_outcome(job) {
                        // A success (a job's usual end): the output and its outcome in one
                        // call, a number passed as one.
                        Some(Outcome::Succeeded { value: Js::Num(n) }) => {
                            return out_wait_succeeded(
                                wait.0 as f64,
                                job.0 as f64,
                                &none,
                                Some(*n),
                            );
                        }
                        Some(Outcome::Succeeded { value }) => {
                            return out_wait_succeeded(
                                wait.0 as f64,
                                job.0 as f64,
                                &value.to_js(),
                                None,
                            );
                        }
                        Some(o) => (0, outcome_js(o)),
                        None => (
                            0,
                            mk_outcome(
                                kind_code(kind),
                                &none,
                                None,
                                None,
                                None,
                                false,
                                0,
                                0.0,
                                None,
                            ),
                        ),
                    },
                    WaitEnd::TimedOut => (1, none),
                    WaitEnd::Cancelled => (2, none),
                };
                out_wait(wait.0 as f64, job.0 as f64, code, &outcome)
            }
            Output::Observed { subscription } => out_job(4, subscription.0 as f64, 0, &none),
            Output::JobFinished { job, outcome } => {
                out_job(0, job.0 as f64, kind_code(outcome), &none)
            }
            Output::NoteQueued { owner, job } => {
                let owner = self.owner_js(&owner);
                out_job(1, job.0 as f64, 0, &owner)
            }
            Output::Wake { owner, job } => {
                let owner = self.owner_js(&owner);
                out_job(2, job.0 as f64, 0, &owner)
            }
            // Remote endpoints' socket work. A frame goes out as its JSON text (what the
            // socket sends), not as an object to stringify again.
            Output::SendFrame { endpoint, frame } => object(&[
                ("output", "frame".into()),
                ("endpoint", (endpoint.0 as f64).into()),
                ("text", frame.to_string().into()),
            ]),
            other @ (Output::Connect { .. } | Output::CloseSocket { .. }) => json(&other.to_json()),
        }
    }
}

/// The agent's surface of the registry, in the `apps` module only (agent sessions live there).
#[cfg(feature = "apps")]
#[wasm_bindgen]
impl JobRegistry {
    // ----- the agent's surface (an ops app's `OpsApp` has the same) ---------------------------

    /// Moves the session's completion notes from this registry's mailbox into the session
    /// (`AgentSession.takeNotes`). `OpsApp` has the same method over the registry beside its
    /// app, so an agent calls its runtime's registry whichever machine that is.
    #[wasm_bindgen(js_name = takeAgentNotes)]
    pub fn take_agent_notes(&mut self, now: f64, session: &mut AgentSession) -> f64 {
        session.take_notes(now, self)
    }

    /// Submits a job for the session's running call `invocation` (`AgentSession.submitJob`;
    /// `options`: `{wake, note, reuseKey}`); returns the job id. `OpsApp` has the same method.
    #[wasm_bindgen(js_name = submitAgentJob)]
    pub fn submit_agent_job(
        &mut self,
        now: f64,
        session: &mut AgentSession,
        invocation: f64,
        endpoint: f64,
        payload: JsValue,
        options: JsValue,
    ) -> Result<f64, JsValue> {
        session.submit_job(now, invocation, self, endpoint, payload, options)
    }
}
