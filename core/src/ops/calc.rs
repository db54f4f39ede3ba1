//! The calculation lifecycle: host reports (`calc_*`), progress, commits and failures.

use std::sync::Arc;

use super::types::*;
use super::{OpsError, OpsValue};
use crate::Mono;
use crate::jobs::Registry;

use super::app::*;

impl<V: OpsValue> App<V> {
    // ----- calculation results ------------------------------------------------------------------

    /// Whether a host calculation is running (reports apply). A report for one that ended
    /// is late; so is one for a calculation already pruned (its record is gone).
    pub(crate) fn check_host_calc(&self, id: CalcId) -> Result<bool, OpsError> {
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

    pub(crate) fn late(&mut self, now: Mono, id: CalcId, what: &'static str) -> ReportStatus {
        let revision = self.revision;
        if let Some(calc) = self.calcs.get_mut(&id) {
            push_calc_event(calc, now, revision, CalcEventKind::Late { what });
        }
        ReportStatus::Late
    }

    /// The host reports progress in [0, 1] of a host calculation.
    pub fn calc_progress(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: CalcId,
        fraction: f64,
    ) -> Result<ReportStatus, OpsError> {
        self.begin(reg);
        if !fraction.is_finite() {
            return Err(OpsError::InvalidArgument(
                "progress must be a finite number".into(),
            ));
        }
        if !self.check_host_calc(id)? {
            return Ok(self.late(now, id, "progress"));
        }
        self.progress(now, reg, id, fraction);
        self.settle(now, reg);
        Ok(ReportStatus::Applied)
    }

    /// The host reports a partial value (a streaming calculation yielded).
    pub fn calc_partial(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: CalcId,
        value: V,
    ) -> Result<ReportStatus, OpsError> {
        self.begin(reg);
        if !self.check_host_calc(id)? {
            return Ok(self.late(now, id, "partial"));
        }
        self.commit(now, reg, id, Some(value), true);
        self.settle(now, reg);
        Ok(ReportStatus::Applied)
    }

    /// The host reports the calculation's result.
    pub fn calc_done(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: CalcId,
        value: V,
    ) -> Result<ReportStatus, OpsError> {
        self.begin(reg);
        if !self.check_host_calc(id)? {
            return Ok(self.late(now, id, "done"));
        }
        self.commit(now, reg, id, Some(value), false);
        self.settle(now, reg);
        Ok(ReportStatus::Applied)
    }

    /// The host reports that a streaming calculation finished: its last partial value is its
    /// result. The value is not committed again (the journal's `succeeded` says
    /// `lastPartial`); dependents computed from it become final without recomputing. A
    /// calculation that yielded nothing has no result: report it with [`App::calc_done`] or
    /// [`App::calc_failed`].
    pub fn calc_finish(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: CalcId,
    ) -> Result<ReportStatus, OpsError> {
        self.begin(reg);
        if !self.check_host_calc(id)? {
            return Ok(self.late(now, id, "done"));
        }
        if self.calcs[&id].partials == 0 {
            return Err(OpsError::InvalidArgument(format!(
                "calculation {id} yielded no partial value to finish with; report its result with calc_done"
            )));
        }
        self.commit(now, reg, id, None, false);
        self.settle(now, reg);
        Ok(ReportStatus::Applied)
    }

    /// The host reports that the calculation failed. The cell keeps its latest value.
    pub fn calc_failed(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: CalcId,
        message: &str,
        code: Option<&str>,
    ) -> Result<ReportStatus, OpsError> {
        self.begin(reg);
        if !self.check_host_calc(id)? {
            return Ok(self.late(now, id, "error"));
        }
        self.bump();
        self.fail_calc(now, id, message.into(), code.map(str::to_owned));
        self.pump(now, reg);
        self.settle(now, reg);
        Ok(ReportStatus::Applied)
    }

    pub(crate) fn progress(&mut self, now: Mono, reg: &mut Registry<V>, id: CalcId, fraction: f64) {
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
        self.op_progress(now, reg, x, id, fraction);
    }

    /// Commits a value of a calculation: a partial, or its result. `None` commits the last
    /// partial as the result (a finished stream) without committing it again. A value equal
    /// to the cell's current one keeps its content: dependents are not triggered, and those
    /// computed from it take the new provenance and finality.
    pub(crate) fn commit(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: CalcId,
        value: Option<V>,
        partial: bool,
    ) {
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
        self.propagate(now, reg, dirty);
    }

    pub(crate) fn fail_calc(
        &mut self,
        now: Mono,
        id: CalcId,
        message: String,
        code: Option<String>,
    ) {
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
}
