//! Reads and reports: receipts, cell states and views, snapshots, calculation records, `report`.

use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Value, json};

use super::control::ControlValue;
use super::types::*;
use super::{OpsError, OpsValue};
use crate::Mono;
use crate::jobs::{self, EndpointId, EndpointSpec, Hello, JobId, Origin, Registry, Submit};
use crate::value::Payload;

use super::app::*;

impl<V: OpsValue> App<V> {
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
        self.receipt_record(id).map_or(Value::Null, |r| {
            serde_json::to_value(r).unwrap_or(Value::Null)
        })
    }

    /// The receipt of a write ([`App::receipt_json`]) as a serializable record: written
    /// straight to text without building a `Value` first.
    pub fn receipt_record(&self, id: WriteId) -> Option<ReceiptRecord<'_>> {
        let w = self.write_record(id)?;
        Some(ReceiptRecord {
            w,
            control: &self.controls[w.control].name,
        })
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
    pub(crate) fn upstream_error(&self, x: usize) -> Option<(String, CellError)> {
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
        now: Mono,
        reg: &mut Registry<V>,
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
        self.begin(reg);
        let job = reg.submit(now, req)?.job;
        self.pump_registry(now, reg);
        Ok(job)
    }

    pub(crate) fn ensure_ops_endpoint(&mut self, now: Mono, reg: &mut Registry<V>) -> EndpointId {
        if let Some(e) = self.ops_endpoint {
            return e;
        }
        let mut spec = EndpointSpec::new("weft/ops", "operations");
        spec.hello = Hello::Declared(jobs::Capabilities {
            input: false,
            cancel_ack: true,
            error_code: true,
            batch: false,
        });
        let e = reg.open_endpoint(now, spec);
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

/// A write's receipt: `{write, control, requested, accepted, adjusted, by, acceptedAt, status,
/// revision?, changed?, overwrittenBy?, operation?, invocation?, toolCall?}`, serialized with
/// its keys in sorted order (the order of a `serde_json` map, so its text and its `Value` agree).
pub struct ReceiptRecord<'a> {
    w: &'a WriteRecord,
    control: &'a str,
}

impl Serialize for ReceiptRecord<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let w = self.w;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("accepted", &w.accepted.json())?;
        m.serialize_entry("acceptedAt", &w.accepted_at)?;
        m.serialize_entry("adjusted", &w.adjusted)?;
        m.serialize_entry("by", &w.actor.by)?;
        if let WriteStatus::Effective { changed, .. } = w.status {
            m.serialize_entry("changed", &changed)?;
        }
        m.serialize_entry("control", self.control)?;
        if let Some(inv) = w.invocation {
            m.serialize_entry("invocation", &inv.0)?;
        }
        if let Some(op) = w.op {
            m.serialize_entry("operation", &op.0)?;
        }
        if let WriteStatus::Overwritten { by } = w.status {
            m.serialize_entry("overwrittenBy", &by.0)?;
        }
        m.serialize_entry("requested", &w.requested.json())?;
        if let WriteStatus::Effective { revision, .. } = w.status {
            m.serialize_entry("revision", &revision)?;
        }
        let status = match w.status {
            WriteStatus::Staged => "staged",
            WriteStatus::Effective { .. } => "effective",
            WriteStatus::Overwritten { .. } => "overwritten",
            WriteStatus::Discarded => "discarded",
        };
        m.serialize_entry("status", status)?;
        if let Some(tc) = &w.actor.tool_call {
            m.serialize_entry("toolCall", tc)?;
        }
        m.serialize_entry("write", &w.id.0)?;
        m.end()
    }
}
