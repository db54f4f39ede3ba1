//! Published controls and actions: the application's writable surface.
//!
//! Validation lives here, once, so a slider, a keyboard binding and an agent's `set` tool
//! cannot disagree about what a legal value is. A write is either accepted — with the value
//! actually accepted, which may differ from the requested one (snapped to `step`, clamped to
//! `min`/`max`) — or rejected with the reason, changing nothing.

use serde::Serialize;
use serde_json::{Value, json};

use crate::fields::{Fields, ReadError, expected, join};
use crate::value::{Payload, number_text};

/// A control's value: controls are scalars (numbers, enum options, booleans, text).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ControlValue {
    Bool(bool),
    Number(f64),
    Text(String),
}

impl ControlValue {
    /// Reads a scalar out of any payload; `Err(type name)` for anything else.
    pub fn from_payload<V: Payload>(v: &V) -> Result<ControlValue, &'static str> {
        if let Some(b) = v.as_bool() {
            return Ok(ControlValue::Bool(b));
        }
        if let Some(n) = v.as_f64() {
            return Ok(ControlValue::Number(n));
        }
        if let Some(s) = v.as_text() {
            return Ok(ControlValue::Text(s));
        }
        Err(v.type_name())
    }

    /// The JSON form.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.json()).unwrap_or(Value::Null)
    }

    /// The JSON form ([`ControlValue::to_json`]) as a serializable value, written without
    /// building a `Value` (records serialized straight to text). Integral numbers print as
    /// integers (1024, not 1024.0).
    pub fn json(&self) -> ControlJson<'_> {
        ControlJson(self)
    }

    /// Reads a JSON scalar (`path` names it in errors).
    pub fn from_value(path: &str, v: &Value) -> Result<ControlValue, ReadError> {
        match v {
            Value::Bool(b) => Ok(ControlValue::Bool(*b)),
            Value::Number(n) => Ok(ControlValue::Number(n.as_f64().unwrap_or(f64::NAN))),
            Value::String(s) => Ok(ControlValue::Text(s.clone())),
            other => Err(expected(path, "a boolean, number or string", other)),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            ControlValue::Bool(_) => "boolean",
            ControlValue::Number(_) => "number",
            ControlValue::Text(_) => "string",
        }
    }
}

impl std::fmt::Display for ControlValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

/// What kind of value a control holds, with its constraints.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ControlKind {
    /// A finite number: snapped to `step` (anchored at `min`, else 0), then clamped.
    Number {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<f64>,
        /// Display unit ("s", "m²/s"): presentation only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unit: Option<String>,
    },
    /// One of the listed options (strings or numbers); anything else is rejected.
    Enum {
        options: Vec<ControlValue>,
    },
    Boolean,
    String,
}

/// Whether a number prints as an integer in a control's JSON form.
fn integral(n: f64) -> bool {
    n.fract() == 0.0 && n.abs() < 9e15
}

/// A control value serialized in its JSON form (see [`ControlValue::json`]).
pub struct ControlJson<'a>(&'a ControlValue);

impl Serialize for ControlJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ControlValue::Bool(b) => s.serialize_bool(*b),
            ControlValue::Number(n) if integral(*n) => s.serialize_i64(*n as i64),
            ControlValue::Number(n) => s.serialize_f64(*n),
            ControlValue::Text(t) => s.serialize_str(t),
        }
    }
}

/// How an accepted value differs from the requested one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Adjustment {
    /// Rounded to the nearest step.
    Snapped,
    /// Brought into `[min, max]`.
    Clamped,
}

/// The result of validating a write.
#[derive(Clone, Debug, PartialEq)]
pub struct Accepted {
    pub value: ControlValue,
    pub adjusted: Vec<Adjustment>,
}

impl ControlKind {
    /// Reads the kind from an object's `type` and constraint fields (a control's or a
    /// parameter's own object: the kind is flattened into it).
    pub fn from_value(path: &str, v: &Value) -> Result<ControlKind, ReadError> {
        let f = Fields::of(path, v)?;
        Ok(match f.string("type")?.as_str() {
            "number" => ControlKind::Number {
                min: f.opt_f64("min")?,
                max: f.opt_f64("max")?,
                step: f.opt_f64("step")?,
                unit: f.opt_string("unit")?,
            },
            "enum" => ControlKind::Enum {
                options: f.req_list("options", ControlValue::from_value)?,
            },
            "boolean" => ControlKind::Boolean,
            "string" => ControlKind::String,
            other => {
                return Err(format!(
                    "{}: unknown control type `{other}`; types: number, enum, boolean, string",
                    join(path, "type")
                ));
            }
        })
    }

    /// Validates a requested value: `Ok` with the value actually accepted, or `Err(reason)`.
    pub fn validate(&self, requested: &ControlValue) -> Result<Accepted, String> {
        match self {
            ControlKind::Enum { options } => {
                if options.contains(requested) {
                    Ok(Accepted {
                        value: requested.clone(),
                        adjusted: vec![],
                    })
                } else {
                    let legal: Vec<String> = options.iter().map(|o| o.to_string()).collect();
                    Err(format!("{requested} is not one of {}", legal.join(", ")))
                }
            }
            ControlKind::Boolean => match requested {
                ControlValue::Bool(_) => Ok(Accepted {
                    value: requested.clone(),
                    adjusted: vec![],
                }),
                other => Err(format!(
                    "expected a boolean, got {} {other}",
                    other.type_name()
                )),
            },
            ControlKind::String => match requested {
                ControlValue::Text(_) => Ok(Accepted {
                    value: requested.clone(),
                    adjusted: vec![],
                }),
                other => Err(format!(
                    "expected a string, got {} {other}",
                    other.type_name()
                )),
            },
            ControlKind::Number { min, max, step, .. } => {
                let ControlValue::Number(n) = requested else {
                    return Err(format!(
                        "expected a number, got {} {requested}",
                        requested.type_name()
                    ));
                };
                if !n.is_finite() {
                    return Err("the value must be a finite number".into());
                }
                let mut x = *n;
                let mut adjusted = Vec::new();
                if let Some(s) = step.filter(|s| *s > 0.0) {
                    let anchor = min.unwrap_or(0.0);
                    let snapped =
                        round_to_step_precision(anchor + ((x - anchor) / s).round() * s, s);
                    if snapped != x {
                        adjusted.push(Adjustment::Snapped);
                    }
                    x = snapped;
                }
                let before = x;
                if let Some(lo) = min {
                    x = x.max(*lo);
                }
                if let Some(hi) = max {
                    x = x.min(*hi);
                }
                if x != before {
                    adjusted.push(Adjustment::Clamped);
                }
                // -0.0 and 0.0 are the same setting.
                if x == 0.0 {
                    x = 0.0;
                }
                Ok(Accepted {
                    value: ControlValue::Number(x),
                    adjusted,
                })
            }
        }
    }

    /// The JSON Schema of a legal value (used by the agent tools).
    pub fn json_schema(&self) -> Value {
        match self {
            ControlKind::Number { min, max, step, .. } => {
                let mut s = json!({"type": "number"});
                if let Some(m) = min {
                    s["minimum"] = json!(m);
                }
                if let Some(m) = max {
                    s["maximum"] = json!(m);
                }
                if let Some(st) = step {
                    s["description"] = json!(format!(
                        "snapped to a multiple of {} from {}; out-of-range values are clamped",
                        number_text(*st),
                        number_text(min.unwrap_or(0.0))
                    ));
                }
                s
            }
            ControlKind::Enum { options } => {
                json!({"enum": options.iter().map(ControlValue::to_json).collect::<Vec<_>>()})
            }
            ControlKind::Boolean => json!({"type": "boolean"}),
            ControlKind::String => json!({"type": "string"}),
        }
    }
}

/// Snap arithmetic breeds 0.30000000000000004: round to the decimals the step is written with
/// (the fewest decimals that represent the step), with arithmetic only.
fn round_to_step_precision(x: f64, step: f64) -> f64 {
    let mut scale = 1.0f64;
    for _ in 0..=12 {
        let scaled = step * scale;
        if (scaled - scaled.round()).abs() <= 1e-9 * scaled.abs().max(1.0) {
            return (x * scale).round() / scale;
        }
        scale *= 10.0;
    }
    x
}

/// A published control: an independent variable people and agents move.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlSpec {
    /// Leaf name; the effective name is `scope/name` when a scope is given.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(flatten)]
    pub kind: ControlKind,
    /// The initial value (validated like any write).
    pub value: ControlValue,
    #[serde(default)]
    pub description: String,
}

impl ControlSpec {
    /// Reads `{name, scope?, type, ...constraints, value, description?}`.
    pub fn from_value(path: &str, v: &Value) -> Result<ControlSpec, ReadError> {
        let f = Fields::of(path, v)?;
        Ok(ControlSpec {
            name: f.string("name")?,
            scope: f.opt_string("scope")?,
            kind: ControlKind::from_value(path, v)?,
            value: ControlValue::from_value(&join(path, "value"), f.req("value")?)?,
            description: f.string_or_empty("description")?,
        })
    }

    /// The scope-qualified name.
    pub fn qualified(&self) -> String {
        qualify(self.scope.as_deref(), &self.name)
    }
}

crate::via_value!(
    ControlValue,
    ControlKind,
    ControlSpec,
    EffectValue,
    Effect,
    ParamSpec,
    ActionSpec
);

/// `scope/name`, or `name` without a scope.
pub fn qualify(scope: Option<&str>, name: &str) -> String {
    match scope {
        Some(s) if !s.is_empty() => format!("{s}/{name}"),
        _ => name.to_owned(),
    }
}

/// A value an action writes: a constant, one of its arguments, or the control's current value
/// plus an increment.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EffectValue {
    Value(ControlValue),
    Arg(String),
    Increment(f64),
}

impl EffectValue {
    /// Reads `{"value": scalar}`, `{"arg": name}` or `{"increment": number}`.
    pub fn from_value(path: &str, v: &Value) -> Result<EffectValue, ReadError> {
        let f = Fields::of(path, v)?;
        let one = |key: &str| f.map.len() == 1 && f.map.contains_key(key);
        if one("value") {
            Ok(EffectValue::Value(ControlValue::from_value(
                &join(path, "value"),
                &f.map["value"],
            )?))
        } else if one("arg") {
            Ok(EffectValue::Arg(f.string("arg")?))
        } else if one("increment") {
            Ok(EffectValue::Increment(f.f64("increment")?))
        } else {
            Err(format!(
                "{path}: expected one of {{\"value\": scalar}}, {{\"arg\": name}}, {{\"increment\": number}}"
            ))
        }
    }
}

/// What an action does. Effects are data, so the core validates and applies them
/// all-or-nothing and every host runs the same action the same way.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", untagged)]
pub enum Effect {
    /// Write a control (validated like any write).
    Set { set: String, to: EffectValue },
    /// Start a new calculation of a cell even though its inputs are unchanged.
    Rerun { rerun: String },
}

impl Effect {
    /// Reads `{set, to}` or `{rerun}` (the first shape that fits).
    pub fn from_value(path: &str, v: &Value) -> Result<Effect, ReadError> {
        let f = Fields::of(path, v)?;
        let set = || -> Result<Effect, ReadError> {
            Ok(Effect::Set {
                set: f.string("set")?,
                to: EffectValue::from_value(&join(path, "to"), f.req("to")?)?,
            })
        };
        match (f.get("set"), f.get("rerun")) {
            (Some(_), None) => set(),
            (Some(_), Some(_)) => set().or_else(|_| {
                Ok(Effect::Rerun {
                    rerun: f.string("rerun")?,
                })
            }),
            (None, Some(_)) => Ok(Effect::Rerun {
                rerun: f.string("rerun")?,
            }),
            (None, None) => Err(format!("{path}: an effect is {{set, to}} or {{rerun}}")),
        }
    }
}

/// One parameter of an action.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParamSpec {
    pub name: String,
    #[serde(flatten)]
    pub kind: ControlKind,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub description: String,
}

impl ParamSpec {
    /// Reads `{name, type, ...constraints, required?, description?}`.
    pub fn from_value(path: &str, v: &Value) -> Result<ParamSpec, ReadError> {
        let f = Fields::of(path, v)?;
        Ok(ParamSpec {
            name: f.string("name")?,
            kind: ControlKind::from_value(path, v)?,
            required: f.bool_or_false("required")?,
            description: f.string_or_empty("description")?,
        })
    }
}

/// A published application action: a verb with parameters and declared effects.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub params: Vec<ParamSpec>,
    pub effects: Vec<Effect>,
}

impl ActionSpec {
    /// Reads `{name, scope?, description?, params?, effects}`.
    pub fn from_value(path: &str, v: &Value) -> Result<ActionSpec, ReadError> {
        let f = Fields::of(path, v)?;
        Ok(ActionSpec {
            name: f.string("name")?,
            scope: f.opt_string("scope")?,
            description: f.string_or_empty("description")?,
            params: f.list("params", ParamSpec::from_value)?,
            effects: f.req_list("effects", Effect::from_value)?,
        })
    }

    /// The scope-qualified name.
    pub fn qualified(&self) -> String {
        qualify(self.scope.as_deref(), &self.name)
    }

    /// The JSON Schema of the action's arguments.
    pub fn args_schema(&self) -> Value {
        let mut props = serde_json::Map::new();
        for p in &self.params {
            let mut s = p.kind.json_schema();
            if !p.description.is_empty() {
                s["description"] = json!(p.description);
            }
            props.insert(p.name.clone(), s);
        }
        let required: Vec<&str> = self
            .params
            .iter()
            .filter(|p| p.required)
            .map(|p| p.name.as_str())
            .collect();
        json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(min: f64, max: f64, step: f64) -> ControlKind {
        ControlKind::Number {
            min: Some(min),
            max: Some(max),
            step: Some(step),
            unit: None,
        }
    }

    #[test]
    fn numbers_snap_from_min_then_clamp() {
        let k = num(0.01, 1.0, 0.01);
        let a = k.validate(&ControlValue::Number(0.123)).unwrap();
        assert_eq!(a.value, ControlValue::Number(0.12));
        assert_eq!(a.adjusted, vec![Adjustment::Snapped]);
        let a = k.validate(&ControlValue::Number(7.0)).unwrap();
        assert_eq!(a.value, ControlValue::Number(1.0));
        assert_eq!(a.adjusted, vec![Adjustment::Clamped]);
        let a = k.validate(&ControlValue::Number(0.3)).unwrap();
        assert_eq!(a.value, ControlValue::Number(0.3));
        assert!(a.adjusted.is_empty());
        // Anchored at min: 64..1024 step 64 accepts 64, 128, ...
        let k = num(64.0, 1024.0, 64.0);
        assert_eq!(
            k.validate(&ControlValue::Number(100.0)).unwrap().value,
            ControlValue::Number(128.0)
        );
    }

    #[test]
    fn wrong_types_and_non_finite_numbers_are_rejected() {
        let k = num(0.0, 1.0, 0.1);
        assert!(k.validate(&ControlValue::Text("0.5".into())).is_err());
        assert!(k.validate(&ControlValue::Number(f64::NAN)).is_err());
        assert!(k.validate(&ControlValue::Number(f64::INFINITY)).is_err());
        let e = ControlKind::Enum {
            options: vec![
                ControlValue::Text("a".into()),
                ControlValue::Text("b".into()),
            ],
        };
        let err = e.validate(&ControlValue::Text("c".into())).unwrap_err();
        assert!(err.contains("\"a\", \"b\""), "{err}");
        assert!(
            ControlKind::Boolean
                .validate(&ControlValue::Number(1.0))
                .is_err()
        );
    }
}
