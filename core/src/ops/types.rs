//! Identities, records and events of the application graph and its operations.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::control::{Adjustment, ControlValue};
use crate::Mono;
use crate::jobs::JobId;

/// The application revision: bumped by every observable state change (an effective batch of
/// writes, a committed cell value, an error, a hold). A snapshot is taken at one revision.
pub type Revision = u64;

numeric_id!(
    /// One control/observation operation: accepted writes plus the readbacks being observed.
    OpId,
    "op-"
);
numeric_id!(
    /// One accepted control write (its receipt).
    WriteId,
    "w-"
);
numeric_id!(
    /// One invocation of a published action.
    InvocationId,
    "act-"
);

/// One evaluation of a cell: the graph instance that ran it and the instance's generation
/// counter. Unique across graph hot replacement because instance ids are never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CalcId {
    pub instance: u64,
    pub generation: u64,
}

impl fmt::Display for CalcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.instance, self.generation)
    }
}

impl CalcId {
    /// The JSON form: `"instance:generation"`.
    pub fn to_json(&self) -> Value {
        json!(self.to_string())
    }

    /// Parses `"instance:generation"`.
    pub fn parse(s: &str) -> Option<CalcId> {
        let (i, g) = s.split_once(':')?;
        Some(CalcId {
            instance: i.parse().ok()?,
            generation: g.parse().ok()?,
        })
    }
}

/// Who made a write or started an operation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Actor {
    /// `user`, `agent`, `app`, ... (free text, shown in intervening-change reports).
    pub by: String,
    /// The tool call that made it, when an agent did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<String>,
}

impl Actor {
    /// An actor with just a name.
    pub fn new(by: impl Into<String>) -> Self {
        Actor {
            by: by.into(),
            tool_call: None,
        }
    }
}

/// A cell's state, as AIUI defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellState {
    /// Never had a value; gate closed or an upstream has no value yet.
    Unresolved,
    /// Never had a value; its first calculation is queued or running.
    Pending,
    /// Has a value from its current calculation, which is still yielding.
    Streaming,
    /// Has a value; a newer calculation is pending or an upstream is recomputing.
    Refreshing,
    /// Has a value; the gate is closed — nothing is running or coming.
    Held,
    /// Has a value and nothing is in flight.
    Ready,
    /// The current calculation (or an upstream's) failed; the latest value survives.
    Errored,
}

impl CellState {
    /// The stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            CellState::Unresolved => "unresolved",
            CellState::Pending => "pending",
            CellState::Streaming => "streaming",
            CellState::Refreshing => "refreshing",
            CellState::Held => "held",
            CellState::Ready => "ready",
            CellState::Errored => "errored",
        }
    }
}

/// Why a calculation was created.
#[derive(Clone, Debug, PartialEq)]
pub enum Trigger {
    /// The graph instance was built.
    Initial,
    /// These controls changed at the revision the calculation was scheduled.
    Inputs { changed: Vec<String> },
    /// An upstream cell committed a new value.
    Upstream { cell: String, calc: CalcId },
    /// An action asked for a rerun with unchanged inputs.
    Rerun { action: String },
    /// The gate reopened.
    GateOpened { control: String },
}

impl Trigger {
    fn to_json(&self) -> Value {
        match self {
            Trigger::Initial => json!({"cause": "initial"}),
            Trigger::Inputs { changed } => json!({"cause": "inputs", "changed": changed}),
            Trigger::Upstream { cell, calc } => {
                json!({"cause": "upstream", "cell": cell, "calc": calc.to_json()})
            }
            Trigger::Rerun { action } => json!({"cause": "rerun", "action": action}),
            Trigger::GateOpened { control } => json!({"cause": "gate_opened", "control": control}),
        }
    }
}

/// Where a calculation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CalcState {
    /// Created; waiting for its upstream cells to have current values.
    Scheduled,
    /// Submitted as a Worker job that its endpoint has not dispatched yet.
    Queued,
    /// Running (the host or the worker has it).
    Running,
    /// Ended; see the end.
    Ended(CalcEnd),
}

/// How a calculation ended. Every abort has a semantic reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CalcEnd {
    Succeeded,
    Errored,
    /// A newer calculation of the same cell replaced it.
    Superseded,
    /// The cell's gate closed.
    Held,
    /// Its graph instance was replaced or disposed.
    Disposed,
    /// Never started: its inputs are the ones its cell's value was computed from (an upstream
    /// recomputed to an equal value), so that value stands.
    Skipped,
}

impl CalcState {
    /// `scheduled`, `queued`, `running` or the end.
    pub fn as_str(&self) -> &'static str {
        match self {
            CalcState::Scheduled => "scheduled",
            CalcState::Queued => "queued",
            CalcState::Running => "running",
            CalcState::Ended(CalcEnd::Succeeded) => "succeeded",
            CalcState::Ended(CalcEnd::Errored) => "errored",
            CalcState::Ended(CalcEnd::Superseded) => "superseded",
            CalcState::Ended(CalcEnd::Held) => "held",
            CalcState::Ended(CalcEnd::Disposed) => "owner_disposed",
            CalcState::Ended(CalcEnd::Skipped) => "skipped",
        }
    }

    /// Whether the calculation has ended.
    pub fn is_ended(&self) -> bool {
        matches!(self, CalcState::Ended(_))
    }

    /// Whether the calculation's work began (the host or a worker received it).
    pub fn has_started(&self) -> bool {
        matches!(self, CalcState::Running)
    }
}

/// What happened to a calculation, recorded at the source before any projection.
#[derive(Clone, Debug, PartialEq)]
pub enum CalcEventKind {
    Scheduled {
        trigger: Trigger,
        replaces: Option<CalcId>,
    },
    /// Submitted to the job registry (Worker cells).
    Submitted {
        job: JobId,
    },
    Started,
    Progress {
        value: f64,
    },
    /// The calculation yielded a partial value (the value itself lives in the cell).
    /// `unchanged`: equal to the cell's value before it, so dependents were not triggered.
    Partial {
        index: u32,
        unchanged: bool,
    },
    /// The calculation's result was committed. `unchanged`: it equals the cell's previous
    /// value, so it is a processed no-op for dependents (they keep their values).
    /// `last_partial`: the result is the last partial value (a finished stream), which was not
    /// committed again.
    Succeeded {
        unchanged: bool,
        last_partial: bool,
    },
    Errored {
        message: String,
        code: Option<String>,
    },
    /// Replaced by `by`, which was created because of `cause`.
    Superseded {
        by: CalcId,
        cause: Trigger,
    },
    /// Aborted because the cell's gate closed.
    Held {
        control: String,
        value: ControlValue,
    },
    /// Aborted because its graph instance went away.
    OwnerDisposed {
        reason: String,
    },
    /// Ended before starting: its inputs equal the ones its cell's value was computed from.
    Skipped,
    /// A result or progress that arrived after the calculation ended; never adopted.
    Late {
        what: &'static str,
    },
    /// What the Worker job finally did after the calculation was aborted (evidence only).
    JobEnded {
        outcome: String,
        summary: String,
    },
}

impl CalcEventKind {
    /// The stable type name.
    pub fn name(&self) -> &'static str {
        match self {
            CalcEventKind::Scheduled { .. } => "scheduled",
            CalcEventKind::Submitted { .. } => "submitted",
            CalcEventKind::Started => "started",
            CalcEventKind::Progress { .. } => "progress",
            CalcEventKind::Partial { .. } => "partial",
            CalcEventKind::Succeeded { .. } => "succeeded",
            CalcEventKind::Errored { .. } => "errored",
            CalcEventKind::Superseded { .. } => "superseded",
            CalcEventKind::Held { .. } => "held",
            CalcEventKind::OwnerDisposed { .. } => "owner_disposed",
            CalcEventKind::Skipped => "skipped",
            CalcEventKind::Late { .. } => "late",
            CalcEventKind::JobEnded { .. } => "job_ended",
        }
    }
}

/// One record of a calculation's journal.
#[derive(Clone, Debug, PartialEq)]
pub struct CalcEvent {
    pub seq: u32,
    pub at: Mono,
    pub revision: Revision,
    pub kind: CalcEventKind,
}

impl CalcEvent {
    /// The JSON form: `{"seq","at","revision","type", ...}`.
    pub fn to_json(&self) -> Value {
        let mut o = json!({"seq": self.seq, "at": self.at, "revision": self.revision, "type": self.kind.name()});
        let m = o.as_object_mut().expect("object");
        match &self.kind {
            CalcEventKind::Scheduled { trigger, replaces } => {
                m.insert("trigger".into(), trigger.to_json());
                if let Some(r) = replaces {
                    m.insert("replaces".into(), r.to_json());
                }
            }
            CalcEventKind::Submitted { job } => {
                m.insert("job".into(), json!(job.0));
            }
            CalcEventKind::Progress { value } => {
                m.insert("value".into(), json!(value));
            }
            CalcEventKind::Partial { index, unchanged } => {
                m.insert("index".into(), json!(index));
                m.insert("unchanged".into(), json!(unchanged));
            }
            CalcEventKind::Succeeded {
                unchanged,
                last_partial,
            } => {
                m.insert("unchanged".into(), json!(unchanged));
                if *last_partial {
                    m.insert("lastPartial".into(), json!(true));
                }
            }
            CalcEventKind::Skipped => {
                m.insert(
                    "reason".into(),
                    json!("inputs unchanged: the current value was computed from them"),
                );
            }
            CalcEventKind::Errored { message, code } => {
                m.insert("message".into(), json!(message));
                m.insert("code".into(), json!(code));
            }
            CalcEventKind::Superseded { by, cause } => {
                m.insert("by".into(), by.to_json());
                m.insert("cause".into(), cause.to_json());
            }
            CalcEventKind::Held { control, value } => {
                m.insert("control".into(), json!(control));
                m.insert("value".into(), value.to_json());
            }
            CalcEventKind::OwnerDisposed { reason } => {
                m.insert("reason".into(), json!(reason));
            }
            CalcEventKind::Late { what } => {
                m.insert("what".into(), json!(what));
            }
            CalcEventKind::JobEnded { outcome, summary } => {
                m.insert("outcome".into(), json!(outcome));
                m.insert("summary".into(), json!(summary));
            }
            CalcEventKind::Started => {}
        }
        o
    }
}

/// Where a write is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteStatus {
    /// Accepted and staged for the next flush.
    Staged,
    /// Became effective at `revision`; `changed` is false for a write of the current value
    /// (a no-op, which is still a processed outcome).
    Effective { revision: Revision, changed: bool },
    /// A later write to the same control in the same batch replaced it before it became
    /// effective.
    Overwritten { by: WriteId },
    /// An operation's or action's batch was discarded before it became effective.
    Discarded,
}

/// The receipt of one accepted write.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteRecord {
    pub id: WriteId,
    pub control: usize,
    pub requested: ControlValue,
    pub accepted: ControlValue,
    pub adjusted: Vec<Adjustment>,
    pub actor: Actor,
    pub op: Option<OpId>,
    pub invocation: Option<InvocationId>,
    pub accepted_at: Mono,
    pub status: WriteStatus,
    /// Retained operations naming it (see `Retention`).
    pub(crate) refs: u32,
}

/// Caller policy when a relevant input changes while waiting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnSupersede {
    /// End the observation as `superseded` (the default): the replacement result is never
    /// presented as the answer to this request.
    #[default]
    End,
    /// Keep observing the current state; the outcome names the inputs its result reflects.
    Follow,
}

/// Caller policy when an awaited cell fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// End promptly with the error and the other cells' statuses (the default).
    #[default]
    End,
    /// Wait until every awaited cell has an outcome, then report them all.
    Collect,
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpOutcomeKind {
    Settled,
    Superseded,
    Failed,
    Cancelled,
    TimedOut,
}

impl OpOutcomeKind {
    /// The stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            OpOutcomeKind::Settled => "settled",
            OpOutcomeKind::Superseded => "superseded",
            OpOutcomeKind::Failed => "failed",
            OpOutcomeKind::Cancelled => "cancelled",
            OpOutcomeKind::TimedOut => "timed_out",
        }
    }
}

/// How far a superseded request got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SupersedeStage {
    /// A later write in the same batch replaced the request's write: it never took effect.
    BeforeEffective,
    /// The writes took effect but no calculation reflecting them had started.
    BeforeExecution,
    /// A calculation reflecting the request was running (or had produced partial results).
    DuringExecution,
}

/// Why an awaited cell cannot give the requested result.
#[derive(Clone, Debug, PartialEq)]
pub enum FailureReason {
    /// The cell's (or an upstream's) current calculation failed.
    Errored {
        cell: String,
        calc: Option<CalcId>,
        message: String,
        code: Option<String>,
    },
    /// The cell's (or an upstream's) gate is closed: nothing is running or coming.
    Held {
        cell: String,
        control: String,
        value: ControlValue,
    },
    /// The graph was disposed, or replaced by one without this cell.
    Removed { reason: String },
}

impl FailureReason {
    /// The JSON form.
    pub fn to_json(&self) -> Value {
        match self {
            FailureReason::Errored {
                cell,
                calc,
                message,
                code,
            } => json!({"reason": "errored", "cell": cell, "calc": calc.map(|c| c.to_json()),
                        "message": message, "code": code}),
            FailureReason::Held {
                cell,
                control,
                value,
            } => json!({"reason": "held", "cell": cell,
                "message": format!("{cell} is held: its gate control {control} is {value}; nothing will run"),
                "control": control, "value": value.to_json()}),
            FailureReason::Removed { reason } => json!({"reason": "removed", "message": reason}),
        }
    }
}

/// One record of an operation's journal.
#[derive(Clone, Debug, PartialEq)]
pub struct OpEvent {
    pub seq: u32,
    pub at: Mono,
    pub revision: Revision,
    pub kind: OpEventKind,
}

/// What happened to an operation.
#[derive(Clone, Debug, PartialEq)]
pub enum OpEventKind {
    /// Every write was validated; these are the receipts (values as accepted).
    Accepted { writes: Vec<WriteId> },
    /// The writes became effective at the event's revision, batched with `coalesced`.
    Effective {
        coalesced: Vec<WriteId>,
        noop: Vec<WriteId>,
    },
    /// A calculation in the awaited cells' closure was scheduled for this request.
    Calculation { cell: String, calc: CalcId },
    /// An awaited cell reached the requested state (`noop`: its existing value already
    /// reflected the request, per its provenance).
    Processed {
        cell: String,
        calc: CalcId,
        noop: bool,
    },
    /// An awaited cell that was processed is no longer in the requested state: a new
    /// calculation (`calc`, e.g. an action's rerun of it or of an upstream) replaced the value
    /// `was` recorded. The operation waits for it again; settlement is judged on one state.
    Reopened {
        cell: String,
        was: CalcId,
        calc: Option<CalcId>,
    },
    /// An awaited cell failed.
    CellFailed { failure: FailureReason },
    /// A relevant input changed after the request took effect.
    Intervening {
        writes: Vec<WriteId>,
        controls: Vec<String>,
    },
    /// The graph instance was replaced; the observation continues on the new instance.
    GraphReplaced { from: u64, to: u64 },
    /// The observation is hosted as this job.
    Hosted { job: JobId },
    /// The one terminal outcome.
    Finished { outcome: OpOutcomeKind },
}

impl OpEventKind {
    /// The stable type name.
    pub fn name(&self) -> &'static str {
        match self {
            OpEventKind::Accepted { .. } => "accepted",
            OpEventKind::Effective { .. } => "effective",
            OpEventKind::Calculation { .. } => "calculation",
            OpEventKind::Processed { .. } => "processed",
            OpEventKind::Reopened { .. } => "reopened",
            OpEventKind::CellFailed { .. } => "cell_failed",
            OpEventKind::Intervening { .. } => "intervening",
            OpEventKind::GraphReplaced { .. } => "graph_replaced",
            OpEventKind::Hosted { .. } => "hosted",
            OpEventKind::Finished { .. } => "outcome",
        }
    }
}

impl OpEvent {
    /// The JSON form: `{"seq","at","revision","type", ...}`.
    pub fn to_json(&self) -> Value {
        let mut o = json!({"seq": self.seq, "at": self.at, "revision": self.revision, "type": self.kind.name()});
        let m = o.as_object_mut().expect("object");
        let ids = |v: &Vec<WriteId>| json!(v.iter().map(|w| w.0).collect::<Vec<_>>());
        match &self.kind {
            OpEventKind::Accepted { writes } => {
                m.insert("writes".into(), ids(writes));
            }
            OpEventKind::Effective { coalesced, noop } => {
                m.insert("coalesced".into(), ids(coalesced));
                m.insert("noop".into(), ids(noop));
            }
            OpEventKind::Calculation { cell, calc } => {
                m.insert("cell".into(), json!(cell));
                m.insert("calc".into(), calc.to_json());
            }
            OpEventKind::Processed { cell, calc, noop } => {
                m.insert("cell".into(), json!(cell));
                m.insert("calc".into(), calc.to_json());
                m.insert("noop".into(), json!(noop));
            }
            OpEventKind::Reopened { cell, was, calc } => {
                m.insert("cell".into(), json!(cell));
                m.insert("was".into(), was.to_json());
                m.insert("calc".into(), calc.map(|c| c.to_json()).into());
            }
            OpEventKind::CellFailed { failure } => {
                if let Value::Object(f) = failure.to_json() {
                    m.extend(f);
                }
            }
            OpEventKind::Intervening { writes, controls } => {
                m.insert("writes".into(), ids(writes));
                m.insert("controls".into(), json!(controls));
            }
            OpEventKind::GraphReplaced { from, to } => {
                m.insert("from".into(), json!(from));
                m.insert("to".into(), json!(to));
            }
            OpEventKind::Hosted { job } => {
                m.insert("job".into(), json!(job.0));
            }
            OpEventKind::Finished { outcome } => {
                m.insert("outcome".into(), json!(outcome.as_str()));
            }
        }
        o
    }
}
