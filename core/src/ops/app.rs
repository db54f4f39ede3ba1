//! The application: its outputs, its state and the `App` struct (with its call order), the
//! surface `load` and graph build. The same struct's other methods live beside it: writes in
//! `writes.rs`, the scheduler in `schedule.rs`, the calculation lifecycle in `calc.rs`, the
//! registry bridge and timers in `bridge.rs`, graph instances in `graph.rs`, reads and reports
//! in `reports.rs`, operations in `operation.rs`; specs are in `spec.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use super::control::{
    ActionSpec, ControlKind, ControlSpec, ControlValue, Effect, EffectValue, qualify,
};
use super::operation::Operation;
use super::retention::RetentionState;
#[cfg(doc)]
use super::tools::ToolReply;
use super::tools::{ToolCallId, ToolWaits};
use super::types::*;
use super::{OpsError, OpsValue};
use crate::Mono;
use crate::jobs::{self, EndpointId, JobId, Registry};
use crate::vecmap::VecMap;

pub use super::reports::{CellSnapshot, CellView, Snapshot};
pub use super::spec::*;

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
    /// An output of the job registry the app was lent (messages for Worker endpoints, waits,
    /// notes), passed on after the app reacted to it.
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
    /// The reply to a published tool call that waited ([`ToolReply::Wait`]), emitted once per
    /// call: the operation's outcome once it finished (after the host recorded a selector's
    /// result: [`App::record_result`]), or — its wait elapsed first — a handle on the
    /// still-waiting operation, hosted as a job of the call's owner; an error if hosting it
    /// failed. The host forwards it to the caller.
    ToolReplied {
        call: ToolCallId,
        op: OpId,
        reply: Result<serde_json::Value, OpsError>,
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
    pub(crate) key: String,
    pub(crate) node: Node,
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
    pub(crate) deps: Vec<Dep>,
    pub(crate) gate: Option<(usize, Vec<ControlValue>)>,
    pub(crate) upstream: Vec<usize>,
    pub(crate) downstream: Vec<usize>,
    /// Controls this cell depends on, directly or through upstream cells (sorted).
    pub(crate) rel: Vec<usize>,
    /// Controls read directly (deps and gate).
    pub(crate) direct: Vec<usize>,
    /// Every upstream cell, transitively.
    pub(crate) ancestors: Vec<usize>,
    pub(crate) value: Option<CellValue<V>>,
    pub(crate) current: Option<CalcId>,
    pub(crate) error: Option<CellError>,
    pub(crate) progress: Option<f64>,
    pub(crate) gate_open: bool,
    pub(crate) partial_this_run: bool,
}

#[derive(Debug)]
pub(crate) struct Calc {
    pub(crate) id: CalcId,
    pub(crate) cell: usize,
    pub(crate) cell_name: String,
    pub(crate) state: CalcState,
    pub(crate) started: bool,
    pub(crate) host: bool,
    pub(crate) job: Option<JobId>,
    pub(crate) provenance: Vec<Revision>,
    /// The input identities it read when it started (see [`CellValue::reads`]).
    pub(crate) reads: Vec<u64>,
    /// Asked for explicitly (initial, rerun, reopened gate): never skipped.
    pub(crate) forced: bool,
    pub(crate) partials: u32,
    /// What still names it: its cell's value or error, retained operations, its unsynced
    /// Worker job. Ended and unreferenced, it becomes prunable (see [`Retention`]).
    pub(crate) refs: u32,
    pub(crate) journal: Vec<CalcEvent>,
}

/// The application: controls, actions, the cell graph, writes, calculations and operations.
/// Sans-IO: every input carries `now`; the host drains outputs.
///
/// The app does not own the job registry its Worker cells and hosted operations use: like
/// [`crate::tools::Session`], it borrows it per call (`reg: &mut Registry<V>`), and the host
/// keeps it beside the app. See the call order below.
///
/// # Call order
///
/// 1. Construct with [`App::new`] beside a [`Registry`] of its own (one app per registry:
///    [`App::load`] fails with `REGISTRY_IN_USE` on a registry another app loaded on — the
///    registry's outputs and changed journals are each one stream, read by one app); open the
///    Worker endpoints the cells use on the registry directly (`Registry::open_endpoint`),
///    then [`App::load`].
/// 2. Inputs: writes ([`App::set`], [`App::act`], [`App::observe`], ... then [`App::flush`]),
///    host-cell reports (`calc_*`), Worker traffic ([`App::on_worker_message`],
///    [`App::on_endpoint_closed`]), tool calls. Each takes the registry for the call, submits
///    or cancels Worker jobs on it, then drains the registry's outputs and reacts to them:
///    requests for the app's operations endpoint are answered here, new journal events of
///    Worker-cell jobs move their calculations, everything else is passed on as
///    [`AppOutput::Jobs`]. The app watches the journal of every Worker-cell job it submits
///    ([`Registry::watch_journal`]) and reads only those the registry reports changed
///    ([`Registry::take_changed_jobs`]): a pump costs O(changed jobs), not O(Worker cells).
/// 3. After calling the registry directly (cancel a job, wait, close an owner, ...), hand its
///    outputs to the app with [`App::on_registry_outputs`] — the app reacts to them exactly as
///    in 2 (there is no other "sync" step).
/// 4. Timers: [`App::poll_timeout`] (the app's deadlines — operation timeouts and the waits
///    granted to published tool calls — and the registry's), [`App::handle_timeout`] (fires
///    them: the registry's, operation timeouts, then tool-call waits; then reacts as in 2). A
///    host arms one timer for `poll_timeout`, and no other.
/// 5. Outputs: [`App::poll_output`] / [`App::drain_outputs`] until empty (answering one can
///    queue more). An [`AppOutput::OpFinished`] naming a selector is answered with
///    [`App::record_result`] (the selector's value) or [`App::record_no_result`] (it threw,
///    or the host has none): tool calls waiting on the operation reply at that answer — not
///    earlier, whatever else the host calls first. Without an answer they reply without a
///    result at their deadline when the operation settled before it, and not at all when it
///    settled at or after it (the end wins).
///
/// A tool call ([`App::call_tool`]) that waits returns [`ToolReply::Wait`]: the app owns its
/// deadline (`now + waitMs`) and replies once, as [`AppOutput::ToolReplied`], when the
/// operation ends or the deadline passes (then with a handle: the operation hosted as a job of
/// the caller's owner; the operation ending at that instant wins, with its outcome); the host
/// forwards the reply, or ends the wait with [`App::cancel_tool_wait`] when its caller gives
/// up.
#[derive(Debug)]
pub struct App<V> {
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
    pub(crate) staged: Vec<WriteId>,
    /// The last content identity handed out (see [`CellValue::content`]).
    pub(crate) next_content: u64,
    /// `(cell index, action)` of the current graph instance; cleared when the graph is replaced
    /// or disposed.
    pub(crate) staged_reruns: Vec<(usize, String)>,
    pub(crate) revision: Revision,
    pub(crate) bumped: bool,
    pub(crate) next_invocation: u64,
    /// Boxed: retained records stay exactly their size (no B-tree node slack).
    pub(crate) ops: BTreeMap<OpId, Box<Operation<V>>>,
    pub(crate) pending_ops: Vec<OpId>,
    pub(crate) next_op: u64,
    /// Operation deadlines (operations with a timeout: few at a time).
    pub(crate) op_timers: VecMap<(Mono, OpId), ()>,
    pub(crate) ops_endpoint: Option<EndpointId>,
    pub(crate) op_wires: HashMap<u64, OpId>,
    /// Worker-cell jobs the app follows: their calculation and the last journal sequence number
    /// read. Each is watched on the registry (`Registry::watch_journal`).
    pub(crate) job_calcs: VecMap<JobId, (CalcId, u64)>,
    /// Followed jobs that changed but were left for the next pass of `sync_jobs`.
    pub(crate) changed_jobs: BTreeSet<JobId>,
    /// The last Worker-cell job the app submitted (jobs after it are new to a pass).
    pub(crate) last_job: Option<JobId>,
    /// Journals `sync_jobs` inspected (tests count the work of a pump).
    #[cfg(test)]
    pub(crate) journals_read: u64,
    /// Published tool calls that wait for an operation, with their deadlines.
    pub(crate) tool_waits: ToolWaits,
    pub(crate) outputs: VecDeque<AppOutput<V>>,
    pub(crate) loaded: bool,
}

impl<V: OpsValue> App<V> {
    /// An empty app; the host keeps the job registry beside it and lends it per call.
    pub fn new(config: AppConfig) -> Self {
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
            ops_endpoint: None,
            op_wires: HashMap::new(),
            job_calcs: VecMap::new(),
            changed_jobs: BTreeSet::new(),
            last_job: None,
            #[cfg(test)]
            journals_read: 0,
            tool_waits: ToolWaits::default(),
            outputs: VecDeque::new(),
            loaded: false,
        }
    }

    /// Reacts to what the registry did since the app last saw it (after the host called it
    /// directly): drains its outputs — operations-endpoint requests are answered here, the
    /// rest are passed on as [`AppOutput::Jobs`] — and applies new journal events of Worker-cell
    /// jobs to their calculations, then settles operations.
    pub fn on_registry_outputs(&mut self, now: Mono, reg: &mut Registry<V>) {
        self.begin(reg);
        self.pump_registry(now, reg);
        self.settle(now, reg);
    }

    /// Publishes the surface and starts the first graph instance: every cell whose gate is open
    /// gets its initial calculation. Nothing changes if the spec is invalid.
    pub fn load(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        spec: GraphSpec,
    ) -> Result<(), OpsError> {
        if self.loaded {
            return Err(OpsError::InvalidArgument(
                "the surface is already loaded; replace cells with replace_graph".into(),
            ));
        }
        // One app per registry: another app's pumps would take this one's registry outputs
        // and changed journals.
        if reg.has_journal_consumer() {
            return Err(OpsError::RegistryInUse);
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
        let cells = self.build_cells(reg, &controls, &mut names, &spec.cells)?;
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
        reg.attach_journal_consumer();
        self.begin(reg);
        self.schedule_all(now, reg, Trigger::Initial);
        self.settle(now, reg);
        Ok(())
    }

    /// Validates cell specs against the controls; returns the cells and their topological order.
    #[allow(clippy::type_complexity)]
    pub(crate) fn build_cells(
        &self,
        reg: &Registry<V>,
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
                && reg.endpoint(endpoint).is_none()
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

    pub(crate) fn install_cells(&mut self, cells: Vec<Cell<V>>, order: Vec<usize>) {
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
}

pub(crate) fn push_calc_event(calc: &mut Calc, at: Mono, revision: Revision, kind: CalcEventKind) {
    let seq = calc.journal.len() as u32 + 1;
    calc.journal.push(CalcEvent {
        seq,
        at,
        revision,
        kind,
    });
}

pub(crate) fn check_name(name: &str) -> Result<(), OpsError> {
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

pub(crate) fn kind_name(k: &ControlKind) -> &'static str {
    match k {
        ControlKind::Number { .. } => "number",
        ControlKind::Enum { .. } => "enum",
        ControlKind::Boolean => "boolean",
        ControlKind::String => "string",
    }
}

pub(crate) fn validate_action(
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
