//! Strict message handling: JSON parsing that refuses duplicate keys, the checks the JSON Schema
//! states but serde cannot (lengths, ranges, `oneOf` choices), a small self-contained JSON
//! Schema validator for server-authored input schemas, and answer validation against a
//! decision's contract.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use super::FramesError;
use super::types::*;

/// Longest identifier the schema allows.
pub const MAX_ID: usize = 512;

/// Parses one JSON value, refusing duplicate object keys, trailing data and out-of-range
/// numbers (`NaN` and `Infinity` are not JSON and fail too).
pub fn parse_strict(bytes: &[u8]) -> Result<Value, FramesError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = StrictSeed
        .deserialize(&mut de)
        .map_err(|e| FramesError::InvalidJson(format!("malformed JSON: {e}")))?;
    de.end()
        .map_err(|e| FramesError::InvalidJson(format!("malformed JSON: {e}")))?;
    Ok(v)
}

struct StrictSeed;

impl<'de> DeserializeSeed<'de> for StrictSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictSeed)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(serde::de::Error::custom(format!("duplicate key `{k}`")));
            }
            let v = map.next_value_seed(StrictSeed)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// Canonical JSON text: object keys sorted, no whitespace. Used for fingerprints only (it is
/// not an interoperable canonicalization claim).
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(H[(b >> 4) as usize] as char);
        s.push(H[(b & 15) as usize] as char);
    }
    s
}

/// The fingerprint of a message: SHA-256 of its canonical JSON.
pub fn fingerprint(v: &Value) -> String {
    sha256_hex(canonical(v).as_bytes())
}

/// Parses a typed record from a strictly parsed value; schema violations are `INVALID_MESSAGE`.
pub fn typed<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> Result<T, FramesError> {
    // A body that is JSON but not an object is refused as the reference server refuses it
    // (numerous-com/dgp `strict_json`): 400 INVALID_JSON, not a schema violation.
    if !v.is_object() {
        return Err(FramesError::InvalidJson(format!(
            "{what}: expected a JSON object"
        )));
    }
    serde_json::from_value(v).map_err(|e| FramesError::InvalidMessage(format!("{what}: {e}")))
}

fn id(field: &str, s: &str) -> Result<(), FramesError> {
    let n = s.chars().count();
    if n == 0 || n > MAX_ID {
        return Err(FramesError::InvalidMessage(format!(
            "{field} must have 1..{MAX_ID} characters, has {n}"
        )));
    }
    Ok(())
}

fn unit(field: &str, x: f64) -> Result<(), FramesError> {
    if !(0.0..=1.0).contains(&x) {
        return Err(FramesError::InvalidMessage(format!(
            "{field} must be within [0, 1]"
        )));
    }
    Ok(())
}

fn features(list: &Option<Vec<String>>) -> Result<(), FramesError> {
    for f in list.iter().flatten() {
        id("required_features[]", f)?;
    }
    Ok(())
}

/// The schema constraints of an assessment request that serde does not enforce.
pub fn check_assessment_request(r: &AssessmentRequest) -> Result<(), FramesError> {
    id("assessment_id", &r.assessment_id)?;
    id("frame_id", &r.frame_id)?;
    id("decision_id", &r.decision_id)?;
    features(&r.required_features)?;
    for a in r.assumptions.iter().flatten() {
        if let Some(d) = &a.expected_decision_id {
            id("assumptions[].expected_decision_id", d)?;
        }
        if let Some(c) = &a.expected_choice {
            id("assumptions[].expected_choice", c)?;
        }
    }
    check_result_shape(&r.result)
}

/// `answered` needs an answer, `abstain` must not have one; numbers within their ranges.
pub fn check_result_shape(r: &AssessmentResult) -> Result<(), FramesError> {
    match (r.status, &r.answer) {
        (ResultStatus::Answered, None) => {
            return Err(FramesError::InvalidMessage(
                "result: answered needs an answer".into(),
            ));
        }
        (ResultStatus::Abstain, Some(_)) => {
            return Err(FramesError::InvalidMessage(
                "result: abstain must not carry an answer".into(),
            ));
        }
        _ => {}
    }
    match &r.answer {
        Some(Answer::Choice(c)) => id("answer.choice", &c.choice)?,
        Some(Answer::Probability(p)) => unit("answer.probability", p.probability)?,
        _ => {}
    }
    if let Some(u) = &r.uncertainty {
        for (k, v) in u.distribution.iter().flatten() {
            unit(&format!("uncertainty.distribution.{k}"), *v)?;
        }
        if let Some(c) = u.provider_confidence {
            unit("uncertainty.provider_confidence", c)?;
        }
        if let Some(c) = u.selection_propensity {
            unit("uncertainty.selection_propensity", c)?;
        }
        if let Some(c) = &u.calibration_ref {
            id("uncertainty.calibration_ref", c)?;
        }
    }
    Ok(())
}

/// The schema constraints of a commit request that serde does not enforce.
pub fn check_commit_request(r: &CommitRequest) -> Result<(), FramesError> {
    id("frame_id", &r.frame_id)?;
    id("decision_id", &r.decision_id)?;
    id("assessment_id", &r.assessment_id)?;
    features(&r.required_features)
}

/// Checks a result against the decision it answers (§5): the option was offered, the input
/// fits its schema, numbers are in range, a distribution covers exactly the offered answers.
pub fn check_result(d: &Decision, r: &AssessmentResult) -> Result<(), FramesError> {
    let Some(answer) = &r.answer else {
        return Ok(()); // an abstention answers nothing
    };
    match (d.kind, answer) {
        (DecisionKind::Choice, Answer::Choice(c)) => {
            let opt = d.option(&c.choice).ok_or_else(|| {
                FramesError::InvalidChoice(format!(
                    "option `{}` is not offered by decision {}",
                    c.choice, d.decision_id
                ))
            })?;
            validate_input(&opt.input_schema, &Value::Object(c.input.clone()))
                .map_err(|e| FramesError::InvalidInput(format!("input of `{}`: {e}", c.choice)))?;
        }
        (DecisionKind::Input, Answer::Value(v)) => {
            let schema = d.input_schema.as_ref().ok_or_else(|| {
                FramesError::InvalidMessage(format!(
                    "decision {} has no input schema",
                    d.decision_id
                ))
            })?;
            validate_input(schema, &v.value)
                .map_err(|e| FramesError::InvalidInput(format!("value: {e}")))?;
        }
        (DecisionKind::Probability, Answer::Probability(p)) => {
            if !(0.0..=1.0).contains(&p.probability) {
                return Err(FramesError::InvalidAnswer(
                    "probability must be within [0, 1]".into(),
                ));
            }
        }
        (DecisionKind::Score, Answer::Score(s)) => {
            let top = d.levels.as_ref().map_or(0, |l| l.len().saturating_sub(1)) as f64;
            if !(0.0..=top).contains(&s.score) {
                return Err(FramesError::InvalidAnswer(format!(
                    "score must be within [0, {top}]"
                )));
            }
        }
        (kind, _) => {
            return Err(FramesError::InvalidAnswer(format!(
                "a {} decision needs a {} answer",
                kind.as_str(),
                match kind {
                    DecisionKind::Choice => "{choice, input}",
                    DecisionKind::Input => "{value}",
                    DecisionKind::Probability => "{probability}",
                    DecisionKind::Score => "{score}",
                }
            )));
        }
    }
    if let Some(dist) = r.uncertainty.as_ref().and_then(|u| u.distribution.as_ref()) {
        let expected: Vec<String> = match d.kind {
            DecisionKind::Choice => d.options.iter().flatten().map(|o| o.id.clone()).collect(),
            DecisionKind::Score => (0..d.levels.as_ref().map_or(0, Vec::len))
                .map(|i| i.to_string())
                .collect(),
            _ => {
                return Err(FramesError::InvalidDistribution(
                    "distributions exist only for choice and score decisions".into(),
                ));
            }
        };
        let mut exp = expected;
        exp.sort();
        let got: Vec<String> = dist.keys().cloned().collect();
        if got != exp {
            return Err(FramesError::InvalidDistribution(format!(
                "distribution keys {got:?} must be exactly {exp:?}"
            )));
        }
        let sum: f64 = dist.values().sum();
        if (sum - 1.0).abs() > 1e-6 {
            return Err(FramesError::InvalidDistribution(format!(
                "distribution sums to {sum}, not 1"
            )));
        }
    }
    Ok(())
}

/// Keywords the input-schema validator implements. Annotations (`title`, `description`, ...)
/// are accepted and ignored, as JSON Schema prescribes; any other keyword (including `$ref`,
/// `pattern`, `oneOf`) makes the schema unsupported instead of being silently ignored.
const ASSERTIONS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "minLength",
    "maxLength",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "items",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
];
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "format",
    "readOnly",
    "writeOnly",
    "deprecated",
];

/// Checks that a server-authored input schema uses only supported, self-contained keywords.
pub fn check_schema(schema: &Map<String, Value>) -> Result<(), FramesError> {
    for (k, v) in schema {
        if ANNOTATIONS.contains(&k.as_str()) {
            continue;
        }
        if !ASSERTIONS.contains(&k.as_str()) {
            return Err(FramesError::SchemaUnsupported(format!(
                "input schema keyword `{k}` is not supported (schemas must be self-contained)"
            )));
        }
        match (k.as_str(), v) {
            ("properties", Value::Object(props)) => {
                for p in props.values() {
                    sub(p)?;
                }
            }
            ("additionalProperties" | "items", v) => sub(v)?,
            _ => {}
        }
    }
    Ok(())
}

fn sub(v: &Value) -> Result<(), FramesError> {
    match v {
        Value::Object(m) => check_schema(m),
        Value::Bool(_) => Ok(()),
        _ => Err(FramesError::SchemaUnsupported(
            "a subschema must be an object or boolean".into(),
        )),
    }
}

/// Validates `value` against a supported input schema; the error names the failing path.
pub fn validate_input(schema: &Map<String, Value>, value: &Value) -> Result<(), String> {
    check_schema(schema).map_err(|e| e.to_string())?;
    validate_at(schema, value, "$")
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
}

fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn validate_sub(s: &Value, v: &Value, path: &str) -> Result<(), String> {
    match s {
        Value::Bool(true) => Ok(()),
        Value::Bool(false) => Err(format!("{path}: not allowed")),
        Value::Object(m) => validate_at(m, v, path),
        _ => Err(format!("{path}: invalid subschema")),
    }
}

fn validate_at(s: &Map<String, Value>, v: &Value, path: &str) -> Result<(), String> {
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(t) => type_ok(t, v),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|t| type_ok(t, v)),
            _ => false,
        };
        if !ok {
            return Err(format!("{path}: expected type {t}"));
        }
    }
    if let Some(Value::Array(options)) = s.get("enum")
        && !options.iter().any(|o| json_eq(o, v))
    {
        return Err(format!(
            "{path}: must be one of {}",
            Value::Array(options.clone())
        ));
    }
    if let Some(c) = s.get("const")
        && !json_eq(c, v)
    {
        return Err(format!("{path}: must equal {c}"));
    }
    if let Value::String(text) = v {
        let n = text.chars().count() as u64;
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && n < min
        {
            return Err(format!("{path}: shorter than {min} characters"));
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && n > max
        {
            return Err(format!("{path}: longer than {max} characters"));
        }
    }
    if let Some(x) = v.as_f64().filter(|_| v.is_number()) {
        let bound = |k: &str| s.get(k).and_then(Value::as_f64);
        if bound("minimum").is_some_and(|m| x < m)
            || bound("maximum").is_some_and(|m| x > m)
            || bound("exclusiveMinimum").is_some_and(|m| x <= m)
            || bound("exclusiveMaximum").is_some_and(|m| x >= m)
        {
            return Err(format!("{path}: {x} is out of range"));
        }
    }
    if let Value::Array(items) = v {
        if let Some(min) = s.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            return Err(format!("{path}: fewer than {min} items"));
        }
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > max
        {
            return Err(format!("{path}: more than {max} items"));
        }
        if let Some(item) = s.get("items") {
            for (i, x) in items.iter().enumerate() {
                validate_sub(item, x, &format!("{path}[{i}]"))?;
            }
        }
    }
    if let Value::Object(obj) = v {
        if let Some(Value::Array(req)) = s.get("required") {
            for r in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(format!("{path}: missing required property `{r}`"));
                }
            }
        }
        if let Some(min) = s.get("minProperties").and_then(Value::as_u64)
            && (obj.len() as u64) < min
        {
            return Err(format!("{path}: fewer than {min} properties"));
        }
        if let Some(max) = s.get("maxProperties").and_then(Value::as_u64)
            && (obj.len() as u64) > max
        {
            return Err(format!("{path}: more than {max} properties"));
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, x) in obj {
            let p = format!("{path}.{k}");
            match props.and_then(|m| m.get(k)) {
                Some(ps) => validate_sub(ps, x, &p)?,
                None => {
                    if let Some(extra) = s.get("additionalProperties") {
                        if extra == &Value::Bool(false) {
                            return Err(format!("{path}: unexpected property `{k}`"));
                        }
                        validate_sub(extra, x, &p)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Checks an evidence item's structural rules: inline content xor blob; text is a string;
/// binary kinds use blobs with a lowercase SHA-256.
pub fn check_evidence(e: &Evidence) -> Result<(), String> {
    match (&e.content, &e.blob) {
        (Some(_), Some(_)) => return Err(format!("{}: has both content and blob", e.evidence_id)),
        (None, None) => return Err(format!("{}: has neither content nor blob", e.evidence_id)),
        _ => {}
    }
    if e.kind == EvidenceKind::Text && !e.content.as_ref().is_some_and(Value::is_string) {
        return Err(format!(
            "{}: text evidence needs string content",
            e.evidence_id
        ));
    }
    if matches!(
        e.kind,
        EvidenceKind::Image | EvidenceKind::Audio | EvidenceKind::Video | EvidenceKind::Document
    ) && e.blob.is_none()
    {
        return Err(format!("{}: binary evidence needs a blob", e.evidence_id));
    }
    if let Some(b) = &e.blob
        && (b.sha256.len() != 64
            || !b
                .sha256
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)))
    {
        return Err(format!(
            "{}: blob sha256 must be 64 lowercase hex digits",
            e.evidence_id
        ));
    }
    Ok(())
}
