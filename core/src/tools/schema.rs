//! Tool argument schemas: a documented subset of JSON Schema (draft 2020-12), checked when a
//! tool is declared and applied to every call before its handler may start.
//!
//! Supported keywords: `type` (a name or a list), `properties`, `required`,
//! `additionalProperties` (boolean or schema), `minProperties`, `maxProperties`, `items`,
//! `minItems`, `maxItems`, `uniqueItems`, `enum`, `const`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`, `minLength`, `maxLength`, `anyOf`,
//! `oneOf`, `allOf`, `not`, and the annotations `title`, `description`, `default`,
//! `examples`, `$comment`, `$schema`, `format` (an annotation, as 2020-12 specifies),
//! `deprecated`, `readOnly`, `writeOnly`. A schema using any other keyword (`pattern`, `$ref`,
//! ...) is refused at declaration with `SCHEMA_UNSUPPORTED`: a tool never runs behind a rule
//! that weft silently ignored.

use serde_json::{Map, Value};

use crate::value::number_text;

const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "$schema",
    "format",
    "deprecated",
    "readOnly",
    "writeOnly",
];

const TYPES: &[&str] = &[
    "null", "boolean", "object", "array", "number", "integer", "string",
];

/// Checks that `schema` is a tool parameter schema weft can enforce completely: an object
/// schema (`"type": "object"`) built only from supported keywords with well-formed values.
/// Returns a message naming the offending path and keyword.
pub fn check_tool_schema(schema: &Value) -> Result<(), String> {
    let Value::Object(o) = schema else {
        return Err("the parameters schema must be a JSON object".into());
    };
    if o.get("type").and_then(Value::as_str) != Some("object") {
        return Err(
            "the parameters schema must have \"type\": \"object\" (tool arguments are an object)"
                .into(),
        );
    }
    check(schema, "#")
}

fn check(schema: &Value, path: &str) -> Result<(), String> {
    let o = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(o) => o,
        other => {
            return Err(format!(
                "{path}: a schema must be an object or a boolean, got {other}"
            ));
        }
    };
    for (k, v) in o {
        let at = format!("{path}/{k}");
        match k.as_str() {
            "type" => match v {
                Value::String(t) if TYPES.contains(&t.as_str()) => {}
                Value::Array(ts)
                    if !ts.is_empty()
                        && ts
                            .iter()
                            .all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t))) => {}
                _ => {
                    return Err(format!(
                        "{at}: must be a JSON type name or a non-empty list of them"
                    ));
                }
            },
            "properties" => {
                let Value::Object(props) = v else {
                    return Err(format!("{at}: must be an object of schemas"));
                };
                for (name, s) in props {
                    check(s, &format!("{at}/{name}"))?;
                }
            }
            "required" => {
                if !v.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
                    return Err(format!("{at}: must be a list of property names"));
                }
            }
            "additionalProperties" | "items" | "not" => check(v, &at)?,
            "anyOf" | "oneOf" | "allOf" => match v {
                Value::Array(a) if !a.is_empty() => {
                    for (i, s) in a.iter().enumerate() {
                        check(s, &format!("{at}/{i}"))?;
                    }
                }
                _ => return Err(format!("{at}: must be a non-empty list of schemas")),
            },
            "enum" => {
                if !v.is_array() {
                    return Err(format!("{at}: must be a list of values"));
                }
            }
            "const" => {}
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
                if !v.is_number() {
                    return Err(format!("{at}: must be a number"));
                }
            }
            "multipleOf" => {
                if !v.as_f64().is_some_and(|m| m > 0.0) {
                    return Err(format!("{at}: must be a number greater than 0"));
                }
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties"
            | "maxProperties" => {
                if v.as_u64().is_none() {
                    return Err(format!("{at}: must be a non-negative integer"));
                }
            }
            "uniqueItems" => {
                if !v.is_boolean() {
                    return Err(format!("{at}: must be a boolean"));
                }
            }
            a if ANNOTATIONS.contains(&a) => {}
            other => {
                return Err(format!(
                    "{path}: keyword `{other}` is not supported by weft's schema subset; \
                     the tool would run behind a rule weft cannot enforce"
                ));
            }
        }
    }
    Ok(())
}

/// Validates `value` against a schema accepted by [`check_tool_schema`]. Returns every
/// violation as `"<instance pointer>: <what is wrong>"`; empty means valid.
pub fn validate(schema: &Value, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let mut path = String::new();
    validate_at(schema, value, &mut path, &mut errors);
    errors
}

fn is_valid(schema: &Value, value: &Value) -> bool {
    let mut errors = Vec::new();
    let mut path = String::new();
    validate_at(schema, value, &mut path, &mut errors);
    errors.is_empty()
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "number" => v.is_number(),
        "integer" => is_integer(v),
        "string" => v.is_string(),
        _ => false,
    }
}

fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// The type name of an instance, distinguishing integers (for messages).
fn instance_type(v: &Value) -> &'static str {
    match v {
        Value::Number(_) if is_integer(v) => "integer",
        other => crate::value::json_type_name(other),
    }
}

/// JSON equality as JSON Schema defines it: numbers compare by value (1 equals 1.0).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn push(errors: &mut Vec<String>, path: &str, msg: impl std::fmt::Display) {
    let p = if path.is_empty() { "/" } else { path };
    errors.push(format!("{p}: {msg}"));
}

fn validate_at(schema: &Value, v: &Value, path: &mut String, errors: &mut Vec<String>) {
    let o: &Map<String, Value> = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => return push(errors, path, "no value is allowed here"),
        Value::Object(o) => o,
        _ => return,
    };
    if let Some(t) = o.get("type") {
        let ok = match t {
            Value::String(t) => type_matches(t, v),
            Value::Array(ts) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| type_matches(t, v)),
            _ => true,
        };
        if !ok {
            let want = match t {
                Value::String(t) => t.clone(),
                other => other.to_string(),
            };
            // A type mismatch makes every other keyword's message noise.
            return push(
                errors,
                path,
                format!("expected {want}, got {}", instance_type(v)),
            );
        }
    }
    if let Some(Value::Array(options)) = o.get("enum")
        && !options.iter().any(|e| json_eq(e, v))
    {
        push(
            errors,
            path,
            format!("must be one of {}", Value::Array(options.clone())),
        );
    }
    if let Some(c) = o.get("const")
        && !json_eq(c, v)
    {
        push(errors, path, format!("must equal {c}"));
    }
    match v {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            let bound = |k: &str| o.get(k).and_then(Value::as_f64);
            if let Some(m) = bound("minimum")
                && x < m
            {
                push(errors, path, format!("must be >= {}", number_text(m)));
            }
            if let Some(m) = bound("maximum")
                && x > m
            {
                push(errors, path, format!("must be <= {}", number_text(m)));
            }
            if let Some(m) = bound("exclusiveMinimum")
                && x <= m
            {
                push(errors, path, format!("must be > {}", number_text(m)));
            }
            if let Some(m) = bound("exclusiveMaximum")
                && x >= m
            {
                push(errors, path, format!("must be < {}", number_text(m)));
            }
            if let Some(m) = bound("multipleOf") {
                let q = x / m;
                if !q.is_finite() || q.fract() != 0.0 {
                    push(
                        errors,
                        path,
                        format!("must be a multiple of {}", number_text(m)),
                    );
                }
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(m) = o.get("minLength").and_then(Value::as_u64)
                && len < m
            {
                push(errors, path, format!("must have at least {m} characters"));
            }
            if let Some(m) = o.get("maxLength").and_then(Value::as_u64)
                && len > m
            {
                push(errors, path, format!("must have at most {m} characters"));
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(m) = o.get("minItems").and_then(Value::as_u64)
                && len < m
            {
                push(errors, path, format!("must have at least {m} items"));
            }
            if let Some(m) = o.get("maxItems").and_then(Value::as_u64)
                && len > m
            {
                push(errors, path, format!("must have at most {m} items"));
            }
            if o.get("uniqueItems") == Some(&Value::Bool(true)) {
                'outer: for i in 0..items.len() {
                    for j in (i + 1)..items.len() {
                        if json_eq(&items[i], &items[j]) {
                            push(
                                errors,
                                path,
                                format!("items {i} and {j} are equal; items must be unique"),
                            );
                            break 'outer;
                        }
                    }
                }
            }
            if let Some(item_schema) = o.get("items") {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&i.to_string());
                    validate_at(item_schema, item, path, errors);
                    path.truncate(len);
                }
            }
        }
        Value::Object(fields) => {
            let n = fields.len() as u64;
            if let Some(m) = o.get("minProperties").and_then(Value::as_u64)
                && n < m
            {
                push(errors, path, format!("must have at least {m} properties"));
            }
            if let Some(m) = o.get("maxProperties").and_then(Value::as_u64)
                && n > m
            {
                push(errors, path, format!("must have at most {m} properties"));
            }
            if let Some(Value::Array(req)) = o.get("required") {
                for name in req.iter().filter_map(Value::as_str) {
                    if !fields.contains_key(name) {
                        push(errors, path, format!("missing required property `{name}`"));
                    }
                }
            }
            let props = o.get("properties").and_then(Value::as_object);
            let additional = o.get("additionalProperties");
            for (k, fv) in fields {
                let declared = props.and_then(|p| p.get(k));
                let sub = match (declared, additional) {
                    (Some(s), _) => s,
                    (None, Some(Value::Bool(false))) => {
                        push(errors, path, format!("property `{k}` is not allowed"));
                        continue;
                    }
                    (None, Some(s)) => s,
                    (None, None) => continue,
                };
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                validate_at(sub, fv, path, errors);
                path.truncate(len);
            }
        }
        _ => {}
    }
    if let Some(Value::Array(all)) = o.get("allOf") {
        for s in all {
            validate_at(s, v, path, errors);
        }
    }
    if let Some(Value::Array(any)) = o.get("anyOf")
        && !any.iter().any(|s| is_valid(s, v))
    {
        push(errors, path, "must match at least one schema of anyOf");
    }
    if let Some(Value::Array(one)) = o.get("oneOf") {
        let n = one.iter().filter(|s| is_valid(s, v)).count();
        if n != 1 {
            push(
                errors,
                path,
                format!("must match exactly one schema of oneOf (matched {n})"),
            );
        }
    }
    if let Some(not) = o.get("not")
        && is_valid(not, v)
    {
        push(errors, path, "must not match the schema of `not`");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "mode": {"enum": ["r", "w"]},
                "count": {"type": "integer", "minimum": 1, "maximum": 10},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    #[test]
    fn accepts_valid_arguments() {
        check_tool_schema(&schema()).unwrap();
        assert!(
            validate(
                &schema(),
                &json!({"path": "a", "mode": "r", "count": 3.0, "tags": ["x"]})
            )
            .is_empty()
        );
    }

    #[test]
    fn reports_every_violation_with_its_pointer() {
        let errs = validate(
            &schema(),
            &json!({"mode": "x", "count": 11, "tags": ["a", 1, "a"], "extra": true}),
        );
        assert_eq!(
            errs,
            [
                "/: missing required property `path`",
                "/count: must be <= 10",
                "/: property `extra` is not allowed",
                "/mode: must be one of [\"r\",\"w\"]",
                "/tags: items 0 and 2 are equal; items must be unique",
                "/tags/1: expected string, got integer",
            ]
        );
    }

    #[test]
    fn refuses_schemas_it_cannot_enforce() {
        let e = check_tool_schema(
            &json!({"type": "object", "properties": {"p": {"type": "string", "pattern": "^a"}}}),
        )
        .unwrap_err();
        assert!(e.contains("`pattern`"), "{e}");
        assert!(check_tool_schema(&json!({"type": "string"})).is_err());
        assert!(check_tool_schema(&json!({"type": "object", "required": "path"})).is_err());
        assert!(check_tool_schema(&json!({"type": "object", "$ref": "#/$defs/x"})).is_err());
    }

    #[test]
    fn combinators() {
        let s = json!({"type": "object", "properties": {"v": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]}}});
        assert!(validate(&s, &json!({"v": 0.5})).is_empty());
        assert_eq!(
            validate(&s, &json!({"v": 2})).len(),
            1,
            "2 matches both branches"
        );
        assert_eq!(validate(&s, &json!({"v": -0.5})).len(), 1);
        let n = json!({"type": "object", "not": {"required": ["x"]}});
        assert!(validate(&n, &json!({})).is_empty());
        assert_eq!(validate(&n, &json!({"x": 1})).len(), 1);
    }
}
