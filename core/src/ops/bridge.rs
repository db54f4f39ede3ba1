//! The registry bridge (the app borrows the job registry per call) and timers.

use super::types::*;
use super::{OpsError, OpsValue};
use crate::Mono;
use crate::jobs::{self, EndpointId, EventKind, JobId, Registry};

use super::app::*;

impl<V: OpsValue> App<V> {
    // ----- the job registry bridge --------------------------------------------------------------

    /// A message from a Worker endpoint (forwarded to the registry; Worker cells see it).
    pub fn on_worker_message(
        &mut self,
        now: Mono,
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
        now: Mono,
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
    /// else goes to the host; then Worker-cell journals are read for new events. Repeats until
    /// the registry has no output and no changed journal, and no pass left a job for the next
    /// one: on return, everything the registry did is applied.
    pub(crate) fn pump_registry(&mut self, now: Mono, reg: &mut Registry<V>) {
        loop {
            let outs: Vec<jobs::Output<V>> = reg.drain_outputs().collect();
            if outs.is_empty() && self.changed_jobs.is_empty() && !reg.has_changed_jobs() {
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
    }

    /// Reads new journal events of the Worker-cell jobs whose journals changed (the registry
    /// reports them: [`Registry::take_changed_jobs`], the app watches every job it submits) and
    /// applies them to their calculations: O(changed jobs), never a scan of every job.
    ///
    /// One pass takes the jobs in id order, each read to its journal's end. A job that changes
    /// during the pass is read in this pass when its turn has not come yet and it was
    /// submitted before the pass began; otherwise it is kept (`changed_jobs`, only jobs the
    /// app still follows) for the next pass, which [`App::pump_registry`] runs before it
    /// returns (it loops while a pass kept one).
    pub(crate) fn sync_jobs(&mut self, now: Mono, reg: &mut Registry<V>) {
        let mut pending = std::mem::take(&mut self.changed_jobs);
        pending.extend(reg.take_changed_jobs());
        // Jobs submitted during this pass have larger ids: they wait for the next pass.
        let limit = self.last_job;
        let mut cursor: Option<JobId> = None;
        loop {
            let after = cursor.map_or(JobId(0), |c| JobId(c.0 + 1));
            let Some(job) = pending
                .range(after..)
                .next()
                .copied()
                .filter(|j| limit.is_some_and(|l| *j <= l))
            else {
                break;
            };
            pending.remove(&job);
            cursor = Some(job);
            self.sync_job(now, reg, job);
            pending.extend(reg.take_changed_jobs());
        }
        // What changed behind the cursor or was submitted during the pass, for the next pass;
        // only jobs the app still follows.
        pending.retain(|j| self.job_calcs.contains_key(j));
        self.changed_jobs = pending;
    }

    /// Reads one Worker-cell job's new journal events (from the sequence number after the last
    /// one read) and applies them; forgets the job once it is finished and read, or gone.
    fn sync_job(&mut self, now: Mono, reg: &mut Registry<V>, job: JobId) {
        #[cfg(test)]
        if self.job_calcs.contains_key(&job) {
            self.journals_read += 1;
        }
        while let Some(&(calc, seen)) = self.job_calcs.get(&job) {
            let Some(j) = reg.job(job) else {
                self.job_calcs.remove(&job);
                self.calc_unref(calc);
                break;
            };
            let journal = j.journal();
            let next = journal.partition_point(|e| e.seq <= seen);
            let Some(ev) = journal.get(next) else {
                if j.is_finished() {
                    self.job_calcs.remove(&job);
                    reg.unwatch_journal(job);
                    self.calc_unref(calc);
                }
                break;
            };
            let (kind, seq) = (ev.kind.clone(), ev.seq);
            self.job_calcs.insert(job, (calc, seq));
            self.apply_job_event(now, reg, calc, kind);
        }
    }

    pub(crate) fn apply_job_event(
        &mut self,
        now: Mono,
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

    /// The earliest time at which [`App::handle_timeout`] has something to do: operation
    /// timeouts, the waits of published tool calls and the registry's timers.
    #[must_use]
    pub fn poll_timeout(&self, reg: &Registry<V>) -> Option<Mono> {
        [
            self.op_timers.first_key().map(|(t, _)| *t),
            self.tool_waits.next_deadline(),
            reg.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Fires every timer due at `now`: the registry's timers, operation timeouts, then the
    /// waits of tool calls (a call whose operation ended at the same time replies with its
    /// outcome, once).
    pub fn handle_timeout(&mut self, now: Mono, reg: &mut Registry<V>) {
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
        // Last: an operation that ended at this instant gives its waiting calls its outcome.
        if self.fire_tool_timers(now, reg) {
            self.settle(now, reg);
        }
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
