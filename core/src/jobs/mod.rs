//! The portable job registry.
//!
//! A job is one execution with an owner, an origin and exactly one accepted terminal outcome.
//! The registry is sans-IO: hosts feed it calls, worker messages, closures and time, and drain
//! [`Output`]s (messages to send, waits that ended, notes queued). Every rule — what a cancel
//! means, when late evidence is late, what closing an owner does — is decided here, once.
//!
//! Lifecycle: `queued → running → succeeded | failed | cancelled | lost`. A cancel request is
//! recorded as `cancel_requested` and changes no outcome by itself: `cancelled` needs evidence
//! that the execution stopped (it never started, the worker acknowledged, or — for workers that
//! cannot acknowledge — the run went quiet, recorded as `no_acknowledgement`). A transport that
//! dies makes its running jobs `lost`: their effects are unknown.
//!
//! # Call order
//!
//! ```text
//! let mut reg = Registry::new(config);
//! let ep = reg.open_endpoint(now, spec);           // a Worker / child process / remote host
//! inputs, each with the host's monotonic `now`:
//!     submit(now, ..) | cancel(now, ..) | send_input | wait | observe | close_owner ..
//!     on_message(now, ep, msg) | on_undecodable | on_endpoint_closed(now, ep, ..)
//!     handle_timeout(now)                          // when poll_timeout()'s deadline passes
//! after every input:
//!     while let Some(out) = reg.poll_output() {   // or drain_outputs()
//!         Send / SendBatch → post it on the endpoint; Terminate → kill it; WaitSettled / JobFinished /
//!         NoteQueued / Wake / Observed → the host's waiters; Connect / SendFrame /
//!         CloseSocket → the remote link's socket
//!     }
//!     before yielding (end of the host's turn): if reg.holds_sends() { reg.flush_sends() }
//!         and carry out its outputs (batch frames: `SendBatch`)
//!     arm one timer at reg.poll_timeout()
//!     take_deliveries(sub) / read_mailbox(owner) / take_changed_jobs() when told to
//! ```

mod endpoint;
pub mod remote;
mod table;
mod types;
pub mod wire;

use std::collections::{BTreeSet, HashMap, VecDeque};

use thiserror::Error;

use endpoint::Wire;
pub use endpoint::{
    Endpoint, EndpointEvent, EndpointEventKind, EndpointSpec, EndpointState, Hello,
};
pub use remote::{RemoteInfo, RemoteSpec, RemoteTarget};
pub use types::*;
pub use wire::Capabilities;
use wire::{Reply, WireRequest};

use crate::Mono;
use crate::value::Payload;
use crate::vecmap::VecMap;

/// Errors of the job registry. Each has a stable code (see [`JobsError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum JobsError {
    #[error("no job {0} (it never existed or its owner was closed)")]
    UnknownJob(JobId),
    #[error("no endpoint {0}")]
    UnknownEndpoint(EndpointId),
    #[error("{0} is closed; submit to an open endpoint")]
    EndpointClosed(EndpointId),
    #[error("reuse key `{key}` belongs to {job}, which was submitted with a different payload")]
    ReuseConflict { key: String, job: JobId },
    #[error("{0} does not accept input: its worker did not announce the `input` capability")]
    InputUnsupported(JobId),
    #[error("{job} is {state}; input is delivered only to running jobs")]
    JobNotRunning { job: JobId, state: &'static str },
    #[error("no wait {0} (it already ended)")]
    UnknownWait(WaitId),
    #[error("no subscription {0}")]
    UnknownSubscription(SubscriptionId),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("{0} is a remote endpoint whose connection is down; retry once it resumes")]
    RemoteDisconnected(EndpointId),
    /// A value sent to a remote endpoint is not JSON data (its wire carries JSON text): refused
    /// at the call, nothing recorded.
    #[error(
        "the {what} cannot be sent to {endpoint}, a remote endpoint, whose wire carries JSON data only (null, booleans, finite numbers, strings, arrays, plain objects): {why}"
    )]
    NotJsonData {
        what: &'static str,
        endpoint: EndpointId,
        why: String,
    },
}

impl JobsError {
    /// The stable string code, as JS `.code` and HTTP problem `code`.
    pub fn code(&self) -> &'static str {
        match self {
            JobsError::UnknownJob(_) => "UNKNOWN_JOB",
            JobsError::UnknownEndpoint(_) => "UNKNOWN_ENDPOINT",
            JobsError::EndpointClosed(_) => "ENDPOINT_CLOSED",
            JobsError::ReuseConflict { .. } => "REUSE_CONFLICT",
            JobsError::InputUnsupported(_) => "INPUT_UNSUPPORTED",
            JobsError::JobNotRunning { .. } => "JOB_NOT_RUNNING",
            JobsError::UnknownWait(_) => "UNKNOWN_WAIT",
            JobsError::UnknownSubscription(_) => "UNKNOWN_SUBSCRIPTION",
            JobsError::InvalidArgument(_) => "INVALID_ARGUMENT",
            JobsError::RemoteDisconnected(_) => "REMOTE_DISCONNECTED",
            JobsError::NotJsonData { .. } => "INVALID_JSON",
        }
    }
}

impl crate::ErrorCode for JobsError {
    fn code(&self) -> &'static str {
        JobsError::code(self)
    }
}

/// A request to run `payload` on `endpoint` on behalf of `owner`.
#[derive(Clone, Debug)]
pub struct Submit<V> {
    pub owner: OwnerId,
    pub origin: Origin,
    pub endpoint: EndpointId,
    pub payload: V,
    /// When set, a job of the same owner with this key is returned instead of a new one.
    pub reuse_key: Option<String>,
    /// Queue a completion note for the owner (default true).
    pub note: bool,
    /// Ask the host to wake the owner when the job finishes (default false).
    pub wake: bool,
}

impl<V> Submit<V> {
    /// A submission with the defaults: no origin, no reuse, a note, no wake.
    pub fn new(owner: impl Into<String>, endpoint: EndpointId, payload: V) -> Self {
        Submit {
            owner: OwnerId(owner.into()),
            origin: Origin::default(),
            endpoint,
            payload,
            reuse_key: None,
            note: true,
            wake: false,
        }
    }
}

/// Registry construction parameters.
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    /// The first job id handed out (hosts may seed it so ids differ across sessions).
    pub first_job_id: u64,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig { first_job_id: 1 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Wait(WaitId),
    Quiet(JobId),
    Hello(EndpointId),
    /// A remote link's single next deadline (heartbeat, liveness, backoff, window).
    Remote(EndpointId),
}

#[derive(Debug)]
struct Subscription<V> {
    job: JobId,
    capacity: usize,
    queued_events: usize,
    queue: VecDeque<Delivery<V>>,
}

#[derive(Debug, Clone, Copy)]
struct Wait {
    job: JobId,
    deadline: Option<Mono>,
}

#[derive(Debug, Default)]
struct OwnerState {
    /// Unique per owner record: a record created after its owner closed gets a new one.
    gen_: u64,
    jobs: BTreeSet<JobId>,
    endpoints: VecMap<EndpointId, ()>,
    mailbox: VecDeque<MailNote>,
    reuse: HashMap<String, JobId>,
}

/// A completion note as a mailbox holds it: only what its [`Note`] says beyond its mailbox's
/// owner, its job and its outcome. The owner is the mailbox's, the correlation is
/// `{job}:{outcome}`, a success's summary is `{job} succeeded`, and an empty origin is not
/// stored; the [`Note`] is made when the note is read (a retained job's note is 32 bytes
/// with no allocation, not a 112-byte `Note` with three strings).
#[derive(Debug)]
struct MailNote {
    job: JobId,
    at: Mono,
    outcome: OutcomeKind,
    /// The summary, unless the outcome is a success (then `{job} succeeded`).
    summary: Option<Box<str>>,
    /// The origin, unless it is empty.
    origin: Option<Box<Origin>>,
}

impl MailNote {
    /// The note of `owner`'s mailbox.
    fn note(&self, owner: &OwnerId) -> Note {
        let mut correlation = String::with_capacity(24);
        push_job_id(&mut correlation, self.job);
        correlation.push(':');
        correlation.push_str(self.outcome.as_str());
        let summary = match &self.summary {
            Some(s) => s.to_string(),
            None => {
                let mut s = String::with_capacity(32);
                push_job_id(&mut s, self.job);
                s.push(' ');
                s.push_str(self.outcome.as_str());
                s
            }
        };
        Note {
            correlation,
            job: self.job,
            owner: owner.clone(),
            origin: self.origin.as_deref().cloned().unwrap_or_default(),
            outcome: self.outcome,
            summary,
            at: self.at,
        }
    }
}

/// A close of an owner in progress (see [`Registry::begin_close_owner`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CloseId(pub u64);

/// The first part of closing an owner: everything but the release of its finished jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct ClosingOwner {
    /// Names the close for [`Registry::close_owner_step`].
    pub close: CloseId,
    /// The report without its `jobs` and `unread_notes`, which [`Registry::close_owner_step`]
    /// returns in slices.
    pub report: CloseReport,
    /// Jobs and unread notes still to hand over.
    pub pending: usize,
}

/// One slice of a close in progress (see [`Registry::close_owner_step`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CloseSlice {
    /// Report lines of the jobs released, in job id order.
    pub jobs: Vec<ClosedJob>,
    /// Unread notes handed back, oldest first.
    pub unread_notes: Vec<Note>,
}

impl CloseSlice {
    /// Nothing was left to hand over.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.unread_notes.is_empty()
    }

    /// Jobs and notes in the slice.
    pub fn len(&self) -> usize {
        self.jobs.len() + self.unread_notes.len()
    }
}

/// An owner whose jobs are being released in slices. Its jobs are already invisible.
#[derive(Debug)]
struct Closing {
    /// The owner record's generation (its jobs' `gen_`).
    gen_: u64,
    jobs: BTreeSet<JobId>,
    /// What the jobs that were unfinished when the close began were then.
    was: HashMap<JobId, &'static str>,
    /// The owner (its notes' owner).
    owner: OwnerId,
    /// The owner's unread notes, still to hand back.
    notes: VecDeque<MailNote>,
}

/// Hashing for maps keyed by the registry's counters (wait and subscription ids): one
/// multiplication spreads consecutive ids over the table (no keyed SipHash per operation).
type DenseIds = std::hash::BuildHasherDefault<DenseIdHasher>;

#[derive(Default)]
struct DenseIdHasher(u64);

impl std::hash::Hasher for DenseIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(self.0 ^ u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: the high bits (which hashbrown's control bytes use) vary too.
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The job registry. `V` is the payload representation (JSON natively, `JsValue` in wasm).
#[derive(Debug)]
pub struct Registry<V> {
    jobs: table::JobTable<V>,
    endpoints: VecMap<EndpointId, Endpoint>,
    owners: VecMap<OwnerId, OwnerState>,
    subs: HashMap<SubscriptionId, Subscription<V>, DenseIds>,
    waits: HashMap<WaitId, Wait, DenseIds>,
    timers: BTreeSet<(Mono, Timer)>,
    outputs: VecDeque<Output<V>>,
    next_job: u64,
    next_endpoint: u64,
    next_sub: u64,
    next_wait: u64,
    events_recorded: u64,
    journal_window: Option<usize>,
    next_gen: u64,
    closing: Vec<Closing>,
    /// The links of remote endpoints (see [`Registry::open_remote`]).
    links: VecMap<EndpointId, remote::client::RemoteLink>,
    /// Retired endpoints, oldest first (see [`RETIRED_ENDPOINTS`]).
    retired: VecDeque<EndpointId>,
    /// Watched jobs whose journal changed since the last [`Registry::take_changed_jobs`].
    changed: BTreeSet<JobId>,
    /// Requests held for a batch frame, per endpoint, in order (see `Registry::send`).
    held: Vec<(EndpointId, Vec<WireRequest<V>>)>,
    /// Whether a consumer took the journal watches ([`Registry::attach_journal_consumer`]).
    journal_consumer: bool,
    /// The inputs [`Registry::send_input`] put on a local transport by themselves that
    /// [`Registry::withdraw_unposted_input`] can take back (that of the call whose outputs
    /// the host carries out, and one of a call made meanwhile). With `unposted_runs` it holds
    /// at most two entries: a call adds at most one, `Pending`, and the next call drops it
    /// unless a drain took it; a drain that takes one drops every older one, which the call
    /// that made the newer turned `TakenThenCalled`.
    unposted_inputs: Vec<UnpostedInput>,
    /// The jobs whose runs a [`Registry::submit`] started that [`Registry::withdraw_unposted`]
    /// can take back, and how far the host got with each (as `unposted_inputs`).
    unposted_runs: Vec<(JobId, Posting)>,
}

/// How far the host got, since the call that sent it, with a request the registry put on a
/// local transport that may be taken back ([`Registry::withdraw_unposted_input`],
/// [`Registry::withdraw_unposted`]). Only while the host carries out the outputs of that
/// call: every entry point but the output drains ([`Registry::drain_outputs`],
/// [`Registry::poll_output`], [`Registry::take_changed_jobs`]) and the withdrawals moves it
/// on ([`Posting::after_call`]), as does every drain ([`Posting::after_drain`]). A host that
/// withdraws drains with [`Registry::drain_outputs`]: each [`Registry::poll_output`] counts as
/// a drain, so polling one output at a time ends a request's carrying-out at the second poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Posting {
    /// Its `send` is among the outputs the host has not drained.
    Pending,
    /// The host drained it: it is carrying out those outputs (posting the request).
    Taken,
    /// The host drained it and made another call since: one made while carrying it out (its
    /// transport calling into the registry), or its next turn.
    TakenThenCalled,
}

impl Posting {
    /// After another call: a call made before the host took the request is its next one.
    fn after_call(self) -> Option<Self> {
        match self {
            Posting::Pending => None,
            Posting::Taken | Posting::TakenThenCalled => Some(Posting::TakenThenCalled),
        }
    }

    /// After a drain (`outputs`: whether it handed any out): the one after the drain that
    /// handed the request out ends the carrying-out when the host made a call since or it
    /// hands out new outputs. (An app drains again, finding nothing, before its host takes
    /// the outputs it passes on.)
    fn after_drain(self, outputs: bool) -> Option<Self> {
        match self {
            Posting::Pending => Some(Posting::Taken),
            Posting::Taken if !outputs => Some(Posting::Taken),
            Posting::Taken | Posting::TakenThenCalled => None,
        }
    }
}

/// What [`Registry::withdraw_unposted_input`] restores of an input sent by itself, and how
/// it tells that nothing happened since.
#[derive(Debug, Clone, Copy)]
struct UnpostedInput {
    job: JobId,
    /// The sequence number of its `input_delivered` event (the job's last).
    seq: u64,
    /// Its endpoint's frames sent, its own counted (the endpoint's last).
    frames: u64,
    /// The job's input counter before it (an input id it issued is issued again).
    input_seq: u64,
    /// Whether its endpoint's wire was busy before it (see `Registry::send`).
    wire_busy: bool,
    /// How far the host got with it.
    posting: Posting,
}

/// Retired endpoints a registry keeps. An endpoint is retired once it is closed, its owner
/// was closed ([`Registry::close_owner`]) and no job record refers to it any more (the owner's
/// jobs were released, other owners' runs on it forgotten or closed): nothing can use it
/// again, it is kept only to be read ([`Registry::endpoint`]). The newest
/// `RETIRED_ENDPOINTS` are kept; older ones are forgotten (unknown from then on), so a
/// long-running host that opens and closes endpoints (one per remote session, one per
/// worker) holds a bounded number of their records.
pub const RETIRED_ENDPOINTS: usize = 64;

impl<V: Payload> Default for Registry<V> {
    fn default() -> Self {
        Self::new(RegistryConfig::default())
    }
}

impl<V: Payload> Registry<V> {
    /// An empty registry.
    pub fn new(config: RegistryConfig) -> Self {
        Registry {
            jobs: table::JobTable::default(),
            endpoints: VecMap::new(),
            owners: VecMap::new(),
            subs: HashMap::default(),
            waits: HashMap::default(),
            timers: BTreeSet::new(),
            outputs: VecDeque::new(),
            next_job: config.first_job_id,
            next_endpoint: 1,
            next_sub: 1,
            next_wait: 1,
            events_recorded: 0,
            journal_window: None,
            next_gen: 1,
            closing: Vec::new(),
            links: VecMap::new(),
            retired: VecDeque::new(),
            changed: BTreeSet::new(),
            journal_consumer: false,
            held: Vec::new(),
            unposted_inputs: Vec::new(),
            unposted_runs: Vec::new(),
        }
    }

    /// Retires `id` when it is closed, owned by no open owner and referred to by no job
    /// record; forgets the oldest retired endpoints beyond [`RETIRED_ENDPOINTS`].
    fn retire_if_unused(&mut self, id: EndpointId) {
        let Some(ep) = self.endpoints.get(&id) else {
            return;
        };
        let owned = self
            .owners
            .get(&ep.owner)
            .is_some_and(|o| o.endpoints.contains_key(&id));
        if ep.jobs > 0
            || owned
            || !matches!(ep.state, EndpointState::Closed { .. })
            || self.retired.contains(&id)
        {
            return;
        }
        self.retired.push_back(id);
        while self.retired.len() > RETIRED_ENDPOINTS {
            let old = self.retired.pop_front().expect("over the bound");
            // Closed: no timer of its own is armed, its link (if remote) is closed.
            self.endpoints.remove(&old);
            self.links.remove(&old);
        }
    }

    /// A job record was removed: its endpoint may retire.
    fn job_released(&mut self, endpoint: EndpointId) {
        if let Some(ep) = self.endpoints.get_mut(&endpoint) {
            ep.jobs = ep.jobs.saturating_sub(1);
        }
        self.retire_if_unused(endpoint);
    }

    /// Bounds what each job's journal keeps: with `Some(n)`, a job keeps its milestones
    /// ([`EventKind::is_milestone`]) and at least its `n` most recent other events (at most
    /// `2n`: older ones are dropped in batches), so a worker that reports without end costs
    /// bounded memory. Dropped events are counted ([`Job::dropped_events`]); observers still
    /// get every event as it is recorded, and a replay over dropped events reports them as
    /// missed. Endpoint logs are bounded the same way. `None` (the default) keeps everything.
    pub fn set_journal_window(&mut self, window: Option<usize>) {
        self.entered();
        self.journal_window = window.map(|n| n.max(1));
        for (_, ep) in self.endpoints.iter_mut() {
            ep.window = self.journal_window;
        }
    }

    // ----- endpoints ------------------------------------------------------------------------

    /// Registers a transport. Runs are dispatched once it is ready (see [`Hello`]).
    pub fn open_endpoint(&mut self, now: Mono, spec: EndpointSpec) -> EndpointId {
        self.entered();
        let id = EndpointId(self.next_endpoint);
        self.next_endpoint += 1;
        let owner = spec.owner.clone();
        let (mut ep, hello_deadline) = Endpoint::open(id, now, spec);
        ep.window = self.journal_window;
        if let Some(d) = hello_deadline {
            self.timers.insert((d, Timer::Hello(id)));
        }
        self.endpoints.insert(id, ep);
        self.owner_state(owner).endpoints.insert(id, ());
        id
    }

    /// A message arrived from the endpoint's execution host: one message, or a batch frame
    /// of them (see [`wire::parse_frame`]), applied in order in this one call. Malformed
    /// messages are recorded as protocol errors; they never affect another run.
    pub fn on_message(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        msg: &V,
    ) -> Result<(), JobsError> {
        self.entered();
        let ep = self
            .endpoints
            .get_mut(&endpoint)
            .ok_or(JobsError::UnknownEndpoint(endpoint))?;
        // Heard from: the wire is idle again (the next lone request goes out at once).
        ep.wire_busy = false;
        ep.frames_received += 1;
        let max = ep.max_message_bytes;
        match wire::parse_frame(msg, max, ep.capabilities.batch) {
            Ok(wire::Frame::One(reply)) => self.apply_reply(now, endpoint, reply),
            Ok(wire::Frame::Batch(items)) => {
                for item in &items {
                    match wire::parse_batched(item, max) {
                        Ok(reply) => self.apply_reply(now, endpoint, reply),
                        Err(refused) => self.refuse(now, endpoint, refused),
                    }
                }
            }
            Err(refused) => self.refuse(now, endpoint, refused),
        }
        Ok(())
    }

    /// Records a refused message: a protocol error of the endpoint, and of the named run.
    fn refuse(&mut self, now: Mono, endpoint: EndpointId, refused: wire::Refused) {
        let ep = self.endpoints.get_mut(&endpoint).expect("checked");
        ep.record(
            now,
            EndpointEventKind::ProtocolError {
                id: refused.id,
                violation: refused.violation.clone(),
            },
        );
        // Show the violation in the named run's journal too, when that run is ours.
        if let Some(job) = refused.id.and_then(|w| ep.wire.job(&w))
            && self.jobs.get(&job).is_some_and(|j| !j.is_finished())
        {
            self.record(
                job,
                now,
                Source::Endpoint(endpoint),
                EventKind::ProtocolError {
                    violation: Box::new(refused.violation),
                },
            );
        }
    }

    /// Applies one well-formed message of the endpoint's worker.
    fn apply_reply(&mut self, now: Mono, endpoint: EndpointId, reply: Reply<V>) {
        let remote = self.links.contains_key(&endpoint);
        let ep = self.endpoints.get_mut(&endpoint).expect("checked");
        let Some(wire_id) = reply.id() else {
            // A hello.
            if let Reply::Hello {
                protocol,
                mut capabilities,
            } = reply
            {
                // A remote host settles every cancel (worker ack, its own quiet period, or
                // lost): the client never measures quiet across the socket. Its link carries
                // one message per frame.
                capabilities.cancel_ack |= remote;
                capabilities.batch &= !remote;
                // Requests held under the old capabilities go out first.
                self.flush_endpoint(endpoint);
                let ep = self.endpoints.get_mut(&endpoint).expect("checked");
                let became_ready = ep.on_hello(now, protocol, capabilities);
                if remote {
                    self.remote_hello_seen(endpoint);
                }
                if became_ready {
                    self.timers.retain(|(_, t)| *t != Timer::Hello(endpoint));
                    self.pump(endpoint, now);
                }
            }
            return;
        };
        let closed = matches!(ep.state, EndpointState::Closed { .. });
        let job = match ep.wire.get(&wire_id) {
            Wire::Job(job) => job,
            Wire::Released => {
                ep.record(
                    now,
                    EndpointEventKind::DisposedRun {
                        id: wire_id,
                        job: None,
                        reply: reply.kind().into(),
                    },
                );
                return;
            }
            Wire::Unknown => {
                ep.record(
                    now,
                    EndpointEventKind::UnknownRun {
                        id: wire_id,
                        reply: reply.kind().into(),
                    },
                );
                return;
            }
        };
        if self.live_job(job).is_none() {
            // An old run (before the window) names its job only while the record is held, so
            // the answer does not depend on when the kept entries were last pruned.
            let known = self.jobs.get(&job).is_some();
            let ep = self.endpoints.get_mut(&endpoint).expect("checked");
            let job = (known || ep.wire.is_recent(wire_id)).then_some(job);
            ep.record(
                now,
                EndpointEventKind::DisposedRun {
                    id: wire_id,
                    job,
                    reply: reply.kind().into(),
                },
            );
            return;
        }
        let source = Source::Endpoint(endpoint);
        let j = self.jobs.get(&job).expect("checked");
        if j.is_finished() || closed {
            self.record(job, now, source, EventKind::LateEvidence { reply });
            return;
        }
        // Any message from a run that was asked to stop resets its quiet period.
        if j.cancel_requested_at.is_some() && j.quiet_deadline.is_some() {
            let quiet = self.endpoints[&endpoint].quiet_ms;
            self.set_quiet(job, Some(now + quiet));
        }
        match reply {
            Reply::Hello { .. } => unreachable!("hello has no id"),
            Reply::Progress { value, .. } => {
                self.record(job, now, source, EventKind::Progress { value });
            }
            Reply::Partial { value, .. } => {
                self.record(job, now, source, EventKind::Partial { value });
            }
            Reply::Done { value, .. } => {
                self.finish(job, now, source, Outcome::Succeeded { value });
            }
            Reply::Error { message, code, .. } => {
                self.finish(
                    job,
                    now,
                    source,
                    Outcome::Failed {
                        message,
                        code,
                        started: true,
                    },
                );
            }
            Reply::Cancelled { .. } => {
                self.record(job, now, source, EventKind::CancelAcknowledged);
                self.finish(
                    job,
                    now,
                    source,
                    Outcome::Cancelled {
                        evidence: CancelEvidence::Acknowledged,
                    },
                );
            }
            Reply::InputApplied { input_id, .. } => {
                self.record(job, now, source, EventKind::InputApplied { input_id });
            }
            Reply::InputRejected {
                input_id, message, ..
            } => {
                self.record(
                    job,
                    now,
                    source,
                    EventKind::InputRejected {
                        input_id,
                        by: InputRejector::Worker,
                        reason: message,
                    },
                );
            }
        }
    }

    /// The transport received something it could not decode (a line that is not JSON, a
    /// `messageerror`). Recorded as a protocol error of the endpoint; no run is affected.
    pub fn on_undecodable(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        detail: &str,
    ) -> Result<(), JobsError> {
        self.entered();
        let ep = self
            .endpoints
            .get_mut(&endpoint)
            .ok_or(JobsError::UnknownEndpoint(endpoint))?;
        ep.record(
            now,
            EndpointEventKind::ProtocolError {
                id: None,
                violation: wire::Violation::Undecodable {
                    detail: detail.chars().take(200).collect(),
                },
            },
        );
        Ok(())
    }

    /// The endpoint's execution host went away on its own (the Worker threw or exited, the
    /// process died, the connection dropped). Running jobs become `lost`; queued jobs fail
    /// without having started.
    pub fn on_endpoint_closed(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        reason: &str,
    ) -> Result<(), JobsError> {
        self.entered();
        self.close_endpoint_inner(now, endpoint, reason, false, LostEvidence::TransportClosed)
    }

    /// Terminates the endpoint on the caller's behalf: emits [`Output::Terminate`]; running
    /// jobs become `lost` (termination is not an acknowledgement: effects are unknown).
    pub fn terminate_endpoint(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        reason: &str,
    ) -> Result<(), JobsError> {
        self.entered();
        self.close_endpoint_inner(now, endpoint, reason, true, LostEvidence::Terminated)
    }

    fn close_endpoint_inner(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        reason: &str,
        terminate: bool,
        evidence: LostEvidence,
    ) -> Result<(), JobsError> {
        self.close_endpoint_with(now, endpoint, reason, terminate, evidence, &|_| None)
    }

    /// Closes the endpoint; `extra(job)` may add to a running job's lost reason.
    fn close_endpoint_with(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        reason: &str,
        terminate: bool,
        evidence: LostEvidence,
        extra: &dyn Fn(JobId) -> Option<String>,
    ) -> Result<(), JobsError> {
        let ep = self
            .endpoints
            .get(&endpoint)
            .ok_or(JobsError::UnknownEndpoint(endpoint))?;
        if matches!(ep.state, EndpointState::Closed { .. }) {
            return Ok(());
        }
        // What was held for the endpoint goes out before it closes (as it would have).
        self.flush_endpoint(endpoint);
        // A remote endpoint closes its socket instead of terminating a process.
        let remote = self.remote_close(now, endpoint, reason, terminate);
        let terminate_output = terminate && !remote;
        let ep = self.endpoints.get_mut(&endpoint).expect("checked");
        ep.state = EndpointState::Closed {
            reason: reason.into(),
        };
        ep.record(
            now,
            EndpointEventKind::Closed {
                reason: reason.into(),
                terminated: terminate,
            },
        );
        let running: Vec<JobId> = std::mem::take(&mut ep.running).into_iter().collect();
        let queued: Vec<JobId> = std::mem::take(&mut ep.queue).into_iter().collect();
        self.timers.retain(|(_, t)| *t != Timer::Hello(endpoint));
        if terminate_output {
            self.outputs.push_back(Output::Terminate { endpoint });
        }
        let source = if terminate {
            Source::Registry
        } else {
            Source::Endpoint(endpoint)
        };
        for job in running {
            self.record(
                job,
                now,
                source,
                EventKind::Terminated {
                    reason: reason.into(),
                },
            );
            let reason = match extra(job) {
                Some(x) => format!("{reason}; {x}"),
                None => reason.into(),
            };
            self.finish(job, now, source, Outcome::Lost { reason, evidence });
        }
        for job in queued {
            self.finish(
                job,
                now,
                source,
                Outcome::Failed {
                    message: format!(
                        "{endpoint} closed before the job started ({reason}); it never ran"
                    ),
                    code: Some("ENDPOINT_CLOSED".into()),
                    started: false,
                },
            );
        }
        Ok(())
    }

    /// The endpoint record (state, capabilities, its own event log).
    pub fn endpoint(&self, id: EndpointId) -> Option<&Endpoint> {
        self.endpoints.get(&id)
    }

    /// All endpoints, in id order.
    pub fn endpoints(&self) -> impl Iterator<Item = &Endpoint> {
        self.endpoints.values()
    }

    // ----- jobs -----------------------------------------------------------------------------

    /// Accepts a discrete request and returns its identity. Equal requests stay separate
    /// unless a reuse key is given. A payload for a remote endpoint must be JSON data
    /// ([`Payload::json_data`]): otherwise `NotJsonData`, and nothing is recorded; what is
    /// recorded and sent is its JSON data, copied at the call.
    pub fn submit(&mut self, now: Mono, mut req: Submit<V>) -> Result<Submitted, JobsError> {
        self.entered();
        let ep = self
            .endpoints
            .get(&req.endpoint)
            .ok_or(JobsError::UnknownEndpoint(req.endpoint))?;
        if matches!(ep.state, EndpointState::Closed { .. }) {
            return Err(JobsError::EndpointClosed(req.endpoint));
        }
        if self.links.contains_key(&req.endpoint) {
            req.payload = remote_json(&req.payload, "payload", req.endpoint)?;
        }
        if let Some(key) = &req.reuse_key {
            if key.is_empty() {
                return Err(JobsError::InvalidArgument(
                    "reuse key must not be empty".into(),
                ));
            }
            if let Some(&existing) = self.owners.get(&req.owner).and_then(|o| o.reuse.get(key)) {
                let j = &self.jobs[&existing];
                if j.payload().same_as(&req.payload) {
                    return Ok(Submitted {
                        job: existing,
                        reused: true,
                    });
                }
                return Err(JobsError::ReuseConflict {
                    key: key.clone(),
                    job: existing,
                });
            }
        }
        let id = JobId(self.next_job);
        self.next_job += 1;
        let owner_state = self.owner_state_of(&req.owner);
        let gen_ = owner_state.gen_;
        owner_state.jobs.insert(id);
        if let Some(key) = &req.reuse_key {
            owner_state.reuse.insert(key.clone(), id);
        }
        let job = Job {
            id,
            owner: req.owner,
            origin: req.origin,
            endpoint: req.endpoint,
            state: JobState::Queued,
            wire_id: None,
            capabilities: None,
            cancel_requested_at: None,
            note: req.note,
            wake: req.wake,
            remote: None,
            journal: Vec::with_capacity(4),
            recorded: 0,
            dropped: 0,
            windowed: 0,
            finished_at: None,
            quiet_deadline: None,
            subs: Vec::new(),
            waits: Default::default(),
            input_seq: 0,
            gen_,
            watched: false,
        };
        self.jobs.insert(job);
        if let Some(ep) = self.endpoints.get_mut(&req.endpoint) {
            ep.jobs += 1;
        }
        self.record(
            id,
            now,
            Source::Caller,
            EventKind::Submitted {
                payload: req.payload,
                reuse_key: req.reuse_key,
            },
        );
        self.endpoints
            .get_mut(&req.endpoint)
            .expect("checked")
            .queue
            .push_back(id);
        self.pump(req.endpoint, now);
        if self.jobs[&id].state == JobState::Running {
            self.unposted_runs.push((id, Posting::Pending));
        }
        Ok(Submitted {
            job: id,
            reused: false,
        })
    }

    /// Asks the job's execution to stop. Records `cancel_requested`; the outcome changes only
    /// with evidence (never started, acknowledgement, or quiet period without acknowledgement).
    pub fn cancel(
        &mut self,
        now: Mono,
        job: JobId,
        reason: &str,
    ) -> Result<CancelStatus, JobsError> {
        self.entered();
        let j = self.live_job(job).ok_or(JobsError::UnknownJob(job))?;
        match j.state {
            JobState::Finished(k) => Ok(CancelStatus::AlreadyFinished(k)),
            _ if j.cancel_requested_at.is_some() => Ok(CancelStatus::AlreadyRequested),
            JobState::Queued => {
                let endpoint = j.endpoint;
                if let Some(ep) = self.endpoints.get_mut(&endpoint) {
                    ep.queue.retain(|q| *q != job);
                }
                self.jobs.get_mut(&job).expect("exists").cancel_requested_at = Some(now);
                self.record(
                    job,
                    now,
                    Source::Caller,
                    EventKind::CancelRequested {
                        reason: reason.into(),
                    },
                );
                self.finish(
                    job,
                    now,
                    Source::Registry,
                    Outcome::Cancelled {
                        evidence: CancelEvidence::NeverStarted,
                    },
                );
                Ok(CancelStatus::CancelledBeforeStart)
            }
            JobState::Running => {
                let endpoint = j.endpoint;
                let wire_id = j.wire_id.expect("running jobs have a wire id");
                let ack = j.capabilities.unwrap_or_default().cancel_ack;
                self.jobs.get_mut(&job).expect("exists").cancel_requested_at = Some(now);
                self.record(
                    job,
                    now,
                    Source::Caller,
                    EventKind::CancelRequested {
                        reason: reason.into(),
                    },
                );
                self.send(endpoint, job, WireRequest::Cancel { id: wire_id });
                if self.remote_down(endpoint) {
                    self.remote_cancel_pending(endpoint, job, now);
                    return Ok(CancelStatus::RequestedWhileDisconnected);
                }
                if !ack {
                    let quiet = self.endpoints[&endpoint].quiet_ms;
                    self.set_quiet(job, Some(now + quiet));
                }
                Ok(CancelStatus::Requested { ack_expected: ack })
            }
        }
    }

    /// Delivers structured input to a running job whose worker announced `input`. Returns the
    /// input id; `input_applied` follows when the worker applies it. An input for a job on a
    /// remote endpoint must be JSON data ([`Payload::json_data`]): otherwise `NotJsonData`,
    /// nothing recorded and no input id issued; what is sent is its JSON data, copied at the
    /// call.
    pub fn send_input(
        &mut self,
        now: Mono,
        job: JobId,
        input_id: Option<String>,
        value: V,
    ) -> Result<String, JobsError> {
        self.entered();
        let endpoint = self
            .live_job(job)
            .ok_or(JobsError::UnknownJob(job))?
            .endpoint;
        // Refused before anything is recorded or an input id issued.
        let value = if self.links.contains_key(&endpoint) {
            remote_json(&value, "input", endpoint)?
        } else {
            value
        };
        let j = self.jobs.get_mut(&job).expect("checked");
        j.input_seq += 1;
        let input_id = input_id.unwrap_or_else(|| format!("input-{}", j.input_seq));
        let refuse = match j.state {
            JobState::Finished(_) => {
                return Err(JobsError::JobNotRunning {
                    job,
                    state: j.state.as_str(),
                });
            }
            JobState::Queued => Some(JobsError::JobNotRunning {
                job,
                state: "queued",
            }),
            JobState::Running if !j.capabilities.unwrap_or_default().input => {
                Some(JobsError::InputUnsupported(job))
            }
            JobState::Running
                if matches!(
                    self.endpoints.get(&j.endpoint).map(|e| &e.state),
                    Some(EndpointState::Suspended { .. })
                ) =>
            {
                Some(JobsError::RemoteDisconnected(j.endpoint))
            }
            JobState::Running => None,
        };
        if let Some(err) = refuse {
            self.record(
                job,
                now,
                Source::Caller,
                EventKind::InputRejected {
                    input_id,
                    by: InputRejector::Registry,
                    reason: err.code().into(),
                },
            );
            return Err(err);
        }
        let (endpoint, wire_id) = (j.endpoint, j.wire_id.expect("running"));
        let input_seq = j.input_seq - 1;
        let revocable =
            !self.links.contains_key(&endpoint) && self.input_revocable(&self.jobs[&job]);
        let wire_busy = self.endpoints[&endpoint].wire_busy;
        // Sent before it is recorded: the host carries out the send before the observers'
        // notification, so an input withdrawn because its post threw is never reported.
        self.send(
            endpoint,
            job,
            WireRequest::Input {
                id: wire_id,
                input_id: input_id.clone(),
                value,
            },
        );
        self.record(
            job,
            now,
            Source::Caller,
            EventKind::InputDelivered {
                input_id: input_id.clone(),
            },
        );
        if revocable {
            self.unposted_inputs.push(UnpostedInput {
                job,
                seq: self.jobs[&job].recorded,
                frames: self.endpoints[&endpoint].frames_sent,
                input_seq,
                wire_busy,
                posting: Posting::Pending,
            });
        }
        Ok(input_id)
    }

    /// Whether an input sent to `job` now could be withdrawn
    /// ([`Registry::withdraw_unposted_input`]) should the host's transport refuse it, or
    /// needs no withdrawing: `false` only when it would be sent to a local endpoint and
    /// could not be taken back, because it would leave in one batch frame with runs held
    /// for it, or its event would be read at once (the job's journal is watched:
    /// [`Registry::watch_journal`]) or trim the job's journal window. A host whose values
    /// are references (the JS binding) snapshots the value at the call when this is false,
    /// so that posting it cannot fail. `true` when the input would not be sent (an unknown
    /// job, one not running or taking no input: refused) and for a remote endpoint (the
    /// registry copies its values as JSON data at the call: [`Payload::json_data`]).
    #[must_use]
    pub fn input_withdrawable(&self, job: JobId) -> bool {
        let Some(j) = self.live_job(job) else {
            return true;
        };
        j.state != JobState::Running
            || !j.capabilities.unwrap_or_default().input
            || self.links.contains_key(&j.endpoint)
            || self.input_revocable(j)
    }

    /// Whether an input sent now to running job `j` on a local endpoint could be withdrawn.
    fn input_revocable(&self, j: &Job<V>) -> bool {
        !j.watched
            && !self.held.iter().any(|(e, _)| *e == j.endpoint)
            && self.journal_window.is_none_or(|n| j.windowed < 2 * n)
    }

    /// Withdraws input `input_id` of `job` that the host could not put on its transport, as
    /// if it had never been sent: the JS host's `postMessage` throws (`DataCloneError`) on a
    /// value it cannot copy, and an input that leaves at once is not copied beforehand. Its
    /// `input_delivered` event goes (from the journal and from the observers' queues, where
    /// nobody took it yet; a pending notification left with nothing to deliver is dropped),
    /// its `send` is dropped if still pending, its endpoint's frame count and wire state are
    /// restored, and the input id it was given is issued again: the job is as before the
    /// call, the run goes on. Valid only while the host carries out the outputs of the call
    /// that sent it: the input went out by itself on a local endpoint (see
    /// [`Registry::input_withdrawable`]), nothing was recorded for the job nor sent on its
    /// endpoint since, no observer took its event, no other call was made before its `send`
    /// was drained, and the host has not drained outputs again since it did, after another
    /// call (one made while posting it, by its transport, is allowed) or with new outputs;
    /// otherwise `InvalidArgument`, changing nothing. Once past this call, nothing sent before
    /// it can be withdrawn either.
    pub fn withdraw_unposted_input(&mut self, job: JobId, input_id: &str) -> Result<(), JobsError> {
        let j = self.live_job(job).ok_or(JobsError::UnknownJob(job))?;
        let refuse = |why: &str| {
            Err(JobsError::InvalidArgument(format!(
                "input {input_id:?} of {job} {why}"
            )))
        };
        let Some(at) = self.unposted_inputs.iter().rposition(|u| u.job == job) else {
            return refuse(
                "cannot be withdrawn: it was not sent by itself in this call, or the host went on since",
            );
        };
        let u = self.unposted_inputs[at];
        let last = matches!(j.journal.last(), Some(JobEvent {
            seq,
            kind: EventKind::InputDelivered { input_id: id },
            ..
        }) if *seq == u.seq && id == input_id);
        if !last || j.recorded != u.seq || self.endpoints[&j.endpoint].frames_sent != u.frames {
            return refuse(
                "cannot be withdrawn: something was recorded for its job or sent on its endpoint since",
            );
        }
        let untaken =
            j.subs.iter().all(
                |sub| match self.subs.get(sub).and_then(|s| s.queue.back()) {
                    Some(Delivery::Event(e)) => e.seq == u.seq,
                    Some(Delivery::Missed { to, .. }) => *to == u.seq,
                    _ => false,
                },
            );
        if !untaken {
            return refuse("cannot be withdrawn: an observer took its event");
        }
        self.unposted_inputs.remove(at);
        let j = self.jobs.get_mut(&job).expect("checked");
        j.journal.pop();
        j.recorded -= 1;
        // `input_delivered` is no milestone: it counted in the window.
        j.windowed -= 1;
        j.input_seq = u.input_seq;
        self.events_recorded -= 1;
        let endpoint = j.endpoint;
        for &sub in &j.subs {
            // (Each holds the event: `untaken` above.)
            let s = self.subs.get_mut(&sub).expect("checked");
            match s.queue.back_mut() {
                Some(Delivery::Missed { from, to, .. }) if *from < *to => *to -= 1,
                Some(Delivery::Missed { .. }) => {
                    s.queue.pop_back();
                }
                _ => {
                    s.queue.pop_back();
                    s.queued_events -= 1;
                }
            }
            if s.queue.is_empty()
                && let Some(i) = self.outputs.iter().rposition(
                    |o| matches!(o, Output::Observed { subscription } if *subscription == sub),
                )
            {
                self.outputs.remove(i);
            }
        }
        let ep = self.endpoints.get_mut(&endpoint).expect("checked");
        ep.frames_sent -= 1;
        ep.wire_busy = u.wire_busy;
        let pending = self.outputs.iter().rposition(|o| {
            matches!(o, Output::Send { endpoint: e, request: WireRequest::Input { input_id: id, .. } }
                if *e == endpoint && id == input_id)
        });
        if let Some(i) = pending {
            self.outputs.remove(i);
        }
        Ok(())
    }

    /// Withdraws a run the host could not put on its transport, as if it had never been
    /// submitted: the JS host's `postMessage` throws (`DataCloneError`) on a payload it cannot
    /// copy, and a submit whose run left at once takes no copy beforehand. The record goes,
    /// with its journal events (no observer can have seen them: none may be attached), its
    /// reuse key and its endpoint's slot; its unposted `send` is dropped if still pending; the
    /// job and wire ids are issued again when nothing was issued after them; no outcome, note
    /// or wake results. Valid only while the host carries out the outputs of the
    /// [`Registry::submit`] that started it (no other call before its `send` was drained, and
    /// no drain after another call or with new outputs since: as
    /// [`Registry::withdraw_unposted_input`]): the job is running, its run is the last wire id
    /// its endpoint issued (not a remote endpoint's, not held for a batch), nothing but
    /// `submitted` and `started` is recorded for it (nothing from the worker) and no wait or
    /// subscription refers to it; otherwise `InvalidArgument`, changing nothing.
    /// `now` dates the start of a run queued meanwhile that the freed slot lets start.
    pub fn withdraw_unposted(&mut self, now: Mono, job: JobId) -> Result<(), JobsError> {
        let j = self.live_job(job).ok_or(JobsError::UnknownJob(job))?;
        let refuse = |why: &str| Err(JobsError::InvalidArgument(format!("{job} {why}")));
        let Some(at) = self.unposted_runs.iter().position(|(j, _)| *j == job) else {
            return refuse(
                "cannot be withdrawn: it was not submitted in this call, or the host went on since",
            );
        };
        let (endpoint, Some(wire)) = (j.endpoint, j.wire_id) else {
            return refuse("cannot be withdrawn: its run was not sent");
        };
        if j.state != JobState::Running
            || j.recorded != 2
            || !j.waits.is_empty()
            || !j.subs.is_empty()
            || j.watched
        {
            return refuse("cannot be withdrawn: it was reported on, observed or waited for");
        }
        let ep = &self.endpoints[&endpoint];
        if self.links.contains_key(&endpoint)
            || ep.next_wire != wire + 1
            || self
                .held
                .iter()
                .any(|(e, rs)| *e == endpoint && rs.iter().any(|r| r.id() == wire))
        {
            return refuse("cannot be withdrawn: its run was not the last one put on the wire");
        }
        self.unposted_runs.remove(at);
        let j = self.jobs.remove(&job).expect("checked");
        self.events_recorded -= j.recorded;
        let ep = self.endpoints.get_mut(&endpoint).expect("checked");
        ep.running.remove(&job);
        ep.wire.pop_last(wire);
        ep.next_wire = wire;
        ep.frames_sent = ep.frames_sent.saturating_sub(1);
        // The run went out at once, so the wire was idle before it.
        ep.wire_busy = false;
        let pending = self.outputs.iter().position(|o| {
            matches!(o, Output::Send { endpoint: e, request: WireRequest::Run { id, .. } }
                if *e == endpoint && *id == wire)
        });
        if let Some(i) = pending {
            self.outputs.remove(i);
        }
        if job.0 + 1 == self.next_job {
            self.next_job = job.0;
            self.jobs.trim_back();
        }
        if let Some(o) = self.owners.get_mut(&j.owner) {
            o.jobs.remove(&job);
            if let Some(k) = j.reuse_key()
                && o.reuse.get(k) == Some(&job)
            {
                o.reuse.remove(k);
            }
            if o.jobs.is_empty() && o.endpoints.is_empty() && o.mailbox.is_empty() {
                self.owners.remove(&j.owner);
            }
        }
        self.job_released(endpoint);
        // A slot freed: a run queued meanwhile may start.
        self.pump(endpoint, now);
        Ok(())
    }

    /// The job record.
    pub fn job(&self, id: JobId) -> Option<&Job<V>> {
        self.live_job(id)
    }

    /// All retained jobs (finished ones stay until their owner closes), in id order.
    pub fn jobs(&self) -> impl Iterator<Item = &Job<V>> {
        self.jobs.values().filter(|j| !self.released(j))
    }

    /// The outcome of a finished job whose record is still held, even when its owner was
    /// closed and the record awaits release: hosts turning an [`Output::WaitSettled`] drained
    /// after a close into a result use it.
    pub fn held_outcome(&self, id: JobId) -> Option<&Outcome<V>> {
        self.jobs.get(&id).and_then(|j| j.outcome())
    }

    /// Job records held, including those of closed owners not yet released (see
    /// [`Registry::close_owner_step`]).
    pub fn retained_jobs(&self) -> usize {
        self.jobs.len()
    }

    /// A job that is not being released with its closed owner.
    fn live_job(&self, id: JobId) -> Option<&Job<V>> {
        self.jobs.get(&id).filter(|j| !self.released(j))
    }

    /// Whether the job's owner was closed (its record awaits release).
    fn released(&self, j: &Job<V>) -> bool {
        !self.closing.is_empty() && self.closing.iter().any(|c| c.gen_ == j.gen_)
    }

    /// [`Registry::owner_state`] without copying the name when the owner has a record.
    fn owner_state_of(&mut self, owner: &OwnerId) -> &mut OwnerState {
        if self.owners.get(owner).is_some_and(|o| o.gen_ != 0) {
            return self.owners.get_mut(owner).expect("checked");
        }
        self.owner_state(owner.clone())
    }

    /// The owner's record, created (with a fresh generation) when it has none.
    fn owner_state(&mut self, owner: OwnerId) -> &mut OwnerState {
        let gen_ = self.next_gen;
        let state = self.owners.get_or_insert_with(owner, OwnerState::default);
        if state.gen_ == 0 {
            state.gen_ = gen_;
            self.next_gen += 1;
        }
        state
    }

    /// The retained jobs of one owner.
    pub fn jobs_of<'a>(&'a self, owner: &'a OwnerId) -> impl Iterator<Item = &'a Job<V>> + 'a {
        self.owners
            .get(owner)
            .into_iter()
            .flat_map(|o| o.jobs.iter())
            .filter_map(|id| self.jobs.get(id))
    }

    /// Removes a finished job's record, for hosts that bound what they retain (the ops graph
    /// forgets a Worker cell's job together with the calculation it ran). Refused (`false`)
    /// while the job is unfinished or something still refers to it: a pending wait, a
    /// subscription, or its owner's reuse key. Unknown ids give `false`.
    pub fn forget(&mut self, id: JobId) -> bool {
        self.entered();
        let Some(j) = self.live_job(id) else {
            return false;
        };
        let reused = j.reuse_key().is_some_and(|k| {
            self.owners
                .get(&j.owner)
                .and_then(|o| o.reuse.get(k))
                .is_some_and(|r| *r == id)
        });
        if !j.is_finished()
            || !j.waits.is_empty()
            || j.subs.iter().any(|s| self.subs.contains_key(s))
            || reused
        {
            return false;
        }
        let j = self.jobs.remove(&id).expect("checked");
        if j.watched {
            self.changed.insert(id);
        }
        if let Some(d) = j.quiet_deadline {
            self.timers.remove(&(d, Timer::Quiet(id)));
        }
        if let Some(o) = self.owners.get_mut(&j.owner) {
            o.jobs.remove(&id);
            if o.jobs.is_empty() && o.endpoints.is_empty() && o.mailbox.is_empty() {
                self.owners.remove(&j.owner);
            }
        }
        self.job_released(j.endpoint);
        true
    }

    /// Number of journal events recorded since creation.
    pub fn events_recorded(&self) -> u64 {
        self.events_recorded
    }

    // ----- observation ----------------------------------------------------------------------

    /// Watches a job's journal for a consumer that reads journals itself (the ops app reads
    /// its Worker-cell jobs this way): from now on every event recorded for the job reports
    /// it once at the next [`Registry::take_changed_jobs`], so the consumer reads only the
    /// journals that changed instead of scanning every job it follows. The job is reported at
    /// the next take too, so the events it recorded before it was watched are read as well.
    /// Watching changes no outcome, no output and no other observer.
    pub fn watch_journal(&mut self, job: JobId) -> Result<(), JobsError> {
        self.entered();
        self.live_job(job).ok_or(JobsError::UnknownJob(job))?;
        self.jobs.get_mut(&job).expect("checked").watched = true;
        self.changed.insert(job);
        Ok(())
    }

    /// Stops watching a job's journal (see [`Registry::watch_journal`]); `false` for an
    /// unknown job. A report already pending for it stays until the next take.
    pub fn unwatch_journal(&mut self, job: JobId) -> bool {
        self.entered();
        match self.jobs.get_mut(&job) {
            Some(j) => {
                j.watched = false;
                true
            }
            None => false,
        }
    }

    /// The watched jobs whose journal changed since the last take (see
    /// [`Registry::watch_journal`]), in id order, each once. A watched job whose record was
    /// released since ([`Registry::forget`], [`Registry::close_owner_step`]) is reported too,
    /// so the consumer learns it is gone ([`Registry::job`] is then `None`; so it is as soon as
    /// the owner's close begins, which records every unfinished job's outcome). Bounded: at
    /// most one entry per job watched since the previous take (a released job stays until
    /// this take; an unwatched job's pending entry too).
    ///
    /// There is one set for the registry: its consumer takes it whole, so a registry has one
    /// journal consumer ([`Registry::attach_journal_consumer`]), as it has one output stream.
    #[must_use]
    pub fn take_changed_jobs(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.changed).into_iter().collect()
    }

    /// Claims the journal watches for one consumer (the ops app does, at load): `false` when
    /// another consumer already has them — the changed set ([`Registry::take_changed_jobs`])
    /// and the outputs ([`Registry::drain_outputs`]) are each one stream, read by one consumer.
    pub fn attach_journal_consumer(&mut self) -> bool {
        self.entered();
        !std::mem::replace(&mut self.journal_consumer, true)
    }

    /// Whether a consumer claimed the journal watches ([`Registry::attach_journal_consumer`]).
    pub fn has_journal_consumer(&self) -> bool {
        self.journal_consumer
    }

    /// Whether a watched job's journal changed since the last [`Registry::take_changed_jobs`].
    pub fn has_changed_jobs(&self) -> bool {
        !self.changed.is_empty()
    }

    /// Subscribes to a job's journal. `from_seq = Some(n)` replays from event `n` (1 = the
    /// whole history); `None` delivers only new events. At most `capacity` events wait in the
    /// queue; beyond that the observer is told exactly which sequence numbers it missed.
    pub fn observe(
        &mut self,
        job: JobId,
        from_seq: Option<u64>,
        capacity: usize,
    ) -> Result<SubscriptionId, JobsError> {
        self.entered();
        if capacity == 0 {
            return Err(JobsError::InvalidArgument(
                "capacity must be at least 1".into(),
            ));
        }
        self.live_job(job).ok_or(JobsError::UnknownJob(job))?;
        let j = self.jobs.get_mut(&job).expect("checked");
        let id = SubscriptionId(self.next_sub);
        self.next_sub += 1;
        j.subs.push(id);
        let mut sub = Subscription {
            job,
            capacity,
            queued_events: 0,
            queue: VecDeque::new(),
        };
        if let Some(from) = from_seq {
            // Events the journal window dropped are reported as missed.
            let mut next = from.max(1);
            for ev in j.journal.iter().filter(|e| e.seq >= from) {
                if ev.seq > next {
                    push_missed(&mut sub, job, next, ev.seq - 1);
                }
                push_delivery(&mut sub, ev);
                next = ev.seq + 1;
            }
            if next <= j.recorded {
                push_missed(&mut sub, job, next, j.recorded);
            }
        }
        let has = !sub.queue.is_empty();
        self.subs.insert(id, sub);
        if has {
            self.outputs
                .push_back(Output::Observed { subscription: id });
        }
        Ok(id)
    }

    /// Takes the queued deliveries of a subscription (events and missed ranges, in order).
    #[must_use = "the deliveries are gone once taken: hand them to the subscriber"]
    pub fn take_deliveries(&mut self, sub: SubscriptionId) -> Result<Vec<Delivery<V>>, JobsError> {
        self.entered();
        let s = self
            .subs
            .get_mut(&sub)
            .ok_or(JobsError::UnknownSubscription(sub))?;
        s.queued_events = 0;
        Ok(s.queue.drain(..).collect())
    }

    /// Stops an observation. The job is untouched. Returns false if it was already gone.
    pub fn unsubscribe(&mut self, sub: SubscriptionId) -> bool {
        self.entered();
        match self.subs.remove(&sub) {
            Some(s) => {
                if let Some(j) = self.jobs.get_mut(&s.job) {
                    j.subs.retain(|x| *x != sub);
                }
                true
            }
            None => false,
        }
    }

    /// Waits for the job's terminal outcome; ends with [`Output::WaitSettled`]. A timeout or
    /// [`Registry::cancel_wait`] ends only the wait. `now` is read only for the timeout's
    /// deadline (a host need not read its clock for a wait without one).
    pub fn wait(
        &mut self,
        now: Mono,
        job: JobId,
        timeout_ms: Option<u64>,
    ) -> Result<WaitId, JobsError> {
        self.entered();
        self.live_job(job).ok_or(JobsError::UnknownJob(job))?;
        let j = self.jobs.get_mut(&job).expect("checked");
        let id = WaitId(self.next_wait);
        self.next_wait += 1;
        if let JobState::Finished(k) = j.state {
            self.outputs.push_back(Output::WaitSettled {
                wait: id,
                job,
                end: WaitEnd::Finished(k),
            });
            return Ok(id);
        }
        j.waits.push(id);
        let deadline = timeout_ms.map(|t| now.plus(t));
        if let Some(d) = deadline {
            self.timers.insert((d, Timer::Wait(id)));
        }
        self.waits.insert(id, Wait { job, deadline });
        Ok(id)
    }

    /// Cancels a wait. The job keeps running.
    pub fn cancel_wait(&mut self, wait: WaitId) -> Result<(), JobsError> {
        self.entered();
        self.end_wait(wait, WaitEnd::Cancelled)
            .then_some(())
            .ok_or(JobsError::UnknownWait(wait))
    }

    fn end_wait(&mut self, wait: WaitId, end: WaitEnd) -> bool {
        let Some(w) = self.waits.remove(&wait) else {
            return false;
        };
        if let Some(d) = w.deadline {
            self.timers.remove(&(d, Timer::Wait(wait)));
        }
        if let Some(j) = self.jobs.get_mut(&w.job) {
            j.waits.remove(wait);
        }
        self.outputs.push_back(Output::WaitSettled {
            wait,
            job: w.job,
            end,
        });
        true
    }

    // ----- owners and mailboxes -------------------------------------------------------------

    /// Takes the owner's unread completion notes (reading is explicit).
    #[must_use = "the notes are gone once read: hand them to the owner"]
    pub fn read_mailbox(&mut self, owner: &OwnerId) -> Vec<Note> {
        self.entered();
        self.owners
            .get_mut(owner)
            .map(|o| o.mailbox.drain(..).map(|n| n.note(owner)).collect())
            .unwrap_or_default()
    }

    /// The owner's unread notes, without taking them.
    pub fn peek_mailbox<'a>(&'a self, owner: &'a OwnerId) -> impl Iterator<Item = Note> + 'a {
        self.owners
            .get(owner)
            .into_iter()
            .flat_map(move |o| o.mailbox.iter().map(move |n| n.note(owner)))
    }

    /// The number of the owner's unread notes.
    pub fn mailbox_len(&self, owner: &OwnerId) -> usize {
        self.owners.get(owner).map_or(0, |o| o.mailbox.len())
    }

    /// Disposes everything the owner owns. Unfinished jobs get an explicit outcome: queued jobs
    /// are cancelled (never started); running jobs become `lost` — their endpoint is
    /// terminated when the owner owns it, otherwise a cancel is sent and the stop is
    /// unconfirmed. Finished jobs keep their outcome. All of the owner's jobs are then removed.
    /// The work is linear in the owner's jobs; [`Registry::begin_close_owner`] and
    /// [`Registry::close_owner_step`] do the same in bounded slices.
    pub fn close_owner(&mut self, now: Mono, owner: &OwnerId) -> CloseReport {
        self.entered();
        let ClosingOwner {
            close, mut report, ..
        } = self.begin_close_owner(now, owner);
        let all = self.close_owner_step(close, usize::MAX);
        report.jobs = all.jobs;
        report.unread_notes = all.unread_notes;
        report
    }

    /// Closes the owner (see [`Registry::close_owner`]) except for releasing its jobs'
    /// records: every unfinished job gets its outcome now, owned endpoints are terminated, the
    /// owner's mailbox is handed back, and from now on none of its jobs can be found (they are
    /// unknown to `job`, `cancel`, `wait`, `observe`, and late replies count as replies for
    /// disposed runs). The work is linear in the owner's unfinished jobs and endpoints only;
    /// the records are released by [`Registry::close_owner_step`], a slice at a time.
    pub fn begin_close_owner(&mut self, now: Mono, owner: &OwnerId) -> ClosingOwner {
        self.entered();
        let Some(state) = self.owners.get(owner) else {
            return ClosingOwner {
                close: CloseId(0),
                report: CloseReport {
                    owner: owner.clone(),
                    jobs: vec![],
                    endpoints: vec![],
                    unread_notes: vec![],
                },
                pending: 0,
            };
        };
        let gen_ = state.gen_;
        let owned_endpoints: Vec<EndpointId> = state.endpoints.keys().copied().collect();
        // The unfinished jobs are exactly those queued or running on some endpoint.
        let mut unfinished: Vec<JobId> = Vec::new();
        for ep in self.endpoints.values() {
            for id in ep.queue.iter().chain(ep.running.iter()) {
                if self.jobs.get(id).is_some_and(|j| j.gen_ == gen_) {
                    unfinished.push(*id);
                }
            }
        }
        unfinished.sort_unstable();
        unfinished.dedup();
        let mut was = HashMap::with_capacity(unfinished.len());
        // Suppress notes: the report is the owner's notice.
        for id in &unfinished {
            let j = self.jobs.get_mut(id).expect("owned");
            was.insert(*id, j.state.as_str());
            j.note = false;
        }
        let mut terminated = Vec::new();
        for ep in owned_endpoints {
            if !matches!(self.endpoints[&ep].state, EndpointState::Closed { .. }) {
                let _ = self.close_endpoint_inner(
                    now,
                    ep,
                    "owner closed: endpoint terminated",
                    true,
                    LostEvidence::OwnerClosed,
                );
                terminated.push(ep);
            }
            // Jobs of other owners on this endpoint were handled by the close above.
        }
        // Queued jobs first, so that settling a running job does not dispatch one of them.
        let (queued, running): (Vec<JobId>, Vec<JobId>) = unfinished
            .iter()
            .partition(|id| self.jobs[*id].state == JobState::Queued);
        for id in queued.iter().chain(running.iter()) {
            let j = &self.jobs[id];
            match j.state {
                JobState::Finished(_) => {}
                JobState::Queued => {
                    let _ = self.cancel(now, *id, "owner closed");
                }
                JobState::Running => {
                    let (endpoint, wire_id) = (j.endpoint, j.wire_id.expect("running"));
                    if j.cancel_requested_at.is_none() {
                        self.jobs.get_mut(id).expect("owned").cancel_requested_at = Some(now);
                        self.record(
                            *id,
                            now,
                            Source::Registry,
                            EventKind::CancelRequested {
                                reason: "owner closed".into(),
                            },
                        );
                        self.send(endpoint, *id, WireRequest::Cancel { id: wire_id });
                    }
                    self.finish(
                        *id,
                        now,
                        Source::Registry,
                        Outcome::Lost {
                            reason: "owner closed while the run was active; cancel sent, stop not confirmed"
                                .into(),
                            evidence: LostEvidence::OwnerClosed,
                        },
                    );
                }
            }
        }
        let state = self.owners.remove(owner).expect("checked");
        for (ep, ()) in state.endpoints.iter() {
            self.retire_if_unused(*ep);
        }
        let pending = state.jobs.len() + state.mailbox.len();
        if pending > 0 {
            self.closing.push(Closing {
                gen_,
                jobs: state.jobs,
                was,
                owner: owner.clone(),
                notes: state.mailbox,
            });
        }
        ClosingOwner {
            close: CloseId(gen_),
            report: CloseReport {
                owner: owner.clone(),
                jobs: vec![],
                endpoints: terminated,
                unread_notes: vec![],
            },
            pending,
        }
    }

    /// Hands over up to `budget` items of a close begun by [`Registry::begin_close_owner`]:
    /// unread notes first, then job records, released in job id order with their lines of the
    /// report. Empty once everything is handed over (or for an unknown close).
    pub fn close_owner_step(&mut self, close: CloseId, budget: usize) -> CloseSlice {
        self.entered();
        let Some(at) = self.closing.iter().position(|c| c.gen_ == close.0) else {
            return CloseSlice::default();
        };
        let c = &mut self.closing[at];
        let take = budget.min(c.notes.len());
        let unread_notes: Vec<Note> = c.notes.drain(..take).map(|n| n.note(&c.owner)).collect();
        let budget = budget - take;
        let mut out = Vec::with_capacity(budget.min(c.jobs.len()));
        while out.len() < budget {
            let Some(id) = self.closing[at].jobs.pop_first() else {
                break;
            };
            let Some(j) = self.jobs.remove(&id) else {
                continue;
            };
            if j.watched {
                self.changed.insert(id);
            }
            self.job_released(j.endpoint);
            for w in j.waits.iter() {
                self.waits.remove(w);
            }
            // Subscriptions keep their queued deliveries until the observer drains them.
            if let Some(d) = j.quiet_deadline {
                self.timers.remove(&(d, Timer::Quiet(id)));
            }
            let outcome = match j.finished_at.map(|i| &j.journal[i].kind) {
                Some(EventKind::Finished { outcome }) => outcome,
                _ => unreachable!("closed owners' jobs are finished"),
            };
            let kind = outcome.kind();
            out.push(ClosedJob {
                job: id,
                was: self.closing[at]
                    .was
                    .get(&id)
                    .copied()
                    .unwrap_or(kind.as_str())
                    .into(),
                outcome: kind,
                summary: outcome.summary(),
            });
        }
        if self.closing[at].jobs.is_empty() && self.closing[at].notes.is_empty() {
            self.closing.swap_remove(at);
        }
        CloseSlice {
            jobs: out,
            unread_notes,
        }
    }

    /// Job records and notes a close begun by [`Registry::begin_close_owner`] has yet to hand
    /// over.
    pub fn close_pending(&self, close: CloseId) -> usize {
        self.closing
            .iter()
            .find(|c| c.gen_ == close.0)
            .map_or(0, |c| c.jobs.len() + c.notes.len())
    }

    // ----- time and outputs -----------------------------------------------------------------

    /// The earliest time at which [`Registry::handle_timeout`] has something to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Mono> {
        self.timers.first().map(|(t, _)| *t)
    }

    /// Fires every timer due at `now`: wait timeouts, quiet periods, hello timeouts.
    pub fn handle_timeout(&mut self, now: Mono) {
        self.entered();
        while let Some(&(at, timer)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            match timer {
                Timer::Wait(w) => {
                    self.end_wait(w, WaitEnd::TimedOut);
                }
                Timer::Quiet(job) => {
                    let Some(j) = self.jobs.get_mut(&job) else {
                        continue;
                    };
                    if j.quiet_deadline != Some(at) || j.is_finished() {
                        continue;
                    }
                    j.quiet_deadline = None;
                    let quiet_ms = self.endpoints[&j.endpoint].quiet_ms;
                    self.record(
                        job,
                        now,
                        Source::Registry,
                        EventKind::NoAcknowledgement { quiet_ms },
                    );
                    self.finish(
                        job,
                        now,
                        Source::Registry,
                        Outcome::Cancelled {
                            evidence: CancelEvidence::Quiet { quiet_ms },
                        },
                    );
                }
                Timer::Hello(ep) => {
                    let e = self
                        .endpoints
                        .get_mut(&ep)
                        .expect("endpoints are never removed");
                    if e.on_hello_timeout(now) {
                        self.pump(ep, now);
                    }
                }
                Timer::Remote(ep) => self.remote_timer(now, ep, at),
            }
        }
    }

    /// The host's turn ended (a JS host: its microtask; any host: before it waits for
    /// events): every request held for a batch goes out now, as [`Output::SendBatch`] (or
    /// [`Output::Send`] when one is held), and every endpoint's wire counts as idle again. A
    /// host that opens endpoints with [`EndpointSpec::batch_sends`] calls it whenever
    /// [`Registry::holds_sends`] says so before it yields; others never need to.
    pub fn flush_sends(&mut self) {
        self.entered();
        while !self.held.is_empty() {
            self.flush_held(0);
        }
        for (_, ep) in self.endpoints.iter_mut() {
            ep.wire_busy = false;
        }
    }

    /// Whether requests are held for a batch (see [`Registry::flush_sends`]).
    #[must_use]
    pub fn holds_sends(&self) -> bool {
        !self.held.is_empty()
    }

    /// Whether a run submitted to `endpoint` now would leave on its transport within the
    /// submit call: the endpoint is ready with a free slot and nothing queued before it, and
    /// (when it batches) its wire is idle with nothing held. A host whose payloads are
    /// references (the JS binding) snapshots the payload when it would not, so what is sent
    /// is what the caller passed, not what the value became by the time it left. `true` for
    /// an unknown endpoint (the submit fails anyway, with its own error) and for a remote
    /// one (the registry copies its payloads as JSON data at the call:
    /// [`Payload::json_data`]).
    #[must_use]
    pub fn sends_at_once(&self, endpoint: EndpointId) -> bool {
        if self.links.contains_key(&endpoint) {
            return true;
        }
        let Some(ep) = self.endpoints.get(&endpoint) else {
            return true;
        };
        let ready = matches!(ep.state, EndpointState::Ready)
            && ep.max_concurrent.is_none_or(|m| ep.running.len() < m)
            && ep.queue.is_empty();
        ready
            && (!ep.batches_sends()
                || (!ep.wire_busy && !self.held.iter().any(|(e, _)| *e == endpoint)))
    }

    /// Whether `owner` holds reuse key `key`: a submit with that key is then answered from
    /// the job it names (reused, or refused as a conflict) and creates no run, so a host that
    /// snapshots payloads (see [`Registry::sends_at_once`]) need not copy its payload.
    #[must_use]
    pub fn holds_reuse_key(&self, owner: &OwnerId, key: &str) -> bool {
        self.owners
            .get(owner)
            .is_some_and(|o| o.reuse.contains_key(key))
    }

    /// The next output for the host.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output<V>> {
        self.drained();
        self.outputs.pop_front()
    }

    /// All pending outputs, in order.
    #[must_use]
    pub fn drain_outputs(&mut self) -> std::collections::vec_deque::Drain<'_, Output<V>> {
        self.drained();
        self.outputs.drain(..)
    }

    // ----- internals ------------------------------------------------------------------------

    /// An entry point other than the output drains and the withdrawals was called: a
    /// request sent by an earlier call is taken back no more, unless the host is still
    /// carrying out that call's outputs (see [`Posting`]).
    fn entered(&mut self) {
        debug_assert!(self.unposted_inputs.len() + self.unposted_runs.len() <= 2);
        self.unposted_inputs
            .retain_mut(|u| u.posting.after_call().map(|p| u.posting = p).is_some());
        self.unposted_runs
            .retain_mut(|(_, posting)| posting.after_call().map(|p| *posting = p).is_some());
    }

    /// The host drains outputs (see [`Posting`]).
    fn drained(&mut self) {
        let outputs = !self.outputs.is_empty();
        self.unposted_inputs.retain_mut(|u| {
            u.posting
                .after_drain(outputs)
                .map(|p| u.posting = p)
                .is_some()
        });
        self.unposted_runs.retain_mut(|(_, posting)| {
            posting.after_drain(outputs).map(|p| *posting = p).is_some()
        });
    }

    /// Dispatches queued jobs while the endpoint is ready and under its concurrency limit.
    fn pump(&mut self, endpoint: EndpointId, now: Mono) {
        loop {
            let ep = self.endpoints.get_mut(&endpoint).expect("exists");
            let EndpointState::Ready = ep.state else {
                return;
            };
            if ep.max_concurrent.is_some_and(|m| ep.running.len() >= m) {
                return;
            }
            let Some(job) = ep.queue.pop_front() else {
                return;
            };
            let wire_id = ep.next_wire;
            ep.next_wire += 1;
            let jobs = &self.jobs;
            ep.wire.insert(wire_id, job, |j| jobs.get(&j).is_some());
            ep.running.insert(job);
            let capabilities = ep.capabilities;
            let j = self.jobs.get_mut(&job).expect("queued jobs exist");
            j.state = JobState::Running;
            j.wire_id = Some(wire_id);
            j.capabilities = Some(capabilities);
            let payload = j.payload().clone();
            self.record(
                job,
                now,
                Source::Registry,
                EventKind::Started {
                    wire_id,
                    capabilities,
                },
            );
            self.send(
                endpoint,
                job,
                WireRequest::Run {
                    id: wire_id,
                    payload,
                },
            );
        }
    }

    /// Puts a request on the endpoint's transport: through its remote link when it has one.
    ///
    /// On an endpoint that batches ([`Endpoint::batches_sends`]) a run goes out at once only
    /// while the wire is idle (nothing sent since the worker was last heard from, or since
    /// the host's last [`Registry::flush_sends`], which a host calls when requests are held):
    /// the first request after a reply is never delayed; a second one sent before the
    /// worker answers waits for the end of the host's turn. Later ones
    /// are held, in order, and go out together as one batch frame at the host's flush, as
    /// soon as [`wire::BATCH_MAX`] are held, or with the first cancel or input among them (a
    /// cancel or input is never held past the call that made it).
    fn send(&mut self, endpoint: EndpointId, job: JobId, request: WireRequest<V>) {
        if self.links.contains_key(&endpoint) {
            if let Some(ep) = self.endpoints.get_mut(&endpoint) {
                ep.frames_sent += 1;
            }
            self.remote_send(endpoint, job, request);
            return;
        }
        let ep = self.endpoints.get_mut(&endpoint).expect("exists");
        if !ep.batches_sends() {
            ep.frames_sent += 1;
            self.outputs.push_back(Output::Send { endpoint, request });
            return;
        }
        let run = matches!(request, WireRequest::Run { .. });
        let slot = self.held.iter().position(|(e, _)| *e == endpoint);
        let busy = std::mem::replace(&mut ep.wire_busy, true);
        let i = match slot {
            None if run && !busy => {
                ep.frames_sent += 1;
                self.outputs.push_back(Output::Send { endpoint, request });
                return;
            }
            Some(i) => i,
            None => {
                self.held.push((endpoint, Vec::new()));
                self.held.len() - 1
            }
        };
        self.held[i].1.push(request);
        if !run || self.held[i].1.len() >= wire::BATCH_MAX {
            self.flush_held(i);
        }
    }

    /// Emits held requests `self.held[i]`: one `Send` for one, a `SendBatch` for more.
    fn flush_held(&mut self, i: usize) {
        let (endpoint, mut requests) = self.held.remove(i);
        if let Some(ep) = self.endpoints.get_mut(&endpoint) {
            ep.frames_sent += 1;
        }
        if requests.len() == 1 {
            let request = requests.pop().expect("one");
            self.outputs.push_back(Output::Send { endpoint, request });
        } else {
            self.outputs
                .push_back(Output::SendBatch { endpoint, requests });
        }
    }

    /// Emits the requests held for `endpoint`, if any.
    fn flush_endpoint(&mut self, endpoint: EndpointId) {
        if let Some(i) = self.held.iter().position(|(e, _)| *e == endpoint) {
            self.flush_held(i);
        }
    }

    fn set_quiet(&mut self, job: JobId, deadline: Option<Mono>) {
        let j = self.jobs.get_mut(&job).expect("exists");
        if let Some(old) = j.quiet_deadline.take() {
            self.timers.remove(&(old, Timer::Quiet(job)));
        }
        if let Some(d) = deadline {
            j.quiet_deadline = Some(d);
            self.timers.insert((d, Timer::Quiet(job)));
        }
    }

    /// Appends an event to the job's journal and fans it out to observers.
    fn record(&mut self, job: JobId, at: Mono, source: Source, kind: EventKind<V>) {
        let j = self
            .jobs
            .get_mut(&job)
            .expect("recording for an existing job");
        j.recorded += 1;
        let ev = JobEvent {
            job,
            seq: j.recorded,
            at,
            source,
            kind,
        };
        for sub in &j.subs {
            if let Some(s) = self.subs.get_mut(sub) {
                let was_empty = s.queue.is_empty();
                push_delivery(s, &ev);
                if was_empty && !s.queue.is_empty() {
                    self.outputs
                        .push_back(Output::Observed { subscription: *sub });
                }
            }
        }
        if !ev.kind.is_milestone() {
            j.windowed += 1;
        }
        j.journal.push(ev);
        self.events_recorded += 1;
        if j.watched {
            self.changed.insert(job);
        }
        if let Some(n) = self.journal_window
            && j.windowed > 2 * n
        {
            // Drop the oldest non-milestone events down to `n` (in one pass: amortized O(1)).
            let mut excess = j.windowed - n;
            let before = j.journal.len();
            j.journal.retain(|e| {
                if excess > 0 && !e.kind.is_milestone() {
                    excess -= 1;
                    false
                } else {
                    true
                }
            });
            let removed = before - j.journal.len();
            j.windowed -= removed;
            j.dropped += removed as u64;
            if j.finished_at.is_some() {
                j.finished_at = j
                    .journal
                    .iter()
                    .position(|e| matches!(e.kind, EventKind::Finished { .. }));
            }
        }
    }

    /// Records the one terminal outcome and settles everything that depends on it.
    fn finish(&mut self, job: JobId, at: Mono, source: Source, outcome: Outcome<V>) {
        let j = self.jobs.get(&job).expect("exists");
        debug_assert!(!j.is_finished(), "a job has exactly one terminal outcome");
        let kind = outcome.kind();
        // Only what the note's owner, job and outcome do not say is kept (see `MailNote`): a
        // summary other than a success's, written once into a buffer of its final size, the
        // id's digits by hand (the formatting machinery costs more than the rest of a note).
        let note = j.note.then(|| MailNote {
            job,
            at,
            outcome: kind,
            summary: (kind != OutcomeKind::Succeeded).then(|| {
                let mut summary = String::with_capacity(32);
                push_job_id(&mut summary, j.id);
                summary.push(' ');
                outcome.write_summary(&mut summary);
                summary.into_boxed_str()
            }),
            origin: (j.origin != Origin::default()).then(|| Box::new(j.origin.clone())),
        });
        let (wake, endpoint) = (j.wake, j.endpoint);
        if j.quiet_deadline.is_some() {
            self.set_quiet(job, None);
        }
        self.record(job, at, source, EventKind::Finished { outcome });
        let j = self.jobs.get_mut(&job).expect("exists");
        j.finished_at = Some(j.journal.len() - 1);
        j.state = JobState::Finished(kind);
        let waits = std::mem::take(&mut j.waits);
        // The owner's name is copied only for the outputs that carry it.
        let owner = (note.is_some() || wake).then(|| j.owner.clone());
        self.outputs
            .push_back(Output::JobFinished { job, outcome: kind });
        for w in waits {
            if let Some(wait) = self.waits.remove(&w) {
                if let Some(d) = wait.deadline {
                    self.timers.remove(&(d, Timer::Wait(w)));
                }
                self.outputs.push_back(Output::WaitSettled {
                    wait: w,
                    job,
                    end: WaitEnd::Finished(kind),
                });
            }
        }
        if let Some(mut owner) = owner {
            if let Some(note) = note {
                self.owners
                    .get_mut(&owner)
                    .expect("owner of a live job")
                    .mailbox
                    .push_back(note);
                let carried = if wake {
                    owner.clone()
                } else {
                    OwnerId(std::mem::take(&mut owner.0))
                };
                self.outputs.push_back(Output::NoteQueued {
                    owner: carried,
                    job,
                });
            }
            if wake {
                self.outputs.push_back(Output::Wake { owner, job });
            }
        }
        let ep = self.endpoints.get_mut(&endpoint).expect("exists");
        if ep.running.remove(&job) {
            self.pump(endpoint, at);
        }
    }
}

/// A value for remote endpoint `endpoint` as JSON data (its wire carries JSON text), or the
/// refusal naming what is not: `what` is `"payload"` or `"input"`.
fn remote_json<V: Payload>(
    value: &V,
    what: &'static str,
    endpoint: EndpointId,
) -> Result<V, JobsError> {
    value.json_data(what).map_err(|why| JobsError::NotJsonData {
        what,
        endpoint,
        why,
    })
}

/// Appends `job`'s display form (`job-{n}`, as `JobId`'s `Display`) to `out`.
fn push_job_id(out: &mut String, job: JobId) {
    out.push_str("job-");
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = job.0;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

/// Queues a missed range `from..=to`, merged with a missed range that ends just before it.
fn push_missed<V>(s: &mut Subscription<V>, job: JobId, from: u64, to: u64) {
    if let Some(Delivery::Missed { to: last, .. }) = s.queue.back_mut()
        && *last + 1 == from
    {
        *last = to;
        return;
    }
    s.queue.push_back(Delivery::Missed { job, from, to });
}

fn push_delivery<V: Clone>(s: &mut Subscription<V>, ev: &JobEvent<V>) {
    if s.queued_events < s.capacity {
        s.queued_events += 1;
        s.queue.push_back(Delivery::Event(ev.clone()));
        return;
    }
    if let Some(Delivery::Missed { to, .. }) = s.queue.back_mut()
        && *to + 1 == ev.seq
    {
        *to = ev.seq;
        return;
    }
    s.queue.push_back(Delivery::Missed {
        job: ev.job,
        from: ev.seq,
        to: ev.seq,
    });
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod push_job_id_tests {
    use super::{JobId, push_job_id};

    #[test]
    fn writes_what_display_writes() {
        for n in [0, 1, 9, 10, 99, 100, 12_345, u64::MAX] {
            let mut s = String::from("x");
            push_job_id(&mut s, JobId(n));
            assert_eq!(s, format!("x{}", JobId(n)));
        }
    }
}
