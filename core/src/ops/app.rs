//! The application graph: controls, cells, calculations, writes, and the bridge to the job
//! registry for Worker cells. Operations live in `operation.rs` (same struct, more methods).

use std::borrow::BorrowMut;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use serde_json::{Value, json};

use crate::fields::{Fields, ReadError, expected, join};

use super::control::{
    ActionSpec, ControlKind, ControlSpec, ControlValue, Effect, EffectValue, qualify,
};
use super::operation::Operation;
use super::retention::{Retention, RetentionState};
use super::types::*;
use super::{OpsError, OpsValue};
use crate::Millis;
use crate::jobs::{
    self, EndpointId, EndpointSpec, EventKind, Hello, JobId, Origin, Registry, RegistryConfig,
    Submit,
};
use crate::value::Payload;
use crate::vecmap::VecMap;

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

    fn key(&self) -> &str {
        match self {
            DepSpec::Same(n) => n,
            DepSpec::Keyed { key, .. } => key,
        }
    }
    fn source(&self) -> &str {
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

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
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
    /// The embedded job registry.
    pub registry: RegistryConfig,
    /// How many finished records are kept for inspection.
    pub retention: Retention,
}

impl Default for AppConfig {
    fn default() -> Self {
        AppConfig {
            instance: 1,
            first_op: 1,
            registry: RegistryConfig::default(),
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

// ----- outputs ----------------------------------------------------------------------------------

/// Work for the host, drained after every input.
#[derive(Clone, Debug)]
pub enum AppOutput<V> {
    /// Run this host cell's function on `inputs` and report with `calc_*`. `previous` is the
    /// cell's last final value (for warm starts).
    Compute {
        calc: CalcId,
        cell: String,
        inputs: V,
        previous: Option<Arc<V>>,
    },
    /// Abort this host calculation (fire its AbortSignal): it was superseded, held or disposed.
    /// `reason` is the event's name (`superseded`, `held`, `owner_disposed`, `ended`), `code`
    /// the stable code the host's abort error carries (`SUPERSEDED`, `HELD`, `OWNER_DISPOSED`,
    /// `ENDED`), `detail` the sentence for a human.
    Abort {
        calc: CalcId,
        cell: String,
        reason: &'static str,
        code: &'static str,
        detail: String,
    },
    /// An output of the embedded job registry (messages for Worker endpoints, waits, notes).
    Jobs(jobs::Output<V>),
    /// An operation reached its outcome. `snapshot` is the consistent state it settled at,
    /// present when it settled with a registered selector — named by `selector` — which the
    /// host runs over it (hosts keep no record of which operation asked for which selector).
    OpFinished {
        op: OpId,
        outcome: OpOutcomeKind,
        snapshot: Option<Arc<Snapshot<V>>>,
        selector: Option<String>,
    },
}

/// What a host report did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportStatus {
    /// Applied to the current calculation.
    Applied,
    /// The calculation had already ended (superseded, held, disposed): recorded as late
    /// evidence, never adopted.
    Late,
}

impl ReportStatus {
    /// `applied` or `late`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ReportStatus::Applied => "applied",
            ReportStatus::Late => "late",
        }
    }
}

// ----- state ------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Control(usize),
    Cell(usize),
}

#[derive(Debug)]
pub(crate) struct Control {
    pub(crate) name: String,
    pub(crate) spec: ControlSpec,
    pub(crate) value: ControlValue,
    /// The revision at which the current value became effective.
    pub(crate) version: Revision,
    /// Cells that read this control directly (as a dependency or a gate).
    pub(crate) dependents: Vec<usize>,
}

#[derive(Debug)]
pub(crate) struct Dep {
    key: String,
    node: Node,
}

#[derive(Debug)]
pub(crate) struct CellValue<V> {
    pub(crate) value: Arc<V>,
    pub(crate) calc: CalcId,
    /// Control versions this value was computed from, aligned with the cell's `rel`.
    pub(crate) provenance: Vec<Revision>,
    /// Computed from final values only (no partial anywhere upstream) and itself final.
    pub(crate) is_final: bool,
    /// The revision at which this content was committed (an unchanged recomputation keeps it).
    pub(crate) revision: Revision,
    /// The content's identity: a new one for every commit that changed the value, kept by an
    /// equal one. Dependents record the identities they read.
    pub(crate) content: u64,
    /// The identities of the inputs it was computed from, aligned with the cell's deps:
    /// control versions and upstream contents.
    pub(crate) reads: Vec<u64>,
    /// A partial value of its calculation (not its result).
    pub(crate) partial: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct CellError {
    pub(crate) calc: CalcId,
    pub(crate) message: String,
    pub(crate) code: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Cell<V> {
    pub(crate) name: String,
    pub(crate) spec: CellSpec,
    deps: Vec<Dep>,
    gate: Option<(usize, Vec<ControlValue>)>,
    pub(crate) upstream: Vec<usize>,
    pub(crate) downstream: Vec<usize>,
    /// Controls this cell depends on, directly or through upstream cells (sorted).
    pub(crate) rel: Vec<usize>,
    /// Controls read directly (deps and gate).
    direct: Vec<usize>,
    /// Every upstream cell, transitively.
    pub(crate) ancestors: Vec<usize>,
    pub(crate) value: Option<CellValue<V>>,
    pub(crate) current: Option<CalcId>,
    pub(crate) error: Option<CellError>,
    pub(crate) progress: Option<f64>,
    pub(crate) gate_open: bool,
    partial_this_run: bool,
}

#[derive(Debug)]
pub(crate) struct Calc {
    pub(crate) id: CalcId,
    pub(crate) cell: usize,
    pub(crate) cell_name: String,
    pub(crate) state: CalcState,
    pub(crate) started: bool,
    host: bool,
    pub(crate) job: Option<JobId>,
    provenance: Vec<Revision>,
    /// The input identities it read when it started (see [`CellValue::reads`]).
    reads: Vec<u64>,
    /// Asked for explicitly (initial, rerun, reopened gate): never skipped.
    forced: bool,
    partials: u32,
    /// What still names it: its cell's value or error, retained operations, its unsynced
    /// Worker job. Ended and unreferenced, it becomes prunable (see [`Retention`]).
    pub(crate) refs: u32,
    pub(crate) journal: Vec<CalcEvent>,
}

/// The application: controls, actions, the cell graph, writes, calculations, operations and
/// the job registry its Worker cells and hosted operations use. Sans-IO: every input carries
/// `now`; the host drains outputs.
///
/// `R` is how the app holds its registry: the registry itself (the default), or a host's
/// wrapper around one (the wasm bindings keep their JS conversion caches next to it).
#[derive(Debug)]
pub struct App<V, R = Registry<V>> {
    pub(crate) instance: u64,
    pub(crate) used_instances: Vec<u64>,
    pub(crate) next_generation: u64,
    pub(crate) controls: Vec<Control>,
    pub(crate) actions: Vec<ActionSpec>,
    pub(crate) cells: Vec<Cell<V>>,
    pub(crate) order: Vec<usize>,
    pub(crate) selectors: Vec<SelectorSpec>,
    pub(crate) names: HashMap<String, Node>,
    pub(crate) calcs: BTreeMap<CalcId, Calc>,
    /// Write receipts by id: slot `i` holds write `write_base + i` (`None` once pruned).
    pub(crate) writes: VecDeque<Option<WriteRecord>>,
    pub(crate) write_base: u64,
    pub(crate) retention: RetentionState,
    staged: Vec<WriteId>,
    /// The last content identity handed out (see [`CellValue::content`]).
    next_content: u64,
    /// `(cell index, action)` of the current graph instance; cleared when the graph is replaced
    /// or disposed.
    staged_reruns: Vec<(usize, String)>,
    pub(crate) revision: Revision,
    bumped: bool,
    next_invocation: u64,
    /// Boxed: retained records stay exactly their size (no B-tree node slack).
    pub(crate) ops: BTreeMap<OpId, Box<Operation<V>>>,
    pub(crate) pending_ops: Vec<OpId>,
    pub(crate) next_op: u64,
    /// Operation deadlines (operations with a timeout: few at a time).
    pub(crate) op_timers: VecMap<(Millis, OpId), ()>,
    pub(crate) registry: R,
    pub(crate) ops_endpoint: Option<EndpointId>,
    pub(crate) op_wires: HashMap<u64, OpId>,
    pub(crate) job_calcs: VecMap<JobId, (CalcId, usize)>,
    pub(crate) outputs: VecDeque<AppOutput<V>>,
    loaded: bool,
}

pub(crate) fn reg_mut<V, R: BorrowMut<Registry<V>>>(r: &mut R) -> &mut Registry<V> {
    r.borrow_mut()
}

pub(crate) fn reg_ref<V, R: BorrowMut<Registry<V>>>(r: &R) -> &Registry<V> {
    r.borrow()
}

impl<V: OpsValue> App<V, Registry<V>> {
    /// An empty app with its own registry; publish its surface with [`App::load`] (after
    /// opening the endpoints its Worker cells use, via [`App::jobs_mut`]).
    pub fn new(config: AppConfig) -> Self {
        let registry = Registry::new(config.registry.clone());
        App::with_registry(config, registry)
    }
}

impl<V: OpsValue, R: BorrowMut<Registry<V>>> App<V, R> {
    /// An empty app over a registry the host holds (`config.registry` is not used).
    pub fn with_registry(config: AppConfig, registry: R) -> Self {
        App {
            instance: config.instance,
            used_instances: vec![config.instance],
            next_generation: 1,
            controls: Vec::new(),
            actions: Vec::new(),
            cells: Vec::new(),
            order: Vec::new(),
            selectors: Vec::new(),
            names: HashMap::new(),
            calcs: BTreeMap::new(),
            writes: VecDeque::new(),
            write_base: 1,
            retention: RetentionState::new(config.retention, config.first_op),
            staged: Vec::new(),
            next_content: 0,
            staged_reruns: Vec::new(),
            revision: 0,
            bumped: false,
            next_invocation: 1,
            ops: BTreeMap::new(),
            pending_ops: Vec::new(),
            next_op: config.first_op,
            op_timers: VecMap::new(),
            registry,
            ops_endpoint: None,
            op_wires: HashMap::new(),
            job_calcs: VecMap::new(),
            outputs: VecDeque::new(),
            loaded: false,
        }
    }

    /// The job registry (read-only).
    pub fn jobs(&self) -> &Registry<V> {
        reg_ref(&self.registry)
    }

    /// The job registry, e.g. to open Worker endpoints before [`App::load`]. After changing it
    /// directly, call [`App::sync_jobs_now`] so cells and operations see the change (or use
    /// [`App::jobs_call`], which does both).
    pub fn jobs_mut(&mut self) -> &mut Registry<V> {
        reg_mut(&mut self.registry)
    }

    /// The host's registry holder.
    pub fn registry_host_mut(&mut self) -> &mut R {
        &mut self.registry
    }

    /// Lets cells and operations see what changed in the registry since the last input.
    pub fn sync_jobs_now(&mut self, now: Millis) {
        self.begin();
        self.pump_registry(now);
        self.settle(now);
    }

    /// Publishes the surface and starts the first graph instance: every cell whose gate is open
    /// gets its initial calculation. Nothing changes if the spec is invalid.
    pub fn load(&mut self, now: Millis, spec: GraphSpec) -> Result<(), OpsError> {
        if self.loaded {
            return Err(OpsError::InvalidArgument(
                "the surface is already loaded; replace cells with replace_graph".into(),
            ));
        }
        let mut names = HashMap::new();
        let mut controls = Vec::new();
        for c in &spec.controls {
            let name = c.qualified();
            check_name(&name)?;
            let value = c
                .kind
                .validate(&c.value)
                .map_err(|r| {
                    OpsError::InvalidGraph(format!("control `{name}` initial value: {r}"))
                })?
                .value;
            if names
                .insert(name.clone(), Node::Control(controls.len()))
                .is_some()
            {
                return Err(OpsError::InvalidGraph(format!("duplicate name `{name}`")));
            }
            controls.push(Control {
                name,
                spec: c.clone(),
                value,
                version: 0,
                dependents: vec![],
            });
        }
        let mut selectors = Vec::new();
        for s in &spec.selectors {
            if selectors.iter().any(|x: &SelectorSpec| x.name == s.name) {
                return Err(OpsError::InvalidGraph(format!(
                    "duplicate selector `{}`",
                    s.name
                )));
            }
            selectors.push(s.clone());
        }
        let cells = self.build_cells(&controls, &mut names, &spec.cells)?;
        let mut actions: Vec<ActionSpec> = Vec::new();
        for a in &spec.actions {
            let name = a.qualified();
            check_name(&name)?;
            if actions.iter().any(|x| x.qualified() == name) {
                return Err(OpsError::InvalidGraph(format!("duplicate action `{name}`")));
            }
            validate_action(a, &controls, &names)?;
            actions.push(a.clone());
        }
        self.controls = controls;
        self.names = names;
        self.actions = actions;
        self.selectors = selectors;
        self.install_cells(cells.0, cells.1);
        self.loaded = true;
        self.begin();
        self.schedule_all(now, Trigger::Initial);
        self.settle(now);
        Ok(())
    }

    /// Validates cell specs against the controls; returns the cells and their topological order.
    #[allow(clippy::type_complexity)]
    fn build_cells(
        &self,
        controls: &[Control],
        names: &mut HashMap<String, Node>,
        specs: &[CellSpec],
    ) -> Result<(Vec<Cell<V>>, Vec<usize>), OpsError> {
        let mut cell_names: Vec<String> = Vec::new();
        for s in specs {
            let name = qualify(s.scope.as_deref(), &s.name);
            check_name(&name)?;
            if names.contains_key(&name) || cell_names.contains(&name) {
                return Err(OpsError::InvalidGraph(format!("duplicate name `{name}`")));
            }
            cell_names.push(name);
        }
        for (i, n) in cell_names.iter().enumerate() {
            names.insert(n.clone(), Node::Cell(i));
        }
        let mut cells = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            let name = cell_names[i].clone();
            let mut deps = Vec::new();
            let mut keys: Vec<&str> = Vec::new();
            for d in &s.deps {
                let node = *names.get(d.source()).ok_or_else(|| {
                    OpsError::InvalidGraph(format!(
                        "cell `{name}` depends on unknown `{}`",
                        d.source()
                    ))
                })?;
                if node == Node::Cell(i) {
                    return Err(OpsError::InvalidGraph(format!(
                        "cell `{name}` depends on itself"
                    )));
                }
                if keys.contains(&d.key()) || s.constants.contains_key(d.key()) {
                    return Err(OpsError::InvalidGraph(format!(
                        "cell `{name}` has two inputs named `{}`",
                        d.key()
                    )));
                }
                keys.push(d.key());
                deps.push(Dep {
                    key: d.key().to_owned(),
                    node,
                });
            }
            let gate = match &s.gate {
                None => None,
                Some(g) => match names.get(&g.control) {
                    Some(Node::Control(c)) => Some((*c, g.open.clone())),
                    _ => {
                        return Err(OpsError::InvalidGraph(format!(
                            "cell `{name}` is gated on `{}`, which is not a control",
                            g.control
                        )));
                    }
                },
            };
            if let ComputeSpec::Worker { endpoint } = s.compute
                && reg_ref(&self.registry).endpoint(endpoint).is_none()
            {
                return Err(OpsError::InvalidGraph(format!(
                    "cell `{name}` runs on {endpoint}, which is not open"
                )));
            }
            let mut direct: Vec<usize> = deps
                .iter()
                .filter_map(|d| match d.node {
                    Node::Control(c) => Some(c),
                    _ => None,
                })
                .collect();
            if let Some((g, _)) = &gate {
                direct.push(*g);
            }
            let direct = sorted_set(direct, controls.len());
            let upstream: Vec<usize> = deps
                .iter()
                .filter_map(|d| match d.node {
                    Node::Cell(c) => Some(c),
                    _ => None,
                })
                .collect();
            let upstream = sorted_set(upstream, specs.len());
            cells.push(Cell {
                name,
                spec: s.clone(),
                deps,
                gate,
                upstream,
                downstream: vec![],
                rel: vec![],
                direct,
                ancestors: vec![],
                value: None,
                current: None,
                error: None,
                progress: None,
                gate_open: true,
                partial_this_run: false,
            });
        }
        // Topological order (Kahn), rejecting cycles.
        let n = cells.len();
        let mut indegree: Vec<usize> = cells.iter().map(|c| c.upstream.len()).collect();
        let mut downstream = vec![Vec::new(); n];
        for (i, c) in cells.iter().enumerate() {
            for &u in &c.upstream {
                downstream[u].push(i);
            }
        }
        // Kahn's algorithm taking the first declared ready cell: declaration order whenever it
        // is a valid order, so generations follow the spec.
        // `ready` is kept sorted descending, so `pop` takes the first declared (a plain Vec:
        // graphs are small, and an ordered set type costs more code than it saves here).
        let mut ready: Vec<usize> = (0..n).rev().filter(|i| indegree[*i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop() {
            order.push(i);
            for &d in &downstream[i] {
                indegree[d] -= 1;
                if indegree[d] == 0 {
                    let at = ready.partition_point(|&r| r > d);
                    ready.insert(at, d);
                }
            }
        }
        if order.len() != n {
            let cyclic: Vec<&str> = (0..n)
                .filter(|i| indegree[*i] > 0)
                .map(|i| cells[i].name.as_str())
                .collect();
            return Err(OpsError::InvalidGraph(format!(
                "dependency cycle among {}",
                cyclic.join(", ")
            )));
        }
        for (i, d) in downstream.into_iter().enumerate() {
            cells[i].downstream = d;
        }
        for &i in &order {
            let mut rel: Vec<usize> = cells[i].direct.clone();
            let mut anc: Vec<usize> = Vec::new();
            for &u in &cells[i].upstream.clone() {
                rel.extend_from_slice(&cells[u].rel);
                anc.push(u);
                anc.extend_from_slice(&cells[u].ancestors);
            }
            cells[i].rel = sorted_set(rel, controls.len());
            cells[i].ancestors = sorted_set(anc, n);
        }
        Ok((cells, order))
    }

    fn install_cells(&mut self, cells: Vec<Cell<V>>, order: Vec<usize>) {
        let old: Vec<CalcId> = self
            .cells
            .iter()
            .flat_map(|c| {
                c.value
                    .as_ref()
                    .map(|v| v.calc)
                    .into_iter()
                    .chain(c.error.as_ref().map(|e| e.calc))
            })
            .collect();
        for id in old {
            self.calc_unref(id);
        }
        for c in &mut self.controls {
            c.dependents.clear();
        }
        for (i, cell) in cells.iter().enumerate() {
            for &c in &cell.direct {
                self.controls[c].dependents.push(i);
            }
        }
        self.cells = cells;
        self.order = order;
    }

    // ----- inputs: writes -----------------------------------------------------------------------

    /// Starts a new input: the first state change of this input bumps the revision once.
    pub(crate) fn begin(&mut self) {
        self.bumped = false;
        self.prune();
    }

    pub(crate) fn bump(&mut self) -> Revision {
        if !self.bumped {
            self.revision += 1;
            self.bumped = true;
        }
        self.revision
    }

    pub(crate) fn control_index(&self, name: &str) -> Result<usize, OpsError> {
        match self.names.get(name) {
            Some(Node::Control(c)) => Ok(*c),
            _ => Err(OpsError::UnknownControl {
                name: name.into(),
                known: self.controls.iter().map(|c| c.name.clone()).collect(),
            }),
        }
    }

    pub(crate) fn cell_index(&self, name: &str) -> Result<usize, OpsError> {
        match self.names.get(name) {
            Some(Node::Cell(c)) => Ok(*c),
            _ => Err(OpsError::UnknownCell {
                name: name.into(),
                known: self.cells.iter().map(|c| c.name.clone()).collect(),
            }),
        }
    }

    /// Validates one write without applying it: the value that would be accepted.
    pub fn validate_write<P: Payload>(
        &self,
        name: &str,
        value: &P,
    ) -> Result<(usize, ControlValue, super::control::Accepted), OpsError> {
        self.validate_requested(name, ControlValue::from_payload(value))
    }

    /// [`App::validate_write`] of a payload already read as a scalar (`Err`: the type name of
    /// a payload that is not one). The payload-generic entry points convert and call this, so
    /// the rules are compiled once whatever the payload type.
    pub(crate) fn validate_requested(
        &self,
        name: &str,
        requested: Requested,
    ) -> Result<(usize, ControlValue, super::control::Accepted), OpsError> {
        let c = self.control_index(name)?;
        let requested = requested.map_err(|t| OpsError::InvalidControlValue {
            control: name.into(),
            reason: format!(
                "expected a {} value, got {t}",
                kind_name(&self.controls[c].spec.kind)
            ),
        })?;
        let accepted = self.controls[c]
            .spec
            .kind
            .validate(&requested)
            .map_err(|reason| OpsError::InvalidControlValue {
                control: name.into(),
                reason,
            })?;
        Ok((c, requested, accepted))
    }

    /// Validates every write first; stages them only if all are valid (all-or-nothing).
    pub(crate) fn stage_writes(
        &mut self,
        now: Millis,
        writes: &[(String, Requested)],
        actor: &Actor,
        op: Option<OpId>,
        invocation: Option<InvocationId>,
    ) -> Result<Vec<WriteId>, OpsError> {
        let mut checked = Vec::with_capacity(writes.len());
        for (name, value) in writes {
            let c = self.validate_requested(name, value.clone())?;
            if checked.iter().any(|x: &(usize, _, _)| x.0 == c.0) {
                return Err(OpsError::InvalidArgument(format!(
                    "`{name}` is written twice in one batch; give one value per control"
                )));
            }
            checked.push(c);
        }
        Ok(self.stage_checked(now, checked, actor, op, invocation))
    }

    fn stage_checked(
        &mut self,
        now: Millis,
        checked: Vec<(usize, ControlValue, super::control::Accepted)>,
        actor: &Actor,
        op: Option<OpId>,
        invocation: Option<InvocationId>,
    ) -> Vec<WriteId> {
        let mut ids = Vec::with_capacity(checked.len());
        for (control, requested, accepted) in checked {
            let id = WriteId(self.write_base + self.writes.len() as u64);
            self.writes.push_back(Some(WriteRecord {
                id,
                control,
                requested,
                accepted: accepted.value,
                adjusted: accepted.adjusted,
                actor: actor.clone(),
                op,
                invocation,
                accepted_at: now,
                status: WriteStatus::Staged,
                refs: 0,
            }));
            self.retention.live_writes += 1;
            self.staged.push(id);
            ids.push(id);
        }
        ids
    }

    /// Accepts one write (validated; the receipt says what was accepted). It becomes effective
    /// at the next [`App::flush`], together with every other write of the same tick.
    pub fn set<P: Payload>(
        &mut self,
        now: Millis,
        name: &str,
        value: &P,
        actor: Actor,
    ) -> Result<WriteId, OpsError> {
        let write = [(name.to_owned(), ControlValue::from_payload(value))];
        Ok(self.stage_writes(now, &write, &actor, None, None)?[0])
    }

    /// Accepts several writes all-or-nothing: if one is invalid, none is staged.
    pub fn set_many<P: Payload>(
        &mut self,
        now: Millis,
        writes: &[(String, P)],
        actor: Actor,
    ) -> Result<Vec<WriteId>, OpsError> {
        self.stage_writes(now, &requested(writes), &actor, None, None)
    }

    /// Invokes a published action: validates the arguments and every effect first, then stages
    /// the effects' writes and reruns as one batch (all-or-nothing).
    pub fn act<P: Payload>(
        &mut self,
        now: Millis,
        name: &str,
        args: &[(String, P)],
        actor: Actor,
    ) -> Result<(InvocationId, Vec<WriteId>), OpsError> {
        self.act_requested(now, name, &requested(args), actor)
    }

    fn act_requested(
        &mut self,
        now: Millis,
        name: &str,
        args: &[(String, Requested)],
        actor: Actor,
    ) -> Result<(InvocationId, Vec<WriteId>), OpsError> {
        let a = self
            .actions
            .iter()
            .find(|a| a.qualified() == name)
            .cloned()
            .ok_or_else(|| OpsError::UnknownAction {
                name: name.into(),
                known: self.actions.iter().map(|a| a.qualified()).collect(),
            })?;
        let bad = |reason: String| OpsError::InvalidActionArgs {
            action: name.into(),
            reason,
        };
        let mut given: Vec<(&str, ControlValue)> = Vec::new();
        for (k, v) in args {
            let Some(p) = a.params.iter().find(|p| &p.name == k) else {
                let valid: Vec<&str> = a.params.iter().map(|p| p.name.as_str()).collect();
                return Err(bad(format!(
                    "unknown parameter `{k}`; parameters: {}",
                    if valid.is_empty() {
                        "(none)".into()
                    } else {
                        valid.join(", ")
                    }
                )));
            };
            let cv = v.clone().map_err(|t| bad(format!("`{k}`: got {t}")))?;
            let accepted = p
                .kind
                .validate(&cv)
                .map_err(|r| bad(format!("`{k}`: {r}")))?;
            match given.iter_mut().find(|(n, _)| *n == k.as_str()) {
                Some(g) => g.1 = accepted.value,
                None => given.push((k.as_str(), accepted.value)),
            }
        }
        for p in &a.params {
            if p.required && !given.iter().any(|(n, _)| *n == p.name) {
                return Err(bad(format!("missing required parameter `{}`", p.name)));
            }
        }
        let mut checked = Vec::new();
        let mut reruns = Vec::new();
        for e in &a.effects {
            match e {
                Effect::Set { set, to } => {
                    let c = self.control_index(set)?;
                    let requested = match to {
                        EffectValue::Value(v) => v.clone(),
                        EffectValue::Arg(arg) => match given.iter().find(|(n, _)| n == arg) {
                            Some((_, v)) => v.clone(),
                            None => continue, // optional argument not given: no write
                        },
                        EffectValue::Increment(by) => match &self.controls[c].value {
                            ControlValue::Number(n) => ControlValue::Number(n + by),
                            _ => unreachable!("validated at load"),
                        },
                    };
                    let accepted =
                        self.controls[c]
                            .spec
                            .kind
                            .validate(&requested)
                            .map_err(|reason| OpsError::InvalidControlValue {
                                control: set.clone(),
                                reason,
                            })?;
                    checked.push((c, requested, accepted));
                }
                Effect::Rerun { rerun } => reruns.push(self.cell_index(rerun)?),
            }
        }
        let inv = InvocationId(self.next_invocation);
        self.next_invocation += 1;
        let ids = self.stage_checked(now, checked, &actor, None, Some(inv));
        for r in reruns {
            self.staged_reruns.push((r, a.qualified()));
        }
        Ok((inv, ids))
    }

    /// Whether a staged write (not yet effective) targets one of `relevant` (sorted controls).
    pub(crate) fn relevant_staged(&self, relevant: &[usize]) -> bool {
        self.staged
            .iter()
            .any(|w| relevant.binary_search(&self.write(*w).control).is_ok())
    }

    /// Whether writes or reruns are waiting for a flush.
    pub fn has_staged(&self) -> bool {
        !self.staged.is_empty() || !self.staged_reruns.is_empty()
    }

    /// Ends the tick: every staged write becomes effective in one batch (the last write to a
    /// control wins; an equal value is a no-op), affected cells get new calculations, waiting
    /// operations are correlated. Returns the revision when anything changed.
    pub fn flush(&mut self, now: Millis) -> Option<Revision> {
        self.begin();
        if !self.has_staged() {
            return None;
        }
        let staged = std::mem::take(&mut self.staged);
        let reruns = std::mem::take(&mut self.staged_reruns);
        // The last staged write of each control, by control index.
        let mut winner: Vec<Option<WriteId>> = vec![None; self.controls.len()];
        for &w in &staged {
            winner[self.write(w).control] = Some(w);
        }
        let changed: Vec<usize> = (0..winner.len())
            .filter(|&c| {
                winner[c].is_some_and(|w| self.write(w).accepted != self.controls[c].value)
            })
            .collect();
        let revision = if !changed.is_empty() || !reruns.is_empty() {
            Some(self.bump())
        } else {
            None
        };
        for &c in &changed {
            let v = self.write(winner[c].expect("a winner")).accepted.clone();
            self.controls[c].value = v;
            self.controls[c].version = self.revision;
        }
        for &w in &staged {
            let c = self.write(w).control;
            let win = winner[c].expect("a winner");
            let status = if win == w || self.write(win).accepted == self.write(w).accepted {
                WriteStatus::Effective {
                    revision: self.controls[c].version,
                    changed: changed.contains(&c),
                }
            } else {
                WriteStatus::Overwritten { by: win }
            };
            self.write_mut(w).status = status;
            self.write_released(w);
        }
        let fresh = self.ops_on_batch(now, &staged, &changed);
        let mut seeds: Vec<Option<Trigger>> = vec![None; self.cells.len()];
        for &c in &changed {
            for &x in &self.controls[c].dependents {
                let names: Vec<String> = changed
                    .iter()
                    .filter(|k| self.cells[x].direct.contains(k))
                    .map(|k| self.controls[*k].name.clone())
                    .collect();
                seeds[x] = Some(Trigger::Inputs { changed: names });
            }
        }
        for (x, action) in reruns {
            if seeds[x].is_none() {
                seeds[x] = Some(Trigger::Rerun { action });
            }
        }
        self.propagate(now, seeds);
        self.link_fresh(now, fresh);
        self.settle(now);
        revision
    }

    /// A write that is retained (staged, or named by a retained operation).
    pub(crate) fn write(&self, id: WriteId) -> &WriteRecord {
        self.write_record(id)
            .expect("referenced writes are retained")
    }

    fn write_mut(&mut self, id: WriteId) -> &mut WriteRecord {
        let i = id.0.checked_sub(self.write_base).expect("retained") as usize;
        self.writes[i]
            .as_mut()
            .expect("referenced writes are retained")
    }

    // ----- scheduling ---------------------------------------------------------------------------

    fn gate_is_open(&self, x: usize) -> bool {
        match &self.cells[x].gate {
            None => true,
            Some((c, open)) => open.contains(&self.controls[*c].value),
        }
    }

    fn schedule_all(&mut self, now: Millis, trigger: Trigger) {
        let seeds = vec![Some(trigger); self.cells.len()];
        self.propagate(now, seeds);
    }

    /// Walks the cells in topological order: every dirty cell gets a new calculation (or holds,
    /// when its gate is closed), and a cell that got a new calculation dirties its dependents.
    fn propagate(&mut self, now: Millis, mut dirty: Vec<Option<Trigger>>) {
        for i in 0..self.order.len() {
            let x = self.order[i];
            let Some(trigger) = dirty[x].take() else {
                continue;
            };
            if let Some(calc) = self.reschedule(now, x, trigger) {
                let name = self.cells[x].name.clone();
                for &d in &self.cells[x].downstream {
                    if dirty[d].is_none() {
                        dirty[d] = Some(Trigger::Upstream {
                            cell: name.clone(),
                            calc,
                        });
                    }
                }
            }
        }
        self.pump(now);
    }

    fn reschedule(&mut self, now: Millis, x: usize, trigger: Trigger) -> Option<CalcId> {
        let open = self.gate_is_open(x);
        let was_open = self.cells[x].gate_open;
        self.cells[x].gate_open = open;
        if !open {
            let (gc, _) = self.cells[x].gate.clone().expect("closed gates exist");
            if was_open {
                self.bump();
            }
            if let Some(c) = self.cells[x].current.take() {
                let control = self.controls[gc].name.clone();
                let value = self.controls[gc].value.clone();
                self.end_calc(
                    now,
                    c,
                    CalcEnd::Held,
                    CalcEventKind::Held { control, value },
                );
                self.cells[x].progress = None;
            }
            return None;
        }
        // A calculation that has not started yet reads its inputs when it starts: keep it.
        if was_open
            && let Some(c) = self.cells[x].current
            && self.calcs[&c].state == CalcState::Scheduled
        {
            if matches!(trigger, Trigger::Rerun { .. } | Trigger::Initial) {
                self.calcs.get_mut(&c).expect("exists").forced = true;
            }
            return Some(c);
        }
        let trigger = if !was_open {
            let (gc, _) = self.cells[x].gate.as_ref().expect("was closed");
            Trigger::GateOpened {
                control: self.controls[*gc].name.clone(),
            }
        } else {
            trigger
        };
        self.bump();
        let id = CalcId {
            instance: self.instance,
            generation: self.next_generation,
        };
        self.next_generation += 1;
        let old = self.cells[x].current;
        let host = matches!(self.cells[x].spec.compute, ComputeSpec::Host);
        let mut calc = Calc {
            id,
            cell: x,
            cell_name: self.cells[x].name.clone(),
            state: CalcState::Scheduled,
            started: false,
            host,
            job: None,
            provenance: vec![],
            reads: vec![],
            forced: matches!(
                trigger,
                Trigger::Initial | Trigger::Rerun { .. } | Trigger::GateOpened { .. }
            ),
            partials: 0,
            refs: 0,
            journal: Vec::with_capacity(4),
        };
        push_calc_event(
            &mut calc,
            now,
            self.revision,
            CalcEventKind::Scheduled {
                trigger: trigger.clone(),
                replaces: old,
            },
        );
        self.calcs.insert(id, calc);
        if let Some(old) = old {
            self.end_calc(
                now,
                old,
                CalcEnd::Superseded,
                CalcEventKind::Superseded {
                    by: id,
                    cause: trigger,
                },
            );
        }
        let cell = &mut self.cells[x];
        cell.current = Some(id);
        let cleared = cell.error.take();
        cell.partial_this_run = false;
        cell.progress = None;
        if let Some(e) = cleared {
            self.calc_unref(e.calc);
        }
        self.link_calc(now, x, id);
        Some(id)
    }

    /// Ends a calculation with a reason; tells the host (abort) or the registry (cancel).
    fn end_calc(&mut self, now: Millis, id: CalcId, end: CalcEnd, event: CalcEventKind) {
        let revision = self.revision;
        let calc = self.calcs.get_mut(&id).expect("calcs are retained");
        if calc.state.is_ended() {
            return;
        }
        let was_running = calc.state == CalcState::Running;
        calc.state = CalcState::Ended(end);
        let (reason, code) = match &event {
            CalcEventKind::Superseded { .. } => ("superseded", "SUPERSEDED"),
            CalcEventKind::Held { .. } => ("held", "HELD"),
            CalcEventKind::OwnerDisposed { .. } => ("owner_disposed", "OWNER_DISPOSED"),
            _ => ("ended", "ENDED"),
        };
        let detail = match &event {
            CalcEventKind::Superseded { by, .. } => format!("superseded by calculation {by}"),
            CalcEventKind::Held { control, value } => format!("held: gate {control} = {value}"),
            CalcEventKind::OwnerDisposed { reason } => reason.clone(),
            _ => "ended".into(),
        };
        push_calc_event(calc, now, revision, event);
        let (host, job, cell_name) = (calc.host, calc.job, calc.cell_name.clone());
        if calc.refs == 0 {
            self.retention_queue_calc(id);
        }
        if host && was_running {
            self.outputs.push_back(AppOutput::Abort {
                calc: id,
                cell: cell_name,
                reason,
                code,
                detail: detail.clone(),
            });
        }
        if let Some(job) = job {
            let _ = reg_mut(&mut self.registry).cancel(now, job, &detail);
        }
    }

    /// Whether a cell's value can be read by a dependent right now.
    pub(crate) fn readable(&self, u: usize) -> bool {
        let cell = &self.cells[u];
        if cell.value.is_none() {
            return false;
        }
        if !cell.gate_open {
            return true;
        }
        if cell.error.is_some() {
            return false;
        }
        match cell.current {
            None => true,
            Some(c) => self.calcs[&c].state == CalcState::Running && cell.partial_this_run,
        }
    }

    /// Starts every scheduled calculation whose upstream values are current.
    fn pump(&mut self, now: Millis) {
        for i in 0..self.order.len() {
            let x = self.order[i];
            let Some(c) = self.cells[x].current else {
                continue;
            };
            if self.calcs[&c].state != CalcState::Scheduled {
                continue;
            }
            if self.cells[x].upstream.iter().all(|&u| self.readable(u)) {
                if !self.calcs[&c].forced && self.value_stands(x) {
                    self.skip_calc(now, x, c);
                } else {
                    self.start_calc(now, x, c);
                }
            }
        }
        self.pump_registry(now);
    }

    /// The identities of a cell's inputs now, aligned with its deps.
    fn reads_now(&self, x: usize) -> impl Iterator<Item = u64> + '_ {
        self.cells[x].deps.iter().map(|d| match d.node {
            Node::Control(c) => self.controls[c].version,
            Node::Cell(u) => self.cells[u].value.as_ref().map_or(0, |v| v.content),
        })
    }

    /// Whether every upstream value is final.
    pub(crate) fn upstream_final(&self, x: usize) -> bool {
        self.cells[x]
            .upstream
            .iter()
            .all(|&u| self.cells[u].value.as_ref().is_some_and(|v| v.is_final))
    }

    /// Whether the cell's value is the complete result of exactly its current inputs, and those
    /// are final: recomputing could only give it again.
    fn value_stands(&self, x: usize) -> bool {
        self.cells[x].value.as_ref().is_some_and(|v| {
            !v.partial && v.reads.iter().copied().eq(self.reads_now(x)) && self.upstream_final(x)
        })
    }

    /// The versions of every relevant control a calculation of the cell would see now: the
    /// stalest one, directly or through an upstream value (a held upstream keeps an old value:
    /// the result then reflects the old input).
    fn provenance_now(&self, x: usize) -> Vec<Revision> {
        let cell = &self.cells[x];
        let mut provenance = Vec::with_capacity(cell.rel.len());
        for &k in &cell.rel {
            let direct = cell.direct.contains(&k).then(|| self.controls[k].version);
            let through = cell.upstream.iter().filter_map(|&u| {
                let uc = &self.cells[u];
                let pos = uc.rel.binary_search(&k).ok()?;
                uc.value.as_ref().map(|val| val.provenance[pos])
            });
            provenance.push(direct.into_iter().chain(through).min().unwrap_or(0));
        }
        provenance
    }

    /// Ends a scheduled calculation whose cell's value already is its result (equality gating).
    fn skip_calc(&mut self, now: Millis, x: usize, id: CalcId) {
        let revision = self.revision;
        let calc = self.calcs.get_mut(&id).expect("exists");
        calc.state = CalcState::Ended(CalcEnd::Skipped);
        push_calc_event(calc, now, revision, CalcEventKind::Skipped);
        calc.journal.shrink_to_fit();
        let cell = &mut self.cells[x];
        cell.current = None;
        cell.partial_this_run = false;
        self.calc_released(id);
        self.revalidate(x);
    }

    /// After a cell kept its content (an equal value, a finished stream, a skipped
    /// calculation): its value and its idle dependents' values computed from the same contents
    /// take the current provenance and finality — no calculation, no new content.
    fn revalidate(&mut self, from: usize) {
        let mut touched = vec![false; self.cells.len()];
        touched[from] = true;
        for i in 0..self.order.len() {
            let x = self.order[i];
            if !touched[x] {
                continue;
            }
            let cell = &self.cells[x];
            let idle = cell.current.is_none() && cell.error.is_none() && cell.gate_open;
            if x != from && !idle {
                continue;
            }
            if x != from && !self.value_matches_inputs(x) {
                continue;
            }
            let provenance = self.provenance_now(x);
            let upstream_final = self.upstream_final(x);
            let Some(v) = self.cells[x].value.as_mut() else {
                continue;
            };
            let is_final = !v.partial && upstream_final;
            if x != from && v.provenance == provenance && v.is_final == is_final {
                continue;
            }
            v.provenance = provenance;
            v.is_final = is_final;
            for &d in &self.cells[x].downstream {
                touched[d] = true;
            }
        }
    }

    /// Whether the cell's value is the complete result of its current inputs.
    pub(crate) fn value_matches_inputs(&self, x: usize) -> bool {
        self.cells[x]
            .value
            .as_ref()
            .is_some_and(|v| !v.partial && v.reads.iter().copied().eq(self.reads_now(x)))
    }

    fn start_calc(&mut self, now: Millis, x: usize, id: CalcId) {
        let provenance = self.provenance_now(x);
        let reads: Vec<u64> = self.reads_now(x).collect();
        let cell = &self.cells[x];
        let mut fields = Vec::with_capacity(cell.deps.len() + cell.spec.constants.len());
        for d in &cell.deps {
            let v = match d.node {
                Node::Control(c) => V::from_json(&self.controls[c].value.to_json()),
                Node::Cell(u) => (*self.cells[u].value.as_ref().expect("readable").value).clone(),
            };
            fields.push((d.key.clone(), v));
        }
        for (k, v) in &cell.spec.constants {
            fields.push((k.clone(), V::from_json(v)));
        }
        let inputs = V::object(fields);
        let previous = cell
            .value
            .as_ref()
            .filter(|v| v.is_final)
            .map(|v| v.value.clone());
        let name = cell.name.clone();
        let compute = cell.spec.compute.clone();
        let revision = self.revision;
        let calc = self.calcs.get_mut(&id).expect("exists");
        calc.provenance = provenance;
        calc.reads = reads;
        match compute {
            ComputeSpec::Host => {
                calc.state = CalcState::Running;
                calc.started = true;
                push_calc_event(calc, now, revision, CalcEventKind::Started);
                self.outputs.push_back(AppOutput::Compute {
                    calc: id,
                    cell: name,
                    inputs,
                    previous,
                });
            }
            ComputeSpec::Worker { endpoint } => {
                let mut req = Submit::new(format!("graph/{}", id.instance), endpoint, inputs);
                req.note = false;
                req.origin = Origin {
                    thread: None,
                    turn: None,
                    tool_call: Some(format!("calc {id} of {name}")),
                };
                match reg_mut(&mut self.registry).submit(now, req) {
                    Ok(s) => {
                        calc.job = Some(s.job);
                        calc.state = CalcState::Queued;
                        push_calc_event(
                            calc,
                            now,
                            revision,
                            CalcEventKind::Submitted { job: s.job },
                        );
                        self.job_calcs.insert(s.job, (id, 0));
                        self.calc_ref(id);
                    }
                    Err(e) => {
                        calc.state = CalcState::Running;
                        self.bump();
                        self.fail_calc(
                            now,
                            id,
                            format!("could not submit the Worker job: {e}"),
                            Some(e.code().into()),
                        );
                    }
                }
            }
        }
    }

    // ----- calculation results ------------------------------------------------------------------

    /// Whether a host calculation is running (reports apply). A report for one that ended
    /// is late; so is one for a calculation already pruned (its record is gone).
    fn check_host_calc(&self, id: CalcId) -> Result<bool, OpsError> {
        let Some(calc) = self.calcs.get(&id) else {
            return match self.calc_missing(id) {
                OpsError::Pruned(_) => Ok(false),
                e => Err(e),
            };
        };
        if !calc.host {
            return Err(OpsError::InvalidArgument(format!(
                "calculation {id} runs as a Worker job; its results arrive through on_worker_message"
            )));
        }
        Ok(calc.state == CalcState::Running)
    }

    fn late(&mut self, now: Millis, id: CalcId, what: &'static str) -> ReportStatus {
        let revision = self.revision;
        if let Some(calc) = self.calcs.get_mut(&id) {
            push_calc_event(calc, now, revision, CalcEventKind::Late { what });
        }
        ReportStatus::Late
    }

    /// The host reports progress in [0, 1] of a host calculation.
    pub fn calc_progress(
        &mut self,
        now: Millis,
        id: CalcId,
        fraction: f64,
    ) -> Result<ReportStatus, OpsError> {
        self.begin();
        if !fraction.is_finite() {
            return Err(OpsError::InvalidArgument(
                "progress must be a finite number".into(),
            ));
        }
        if !self.check_host_calc(id)? {
            return Ok(self.late(now, id, "progress"));
        }
        self.progress(now, id, fraction);
        self.settle(now);
        Ok(ReportStatus::Applied)
    }

    /// The host reports a partial value (a streaming calculation yielded).
    pub fn calc_partial(
        &mut self,
        now: Millis,
        id: CalcId,
        value: V,
    ) -> Result<ReportStatus, OpsError> {
        self.begin();
        if !self.check_host_calc(id)? {
            return Ok(self.late(now, id, "partial"));
        }
        self.commit(now, id, Some(value), true);
        self.settle(now);
        Ok(ReportStatus::Applied)
    }

    /// The host reports the calculation's result.
    pub fn calc_done(
        &mut self,
        now: Millis,
        id: CalcId,
        value: V,
    ) -> Result<ReportStatus, OpsError> {
        self.begin();
        if !self.check_host_calc(id)? {
            return Ok(self.late(now, id, "done"));
        }
        self.commit(now, id, Some(value), false);
        self.settle(now);
        Ok(ReportStatus::Applied)
    }

    /// The host reports that a streaming calculation finished: its last partial value is its
    /// result. The value is not committed again (the journal's `succeeded` says
    /// `lastPartial`); dependents computed from it become final without recomputing. A
    /// calculation that yielded nothing has no result: report it with [`App::calc_done`] or
    /// [`App::calc_failed`].
    pub fn calc_finish(&mut self, now: Millis, id: CalcId) -> Result<ReportStatus, OpsError> {
        self.begin();
        if !self.check_host_calc(id)? {
            return Ok(self.late(now, id, "done"));
        }
        if self.calcs[&id].partials == 0 {
            return Err(OpsError::InvalidArgument(format!(
                "calculation {id} yielded no partial value to finish with; report its result with calc_done"
            )));
        }
        self.commit(now, id, None, false);
        self.settle(now);
        Ok(ReportStatus::Applied)
    }

    /// The host reports that the calculation failed. The cell keeps its latest value.
    pub fn calc_failed(
        &mut self,
        now: Millis,
        id: CalcId,
        message: &str,
        code: Option<&str>,
    ) -> Result<ReportStatus, OpsError> {
        self.begin();
        if !self.check_host_calc(id)? {
            return Ok(self.late(now, id, "error"));
        }
        self.bump();
        self.fail_calc(now, id, message.into(), code.map(str::to_owned));
        self.pump(now);
        self.settle(now);
        Ok(ReportStatus::Applied)
    }

    fn progress(&mut self, now: Millis, id: CalcId, fraction: f64) {
        let revision = self.bump();
        let calc = self.calcs.get_mut(&id).expect("exists");
        push_calc_event(
            calc,
            now,
            revision,
            CalcEventKind::Progress { value: fraction },
        );
        let x = calc.cell;
        self.cells[x].progress = Some(fraction);
        self.op_progress(now, x, id, fraction);
    }

    /// Commits a value of a calculation: a partial, or its result. `None` commits the last
    /// partial as the result (a finished stream) without committing it again. A value equal
    /// to the cell's current one keeps its content: dependents are not triggered, and those
    /// computed from it take the new provenance and finality.
    fn commit(&mut self, now: Millis, id: CalcId, value: Option<V>, partial: bool) {
        let revision = self.bump();
        let calc = &self.calcs[&id];
        let x = calc.cell;
        let inputs_current = calc.reads.iter().copied().eq(self.reads_now(x));
        let is_final = !partial && inputs_current && self.upstream_final(x);
        let gate = self.cells[x].spec.equality == Equality::Value;
        let old = self.cells[x].value.as_ref();
        let last_partial = value.is_none();
        let kept = match (value, old) {
            (None, Some(o)) => Ok(o),
            (None, None) => unreachable!("a finished stream has a partial value"),
            (Some(v), Some(o)) if gate && o.value.equal_value(&v) => Ok(o),
            (Some(v), _) => Err(v),
        };
        let (value, content, value_revision, unchanged) = match kept {
            Ok(o) => (o.value.clone(), o.content, o.revision, true),
            Err(v) => {
                self.next_content += 1;
                (Arc::new(v), self.next_content, revision, false)
            }
        };
        // The value names its calculation (which is then never unreferenced, so never queued
        // for pruning while it is the value).
        let first = self.cells[x].value.as_ref().is_none_or(|v| v.calc != id);
        let calc = self.calcs.get_mut(&id).expect("exists");
        if first {
            calc.refs += 1;
        }
        let provenance = calc.provenance.clone();
        // The result keeps the reads (the calculation ends); a partial copies them.
        let reads = if partial {
            calc.reads.clone()
        } else {
            std::mem::take(&mut calc.reads)
        };
        if partial {
            let index = calc.partials;
            calc.partials += 1;
            push_calc_event(
                calc,
                now,
                revision,
                CalcEventKind::Partial { index, unchanged },
            );
        } else {
            calc.state = CalcState::Ended(CalcEnd::Succeeded);
            push_calc_event(
                calc,
                now,
                revision,
                CalcEventKind::Succeeded {
                    unchanged,
                    last_partial,
                },
            );
            calc.journal.shrink_to_fit();
        }
        let cell = &mut self.cells[x];
        let replaced = cell.value.as_ref().map(|v| v.calc).filter(|c| *c != id);
        cell.value = Some(CellValue {
            value,
            calc: id,
            provenance,
            is_final,
            revision: value_revision,
            content,
            reads,
            partial,
        });
        if partial {
            cell.partial_this_run = true;
        } else {
            cell.current = None;
            cell.partial_this_run = false;
        }
        if let Some(old) = replaced {
            self.calc_unref(old);
        }
        let mut dirty: Vec<Option<Trigger>> = vec![None; self.cells.len()];
        if unchanged {
            self.revalidate(x);
        } else {
            let name = self.cells[x].name.clone();
            for &d in &self.cells[x].downstream {
                dirty[d] = Some(Trigger::Upstream {
                    cell: name.clone(),
                    calc: id,
                });
            }
        }
        self.propagate(now, dirty);
    }

    fn fail_calc(&mut self, now: Millis, id: CalcId, message: String, code: Option<String>) {
        let revision = self.revision;
        let calc = self.calcs.get_mut(&id).expect("exists");
        calc.state = CalcState::Ended(CalcEnd::Errored);
        push_calc_event(
            calc,
            now,
            revision,
            CalcEventKind::Errored {
                message: message.clone(),
                code: code.clone(),
            },
        );
        let x = calc.cell;
        let cell = &mut self.cells[x];
        cell.current = None;
        cell.partial_this_run = false;
        let old = cell.error.replace(CellError {
            calc: id,
            message,
            code,
        });
        self.calc_ref(id);
        if let Some(e) = old {
            self.calc_unref(e.calc);
        }
        self.calc_released(id);
        // Dependents keep their scheduled calculations; they start once this cell recovers.
    }

    // ----- the job registry bridge --------------------------------------------------------------

    /// Runs `f` on the embedded registry (cancel a job, wait for one, close an owner, ...) and
    /// then lets the graph and the operations see what changed.
    pub fn jobs_call<T>(&mut self, now: Millis, f: impl FnOnce(&mut Registry<V>) -> T) -> T {
        self.begin();
        let r = f(reg_mut(&mut self.registry));
        self.pump_registry(now);
        self.settle(now);
        r
    }

    /// A message from a Worker endpoint (forwarded to the registry; Worker cells see it).
    pub fn on_worker_message(
        &mut self,
        now: Millis,
        endpoint: EndpointId,
        msg: &V,
    ) -> Result<(), OpsError> {
        self.begin();
        reg_mut(&mut self.registry).on_message(now, endpoint, msg)?;
        self.pump_registry(now);
        self.settle(now);
        Ok(())
    }

    /// A Worker endpoint's execution host went away on its own.
    pub fn on_endpoint_closed(
        &mut self,
        now: Millis,
        endpoint: EndpointId,
        reason: &str,
    ) -> Result<(), OpsError> {
        self.begin();
        reg_mut(&mut self.registry).on_endpoint_closed(now, endpoint, reason)?;
        self.pump_registry(now);
        self.settle(now);
        Ok(())
    }

    /// Drains the registry: messages for the operations endpoint are handled here, everything
    /// else goes to the host; then Worker-cell journals are read for new events.
    pub(crate) fn pump_registry(&mut self, now: Millis) {
        loop {
            let outs: Vec<jobs::Output<V>> = reg_mut(&mut self.registry).drain_outputs().collect();
            if outs.is_empty() {
                break;
            }
            for o in outs {
                match o {
                    jobs::Output::Send { endpoint, request }
                        if Some(endpoint) == self.ops_endpoint =>
                    {
                        self.on_ops_request(now, request);
                    }
                    other => self.outputs.push_back(AppOutput::Jobs(other)),
                }
            }
            self.sync_jobs(now);
        }
        self.sync_jobs(now);
    }

    /// Reads new journal events of Worker-cell jobs and applies them to their calculations.
    fn sync_jobs(&mut self, now: Millis) {
        let jobs: Vec<JobId> = self.job_calcs.keys().copied().collect();
        for job in jobs {
            while let Some(&(calc, seen)) = self.job_calcs.get(&job) {
                let Some(j) = reg_mut(&mut self.registry).job(job) else {
                    self.job_calcs.remove(&job);
                    self.calc_unref(calc);
                    break;
                };
                let Some(ev) = j.journal().get(seen) else {
                    if j.is_finished() {
                        self.job_calcs.remove(&job);
                        self.calc_unref(calc);
                    }
                    break;
                };
                let kind = ev.kind.clone();
                self.job_calcs.insert(job, (calc, seen + 1));
                self.apply_job_event(now, calc, kind);
            }
        }
    }

    fn apply_job_event(&mut self, now: Millis, id: CalcId, kind: EventKind<V>) {
        let state = self.calcs[&id].state;
        let current = !state.is_ended();
        let revision = self.revision;
        match kind {
            EventKind::Started { .. } if state == CalcState::Queued => {
                let revision = self.bump();
                let calc = self.calcs.get_mut(&id).expect("exists");
                calc.state = CalcState::Running;
                calc.started = true;
                push_calc_event(calc, now, revision, CalcEventKind::Started);
            }
            EventKind::Progress { value } => {
                if current && let Some(f) = value.as_f64().filter(|f| f.is_finite()) {
                    self.progress(now, id, f);
                } else if !current {
                    self.late(now, id, "progress");
                }
            }
            EventKind::Partial { value } => {
                if current {
                    self.commit(now, id, Some(value), true);
                } else {
                    self.late(now, id, "partial");
                }
            }
            EventKind::Finished { outcome } => {
                if current {
                    match outcome {
                        jobs::Outcome::Succeeded { value } => {
                            self.commit(now, id, Some(value), false)
                        }
                        jobs::Outcome::Failed { message, code, .. } => {
                            self.bump();
                            self.fail_calc(now, id, message, code);
                            self.pump(now);
                        }
                        other => {
                            self.bump();
                            let summary = other.summary();
                            let code = other.kind().as_str().to_ascii_uppercase();
                            self.fail_calc(
                                now,
                                id,
                                format!("the Worker job ended: {summary}"),
                                Some(code),
                            );
                            self.pump(now);
                        }
                    }
                } else {
                    if matches!(outcome, jobs::Outcome::Succeeded { .. }) {
                        self.late(now, id, "done");
                    }
                    let calc = self.calcs.get_mut(&id).expect("exists");
                    push_calc_event(
                        calc,
                        now,
                        revision,
                        CalcEventKind::JobEnded {
                            outcome: outcome.kind().as_str().into(),
                            summary: outcome.summary(),
                        },
                    );
                }
            }
            EventKind::LateEvidence { reply } => {
                let what = match reply.kind() {
                    "done" => "done",
                    "partial" => "partial",
                    "progress" => "progress",
                    "error" => "error",
                    _ => "message",
                };
                self.late(now, id, what);
            }
            _ => {}
        }
    }

    // ----- time ---------------------------------------------------------------------------------

    /// The earliest time at which [`App::handle_timeout`] has something to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        let own = self.op_timers.first_key().map(|(t, _)| *t);
        match (own, reg_ref(&self.registry).poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires every timer due at `now`: operation timeouts and the registry's timers.
    pub fn handle_timeout(&mut self, now: Millis) {
        self.begin();
        reg_mut(&mut self.registry).handle_timeout(now);
        self.pump_registry(now);
        while let Some(&(at, op)) = self.op_timers.first_key() {
            if at > now {
                break;
            }
            self.op_timers.pop_first();
            self.time_out(now, op);
        }
        self.settle(now);
    }

    /// The next output for the host.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<AppOutput<V>> {
        self.outputs.pop_front()
    }

    /// All pending outputs, in order.
    #[must_use]
    pub fn drain_outputs(&mut self) -> std::collections::vec_deque::Drain<'_, AppOutput<V>> {
        self.outputs.drain(..)
    }

    // ----- graph instances ----------------------------------------------------------------------

    /// Hot replacement: a new graph instance with new cell definitions. Calculations of the old
    /// instance end as `owner_disposed` (Worker jobs are cancelled); controls keep their values;
    /// waiting operations continue on the new instance when their cells still exist. Reruns
    /// staged by actions and not yet flushed are dropped: the new instance computes every cell.
    pub fn replace_graph(
        &mut self,
        now: Millis,
        instance: u64,
        cells: Vec<CellSpec>,
    ) -> Result<(), OpsError> {
        if self.used_instances.contains(&instance) {
            return Err(OpsError::InvalidArgument(format!(
                "graph instance id {instance} was already used; calculation ids must stay unique"
            )));
        }
        let mut names: HashMap<String, Node> = self
            .names
            .iter()
            .filter(|(_, n)| matches!(n, Node::Control(_)))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let (new_cells, order) = self.build_cells(&self.controls, &mut names, &cells)?;
        for a in &self.actions {
            validate_action(a, &self.controls, &names)?;
        }
        self.begin();
        self.bump();
        let old = self.instance;
        self.dispose_calcs(now, &format!("graph instance {old} replaced by {instance}"));
        // Staged reruns name cells of the old instance; the new one computes every cell anyway.
        self.staged_reruns.clear();
        self.used_instances.push(instance);
        self.instance = instance;
        self.next_generation = 1;
        self.names = names;
        self.install_cells(new_cells, order);
        self.ops_on_replace(now, old, instance);
        self.schedule_all(now, Trigger::Initial);
        self.settle(now);
        Ok(())
    }

    /// Disposes the graph: every calculation ends as `owner_disposed`, the cells go away (the
    /// controls stay), operations waiting for cells fail.
    pub fn dispose_graph(&mut self, now: Millis) {
        self.begin();
        self.bump();
        let inst = self.instance;
        self.dispose_calcs(now, &format!("graph instance {inst} disposed"));
        self.staged_reruns.clear();
        self.names.retain(|_, n| matches!(n, Node::Control(_)));
        self.install_cells(vec![], vec![]);
        self.ops_on_replace(now, inst, inst);
        self.settle(now);
    }

    fn dispose_calcs(&mut self, now: Millis, reason: &str) {
        for x in 0..self.cells.len() {
            if let Some(c) = self.cells[x].current.take() {
                self.end_calc(
                    now,
                    c,
                    CalcEnd::Disposed,
                    CalcEventKind::OwnerDisposed {
                        reason: reason.into(),
                    },
                );
            }
        }
        self.pump_registry(now);
    }

    /// Runs after every input: ops are evaluated against the new state.
    pub(crate) fn settle(&mut self, now: Millis) {
        self.pump_registry(now);
        self.evaluate_ops(now);
        self.pump_registry(now);
    }

    // ----- reads --------------------------------------------------------------------------------

    /// The current application revision.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The current graph instance id.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// A control's current value.
    pub fn control_value(&self, name: &str) -> Result<&ControlValue, OpsError> {
        Ok(&self.controls[self.control_index(name)?].value)
    }

    /// The receipt of a write.
    pub fn write_record(&self, id: WriteId) -> Option<&WriteRecord> {
        let i = id.0.checked_sub(self.write_base)?;
        self.writes.get(usize::try_from(i).ok()?)?.as_ref()
    }

    /// Every retained write receipt, in id order.
    pub fn write_records(&self) -> impl Iterator<Item = &WriteRecord> {
        self.writes.iter().flatten()
    }

    /// The receipt of a write as JSON (`null` for an unknown or pruned write).
    pub fn receipt_json(&self, id: WriteId) -> Value {
        let Some(w) = self.write_record(id) else {
            return Value::Null;
        };
        let mut o = json!({
            "write": w.id.0, "control": self.controls[w.control].name, "requested": w.requested.to_json(),
            "accepted": w.accepted.to_json(), "adjusted": w.adjusted, "by": w.actor.by, "acceptedAt": w.accepted_at,
        });
        match w.status {
            WriteStatus::Staged => o["status"] = json!("staged"),
            WriteStatus::Effective { revision, changed } => {
                o["status"] = json!("effective");
                o["revision"] = json!(revision);
                o["changed"] = json!(changed);
            }
            WriteStatus::Overwritten { by } => {
                o["status"] = json!("overwritten");
                o["overwrittenBy"] = json!(by.0);
            }
            WriteStatus::Discarded => o["status"] = json!("discarded"),
        }
        if let Some(op) = w.op {
            o["operation"] = json!(op.0);
        }
        if let Some(inv) = w.invocation {
            o["invocation"] = json!(inv.0);
        }
        if let Some(tc) = &w.actor.tool_call {
            o["toolCall"] = json!(tc);
        }
        o
    }

    /// A cell's derived state.
    pub(crate) fn cell_state(&self, x: usize) -> CellState {
        let cell = &self.cells[x];
        let has = cell.value.is_some();
        if !cell.gate_open {
            return if has {
                CellState::Held
            } else {
                CellState::Unresolved
            };
        }
        if cell.error.is_some() {
            return CellState::Errored;
        }
        match cell.current.map(|c| self.calcs[&c].state) {
            Some(CalcState::Scheduled) => {
                if cell
                    .upstream
                    .iter()
                    .any(|&u| !self.readable(u) && self.cell_state(u) == CellState::Errored)
                {
                    CellState::Errored
                } else if has {
                    CellState::Refreshing
                } else {
                    CellState::Unresolved
                }
            }
            Some(CalcState::Queued) => {
                if has {
                    CellState::Refreshing
                } else {
                    CellState::Pending
                }
            }
            Some(CalcState::Running) => {
                if cell.partial_this_run {
                    CellState::Streaming
                } else if has {
                    CellState::Refreshing
                } else {
                    CellState::Pending
                }
            }
            Some(CalcState::Ended(_)) | None => {
                if has {
                    CellState::Ready
                } else {
                    CellState::Unresolved
                }
            }
        }
    }

    /// The upstream error a blocked cell is showing, when it is errored through an upstream.
    fn upstream_error(&self, x: usize) -> Option<(String, CellError)> {
        let cell = &self.cells[x];
        if let Some(e) = &cell.error {
            return Some((cell.name.clone(), e.clone()));
        }
        if cell.current.map(|c| self.calcs[&c].state) != Some(CalcState::Scheduled) {
            return None;
        }
        cell.upstream
            .iter()
            .filter(|&&u| !self.readable(u))
            .find_map(|&u| self.upstream_error(u))
    }

    /// What a UI or an agent sees of one cell.
    pub fn cell_view(&self, name: &str) -> Result<CellView<V>, OpsError> {
        let x = self.cell_index(name)?;
        Ok(self.view(x))
    }

    pub(crate) fn view(&self, x: usize) -> CellView<V> {
        let cell = &self.cells[x];
        let value = cell.value.as_ref();
        CellView {
            name: cell.name.clone(),
            state: self.cell_state(x),
            value: value.map(|v| v.value.clone()),
            value_calc: value.map(|v| v.calc),
            value_revision: value.map(|v| v.revision),
            is_final: value.is_some_and(|v| v.is_final),
            up_to_date: self.up_to_date(x),
            current: cell.current,
            progress: cell.progress,
            error: self
                .upstream_error(x)
                .map(|(c, e)| (c, e.calc, e.message, e.code)),
            provenance: value
                .map(|v| {
                    cell.rel
                        .iter()
                        .zip(&v.provenance)
                        .map(|(k, r)| (self.controls[*k].name.clone(), *r))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Whether the cell's value was computed from the current version of every control it
    /// depends on.
    pub(crate) fn up_to_date(&self, x: usize) -> bool {
        let cell = &self.cells[x];
        cell.value.as_ref().is_some_and(|v| {
            cell.rel
                .iter()
                .zip(&v.provenance)
                .all(|(k, r)| self.controls[*k].version == *r)
        })
    }

    /// A consistent snapshot of the whole application at the current revision.
    pub fn snapshot(&self) -> Snapshot<V> {
        Snapshot {
            revision: self.revision,
            instance: self.instance,
            controls: self
                .controls
                .iter()
                .map(|c| (c.name.clone(), c.value.clone(), c.version))
                .collect(),
            cells: (0..self.cells.len()).map(|x| self.view(x)).collect(),
        }
    }

    /// A calculation's record as JSON (state, trigger, journal).
    pub fn calc_json(&self, id: CalcId) -> Result<Value, OpsError> {
        let c = self.calcs.get(&id).ok_or_else(|| self.calc_missing(id))?;
        Ok(json!({
            "calc": id.to_json(), "cell": c.cell_name, "state": c.state.as_str(),
            "compute": if c.host { "host" } else { "worker" },
            "job": c.job.map(|j| j.0),
            "journal": c.journal.iter().map(CalcEvent::to_json).collect::<Vec<_>>(),
        }))
    }

    /// Every retained calculation of a cell (by name, across graph instances), oldest first.
    pub fn calcs_of(&self, cell: &str) -> Vec<CalcId> {
        self.calcs
            .values()
            .filter(|c| c.cell_name == cell)
            .map(|c| c.id)
            .collect()
    }

    /// Number of retained calculations, writes and operations (for inspection and benchmarks).
    pub fn retained(&self) -> (usize, usize, usize) {
        (self.calcs.len(), self.retention.live_writes, self.ops.len())
    }

    /// The published surface as JSON: `brief` (maps of values and states) or full (metadata,
    /// provenance, current calculations).
    pub fn report(&self, full: bool) -> Value {
        let edges = crate::value::map_of(self.cells.iter().map(|c| {
            let mut reads: Vec<String> = c
                .deps
                .iter()
                .map(|d| match d.node {
                    Node::Control(k) => format!("control:{}", self.controls[k].name),
                    Node::Cell(u) => format!("cell:{}", self.cells[u].name),
                })
                .collect();
            if let Some((g, _)) = &c.gate {
                let gate = format!("control:{}", self.controls[*g].name);
                if !reads.contains(&gate) {
                    reads.push(gate);
                }
            }
            (c.name.clone(), json!(reads))
        }));
        if !full {
            return json!({
                "revision": self.revision,
                "instance": self.instance,
                "controls": crate::value::map_of(self.controls.iter().map(|c| (c.name.clone(), c.value.to_json()))),
                "actions": self.actions.iter().map(|a| a.qualified()).collect::<Vec<_>>(),
                "cells": crate::value::map_of((0..self.cells.len()).map(|x| (self.cells[x].name.clone(), json!(self.cell_state(x).as_str())))),
                "edges": edges,
                "selectors": self.selectors.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
            });
        }
        let controls: Vec<Value> = self
            .controls
            .iter()
            .map(|c| {
                let mut o = json!({"name": c.name, "value": c.value.to_json(), "version": c.version,
                    "description": c.spec.description});
                if let Value::Object(k) = serde_json::to_value(&c.spec.kind).unwrap_or(Value::Null)
                {
                    o.as_object_mut().expect("object").extend(k);
                }
                o
            })
            .collect();
        let actions: Vec<Value> = self
            .actions
            .iter()
            .map(|a| {
                json!({"name": a.qualified(), "description": a.description, "params": a.args_schema(),
                       "effects": a.effects})
            })
            .collect();
        let cells: Vec<Value> = (0..self.cells.len())
            .map(|x| {
                let v = self.view(x);
                let c = &self.cells[x];
                json!({
                    "name": v.name, "state": v.state.as_str(), "description": c.spec.description,
                    "compute": match c.spec.compute { ComputeSpec::Host => "host", ComputeSpec::Worker { .. } => "worker" },
                    "calc": v.current.map(|c| c.to_json()),
                    "valueCalc": v.value_calc.map(|c| c.to_json()),
                    "valueRevision": v.value_revision,
                    "final": v.is_final, "upToDate": v.up_to_date,
                    "progress": v.progress,
                    "error": v.error.as_ref().map(|(cell, calc, m, code)| json!({"cell": cell, "calc": calc.to_json(), "message": m, "code": code})),
                    "provenance": crate::value::map_of(v.provenance.iter().map(|(k, r)| (k.clone(), json!(r)))),
                    "gate": c.spec.gate,
                })
            })
            .collect();
        json!({
            "revision": self.revision,
            "instance": self.instance,
            "controls": controls,
            "actions": actions,
            "cells": cells,
            "edges": edges,
            "selectors": self.selectors,
            "pendingOperations": self.pending_ops.iter().map(|o| o.0).collect::<Vec<_>>(),
        })
    }

    /// Submits an independent application task: a Worker job with an explicit snapshot of a
    /// Worker cell's inputs (current values with `overrides`, validated like writes), under its
    /// own owner. Submitting A then B runs both (FIFO on the endpoint); the shared cell is not
    /// touched. Contrast with writes, where B supersedes A.
    pub fn submit_task<P: Payload>(
        &mut self,
        now: Millis,
        cell: &str,
        overrides: &[(String, P)],
        owner: &str,
        origin: Origin,
    ) -> Result<JobId, OpsError> {
        let x = self.cell_index(cell)?;
        let ComputeSpec::Worker { endpoint } = self.cells[x].spec.compute else {
            return Err(OpsError::InvalidArgument(format!(
                "cell `{cell}` is host-computed; tasks run Worker cells"
            )));
        };
        let mut values: Vec<(usize, ControlValue)> = Vec::new();
        for (name, v) in overrides {
            let (c, _, accepted) = self.validate_write(name, v)?;
            if !self.cells[x]
                .deps
                .iter()
                .any(|d| d.node == Node::Control(c))
            {
                return Err(OpsError::InvalidArgument(format!(
                    "control `{name}` is not an input of `{cell}`"
                )));
            }
            values.retain(|(x, _)| *x != c);
            values.push((c, accepted.value));
        }
        let mut fields = Vec::new();
        for d in &self.cells[x].deps {
            let v = match d.node {
                Node::Control(c) => {
                    let v = values.iter().find(|(x, _)| *x == c).map(|(_, v)| v);
                    V::from_json(&v.unwrap_or(&self.controls[c].value).to_json())
                }
                Node::Cell(u) => match &self.cells[u].value {
                    Some(v) if self.readable(u) => (*v.value).clone(),
                    _ => {
                        return Err(OpsError::InvalidArgument(format!(
                            "input `{}` of `{cell}` has no current value",
                            self.cells[u].name
                        )));
                    }
                },
            };
            fields.push((d.key.clone(), v));
        }
        for (k, v) in &self.cells[x].spec.constants {
            fields.push((k.clone(), V::from_json(v)));
        }
        let mut req = Submit::new(owner, endpoint, V::object(fields));
        req.origin = origin;
        self.begin();
        let job = reg_mut(&mut self.registry).submit(now, req)?.job;
        self.pump_registry(now);
        Ok(job)
    }

    pub(crate) fn ensure_ops_endpoint(&mut self, now: Millis) -> EndpointId {
        if let Some(e) = self.ops_endpoint {
            return e;
        }
        let mut spec = EndpointSpec::new("weft/ops", "operations");
        spec.hello = Hello::Declared(jobs::Capabilities {
            input: false,
            cancel_ack: true,
            error_code: true,
        });
        let e = reg_mut(&mut self.registry).open_endpoint(now, spec);
        self.ops_endpoint = Some(e);
        e
    }
}

/// A cell as a UI or an agent sees it.
#[derive(Clone, Debug)]
pub struct CellView<V> {
    pub name: String,
    pub state: CellState,
    /// The latest value (survives errors and holds).
    pub value: Option<Arc<V>>,
    /// The calculation that produced the latest value.
    pub value_calc: Option<CalcId>,
    pub value_revision: Option<Revision>,
    /// The latest value is final (not a partial, nor derived from one).
    pub is_final: bool,
    /// The latest value reflects the current version of every control it depends on.
    pub up_to_date: bool,
    /// The calculation in flight (scheduled, queued or running).
    pub current: Option<CalcId>,
    pub progress: Option<f64>,
    /// `(cell, calc, message, code)` of the error this cell shows (its own or an upstream's).
    pub error: Option<(String, CalcId, String, Option<String>)>,
    /// `(control, version)` the latest value was computed from.
    pub provenance: Vec<(String, Revision)>,
}

/// One cell in a snapshot.
pub type CellSnapshot<V> = CellView<V>;

/// The whole application at one revision: never a mix of values from before and after a write.
#[derive(Clone, Debug)]
pub struct Snapshot<V> {
    pub revision: Revision,
    pub instance: u64,
    /// `(name, value, version)`.
    pub controls: Vec<(String, ControlValue, Revision)>,
    pub cells: Vec<CellSnapshot<V>>,
}

impl<V: Payload> Snapshot<V> {
    /// A control's value in this snapshot.
    pub fn control(&self, name: &str) -> Option<&ControlValue> {
        self.controls.iter().find(|c| c.0 == name).map(|c| &c.1)
    }

    /// A cell in this snapshot.
    pub fn cell(&self, name: &str) -> Option<&CellSnapshot<V>> {
        self.cells.iter().find(|c| c.name == name)
    }

    /// The JSON form (cell values via the payload's JSON).
    pub fn to_json(&self) -> Value {
        json!({
            "revision": self.revision,
            "instance": self.instance,
            "controls": crate::value::map_of(self.controls.iter().map(|(n, v, _)| (n.clone(), v.to_json()))),
            "versions": crate::value::map_of(self.controls.iter().map(|(n, _, r)| (n.clone(), json!(r)))),
            "cells": crate::value::map_of(self.cells.iter().map(|c| (c.name.clone(), cell_view_json(c)))),
        })
    }
}

/// The JSON form of a cell view.
pub(crate) fn cell_view_json<V: Payload>(c: &CellView<V>) -> Value {
    json!({
        "state": c.state.as_str(),
        "value": c.value.as_ref().map(|v| v.to_json()),
        "valueCalc": c.value_calc.map(|x| x.to_json()),
        "final": c.is_final,
        "upToDate": c.up_to_date,
        "calc": c.current.map(|x| x.to_json()),
        "progress": c.progress,
        "error": c.error.as_ref().map(|(cell, calc, m, code)| json!({"cell": cell, "calc": calc.to_json(), "message": m, "code": code})),
        "provenance": crate::value::map_of(c.provenance.iter().map(|(k, r)| (k.clone(), json!(r)))),
    })
}

fn push_calc_event(calc: &mut Calc, at: Millis, revision: Revision, kind: CalcEventKind) {
    let seq = calc.journal.len() as u32 + 1;
    calc.journal.push(CalcEvent {
        seq,
        at,
        revision,
        kind,
    });
}

fn check_name(name: &str) -> Result<(), OpsError> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/' | '.'));
    if ok {
        Ok(())
    } else {
        Err(OpsError::InvalidGraph(format!(
            "name `{name}`: use letters, digits, `_`, `-`, `.` and `/` (scope separator)"
        )))
    }
}

fn kind_name(k: &ControlKind) -> &'static str {
    match k {
        ControlKind::Number { .. } => "number",
        ControlKind::Enum { .. } => "enum",
        ControlKind::Boolean => "boolean",
        ControlKind::String => "string",
    }
}

fn validate_action(
    a: &ActionSpec,
    controls: &[Control],
    names: &HashMap<String, Node>,
) -> Result<(), OpsError> {
    let name = a.qualified();
    let mut written: Vec<&str> = Vec::new();
    for e in &a.effects {
        match e {
            Effect::Set { set, to } => {
                if written.contains(&set.as_str()) {
                    return Err(OpsError::InvalidGraph(format!(
                        "action `{name}` sets `{set}` twice"
                    )));
                }
                written.push(set);
                let Some(Node::Control(c)) = names.get(set) else {
                    return Err(OpsError::InvalidGraph(format!(
                        "action `{name}` sets `{set}`, which is not a control"
                    )));
                };
                match to {
                    EffectValue::Increment(_)
                        if !matches!(controls[*c].spec.kind, ControlKind::Number { .. }) =>
                    {
                        return Err(OpsError::InvalidGraph(format!(
                            "action `{name}` increments `{set}`, which is not a number"
                        )));
                    }
                    EffectValue::Arg(arg) if !a.params.iter().any(|p| &p.name == arg) => {
                        return Err(OpsError::InvalidGraph(format!(
                            "action `{name}` uses undeclared parameter `{arg}`"
                        )));
                    }
                    _ => {}
                }
            }
            Effect::Rerun { rerun } => {
                if !matches!(names.get(rerun), Some(Node::Cell(_))) {
                    return Err(OpsError::InvalidGraph(format!(
                        "action `{name}` reruns `{rerun}`, which is not a cell"
                    )));
                }
            }
        }
    }
    Ok(())
}
