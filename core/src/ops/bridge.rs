//! The registry bridge (the app borrows the job registry per call) and timers.

use super::types::*;
use super::{OpsError, OpsValue};
use crate::Millis;
use crate::jobs::{self, EndpointId, EventKind, JobId, Registry};

use super::app::*;

impl<V: OpsValue> App<V> {
    // ----- the job registry bridge --------------------------------------------------------------

    /// A message from a Worker endpoint (forwarded to the registry; Worker cells see it).
    pub fn on_worker_message(
        &mut self,
        now: Millis,
        reg: &mut Registry<V>,
        endpoint: EndpointId,
        msg: &V,
    ) -> Result<(), OpsError> {
        self.begin(reg);
        reg.on_message(now, endpoint, msg)?;
        self.pump_registry(now, reg);
        self.settle(now, reg);
        Ok(())
    }

    /// A Worker endpoint's execution host went away on its own.
    pub fn on_endpoint_closed(
        &mut self,
        now: Millis,
        reg: &mut Registry<V>,
        endpoint: EndpointId,
        reason: &str,
    ) -> Result<(), OpsError> {
        self.begin(reg);
        reg.on_endpoint_closed(now, endpoint, reason)?;
        self.pump_registry(now, reg);
        self.settle(now, reg);
        Ok(())
    }

    /// Drains the registry: messages for the operations endpoint are handled here, everything
    /// else goes to the host; then Worker-cell journals are read for new events.
    pub(crate) fn pump_registry(&mut self, now: Millis, reg: &mut Registry<V>) {
        loop {
            let outs: Vec<jobs::Output<V>> = reg.drain_outputs().collect();
            if outs.is_empty() {
                break;
            }
            for o in outs {
                match o {
                    jobs::Output::Send { endpoint, request }
                        if Some(endpoint) == self.ops_endpoint =>
                    {
                        self.on_ops_request(now, reg, request);
                    }
                    other => self.outputs.push_back(AppOutput::Jobs(other)),
                }
            }
            self.sync_jobs(now, reg);
        }
        self.sync_jobs(now, reg);
    }

    /// Reads new journal events of Worker-cell jobs and applies them to their calculations.
    pub(crate) fn sync_jobs(&mut self, now: Millis, reg: &mut Registry<V>) {
        let jobs: Vec<JobId> = self.job_calcs.keys().copied().collect();
        for job in jobs {
            while let Some(&(calc, seen)) = self.job_calcs.get(&job) {
                let Some(j) = reg.job(job) else {
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
                self.apply_job_event(now, reg, calc, kind);
            }
        }
    }

    pub(crate) fn apply_job_event(
        &mut self,
        now: Millis,
        reg: &mut Registry<V>,
        id: CalcId,
        kind: EventKind<V>,
    ) {
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
                    self.progress(now, reg, id, f);
                } else if !current {
                    self.late(now, id, "progress");
                }
            }
            EventKind::Partial { value } => {
                if current {
                    self.commit(now, reg, id, Some(value), true);
                } else {
                    self.late(now, id, "partial");
                }
            }
            EventKind::Finished { outcome } => {
                if current {
                    match outcome {
                        jobs::Outcome::Succeeded { value } => {
                            self.commit(now, reg, id, Some(value), false)
                        }
                        jobs::Outcome::Failed { message, code, .. } => {
                            self.bump();
                            self.fail_calc(now, id, message, code);
                            self.pump(now, reg);
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
                            self.pump(now, reg);
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
    pub fn poll_timeout(&self, reg: &Registry<V>) -> Option<Millis> {
        let own = self.op_timers.first_key().map(|(t, _)| *t);
        match (own, reg.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires every timer due at `now`: operation timeouts and the registry's timers.
    pub fn handle_timeout(&mut self, now: Millis, reg: &mut Registry<V>) {
        self.begin(reg);
        reg.handle_timeout(now);
        self.pump_registry(now, reg);
        while let Some(&(at, op)) = self.op_timers.first_key() {
            if at > now {
                break;
            }
            self.op_timers.pop_first();
            self.time_out(now, reg, op);
        }
        self.settle(now, reg);
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
}
