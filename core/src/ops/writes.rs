//! Writes: staging, validation, actions and `flush` (one batch per revision).

use super::control::{ControlValue, Effect, EffectValue};
use super::types::*;
use super::{OpsError, OpsValue};
use crate::Mono;
use crate::jobs::Registry;
use crate::value::Payload;

use super::app::*;

impl<V: OpsValue> App<V> {
    // ----- inputs: writes -----------------------------------------------------------------------

    /// Starts a new input: the first state change of this input bumps the revision once.
    pub(crate) fn begin(&mut self, reg: &mut Registry<V>) {
        self.bumped = false;
        self.prune(reg);
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
        now: Mono,
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

    pub(crate) fn stage_checked(
        &mut self,
        now: Mono,
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
        now: Mono,
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
        now: Mono,
        writes: &[(String, P)],
        actor: Actor,
    ) -> Result<Vec<WriteId>, OpsError> {
        self.stage_writes(now, &requested(writes), &actor, None, None)
    }

    /// Invokes a published action: validates the arguments and every effect first, then stages
    /// the effects' writes and reruns as one batch (all-or-nothing).
    pub fn act<P: Payload>(
        &mut self,
        now: Mono,
        name: &str,
        args: &[(String, P)],
        actor: Actor,
    ) -> Result<(InvocationId, Vec<WriteId>), OpsError> {
        self.act_requested(now, name, &requested(args), actor)
    }

    pub(crate) fn act_requested(
        &mut self,
        now: Mono,
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
    pub fn flush(&mut self, now: Mono, reg: &mut Registry<V>) -> Option<Revision> {
        self.begin(reg);
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
        let fresh = self.ops_on_batch(now, reg, &staged, &changed);
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
        self.propagate(now, reg, seeds);
        self.link_fresh(now, fresh);
        self.settle(now, reg);
        revision
    }

    /// A write that is retained (staged, or named by a retained operation).
    pub(crate) fn write(&self, id: WriteId) -> &WriteRecord {
        self.write_record(id)
            .expect("referenced writes are retained")
    }

    pub(crate) fn write_mut(&mut self, id: WriteId) -> &mut WriteRecord {
        let i = id.0.checked_sub(self.write_base).expect("retained") as usize;
        self.writes[i]
            .as_mut()
            .expect("referenced writes are retained")
    }
}
