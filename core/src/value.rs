//! The payload seam: the core carries application values without owning their representation.
//!
//! Natively a payload is a [`serde_json::Value`]; in the browser it is a `JsValue`, so typed
//! arrays and large objects cross no serializer. The core reads wire messages only through this
//! trait, which keeps every protocol rule in the core while hosts pass messages through untouched.

use std::fmt::Debug;

/// A value the core can inspect field by field, compare and export as JSON.
pub trait Payload: Clone + Debug {
    /// The value at `key` when `self` is an object that has it (own or inherited).
    fn field(&self, key: &str) -> Option<Self>;
    /// The value as a finite or non-finite number, when it is a number.
    fn as_f64(&self) -> Option<f64>;
    /// The value as text, when it is a string.
    fn as_text(&self) -> Option<String>;
    /// The value as a boolean, when it is one.
    fn as_bool(&self) -> Option<bool>;
    /// A short name of the value's type, for error messages (`"object"`, `"string"`, ...).
    fn type_name(&self) -> &'static str;
    /// Whether the value is a plain object (a wire message must be one).
    fn is_object(&self) -> bool {
        self.type_name() == "object"
    }
    /// Whether the value's encoded size is at most `limit` bytes. Implementations may stop
    /// walking as soon as the limit is exceeded.
    fn fits_within(&self, limit: usize) -> bool;
    /// The elements when the value is an array of at most `max` (`Err(length)` when it is
    /// longer; `None` when it is not an array). Reads a batch frame's messages.
    fn elements(&self, max: usize) -> Option<Result<Vec<Self>, usize>>;
    /// Structural equality (used for reuse keys).
    fn same_as(&self, other: &Self) -> bool;
    /// The JSON form, for journals and exports.
    fn to_json(&self) -> serde_json::Value;
    /// The value as JSON data, for a wire that carries JSON text (a remote endpoint's):
    /// a copy holding only null, booleans, finite numbers, strings, arrays and plain objects,
    /// nested at most [`MAX_JSON_DEPTH`] arrays and objects deep, taken now (a later change to
    /// the original does not reach it), or `Err` saying which part of the value is not JSON
    /// data, by its path from `name` (`payload.a[2] is a function`). The rule for each
    /// representation is in its implementation: a JSON value is JSON data already (only its
    /// depth is checked); the JS binding's (`wasm/src/js.rs`, `jsonData`) refuses what
    /// `JSON.stringify` would drop or change silently (a function, a cycle, a BigInt, NaN).
    fn json_data(&self, name: &str) -> Result<Self, String>;
    /// The JSON `null` of this representation.
    fn null() -> Self;
}

impl Payload for serde_json::Value {
    fn field(&self, key: &str) -> Option<Self> {
        self.as_object().and_then(|o| o.get(key)).cloned()
    }
    fn as_f64(&self) -> Option<f64> {
        serde_json::Value::as_f64(self)
    }
    fn as_text(&self) -> Option<String> {
        self.as_str().map(str::to_owned)
    }
    fn as_bool(&self) -> Option<bool> {
        serde_json::Value::as_bool(self)
    }
    fn type_name(&self) -> &'static str {
        json_type_name(self)
    }
    fn fits_within(&self, limit: usize) -> bool {
        let mut budget = limit as i64;
        json_fits(self, &mut budget)
    }
    fn elements(&self, max: usize) -> Option<Result<Vec<Self>, usize>> {
        let a = self.as_array()?;
        Some(if a.len() > max {
            Err(a.len())
        } else {
            Ok(a.clone())
        })
    }
    fn same_as(&self, other: &Self) -> bool {
        self == other
    }
    fn to_json(&self) -> serde_json::Value {
        self.clone()
    }
    fn json_data(&self, name: &str) -> Result<Self, String> {
        // (A `serde_json::Value` holds no non-finite number, cycle or function.)
        if json_depth(self, MAX_JSON_DEPTH + 1) > MAX_JSON_DEPTH {
            return Err(too_deep(name));
        }
        Ok(self.clone())
    }
    fn null() -> Self {
        serde_json::Value::Null
    }
}

/// How deep JSON data sent on a JSON wire may nest (arrays and objects, the outermost counting
/// one): what crosses a remote endpoint ([`Payload::json_data`]). A frame is parsed with
/// serde_json's recursion limit (127 levels) and holds its value two levels in, so a deeper
/// value could not be read back (it would become `null` or fail the frame); 100 leaves room.
pub const MAX_JSON_DEPTH: usize = 100;

/// The refusal of a value nested deeper than [`MAX_JSON_DEPTH`].
pub fn too_deep(name: &str) -> String {
    format!("{name} is nested more than {MAX_JSON_DEPTH} arrays or objects deep")
}

/// How deep `v` nests (arrays and objects; a scalar is 0), counted up to `cap`.
fn json_depth(v: &serde_json::Value, cap: usize) -> usize {
    let inner = |items: &mut dyn Iterator<Item = &serde_json::Value>| {
        1 + if cap <= 1 {
            0
        } else {
            items.map(|x| json_depth(x, cap - 1)).max().unwrap_or(0)
        }
    };
    match v {
        serde_json::Value::Array(a) => inner(&mut a.iter()),
        serde_json::Value::Object(o) => inner(&mut o.values()),
        _ => 0,
    }
}

/// A number as message text: integral values as integers (`64`), others in serde_json's
/// shortest form (`0.25`, `1e-7`), `NaN`/`inf`/`-inf` for non-finite ones. Used instead of
/// `f64`'s `Display`, whose float formatting would be a second one in the WebAssembly modules
/// (serde_json's is already there).
pub fn number_text(n: f64) -> String {
    if n.is_nan() {
        "NaN".into()
    } else if n.is_infinite() {
        if n > 0.0 { "inf" } else { "-inf" }.into()
    } else if n.fract() == 0.0 && n.abs() < 9e15 {
        (n as i64).to_string()
    } else {
        serde_json::Number::from_f64(n).map_or_else(String::new, |x| x.to_string())
    }
}

/// A JSON object from `(key, value)` pairs, later keys winning (as `collect` would), built by
/// insertion: collecting into a `Map` sorts first, and compiles a sort for every call site.
pub fn map_of(
    pairs: impl Iterator<Item = (String, serde_json::Value)>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    for (k, v) in pairs {
        m.insert(k, v);
    }
    m
}

/// The JSON type name of a value.
pub fn json_type_name(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Decrements `budget` by an estimate of the encoded size; false once it goes negative.
fn json_fits(v: &serde_json::Value, budget: &mut i64) -> bool {
    use serde_json::Value::*;
    *budget -= match v {
        Null | Bool(_) => 5,
        Number(_) => 24,
        String(s) => s.len() as i64 + 2,
        Array(a) => a.len() as i64 + 2,
        Object(o) => o.keys().map(|k| k.len() as i64 + 4).sum::<i64>() + 2,
    };
    if *budget < 0 {
        return false;
    }
    match v {
        Array(a) => a.iter().all(|x| json_fits(x, budget)),
        Object(o) => o.values().all(|x| json_fits(x, budget)),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_JSON_DEPTH, Payload, number_text};

    #[test]
    fn json_data_is_refused_beyond_the_depth_a_frame_can_carry() {
        let nest = |n: usize| (0..n).fold(serde_json::json!(1), |v, _| serde_json::json!([v]));
        let ok = nest(MAX_JSON_DEPTH);
        assert_eq!(ok.json_data("payload").unwrap(), ok);
        let err = nest(MAX_JSON_DEPTH + 1).json_data("payload").unwrap_err();
        assert_eq!(
            err,
            "payload is nested more than 100 arrays or objects deep"
        );
        // What is refused would not survive a frame (two levels in, parsed by serde_json).
        let frame = |v: serde_json::Value| serde_json::json!({"body": {"payload": v}}).to_string();
        let parse = |t: String| serde_json::from_str::<serde_json::Value>(&t);
        assert!(parse(frame(nest(MAX_JSON_DEPTH))).is_ok());
        assert!(parse(frame(nest(126))).is_err());
    }

    #[test]
    fn numbers_print_like_their_json() {
        assert_eq!(number_text(64.0), "64");
        assert_eq!(number_text(-3.0), "-3");
        assert_eq!(number_text(0.25), "0.25");
        assert_eq!(number_text(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(number_text(1.5e-7), "1.5e-7");
        assert_eq!(number_text(f64::NAN), "NaN");
        assert_eq!(number_text(f64::NEG_INFINITY), "-inf");
    }
}
