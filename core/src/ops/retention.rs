//! Retention: how many finished records an app keeps for inspection. Same [`App`] struct as
//! `app.rs`.
//!
//! Operations, calculations, write receipts and the Worker jobs of Worker cells are records an
//! app makes on every input; without a bound a long-running app grows forever. The policy:
//!
//! * **Operations**: the newest [`Retention::operations`] finished operations are kept; older
//!   ones are pruned. Waiting operations are never pruned.
//! * **Calculations**: a calculation is kept while anything names it — its cell's current
//!   value or error, a retained operation (linked, processed, failed or in its outcome), or its
//!   Worker job's journal not yet read. Of the ended calculations nothing names any more, the
//!   newest [`Retention::calculations`] are kept. A pruned Worker cell's calculation takes its
//!   finished job out of the registry too ([`crate::jobs::Registry::forget`]) unless a wait or
//!   subscription still refers to it (then the job goes once that ends).
//! * **Writes**: a write receipt is kept while it is staged or a retained operation names it
//!   (its own writes, intervening and superseding writes). Of the others, the newest
//!   [`Retention::writes`] are kept.
//!
//! Pruning happens at the start of each input, so a record finished by one call can still be
//! read after it (an outcome, a selector's snapshot). Asking for a pruned record gives
//! `PRUNED`; an unknown id gives `UNKNOWN_OPERATION` / `UNKNOWN_CALCULATION`.

use std::collections::VecDeque;

use super::app::App;
use super::types::*;
use super::{OpsError, OpsValue};
use crate::jobs::{JobId, Registry};

/// How many finished records an app keeps (see the module docs for what is never pruned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Finished operations kept, newest first.
    pub operations: usize,
    /// Ended calculations nothing names any more, kept newest first.
    pub calculations: usize,
    /// Write receipts nothing names any more (no longer staged, no retained operation), kept
    /// newest first.
    pub writes: usize,
}

impl Default for Retention {
    /// 1024 of each: enough to inspect recent history, a few hundred kilobytes at most.
    fn default() -> Self {
        Retention {
            operations: 1024,
            calculations: 1024,
            writes: 1024,
        }
    }
}

impl Retention {
    /// Keep everything (benchmarks of per-record cost; short-lived apps).
    pub fn unbounded() -> Self {
        Retention {
            operations: usize::MAX,
            calculations: usize::MAX,
            writes: usize::MAX,
        }
    }
}

/// How many records were pruned since the app was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub operations: u64,
    pub calculations: u64,
    pub writes: u64,
    /// Worker-cell jobs taken out of the registry.
    pub jobs: u64,
}

/// The bookkeeping behind [`Retention`].
#[derive(Debug)]
pub(crate) struct RetentionState {
    pub(crate) limits: Retention,
    first_op: u64,
    /// Finished operations, oldest first.
    finished_ops: VecDeque<OpId>,
    /// Calculations that became ended and unreferenced, oldest first (may hold stale entries:
    /// checked again when popped).
    unref_calcs: VecDeque<CalcId>,
    /// Writes that became settled and unreferenced, oldest first (checked again when popped).
    unref_writes: VecDeque<WriteId>,
    /// Jobs of pruned calculations the registry could not forget yet.
    orphan_jobs: Vec<JobId>,
    pub(crate) live_writes: usize,
    pruned: Pruned,
}

impl RetentionState {
    pub(crate) fn new(limits: Retention, first_op: u64) -> Self {
        RetentionState {
            limits,
            first_op,
            finished_ops: VecDeque::new(),
            unref_calcs: VecDeque::new(),
            unref_writes: VecDeque::new(),
            orphan_jobs: Vec::new(),
            live_writes: 0,
            pruned: Pruned::default(),
        }
    }
}

impl<V: OpsValue> App<V> {
    /// The retention limits.
    pub fn retention(&self) -> Retention {
        self.retention.limits
    }

    /// Changes the retention limits (applied from the next input).
    pub fn set_retention(&mut self, limits: Retention) {
        self.retention.limits = limits;
    }

    /// How many records were pruned so far.
    pub fn pruned(&self) -> Pruned {
        self.retention.pruned
    }

    /// Whether this operation existed and was pruned.
    pub fn was_pruned(&self, id: OpId) -> bool {
        id.0 >= self.retention.first_op && id.0 < self.next_op && !self.ops.contains_key(&id)
    }

    /// The error for an operation id that is not retained.
    pub(crate) fn op_missing(&self, id: OpId) -> OpsError {
        if self.was_pruned(id) {
            OpsError::Pruned(format!(
                "{id} finished and was pruned: the newest {} finished operations are kept",
                self.retention.limits.operations
            ))
        } else {
            OpsError::UnknownOperation(id)
        }
    }

    /// The error for a calculation id that is not retained.
    pub(crate) fn calc_missing(&self, id: CalcId) -> OpsError {
        let existed = id.generation >= 1
            && self.used_instances.contains(&id.instance)
            && (id.instance != self.instance || id.generation < self.next_generation);
        if existed {
            OpsError::Pruned(format!(
                "calculation {id} ended and was pruned: ended calculations nothing refers to are kept up to {}",
                self.retention.limits.calculations
            ))
        } else {
            OpsError::UnknownCalculation(id)
        }
    }

    // ----- references ---------------------------------------------------------------------------

    pub(crate) fn calc_ref(&mut self, id: CalcId) {
        if let Some(c) = self.calcs.get_mut(&id) {
            c.refs += 1;
        }
    }

    pub(crate) fn calc_unref(&mut self, id: CalcId) {
        if let Some(c) = self.calcs.get_mut(&id) {
            debug_assert!(c.refs > 0, "calculation {id} released more than referenced");
            c.refs = c.refs.saturating_sub(1);
            if c.refs == 0 && c.state.is_ended() {
                self.retention.unref_calcs.push_back(id);
            }
        }
    }

    /// Queues an ended calculation nothing names for pruning.
    pub(crate) fn calc_released(&mut self, id: CalcId) {
        if self
            .calcs
            .get(&id)
            .is_some_and(|c| c.refs == 0 && c.state.is_ended())
        {
            self.retention.unref_calcs.push_back(id);
        }
    }

    /// Queues an ended calculation known to be unreferenced.
    pub(crate) fn retention_queue_calc(&mut self, id: CalcId) {
        self.retention.unref_calcs.push_back(id);
    }

    /// A retained operation names this calculation (once per operation: linked calculations
    /// are named when linked, others are added to `held`).
    pub(crate) fn op_holds_calc(&mut self, op: OpId, calc: CalcId) {
        let o = self.ops.get_mut(&op).expect("exists");
        if !o.linked.contains(&calc) && !o.held.contains(&calc) && self.calcs.contains_key(&calc) {
            o.held.push(calc);
            self.calc_ref(calc);
        }
    }

    pub(crate) fn write_ref(&mut self, id: WriteId) {
        if let Some(w) = self.write_record_mut(id) {
            w.refs += 1;
        }
    }

    pub(crate) fn write_unref(&mut self, id: WriteId) {
        if let Some(w) = self.write_record_mut(id) {
            debug_assert!(w.refs > 0, "write {id} released more than referenced");
            w.refs = w.refs.saturating_sub(1);
            self.write_released(id);
        }
    }

    /// Queues a settled write nothing names for pruning.
    pub(crate) fn write_released(&mut self, id: WriteId) {
        if self
            .write_record(id)
            .is_some_and(|w| w.status != WriteStatus::Staged && w.refs == 0)
        {
            self.retention.unref_writes.push_back(id);
        }
    }

    fn write_record_mut(&mut self, id: WriteId) -> Option<&mut WriteRecord> {
        let i = id.0.checked_sub(self.write_base)?;
        self.writes.get_mut(usize::try_from(i).ok()?)?.as_mut()
    }

    /// An operation reached its outcome: it counts against [`Retention::operations`].
    pub(crate) fn op_retired(&mut self, id: OpId) {
        self.retention.finished_ops.push_back(id);
    }

    /// Retained write receipts nothing names (settled, no retained operation).
    #[cfg(test)]
    pub(crate) fn loose_writes(&self) -> usize {
        self.write_records()
            .filter(|w| w.status != WriteStatus::Staged && w.refs == 0)
            .count()
    }

    // ----- pruning ------------------------------------------------------------------------------

    /// Prunes what exceeds the limits (at the start of an input).
    pub(crate) fn prune(&mut self, reg: &mut Registry<V>) {
        let limits = self.retention.limits;
        while self.retention.finished_ops.len() > limits.operations {
            let id = self.retention.finished_ops.pop_front().expect("non-empty");
            // A tool call still waiting for its selector's answer replies now (without it):
            // the record it would answer from is going.
            self.tool_result_recorded(id);
            let Some(op) = self.ops.remove(&id) else {
                continue;
            };
            for c in op.linked.iter().chain(&op.held) {
                self.calc_unref(*c);
            }
            let superseding = op
                .outcome
                .as_ref()
                .and_then(|o| o.superseded.as_ref())
                .map(|s| s.by.clone())
                .unwrap_or_default();
            for w in op.writes.iter().chain(&op.intervening).chain(&superseding) {
                self.write_unref(*w);
            }
            if let Some(wire) = op.wire {
                self.op_wires.remove(&wire);
            }
            self.retention.pruned.operations += 1;
        }
        while self.retention.unref_calcs.len() > limits.calculations {
            let id = self.retention.unref_calcs.pop_front().expect("non-empty");
            if !self
                .calcs
                .get(&id)
                .is_some_and(|c| c.refs == 0 && c.state.is_ended())
            {
                continue; // named again since, or already pruned
            }
            let calc = self.calcs.remove(&id).expect("checked");
            if let Some(job) = calc.job {
                if reg.forget(job) {
                    self.retention.pruned.jobs += 1;
                } else {
                    self.retention.orphan_jobs.push(job);
                }
            }
            self.retention.pruned.calculations += 1;
        }
        if !self.retention.orphan_jobs.is_empty() {
            let mut jobs = std::mem::take(&mut self.retention.orphan_jobs);
            let before = jobs.len();
            jobs.retain(|j| !reg.forget(*j));
            self.retention.pruned.jobs += (before - jobs.len()) as u64;
            self.retention.orphan_jobs = jobs;
        }
        while self.retention.unref_writes.len() > limits.writes {
            let id = self.retention.unref_writes.pop_front().expect("non-empty");
            let prunable = self
                .write_record(id)
                .is_some_and(|w| w.status != WriteStatus::Staged && w.refs == 0);
            if !prunable {
                continue;
            }
            let i = (id.0 - self.write_base) as usize;
            self.writes[i] = None;
            self.retention.live_writes -= 1;
            self.retention.pruned.writes += 1;
        }
        while matches!(self.writes.front(), Some(None)) {
            self.writes.pop_front();
            self.write_base += 1;
        }
    }
}
