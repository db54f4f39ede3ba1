//! JS value plumbing shared by the bindings: the [`Js`] payload, object building, errors.

use js_sys::{Array, Object, Reflect};
use wasm_bindgen::prelude::*;
use weft_core::value::Payload;

/// A JS time in milliseconds (`performance.now()` or `Date.now()`) as whole milliseconds: a
/// negative, NaN or infinite time is 0.
#[cfg(any(feature = "jobs", feature = "models", feature = "actors"))]
pub(crate) fn ms(now: f64) -> u64 {
    if now.is_finite() && now > 0.0 {
        now as u64
    } else {
        0
    }
}

/// A JS monotonic time (`performance.now()`, milliseconds) as the core's [`weft_core::Mono`].
#[cfg(any(feature = "jobs", feature = "models"))]
pub(crate) fn mono(now: f64) -> weft_core::Mono {
    weft_core::Mono::from_ms(ms(now))
}

#[wasm_bindgen(inline_js = r#"
export function approxSize(v, limit) {
  let budget = limit;
  const seen = new Set();
  const walk = (x) => {
    if (budget < 0) return;
    switch (typeof x) {
      case 'string': budget -= x.length + 2; return;
      case 'number': case 'bigint': budget -= 24; return;
      case 'boolean': case 'undefined': budget -= 5; return;
      case 'object':
        if (x === null) { budget -= 4; return; }
        if (seen.has(x)) return;
        seen.add(x);
        if (ArrayBuffer.isView(x) || x instanceof ArrayBuffer) { budget -= x.byteLength; return; }
        if (Array.isArray(x)) { budget -= x.length + 2; for (const e of x) { walk(e); if (budget < 0) return; } return; }
        for (const k in x) { budget -= k.length + 4; walk(x[k]); if (budget < 0) return; }
        return;
      default: budget -= 8;
    }
  };
  walk(v);
  return budget >= 0;
}
export function toJsonText(v) {
  const text = JSON.stringify(v, (_k, x) => {
    if (typeof x === 'bigint') return x.toString();
    if (ArrayBuffer.isView(x) && !(x instanceof DataView)) return Array.from(x);
    return x;
  });
  return text === undefined ? 'null' : text;
}
export function parseJson(text) { return JSON.parse(text); }
// What crosses a remote endpoint (its wire is JSON text), the one place of the rule: JSON's
// data model, a value that JSON.stringify would drop or change silently refused. Returns a copy
// of `v` holding only JSON data, or throws a string naming (by its path from `name`) the first
// part that is not JSON data. The rule:
// - null, booleans, strings and finite numbers cross as they are (-0 as 0);
// - an array crosses element by element (its other properties, as in JSON, do not);
// - a plain object (its prototype Object.prototype or null) crosses with its own enumerable
//   string-keyed properties (as structuredClone and JSON.stringify read them); a property
//   whose value is undefined is left out (JSON has no undefined; it reads as absent);
// - a value with a toJSON method (a Date: its ISO string) crosses as what toJSON returns,
//   which these rules then check (JSON's own convention, as JSON.stringify applies it);
// - refused: undefined as the value or an array element (a hole too: JSON.stringify would
//   write null), NaN and ±Infinity (JSON has no non-finite numbers: they would become null),
//   a BigInt, a function, a symbol, a cycle, any other object (Map, Set, a typed array, an
//   ArrayBuffer, a class instance, RegExp, Error, ...: JSON would write {} or fail), a value
//   nested more than `max` arrays and objects deep (the core's MAX_JSON_DEPTH: what a frame
//   can carry), and a getter or toJSON that throws. Shared (acyclic) references cross as
//   copies.
export function jsonData(v, name, max) {
  const open = new Map();
  let at = name;
  const step = (x, key) => {
    if (((typeof x === 'object' && x !== null) || typeof x === 'bigint') && typeof x.toJSON === 'function') return x.toJSON(key);
    return x;
  };
  const walk = (x, path, depth) => {
    at = path;
    switch (typeof x) {
      case 'string': case 'boolean': return x;
      case 'number':
        if (Number.isFinite(x)) return x === 0 ? 0 : x;
        throw `${path} is ${x}`;
      case 'undefined': throw `${path} is undefined`;
      case 'bigint': throw `${path} is a BigInt`;
      case 'function': throw `${path} is a function`;
      case 'symbol': throw `${path} is a symbol`;
    }
    if (x === null) return null;
    const cycle = open.get(x);
    if (cycle !== undefined) throw `${path} is a cycle: it refers back to ${cycle}`;
    if (depth === max) throw `${name} is nested more than ${max} arrays or objects deep`;
    if (Array.isArray(x)) {
      open.set(x, path);
      const n = x.length;
      const out = new Array(n);
      for (let i = 0; i < n; i++) {
        const p = `${path}[${i}]`;
        at = p;
        const e = step(x[i], String(i));
        if (e === undefined) throw `${p} is ${i in x ? 'undefined' : 'a hole'}`;
        out[i] = walk(e, p, depth + 1);
      }
      open.delete(x);
      return out;
    }
    const proto = Object.getPrototypeOf(x);
    if (proto !== Object.prototype && proto !== null) {
      const kind = proto?.constructor?.name || Object.prototype.toString.call(x).slice(8, -1);
      throw `${path} is ${/^[AEIOU]/.test(kind) ? 'an' : 'a'} ${kind}, not a plain object`;
    }
    open.set(x, path);
    const out = {};
    for (const k of Object.keys(x)) {
      const p = /^[A-Za-z_$][\w$]*$/.test(k) ? `${path}.${k}` : `${path}[${JSON.stringify(k)}]`;
      at = p;
      const e = step(x[k], k);
      if (e === undefined) continue;
      const c = walk(e, p, depth + 1);
      if (k === '__proto__') Object.defineProperty(out, k, { value: c, enumerable: true, writable: true, configurable: true });
      else out[k] = c;
    }
    open.delete(x);
    return out;
  };
  try {
    return walk(step(v, ''), name, 0);
  } catch (e) {
    if (typeof e === 'string') throw e;
    throw `reading ${at} threw: ${e?.message ?? e}`;
  }
}
const TYPES = ['null', 'array', 'object', 'string', 'number', 'boolean', 'undefined', 'bigint', 'function', 'symbol'];
export function typeCode(v) {
  if (v === null) return 0;
  if (Array.isArray(v)) return 1;
  const i = TYPES.indexOf(typeof v);
  return i < 0 ? 9 : i;
}
export function field(o, k) {
  return o !== null && (typeof o === 'object' || typeof o === 'function') ? o[k] : undefined;
}
export function sameValue(a, b, depth = 0) {
  if (Object.is(a, b)) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null || depth > 64) return false;
  const proto = Object.getPrototypeOf(a);
  if (proto !== Object.getPrototypeOf(b)) return false;
  if (ArrayBuffer.isView(a)) {
    if (a instanceof DataView || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(a)) {
    if (a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameValue(a[i], b[i], depth + 1)) return false;
    return true;
  }
  // Plain objects by content; class instances, Map, Set, Date, ... only by reference.
  if (proto !== Object.prototype && proto !== null) return false;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) {
    if (!Object.prototype.hasOwnProperty.call(b, k) || !sameValue(a[k], b[k], depth + 1)) return false;
  }
  return true;
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = approxSize)]
    fn approx_size(v: &JsValue, limit: f64) -> bool;
    /// `JSON.stringify` (BigInts as strings, typed arrays as arrays, `undefined` as `null`).
    /// Throws for cyclic values.
    #[wasm_bindgen(js_name = toJsonText, catch)]
    fn to_json_text(v: &JsValue) -> Result<String, JsValue>;
    /// `JSON.parse` of text this module produced (valid JSON by construction).
    #[wasm_bindgen(js_name = parseJson)]
    fn parse_json(text: &str) -> JsValue;
    /// A copy of `v` holding only JSON data nested at most `max` deep, or a thrown string
    /// saying (by its path from `name`) what is not: the rule of what crosses a remote
    /// endpoint (see there).
    #[wasm_bindgen(js_name = jsonData, catch)]
    fn json_data_js(v: &JsValue, name: &str, max: u32) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(js_name = typeCode)]
    fn type_code(v: &JsValue) -> u32;
    /// Structural equality of plain data (`Object.is` on leaves; typed arrays element-wise;
    /// plain objects and arrays by content; other objects only by reference).
    #[wasm_bindgen(js_name = sameValue)]
    pub fn same_value(a: &JsValue, b: &JsValue) -> bool;
    /// `o[k]` for objects, `undefined` otherwise (never throws).
    #[wasm_bindgen(js_name = field)]
    pub fn js_field(o: &JsValue, k: &JsValue) -> JsValue;
}

/// Property names the bindings read and write, created in JS once (passing a Rust string to
/// JS costs a UTF-8 decode; these are hot).
const KEYS: &[&str] = &[
    "type",
    "id",
    "value",
    "message",
    "code",
    "inputId",
    "protocol",
    "capabilities",
    "input",
    "cancelAck",
    "errorCode",
    "owner",
    "label",
    "hello",
    "helloTimeoutMs",
    "quietMs",
    "maxConcurrent",
    "maxMessageBytes",
    "declared",
    "thread",
    "turn",
    "toolCall",
    "origin",
    "reuseKey",
    "note",
    "wake",
    "batch",
    "batchSends",
    "messages",
];

thread_local! {
    static KEY_VALUES: Vec<JsValue> = KEYS.iter().map(|k| JsValue::from_str(k)).collect();
}

/// The JS string for a property name (cached for the known ones).
pub fn key(k: &str) -> JsValue {
    match KEYS.iter().position(|x| *x == k) {
        Some(i) => KEY_VALUES.with(|v| v[i].clone()),
        None => JsValue::from_str(k),
    }
}

/// A JS value as a core payload: carried by reference, never serialized on the hot path.
/// Numbers, booleans, null and undefined are kept inline (progress values are usually numbers),
/// so they occupy no slot in wasm-bindgen's reference table while they sit in a journal.
#[derive(Clone, Debug)]
pub enum Js {
    Undefined,
    Null,
    Bool(bool),
    Num(f64),
    Val(JsValue),
    /// A worker's message as read by one JS call (the job registry's hot path): only while
    /// the core parses it; its fields are ordinary values.
    Msg(Box<Msg>),
    /// A string known to the bindings (a message's `type`): read without a JS call.
    Name(&'static str),
    /// A batch frame's `messages`, pre-read in one JS call (each element a `Msg` when it has
    /// the usual shape): only while the core parses the frame; its elements are taken once.
    Items(std::cell::RefCell<Vec<Js>>),
}

/// A worker's message, pre-read in one JS call: `type` (one of the known names), `id` (when a
/// number or absent), `value` and whether the message fits the endpoint's size limit. Any other
/// field is read from the message itself.
#[derive(Clone, Debug)]
pub struct Msg {
    /// The message.
    pub raw: JsValue,
    /// Its `type`.
    pub kind: &'static str,
    /// Its `id` (`None` when absent).
    pub id: Option<f64>,
    /// Its `value` (`None` when absent).
    pub value: Option<Js>,
    /// The limit the size check was made against, and its result.
    pub limit: usize,
    /// Whether the message fits within `limit` (`None`: not checked yet, a nested value).
    pub fits: Option<bool>,
    /// A batch frame's `messages` (`None`: absent), pre-read.
    pub messages: Option<Js>,
}

impl Js {
    /// Wraps a JS value.
    pub fn from_js(v: JsValue) -> Js {
        match type_code(&v) {
            0 => Js::Null,
            4 => Js::Num(v.as_f64().unwrap_or(f64::NAN)),
            5 => Js::Bool(v.as_bool().unwrap_or(false)),
            6 => Js::Undefined,
            _ => Js::Val(v),
        }
    }

    /// The JS value.
    pub fn to_js(&self) -> JsValue {
        match self {
            Js::Undefined => JsValue::UNDEFINED,
            Js::Null => JsValue::NULL,
            Js::Bool(b) => JsValue::from_bool(*b),
            Js::Num(n) => JsValue::from_f64(*n),
            Js::Val(v) => v.clone(),
            Js::Msg(m) => m.raw.clone(),
            Js::Name(s) => JsValue::from_str(s),
            Js::Items(items) => array(items.borrow().iter().map(Js::to_js)).into(),
        }
    }
}

impl Payload for Js {
    fn field(&self, k: &str) -> Option<Self> {
        let o = match self {
            Js::Val(o) => o,
            Js::Msg(m) => match k {
                "type" => return Some(Js::Name(m.kind)),
                "id" => return m.id.map(Js::Num),
                "value" => return m.value.clone(),
                // Handed over, not copied: the core reads a frame's messages once.
                "messages" if m.kind == "batch" => {
                    return match &m.messages {
                        Some(Js::Items(items)) => Some(Js::Items(items.take().into())),
                        other => other.clone(),
                    };
                }
                _ => &m.raw,
            },
            _ => return None,
        };
        let v = js_field(o, &key(k));
        (!v.is_undefined()).then(|| Js::from_js(v))
    }
    fn as_f64(&self) -> Option<f64> {
        match self {
            Js::Num(n) => Some(*n),
            _ => None,
        }
    }
    fn as_text(&self) -> Option<String> {
        match self {
            Js::Val(v) => v.as_string(),
            Js::Name(s) => Some((*s).to_owned()),
            _ => None,
        }
    }
    fn as_bool(&self) -> Option<bool> {
        match self {
            Js::Bool(b) => Some(*b),
            _ => None,
        }
    }
    fn type_name(&self) -> &'static str {
        const NAMES: [&str; 10] = [
            "null",
            "array",
            "object",
            "string",
            "number",
            "boolean",
            "undefined",
            "bigint",
            "function",
            "symbol",
        ];
        match self {
            Js::Undefined => "undefined",
            Js::Null => "null",
            Js::Bool(_) => "boolean",
            Js::Num(_) => "number",
            Js::Val(v) => NAMES[(type_code(v) as usize).min(9)],
            Js::Msg(_) => "object",
            Js::Name(_) => "string",
            Js::Items(_) => "array",
        }
    }
    fn fits_within(&self, limit: usize) -> bool {
        match self {
            Js::Val(v) => approx_size(v, limit as f64),
            Js::Msg(m) => match m.fits {
                Some(fits) if m.limit == limit => fits,
                _ => approx_size(&m.raw, limit as f64),
            },
            Js::Name(s) => limit >= s.encode_utf16().count() + 2,
            Js::Items(_) => approx_size(&self.to_js(), limit as f64),
            _ => limit >= 24,
        }
    }
    fn elements(&self, max: usize) -> Option<Result<Vec<Self>, usize>> {
        match self {
            Js::Items(items) => {
                let n = items.borrow().len();
                Some(if n > max { Err(n) } else { Ok(items.take()) })
            }
            Js::Val(v) if Array::is_array(v) => {
                let a: &Array = v.unchecked_ref();
                let n = a.length() as usize;
                Some(if n > max {
                    Err(n)
                } else {
                    Ok(a.iter().map(Js::from_js).collect())
                })
            }
            _ => None,
        }
    }
    fn same_as(&self, other: &Self) -> bool {
        match (to_json_text(&self.to_js()), to_json_text(&other.to_js())) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
    fn to_json(&self) -> serde_json::Value {
        from_js_json(&self.to_js()).unwrap_or(serde_json::Value::Null)
    }
    fn json_data(&self, name: &str) -> Result<Self, String> {
        match self {
            Js::Null | Js::Bool(_) | Js::Name(_) => Ok(self.clone()),
            Js::Num(n) if n.is_finite() => Ok(Js::Num(if *n == 0.0 { 0.0 } else { *n })),
            // The rest (undefined, a non-finite number, objects) by the one rule, in JS.
            _ => json_data_js(&self.to_js(), name, weft_core::value::MAX_JSON_DEPTH as u32)
                .map(Js::from_js)
                .map_err(|e| e.as_string().unwrap_or_else(|| describe(&e))),
        }
    }
    fn null() -> Self {
        Js::Null
    }
}

/// A fresh JS object with the given properties.
pub fn object(props: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in props {
        put(&o, &JsValue::from_str(k), v);
    }
    o.into()
}

/// Sets one property on a JS object.
pub fn set(o: &JsValue, k: &str, v: impl Into<JsValue>) {
    put(o, &key(k), &v.into());
}

/// Sets a property on a plain object the bindings created. That cannot throw, so the result
/// is not checked (a check would compile a panic path, with JsValue's Debug, per call site).
pub fn put(o: &JsValue, k: &JsValue, v: &JsValue) {
    let _ = Reflect::set(o, k, v);
}

/// A JSON value as a plain JS value: serde_json's text, then the engine's `JSON.parse`.
///
/// Every value crossing into JS goes this one way (and every JSON value coming in goes through
/// [`from_js_json`]), so each serializable type is compiled for one serializer only: the
/// module carries serde_json's text serializer and parser, no second serde data format.
pub fn json(v: &impl serde::Serialize) -> JsValue {
    parse_json(&text(v))
}

/// The JSON text of a value (serde_json's, compact).
pub fn text(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// JS data as JSON: `JSON.stringify` (so `undefined` properties and functions are left out,
/// BigInts become strings, typed arrays arrays), then serde_json's parser. `undefined` is
/// `null`. The error says why the value is not JSON data (e.g. a cycle).
pub fn from_js_json(v: &JsValue) -> Result<serde_json::Value, String> {
    parse_text(&to_json_text(v).map_err(|e| describe(&e))?)
}

/// Parses JSON text (serde_json's parser over bytes: the one parser instance in the module).
pub fn parse_text<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_slice(text.as_bytes()).map_err(|e| e.to_string())
}

/// The message of a thrown JS value.
fn describe(e: &JsValue) -> String {
    js_field(e, &key("message"))
        .as_string()
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "not JSON data".into())
}

/// A JS `Error` with a stable `.code`, from any core error.
pub fn error(e: &(impl weft_core::ErrorCode + ?Sized)) -> JsValue {
    coded_error(e.code(), &e.to_string())
}

/// A JS `Error` with `.code` and `message`.
pub fn coded_error(code: &str, message: &str) -> JsValue {
    let err = js_sys::Error::new(message);
    set(&err, "code", code);
    err.into()
}

/// A JS array from an iterator of values.
pub fn array(items: impl IntoIterator<Item = JsValue>) -> Array {
    items.into_iter().collect()
}

/// Reads an optional property as a string.
pub fn opt_string(o: &JsValue, k: &str) -> Option<String> {
    js_field(o, &key(k)).as_string()
}

/// Reads an optional property as a number.
pub fn opt_f64(o: &JsValue, k: &str) -> Option<f64> {
    js_field(o, &key(k)).as_f64()
}

/// Reads an optional property as a boolean.
pub fn opt_bool(o: &JsValue, k: &str) -> Option<bool> {
    js_field(o, &key(k)).as_bool()
}

/// Reads an optional property.
pub fn opt(o: &JsValue, k: &str) -> Option<JsValue> {
    Some(js_field(o, &key(k))).filter(|v| !v.is_undefined() && !v.is_null())
}
