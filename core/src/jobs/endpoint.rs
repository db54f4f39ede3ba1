//! Per-endpoint state: readiness, capabilities, wire-id correlation and the endpoint's own log.

use std::collections::VecDeque;

use serde_json::{Value, json};

use super::types::{EndpointId, JobId, OwnerId};
use super::wire::{Capabilities, Violation};
use crate::Mono;

/// How an endpoint learns its worker's capabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hello {
    /// Queue runs until the worker's hello arrives, or until `timeout_ms` passes (then the base
    /// AIUI protocol is assumed and the endpoint log says so).
    Await { timeout_ms: u64 },
    /// Ready at once with the base protocol (an unmodified AIUI worker). A later hello still
    /// upgrades the capabilities of runs started after it.
    Skip,
    /// The host knows the capabilities (e.g. an in-process runner).
    Declared(Capabilities),
}

/// Parameters of a new endpoint.
#[derive(Clone, Debug)]
pub struct EndpointSpec {
    pub owner: OwnerId,
    /// Human label (script path, Worker URL).
    pub label: String,
    pub hello: Hello,
    /// How long a cancelled run without `cancelAck` must stay quiet before it counts as stopped.
    pub quiet_ms: u64,
    /// At most this many runs at once; further jobs stay queued.
    pub max_concurrent: Option<usize>,
    /// Messages larger than this are refused as protocol errors.
    pub max_message_bytes: usize,
    /// The transport can post batch frames (`wire::batch_json`). When its worker announces
    /// `batch` too, requests made while the wire is busy are held and sent together (see
    /// [`crate::jobs::Registry::flush_sends`]); the host then calls `flush_sends` at the end
    /// of each of its turns. Off by default: a host that never flushes never holds.
    pub batch_sends: bool,
}

impl EndpointSpec {
    /// Defaults: await hello for 1 s, quiet period 500 ms, unlimited runs, 16 MiB messages.
    pub fn new(owner: impl Into<String>, label: impl Into<String>) -> Self {
        EndpointSpec {
            owner: OwnerId(owner.into()),
            label: label.into(),
            hello: Hello::Await { timeout_ms: 1000 },
            quiet_ms: 500,
            max_concurrent: None,
            max_message_bytes: 16 << 20,
            batch_sends: false,
        }
    }
}

/// Whether an endpoint dispatches runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointState {
    /// Waiting for the worker's hello.
    Starting,
    /// Dispatching runs.
    Ready,
    /// A remote endpoint whose connection dropped at `since`: nothing is dispatched until it
    /// resumes; its running jobs keep running on the remote host until the window expires.
    Suspended { since: Mono },
    /// Gone; the reason says why.
    Closed { reason: String },
}

/// Something that happened to an endpoint (not to one run).
#[derive(Clone, Debug, PartialEq)]
pub enum EndpointEventKind {
    Opened {
        label: String,
    },
    Hello {
        protocol: Option<String>,
        capabilities: Capabilities,
    },
    /// No hello arrived in time; the base protocol is assumed.
    HelloTimedOut {
        timeout_ms: u64,
    },
    /// A malformed message; `id` is set when the message named a run.
    ProtocolError {
        id: Option<u64>,
        violation: Violation,
    },
    /// A reply for a wire id this endpoint never issued.
    UnknownRun {
        id: u64,
        reply: String,
    },
    /// A reply for a run whose job was disposed with its owner, or released. `job` is `None`
    /// (JSON `null`) for a run older than the endpoint's last 1,024 whose record is gone: the
    /// endpoint keeps the jobs of old runs only while their records are held.
    DisposedRun {
        id: u64,
        job: Option<JobId>,
        reply: String,
    },
    Closed {
        reason: String,
        terminated: bool,
    },
    /// A remote endpoint's socket opened (attempt 1 is the first connect).
    Connected {
        attempt: u32,
    },
    /// A remote endpoint's connection dropped.
    Disconnected {
        reason: String,
    },
    /// A remote endpoint resumed its session `after_ms` after the disconnect, replaying
    /// `replayed_out` of its own frames.
    Resumed {
        after_ms: u64,
        replayed_out: usize,
    },
    /// The remote host refused the hello or resume with this code.
    ResumeRefused {
        code: String,
        message: String,
    },
    /// The remote host refused one of this endpoint's frames.
    RemoteError {
        code: String,
        detail: String,
    },
}

/// One endpoint log record.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointEvent {
    pub seq: u64,
    pub at: Mono,
    pub kind: EndpointEventKind,
}

impl EndpointEvent {
    /// The JSON form.
    pub fn to_json(&self) -> Value {
        let mut o = json!({"seq": self.seq, "at": self.at});
        let (t, extra) = match &self.kind {
            EndpointEventKind::Opened { label } => ("opened", json!({"label": label})),
            EndpointEventKind::Hello {
                protocol,
                capabilities,
            } => (
                "hello",
                json!({"protocol": protocol, "capabilities": capabilities}),
            ),
            EndpointEventKind::HelloTimedOut { timeout_ms } => {
                ("hello_timed_out", json!({"timeoutMs": timeout_ms}))
            }
            EndpointEventKind::ProtocolError { id, violation } => (
                "protocol_error",
                json!({"id": id, "violation": violation, "message": violation.describe()}),
            ),
            EndpointEventKind::UnknownRun { id, reply } => {
                ("unknown_run", json!({"id": id, "reply": reply}))
            }
            EndpointEventKind::DisposedRun { id, job, reply } => (
                "disposed_run",
                json!({"id": id, "job": job.map(|j| j.0), "reply": reply}),
            ),
            EndpointEventKind::Closed { reason, terminated } => (
                "closed",
                json!({"reason": reason, "terminated": terminated}),
            ),
            EndpointEventKind::Connected { attempt } => ("connected", json!({"attempt": attempt})),
            EndpointEventKind::Disconnected { reason } => {
                ("disconnected", json!({"reason": reason}))
            }
            EndpointEventKind::Resumed {
                after_ms,
                replayed_out,
            } => (
                "resumed",
                json!({"afterMs": after_ms, "replayedOut": replayed_out}),
            ),
            EndpointEventKind::ResumeRefused { code, message } => {
                ("resume_refused", json!({"code": code, "message": message}))
            }
            EndpointEventKind::RemoteError { code, detail } => {
                ("remote_error", json!({"code": code, "detail": detail}))
            }
        };
        o["type"] = json!(t);
        if let (Value::Object(m), Value::Object(x)) = (&mut o, extra) {
            m.extend(x);
        }
        o
    }
}

/// How many of an endpoint's most recent wire ids keep their job whatever became of it: a
/// late reply for one of them names its job even after the job's record was released.
const WIRE_WINDOW: usize = 1024;

/// The jobs of an endpoint's wire ids. Wire ids are issued densely from 1; the last
/// [`WIRE_WINDOW`] are kept in order (8 bytes each, no hashing), older ones only while their
/// job's record is held (a long-lived run among many released ones), so the map is bounded by
/// the window plus the records held — not by every run the endpoint ever made.
#[derive(Clone, Debug)]
pub(crate) struct WireIds {
    /// The wire id of `recent[0]`.
    first: u64,
    recent: VecDeque<JobId>,
    /// Entries older than `first` whose job was held when they left the window, in wire id
    /// order (they leave the window in that order: appended, never inserted; found by binary
    /// search).
    old: Vec<(u64, JobId)>,
    /// `old.len()` after its last pruning.
    old_mark: usize,
}

impl Default for WireIds {
    fn default() -> Self {
        WireIds {
            first: 1,
            recent: VecDeque::new(),
            old: Vec::new(),
            old_mark: 0,
        }
    }
}

/// What an endpoint knows of a wire id ([`WireIds::get`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// Issued for this job.
    Job(JobId),
    /// Issued long ago (before the window) for a job whose record has since been released.
    Released,
    /// Never issued.
    Unknown,
}

impl WireIds {
    pub(crate) fn get(&self, wire: &u64) -> Wire {
        let w = *wire;
        if w == 0 {
            return Wire::Unknown;
        }
        if w < self.first {
            return match self.old.binary_search_by_key(&w, |(k, _)| *k) {
                Ok(i) => Wire::Job(self.old[i].1),
                Err(_) => Wire::Released,
            };
        }
        match usize::try_from(w - self.first)
            .ok()
            .and_then(|i| self.recent.get(i))
        {
            Some(j) => Wire::Job(*j),
            None => Wire::Unknown,
        }
    }

    /// Whether `wire` is one of the last [`WIRE_WINDOW`] issued (or not issued yet).
    pub(crate) fn is_recent(&self, wire: u64) -> bool {
        wire >= self.first
    }

    /// The job of `wire` when it is known.
    pub(crate) fn job(&self, wire: &u64) -> Option<JobId> {
        match self.get(wire) {
            Wire::Job(j) => Some(j),
            _ => None,
        }
    }

    /// Records the next wire id's job (`wire` is the next id issued); `held` says whether a
    /// job's record is still held, for entries leaving the window.
    pub(crate) fn insert(&mut self, wire: u64, job: JobId, held: impl Fn(JobId) -> bool) {
        debug_assert_eq!(
            wire,
            self.first + self.recent.len() as u64,
            "wire ids are issued densely"
        );
        self.recent.push_back(job);
        while self.recent.len() > WIRE_WINDOW {
            let j = self.recent.pop_front().expect("a full window");
            if held(j) {
                self.old.push((self.first, j));
            }
            self.first += 1;
        }
        // Entries of records released since they moved out: pruned once the map has doubled
        // (amortized O(1) per run).
        if self.old.len() > 2 * self.old_mark + 64 {
            self.old.retain(|(_, j)| held(*j));
            self.old_mark = self.old.len();
        }
    }

    /// Takes back `wire` when it is the last id issued (a run withdrawn before it reached the
    /// transport: see `Registry::withdraw_unposted`), so that it is issued again next.
    pub(crate) fn pop_last(&mut self, wire: u64) {
        if !self.recent.is_empty() && self.first + self.recent.len() as u64 - 1 == wire {
            self.recent.pop_back();
        }
    }

    /// Every wire id kept with its job, in wire id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, JobId)> + '_ {
        self.old.iter().copied().chain(
            self.recent
                .iter()
                .enumerate()
                .map(|(i, j)| (self.first + i as u64, *j)),
        )
    }

    /// Entries kept (for tests of the bound).
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.recent.len() + self.old.len()
    }
}

/// An endpoint's dispatched jobs in id order, on a sorted deque: runs are dispatched in
/// (nearly) increasing id order and mostly finish oldest first, so insertion and removal
/// touch one end, and an endpoint that runs one job at a time allocates nothing per job.
#[derive(Clone, Debug, Default)]
pub(crate) struct Running(VecDeque<JobId>);

impl Running {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Adds `job`; false when it was already there.
    pub(crate) fn insert(&mut self, job: JobId) -> bool {
        if self.0.back().is_none_or(|b| *b < job) {
            self.0.push_back(job);
            return true;
        }
        match self.0.binary_search(&job) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, job);
                true
            }
        }
    }

    /// Removes `job`; false when it was not there.
    pub(crate) fn remove(&mut self, job: &JobId) -> bool {
        if self.0.front() == Some(job) {
            self.0.pop_front();
            return true;
        }
        match self.0.binary_search(job) {
            Ok(i) => {
                self.0.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    pub(crate) fn iter(&self) -> std::collections::vec_deque::Iter<'_, JobId> {
        self.0.iter()
    }
}

impl IntoIterator for Running {
    type Item = JobId;
    type IntoIter = std::collections::vec_deque::IntoIter<JobId>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// An endpoint as the registry keeps it.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub id: EndpointId,
    pub owner: OwnerId,
    pub label: String,
    pub state: EndpointState,
    /// What runs started from now on can do.
    pub capabilities: Capabilities,
    pub quiet_ms: u64,
    pub max_concurrent: Option<usize>,
    pub max_message_bytes: usize,
    /// The transport offers batch frames ([`EndpointSpec::batch_sends`]).
    pub(crate) batch_sends: bool,
    /// A request went out since the host's last flush or since the worker was last heard
    /// from: further requests are held for one batch (see `Registry::send`).
    pub(crate) wire_busy: bool,
    /// Frames put on the transport (a batch frame counts once) and frames received from it.
    pub(crate) frames_sent: u64,
    pub(crate) frames_received: u64,
    pub(crate) next_wire: u64,
    /// Every wire id ever issued, with its job (ids are never reused).
    pub(crate) wire: WireIds,
    pub(crate) queue: VecDeque<JobId>,
    pub(crate) running: Running,
    events: Vec<EndpointEvent>,
    hello_timeout: Option<u64>,
    /// The registry's journal window (see `Registry::set_journal_window`).
    pub(crate) window: Option<usize>,
    /// Sequence numbers of the log's milestones (opened, the first hello, hello timeout,
    /// closed), kept by the window.
    pinned: Vec<u64>,
    recorded: u64,
    dropped: u64,
    protocol_errors: usize,
    /// Job records of the registry that run (or ran) here.
    pub(crate) jobs: usize,
}

impl Endpoint {
    pub(crate) fn open(id: EndpointId, now: Mono, spec: EndpointSpec) -> (Self, Option<Mono>) {
        let (state, capabilities, deadline, hello_timeout) = match spec.hello {
            Hello::Await { timeout_ms } => (
                EndpointState::Starting,
                Capabilities::default(),
                Some(now + timeout_ms),
                Some(timeout_ms),
            ),
            Hello::Skip => (EndpointState::Ready, Capabilities::default(), None, None),
            Hello::Declared(c) => (EndpointState::Ready, c, None, None),
        };
        let mut ep = Endpoint {
            id,
            owner: spec.owner,
            label: spec.label.clone(),
            state,
            capabilities,
            quiet_ms: spec.quiet_ms,
            max_concurrent: spec.max_concurrent,
            max_message_bytes: spec.max_message_bytes,
            batch_sends: spec.batch_sends,
            wire_busy: false,
            frames_sent: 0,
            frames_received: 0,
            next_wire: 1,
            wire: WireIds::default(),
            queue: VecDeque::new(),
            running: Running::default(),
            events: Vec::new(),
            hello_timeout,
            window: None,
            pinned: Vec::new(),
            recorded: 0,
            dropped: 0,
            protocol_errors: 0,
            jobs: 0,
        };
        ep.record(now, EndpointEventKind::Opened { label: spec.label });
        (ep, deadline)
    }

    /// The endpoint's own log: hello, protocol errors, replies for unknown runs, closure.
    /// Under a journal window it keeps its milestones (opened, the first hello, hello timeout,
    /// closed) and its most recent other events; see [`Endpoint::dropped_events`].
    pub fn events(&self) -> &[EndpointEvent] {
        &self.events
    }

    /// Number of log events the journal window dropped.
    pub fn dropped_events(&self) -> u64 {
        self.dropped
    }

    /// Number of protocol errors recorded (dropped ones included).
    pub fn protocol_errors(&self) -> usize {
        self.protocol_errors
    }

    /// Frames the registry put on this endpoint's transport (`Send` and `SendBatch` outputs:
    /// a batch frame counts once) and frames it received from it (`on_message` calls), so a
    /// host can see how many messages went per frame.
    pub fn frames(&self) -> (u64, u64) {
        (self.frames_sent, self.frames_received)
    }

    /// Jobs waiting for dispatch.
    pub fn queued(&self) -> impl Iterator<Item = &JobId> {
        self.queue.iter()
    }

    /// Jobs currently dispatched.
    pub fn running(&self) -> impl Iterator<Item = &JobId> {
        self.running.iter()
    }

    /// Whether requests to this endpoint are coalesced into batch frames: its transport
    /// offers them and its worker announced them.
    pub fn batches_sends(&self) -> bool {
        self.batch_sends && self.capabilities.batch
    }

    /// The JSON form (without the log).
    pub fn to_json(&self) -> Value {
        let state = match &self.state {
            EndpointState::Starting => json!("starting"),
            EndpointState::Ready => json!("ready"),
            EndpointState::Suspended { since } => json!({"suspended": since}),
            EndpointState::Closed { reason } => json!({"closed": reason}),
        };
        json!({
            "endpoint": self.id.0, "owner": self.owner.0, "label": self.label, "state": state,
            "capabilities": self.capabilities, "running": self.running.len(),
            "queued": self.queue.len(), "protocolErrors": self.protocol_errors(),
            "framesSent": self.frames_sent, "framesReceived": self.frames_received,
        })
    }

    pub(crate) fn record(&mut self, at: Mono, kind: EndpointEventKind) {
        self.recorded += 1;
        let seq = self.recorded;
        let milestone = match &kind {
            EndpointEventKind::Opened { .. }
            | EndpointEventKind::HelloTimedOut { .. }
            | EndpointEventKind::Closed { .. } => true,
            EndpointEventKind::Hello { .. } => !self.events.iter().any(|e| {
                self.pinned.contains(&e.seq) && matches!(e.kind, EndpointEventKind::Hello { .. })
            }),
            EndpointEventKind::ProtocolError { .. } => {
                self.protocol_errors += 1;
                false
            }
            _ => false,
        };
        if milestone {
            self.pinned.push(seq);
        }
        self.events.push(EndpointEvent { seq, at, kind });
        if let Some(n) = self.window {
            let windowed = self.events.len() - self.pinned.len();
            if windowed > 2 * n {
                let mut excess = windowed - n;
                let before = self.events.len();
                let pinned = &self.pinned;
                self.events.retain(|e| {
                    if excess > 0 && !pinned.contains(&e.seq) {
                        excess -= 1;
                        false
                    } else {
                        true
                    }
                });
                self.dropped += (before - self.events.len()) as u64;
            }
        }
    }

    /// Returns true when the hello made a starting endpoint ready.
    pub(crate) fn on_hello(
        &mut self,
        now: Mono,
        protocol: Option<String>,
        capabilities: Capabilities,
    ) -> bool {
        self.record(
            now,
            EndpointEventKind::Hello {
                protocol,
                capabilities,
            },
        );
        if matches!(self.state, EndpointState::Closed { .. }) {
            return false;
        }
        self.capabilities = capabilities;
        let was_starting = self.state == EndpointState::Starting;
        self.state = EndpointState::Ready;
        was_starting
    }

    /// Returns true when the timeout made a starting endpoint ready.
    pub(crate) fn on_hello_timeout(&mut self, now: Mono) -> bool {
        if self.state != EndpointState::Starting {
            return false;
        }
        self.record(
            now,
            EndpointEventKind::HelloTimedOut {
                timeout_ms: self.hello_timeout.unwrap_or_default(),
            },
        );
        self.state = EndpointState::Ready;
        true
    }
}
