//! Identities, transcript messages, call outcomes and outputs of agent sessions.

use serde_json::{Value, json};

use crate::Mono;
use crate::jobs::{JobId, Note};
use crate::value::Payload;

numeric_id!(
    /// One turn of an agent session: admission, then model steps and tool batches until the
    /// model answers without calls (or the turn is interrupted or fails).
    TurnId,
    "turn-"
);
numeric_id!(
    /// One model step: one request to the model with the tool snapshot it was shown.
    StepId,
    "step-"
);
numeric_id!(
    /// The scheduler's record of one tool call of one step. Hosts report results by it; a
    /// report for an invocation that already has its result is late evidence, never a
    /// second result.
    InvocationId,
    "invocation-"
);
numeric_id!(
    /// A handler binding. A tool's declaration names its handler; a step's snapshot keeps the
    /// binding it advertised even after the tool is replaced or removed.
    HandlerId,
    "handler-"
);
numeric_id!(
    /// One submitted task. Tasks run in submission order, one turn each.
    TaskId,
    "task-"
);

/// Why a turn started. Only explicit choices start turns: a submitted task, a job that was
/// submitted with `wake`, or an application's `wake` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnCause {
    /// The next submitted task.
    Task(TaskId),
    /// A job submitted with `wake: true` finished.
    JobWake(JobId),
    /// The application asked the agent to wake.
    AppWake(String),
}

impl TurnCause {
    /// The JSON form: `{"task": n}`, `{"wake": "job", "job": n}` or `{"wake": "app", "reason"}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("session types serialize to JSON")
    }
}

/// How a turn ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnEnd {
    /// The model answered without tool calls.
    Completed,
    /// The turn was interrupted; every call of the interrupted step has an explicit outcome.
    Interrupted { reason: String },
    /// The host reported that the model step failed.
    ModelFailed { message: String },
    /// The turn reached the session's step limit.
    StepLimit { steps: u32 },
}

impl TurnEnd {
    /// `completed`, `interrupted`, `model_failed` or `step_limit`.
    pub fn as_str(&self) -> &'static str {
        match self {
            TurnEnd::Completed => "completed",
            TurnEnd::Interrupted { .. } => "interrupted",
            TurnEnd::ModelFailed { .. } => "model_failed",
            TurnEnd::StepLimit { .. } => "step_limit",
        }
    }

    /// The JSON form: `{"end": name, ...details}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("session types serialize to JSON")
    }
}

/// One tool call as the model selected it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The model's id for the call; results carry it back. Unique within a step.
    pub id: String,
    /// The tool's name as advertised in the step's snapshot.
    pub name: String,
    /// The arguments (a JSON object when well-formed).
    pub arguments: Value,
    /// Set when the model's argument text was not JSON; the call is refused without starting.
    pub malformed: Option<String>,
}

impl ToolCall {
    /// A call with JSON arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
            malformed: None,
        }
    }

    /// A call whose arguments arrive as text (as most model APIs send them).
    pub fn from_text(id: impl Into<String>, name: impl Into<String>, text: &str) -> Self {
        // The byte parser: the one serde_json reader the core uses (one compiled parser).
        match serde_json::from_slice(text.as_bytes()) {
            Ok(arguments) => ToolCall::new(id, name, arguments),
            Err(e) => ToolCall {
                id: id.into(),
                name: name.into(),
                arguments: Value::String(text.to_owned()),
                malformed: Some(format!("arguments are not valid JSON: {e}")),
            },
        }
    }

    /// The JSON form: `{"id","name","arguments"}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("session types serialize to JSON")
    }

    /// Parses `{"id"?, "name", "arguments"?}`; `arguments` may be an object or JSON text.
    pub fn from_json(v: &Value) -> Result<ToolCall, String> {
        let name = v["name"]
            .as_str()
            .ok_or("a tool call needs a string `name`")?;
        let id = match &v["id"] {
            Value::Null => "",
            Value::String(s) => s,
            other => return Err(format!("a tool call `id` must be a string, got {other}")),
        };
        Ok(match &v["arguments"] {
            Value::String(text) => ToolCall::from_text(id, name, text),
            Value::Null => ToolCall::new(id, name, json!({})),
            other => ToolCall::new(id, name, other.clone()),
        })
    }
}

/// What a model step answered: text and/or tool calls, in the model's order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelResponse {
    pub text: Option<String>,
    pub calls: Vec<ToolCall>,
    /// Token counts the provider reported for the step, if any (recorded as a
    /// [`Output::ModelUsage`] of the turn).
    pub usage: Option<crate::model::Usage>,
}

impl ModelResponse {
    /// A text-only answer (ends the turn).
    pub fn text(text: impl Into<String>) -> Self {
        ModelResponse {
            text: Some(text.into()),
            calls: vec![],
            usage: None,
        }
    }

    /// An answer that calls tools.
    pub fn calls(calls: Vec<ToolCall>) -> Self {
        ModelResponse {
            text: None,
            calls,
            usage: None,
        }
    }

    /// Parses `{"text"?, "calls"?: [{"id"?, "name", "arguments"?}], "usage"?: {"inputTokens",
    /// "outputTokens"}}`.
    pub fn from_json(v: &Value) -> Result<ModelResponse, String> {
        if !v.is_object() {
            return Err(format!("a model response must be an object, got {v}"));
        }
        let text = match &v["text"] {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => return Err(format!("`text` must be a string, got {other}")),
        };
        let calls = match &v["calls"] {
            Value::Null => vec![],
            Value::Array(a) => a
                .iter()
                .map(ToolCall::from_json)
                .collect::<Result<_, _>>()?,
            other => return Err(format!("`calls` must be a list, got {other}")),
        };
        let usage = match &v["usage"] {
            Value::Null => None,
            u => Some(crate::model::Usage {
                input_tokens: u["inputTokens"].as_u64().unwrap_or(0),
                output_tokens: u["outputTokens"].as_u64().unwrap_or(0),
            }),
        };
        Ok(ModelResponse { text, calls, usage })
    }

    /// The JSON form.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"text": self.text, "calls": self.calls.iter().map(ToolCall::to_json).collect::<Vec<_>>()});
        if let Some(u) = &self.usage {
            v["usage"] = json!({"inputTokens": u.input_tokens, "outputTokens": u.output_tokens});
        }
        v
    }
}

/// What is known about a started call that was stopped before it produced a result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// The tool is safe to cancel; its handler was asked to abort and confirmed it stopped.
    /// Whatever it did before stopping remains.
    AbortAcknowledged { after_ms: u64 },
    /// No settlement arrived within the interrupt grace period. `abort_sent` says whether the
    /// handler was asked to abort (only tools declared safe to cancel are); it may still be
    /// running, and a later settlement is delivered to the mailbox as late evidence.
    NoSettlement { waited_ms: u64, abort_sent: bool },
}

impl Evidence {
    /// `abort_acknowledged` or `no_settlement`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Evidence::AbortAcknowledged { .. } => "abort_acknowledged",
            Evidence::NoSettlement { .. } => "no_settlement",
        }
    }
}

/// The one accepted result of a tool call.
#[derive(Clone, Debug, PartialEq)]
pub enum CallOutcome<V> {
    /// The handler returned a value.
    Succeeded { value: V },
    /// The handler started and failed (threw, rejected or panicked).
    Failed {
        message: String,
        code: Option<String>,
    },
    /// The call was refused before its handler started (unknown tool, invalid arguments).
    /// The model must change the call, not merely retry it.
    Rejected { code: String, message: String },
    /// The step was cancelled before this call's handler started. No effect happened: it is
    /// safe to retry.
    NotStarted { reason: String },
    /// The handler started but the step was cancelled before it settled: its effects are
    /// uncertain. The evidence says what is known.
    Uncertain { reason: String, evidence: Evidence },
}

impl<V: Payload> CallOutcome<V> {
    /// `succeeded`, `failed`, `rejected`, `not_started` or `uncertain`.
    pub fn status(&self) -> &'static str {
        match self {
            CallOutcome::Succeeded { .. } => "succeeded",
            CallOutcome::Failed { .. } => "failed",
            CallOutcome::Rejected { .. } => "rejected",
            CallOutcome::NotStarted { .. } => "not_started",
            CallOutcome::Uncertain { .. } => "uncertain",
        }
    }

    /// Whether the handler started (its effects may have happened).
    pub fn started(&self) -> bool {
        matches!(
            self,
            CallOutcome::Succeeded { .. }
                | CallOutcome::Failed { .. }
                | CallOutcome::Uncertain { .. }
        )
    }

    /// The JSON form, as the model sees it: `{"status", "started", ...details}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("session types serialize to JSON")
    }
}

/// The result of one call, kept with its identity.
#[derive(Clone, Debug, PartialEq)]
pub struct CallResult<V> {
    pub invocation: InvocationId,
    /// The model's call id.
    pub call_id: String,
    pub tool: String,
    pub outcome: CallOutcome<V>,
    /// The background jobs the call started and handed over. A job's lifetime is the
    /// registry's, not the turn's: it continues after the call and the turn end, and its
    /// completion note arrives in the agent's mailbox.
    pub jobs: Vec<JobId>,
}

impl<V: Payload> CallResult<V> {
    /// The JSON form: `{"invocation","callId","tool", ...outcome, "jobs"?, "handedOver"?}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("session types serialize to JSON")
    }
}

/// Something queued for an agent outside its turns. Mail becomes model input only at the
/// start of the agent's next turn; queuing it never starts a turn.
#[derive(Clone, Debug, PartialEq)]
pub enum MailItem<V> {
    /// A job's completion note, from the job registry.
    Job(Note),
    /// A result of an observation (an operation, a subscription) posted by the application.
    Observation { source: String, value: V },
    /// A call whose step already ended settled after all: evidence of what it did.
    LateResult { turn: TurnId, result: CallResult<V> },
    /// A call whose step already ended reported the job it started.
    LateJob {
        turn: TurnId,
        invocation: InvocationId,
        call_id: String,
        job: JobId,
    },
}

impl<V: Payload> MailItem<V> {
    /// `job`, `observation`, `late_result` or `late_job`.
    pub fn kind(&self) -> &'static str {
        match self {
            MailItem::Job(_) => "job",
            MailItem::Observation { .. } => "observation",
            MailItem::LateResult { .. } => "late_result",
            MailItem::LateJob { .. } => "late_job",
        }
    }
}

/// One mailbox entry: arrival order and time.
#[derive(Clone, Debug, PartialEq)]
pub struct Mail<V> {
    pub seq: u64,
    pub at: Mono,
    pub item: MailItem<V>,
}

impl<V: Payload> Mail<V> {
    /// The JSON form: `{"seq","at","kind", ...item}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("session types serialize to JSON")
    }
}

/// One entry of a session's transcript: what the model is shown, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Message<V> {
    /// A turn began (with its cause); the admitted input follows.
    TurnStart { turn: TurnId, cause: TurnCause },
    /// Mail admitted at the start of a turn.
    Admitted(Mail<V>),
    /// A standing desire that changed since the agent last saw it (latest value only).
    Standing { key: String, value: V },
    /// A submitted task's input.
    Task { task: TaskId, input: V },
    /// Steering input, delivered at a safe point (before a model step).
    Steer { input: V },
    /// The model's answer: text and the calls it selected.
    Assistant {
        step: StepId,
        text: Option<String>,
        calls: Vec<ToolCall>,
    },
    /// The result of one call, in model order.
    ToolResult { step: StepId, result: CallResult<V> },
    /// How the turn ended (for interrupted, failed and limited turns: the model is told).
    TurnEnd { turn: TurnId, end: TurnEnd },
}

impl<V: Payload> Message<V> {
    /// The message's role name.
    pub fn role(&self) -> &'static str {
        match self {
            Message::TurnStart { .. } => "turn_start",
            Message::Admitted(_) => "mail",
            Message::Standing { .. } => "standing",
            Message::Task { .. } => "task",
            Message::Steer { .. } => "steer",
            Message::Assistant { .. } => "assistant",
            Message::ToolResult { .. } => "tool_result",
            Message::TurnEnd { .. } => "turn_end",
        }
    }

    /// The JSON form: `{"role", ...}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("session types serialize to JSON")
    }
}

/// Work for the host, drained after every input.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A turn began; `admitted` mail items became model input.
    TurnStarted {
        turn: TurnId,
        cause: TurnCause,
        admitted: usize,
    },
    /// Ask the model: read the request with `Session::model_request` and report the answer
    /// with `Session::on_model_response` (or `on_model_error`).
    ModelRequest { turn: TurnId, step: StepId },
    /// The model request of `step` is no longer wanted (the turn was interrupted).
    AbortModel { step: StepId },
    /// The provider's token counts for `step` (emitted when its answer carries usage).
    ModelUsage {
        turn: TurnId,
        step: StepId,
        input_tokens: u64,
        output_tokens: u64,
    },
    /// Run the handler bound in the step's snapshot. Report with `Session::on_call_settled`.
    /// `cancellable`: the tool was declared safe to cancel, so an [`Output::AbortCall`] may
    /// follow (hosts give only such calls an abort signal; they keep no set of their own).
    StartCall {
        invocation: InvocationId,
        step: StepId,
        handler: HandlerId,
        tool: String,
        call_id: String,
        arguments: Value,
        cancellable: bool,
    },
    /// Signal the handler of a tool declared safe to cancel that it should stop.
    AbortCall {
        invocation: InvocationId,
        handler: HandlerId,
    },
    /// A call has its result (emitted in completion order; the transcript keeps model order).
    CallFinished {
        invocation: InvocationId,
        status: &'static str,
    },
    /// Mail was queued (no turn starts because of it).
    MailQueued { seq: u64, kind: &'static str },
    /// The turn ended. The session is idle unless a `TurnStarted` follows.
    TurnEnded { turn: TurnId, end: TurnEnd },
    /// No snapshot or declaration refers to this handler any more: the host may drop it.
    HandlerReleased { handler: HandlerId },
}

impl Output {
    /// The JSON form, for vectors and logs.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("session types serialize to JSON")
    }
}

/// How a handler settled, as the host reports it.
#[derive(Clone, Debug, PartialEq)]
pub enum Settlement<V> {
    /// It returned a value.
    Returned(V),
    /// It threw, rejected or panicked.
    Threw {
        message: String,
        code: Option<String>,
    },
    /// It stopped because it was asked to abort (a JS `AbortError` after `AbortCall`).
    Aborted,
}

/// Why a host settles a call as failed when the handler gave no error of its own. The codes
/// are listed here, once, so that every host settles these the same way
/// (`Settlement::from(HandlerFailure::Panicked(..))`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandlerFailure {
    /// The handler panicked (a native host runs each handler in its own task).
    #[error("the handler panicked: {0}")]
    Panicked(String),
    /// The handler's task ended without a result (the runtime cancelled it).
    #[error("the handler task ended without a result: {0}")]
    Lost(String),
    /// No handler is bound to the tool that was called.
    #[error("no handler for tool `{0}`")]
    UnknownTool(String),
    /// The handler's value cannot be carried as JSON.
    #[error("the tool's value is not JSON-like: {0}")]
    InvalidResult(String),
}

impl HandlerFailure {
    /// The stable string code (the settlement's `code`).
    pub fn code(&self) -> &'static str {
        match self {
            HandlerFailure::Panicked(_) => "HANDLER_PANICKED",
            HandlerFailure::Lost(_) => "HANDLER_LOST",
            HandlerFailure::UnknownTool(_) => "UNKNOWN_TOOL",
            HandlerFailure::InvalidResult(_) => "INVALID_RESULT",
        }
    }
}

impl crate::ErrorCode for HandlerFailure {
    fn code(&self) -> &'static str {
        HandlerFailure::code(self)
    }
}

impl<V> From<HandlerFailure> for Settlement<V> {
    fn from(f: HandlerFailure) -> Self {
        Settlement::Threw {
            message: f.to_string(),
            code: Some(f.code().to_owned()),
        }
    }
}

/// The agent's state, as the one authoritative turn state machine sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No turn is running.
    Idle,
    /// Waiting for the model's answer to `step`.
    ModelStep { turn: TurnId, step: StepId },
    /// Running the calls of `step`.
    RunningTools { turn: TurnId, step: StepId },
    /// The turn was interrupted; started calls have until `deadline` to settle.
    Interrupted { turn: TurnId, deadline: Mono },
}

impl Phase {
    /// `idle`, `model_step`, `running_tools` or `interrupted`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::ModelStep { .. } => "model_step",
            Phase::RunningTools { .. } => "running_tools",
            Phase::Interrupted { .. } => "interrupted",
        }
    }

    /// The current turn, when one is running.
    pub fn turn(&self) -> Option<TurnId> {
        match self {
            Phase::Idle => None,
            Phase::ModelStep { turn, .. }
            | Phase::RunningTools { turn, .. }
            | Phase::Interrupted { turn, .. } => Some(*turn),
        }
    }
}

/// What `interrupt` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterruptStatus {
    /// No turn was running; nothing changed.
    NotRunning,
    /// The turn ended at once (it was waiting for the model, or no call had started).
    Ended,
    /// Started calls are being given the grace period to settle.
    Stopping,
    /// An interrupt was already in progress.
    AlreadyInterrupting,
}

impl InterruptStatus {
    /// Stable name of the status.
    pub fn as_str(&self) -> &'static str {
        match self {
            InterruptStatus::NotRunning => "not_running",
            InterruptStatus::Ended => "ended",
            InterruptStatus::Stopping => "stopping",
            InterruptStatus::AlreadyInterrupting => "already_interrupting",
        }
    }
}

impl<V> CallOutcome<V> {
    /// The same outcome with its value (if any) mapped by `f`.
    pub fn map_value<W>(&self, f: impl FnOnce(&V) -> W) -> CallOutcome<W> {
        match self {
            CallOutcome::Succeeded { value } => CallOutcome::Succeeded { value: f(value) },
            CallOutcome::Failed { message, code } => CallOutcome::Failed {
                message: message.clone(),
                code: code.clone(),
            },
            CallOutcome::Rejected { code, message } => CallOutcome::Rejected {
                code: code.clone(),
                message: message.clone(),
            },
            CallOutcome::NotStarted { reason } => CallOutcome::NotStarted {
                reason: reason.clone(),
            },
            CallOutcome::Uncertain { reason, evidence } => CallOutcome::Uncertain {
                reason: reason.clone(),
                evidence: evidence.clone(),
            },
        }
    }
}

impl<V> CallResult<V> {
    /// The same result with its value (if any) mapped by `f`.
    pub fn map_value<W>(&self, f: impl FnOnce(&V) -> W) -> CallResult<W> {
        CallResult {
            invocation: self.invocation,
            call_id: self.call_id.clone(),
            tool: self.tool.clone(),
            outcome: self.outcome.map_value(f),
            jobs: self.jobs.clone(),
        }
    }
}

impl<V> Message<V> {
    /// Whether the message carries application values (task input, results, observations...).
    pub fn has_values(&self) -> bool {
        !matches!(
            self,
            Message::TurnStart { .. } | Message::Assistant { .. } | Message::TurnEnd { .. }
        )
    }

    /// The same message with its application values mapped by `f(path, value)`, where `path`
    /// names where the value sits in the JSON form: `value`, `input` or `result.value`.
    pub fn map_values<W>(&self, mut f: impl FnMut(&str, &V) -> W) -> Message<W> {
        match self {
            Message::TurnStart { turn, cause } => Message::TurnStart {
                turn: *turn,
                cause: cause.clone(),
            },
            Message::Admitted(mail) => Message::Admitted(Mail {
                seq: mail.seq,
                at: mail.at,
                item: match &mail.item {
                    MailItem::Job(note) => MailItem::Job(note.clone()),
                    MailItem::Observation { source, value } => MailItem::Observation {
                        source: source.clone(),
                        value: f("value", value),
                    },
                    MailItem::LateResult { turn, result } => MailItem::LateResult {
                        turn: *turn,
                        result: result.map_value(|v| f("result.value", v)),
                    },
                    MailItem::LateJob {
                        turn,
                        invocation,
                        call_id,
                        job,
                    } => MailItem::LateJob {
                        turn: *turn,
                        invocation: *invocation,
                        call_id: call_id.clone(),
                        job: *job,
                    },
                },
            }),
            Message::Standing { key, value } => Message::Standing {
                key: key.clone(),
                value: f("value", value),
            },
            Message::Task { task, input } => Message::Task {
                task: *task,
                input: f("input", input),
            },
            Message::Steer { input } => Message::Steer {
                input: f("input", input),
            },
            Message::Assistant { step, text, calls } => Message::Assistant {
                step: *step,
                text: text.clone(),
                calls: calls.clone(),
            },
            Message::ToolResult { step, result } => Message::ToolResult {
                step: *step,
                result: result.map_value(|v| f("value", v)),
            },
            Message::TurnEnd { turn, end } => Message::TurnEnd {
                turn: *turn,
                end: end.clone(),
            },
        }
    }
}
