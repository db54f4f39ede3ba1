//! Identities, records and events of the job registry.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::wire::{Capabilities, Reply, Violation};
use crate::Mono;
use crate::value::Payload;

numeric_id!(
    /// One execution. Never reused within a registry.
    JobId,
    "job-"
);
numeric_id!(
    /// One transport to an execution host (a Worker, a child process, an in-process runner).
    EndpointId,
    "endpoint-"
);
numeric_id!(
    /// One wait for a job's terminal outcome. Cancelling it leaves the job alone.
    WaitId,
    "wait-"
);
numeric_id!(
    /// One observer of a job's journal.
    SubscriptionId,
    "subscription-"
);

/// Who owns jobs and endpoints: an agent session, an application, a tool. Closing the owner
/// disposes what it owns; its mailbox receives completion notes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OwnerId(pub String);

impl OwnerId {
    /// An owner id from any string.
    pub fn new(s: impl Into<String>) -> Self {
        OwnerId(s.into())
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What caused a job: explains causality without tying the job's lifetime to the turn.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Origin {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<String>,
    /// On a remote job host: the client's job id of the run (both journals name both ids).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_job: Option<JobId>,
}

/// Where a journal event was observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A call by the registry's user (submit, cancel, send input).
    Caller,
    /// A decision of the registry itself (a timer, an owner close).
    Registry,
    /// A message or closure of this endpoint.
    Endpoint(EndpointId),
}

impl Source {
    /// `"caller"`, `"registry"` or `"endpoint-N"`.
    pub fn label(&self) -> String {
        match self {
            Source::Caller => "caller".into(),
            Source::Registry => "registry".into(),
            Source::Endpoint(e) => e.to_string(),
        }
    }
}

/// Why stopping is known: the only evidence that makes an outcome `cancelled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelEvidence {
    /// The run was never dispatched.
    NeverStarted,
    /// The worker acknowledged the cancel.
    Acknowledged,
    /// The worker cannot acknowledge; the run stayed quiet for `quiet_ms` after the cancel.
    Quiet { quiet_ms: u64 },
}

impl CancelEvidence {
    /// Stable name: `never_started`, `acknowledged`, `quiet_no_ack`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CancelEvidence::NeverStarted => "never_started",
            CancelEvidence::Acknowledged => "acknowledged",
            CancelEvidence::Quiet { .. } => "quiet_no_ack",
        }
    }
}

/// Why a `lost` outcome is lost: what evidence the registry had that the run's fate is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LostEvidence {
    /// The transport closed on its own (the worker crashed or exited, the process died).
    TransportClosed,
    /// The caller terminated the endpoint.
    Terminated,
    /// The job's owner (or the endpoint's) was closed while the run was active.
    OwnerClosed,
    /// A remote job host's connection dropped and was not resumed within its window.
    RemoteDisconnected,
    /// The remote job host reported the run lost on its side (its worker died).
    RemoteLost,
}

impl LostEvidence {
    /// Stable name: `transport_closed`, `terminated`, `owner_closed`, `remote_disconnected`,
    /// `remote_lost`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LostEvidence::TransportClosed => "transport_closed",
            LostEvidence::Terminated => "terminated",
            LostEvidence::OwnerClosed => "owner_closed",
            LostEvidence::RemoteDisconnected => "remote_disconnected",
            LostEvidence::RemoteLost => "remote_lost",
        }
    }

    /// The evidence named `name` (see [`LostEvidence::as_str`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "transport_closed" => LostEvidence::TransportClosed,
            "terminated" => LostEvidence::Terminated,
            "owner_closed" => LostEvidence::OwnerClosed,
            "remote_disconnected" => LostEvidence::RemoteDisconnected,
            "remote_lost" => LostEvidence::RemoteLost,
            _ => return None,
        })
    }
}

/// The one accepted terminal outcome of a job.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome<V> {
    /// The execution reported a result.
    Succeeded { value: V },
    /// The execution (or the registry, before start) reported failure.
    Failed {
        message: String,
        code: Option<String>,
        started: bool,
    },
    /// The execution stopped after a cancel, with this evidence.
    Cancelled { evidence: CancelEvidence },
    /// The transport died or was terminated: whether the work ran, and what it did, is unknown.
    /// `evidence` says which transport fact made it so.
    Lost {
        reason: String,
        evidence: LostEvidence,
    },
}

/// The kind of a terminal outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    Succeeded,
    Failed,
    Cancelled,
    Lost,
}

impl OutcomeKind {
    /// `succeeded`, `failed`, `cancelled` or `lost`.
    pub fn as_str(&self) -> &'static str {
        match self {
            OutcomeKind::Succeeded => "succeeded",
            OutcomeKind::Failed => "failed",
            OutcomeKind::Cancelled => "cancelled",
            OutcomeKind::Lost => "lost",
        }
    }
}

impl fmt::Display for OutcomeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<V: Payload> Outcome<V> {
    /// The outcome's kind.
    pub fn kind(&self) -> OutcomeKind {
        match self {
            Outcome::Succeeded { .. } => OutcomeKind::Succeeded,
            Outcome::Failed { .. } => OutcomeKind::Failed,
            Outcome::Cancelled { .. } => OutcomeKind::Cancelled,
            Outcome::Lost { .. } => OutcomeKind::Lost,
        }
    }

    /// A one-line human summary, used in completion notes and the CLI.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        self.write_summary(&mut s);
        s
    }

    /// Appends [`Outcome::summary`] to `out` (a note's summary is written into one buffer).
    pub fn write_summary(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = match self {
            // A success's summary is its kind's name (a mailbox rebuilds it from the kind).
            Outcome::Succeeded { .. } => out.write_str(OutcomeKind::Succeeded.as_str()),
            Outcome::Failed {
                message,
                code: Some(code),
                ..
            } => write!(out, "failed [{code}]: {message}"),
            Outcome::Failed { message, .. } => write!(out, "failed: {message}"),
            Outcome::Cancelled {
                evidence: CancelEvidence::NeverStarted,
            } => out.write_str("cancelled before it started"),
            Outcome::Cancelled {
                evidence: CancelEvidence::Acknowledged,
            } => out.write_str("cancelled; the worker acknowledged it stopped"),
            Outcome::Cancelled {
                evidence: CancelEvidence::Quiet { quiet_ms },
            } => write!(
                out,
                "cancelled; no acknowledgement available, the run was quiet for {quiet_ms} ms"
            ),
            Outcome::Lost { reason, .. } => write!(out, "lost ({reason}); effects unknown"),
        };
    }

    /// The JSON form: `{"outcome": kind, ...details}`.
    pub fn to_json(&self) -> Value {
        match self {
            Outcome::Succeeded { value } => {
                json!({"outcome": "succeeded", "value": value.to_json()})
            }
            Outcome::Failed {
                message,
                code,
                started,
            } => json!({"outcome": "failed", "message": message, "code": code, "started": started}),
            Outcome::Cancelled { evidence } => {
                let mut o = json!({"outcome": "cancelled", "evidence": evidence.as_str()});
                if let CancelEvidence::Quiet { quiet_ms } = evidence {
                    o["quietMs"] = json!(quiet_ms);
                }
                o
            }
            Outcome::Lost { reason, evidence } => {
                json!({"outcome": "lost", "reason": reason, "evidence": evidence.as_str()})
            }
        }
    }
}

/// Who refused an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputRejector {
    /// The registry refused to deliver it.
    Registry,
    /// The worker received and refused it.
    Worker,
}

/// What happened to a job, in the order it was recorded.
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind<V> {
    /// The job was accepted (owner, origin and endpoint are on the job record).
    Submitted {
        payload: V,
        reuse_key: Option<String>,
    },
    /// The run was dispatched to its endpoint under `wire_id`.
    Started {
        wire_id: u64,
        capabilities: Capabilities,
    },
    Progress {
        value: V,
    },
    Partial {
        value: V,
    },
    InputDelivered {
        input_id: String,
    },
    InputApplied {
        input_id: String,
    },
    InputRejected {
        input_id: String,
        by: InputRejector,
        reason: String,
    },
    /// Someone asked the execution to stop. Not, by itself, evidence that it stopped.
    CancelRequested {
        reason: String,
    },
    /// The worker said it stopped.
    CancelAcknowledged,
    /// The worker cannot acknowledge cancels; the run stayed quiet for `quiet_ms`.
    NoAcknowledgement {
        quiet_ms: u64,
    },
    /// The execution's host went away (exit, crash, terminate, disconnect).
    Terminated {
        reason: String,
    },
    /// A malformed message that named this run.
    ProtocolError {
        violation: Box<Violation>,
    },
    /// The one accepted terminal outcome.
    Finished {
        outcome: Outcome<V>,
    },
    /// A reply that arrived after the terminal outcome. Never a second completion.
    LateEvidence {
        reply: Reply<V>,
    },
    /// A remote job host accepted the run: its own job id in its session (the second identity).
    RemoteAccepted {
        session: String,
        remote_job: JobId,
    },
    /// The remote host's bounded replay buffer dropped this many progress and partial reports
    /// of the run while the connection was down (an honest gap, never silent).
    RemoteMissed {
        progress: u64,
        partial: u64,
    },
}

impl<V> EventKind<V> {
    /// Whether the event is a milestone of the job's lifecycle, kept by every journal window
    /// (each happens at most once per job): submitted, started, the cancel request and its
    /// evidence, termination and the outcome. Progress, partials, input events, protocol
    /// errors and late evidence can repeat without bound; a window keeps the latest of them.
    pub fn is_milestone(&self) -> bool {
        is_milestone_name(self.name())
    }

    /// The event's stable type name.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Submitted { .. } => "submitted",
            EventKind::Started { .. } => "started",
            EventKind::Progress { .. } => "progress",
            EventKind::Partial { .. } => "partial",
            EventKind::InputDelivered { .. } => "input_delivered",
            EventKind::InputApplied { .. } => "input_applied",
            EventKind::InputRejected { .. } => "input_rejected",
            EventKind::CancelRequested { .. } => "cancel_requested",
            EventKind::CancelAcknowledged => "cancel_acknowledged",
            EventKind::NoAcknowledgement { .. } => "no_acknowledgement",
            EventKind::Terminated { .. } => "terminated",
            EventKind::ProtocolError { .. } => "protocol_error",
            EventKind::Finished { .. } => "outcome",
            EventKind::LateEvidence { .. } => "late_evidence",
            EventKind::RemoteAccepted { .. } => "remote_accepted",
            EventKind::RemoteMissed { .. } => "remote_missed",
        }
    }
}

/// Whether the event type named `name` (see [`EventKind::name`]) is a milestone (see
/// [`EventKind::is_milestone`]): hosts holding events in their JSON form ask this.
pub fn is_milestone_name(name: &str) -> bool {
    matches!(
        name,
        "submitted"
            | "started"
            | "cancel_requested"
            | "cancel_acknowledged"
            | "no_acknowledgement"
            | "terminated"
            | "outcome"
            | "remote_accepted"
    )
}

/// One journal record: per-job sequence number, time, source, type and payload.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEvent<V> {
    pub job: JobId,
    pub seq: u64,
    pub at: Mono,
    pub source: Source,
    pub kind: EventKind<V>,
}

impl<V: Payload> JobEvent<V> {
    /// The JSON form: `{"job","seq","at","source","type", ...payload}`.
    pub fn to_json(&self) -> Value {
        let mut o = json!({
            "job": self.job.0, "seq": self.seq, "at": self.at,
            "source": self.source.label(), "type": self.kind.name(),
        });
        let m = o.as_object_mut().expect("object");
        match &self.kind {
            EventKind::Submitted { payload, reuse_key } => {
                m.insert("payload".into(), payload.to_json());
                if let Some(k) = reuse_key {
                    m.insert("reuseKey".into(), json!(k));
                }
            }
            EventKind::Started {
                wire_id,
                capabilities,
            } => {
                m.insert("wireId".into(), json!(wire_id));
                m.insert("capabilities".into(), json!(capabilities));
            }
            EventKind::Progress { value } | EventKind::Partial { value } => {
                m.insert("value".into(), value.to_json());
            }
            EventKind::InputDelivered { input_id } | EventKind::InputApplied { input_id } => {
                m.insert("inputId".into(), json!(input_id));
            }
            EventKind::InputRejected {
                input_id,
                by,
                reason,
            } => {
                m.insert("inputId".into(), json!(input_id));
                let by = match by {
                    InputRejector::Registry => "registry",
                    InputRejector::Worker => "worker",
                };
                m.insert("by".into(), json!(by));
                m.insert("reason".into(), json!(reason));
            }
            EventKind::CancelRequested { reason } | EventKind::Terminated { reason } => {
                m.insert("reason".into(), json!(reason));
            }
            EventKind::CancelAcknowledged => {}
            EventKind::NoAcknowledgement { quiet_ms } => {
                m.insert("quietMs".into(), json!(quiet_ms));
                m.insert(
                    "note".into(),
                    json!("no acknowledgement available: the worker does not announce cancelAck"),
                );
            }
            EventKind::ProtocolError { violation } => {
                m.insert("violation".into(), json!(violation));
                m.insert("message".into(), json!(violation.describe()));
            }
            EventKind::Finished { outcome } => {
                if let Value::Object(o) = outcome.to_json() {
                    m.extend(o);
                }
            }
            EventKind::LateEvidence { reply } => {
                m.insert("reply".into(), reply_to_json(reply));
            }
            EventKind::RemoteAccepted {
                session,
                remote_job,
            } => {
                m.insert("session".into(), json!(session));
                m.insert("remoteJob".into(), json!(remote_job.0));
            }
            EventKind::RemoteMissed { progress, partial } => {
                m.insert("progress".into(), json!(progress));
                m.insert("partial".into(), json!(partial));
            }
        }
        o
    }
}

/// The JSON form of a parsed reply (as it was on the wire).
pub fn reply_to_json<V: Payload>(reply: &Reply<V>) -> Value {
    let mut o = json!({"type": reply.kind()});
    if let Some(id) = reply.id() {
        o["id"] = json!(id);
    }
    match reply {
        Reply::Hello {
            protocol,
            capabilities,
        } => {
            o["protocol"] = json!(protocol);
            o["capabilities"] = json!(capabilities);
        }
        Reply::Partial { value, .. }
        | Reply::Progress { value, .. }
        | Reply::Done { value, .. } => {
            o["value"] = value.to_json();
        }
        Reply::Error { message, code, .. } => {
            o["message"] = json!(message);
            if let Some(c) = code {
                o["code"] = json!(c);
            }
        }
        Reply::Cancelled { .. } => {}
        Reply::InputApplied { input_id, .. } => o["inputId"] = json!(input_id),
        Reply::InputRejected {
            input_id, message, ..
        } => {
            o["inputId"] = json!(input_id);
            o["message"] = json!(message);
        }
    }
    o
}

/// Where a job is in its lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Accepted, not dispatched (endpoint starting or at its concurrency limit).
    Queued,
    /// Dispatched to its endpoint.
    Running,
    /// Has its one terminal outcome.
    Finished(OutcomeKind),
}

impl JobState {
    /// `queued`, `running`, or the outcome name.
    pub fn as_str(&self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Finished(k) => k.as_str(),
        }
    }
}

/// A run's identity on a remote job host: its session and the host's own job id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteIdentity {
    pub session: String,
    pub job: JobId,
}

/// A job as the registry keeps it. Its journal is complete unless the registry keeps a journal
/// window (see [`crate::jobs::Registry::set_journal_window`]): then its milestones and its
/// most recent other events are kept, and what was dropped is counted.
#[derive(Clone, Debug)]
pub struct Job<V> {
    pub id: JobId,
    pub owner: OwnerId,
    pub origin: Origin,
    pub endpoint: EndpointId,
    pub state: JobState,
    /// The id of the run on its endpoint, once dispatched.
    pub wire_id: Option<u64>,
    /// What the execution can do, known once dispatched.
    pub capabilities: Option<Capabilities>,
    /// Set when a cancel was requested (time of the request).
    pub cancel_requested_at: Option<Mono>,
    /// Queue a completion note in the owner's mailbox when finished.
    pub note: bool,
    /// Ask the host to wake the owning agent when finished.
    pub wake: bool,
    /// On a remote endpoint: the run's identity on the remote job host, once accepted.
    pub remote: Option<RemoteIdentity>,
    pub(crate) journal: Vec<JobEvent<V>>,
    /// Events recorded for this job (the last sequence number).
    pub(crate) recorded: u64,
    /// Events dropped from the journal by the registry's window.
    pub(crate) dropped: u64,
    /// Non-milestone events in `journal`.
    pub(crate) windowed: usize,
    pub(crate) finished_at: Option<usize>,
    pub(crate) quiet_deadline: Option<Mono>,
    pub(crate) subs: Vec<SubscriptionId>,
    pub(crate) waits: Waits,
    pub(crate) input_seq: u64,
    /// The generation of the owner record the job belongs to (see `Registry::begin_close_owner`).
    pub(crate) gen_: u64,
    /// Its journal is watched: recording an event reports it by `Registry::take_changed_jobs`.
    pub(crate) watched: bool,
}

impl<V: Payload> Job<V> {
    /// The retained journal, in order: every event, unless the registry's journal window
    /// dropped older non-milestone events (see [`Job::dropped_events`]); sequence numbers
    /// then have gaps.
    pub fn journal(&self) -> &[JobEvent<V>] {
        &self.journal
    }

    /// Number of events recorded for the job (its last sequence number).
    pub fn events_recorded(&self) -> u64 {
        self.recorded
    }

    /// Number of events the registry's journal window dropped from this job's journal.
    pub fn dropped_events(&self) -> u64 {
        self.dropped
    }

    /// The submitted payload.
    pub fn payload(&self) -> &V {
        match &self.journal[0].kind {
            EventKind::Submitted { payload, .. } => payload,
            _ => unreachable!("the first journal event is always `submitted`"),
        }
    }

    /// The reuse key given at submission.
    pub fn reuse_key(&self) -> Option<&str> {
        match &self.journal[0].kind {
            EventKind::Submitted { reuse_key, .. } => reuse_key.as_deref(),
            _ => None,
        }
    }

    /// The terminal outcome, once there is one.
    pub fn outcome(&self) -> Option<&Outcome<V>> {
        self.finished_at.map(|i| match &self.journal[i].kind {
            EventKind::Finished { outcome } => outcome,
            _ => unreachable!("finished_at indexes the outcome event"),
        })
    }

    /// Whether the job has its terminal outcome.
    pub fn is_finished(&self) -> bool {
        self.finished_at.is_some()
    }

    /// A JSON summary (without the journal).
    pub fn to_json(&self) -> Value {
        let mut o = json!({
            "job": self.id.0,
            "owner": self.owner.0,
            "origin": self.origin,
            "endpoint": self.endpoint.0,
            "state": self.state.as_str(),
            "wireId": self.wire_id,
            "capabilities": self.capabilities,
            "cancelRequested": self.cancel_requested_at.is_some(),
            "outcome": self.outcome().map(|o| o.to_json()),
            "events": self.recorded,
        });
        if let Some(r) = &self.remote {
            o["remote"] = json!(r);
        }
        o
    }
}

/// One item handed to an observer: an event, or the exact range it missed.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivery<V> {
    Event(JobEvent<V>),
    /// The observer's queue was full: events `from..=to` of `job` were not queued for it. They
    /// remain in the journal (unless a journal window dropped them since; a replay from
    /// dropped events reports them as missed too).
    Missed {
        job: JobId,
        from: u64,
        to: u64,
    },
}

impl<V: Payload> Delivery<V> {
    /// The JSON form: an event, or `{"type":"missed","job","from","to"}`.
    pub fn to_json(&self) -> Value {
        match self {
            Delivery::Event(e) => e.to_json(),
            Delivery::Missed { job, from, to } => {
                json!({"type": "missed", "job": job.0, "from": from, "to": to})
            }
        }
    }
}

/// An attributed completion note in an owner's mailbox.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Note {
    /// Stable across observers: lets them recognise the same terminal outcome.
    pub correlation: String,
    pub job: JobId,
    pub owner: OwnerId,
    pub origin: Origin,
    pub outcome: OutcomeKind,
    pub summary: String,
    pub at: Mono,
}

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// The job reached its terminal outcome.
    Finished(OutcomeKind),
    /// The wait's timeout elapsed; the job is untouched.
    TimedOut,
    /// The wait was cancelled; the job is untouched.
    Cancelled,
}

impl WaitEnd {
    /// `finished`, `timed_out` or `cancelled`.
    pub fn as_str(&self) -> &'static str {
        match self {
            WaitEnd::Finished(_) => "finished",
            WaitEnd::TimedOut => "timed_out",
            WaitEnd::Cancelled => "cancelled",
        }
    }
}

/// Work for the host, drained after every input.
#[derive(Clone, Debug, PartialEq)]
pub enum Output<V> {
    /// Put this request on the endpoint's transport.
    Send {
        endpoint: EndpointId,
        request: super::wire::WireRequest<V>,
    },
    /// Put these requests on the endpoint's transport as one batch frame
    /// ([`super::wire::batch_json`]), in order. Only for endpoints whose transport offers
    /// batches and whose worker announced them; at most [`super::wire::BATCH_MAX`] requests.
    SendBatch {
        endpoint: EndpointId,
        requests: Vec<super::wire::WireRequest<V>>,
    },
    /// Terminate the endpoint's execution host (Worker.terminate, kill the process).
    Terminate { endpoint: EndpointId },
    /// A wait ended.
    WaitSettled {
        wait: WaitId,
        job: JobId,
        end: WaitEnd,
    },
    /// The subscription has deliveries to take.
    Observed { subscription: SubscriptionId },
    /// A job reached its terminal outcome.
    JobFinished { job: JobId, outcome: OutcomeKind },
    /// A completion note was queued for `owner`.
    NoteQueued { owner: OwnerId, job: JobId },
    /// The job asked to wake its owner on completion.
    Wake { owner: OwnerId, job: JobId },
    /// Open a WebSocket to `url` for this remote endpoint; report the result with
    /// `Registry::on_socket_open` or `Registry::on_socket_closed` (a failed connect too).
    Connect { endpoint: EndpointId, url: String },
    /// Write this frame (one JSON text message) on the endpoint's open socket.
    SendFrame { endpoint: EndpointId, frame: Value },
    /// Close the endpoint's socket with this close code and reason (no report expected).
    CloseSocket {
        endpoint: EndpointId,
        code: u16,
        reason: String,
    },
}

impl<V: Payload> Output<V> {
    /// The JSON form, for vectors and logs.
    pub fn to_json(&self) -> Value {
        match self {
            Output::Send { endpoint, request } => {
                json!({"output": "send", "endpoint": endpoint.0, "message": request.to_json()})
            }
            // What goes on the wire: a send of one batch frame.
            Output::SendBatch { endpoint, requests } => json!({
                "output": "send", "endpoint": endpoint.0,
                "message": super::wire::batch_json(requests),
            }),
            Output::Terminate { endpoint } => {
                json!({"output": "terminate", "endpoint": endpoint.0})
            }
            Output::WaitSettled { wait, job, end } => {
                let mut o = json!({"output": "wait_settled", "wait": wait.0, "job": job.0, "end": end.as_str()});
                if let WaitEnd::Finished(k) = end {
                    o["outcome"] = json!(k.as_str());
                }
                o
            }
            Output::Observed { subscription } => {
                json!({"output": "observed", "subscription": subscription.0})
            }
            Output::JobFinished { job, outcome } => {
                json!({"output": "job_finished", "job": job.0, "outcome": outcome.as_str()})
            }
            Output::NoteQueued { owner, job } => {
                json!({"output": "note_queued", "owner": owner.0, "job": job.0})
            }
            Output::Wake { owner, job } => {
                json!({"output": "wake", "owner": owner.0, "job": job.0})
            }
            Output::Connect { endpoint, url } => {
                json!({"output": "connect", "endpoint": endpoint.0, "url": url})
            }
            Output::SendFrame { endpoint, frame } => {
                json!({"output": "frame", "endpoint": endpoint.0, "frame": frame})
            }
            Output::CloseSocket {
                endpoint,
                code,
                reason,
            } => {
                json!({"output": "close_socket", "endpoint": endpoint.0, "code": code, "reason": reason})
            }
        }
    }
}

/// What `cancel` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelStatus {
    /// The job had not started: it is now `cancelled` (never started).
    CancelledBeforeStart,
    /// A cancel was sent; an acknowledgement is expected.
    Requested { ack_expected: bool },
    /// A cancel was already requested earlier.
    AlreadyRequested,
    /// The job had already finished; nothing changed.
    AlreadyFinished(OutcomeKind),
    /// The job runs on a remote host whose connection is down: the cancel is recorded and
    /// delivered on resumption, or answered by the resumption window's expiry (`lost`).
    RequestedWhileDisconnected,
}

impl CancelStatus {
    /// Stable name of the status.
    pub fn as_str(&self) -> &'static str {
        match self {
            CancelStatus::CancelledBeforeStart => "cancelled_before_start",
            CancelStatus::Requested { .. } => "requested",
            CancelStatus::AlreadyRequested => "already_requested",
            CancelStatus::AlreadyFinished(_) => "already_finished",
            CancelStatus::RequestedWhileDisconnected => "requested_while_disconnected",
        }
    }
}

/// The result of `submit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submitted {
    pub job: JobId,
    /// True when an existing job was returned for the reuse key.
    pub reused: bool,
}

/// One unfinished job's fate when its owner closed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClosedJob {
    pub job: JobId,
    /// `queued`, `running` or the outcome it already had.
    pub was: String,
    pub outcome: OutcomeKind,
    pub summary: String,
}

/// What `close_owner` did, job by job.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseReport {
    pub owner: OwnerId,
    /// Every job the owner had, with the outcome it ended with.
    pub jobs: Vec<ClosedJob>,
    /// Endpoints terminated because the owner owned them.
    pub endpoints: Vec<EndpointId>,
    /// Completion notes that were still unread.
    pub unread_notes: Vec<Note>,
}

/// A job's pending waits, in the order they began: the first inline (most jobs are waited on
/// at most once: no allocation per job), any others on the heap.
#[derive(Clone, Debug, Default)]
pub(crate) struct Waits {
    first: Option<WaitId>,
    more: Vec<WaitId>,
}

impl Waits {
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub(crate) fn push(&mut self, w: WaitId) {
        if self.first.is_none() {
            self.first = Some(w);
        } else {
            self.more.push(w);
        }
    }

    /// Removes `w` (the others keep their order).
    pub(crate) fn remove(&mut self, w: WaitId) {
        if self.first == Some(w) {
            self.first = (!self.more.is_empty()).then(|| self.more.remove(0));
        } else {
            self.more.retain(|x| *x != w);
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &WaitId> {
        self.first.iter().chain(self.more.iter())
    }
}

impl IntoIterator for Waits {
    type Item = WaitId;
    type IntoIter = std::iter::Chain<std::option::IntoIter<WaitId>, std::vec::IntoIter<WaitId>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.more)
    }
}
