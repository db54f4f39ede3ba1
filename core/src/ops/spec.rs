//! Graph specs: the JSON forms of cells, gates, computes, selectors and the whole surface.

use serde::Serialize;

use serde_json::Value;

use crate::fields::{Fields, ReadError, expected, join};

use super::control::{ActionSpec, ControlSpec, ControlValue};
use super::retention::Retention;
use crate::jobs::EndpointId;
use crate::value::Payload;

// ----- specs ------------------------------------------------------------------------------------

/// One dependency of a cell: the input key its compute sees, and the control or cell it reads.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum DepSpec {
    /// Read `name` under the key `name`.
    Same(String),
    /// Read `from` under the key `key`.
    Keyed { key: String, from: String },
}

impl DepSpec {
    /// Reads `"name"` or `{key, from}`.
    pub fn from_value(path: &str, v: &Value) -> Result<DepSpec, ReadError> {
        match v {
            Value::String(s) => Ok(DepSpec::Same(s.clone())),
            Value::Object(_) => {
                let f = Fields::of(path, v)?;
                Ok(DepSpec::Keyed {
                    key: f.string("key")?,
                    from: f.string("from")?,
                })
            }
            other => Err(expected(path, "a name or {key, from}", other)),
        }
    }

    pub(crate) fn key(&self) -> &str {
        match self {
            DepSpec::Same(n) => n,
            DepSpec::Keyed { key, .. } => key,
        }
    }
    pub(crate) fn source(&self) -> &str {
        match self {
            DepSpec::Same(n) => n,
            DepSpec::Keyed { from, .. } => from,
        }
    }
}

/// A cell's gate: the cell holds (nothing runs) unless `control` has one of the `open` values.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateSpec {
    pub control: String,
    pub open: Vec<ControlValue>,
}

impl GateSpec {
    /// Reads `{control, open: [values]}`.
    pub fn from_value(path: &str, v: &Value) -> Result<GateSpec, ReadError> {
        let f = Fields::of(path, v)?;
        Ok(GateSpec {
            control: f.string("control")?,
            open: f.req_list("open", ControlValue::from_value)?,
        })
    }
}

/// Who computes a cell.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ComputeSpec {
    /// The host runs the cell's function (synchronous or asynchronous, possibly streaming) when
    /// it drains [`AppOutput::Compute`], and reports back.
    #[default]
    Host,
    /// A Worker job on this endpoint of the app's registry; the inputs are the run payload.
    Worker { endpoint: EndpointId },
}

impl ComputeSpec {
    /// Reads `{kind: "host"}` or `{kind: "worker", endpoint}`.
    pub fn from_value(path: &str, v: &Value) -> Result<ComputeSpec, ReadError> {
        let f = Fields::of(path, v)?;
        match f.string("kind")?.as_str() {
            "host" => Ok(ComputeSpec::Host),
            "worker" => Ok(ComputeSpec::Worker {
                endpoint: EndpointId(f.u64("endpoint")?),
            }),
            other => Err(format!(
                "{}: unknown compute kind `{other}`; kinds: host, worker",
                join(path, "kind")
            )),
        }
    }
}

/// A cell: a calculation rule with a stable, scope-qualified name.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CellSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub deps: Vec<DepSpec>,
    /// Constant fields added to the inputs (e.g. a Worker's tuning parameters).
    #[serde(default)]
    pub constants: serde_json::Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateSpec>,
    #[serde(default)]
    pub compute: ComputeSpec,
    /// When a recomputed value counts as unchanged (equality gating).
    #[serde(default, skip_serializing_if = "is_default")]
    pub equality: Equality,
}

/// `v` sorted and deduplicated, for indices below `n` (cells, controls): a mark per index, in
/// O(n + len). (The standard sorts compile to kilobytes of WebAssembly per element type.)
pub(crate) fn sorted_set(v: Vec<usize>, n: usize) -> Vec<usize> {
    let mut mark = vec![false; n];
    for &i in &v {
        mark[i] = true;
    }
    (0..n).filter(|&i| mark[i]).collect()
}

pub(crate) fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl CellSpec {
    /// Reads `{name, scope?, description?, deps?, constants?, gate?, compute?, equality?}`.
    pub fn from_value(path: &str, v: &Value) -> Result<CellSpec, ReadError> {
        let f = Fields::of(path, v)?;
        Ok(CellSpec {
            name: f.string("name")?,
            scope: f.opt_string("scope")?,
            description: f.string_or_empty("description")?,
            deps: f.list("deps", DepSpec::from_value)?,
            constants: f.object_or_empty("constants")?,
            gate: f
                .get("gate")
                .map(|g| GateSpec::from_value(&join(path, "gate"), g))
                .transpose()?,
            compute: f
                .get("compute")
                .map(|c| ComputeSpec::from_value(&join(path, "compute"), c))
                .transpose()?
                .unwrap_or_default(),
            equality: f
                .get("equality")
                .map(|e| Equality::from_value(&join(path, "equality"), e))
                .transpose()?
                .unwrap_or_default(),
        })
    }
}

/// Equality gating: a recomputed value equal to the cell's current value is a processed no-op
/// for its dependents — they keep their values (their pending calculations end as `skipped`),
/// and the calculation's journal says `unchanged`. Values are compared with
/// [`OpsValue::equal_value`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Equality {
    /// Equal values (structural equality) gate dependents (the default).
    #[default]
    Value,
    /// Every result is a change (values that are expensive to compare, or mutable).
    Never,
}

impl Equality {
    /// Reads `"value"` or `"never"`.
    pub fn from_value(path: &str, v: &Value) -> Result<Equality, ReadError> {
        match v.as_str() {
            Some("value") => Ok(Equality::Value),
            Some("never") => Ok(Equality::Never),
            _ => Err(expected(path, "\"value\" or \"never\"", v)),
        }
    }
}

/// A named pure result function the host registers (run by the host over a snapshot).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SelectorSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
}

impl SelectorSpec {
    /// Reads `{name, description?}`.
    pub fn from_value(path: &str, v: &Value) -> Result<SelectorSpec, ReadError> {
        let f = Fields::of(path, v)?;
        Ok(SelectorSpec {
            name: f.string("name")?,
            description: f.string_or_empty("description")?,
        })
    }
}

/// The published surface of an application. Implements `Deserialize` (through a hand-written
/// reader over a JSON value: see [`crate::fields`]); every field may be absent.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(default)]
pub struct GraphSpec {
    pub controls: Vec<ControlSpec>,
    pub actions: Vec<ActionSpec>,
    pub cells: Vec<CellSpec>,
    pub selectors: Vec<SelectorSpec>,
}

impl GraphSpec {
    /// Reads `{controls?, actions?, cells?, selectors?}`.
    pub fn from_value(path: &str, v: &Value) -> Result<GraphSpec, ReadError> {
        let f = Fields::of(path, v)?;
        Ok(GraphSpec {
            controls: f.list("controls", ControlSpec::from_value)?,
            actions: f.list("actions", ActionSpec::from_value)?,
            cells: f.list("cells", CellSpec::from_value)?,
            selectors: f.list("selectors", SelectorSpec::from_value)?,
        })
    }
}

crate::via_value!(
    DepSpec,
    GateSpec,
    ComputeSpec,
    CellSpec,
    Equality,
    SelectorSpec,
    GraphSpec
);

/// App construction parameters.
#[derive(Clone, Debug)]
pub struct AppConfig {
    /// The first graph instance id (hosts may seed it; replacements must use fresh ids).
    pub instance: u64,
    /// The first operation id.
    pub first_op: u64,
    /// How many finished records are kept for inspection.
    pub retention: Retention,
}

impl Default for AppConfig {
    fn default() -> Self {
        AppConfig {
            instance: 1,
            first_op: 1,
            retention: Retention::default(),
        }
    }
}

/// A written value as the rules see it: a scalar, or the type name of a payload that is not one.
pub(crate) type Requested = Result<ControlValue, &'static str>;

/// The payloads of `(name, payload)` writes read as scalars.
pub(crate) fn requested<P: Payload>(writes: &[(String, P)]) -> Vec<(String, Requested)> {
    writes
        .iter()
        .map(|(n, v)| (n.clone(), ControlValue::from_payload(v)))
        .collect()
}
