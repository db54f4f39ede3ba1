//! Reading records out of JSON values by hand.
//!
//! serde's derived `Deserialize` compiles a visitor per type *and* per input form, and buffers
//! `untagged`, internally tagged and `flatten`ed types through its `Content` tree (a second
//! deserializer per inner type). For the few input records whose shapes are flexible (the ops
//! graph spec), a hand-written reader over a parsed [`Value`] is a fraction of that code in
//! WebAssembly, and the type still implements `Deserialize` through [`via_value!`](crate::via_value):
//! any serde input is first read as a `Value` (one shared deserializer), then by the reader.
//!
//! Errors name the path of the offending field (`controls[1].type: expected a string, got
//! number`). Unknown fields are ignored, as serde does by default.

use serde_json::{Map, Value};

use crate::value::json_type_name;

/// A read error: the path of the field and what is wrong.
pub type ReadError = String;

/// The fields of one JSON object, with the path used in errors.
pub struct Fields<'a> {
    pub path: &'a str,
    pub map: &'a Map<String, Value>,
}

/// `path.key` (or `key` at the top).
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// `expected <what>, got <type>` at `path`.
pub fn expected(path: &str, what: &str, got: &Value) -> ReadError {
    let at = if path.is_empty() { "value" } else { path };
    format!("{at}: expected {what}, got {}", json_type_name(got))
}

impl<'a> Fields<'a> {
    /// The object at `path`, or an error for any other value.
    pub fn of(path: &'a str, v: &'a Value) -> Result<Fields<'a>, ReadError> {
        match v {
            Value::Object(map) => Ok(Fields { path, map }),
            other => Err(expected(path, "an object", other)),
        }
    }

    /// A present, non-null field.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// A required field (present and not null).
    pub fn req(&self, key: &str) -> Result<&'a Value, ReadError> {
        self.get(key)
            .ok_or_else(|| format!("{}: missing field `{key}`", self.at()))
    }

    fn at(&self) -> &str {
        if self.path.is_empty() {
            "value"
        } else {
            self.path
        }
    }

    /// A required string.
    pub fn string(&self, key: &str) -> Result<String, ReadError> {
        let v = self.req(key)?;
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| expected(&join(self.path, key), "a string", v))
    }

    /// An optional string (absent or null: `None`).
    pub fn opt_string(&self, key: &str) -> Result<Option<String>, ReadError> {
        self.get(key)
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| expected(&join(self.path, key), "a string", v))
            })
            .transpose()
    }

    /// A string defaulting to `""`.
    pub fn string_or_empty(&self, key: &str) -> Result<String, ReadError> {
        Ok(self.opt_string(key)?.unwrap_or_default())
    }

    /// An optional number.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, ReadError> {
        self.get(key)
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| expected(&join(self.path, key), "a number", v))
            })
            .transpose()
    }

    /// A required number.
    pub fn f64(&self, key: &str) -> Result<f64, ReadError> {
        let v = self.req(key)?;
        v.as_f64()
            .ok_or_else(|| expected(&join(self.path, key), "a number", v))
    }

    /// A required non-negative integer.
    pub fn u64(&self, key: &str) -> Result<u64, ReadError> {
        let v = self.req(key)?;
        v.as_u64()
            .ok_or_else(|| expected(&join(self.path, key), "a non-negative integer", v))
    }

    /// A boolean defaulting to `false`.
    pub fn bool_or_false(&self, key: &str) -> Result<bool, ReadError> {
        match self.get(key) {
            None => Ok(false),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| expected(&join(self.path, key), "a boolean", v)),
        }
    }

    /// A list read item by item (absent or null: empty).
    pub fn list<T>(
        &self,
        key: &str,
        item: impl Fn(&str, &Value) -> Result<T, ReadError>,
    ) -> Result<Vec<T>, ReadError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(v) => list(&join(self.path, key), v, item),
        }
    }

    /// A required list.
    pub fn req_list<T>(
        &self,
        key: &str,
        item: impl Fn(&str, &Value) -> Result<T, ReadError>,
    ) -> Result<Vec<T>, ReadError> {
        self.req(key)?;
        self.list(key, item)
    }

    /// An optional object (absent or null: empty).
    pub fn object_or_empty(&self, key: &str) -> Result<Map<String, Value>, ReadError> {
        match self.get(key) {
            None => Ok(Map::new()),
            Some(Value::Object(m)) => Ok(m.clone()),
            Some(other) => Err(expected(&join(self.path, key), "an object", other)),
        }
    }
}

/// A list at `path`, read item by item (`path[i]` in errors).
pub fn list<T>(
    path: &str,
    v: &Value,
    item: impl Fn(&str, &Value) -> Result<T, ReadError>,
) -> Result<Vec<T>, ReadError> {
    let Value::Array(a) = v else {
        return Err(expected(path, "an array", v));
    };
    a.iter()
        .enumerate()
        .map(|(i, x)| item(&format!("{path}[{i}]"), x))
        .collect()
}

/// Implements `Deserialize` for a type with a reader `fn from_value(path: &str, v: &Value) ->
/// Result<Self, ReadError>`: the input is read as a `Value` first (one deserializer shared by
/// every such type), then by the reader.
#[macro_export]
#[doc(hidden)]
macro_rules! via_value {
    ($($t:ty),+ $(,)?) => {$(
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = <serde_json::Value as serde::Deserialize>::deserialize(d)?;
                <$t>::from_value("", &v).map_err(<D::Error as serde::de::Error>::custom)
            }
        }
    )+};
}
