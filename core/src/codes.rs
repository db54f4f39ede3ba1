//! Every error code the product exposes, listed once.
//!
//! Each capability keeps its own `#[non_exhaustive]` error enum with a stable
//! [`ErrorCode::code`](crate::ErrorCode::code) (`JobsError`, `OpsError`, `FramesError`, ...).
//! The outcomes that only a host can observe — an object disposed or closed under a caller, an
//! aborted signal, a JS wait cancelled or timed out, a job body that panicked — are
//! [`HostError`] here, so that no host makes a code up. [`ALL`] is the one list of every code
//! (capability errors, host outcomes, and the codes the core's outputs carry as strings); the
//! JS package's `wasm/js/codes.js` is generated from [`HostError::ALL`] and a native test
//! (`node-host/tests/error_codes.rs`) fails when a JS file or a host creates an error whose
//! code this list does not name.

use thiserror::Error;

/// An outcome at the host boundary, with a stable code. The core never produces these from
/// its own state; hosts raise them (`new WeftError(DISPOSED, ...)` in JS, `HostError::X.code()`
/// natively) and add their own message when they need a more specific one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Error)]
#[non_exhaustive]
pub enum HostError {
    /// The object (app, agent) was disposed; nothing more runs on it.
    #[error("the object was disposed")]
    Disposed,
    /// The object (store, agent) was closed; nothing more runs on it.
    #[error("the object was closed")]
    Closed,
    /// A caller's abort signal fired, or the turn the work belonged to was interrupted.
    #[error("aborted")]
    Aborted,
    /// A job's run was cancelled (the signal a job body receives).
    #[error("the job was cancelled")]
    Cancelled,
    /// The endpoint running the job was terminated (the signal a job body receives).
    #[error("the endpoint was terminated")]
    Terminated,
    /// A caller cancelled its wait; the waited-on work continues.
    #[error("the wait was cancelled")]
    WaitCancelled,
    /// A caller's wait timed out; the waited-on work continues.
    #[error("the wait timed out")]
    WaitTimedOut,
    /// The environment lacks what the call needs (a Worker, a WebSocket, IndexedDB).
    #[error("not supported in this environment")]
    Unsupported,
    /// A model step was answered by `respond()` before the model call finished.
    #[error("the step was answered by respond()")]
    Answered,
    /// A scripted model ran out of scripted answers.
    #[error("the model script is exhausted")]
    ScriptExhausted,
    /// An async iterable cell finished without yielding a value.
    #[error("the async iterable finished without yielding")]
    NoValue,
    /// A host cell the core asked to compute has no compute function in this host.
    #[error("the cell has no compute function")]
    NoCompute,
    /// An agent without a job runtime was asked to start a job.
    #[error("this agent has no job runtime")]
    NoRuntime,
    /// The node already has an open agent.
    #[error("the node already has an open agent")]
    AgentOpen,
    /// The node has no open agent.
    #[error("the node has no agent")]
    AgentNotOpen,
    /// A job was asked for on behalf of a tool call that is no longer running.
    #[error("the call is no longer running")]
    CallNotRunning,
    /// The Worker process a job tool needs could not be started.
    #[error("the worker could not be started")]
    WorkerStartFailed,
    /// An in-process job body panicked.
    #[error("the job body panicked")]
    Panic,
    /// `weft chat`: the turn is waiting (on a child, a person, a job) instead of ending.
    #[error("the turn is waiting")]
    ChatTurnWaiting,
    /// `weft chat`: no turn ran.
    #[error("the turn did not end")]
    ChatNoTurn,
    /// `weft chat`: the turn reached the session's step limit.
    #[error("the turn reached the step limit")]
    ChatTurnStepLimit,
    /// A browser runtime created before the apps module was loaded was given to an agent: its
    /// job registry is in the jobs-only module, an agent's session in the apps module. Loading
    /// does not change it; a runtime created after the load is needed.
    #[error("the runtime was created before the apps module was loaded")]
    RuntimeWithoutApps,
}

impl HostError {
    /// Every host outcome, in declaration order.
    pub const ALL: &'static [HostError] = &[
        HostError::Disposed,
        HostError::Closed,
        HostError::Aborted,
        HostError::Cancelled,
        HostError::Terminated,
        HostError::WaitCancelled,
        HostError::WaitTimedOut,
        HostError::Unsupported,
        HostError::Answered,
        HostError::ScriptExhausted,
        HostError::NoValue,
        HostError::NoCompute,
        HostError::NoRuntime,
        HostError::AgentOpen,
        HostError::AgentNotOpen,
        HostError::CallNotRunning,
        HostError::WorkerStartFailed,
        HostError::Panic,
        HostError::ChatTurnWaiting,
        HostError::ChatNoTurn,
        HostError::ChatTurnStepLimit,
        HostError::RuntimeWithoutApps,
    ];

    /// The stable string code, as JS `.code` and HTTP problem `code`.
    pub fn code(&self) -> &'static str {
        match self {
            HostError::Disposed => "DISPOSED",
            HostError::Closed => "CLOSED",
            HostError::Aborted => "ABORTED",
            HostError::Cancelled => "CANCELLED",
            HostError::Terminated => "TERMINATED",
            HostError::WaitCancelled => "WAIT_CANCELLED",
            HostError::WaitTimedOut => "WAIT_TIMED_OUT",
            HostError::Unsupported => "UNSUPPORTED",
            HostError::Answered => "ANSWERED",
            HostError::ScriptExhausted => "SCRIPT_EXHAUSTED",
            HostError::NoValue => "NO_VALUE",
            HostError::NoCompute => "NO_COMPUTE",
            HostError::NoRuntime => "NO_RUNTIME",
            HostError::AgentOpen => "AGENT_OPEN",
            HostError::AgentNotOpen => "AGENT_NOT_OPEN",
            HostError::CallNotRunning => "CALL_NOT_RUNNING",
            HostError::WorkerStartFailed => "WORKER_START_FAILED",
            HostError::Panic => "PANIC",
            HostError::ChatTurnWaiting => "CHAT_TURN_WAITING",
            HostError::ChatNoTurn => "CHAT_NO_TURN",
            HostError::ChatTurnStepLimit => "CHAT_TURN_STEP_LIMIT",
            HostError::RuntimeWithoutApps => "RUNTIME_WITHOUT_APPS",
        }
    }

    /// The HTTP status a host answers with when it reports this outcome as a problem.
    pub fn http_status(&self) -> u16 {
        match self {
            HostError::AgentNotOpen => 404,
            HostError::Unsupported => 501,
            HostError::WaitTimedOut => 504,
            HostError::WorkerStartFailed | HostError::Panic => 500,
            _ => 409,
        }
    }
}

impl crate::ErrorCode for HostError {
    fn code(&self) -> &'static str {
        HostError::code(self)
    }
}

/// Every code the product exposes, sorted, each once: the codes of the capability error enums
/// (`JobsError`, `OpsError`, `ClaimsError`, `ToolsError`, `HandlerFailure`, `FramesError`,
/// `ActorsError`, `AgentsError`, `ModelError`), of [`HostError`], and the codes the core's
/// outputs carry as strings (calculation ends, settlements, the DGP controller's
/// `frames::controller::http` codes, `model::NO_MODEL_CONFIGURED`). Tests keep it complete:
/// the core's own (every `code()` arm, every host outcome) and `node-host/tests/error_codes.rs`
/// (every code a JS file or a host creates).
pub const ALL: &[&str] = &[
    "ABORTED",
    "ABSTAINED",
    "ADAPTER_ERROR",
    "AGENT_NOT_OPEN",
    "AGENT_OPEN",
    "AGENT_TOOL_RESERVED",
    "ALREADY_INITIALIZED",
    "ALREADY_SETTLED",
    "ANSWERED",
    "ASSESSMENT_ID_REUSED",
    "ASSESSMENT_MISMATCH",
    "ATTEMPT_NOT_IN_FLIGHT",
    "BUDGET_EXHAUSTED",
    "CADENCE_VIOLATION",
    "CALL_NOT_RUNNING",
    "CALL_NOT_STARTED",
    "CANCELLED",
    "CAPABILITY_REQUIRED",
    "CHAT_NO_TURN",
    "CHAT_TURN_STEP_LIMIT",
    "CHAT_TURN_WAITING",
    "CLIENT_BUDGET_EXHAUSTED",
    "CLOSED",
    "CONFIG_INVALID",
    "CORRUPT_RECORD",
    "DECISION_NOT_AVAILABLE",
    "DECISION_NOT_OFFERED",
    "DISPOSED",
    "ENDED",
    "ENDPOINT_CLOSED",
    "EPOCHS_DISABLED",
    "FORBIDDEN",
    "FRAME_EXPIRED",
    "HANDLER_LOST",
    "HANDLER_PANICKED",
    "HARD_LINK_REFUSED",
    "HELD",
    "HUMAN_APPROVAL_REQUIRED",
    "IDEMPOTENCY_KEY_REQUIRED",
    "IDEMPOTENCY_KEY_REUSED",
    "INPUT_UNSUPPORTED",
    "INTERNAL_ERROR",
    "INVALID_ACTION_ARGS",
    "INVALID_ANSWER",
    "INVALID_ARGUMENT",
    "INVALID_ARGUMENTS",
    "INVALID_CHOICE",
    "INVALID_CONTROL_VALUE",
    "INVALID_DISCLOSURE",
    "INVALID_DISTRIBUTION",
    "INVALID_GRAPH",
    "INVALID_HORIZON",
    "INVALID_IMAGE",
    "INVALID_INPUT",
    "INVALID_JSON",
    "INVALID_MESSAGE",
    "INVALID_NODE_ID",
    "INVALID_REQUEST",
    "INVALID_RESPONSE",
    "INVALID_RESULT",
    "INVALID_SCHEMA",
    "INVALID_TOOL_NAME",
    "INVALID_TRANSFER",
    "JOB_NOT_DECLARED",
    "JOB_NOT_RUNNING",
    "METHOD_NOT_ALLOWED",
    "MODEL_ABORTED",
    "MODEL_AUTH",
    "MODEL_BAD_RESPONSE",
    "MODEL_CONNECT",
    "MODEL_CONTEXT_TOO_LONG",
    "MODEL_INVALID_CONFIG",
    "MODEL_NOT_CONFIGURED",
    "MODEL_OVERLOADED",
    "MODEL_PROVIDER_ERROR",
    "MODEL_RATE_LIMITED",
    "MODEL_TIMEOUT",
    "NODE_CORRUPT",
    "NODE_EXISTS",
    "NOT_FOUND",
    "NOT_INITIALIZED",
    "NOT_LOADED",
    "NOT_PAUSING",
    "NOT_PERSISTED",
    "NO_ACTIVE_TURN",
    "NO_COMPUTE",
    "NO_RUNTIME",
    "NO_VALUE",
    "OWNER_DISPOSED",
    "PANIC",
    "PAYLOAD_TOO_LARGE",
    "PRUNED",
    "REF_INVALID",
    "REGISTRY_IN_USE",
    "REMOTE_DISCONNECTED",
    "REUSE_CONFLICT",
    "ROUTING_PAUSED",
    "RUNTIME_WITHOUT_APPS",
    "SCHEMA_UNSUPPORTED",
    "SCOPES_NOT_LOCKED",
    "SCRIPT_EXHAUSTED",
    "SERVICE_UNAVAILABLE",
    "SPAWN_DISABLED",
    "SPAWN_RULE",
    "SPECULATIVE_ONLY",
    "STALE_FRAME",
    "STALE_STEP",
    "STORAGE_FAILURE",
    "STORE_FAILED",
    "STORE_IO",
    "STORE_LOCKED",
    "SUPERSEDED",
    "SYMLINK_REFUSED",
    "TERMINATED",
    "TRANSPORT_ERROR",
    "UNAUTHENTICATED",
    "UNKNOWN_ACTION",
    "UNKNOWN_CALCULATION",
    "UNKNOWN_CELL",
    "UNKNOWN_CLAIM",
    "UNKNOWN_CONTROL",
    "UNKNOWN_ENDPOINT",
    "UNKNOWN_INVOCATION",
    "UNKNOWN_JOB",
    "UNKNOWN_NODE",
    "UNKNOWN_OPERATION",
    "UNKNOWN_SELECTOR",
    "UNKNOWN_SUBSCRIPTION",
    "UNKNOWN_TASK",
    "UNKNOWN_TOOL",
    "UNKNOWN_WAIT",
    "UNSUPPORTED",
    "UNSUPPORTED_MEDIA_TYPE",
    "UNSUPPORTED_MODALITY",
    "UNTRUSTED_HOST",
    "UNTRUSTED_LINK",
    "UNTRUSTED_ORIGIN",
    "WAIT_BLOCKED",
    "WAIT_CANCELLED",
    "WAIT_CYCLE",
    "WAIT_TIMED_OUT",
    "WORKER_START_FAILED",
];

/// Whether `code` is one the product lists ([`ALL`]).
pub fn is_listed(code: &str) -> bool {
    ALL.binary_search(&code).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The source of every file that defines a capability's `code()` (compiled in, no I/O).
    const SOURCES: &[(&str, &str)] = &[
        ("jobs/mod.rs", include_str!("jobs/mod.rs")),
        ("ops/mod.rs", include_str!("ops/mod.rs")),
        ("ops/claims.rs", include_str!("ops/claims.rs")),
        ("tools/mod.rs", include_str!("tools/mod.rs")),
        ("tools/types.rs", include_str!("tools/types.rs")),
        ("frames/error.rs", include_str!("frames/error.rs")),
        ("actors/mod.rs", include_str!("actors/mod.rs")),
        ("agents/mod.rs", include_str!("agents/mod.rs")),
        ("model/mod.rs", include_str!("model/mod.rs")),
        (
            "frames/controller/http.rs",
            include_str!("frames/controller/http.rs"),
        ),
        ("ops/schedule.rs", include_str!("ops/schedule.rs")),
    ];

    /// The `"CODE"` literals of `code()` bodies and of `pub const X: &str = "CODE"` lines.
    fn codes_in(src: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut in_code = false;
        for line in src.lines() {
            let t = line.trim_start();
            if t.starts_with("pub fn code(&self)") || t.starts_with("fn code(&self)") {
                in_code = true;
            } else if in_code && line.starts_with("    }") {
                in_code = false;
            }
            let is_const = t.starts_with("pub const ") && t.contains(": &str = \"");
            let is_calc_end = t.starts_with("CalcEventKind::") && t.contains("\", \"");
            if !(in_code || is_const || is_calc_end) {
                continue;
            }
            for lit in t.split('"').skip(1).step_by(2) {
                let coded = lit.len() > 1
                    && lit.starts_with(|c: char| c.is_ascii_uppercase())
                    && lit
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                if coded {
                    out.push(lit.to_owned());
                }
            }
        }
        out
    }

    #[test]
    fn the_list_is_sorted_and_names_each_code_once() {
        for w in ALL.windows(2) {
            assert!(
                w[0] < w[1],
                "{} before {}: ALL is sorted, each code once",
                w[0],
                w[1]
            );
        }
    }

    #[test]
    fn every_core_code_is_listed() {
        let mut seen = 0;
        for (file, src) in SOURCES {
            let codes = codes_in(src);
            assert!(
                !codes.is_empty(),
                "{file}: no codes found (has its code() moved?)"
            );
            for c in codes {
                assert!(is_listed(&c), "{file}: code {c} is not in codes::ALL");
                seen += 1;
            }
        }
        assert!(seen > 100, "only {seen} codes found in the core's sources");
        for h in HostError::ALL {
            assert!(
                is_listed(h.code()),
                "host outcome {} is not in codes::ALL",
                h.code()
            );
        }
    }

    #[test]
    fn host_outcomes_are_distinct_and_complete() {
        let mut codes: Vec<_> = HostError::ALL.iter().map(|h| h.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), HostError::ALL.len());
        // Exhaustive inside the crate: a new variant fails to compile here until it is added
        // to `HostError::ALL` (and to this match).
        for h in HostError::ALL {
            match h {
                HostError::Disposed
                | HostError::Closed
                | HostError::Aborted
                | HostError::Cancelled
                | HostError::Terminated
                | HostError::WaitCancelled
                | HostError::WaitTimedOut
                | HostError::Unsupported
                | HostError::Answered
                | HostError::ScriptExhausted
                | HostError::NoValue
                | HostError::NoCompute
                | HostError::NoRuntime
                | HostError::AgentOpen
                | HostError::AgentNotOpen
                | HostError::CallNotRunning
                | HostError::WorkerStartFailed
                | HostError::Panic
                | HostError::ChatTurnWaiting
                | HostError::ChatNoTurn
                | HostError::ChatTurnStepLimit
                | HostError::RuntimeWithoutApps => {}
            }
        }
    }
}
