//! The scheduler: which cells recalculate, gates, equality gating, starting and ending calculations.

use super::OpsValue;
use super::types::*;
use crate::Mono;
use crate::jobs::{Origin, Registry, Submit};

use super::app::*;

impl<V: OpsValue> App<V> {
    // ----- scheduling ---------------------------------------------------------------------------

    pub(crate) fn gate_is_open(&self, x: usize) -> bool {
        match &self.cells[x].gate {
            None => true,
            Some((c, open)) => open.contains(&self.controls[*c].value),
        }
    }

    pub(crate) fn schedule_all(&mut self, now: Mono, reg: &mut Registry<V>, trigger: Trigger) {
        let seeds = vec![Some(trigger); self.cells.len()];
        self.propagate(now, reg, seeds);
    }

    /// Walks the cells in topological order: every dirty cell gets a new calculation (or holds,
    /// when its gate is closed), and a cell that got a new calculation dirties its dependents.
    pub(crate) fn propagate(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        mut dirty: Vec<Option<Trigger>>,
    ) {
        for i in 0..self.order.len() {
            let x = self.order[i];
            let Some(trigger) = dirty[x].take() else {
                continue;
            };
            if let Some(calc) = self.reschedule(now, reg, x, trigger) {
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
        self.pump(now, reg);
    }

    pub(crate) fn reschedule(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        x: usize,
        trigger: Trigger,
    ) -> Option<CalcId> {
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
                    reg,
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
                reg,
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
    pub(crate) fn end_calc(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        id: CalcId,
        end: CalcEnd,
        event: CalcEventKind,
    ) {
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
            let _ = reg.cancel(now, job, &detail);
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
    pub(crate) fn pump(&mut self, now: Mono, reg: &mut Registry<V>) {
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
                    self.start_calc(now, reg, x, c);
                }
            }
        }
        self.pump_registry(now, reg);
    }

    /// The identities of a cell's inputs now, aligned with its deps.
    pub(crate) fn reads_now(&self, x: usize) -> impl Iterator<Item = u64> + '_ {
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
    pub(crate) fn value_stands(&self, x: usize) -> bool {
        self.cells[x].value.as_ref().is_some_and(|v| {
            !v.partial && v.reads.iter().copied().eq(self.reads_now(x)) && self.upstream_final(x)
        })
    }

    /// The versions of every relevant control a calculation of the cell would see now: the
    /// stalest one, directly or through an upstream value (a held upstream keeps an old value:
    /// the result then reflects the old input).
    pub(crate) fn provenance_now(&self, x: usize) -> Vec<Revision> {
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
    pub(crate) fn skip_calc(&mut self, now: Mono, x: usize, id: CalcId) {
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
    pub(crate) fn revalidate(&mut self, from: usize) {
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

    pub(crate) fn start_calc(&mut self, now: Mono, reg: &mut Registry<V>, x: usize, id: CalcId) {
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
                    ..Origin::default()
                };
                match reg.submit(now, req) {
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
                        self.last_job = Some(s.job);
                        // Just submitted: it is live, watching cannot fail.
                        let _ = reg.watch_journal(s.job);
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
}
