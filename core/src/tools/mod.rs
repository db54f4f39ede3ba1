//! Agent turns: a parallel tool scheduler, turn state and mailbox admission over the job
//! registry.
//!
//! A [`Session`] is one agent's authoritative turn state machine (`idle → model_step ⇄
//! running_tools → idle`, or `→ interrupted → idle`). Like the registry it is sans-IO: hosts
//! feed it calls, model answers, handler settlements and time, and drain [`Output`]s (ask the
//! model, start a handler, abort a handler, a turn ended).
//!
//! * **Snapshots.** Each model step captures the tools it advertised (schema, handler binding,
//!   eligibility). The calls the model selects run against that snapshot, whatever is
//!   registered, replaced or removed afterwards.
//! * **Scheduling.** A step's calls run as consecutive groups: adjacent `supports_parallel`
//!   calls overlap, an exclusive call runs alone and separates groups. Results keep their call
//!   identity and enter the transcript in model order, whatever the completion order.
//! * **Cancellation.** Interrupting a step reports calls that never started as `not_started`
//!   (safe to retry) and started calls as `uncertain`, with the evidence there is (the handler
//!   acknowledged the abort, or did not settle within the grace period). Jobs a call started
//!   are handed over: they belong to the registry and outlive the turn.
//! * **Admission.** Job completion notes, observations and late call results queue in the
//!   mailbox and become model input only at the start of the next turn. Only explicit choices
//!   start turns: a submitted task (FIFO), a job submitted with `wake`, an application's
//!   `wake`. Progress never reaches the session; standing desires are not tasks.
//!
//! # Call order
//!
//! ```text
//! let mut s = Session::new(config);  register_tool(decl)*;
//! inputs, each with the host's monotonic `now`:
//!     submit_task | wake | deliver_note | post_observation | steer | interrupt ..
//!     on_model_response(now, step, ..) | on_model_error(now, step, ..)
//!     on_call_settled(now, inv, ..) | on_call_job | submit_job(now, inv, &mut registry, ..)
//!     on_registry_output(now, &out, &mut registry)  // the registry's outputs, as they come
//!     handle_timeout(now)                           // when poll_timeout()'s deadline passes
//! after every input:
//!     while let Some(out) = s.poll_output() {      // or drain_outputs()
//!         ModelRequest → s.model_request(), ask the model; AbortModel → drop that request;
//!         StartCall → run the handler; AbortCall → signal it; HandlerReleased → drop it;
//!         TurnStarted / CallFinished / MailQueued / ModelUsage / TurnEnded → show them
//!     }
//!     arm one timer at s.poll_timeout()
//! ```

mod json;
mod model;
pub mod schema;
mod session;
mod toolbox;
mod types;
#[cfg(feature = "conformance")]
pub mod vectors;

#[cfg(test)]
mod tests;

use thiserror::Error;

pub use model::{ModelAdapter, ScriptedModel, SeenRequest};
pub use session::{ModelRequest, Session, SessionConfig, SessionStats};
pub use toolbox::{Snapshot, ToolDecl, ToolEntry, Toolbox};
pub use types::*;

use crate::jobs::JobsError;

/// Errors of agent sessions. Each has a stable code (see [`ToolsError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ToolsError {
    #[error("invalid tool name `{0}`: use 1-64 characters from [A-Za-z0-9_-]")]
    InvalidToolName(String),
    #[error("tool `{tool}`: {message}")]
    InvalidSchema { tool: String, message: String },
    #[error("no tool `{0}` is registered")]
    UnknownTool(String),
    #[error("no turn is running; submit a task to start one")]
    NoActiveTurn,
    #[error("{0} is not the model step the session is waiting for")]
    StaleStep(StepId),
    #[error("invalid model response: {0}")]
    InvalidResponse(String),
    #[error("no invocation {0}")]
    UnknownInvocation(InvocationId),
    #[error("{0} already has its result")]
    AlreadySettled(InvocationId),
    #[error("{0} never started")]
    CallNotStarted(InvocationId),
    #[error("tool `{tool}` is not declared `mayStartJob`; it cannot start background jobs")]
    JobNotDeclared { tool: String },
    #[error("no queued task {0}")]
    UnknownTask(TaskId),
    #[error(transparent)]
    Jobs(JobsError),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl ToolsError {
    /// The stable string code, as JS `.code` and HTTP problem `code`.
    pub fn code(&self) -> &'static str {
        match self {
            ToolsError::InvalidToolName(_) => "INVALID_TOOL_NAME",
            ToolsError::InvalidSchema { .. } => "INVALID_SCHEMA",
            ToolsError::UnknownTool(_) => "UNKNOWN_TOOL",
            ToolsError::NoActiveTurn => "NO_ACTIVE_TURN",
            ToolsError::StaleStep(_) => "STALE_STEP",
            ToolsError::InvalidResponse(_) => "INVALID_RESPONSE",
            ToolsError::UnknownInvocation(_) => "UNKNOWN_INVOCATION",
            ToolsError::AlreadySettled(_) => "ALREADY_SETTLED",
            ToolsError::CallNotStarted(_) => "CALL_NOT_STARTED",
            ToolsError::JobNotDeclared { .. } => "JOB_NOT_DECLARED",
            ToolsError::UnknownTask(_) => "UNKNOWN_TASK",
            ToolsError::Jobs(e) => e.code(),
            ToolsError::InvalidArgument(_) => "INVALID_ARGUMENT",
        }
    }
}

impl crate::ErrorCode for ToolsError {
    fn code(&self) -> &'static str {
        ToolsError::code(self)
    }
}
