//! The client's side of a remote endpoint: the link a [`Registry`] owns per remote endpoint.
//!
//! States: `Connecting --open--> Handshaking --welcome--> Live`; `Live --closed | 3 heartbeats
//! of silence--> Waiting` (the endpoint is `Suspended{since}`) `--backoff--> Connecting --open-->
//! Resuming --resumed--> Live` (each side replays what the other did not apply). The window
//! runs from the disconnect: when it passes, or the host refuses the resume, the endpoint
//! closes and its running jobs are `lost` with the evidence `remote_disconnected`.

use std::collections::BTreeMap;

use super::buffer::{FrameClass, ReplayBuffer};
use super::frames::{self, RemoteTarget, ServerFrame};
use super::{RemoteCode, check_url, close};
use crate::Mono;
use crate::jobs::endpoint::{Endpoint, EndpointEventKind, EndpointSpec, EndpointState, Hello};
use crate::jobs::types::*;
use crate::jobs::wire::{Reply, Violation, WireRequest};
use crate::jobs::{JobsError, Registry, Timer};
use crate::value::Payload;

/// How to reach a remote job host. Its `Debug` form redacts the token.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteSpec {
    /// `wss://host/api/jobs/remote` (`ws://` to loopback only, unless `allow_insecure`).
    pub url: String,
    /// The bearer token, sent in the hello and resume frames.
    pub token: String,
    /// The script or kind to open on the host.
    pub open: RemoteTarget,
    /// The resumption window asked for (the host may shorten it). Default 30 000 ms.
    pub window_ms: u64,
    /// The heartbeat interval asked for. Default 5 000 ms.
    pub heartbeat_ms: u64,
    /// Allow `ws://` to a non-loopback host (the token then travels unencrypted).
    pub allow_insecure: bool,
}

impl std::fmt::Debug for RemoteSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSpec")
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .field("open", &self.open)
            .field("window_ms", &self.window_ms)
            .field("heartbeat_ms", &self.heartbeat_ms)
            .field("allow_insecure", &self.allow_insecure)
            .finish()
    }
}

impl RemoteSpec {
    /// A spec with the default window (30 s) and heartbeat (5 s).
    pub fn new(url: impl Into<String>, token: impl Into<String>, open: RemoteTarget) -> Self {
        RemoteSpec {
            url: url.into(),
            token: token.into(),
            open,
            window_ms: 30_000,
            heartbeat_ms: 5_000,
            allow_insecure: false,
        }
    }
}

/// Where a link is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// `Output::Connect` was emitted; waiting for `on_socket_open`/`on_socket_closed`.
    Connecting,
    /// Hello sent, waiting for welcome.
    Handshaking,
    /// Resume sent, waiting for resumed.
    Resuming,
    Live,
    /// No socket; reconnecting at `next_connect`.
    Waiting,
    Closed,
}

impl Phase {
    fn as_str(&self) -> &'static str {
        match self {
            Phase::Connecting => "connecting",
            Phase::Handshaking => "handshaking",
            Phase::Resuming => "resuming",
            Phase::Live => "live",
            Phase::Waiting => "waiting",
            Phase::Closed => "closed",
        }
    }
}

/// What a host can show about a remote endpoint (`ep.info.remote` in JS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteInfo {
    pub url: String,
    /// The session id, once welcomed.
    pub session: Option<String>,
    /// `connecting`, `handshaking`, `resuming`, `live`, `waiting` or `closed`.
    pub state: &'static str,
    /// Connections lost after being live.
    pub disconnects: u64,
    /// The last server seq applied.
    pub last_seq: u64,
    /// Client frames held for replay.
    pub buffered: usize,
}

/// The client's link; its `Debug` form redacts the token and the session secret.
pub(crate) struct RemoteLink {
    spec: RemoteSpec,
    label: String,
    phase: Phase,
    /// Connection attempts so far.
    attempt: u32,
    /// Consecutive failed attempts (the backoff exponent).
    failures: u32,
    session: Option<(String, String)>,
    window_ms: u64,
    heartbeat_ms: u64,
    /// When the link went down (or was opened, before its first welcome).
    down_since: Option<Mono>,
    last_reason: String,
    next_connect: Mono,
    /// Last frame from the server (or the start of the current attempt).
    last_heard: Mono,
    last_ping: Mono,
    in_seq: u64,
    unacked_in: u64,
    outbox: ReplayBuffer,
    /// Cancels requested while disconnected, with their time.
    pending_cancels: BTreeMap<JobId, Mono>,
    hello_seen: bool,
    disconnects: u64,
    /// The deadline armed in the registry's timers.
    armed: Option<Mono>,
}

impl std::fmt::Debug for RemoteLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteLink")
            .field("spec", &self.spec)
            .field("label", &self.label)
            .field("phase", &self.phase)
            .field("attempt", &self.attempt)
            .field("failures", &self.failures)
            .field(
                "session",
                &self.session.as_ref().map(|s| (&s.0, "<redacted>")),
            )
            .field("window_ms", &self.window_ms)
            .field("heartbeat_ms", &self.heartbeat_ms)
            .field("down_since", &self.down_since)
            .field("last_reason", &self.last_reason)
            .field("in_seq", &self.in_seq)
            .field("outbox", &self.outbox)
            .field("pending_cancels", &self.pending_cancels)
            .field("disconnects", &self.disconnects)
            .finish_non_exhaustive()
    }
}

/// Acks go out early after this many unacknowledged frames.
const ACK_EVERY: u64 = 64;

impl RemoteLink {
    fn deadline(&self) -> Option<Mono> {
        let expiry = self.down_since.map(|s| s.plus(self.window_ms));
        let silent = self.last_heard.plus(3 * self.heartbeat_ms);
        let other = match self.phase {
            Phase::Closed => return None,
            Phase::Waiting => Some(self.next_connect),
            Phase::Live => Some(silent.min(self.last_ping.plus(self.heartbeat_ms))),
            Phase::Connecting | Phase::Handshaking | Phase::Resuming => Some(silent),
        };
        match (expiry, other) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The `lost` reason's note for a cancel requested while disconnected and never delivered.
fn undelivered_cancel(cancels: &BTreeMap<JobId, Mono>, job: JobId) -> Option<String> {
    cancels
        .get(&job)
        .map(|t| format!("the cancel requested at {t} was never delivered"))
}

/// The outcome as the reply that carried it, for `late_evidence` (outcomes no reply expresses
/// become an `error` whose code names them).
fn outcome_reply<V: Payload>(id: u64, o: Outcome<V>) -> Reply<V> {
    match o {
        Outcome::Succeeded { value } => Reply::Done { id, value },
        Outcome::Cancelled {
            evidence: CancelEvidence::Acknowledged,
        } => Reply::Cancelled { id },
        Outcome::Failed { message, code, .. } => Reply::Error { id, message, code },
        other => Reply::Error {
            id,
            message: format!("on the remote host: {}", other.summary()),
            code: Some(format!(
                "REMOTE_{}",
                other.kind().as_str().to_ascii_uppercase()
            )),
        },
    }
}

impl<V: Payload> Registry<V> {
    /// Opens an endpoint on a remote job host (`weft serve`'s `/api/jobs/remote`): emits
    /// [`Output::Connect`]; the host reports the socket with [`Registry::on_socket_open`],
    /// [`Registry::on_socket_frame`] and [`Registry::on_socket_closed`] and performs
    /// [`Output::SendFrame`] and [`Output::CloseSocket`]. Runs queue until the host forwards its
    /// worker's hello. `spec.hello` is ignored (the remote worker's hello decides). Refused
    /// with `INVALID_ARGUMENT` for a URL that is not `wss://` (or `ws://` to loopback).
    pub fn open_remote(
        &mut self,
        now: Mono,
        mut spec: EndpointSpec,
        remote: RemoteSpec,
    ) -> Result<EndpointId, JobsError> {
        self.entered();
        check_url(&remote.url, remote.allow_insecure).map_err(JobsError::InvalidArgument)?;
        if remote.window_ms == 0 || remote.heartbeat_ms == 0 {
            return Err(JobsError::InvalidArgument(
                "the resumption window and the heartbeat must be positive".into(),
            ));
        }
        spec.hello = Hello::Await { timeout_ms: 0 };
        let id = EndpointId(self.next_endpoint);
        self.next_endpoint += 1;
        let owner = spec.owner.clone();
        let label = spec.label.clone();
        // The hello deadline is not armed: the remote worker's hello decides.
        let (mut ep, _) = Endpoint::open(id, now, spec);
        ep.window = self.journal_window;
        self.endpoints.insert(id, ep);
        self.owner_state(owner).endpoints.insert(id, ());
        let link = RemoteLink {
            window_ms: remote.window_ms,
            heartbeat_ms: remote.heartbeat_ms,
            label,
            phase: Phase::Connecting,
            attempt: 1,
            failures: 0,
            session: None,
            down_since: Some(now),
            last_reason: "not connected yet".into(),
            next_connect: now,
            last_heard: now,
            last_ping: now,
            in_seq: 0,
            unacked_in: 0,
            outbox: ReplayBuffer::new(usize::MAX, usize::MAX),
            pending_cancels: BTreeMap::new(),
            hello_seen: false,
            disconnects: 0,
            armed: None,
            spec: remote,
        };
        self.outputs.push_back(Output::Connect {
            endpoint: id,
            url: link.spec.url.clone(),
        });
        self.links.insert(id, link);
        self.rearm_remote(id);
        Ok(id)
    }

    /// The socket of a remote endpoint opened: sends hello (or resume).
    pub fn on_socket_open(&mut self, now: Mono, endpoint: EndpointId) -> Result<(), JobsError> {
        self.entered();
        let link = self
            .links
            .get_mut(&endpoint)
            .ok_or(JobsError::UnknownEndpoint(endpoint))?;
        if link.phase != Phase::Connecting {
            return Ok(());
        }
        link.last_heard = now;
        let attempt = link.attempt;
        let frame = match &link.session {
            Some((session, secret)) => {
                link.phase = Phase::Resuming;
                frames::resume(&link.spec.token, session, secret, link.in_seq)
            }
            None => {
                link.phase = Phase::Handshaking;
                frames::hello(
                    &link.spec.token,
                    &link.spec.open,
                    link.spec.window_ms,
                    link.spec.heartbeat_ms,
                    &link.label,
                )
            }
        };
        self.outputs
            .push_back(Output::SendFrame { endpoint, frame });
        self.endpoints
            .get_mut(&endpoint)
            .expect("links have endpoints")
            .record(now, EndpointEventKind::Connected { attempt });
        self.rearm_remote(endpoint);
        Ok(())
    }

    /// The socket of a remote endpoint closed, or a connect failed. Inside the window the link
    /// reconnects with backoff and resumes; nothing is lost yet.
    pub fn on_socket_closed(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        reason: &str,
    ) -> Result<(), JobsError> {
        self.entered();
        if !self.links.contains_key(&endpoint) {
            return Err(JobsError::UnknownEndpoint(endpoint));
        }
        self.link_down(now, endpoint, reason);
        Ok(())
    }

    /// One text frame arrived on a remote endpoint's socket, decoded by the host (a host that
    /// cannot decode it calls [`Registry::on_undecodable`]). Malformed frames are recorded as
    /// protocol errors of the endpoint; a sequence gap drops the socket so that the resume
    /// repairs it.
    pub fn on_socket_frame(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        msg: &V,
    ) -> Result<(), JobsError> {
        self.entered();
        let max = self
            .endpoints
            .get(&endpoint)
            .map(|e| e.max_message_bytes)
            .ok_or(JobsError::UnknownEndpoint(endpoint))?;
        let link = self
            .links
            .get_mut(&endpoint)
            .ok_or(JobsError::UnknownEndpoint(endpoint))?;
        if matches!(
            link.phase,
            Phase::Closed | Phase::Waiting | Phase::Connecting
        ) {
            return Ok(());
        }
        link.last_heard = now;
        let frame = match frames::parse_server(msg, max) {
            Ok(f) => f,
            Err(r) => {
                // A refused content frame still uses its number (a replay would refuse it
                // again): the next frame is no gap.
                if link.phase == Phase::Live && r.seq == Some(link.in_seq + 1) {
                    link.in_seq += 1;
                    link.unacked_in += 1;
                }
                self.remote_violation(now, endpoint, None, *r.violation);
                self.rearm_remote(endpoint);
                return Ok(());
            }
        };
        let link = self.links.get_mut(&endpoint).expect("checked");
        if let Some(seq) = frame.seq() {
            if link.phase != Phase::Live {
                let t = "content frame before welcome/resumed".to_string();
                self.remote_violation(now, endpoint, None, Violation::UnknownFrame { t });
                self.rearm_remote(endpoint);
                return Ok(());
            }
            if seq <= link.in_seq {
                // A replay of something already applied.
                return Ok(());
            }
            if seq != link.in_seq + 1 {
                let expected = link.in_seq + 1;
                self.remote_violation(
                    now,
                    endpoint,
                    None,
                    Violation::SeqGap {
                        expected,
                        found: seq,
                    },
                );
                self.outputs.push_back(Output::CloseSocket {
                    endpoint,
                    code: close::PROTOCOL,
                    reason: "sequence gap; resuming".into(),
                });
                self.link_down(now, endpoint, "sequence gap");
                return Ok(());
            }
            link.in_seq = seq;
            link.unacked_in += 1;
        }
        if let Some(ack) = frame.ack()
            && link.phase == Phase::Live
            && let Err(last) = link.outbox.on_ack(ack)
        {
            self.record_remote_error(
                now,
                endpoint,
                RemoteCode::Protocol,
                format!("the host acknowledged {ack}, beyond the last frame sent ({last})"),
            );
        }
        self.apply_server_frame(now, endpoint, frame);
        if let Some(link) = self.links.get_mut(&endpoint)
            && link.phase == Phase::Live
            && link.unacked_in >= ACK_EVERY
        {
            link.unacked_in = 0;
            let frame = frames::pong(link.in_seq);
            self.outputs
                .push_back(Output::SendFrame { endpoint, frame });
        }
        self.rearm_remote(endpoint);
        Ok(())
    }

    /// The remote state of an endpoint, when it is a remote one.
    pub fn remote_info(&self, endpoint: EndpointId) -> Option<RemoteInfo> {
        self.links.get(&endpoint).map(|l| RemoteInfo {
            url: l.spec.url.clone(),
            session: l.session.as_ref().map(|s| s.0.clone()),
            state: l.phase.as_str(),
            disconnects: l.disconnects,
            last_seq: l.in_seq,
            buffered: l.outbox.len(),
        })
    }

    // ----- internals ------------------------------------------------------------------------

    fn apply_server_frame(&mut self, now: Mono, endpoint: EndpointId, frame: ServerFrame<V>) {
        let source = Source::Endpoint(endpoint);
        let link = self.links.get_mut(&endpoint).expect("checked");
        match frame {
            ServerFrame::Welcome {
                session,
                secret,
                window_ms,
                heartbeat_ms,
                ..
            } => {
                if link.phase != Phase::Handshaking {
                    let t = "welcome".to_string();
                    self.remote_violation(now, endpoint, None, Violation::UnknownFrame { t });
                    return;
                }
                link.session = Some((session, secret));
                link.window_ms = window_ms.clamp(1, link.spec.window_ms);
                link.heartbeat_ms = heartbeat_ms.max(1);
                link.phase = Phase::Live;
                link.down_since = None;
                link.failures = 0;
                link.last_ping = now;
                self.flush_link(endpoint);
            }
            ServerFrame::Resumed { ack } => {
                if link.phase != Phase::Resuming {
                    let t = "resumed".to_string();
                    self.remote_violation(now, endpoint, None, Violation::UnknownFrame { t });
                    return;
                }
                let replayed_out = match link.outbox.rewind(ack) {
                    Ok(n) => n,
                    Err(_) => {
                        // The host claims frames never sent: start over with what is held.
                        link.outbox.rewind(link.outbox.last_seq()).unwrap_or(0)
                    }
                };
                let since = link.down_since.take().unwrap_or(now);
                link.phase = Phase::Live;
                link.failures = 0;
                link.last_ping = now;
                link.pending_cancels.clear();
                let ready = link.hello_seen;
                let ep = self
                    .endpoints
                    .get_mut(&endpoint)
                    .expect("links have endpoints");
                ep.record(
                    now,
                    EndpointEventKind::Resumed {
                        after_ms: now.since(since),
                        replayed_out,
                    },
                );
                if matches!(ep.state, EndpointState::Suspended { .. }) {
                    ep.state = if ready {
                        EndpointState::Ready
                    } else {
                        EndpointState::Starting
                    };
                }
                self.flush_link(endpoint);
                self.pump(endpoint, now);
            }
            ServerFrame::Refused {
                code,
                message,
                jobs,
            } => {
                let phase = link.phase;
                let session = link.session.as_ref().map(|s| s.0.clone());
                let cancels = link.pending_cancels.clone();
                let ep = self
                    .endpoints
                    .get_mut(&endpoint)
                    .expect("links have endpoints");
                ep.record(
                    now,
                    EndpointEventKind::ResumeRefused {
                        code: code.clone(),
                        message: message.clone(),
                    },
                );
                let reason = match (phase, &session) {
                    (Phase::Resuming, Some(s)) => {
                        format!("the remote host refused to resume session {s} ({code}: {message})")
                    }
                    _ => format!("the remote host refused the session ({code}: {message})"),
                };
                // A session the host ended (its endpoint failed) while we were away: the same
                // rule as an `ended` frame, not a disconnection.
                let ended = phase == Phase::Resuming
                    && RemoteCode::from_name(&code).is_some_and(|c| c.ends_session());
                if ended {
                    self.remote_ended(now, endpoint, &reason);
                } else {
                    let _ = self.close_endpoint_with(
                        now,
                        endpoint,
                        &reason,
                        false,
                        LostEvidence::RemoteDisconnected,
                        &|job| undelivered_cancel(&cancels, job),
                    );
                }
                // The expired session's runs: what the host knew is additional evidence.
                if let Some(jobs) = jobs {
                    let wires: Vec<(u64, JobId)> = self.endpoints[&endpoint].wire.iter().collect();
                    for (wire, job) in wires {
                        let Some(run) = frames::tombstone_run(&jobs, wire) else {
                            continue;
                        };
                        if self.live_job(job).is_none() {
                            continue;
                        }
                        if let Some(s) = &session {
                            self.set_remote_identity(now, job, s, JobId(run.job));
                        }
                        if let Some(o) = run.outcome.as_ref().and_then(frames::outcome_from) {
                            let reply = outcome_reply(wire, o);
                            self.record(job, now, source, EventKind::LateEvidence { reply });
                        }
                    }
                }
            }
            ServerFrame::Msg { body, .. } => {
                let _ = self.on_message(now, endpoint, &body);
            }
            ServerFrame::Accepted { id, job, .. } => {
                let session = link
                    .session
                    .as_ref()
                    .map(|s| s.0.clone())
                    .unwrap_or_default();
                match self.remote_job_of(endpoint, id) {
                    Some(j) => self.set_remote_identity(now, j, &session, JobId(job)),
                    None => self.remote_unknown_run(now, endpoint, id, "accepted"),
                }
            }
            ServerFrame::Settled { id, outcome, .. } => {
                let Some(job) = self.remote_job_of(endpoint, id) else {
                    self.remote_unknown_run(now, endpoint, id, "settled");
                    return;
                };
                let Some(outcome) = frames::outcome_from(&outcome) else {
                    self.remote_violation(
                        now,
                        endpoint,
                        None,
                        Violation::MissingField {
                            kind: "settled".into(),
                            field: "outcome".into(),
                        },
                    );
                    return;
                };
                self.on_remote_settled(now, endpoint, job, id, outcome);
            }
            ServerFrame::Missed {
                id,
                progress,
                partial,
                ..
            } => match self.remote_job_of(endpoint, id) {
                Some(job) => self.record(
                    job,
                    now,
                    source,
                    EventKind::RemoteMissed { progress, partial },
                ),
                None => self.remote_unknown_run(now, endpoint, id, "missed"),
            },
            ServerFrame::Ping { .. } => {
                link.unacked_in = 0;
                let frame = frames::pong(link.in_seq);
                self.outputs
                    .push_back(Output::SendFrame { endpoint, frame });
            }
            ServerFrame::Pong { .. } => {}
            ServerFrame::Ended { code, reason, .. } => {
                let session = link
                    .session
                    .as_ref()
                    .map(|s| s.0.clone())
                    .unwrap_or_default();
                let reason = format!("the remote host ended session {session} ({code}: {reason})");
                self.remote_ended(now, endpoint, &reason);
            }
            ServerFrame::Error { code, detail, .. } => {
                let ep = self
                    .endpoints
                    .get_mut(&endpoint)
                    .expect("links have endpoints");
                ep.record(now, EndpointEventKind::RemoteError { code, detail });
            }
        }
    }

    /// The host ended the session (its endpoint could not be opened or closed): runs the host
    /// accepted and did not settle are `lost` (`remote_lost`); runs it never accepted fail
    /// `ENDPOINT_CLOSED` without starting, like queued ones; the endpoint closes with `reason`
    /// and the link does not reconnect.
    fn remote_ended(&mut self, now: Mono, endpoint: EndpointId, reason: &str) {
        let ep = self.endpoints.get(&endpoint).expect("links have endpoints");
        let unaccepted: Vec<JobId> = ep
            .running
            .iter()
            .copied()
            .filter(|j| self.jobs.get(j).is_some_and(|j| j.remote.is_none()))
            .collect();
        let ep = self.endpoints.get_mut(&endpoint).expect("checked");
        for job in unaccepted.into_iter().rev() {
            ep.running.remove(&job);
            ep.queue.push_front(job);
        }
        let _ = self.close_endpoint_with(
            now,
            endpoint,
            reason,
            false,
            LostEvidence::RemoteLost,
            &|_| None,
        );
    }

    /// A `settled` frame: the host's outcome for a run no worker reply expresses.
    fn on_remote_settled(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        job: JobId,
        wire: u64,
        outcome: Outcome<V>,
    ) {
        let source = Source::Endpoint(endpoint);
        if self.jobs[&job].is_finished()
            || matches!(
                self.endpoints[&endpoint].state,
                EndpointState::Closed { .. }
            )
        {
            let reply = outcome_reply(wire, outcome);
            self.record(job, now, source, EventKind::LateEvidence { reply });
            return;
        }
        let outcome = match outcome {
            Outcome::Lost { reason, .. } => Outcome::Lost {
                reason: format!("on the remote host: {reason}"),
                evidence: LostEvidence::RemoteLost,
            },
            Outcome::Cancelled {
                evidence: CancelEvidence::Quiet { quiet_ms },
            } => {
                self.record(job, now, source, EventKind::NoAcknowledgement { quiet_ms });
                Outcome::Cancelled {
                    evidence: CancelEvidence::Quiet { quiet_ms },
                }
            }
            Outcome::Cancelled {
                evidence: CancelEvidence::Acknowledged,
            } => {
                self.record(job, now, source, EventKind::CancelAcknowledged);
                Outcome::Cancelled {
                    evidence: CancelEvidence::Acknowledged,
                }
            }
            other => other,
        };
        self.finish(job, now, source, outcome);
    }

    fn remote_job_of(&self, endpoint: EndpointId, wire: u64) -> Option<JobId> {
        let job = self.endpoints.get(&endpoint)?.wire.job(&wire)?;
        self.live_job(job).map(|_| job)
    }

    fn set_remote_identity(&mut self, now: Mono, job: JobId, session: &str, remote: JobId) {
        let j = self.jobs.get_mut(&job).expect("live");
        if j.remote.is_some() {
            return;
        }
        j.remote = Some(RemoteIdentity {
            session: session.into(),
            job: remote,
        });
        let source = Source::Endpoint(self.jobs[&job].endpoint);
        self.record(
            job,
            now,
            source,
            EventKind::RemoteAccepted {
                session: session.into(),
                remote_job: remote,
            },
        );
    }

    fn remote_unknown_run(&mut self, now: Mono, endpoint: EndpointId, id: u64, reply: &str) {
        let ep = self
            .endpoints
            .get_mut(&endpoint)
            .expect("links have endpoints");
        ep.record(
            now,
            EndpointEventKind::UnknownRun {
                id,
                reply: reply.into(),
            },
        );
    }

    fn remote_violation(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        id: Option<u64>,
        violation: Violation,
    ) {
        let ep = self
            .endpoints
            .get_mut(&endpoint)
            .expect("links have endpoints");
        ep.record(now, EndpointEventKind::ProtocolError { id, violation });
    }

    fn record_remote_error(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        code: RemoteCode,
        detail: String,
    ) {
        let ep = self
            .endpoints
            .get_mut(&endpoint)
            .expect("links have endpoints");
        ep.record(
            now,
            EndpointEventKind::RemoteError {
                code: code.as_str().into(),
                detail,
            },
        );
    }

    /// Sends what the link's outbox holds when it is live.
    fn flush_link(&mut self, endpoint: EndpointId) {
        let link = self.links.get_mut(&endpoint).expect("checked");
        if link.phase != Phase::Live {
            return;
        }
        link.unacked_in = 0;
        for frame in link.outbox.take_unsent(link.in_seq) {
            self.outputs
                .push_back(Output::SendFrame { endpoint, frame });
        }
    }

    /// The link lost its socket (or an attempt failed): suspend and schedule a reconnect.
    fn link_down(&mut self, now: Mono, endpoint: EndpointId, reason: &str) {
        let link = self.links.get_mut(&endpoint).expect("checked");
        match link.phase {
            Phase::Closed | Phase::Waiting => return,
            Phase::Live => {
                link.disconnects += 1;
                link.down_since = Some(now);
                let ep = self
                    .endpoints
                    .get_mut(&endpoint)
                    .expect("links have endpoints");
                ep.record(
                    now,
                    EndpointEventKind::Disconnected {
                        reason: reason.into(),
                    },
                );
                if !matches!(ep.state, EndpointState::Closed { .. }) {
                    ep.state = EndpointState::Suspended { since: now };
                }
            }
            Phase::Connecting | Phase::Handshaking | Phase::Resuming => {}
        }
        let link = self.links.get_mut(&endpoint).expect("checked");
        link.last_reason = reason.into();
        link.phase = Phase::Waiting;
        let delay = (100u64 << link.failures.min(5)).min(super::MAX_BACKOFF_MS);
        link.failures += 1;
        link.next_connect = now + delay;
        self.rearm_remote(endpoint);
    }

    /// The link's deadline passed: expire, reconnect, ping, or drop a silent socket.
    pub(crate) fn remote_timer(&mut self, now: Mono, endpoint: EndpointId, at: Mono) {
        let Some(link) = self.links.get_mut(&endpoint) else {
            return;
        };
        if link.armed != Some(at) {
            return;
        }
        link.armed = None;
        if let Some(since) = link.down_since
            && now >= since.plus(link.window_ms)
        {
            self.expire_link(now, endpoint, since);
            return;
        }
        let link = self.links.get_mut(&endpoint).expect("checked");
        let silent = now >= link.last_heard.plus(3 * link.heartbeat_ms);
        match link.phase {
            Phase::Closed => {}
            Phase::Waiting => {
                if now >= link.next_connect {
                    link.phase = Phase::Connecting;
                    link.attempt += 1;
                    link.last_heard = now;
                    let url = link.spec.url.clone();
                    self.outputs.push_back(Output::Connect { endpoint, url });
                }
            }
            Phase::Live if !silent => {
                if now >= link.last_ping.plus(link.heartbeat_ms) {
                    link.last_ping = now;
                    link.unacked_in = 0;
                    let frame = frames::ping(link.in_seq);
                    self.outputs
                        .push_back(Output::SendFrame { endpoint, frame });
                }
            }
            Phase::Live | Phase::Connecting | Phase::Handshaking | Phase::Resuming => {
                if silent {
                    let ms = 3 * link.heartbeat_ms;
                    let reason = format!("no frame from the remote host for {ms} ms");
                    self.outputs.push_back(Output::CloseSocket {
                        endpoint,
                        code: close::SILENT,
                        reason: reason.clone(),
                    });
                    self.link_down(now, endpoint, &reason);
                }
            }
        }
        self.rearm_remote(endpoint);
    }

    /// The window passed without a resume: the endpoint closes; its running jobs are lost.
    fn expire_link(&mut self, now: Mono, endpoint: EndpointId, since: Mono) {
        let link = self.links.get(&endpoint).expect("checked");
        let window = link.window_ms;
        let reason = if link.session.is_some() {
            format!(
                "not resumed within {window} ms of the disconnect at {since} ({})",
                link.last_reason
            )
        } else {
            format!(
                "could not open a remote session at {} within {window} ms ({})",
                link.spec.url, link.last_reason
            )
        };
        let cancels = link.pending_cancels.clone();
        let _ = self.close_endpoint_with(
            now,
            endpoint,
            &reason,
            false,
            LostEvidence::RemoteDisconnected,
            &|job| undelivered_cancel(&cancels, job),
        );
    }

    /// Re-arms the link's single timer at its current deadline.
    pub(crate) fn rearm_remote(&mut self, endpoint: EndpointId) {
        let Some(link) = self.links.get_mut(&endpoint) else {
            return;
        };
        let next = link.deadline();
        if link.armed == next {
            return;
        }
        if let Some(old) = link.armed.take() {
            self.timers.remove(&(old, Timer::Remote(endpoint)));
        }
        if let Some(d) = next {
            link.armed = Some(d);
            self.timers.insert((d, Timer::Remote(endpoint)));
        }
    }

    /// Hands a request to the link: buffered, and sent at once when live.
    pub(crate) fn remote_send(
        &mut self,
        endpoint: EndpointId,
        job: JobId,
        request: WireRequest<V>,
    ) {
        let run = matches!(request, WireRequest::Run { .. }).then_some(job.0);
        let wire = request.id();
        let frame = frames::msg(request.to_json(), run);
        let link = self.links.get_mut(&endpoint).expect("checked");
        if link.phase == Phase::Closed {
            return;
        }
        link.outbox.push(Some(wire), FrameClass::Milestone, frame);
        self.flush_link(endpoint);
    }

    /// Whether the endpoint is remote and its connection is down.
    pub(crate) fn remote_down(&self, endpoint: EndpointId) -> bool {
        self.links
            .get(&endpoint)
            .is_some_and(|l| !matches!(l.phase, Phase::Live | Phase::Closed))
    }

    pub(crate) fn remote_cancel_pending(&mut self, endpoint: EndpointId, job: JobId, now: Mono) {
        if let Some(l) = self.links.get_mut(&endpoint) {
            l.pending_cancels.insert(job, now);
        }
    }

    pub(crate) fn remote_hello_seen(&mut self, endpoint: EndpointId) {
        if let Some(l) = self.links.get_mut(&endpoint) {
            l.hello_seen = true;
        }
    }

    /// Closing a remote endpoint: a deliberate close tells the host (`close`), and the socket
    /// is closed. Returns whether the endpoint is remote (then there is no process to kill).
    pub(crate) fn remote_close(
        &mut self,
        _now: Mono,
        endpoint: EndpointId,
        reason: &str,
        deliberate: bool,
    ) -> bool {
        let Some(link) = self.links.get_mut(&endpoint) else {
            return false;
        };
        let phase = link.phase;
        link.phase = Phase::Closed;
        link.down_since = None;
        if let Some(old) = link.armed.take() {
            self.timers.remove(&(old, Timer::Remote(endpoint)));
        }
        if deliberate && phase == Phase::Live {
            self.outputs.push_back(Output::SendFrame {
                endpoint,
                frame: frames::close(reason),
            });
        }
        if matches!(
            phase,
            Phase::Connecting | Phase::Handshaking | Phase::Resuming | Phase::Live
        ) {
            self.outputs.push_back(Output::CloseSocket {
                endpoint,
                code: close::NORMAL,
                reason: reason.chars().take(120).collect(),
            });
        }
        true
    }
}
