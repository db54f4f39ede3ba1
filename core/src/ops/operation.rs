//! Operations: accepted writes + a wait set + a result selection, correlated with the
//! calculations the writes cause. Same [`App`] struct as `app.rs`.
//!
//! Correlation is by provenance, not by time: an awaited cell is *processed* for an operation
//! when nothing is in flight for it, its value is final, and that value was computed from the
//! current version of every control it depends on. Writes in one batch share a revision; a
//! relevant write in a later batch supersedes the request (or, under `follow`, is recorded as
//! intervening). A global tick is never evidence: unrelated controls are not in the
//! operation's relevant set, and unrelated cells are not in its closure.

use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Value, json};

use super::app::App;
use super::control::ControlValue;
use super::types::*;
use super::{OpsError, OpsValue};
use crate::Mono;
use crate::jobs::{JobId, Origin, Registry, Submit, wire::WireRequest};
use crate::value::Payload;

/// What an operation returns when it settles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Selection {
    /// Just the outcome record.
    #[default]
    None,
    /// These controls and cells, read from the settled snapshot.
    Outputs(Vec<String>),
    /// A registered pure function, run by the host over the settled snapshot and the outcome
    /// record ([`App::record_result`] stores what it returned).
    Selector(String),
}

/// A request to change controls and observe the consequences.
#[derive(Clone, Debug)]
pub struct ObserveRequest<P> {
    /// Validated all before any is applied; applied in one batch.
    pub writes: Vec<(String, P)>,
    /// The cells whose processing the operation awaits.
    pub wait_for: Vec<String>,
    pub select: Selection,
    pub on_supersede: OnSupersede,
    pub on_failure: OnFailure,
    /// Ends the observation as `timed_out` (the calculations continue).
    pub timeout_ms: Option<u64>,
    pub actor: Actor,
}

impl<P> ObserveRequest<P> {
    /// A request with the default policies (end on supersession, end on failure).
    pub fn new(writes: Vec<(String, P)>, wait_for: Vec<String>) -> Self {
        ObserveRequest {
            writes,
            wait_for,
            select: Selection::None,
            on_supersede: OnSupersede::End,
            on_failure: OnFailure::End,
            timeout_ms: None,
            actor: Actor::new("agent"),
        }
    }
}

/// Why and how an operation was superseded.
#[derive(Clone, Debug, PartialEq)]
pub struct SupersedeInfo {
    pub stage: SupersedeStage,
    /// The later writes that replaced the request.
    pub by: Vec<WriteId>,
    /// The inputs they changed.
    pub controls: Vec<String>,
    /// The calculations linked to the request when it ended: `(cell, calc, state)`.
    pub calculations: Vec<(String, CalcId, &'static str)>,
}

/// The terminal record of an operation.
#[derive(Clone, Debug)]
pub struct OpOutcome<V> {
    pub kind: OpOutcomeKind,
    pub at: Mono,
    /// The revision of the state the outcome describes (the snapshot's, when settled).
    pub revision: Revision,
    pub message: String,
    /// Named outputs, or what the host's selector returned.
    pub result: Option<V>,
    /// The relevant controls' values at `revision`: what the result corresponds to.
    pub inputs: Vec<(String, ControlValue)>,
    /// Per awaited cell, in wait-set order.
    pub cells: Vec<CellOutcome>,
    pub superseded: Option<SupersedeInfo>,
    pub failures: Vec<FailureReason>,
    /// Relevant writes that took effect after the request (under `follow`).
    pub intervening: Vec<WriteId>,
}

/// An awaited cell when its operation ended.
#[derive(Clone, Debug, PartialEq)]
pub struct CellOutcome {
    pub name: String,
    /// `None` once the cell no longer exists (graph replaced or disposed).
    pub state: Option<CellState>,
    /// The calculation of the cell's latest value.
    pub value_calc: Option<CalcId>,
    /// `(calc, noop)` when the cell was processed for the request.
    pub processed: Option<(CalcId, bool)>,
}

/// One operation: its request, correlation state, journal and outcome.
#[derive(Clone, Debug)]
pub struct Operation<V> {
    pub id: OpId,
    pub actor: Actor,
    pub created_at: Mono,
    pub writes: Vec<WriteId>,
    pub(crate) wait: Vec<usize>,
    pub wait_names: Vec<String>,
    pub select: Selection,
    pub on_supersede: OnSupersede,
    pub on_failure: OnFailure,
    pub deadline: Option<Mono>,
    pub(crate) relevant: Vec<usize>,
    pub(crate) closure: Vec<usize>,
    /// The revision at which the writes took effect.
    pub effective: Option<Revision>,
    /// A request without writes started while writes to its relevant controls were staged:
    /// those writes were accepted first, so they are part of the state it observes. It takes
    /// effect with their batch (never superseded by them).
    pub(crate) after_staged: bool,
    pub(crate) linked: Vec<CalcId>,
    pub(crate) processed: Vec<Option<(CalcId, bool)>>,
    pub(crate) failures: Vec<Option<FailureReason>>,
    pub(crate) intervening: Vec<WriteId>,
    /// Calculations this record names besides `linked` (processed, failed, in the outcome):
    /// kept, like the linked ones, while the operation is retained.
    pub(crate) held: Vec<CalcId>,
    /// The registry job hosting this observation, once hosted.
    pub job: Option<JobId>,
    pub(crate) wire: Option<u64>,
    pub journal: Vec<OpEvent>,
    pub outcome: Option<OpOutcome<V>>,
}

impl<V> Operation<V> {
    fn push(&mut self, at: Mono, revision: Revision, kind: OpEventKind) {
        let seq = self.journal.len() as u32 + 1;
        self.journal.push(OpEvent {
            seq,
            at,
            revision,
            kind,
        });
    }

    /// Whether the operation has its outcome.
    pub fn is_finished(&self) -> bool {
        self.outcome.is_some()
    }
}

impl<V: OpsValue> App<V> {
    /// Starts an operation: validates everything (wait set, selection, every write) before
    /// staging anything; the writes become effective at the next [`App::flush`].
    pub fn observe<P: Payload>(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        req: ObserveRequest<P>,
    ) -> Result<OpId, OpsError> {
        let writes = super::app::requested(&req.writes);
        self.observe_requested(
            now,
            reg,
            ObserveRequest {
                writes,
                wait_for: req.wait_for,
                select: req.select,
                on_supersede: req.on_supersede,
                on_failure: req.on_failure,
                timeout_ms: req.timeout_ms,
                actor: req.actor,
            },
        )
    }

    /// [`App::observe`] with the writes read as scalars (compiled once for every payload type).
    fn observe_requested(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        req: ObserveRequest<super::app::Requested>,
    ) -> Result<OpId, OpsError> {
        self.begin(reg);
        if req.writes.is_empty() && req.wait_for.is_empty() {
            return Err(OpsError::InvalidArgument(
                "an operation needs writes, cells to wait for, or both".into(),
            ));
        }
        let mut wait = Vec::new();
        for n in &req.wait_for {
            let x = self.cell_index(n)?;
            if !wait.contains(&x) {
                wait.push(x);
            }
        }
        match &req.select {
            Selection::None => {}
            Selection::Outputs(names) => {
                for n in names {
                    if !self.names.contains_key(n) {
                        let mut known: Vec<String> =
                            self.controls.iter().map(|c| c.name.clone()).collect();
                        known.extend(self.cells.iter().map(|c| c.name.clone()));
                        return Err(OpsError::InvalidArgument(format!(
                            "cannot select `{n}`: not a control or cell; names: {}",
                            known.join(", ")
                        )));
                    }
                }
            }
            Selection::Selector(s) => {
                if !self.selectors.iter().any(|x| &x.name == s) {
                    return Err(OpsError::UnknownSelector {
                        name: s.clone(),
                        known: self.selectors.iter().map(|x| x.name.clone()).collect(),
                    });
                }
            }
        }
        let mut controls = Vec::with_capacity(req.writes.len());
        for (name, value) in &req.writes {
            let c = self.validate_requested(name, value.clone())?.0;
            if controls.contains(&c) {
                return Err(OpsError::InvalidArgument(format!(
                    "`{name}` is written twice in one operation; give one value per control"
                )));
            }
            controls.push(c);
        }
        let id = OpId(self.next_op);
        self.next_op += 1;
        let writes = self.stage_writes(now, &req.writes, &req.actor, Some(id), None)?;
        for w in &writes {
            self.write_ref(*w);
        }
        let (closure, relevant) = self.scope_of(&wait, &mut controls);
        let deadline = req.timeout_ms.map(|t| now.plus(t));
        let n = wait.len();
        let mut op = Operation {
            id,
            actor: req.actor,
            created_at: now,
            writes: writes.clone(),
            wait_names: wait.iter().map(|&x| self.cells[x].name.clone()).collect(),
            wait,
            select: req.select,
            on_supersede: req.on_supersede,
            on_failure: req.on_failure,
            deadline,
            relevant,
            closure,
            effective: None,
            after_staged: false,
            linked: Vec::new(),
            processed: vec![None; n],
            failures: vec![None; n],
            intervening: Vec::new(),
            held: Vec::new(),
            job: None,
            wire: None,
            journal: Vec::with_capacity(6),
            outcome: None,
        };
        op.push(now, self.revision, OpEventKind::Accepted { writes });
        if let Some(d) = deadline {
            self.op_timers.insert((d, id), ());
        }
        if op.writes.is_empty() && self.relevant_staged(&op.relevant) {
            op.after_staged = true;
        }
        let immediate = op.writes.is_empty() && !op.after_staged;
        self.ops.insert(id, Box::new(op));
        self.pending_ops.push(id);
        if immediate {
            self.make_effective(now, id, vec![], vec![]);
            self.link_inflight(now, id);
        }
        self.settle(now, reg);
        Ok(id)
    }

    /// The closure (awaited cells and their ancestors) and relevant controls (written controls
    /// and every control the awaited cells depend on).
    fn scope_of(&self, wait: &[usize], controls: &mut Vec<usize>) -> (Vec<usize>, Vec<usize>) {
        let mut closure = Vec::new();
        for &x in wait {
            closure.push(x);
            closure.extend(self.cells[x].ancestors.iter().copied());
            controls.extend(self.cells[x].rel.iter().copied());
        }
        let closure = super::app::sorted_set(closure, self.cells.len());
        let controls = super::app::sorted_set(std::mem::take(controls), self.controls.len());
        (closure, controls)
    }

    fn make_effective(&mut self, now: Mono, id: OpId, coalesced: Vec<WriteId>, noop: Vec<WriteId>) {
        let revision = self.revision;
        let op = self.ops.get_mut(&id).expect("exists");
        op.effective = Some(revision);
        op.push(now, revision, OpEventKind::Effective { coalesced, noop });
    }

    /// Links the calculations already in flight in the operation's closure: with the request in
    /// effect, they are the ones that will produce its result.
    fn link_inflight(&mut self, now: Mono, id: OpId) {
        let closure = self.ops[&id].closure.clone();
        for x in closure {
            if let Some(c) = self.cells[x].current {
                self.link_one(now, id, x, c);
            }
        }
    }

    fn link_one(&mut self, now: Mono, id: OpId, x: usize, calc: CalcId) {
        let revision = self.revision;
        let cell = self.cells[x].name.clone();
        let op = self.ops.get_mut(&id).expect("exists");
        if !op.linked.contains(&calc) {
            op.linked.push(calc);
            op.push(now, revision, OpEventKind::Calculation { cell, calc });
            self.calc_ref(calc);
        }
    }

    /// A new calculation was scheduled: link it to every effective operation whose closure
    /// holds its cell.
    pub(crate) fn link_calc(&mut self, now: Mono, x: usize, calc: CalcId) {
        for i in 0..self.pending_ops.len() {
            let id = self.pending_ops[i];
            let op = &self.ops[&id];
            if op.effective.is_some() && op.closure.binary_search(&x).is_ok() {
                self.link_one(now, id, x, calc);
            }
        }
    }

    /// Progress of a calculation: forwarded to hosted operations that linked it.
    pub(crate) fn op_progress(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        x: usize,
        calc: CalcId,
        fraction: f64,
    ) {
        let Some(ep) = self.ops_endpoint else { return };
        let name = self.cells[x].name.clone();
        for i in 0..self.pending_ops.len() {
            let op = &self.ops[&self.pending_ops[i]];
            if let Some(wire) = op.wire
                && op.linked.contains(&calc)
            {
                let msg = V::from_json(&json!({"id": wire, "type": "progress",
                    "value": {"cell": name, "calc": calc.to_json(), "progress": fraction}}));
                let _ = reg.on_message(now, ep, &msg);
            }
        }
    }

    /// Correlates a batch that just took effect with the waiting operations. Returns the
    /// operations whose own writes took effect in it (their in-flight links come after the
    /// batch's calculations are scheduled).
    pub(crate) fn ops_on_batch(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        staged: &[WriteId],
        changed: &[usize],
    ) -> Vec<OpId> {
        let mut fresh = Vec::new();
        let pending = self.pending_ops.clone();
        for id in pending {
            let op = &self.ops[&id];
            if op.effective.is_none() {
                if !op.after_staged && !op.writes.iter().any(|w| staged.contains(w)) {
                    continue;
                }
                let mut by = Vec::new();
                let mut controls = Vec::new();
                for w in &op.writes {
                    if let WriteStatus::Overwritten { by: b } = self.write(*w).status {
                        by.push(b);
                        controls.push(self.controls[self.write(*w).control].name.clone());
                    }
                }
                let relevant = op.relevant.clone();
                let own = op.writes.clone();
                let policy = op.on_supersede;
                if !by.is_empty() && policy == OnSupersede::End {
                    let info = SupersedeInfo {
                        stage: SupersedeStage::BeforeEffective,
                        by,
                        controls,
                        calculations: vec![],
                    };
                    self.finish_op(now, reg, id, OpOutcomeKind::Superseded, Some(info), None);
                    continue;
                }
                let coalesced: Vec<WriteId> = staged
                    .iter()
                    .copied()
                    .filter(|w| !own.contains(w) && relevant.contains(&self.write(*w).control))
                    .collect();
                let noop: Vec<WriteId> = own
                    .iter()
                    .copied()
                    .filter(|w| {
                        matches!(
                            self.write(*w).status,
                            WriteStatus::Effective { changed: false, .. }
                        )
                    })
                    .collect();
                self.make_effective(now, id, coalesced, noop);
                if !by.is_empty() {
                    self.intervene(now, id, by, controls);
                }
                fresh.push(id);
                continue;
            }
            // Already effective: did this batch change one of its relevant inputs?
            let mut by = Vec::new();
            let mut controls = Vec::new();
            for &c in changed {
                if op.relevant.binary_search(&c).is_ok() {
                    let w = staged
                        .iter()
                        .rev()
                        .find(|w| self.write(**w).control == c)
                        .copied()
                        .expect("a changed control has a write in the batch");
                    by.push(w);
                    controls.push(self.controls[c].name.clone());
                }
            }
            if by.is_empty() {
                continue;
            }
            match op.on_supersede {
                OnSupersede::End => {
                    let started = op
                        .linked
                        .iter()
                        .any(|c| self.calcs.get(c).is_some_and(|c| c.started));
                    let calculations = op
                        .linked
                        .iter()
                        .filter_map(|c| self.calcs.get(c))
                        .filter(|c| !c.state.is_ended() || c.started)
                        .map(|c| (c.cell_name.clone(), c.id, c.state.as_str()))
                        .collect();
                    let info = SupersedeInfo {
                        stage: if started {
                            SupersedeStage::DuringExecution
                        } else {
                            SupersedeStage::BeforeExecution
                        },
                        by,
                        controls,
                        calculations,
                    };
                    self.finish_op(now, reg, id, OpOutcomeKind::Superseded, Some(info), None);
                }
                OnSupersede::Follow => self.intervene(now, id, by, controls),
            }
        }
        fresh
    }

    pub(crate) fn link_fresh(&mut self, now: Mono, fresh: Vec<OpId>) {
        for id in fresh {
            if self.ops[&id].outcome.is_none() {
                self.link_inflight(now, id);
            }
        }
    }

    /// Under `follow`: records the change and re-opens the cells it affects.
    fn intervene(&mut self, now: Mono, id: OpId, by: Vec<WriteId>, controls: Vec<String>) {
        let revision = self.revision;
        let changed: Vec<usize> = by.iter().map(|w| self.write(*w).control).collect();
        let reopen: Vec<bool> = self.ops[&id]
            .wait
            .iter()
            .map(|&x| self.cells[x].rel.iter().any(|k| changed.contains(k)))
            .collect();
        let op = self.ops.get_mut(&id).expect("exists");
        for (i, r) in reopen.into_iter().enumerate() {
            if r {
                op.processed[i] = None;
            }
        }
        op.intervening.extend(by.iter().copied());
        for w in &by {
            self.write_ref(*w);
        }
        let op = self.ops.get_mut(&id).expect("exists");
        op.push(
            now,
            revision,
            OpEventKind::Intervening {
                writes: by,
                controls,
            },
        );
    }

    /// Whether an awaited cell is in the requested state: nothing in flight, a final value,
    /// computed from the current version of every control it depends on.
    fn is_processed(&self, x: usize) -> bool {
        let cell = &self.cells[x];
        cell.gate_open
            && cell.error.is_none()
            && cell.current.is_none()
            && cell.value.as_ref().is_some_and(|v| v.is_final)
            && self.up_to_date(x)
    }

    /// Why an unprocessed cell will not get there by itself, if nothing is in flight for it.
    fn blocker(&self, x: usize) -> Option<FailureReason> {
        let cell = &self.cells[x];
        if !cell.gate_open {
            let g = self.gate_of(x);
            return Some(FailureReason::Held {
                cell: cell.name.clone(),
                control: self.controls[g].name.clone(),
                value: self.controls[g].value.clone(),
            });
        }
        if let Some(e) = &cell.error {
            return Some(FailureReason::Errored {
                cell: cell.name.clone(),
                calc: Some(e.calc),
                message: e.message.clone(),
                code: e.code.clone(),
            });
        }
        match cell.current.map(|c| self.calcs[&c].state) {
            Some(CalcState::Running) | Some(CalcState::Queued) => None,
            Some(CalcState::Scheduled) => cell
                .upstream
                .iter()
                .filter(|&&u| !self.readable(u))
                .find_map(|&u| self.blocker(u)),
            _ => {
                for &u in &self.order {
                    if cell.ancestors.binary_search(&u).is_err() {
                        continue;
                    }
                    let uc = &self.cells[u];
                    if !uc.gate_open || uc.error.is_some() {
                        return self.blocker(u);
                    }
                }
                None
            }
        }
    }

    fn gate_of(&self, x: usize) -> usize {
        self.cells[x]
            .spec
            .gate
            .as_ref()
            .and_then(|g| self.control_index(&g.control).ok())
            .expect("a closed gate has a control")
    }

    /// Checks every waiting operation against the current state.
    pub(crate) fn evaluate_ops(&mut self, now: Mono, reg: &mut Registry<V>) {
        let pending = self.pending_ops.clone();
        for id in pending {
            let op = &self.ops[&id];
            if op.effective.is_none() || op.outcome.is_some() {
                continue;
            }
            let mut events = Vec::new();
            let mut processed = op.processed.clone();
            let mut failures = op.failures.clone();
            for (i, &x) in op.wait.iter().enumerate() {
                // A processed record is evidence about one state, not a latch: settlement is
                // judged on the current state (the snapshot), so a cell that got a new
                // calculation since (a rerun of it or of an upstream) is awaited again.
                if let Some((was, _)) = processed[i] {
                    let still = self.is_processed(x)
                        && self.cells[x].value.as_ref().map(|v| v.calc) == Some(was);
                    if still {
                        continue;
                    }
                    processed[i] = None;
                    events.push(OpEventKind::Reopened {
                        cell: self.cells[x].name.clone(),
                        was,
                        calc: self.cells[x].current,
                    });
                }
                if failures[i].is_some() {
                    continue;
                }
                if self.is_processed(x) {
                    let vc = self.cells[x]
                        .value
                        .as_ref()
                        .expect("processed has a value")
                        .calc;
                    let noop = !op.linked.contains(&vc);
                    processed[i] = Some((vc, noop));
                    events.push(OpEventKind::Processed {
                        cell: self.cells[x].name.clone(),
                        calc: vc,
                        noop,
                    });
                } else if let Some(f) = self.blocker(x) {
                    failures[i] = Some(f.clone());
                    events.push(OpEventKind::CellFailed { failure: f });
                }
            }
            let policy = op.on_failure;
            let revision = self.revision;
            for e in &events {
                match e {
                    // A processed calculation that is not a no-op is linked (named already).
                    OpEventKind::Processed {
                        calc, noop: true, ..
                    }
                    | OpEventKind::CellFailed {
                        failure:
                            FailureReason::Errored {
                                calc: Some(calc), ..
                            },
                    } => self.op_holds_calc(id, *calc),
                    _ => {}
                }
            }
            let op = self.ops.get_mut(&id).expect("exists");
            for e in events {
                op.push(now, revision, e);
            }
            let all_done = processed
                .iter()
                .zip(&failures)
                .all(|(p, f)| p.is_some() || f.is_some());
            let any_failed = failures.iter().any(Option::is_some);
            let all_processed = processed.iter().all(Option::is_some);
            op.processed = processed;
            op.failures = failures;
            if any_failed && (policy == OnFailure::End || all_done) {
                self.finish_op(now, reg, id, OpOutcomeKind::Failed, None, None);
            } else if all_processed {
                self.finish_op(now, reg, id, OpOutcomeKind::Settled, None, None);
            }
        }
    }

    /// Records the one terminal outcome of an operation.
    pub(crate) fn finish_op(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: OpId,
        kind: OpOutcomeKind,
        superseded: Option<SupersedeInfo>,
        reason: Option<String>,
    ) {
        if self.ops[&id].outcome.is_some() {
            return;
        }
        let op = &self.ops[&id];
        let revision = self.revision;
        let cells = op
            .wait_names
            .iter()
            .zip(&op.processed)
            .map(|(name, p)| match self.names.get(name) {
                Some(super::app::Node::Cell(x)) => CellOutcome {
                    name: name.clone(),
                    state: Some(self.cell_state(*x)),
                    value_calc: self.cells[*x].value.as_ref().map(|v| v.calc),
                    processed: *p,
                },
                _ => CellOutcome {
                    name: name.clone(),
                    state: None,
                    value_calc: None,
                    processed: *p,
                },
            })
            .collect();
        let inputs: Vec<(String, ControlValue)> = op
            .relevant
            .iter()
            .map(|&c| {
                (
                    self.controls[c].name.clone(),
                    self.controls[c].value.clone(),
                )
            })
            .collect();
        let failures: Vec<FailureReason> = op.failures.iter().flatten().cloned().collect();
        let result = match (&op.select, kind) {
            (Selection::Outputs(names), OpOutcomeKind::Settled) => Some(self.select_outputs(names)),
            _ => None,
        };
        let message = self.outcome_message(op, kind, &superseded, &failures, reason.as_deref());
        let outcome = OpOutcome {
            kind,
            at: now,
            revision,
            message,
            result,
            inputs,
            cells,
            superseded,
            failures,
            intervening: op.intervening.clone(),
        };
        let (job, wire) = (op.job, op.wire);
        let deadline = op.deadline;
        let unnamed: Vec<CalcId> = outcome
            .cells
            .iter()
            .flat_map(|c| c.value_calc.into_iter().chain(c.processed.map(|p| p.0)))
            .filter(|c| !op.linked.contains(c) && !op.held.contains(c))
            .collect();
        for calc in unnamed {
            self.op_holds_calc(id, calc);
        }
        if let Some(s) = &outcome.superseded {
            for w in &s.by {
                self.write_ref(*w);
            }
        }
        self.op_retired(id);
        let op = self.ops.get_mut(&id).expect("exists");
        op.push(now, revision, OpEventKind::Finished { outcome: kind });
        op.outcome = Some(outcome);
        // Retained for inspection from now on: keep only what it holds.
        op.journal.shrink_to_fit();
        self.pending_ops.retain(|o| *o != id);
        if let Some(d) = deadline {
            self.op_timers.remove(&(d, id));
        }
        // The host needs the settled state only to run a registered selector over it.
        let selector = match (&self.ops[&id].select, kind) {
            (Selection::Selector(name), OpOutcomeKind::Settled) => Some(name.clone()),
            _ => None,
        };
        let snapshot = selector.as_ref().map(|_| Arc::new(self.snapshot()));
        let with_selector = selector.is_some();
        self.outputs.push_back(super::AppOutput::OpFinished {
            op: id,
            outcome: kind,
            snapshot,
            selector,
        });
        self.tool_op_finished(now, id, with_selector);
        if let (Some(_job), Some(wire), Some(ep)) = (job, wire, self.ops_endpoint) {
            let msg = match kind {
                OpOutcomeKind::Settled => {
                    json!({"id": wire, "type": "done", "value": self.outcome_json(id)})
                }
                OpOutcomeKind::Cancelled => json!({"id": wire, "type": "cancelled"}),
                other => {
                    json!({"id": wire, "type": "error", "message": self.ops[&id].outcome.as_ref().map(|o| o.message.clone()),
                    "code": other.as_str().to_ascii_uppercase()})
                }
            };
            let _ = reg.on_message(now, ep, &V::from_json(&msg));
        }
    }

    fn select_outputs(&self, names: &[String]) -> V {
        let fields = names
            .iter()
            .map(|n| {
                let v = match self.names.get(n) {
                    Some(super::app::Node::Control(c)) => {
                        V::from_json(&self.controls[*c].value.to_json())
                    }
                    Some(super::app::Node::Cell(x)) => match &self.cells[*x].value {
                        Some(v) => (*v.value).clone(),
                        None => V::null(),
                    },
                    None => V::null(),
                };
                (n.clone(), v)
            })
            .collect();
        V::object(fields)
    }

    fn outcome_message(
        &self,
        op: &Operation<V>,
        kind: OpOutcomeKind,
        superseded: &Option<SupersedeInfo>,
        failures: &[FailureReason],
        reason: Option<&str>,
    ) -> String {
        match kind {
            OpOutcomeKind::Settled => {
                let cells = op.wait_names.join(", ");
                let verb = if op.wait_names.len() == 1 { "reflects" } else { "reflect" };
                if op.intervening.is_empty() {
                    format!("settled at revision {}: {cells} {verb} the request", self.revision)
                } else {
                    format!(
                        "settled at revision {} after {} intervening change(s): {cells} {verb} the current inputs (see `inputs`), not only the request",
                        self.revision,
                        op.intervening.len()
                    )
                }
            }
            OpOutcomeKind::Superseded => {
                let s = superseded.as_ref().expect("superseded has info");
                let changes: Vec<String> = s
                    .by
                    .iter()
                    .map(|w| {
                        let w = self.write(*w);
                        format!(
                            "{} = {} ({} by {})",
                            self.controls[w.control].name, w.accepted, w.id, w.actor.by
                        )
                    })
                    .collect();
                let when = match s.stage {
                    SupersedeStage::BeforeEffective => "before it took effect",
                    SupersedeStage::BeforeExecution => "before any calculation for it started",
                    SupersedeStage::DuringExecution => "while its calculation was running",
                };
                format!(
                    "Your request was superseded {when} by {}. Inspect the current state and try again later if it is still wanted; nothing was retried or restored.",
                    changes.join(", ")
                )
            }
            OpOutcomeKind::Failed => {
                let parts: Vec<String> = failures
                    .iter()
                    .map(|f| match f {
                        FailureReason::Errored { cell, message, .. } => format!("{cell} errored: {message}"),
                        FailureReason::Held { cell, control, value } => {
                            format!("{cell} is held ({control} = {value}); nothing will run")
                        }
                        FailureReason::Removed { reason } => reason.clone(),
                    })
                    .collect();
                format!("failed: {}", parts.join("; "))
            }
            OpOutcomeKind::Cancelled => format!(
                "observation cancelled ({}); calculations continue — stopping them is an application action",
                reason.unwrap_or("by the caller")
            ),
            OpOutcomeKind::TimedOut => {
                "observation timed out; calculations continue — stopping them is an application action".into()
            }
        }
    }

    pub(crate) fn time_out(&mut self, now: Mono, reg: &mut Registry<V>, id: OpId) {
        if self.ops.get(&id).is_some_and(|o| o.outcome.is_none()) {
            self.finish_op(now, reg, id, OpOutcomeKind::TimedOut, None, None);
        }
    }

    /// Cancels the observation only: its calculations and the shared cells are untouched.
    /// Returns the outcome the operation has (unchanged if it had already finished).
    pub fn cancel_op(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: OpId,
        reason: &str,
    ) -> Result<OpOutcomeKind, OpsError> {
        self.begin(reg);
        let op = self.ops.get(&id).ok_or_else(|| self.op_missing(id))?;
        if let Some(o) = &op.outcome {
            return Ok(o.kind);
        }
        self.finish_op(
            now,
            reg,
            id,
            OpOutcomeKind::Cancelled,
            None,
            Some(reason.into()),
        );
        self.settle(now, reg);
        Ok(OpOutcomeKind::Cancelled)
    }

    /// Hosts a waiting operation as a job of the registry (owner, origin): `wait`, `observe`,
    /// mailbox notes and cancellation then work on it like on any job. Cancelling the job
    /// cancels the observation only.
    pub fn host_as_job(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: OpId,
        owner: &str,
        origin: Origin,
    ) -> Result<JobId, OpsError> {
        self.begin(reg);
        self.host_op_as_job(now, reg, id, owner, origin)
    }

    /// [`App::host_as_job`] without starting a new input (the deadline of a waiting tool call
    /// hosts its operation in the middle of [`App::handle_timeout`]).
    pub(crate) fn host_op_as_job(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: OpId,
        owner: &str,
        origin: Origin,
    ) -> Result<JobId, OpsError> {
        let op = self.ops.get(&id).ok_or_else(|| self.op_missing(id))?;
        if let Some(j) = op.job {
            return Ok(j);
        }
        if op.outcome.is_some() {
            return Err(OpsError::InvalidArgument(format!(
                "{id} already finished; nothing to host"
            )));
        }
        let ep = self.ensure_ops_endpoint(now, reg);
        let mut req = Submit::new(owner, ep, V::from_json(&json!({"operation": id.0})));
        req.origin = origin;
        let job = reg.submit(now, req)?.job;
        let revision = self.revision;
        let op = self.ops.get_mut(&id).expect("exists");
        op.job = Some(job);
        op.push(now, revision, OpEventKind::Hosted { job });
        self.pump_registry(now, reg);
        Ok(job)
    }

    pub(crate) fn on_ops_request(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        request: WireRequest<V>,
    ) {
        match request {
            WireRequest::Run { id, payload } => {
                let op = payload
                    .field("operation")
                    .and_then(|v| v.as_f64())
                    .map(|n| OpId(n as u64));
                if let Some(op) = op.filter(|o| self.ops.contains_key(o)) {
                    self.ops.get_mut(&op).expect("exists").wire = Some(id);
                    self.op_wires.insert(id, op);
                }
            }
            WireRequest::Cancel { id } => {
                if let Some(&op) = self.op_wires.get(&id)
                    && self.ops.get(&op).is_some_and(|o| o.outcome.is_none())
                {
                    self.finish_op(
                        now,
                        reg,
                        op,
                        OpOutcomeKind::Cancelled,
                        None,
                        Some("its job was cancelled".into()),
                    );
                }
            }
            WireRequest::Input { .. } => {}
        }
    }

    /// Stores what the host's selector returned for a settled operation (the answer to an
    /// [`super::AppOutput::OpFinished`] naming a selector): tool calls waiting on it reply now,
    /// with the result.
    pub fn record_result(&mut self, id: OpId, value: V) -> Result<(), OpsError> {
        let o = self.selector_outcome(id)?;
        o.result = Some(value);
        self.tool_result_recorded(id);
        Ok(())
    }

    /// The host's selector gave no result for a settled operation (it threw, or the host has
    /// no function of that name): the other answer to an [`super::AppOutput::OpFinished`]
    /// naming a selector. Tool calls waiting on it reply now, without a result. Without either
    /// answer they reply at their deadline (when the operation settled before it) or not at all.
    pub fn record_no_result(&mut self, id: OpId) -> Result<(), OpsError> {
        self.selector_outcome(id)?;
        self.tool_result_recorded(id);
        Ok(())
    }

    /// The outcome of a settled operation with a selector, or why there is none.
    fn selector_outcome(&mut self, id: OpId) -> Result<&mut OpOutcome<V>, OpsError> {
        if !self.ops.contains_key(&id) {
            return Err(self.op_missing(id));
        }
        let op = self.ops.get_mut(&id).expect("checked");
        match (&op.select, op.outcome.as_mut()) {
            (Selection::Selector(_), Some(o)) if o.kind == OpOutcomeKind::Settled => Ok(o),
            _ => Err(OpsError::InvalidArgument(format!(
                "{id} is not a settled operation with a selector"
            ))),
        }
    }

    /// After a graph replacement or disposal: waiting operations continue on the new instance
    /// when their cells exist there, and fail otherwise.
    pub(crate) fn ops_on_replace(&mut self, now: Mono, reg: &mut Registry<V>, from: u64, to: u64) {
        let pending = self.pending_ops.clone();
        for id in pending {
            let names = self.ops[&id].wait_names.clone();
            let mut wait = Vec::new();
            let mut missing = Vec::new();
            for n in &names {
                match self.names.get(n) {
                    Some(super::app::Node::Cell(x)) => wait.push(*x),
                    _ => missing.push(n.clone()),
                }
            }
            let revision = self.revision;
            if !missing.is_empty() {
                let reason = if from == to {
                    format!(
                        "graph instance {from} was disposed while waiting for {}",
                        missing.join(", ")
                    )
                } else {
                    format!("graph instance {to} has no cell {}", missing.join(", "))
                };
                let op = self.ops.get_mut(&id).expect("exists");
                op.failures = vec![
                    Some(FailureReason::Removed {
                        reason: reason.clone()
                    });
                    names.len()
                ];
                op.push(
                    now,
                    revision,
                    OpEventKind::CellFailed {
                        failure: FailureReason::Removed { reason },
                    },
                );
                self.finish_op(now, reg, id, OpOutcomeKind::Failed, None, None);
                continue;
            }
            let mut controls: Vec<usize> = self.ops[&id]
                .writes
                .iter()
                .map(|w| self.write(*w).control)
                .collect();
            let (closure, relevant) = self.scope_of(&wait, &mut controls);
            let op = self.ops.get_mut(&id).expect("exists");
            op.wait = wait;
            op.closure = closure;
            op.relevant = relevant;
            op.processed = vec![None; names.len()];
            op.push(now, revision, OpEventKind::GraphReplaced { from, to });
        }
    }

    /// The operation record.
    pub fn operation(&self, id: OpId) -> Option<&Operation<V>> {
        self.ops.get(&id).map(|o| &**o)
    }

    /// Every retained operation, in id order.
    pub fn operations(&self) -> impl Iterator<Item = &Operation<V>> {
        self.ops.values().map(|o| &**o)
    }

    /// The outcome record as JSON (`null` while waiting).
    pub fn outcome_json(&self, id: OpId) -> Value {
        self.outcome_record(id).map_or(Value::Null, |r| {
            serde_json::to_value(r).unwrap_or(Value::Null)
        })
    }

    /// The outcome record ([`App::outcome_json`]) as a serializable value (`None` while
    /// waiting or unknown): a host writes it straight to text, without building a `Value`.
    pub fn outcome_record(&self, id: OpId) -> Option<OutcomeRecord<'_, V>> {
        let op = self.ops.get(&id)?;
        Some(OutcomeRecord {
            app: self,
            op,
            outcome: op.outcome.as_ref()?,
            live_result: false,
        })
    }

    /// The whole operation (request, correlation, journal, outcome) as JSON — what `inspect`
    /// returns.
    pub fn operation_json(&self, id: OpId) -> Result<Value, OpsError> {
        let op = self.ops.get(&id).ok_or_else(|| self.op_missing(id))?;
        let select = match &op.select {
            Selection::None => Value::Null,
            Selection::Outputs(n) => json!({"outputs": n}),
            Selection::Selector(s) => json!({"selector": s}),
        };
        Ok(json!({
            "operation": id.0,
            "state": op.outcome.as_ref().map(|o| o.kind.as_str()).unwrap_or("waiting"),
            "by": op.actor.by,
            "toolCall": op.actor.tool_call,
            "createdAt": op.created_at,
            "effectiveRevision": op.effective,
            "writes": op.writes.iter().map(|w| self.receipt_json(*w)).collect::<Vec<_>>(),
            "waitFor": op.wait_names,
            "select": select,
            "onSupersede": op.on_supersede,
            "onFailure": op.on_failure,
            "deadline": op.deadline,
            "relevantInputs": op.relevant.iter().map(|&c| self.controls[c].name.clone()).collect::<Vec<_>>(),
            "job": op.job.map(|j| j.0),
            "journal": op.journal.iter().map(OpEvent::to_json).collect::<Vec<_>>(),
            "outcome": self.outcome_json(id),
        }))
    }
}

/// An operation's outcome record: `{operation, outcome, message, revision, at, writes,
/// inputs, cells, calculations, result?, superseded?, failures?, intervening?, job?}`, keys in
/// sorted order (a `serde_json` map's, so its text and [`App::outcome_json`] agree; `inputs`
/// and `cells` by name).
pub struct OutcomeRecord<'a, V> {
    app: &'a App<V>,
    op: &'a Operation<V>,
    outcome: &'a OpOutcome<V>,
    live_result: bool,
}

impl<V> OutcomeRecord<'_, V> {
    /// `result` written as `null` in its place (when there is one): for a host that sets the
    /// live value itself instead of a JSON copy.
    pub fn live_result(mut self) -> Self {
        self.live_result = true;
        self
    }

    /// The record's selected value, when it has one.
    pub fn result(&self) -> Option<&V> {
        self.outcome.result.as_ref()
    }
}

/// `items` as a JSON object keyed by name, in name order, the last of equal names winning:
/// what a `serde_json` map built from them holds.
struct ByName<'a, T, F> {
    items: &'a [T],
    name: fn(&T) -> &str,
    value: F,
}

impl<'a, T, F, X> Serialize for ByName<'a, T, F>
where
    F: Fn(&'a T) -> X,
    X: Serialize,
{
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let name = self.name;
        let mut order: Vec<&'a T> = self.items.iter().collect();
        // Stable: among equal names the last one stays last.
        order.sort_by(|a, b| name(a).cmp(name(b)));
        let mut m = s.serialize_map(None)?;
        for (i, item) in order.iter().enumerate() {
            if order
                .get(i + 1)
                .is_some_and(|next| name(next) == name(item))
            {
                continue;
            }
            m.serialize_entry(name(item), &(self.value)(item))?;
        }
        m.end()
    }
}

/// Write receipts as a JSON array (`null` for a pruned one).
struct Receipts<'a, V>(&'a App<V>, &'a [WriteId]);

impl<V: OpsValue> Serialize for Receipts<'_, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.1.iter().map(|w| self.0.receipt_record(*w)))
    }
}

/// Calculation ids as JSON strings (`"instance:generation"`).
struct CalcIds<'a>(&'a [CalcId]);

impl Serialize for CalcIds<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(CalcText))
    }
}

/// A calculation id as its JSON string.
struct CalcText<'a>(&'a CalcId);

impl Serialize for CalcText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self.0)
    }
}

/// An input's value in an outcome (its JSON form).
fn input_json(input: &(String, ControlValue)) -> super::control::ControlJson<'_> {
    input.1.json()
}

/// An awaited cell in an outcome: `{state, valueCalc, processed, calc, noop}`.
struct CellRecord<'a>(&'a CellOutcome);

impl Serialize for CellRecord<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("calc", &c.processed.as_ref().map(|(c, _)| CalcText(c)))?;
        m.serialize_entry("noop", &c.processed.map(|(_, n)| n))?;
        m.serialize_entry("processed", &c.processed.is_some())?;
        m.serialize_entry("state", &c.state.map(|s| s.as_str()))?;
        m.serialize_entry("valueCalc", &c.value_calc.as_ref().map(CalcText))?;
        m.end()
    }
}

impl<V: OpsValue> Serialize for OutcomeRecord<'_, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (app, op, o) = (self.app, self.op, self.outcome);
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("at", &o.at)?;
        m.serialize_entry("calculations", &CalcIds(&op.linked))?;
        m.serialize_entry(
            "cells",
            &ByName {
                items: &o.cells,
                name: |c| &c.name,
                value: CellRecord,
            },
        )?;
        if !o.failures.is_empty() {
            let failures: Vec<Value> = o.failures.iter().map(FailureReason::to_json).collect();
            m.serialize_entry("failures", &failures)?;
        }
        m.serialize_entry(
            "inputs",
            &ByName {
                items: &o.inputs,
                name: |(n, _)| n,
                value: input_json,
            },
        )?;
        if !o.intervening.is_empty() {
            m.serialize_entry("intervening", &Receipts(app, &o.intervening))?;
        }
        if let Some(j) = op.job {
            m.serialize_entry("job", &j.0)?;
        }
        m.serialize_entry("message", &o.message)?;
        m.serialize_entry("operation", &op.id.0)?;
        m.serialize_entry("outcome", o.kind.as_str())?;
        match &o.result {
            Some(_) if self.live_result => m.serialize_entry("result", &())?,
            Some(r) => m.serialize_entry("result", &r.to_json())?,
            None => {}
        }
        m.serialize_entry("revision", &o.revision)?;
        if let Some(x) = &o.superseded {
            let calculations: Vec<Value> = x
                .calculations
                .iter()
                .map(|(cell, c, st)| json!({"cell": cell, "calc": c.to_json(), "state": st}))
                .collect();
            m.serialize_entry(
                "superseded",
                &json!({
                    "stage": x.stage,
                    "by": x.by.iter().map(|w| app.receipt_json(*w)).collect::<Vec<_>>(),
                    "changedInputs": x.controls,
                    "calculations": calculations,
                }),
            )?;
        }
        m.serialize_entry("writes", &Receipts(app, &op.writes))?;
        m.end()
    }
}
