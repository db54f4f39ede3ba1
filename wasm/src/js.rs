//! JS value plumbing shared by the bindings: the [`Js`] payload, object building, errors.

use js_sys::{Array, Object, Reflect};
use wasm_bindgen::prelude::*;
use weft_core::value::Payload;

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
export function typeName(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = approxSize)]
    fn approx_size(v: &JsValue, limit: f64) -> bool;
    #[wasm_bindgen(js_name = toJsonText)]
    fn to_json_text(v: &JsValue) -> String;
    #[wasm_bindgen(js_name = typeName)]
    fn type_name(v: &JsValue) -> String;
}

/// A JS value as a core payload: carried by reference, never serialized on the hot path.
#[derive(Clone, Debug)]
pub struct Js(pub JsValue);

impl Payload for Js {
    fn field(&self, key: &str) -> Option<Self> {
        if !self.0.is_object() {
            return None;
        }
        let v = Reflect::get(&self.0, &JsValue::from_str(key)).ok()?;
        (!v.is_undefined()).then_some(Js(v))
    }
    fn as_f64(&self) -> Option<f64> {
        self.0.as_f64()
    }
    fn as_text(&self) -> Option<String> {
        self.0.as_string()
    }
    fn as_bool(&self) -> Option<bool> {
        self.0.as_bool()
    }
    fn type_name(&self) -> &'static str {
        match type_name(&self.0).as_str() {
            "null" => "null",
            "array" => "array",
            "object" => "object",
            "string" => "string",
            "number" => "number",
            "boolean" => "boolean",
            "undefined" => "undefined",
            "bigint" => "bigint",
            "function" => "function",
            _ => "symbol",
        }
    }
    fn fits_within(&self, limit: usize) -> bool {
        approx_size(&self.0, limit as f64)
    }
    fn same_as(&self, other: &Self) -> bool {
        to_json_text(&self.0) == to_json_text(&other.0)
    }
    fn to_json(&self) -> serde_json::Value {
        serde_json::from_str(&to_json_text(&self.0)).unwrap_or(serde_json::Value::Null)
    }
    fn null() -> Self {
        Js(JsValue::NULL)
    }
}

/// A fresh JS object with the given properties.
pub fn object(props: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in props {
        Reflect::set(&o, &JsValue::from_str(k), v).expect("set on a plain object");
    }
    o.into()
}

/// Sets one property on a JS object.
pub fn set(o: &JsValue, key: &str, v: impl Into<JsValue>) {
    Reflect::set(o, &JsValue::from_str(key), &v.into()).expect("set on a plain object");
}

/// A JSON value as a plain JS value (maps become objects).
pub fn json(v: &impl serde::Serialize) -> JsValue {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .unwrap_or(JsValue::UNDEFINED)
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
pub fn opt_string(o: &JsValue, key: &str) -> Option<String> {
    if !o.is_object() {
        return None;
    }
    Reflect::get(o, &JsValue::from_str(key)).ok()?.as_string()
}

/// Reads an optional property as a number.
pub fn opt_f64(o: &JsValue, key: &str) -> Option<f64> {
    if !o.is_object() {
        return None;
    }
    Reflect::get(o, &JsValue::from_str(key)).ok()?.as_f64()
}

/// Reads an optional property as a boolean.
pub fn opt_bool(o: &JsValue, key: &str) -> Option<bool> {
    if !o.is_object() {
        return None;
    }
    Reflect::get(o, &JsValue::from_str(key)).ok()?.as_bool()
}

/// Reads an optional property.
pub fn opt(o: &JsValue, key: &str) -> Option<JsValue> {
    if !o.is_object() {
        return None;
    }
    Reflect::get(o, &JsValue::from_str(key))
        .ok()
        .filter(|v| !v.is_undefined() && !v.is_null())
}
