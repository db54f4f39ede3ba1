//! Operations: change published controls, observe the consequences.
//!
//! An application publishes **controls** (typed, validated values people and agents move),
//! **actions** (verbs with declared effects) and **cells** (scope-qualified calculation rules
//! with declared dependencies). The core owns the reactive graph: it decides which cells
//! recalculate after a batch of writes, gives every evaluation a **calculation identity**
//! `(graph instance, generation)`, and records each calculation's lifecycle at the source
//! (scheduled, started, progress, partial, succeeded, errored, superseded by whom and why,
//! held, owner disposed, skipped) before any projection into cell states. A recomputation to
//! an equal value is a no-op for dependents (equality gating, [`Equality`]).
//!
//! An **operation** is the agent-facing unit: writes validated all-or-nothing and applied in one
//! batch, a wait set of cells, and a result selection over a consistent snapshot. It correlates
//! the writes with the calculations they cause through value **provenance** (which control
//! versions every cell value was computed from), so it can say honestly when it is `settled`,
//! `superseded` (by which later writes, before or during execution), `failed`, `cancelled` or
//! `timed_out` — and never presents a replacement result as the answer.
//!
//! The host carries: it runs host-computed cells when told ([`AppOutput::Compute`]) and reports
//! back; Worker cells run as jobs of a [`crate::jobs::Registry`] the host keeps beside the app
//! and lends it per call (`reg: &mut Registry`, the [`crate::tools::Session`] shape; call order
//! on [`App`]). Slow observations can be hosted as registry jobs ([`App::host_as_job`]).
//!
//! # Call order
//!
//! In full on [`App`]; in short:
//!
//! ```text
//! let mut reg = Registry::new(..);  let mut app = App::new(..);
//! reg.open_endpoint(now, worker_spec);  app.load(now, &mut reg, spec)?;
//! inputs (each lends the registry): set / act / observe .. then flush(now, &mut reg),
//!     calc_*, on_worker_message, on_endpoint_closed, call_tool, handle_timeout(now, &mut reg)
//! after calling the registry directly: app.on_registry_outputs(now, &mut reg)
//! after every input:
//!     while let Some(out) = app.poll_output() {    // Compute → run the host cell, report
//!         ..                                        // with calc_*; OpFinished naming a selector
//!     }                                             // → record_result / record_no_result
//!     arm one timer at app.poll_timeout(&reg)
//! ```
//!
//! * [`control`] — controls, validation, actions.
//! * [`App`] — the graph, writes, calculations and operations.
//! * [`tools`] — the published agent tools (`report`, `set`, `act`, `observe`, `wait`,
//!   `inspect`, `cancel`) with JSON Schemas.
//! * [`claims`] — standing desires (latest wins), as distinct from submitted tasks (FIFO).
//! * [`Retention`] — how many finished records are kept; what is never pruned.

mod app;
mod bridge;
mod calc;
pub mod claims;
pub mod control;
mod graph;
mod operation;
mod reports;
mod retention;
mod schedule;
mod spec;
pub mod tools;
mod types;
#[cfg(feature = "conformance")]
pub mod vectors;
mod writes;

use thiserror::Error;

pub use app::{
    App, AppConfig, AppOutput, CellSnapshot, CellSpec, CellView, ComputeSpec, DepSpec, Equality,
    GateSpec, GraphSpec, ReportStatus, SelectorSpec, Snapshot,
};
pub use operation::{CellOutcome, ObserveRequest, OpOutcome, Operation, Selection, SupersedeInfo};
pub use retention::{Pruned, Retention};
pub use types::*;

use crate::jobs::JobsError;
use crate::value::Payload;

/// Errors of the application graph and its operations. Each has a stable code.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum OpsError {
    #[error("no control `{name}`; controls: {}", list(.known))]
    UnknownControl { name: String, known: Vec<String> },
    #[error("control `{control}`: {reason}")]
    InvalidControlValue { control: String, reason: String },
    #[error("no action `{name}`; actions: {}", list(.known))]
    UnknownAction { name: String, known: Vec<String> },
    #[error("action `{action}`: {reason}")]
    InvalidActionArgs { action: String, reason: String },
    #[error("no cell `{name}`; cells: {}", list(.known))]
    UnknownCell { name: String, known: Vec<String> },
    #[error("no selector `{name}`; selectors: {}", list(.known))]
    UnknownSelector { name: String, known: Vec<String> },
    #[error("no operation {0}")]
    UnknownOperation(OpId),
    #[error("no calculation {0}")]
    UnknownCalculation(CalcId),
    /// The record existed but was pruned by the retention policy ([`Retention`]).
    #[error("{0}")]
    Pruned(String),
    #[error("no tool `{name}`; tools: {}", list(.known))]
    UnknownTool { name: String, known: Vec<String> },
    #[error("invalid graph: {0}")]
    InvalidGraph(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The registry already serves another app: one app per registry (its outputs and its
    /// changed-journal set are each read by one consumer).
    #[error(
        "the job registry already serves another app; give each app its own registry (one app per registry)"
    )]
    RegistryInUse,
    #[error(transparent)]
    Jobs(#[from] JobsError),
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

impl OpsError {
    /// The stable string code, as JS `.code` and HTTP problem `code`.
    pub fn code(&self) -> &'static str {
        match self {
            OpsError::UnknownControl { .. } => "UNKNOWN_CONTROL",
            OpsError::InvalidControlValue { .. } => "INVALID_CONTROL_VALUE",
            OpsError::UnknownAction { .. } => "UNKNOWN_ACTION",
            OpsError::InvalidActionArgs { .. } => "INVALID_ACTION_ARGS",
            OpsError::UnknownCell { .. } => "UNKNOWN_CELL",
            OpsError::UnknownSelector { .. } => "UNKNOWN_SELECTOR",
            OpsError::UnknownOperation(_) => "UNKNOWN_OPERATION",
            OpsError::UnknownCalculation(_) => "UNKNOWN_CALCULATION",
            OpsError::Pruned(_) => "PRUNED",
            OpsError::UnknownTool { .. } => "UNKNOWN_TOOL",
            OpsError::InvalidGraph(_) => "INVALID_GRAPH",
            OpsError::InvalidArgument(_) => "INVALID_ARGUMENT",
            OpsError::RegistryInUse => "REGISTRY_IN_USE",
            OpsError::Jobs(e) => e.code(),
        }
    }
}

impl crate::ErrorCode for OpsError {
    fn code(&self) -> &'static str {
        OpsError::code(self)
    }
}

/// A payload the graph can also build: control values become payloads, and a calculation's
/// inputs are one object (what a Worker receives as its `run` payload).
pub trait OpsValue: Payload {
    /// The payload of a JSON value.
    fn from_json(v: &serde_json::Value) -> Self;
    /// A plain object with these fields, in order.
    fn object(fields: Vec<(String, Self)>) -> Self;
    /// Whether a recomputed cell value equals the previous one (equality gating: an equal
    /// value does not trigger dependents). Structural by default.
    fn equal_value(&self, other: &Self) -> bool {
        self.same_as(other)
    }
}

impl OpsValue for serde_json::Value {
    fn from_json(v: &serde_json::Value) -> Self {
        v.clone()
    }
    fn object(fields: Vec<(String, Self)>) -> Self {
        serde_json::Value::Object(crate::value::map_of(fields.into_iter()))
    }
}

#[cfg(test)]
mod tests;
