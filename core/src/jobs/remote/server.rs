//! The server's side: a sans-IO table of remote sessions beside an unmodified [`Registry`].
//!
//! The host feeds socket events ([`SessionTable::on_connect`], [`SessionTable::on_frame`],
//! [`SessionTable::on_disconnect`]), the results of the registry calls it made for the table
//! ([`SessionTable::on_endpoint_opened`], [`SessionTable::on_endpoint_ready`],
//! [`SessionTable::on_submitted`], [`SessionTable::on_submit_failed`]), every journal event of
//! the runs ([`SessionTable::on_job_event`]) and time; it drains [`ServerOutput`]s. A detached
//! session keeps running for its window plus a grace ([`super::grace_ms`]: three heartbeats and
//! the client's longest backoff), then its runs are
//! terminated ([`ServerOutput::Terminate`]) and a tombstone keeps their outcomes for a late
//! resume.
//!
//! [`Registry`]: crate::jobs::Registry

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::buffer::{FrameClass, ReplayBuffer, encoded_len};
use super::frames::{self, ClientFrame, FrameRefused, Limits, RemoteTarget};
use super::{RemoteCode, close, grace_ms};
use crate::Mono;
use crate::jobs::JobsError;
use crate::jobs::types::*;
use crate::jobs::wire::{self, Capabilities, Violation};
use crate::value::Payload;

numeric_id!(
    /// One WebSocket connection to the server.
    ConnId,
    "conn-"
);

/// Tombstones kept (a ring).
pub const TOMBSTONES: usize = 64;

/// Server-side limits and offers.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The longest resumption window granted (a hello asking more gets this). Default 60 s.
    pub max_window_ms: u64,
    /// The heartbeat granted when a hello asks none (default 5 s).
    pub heartbeat_ms: u64,
    /// Sessions at once (default 32); beyond, hello is refused `REMOTE_SESSION_LIMIT`.
    pub max_sessions: usize,
    /// Unfinished runs per session (default 256); beyond, a run is settled
    /// `failed{REMOTE_BUFFER_FULL}` without starting.
    pub max_runs: usize,
    /// Frame size and replay buffer bounds.
    pub limits: Limits,
    /// A connection must authenticate (hello/resume) within this (default 5 s).
    pub auth_timeout_ms: u64,
    /// What hellos may open.
    pub targets: Vec<RemoteTarget>,
    /// Connections not yet authenticated at once (default 64); beyond, a new connection is
    /// closed at once with 1013 (try later).
    pub max_pending: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_window_ms: 60_000,
            heartbeat_ms: 5_000,
            max_sessions: 32,
            max_runs: 256,
            limits: Limits::default(),
            auth_timeout_ms: 5_000,
            targets: Vec::new(),
            max_pending: 64,
        }
    }
}

/// Work for the host, drained with [`SessionTable::poll_output`].
#[derive(Clone, Debug, PartialEq)]
pub enum ServerOutput<V> {
    /// Write this frame on the connection.
    Send { conn: ConnId, frame: Value },
    /// Close the connection (the table already forgot it; no `on_disconnect` is needed).
    Close {
        conn: ConnId,
        code: u16,
        reason: String,
    },
    /// Open an endpoint for a new session: `target` on behalf of `owner`; then call
    /// [`SessionTable::on_endpoint_opened`] and, once it is ready,
    /// [`SessionTable::on_endpoint_ready`].
    Open {
        session: String,
        target: RemoteTarget,
        owner: OwnerId,
        label: String,
    },
    /// Submit `payload` to the session's endpoint with `owner` and `origin`; then call
    /// [`SessionTable::on_submitted`] (and observe the job) or
    /// [`SessionTable::on_submit_failed`].
    Submit {
        session: String,
        wire: u64,
        owner: OwnerId,
        payload: V,
        origin: Origin,
    },
    /// `registry.cancel(job)`.
    Cancel {
        session: String,
        job: JobId,
        reason: String,
    },
    /// `registry.send_input(job, Some(input_id), value)`.
    Input {
        session: String,
        job: JobId,
        input_id: String,
        value: V,
    },
    /// `registry.terminate_endpoint(endpoint, reason)` then `close_owner(owner)` once its
    /// runs' outcomes were fed back: the session ended (expired or closed by the client).
    Terminate {
        session: String,
        endpoint: Option<EndpointId>,
        owner: OwnerId,
        reason: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attach {
    Attached(ConnId),
    Detached { since: Mono },
}

#[derive(Debug, Default)]
struct Run {
    job: Option<JobId>,
    client_job: Option<u64>,
    done: bool,
    outcome: Option<Value>,
    cancel: Option<String>,
}

struct Session {
    secret: String,
    principal: String,
    owner: OwnerId,
    target: RemoteTarget,
    label: String,
    endpoint: Option<EndpointId>,
    attach: Attach,
    in_seq: u64,
    unacked_in: u64,
    outbox: ReplayBuffer,
    runs: BTreeMap<u64, Run>,
    window_ms: u64,
    heartbeat_ms: u64,
    last_heard: Mono,
    protocol_errors: u64,
    hello_sent: bool,
    opened_at: Mono,
    /// The highest run id seen: client wire ids only grow, so a lower one is a reuse.
    max_run: u64,
    /// Requests refused `REMOTE_BUFFER_FULL` since the outbox was last below its cap.
    full_refusals: u32,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("secret", &"<redacted>")
            .field("principal", &self.principal)
            .field("owner", &self.owner)
            .field("target", &self.target)
            .field("endpoint", &self.endpoint)
            .field("attach", &self.attach)
            .field("in_seq", &self.in_seq)
            .field("outbox", &self.outbox)
            .field("runs", &self.runs.len())
            .field("window_ms", &self.window_ms)
            .field("heartbeat_ms", &self.heartbeat_ms)
            .finish_non_exhaustive()
    }
}

/// Room kept in a frame's size for the `seq` and `ack` the replay buffer stamps on it.
const STAMP_BYTES: usize = 64;

/// Refusals `REMOTE_BUFFER_FULL` a session's connection gets before it is closed (1013) so
/// that its client resumes and acknowledges.
const FULL_REFUSALS: u32 = 16;

/// Finished runs a session remembers (for late cancels and its tombstone).
const DONE_RUNS: usize = 256;

impl Session {
    fn unfinished(&self) -> usize {
        self.runs.values().filter(|r| !r.done).count()
    }

    /// Forgets the oldest finished runs beyond [`DONE_RUNS`].
    fn prune(&mut self) {
        let done = self.runs.values().filter(|r| r.done).count();
        if done <= 2 * DONE_RUNS {
            return;
        }
        let mut excess = done - DONE_RUNS;
        self.runs.retain(|_, r| {
            if excess > 0 && r.done {
                excess -= 1;
                false
            } else {
                true
            }
        });
    }
}

#[derive(Debug)]
struct Conn {
    session: Option<String>,
    opened: Mono,
}

/// One run of an expired session.
#[derive(Clone, Debug, PartialEq)]
pub struct TombstoneJob {
    /// The client's wire id.
    pub id: u64,
    /// The server's job.
    pub job: JobId,
    /// The client's job id, when the client named it.
    pub client_job: Option<u64>,
    /// The server's outcome ([`Outcome::to_json`]), once known.
    pub outcome: Option<Value>,
}

/// What remains of a session that expired, was stopped, or ended because its endpoint could
/// not be opened or closed ([`SessionTable::on_endpoint_closed`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Tombstone {
    pub session: String,
    pub principal: String,
    /// When the session ended.
    pub expired_at: Mono,
    pub reason: String,
    pub jobs: Vec<TombstoneJob>,
    /// The code a later resume is refused with: `REMOTE_SESSION_EXPIRED` (expired, server
    /// stopped), or the code given to [`SessionTable::on_endpoint_closed`].
    pub code: RemoteCode,
    /// The SHA-256 of the session's secret: a resume must prove it before it learns anything
    /// of the tombstone (never shown in [`Tombstone::to_json`]).
    secret_sha256: [u8; 32],
}

/// The answer to an input whose real answer exceeds the frame limit: `input_rejected` with
/// the code `REMOTE_FRAME_TOO_LARGE` (its `inputId` cut when even that would not fit).
fn too_large_input(wire: u64, input_id: &str, max: usize) -> Value {
    let room = max.saturating_sub(STAMP_BYTES + 200);
    let id: String = if input_id.len() <= room {
        input_id.into()
    } else {
        input_id.chars().take(room / 4).collect()
    };
    frames::msg(
        json!({"id": wire, "type": "input_rejected", "inputId": id,
               "code": RemoteCode::FrameTooLarge.as_str(),
               "message": format!("the input's answer exceeds the session's {max}-byte frame limit")}),
        None,
    )
}

/// The SHA-256 of a session secret.
fn secret_digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Whether `secret` is the one whose digest is `digest`, in time independent of where they
/// differ.
fn secret_matches(digest: &[u8; 32], secret: &str) -> bool {
    secret_digest(secret)
        .iter()
        .zip(digest)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

impl Tombstone {
    /// The JSON form (for `GET /api/jobs/remote/sessions`).
    pub fn to_json(&self) -> Value {
        json!({
            "session": self.session, "principal": self.principal, "expiredAt": self.expired_at,
            "reason": self.reason, "code": self.code.as_str(),
            "jobs": self.jobs.iter().map(|j| json!({"id": j.id, "job": j.job.0,
                "clientJob": j.client_job, "outcome": j.outcome})).collect::<Vec<_>>(),
        })
    }
}

/// The remote sessions of one server (see the module docs). Its `Debug` form redacts the
/// secrets and the seed.
pub struct SessionTable<V> {
    config: ServerConfig,
    sessions: BTreeMap<String, Session>,
    conns: BTreeMap<ConnId, Conn>,
    tombstones: VecDeque<Tombstone>,
    /// Every unfinished run's session and wire id (tombstoned sessions' too).
    jobs: HashMap<JobId, (String, u64)>,
    outputs: VecDeque<ServerOutput<V>>,
    next_conn: u64,
    next_session: u64,
    seed: [u8; 32],
    protocol_errors: u64,
}

impl<V> std::fmt::Debug for SessionTable<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTable")
            .field("config", &self.config)
            .field("sessions", &self.sessions)
            .field("conns", &self.conns)
            .field("tombstones", &self.tombstones.len())
            .field("jobs", &self.jobs.len())
            .field("outputs", &self.outputs.len())
            .field("seed", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl<V: Payload> SessionTable<V> {
    /// An empty table. `seed` (32 random bytes from the host) makes the session secrets.
    pub fn new(config: ServerConfig, seed: [u8; 32]) -> Self {
        SessionTable {
            config,
            sessions: BTreeMap::new(),
            conns: BTreeMap::new(),
            tombstones: VecDeque::new(),
            jobs: HashMap::new(),
            outputs: VecDeque::new(),
            next_conn: 1,
            next_session: 1,
            seed,
            protocol_errors: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// A socket was accepted. It must authenticate within `auth_timeout_ms`. With
    /// `max_pending` connections already unauthenticated it is closed at once
    /// ([`ServerOutput::Close`] 1013; the table forgets it).
    pub fn on_connect(&mut self, now: Mono) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        let pending = self.conns.values().filter(|c| c.session.is_none()).count();
        if pending >= self.config.max_pending {
            self.outputs.push_back(ServerOutput::Close {
                conn: id,
                code: close::TRY_LATER,
                reason: format!("{pending} connections are authenticating; try later"),
            });
            return id;
        }
        self.conns.insert(
            id,
            Conn {
                session: None,
                opened: now,
            },
        );
        id
    }

    /// The socket closed (or failed). Its session, if any, is detached: its runs keep going
    /// until the window (plus grace) passes.
    pub fn on_disconnect(&mut self, now: Mono, conn: ConnId, _reason: &str) {
        if let Some(c) = self.conns.remove(&conn)
            && let Some(sid) = c.session
            && let Some(s) = self.sessions.get_mut(&sid)
            && s.attach == Attach::Attached(conn)
        {
            s.attach = Attach::Detached { since: now };
        }
    }

    /// A text message the host could not decode as JSON (or a binary message).
    pub fn on_undecodable(&mut self, _now: Mono, conn: ConnId, detail: &str) {
        let violation = Violation::Undecodable {
            detail: detail.chars().take(200).collect(),
        };
        let sid = self.conns.get(&conn).and_then(|c| c.session.clone());
        if let Some(sid) = sid {
            self.count_error(&sid);
        }
        self.send(conn, frames::error(RemoteCode::Protocol, &violation, None));
    }

    /// One decoded text frame from `conn`. `principal_of(token)` names the principal a token
    /// authenticates (None: refused).
    pub fn on_frame(
        &mut self,
        now: Mono,
        conn: ConnId,
        msg: &V,
        principal_of: &dyn Fn(&str) -> Option<String>,
    ) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let parsed = frames::parse_client(msg, self.config.limits.max_frame_bytes);
        let Some(sid) = c.session.clone() else {
            match parsed {
                Ok(ClientFrame::Hello {
                    protocol,
                    token,
                    open,
                    window_ms,
                    heartbeat_ms,
                    label,
                }) => self.hello(
                    now,
                    conn,
                    &protocol,
                    principal_of(&token),
                    open,
                    window_ms,
                    heartbeat_ms,
                    label,
                ),
                Ok(ClientFrame::Resume {
                    token,
                    session,
                    secret,
                    ack,
                }) => self.resume(now, conn, principal_of(&token), &session, &secret, ack),
                Ok(_) => self.send(
                    conn,
                    frames::error(
                        RemoteCode::Unauthenticated,
                        &Violation::NotAuthenticated,
                        None,
                    ),
                ),
                Err(r) => self.send(conn, frames::error(r.code, &r.violation, None)),
            }
            return;
        };
        let s = self
            .sessions
            .get_mut(&sid)
            .expect("attached sessions exist");
        s.last_heard = now;
        match parsed {
            Err(r) => self.refused_frame(now, conn, &sid, r),
            Ok(ClientFrame::Hello { .. } | ClientFrame::Resume { .. }) => {
                self.count_error(&sid);
                let v = Violation::UnknownFrame {
                    t: "hello/resume on an authenticated connection".into(),
                };
                self.send(conn, frames::error(RemoteCode::Protocol, &v, None));
            }
            Ok(ClientFrame::Msg {
                seq,
                ack,
                body,
                job,
            }) => {
                if !self.accept_seq(conn, &sid, seq) {
                    return;
                }
                self.peer_ack(conn, &sid, ack);
                self.request(now, conn, &sid, &body, job);
                self.flush(&sid);
                self.early_ack(&sid);
            }
            Ok(ClientFrame::Ping { ack }) => {
                self.peer_ack(conn, &sid, ack);
                let s = self.sessions.get_mut(&sid).expect("checked");
                s.unacked_in = 0;
                let f = frames::pong(s.in_seq);
                self.send(conn, f);
            }
            Ok(ClientFrame::Pong { ack }) => self.peer_ack(conn, &sid, ack),
            Ok(ClientFrame::Close { reason }) => {
                let reason = format!("remote session {sid} closed by its client: {reason}");
                self.conns.remove(&conn);
                self.end_session(now, &sid, reason, None, close::NORMAL);
                self.outputs.push_back(ServerOutput::Close {
                    conn,
                    code: close::NORMAL,
                    reason: "session closed".into(),
                });
            }
        }
    }

    /// The endpoint the host opened for `session` (after [`ServerOutput::Open`]).
    pub fn on_endpoint_opened(&mut self, session: &str, endpoint: EndpointId) {
        if let Some(s) = self.sessions.get_mut(session) {
            s.endpoint = Some(endpoint);
        }
    }

    /// The session's endpoint is ready with these capabilities: the client gets the worker's
    /// hello (with `cancelAck` on: the server settles every cancel).
    pub fn on_endpoint_ready(&mut self, _now: Mono, session: &str, capabilities: Capabilities) {
        let Some(s) = self.sessions.get_mut(session) else {
            return;
        };
        if s.hello_sent {
            return;
        }
        s.hello_sent = true;
        // The link carries one message per frame: no batches across it.
        let caps = Capabilities {
            cancel_ack: true,
            batch: false,
            ..capabilities
        };
        let body = json!({"type": "hello", "protocol": wire::PROTOCOL, "capabilities": caps});
        s.outbox
            .push(None, FrameClass::Milestone, frames::msg(body, None));
        self.flush(session);
    }

    /// The session's endpoint could not be opened (`code` [`RemoteCode::OpenFailed`]: the
    /// host's open of [`ServerOutput::Open`] failed) or it closed (`code`
    /// [`RemoteCode::EndpointClosed`]: the worker exited or died, before or after its hello).
    /// Call it after feeding the job events the registry produced for that closure (their
    /// terminal frames then precede; events fed later complete the tombstone instead).
    ///
    /// The client gets an `ended{code, reason}` frame after every frame already queued: its
    /// accepted runs without a terminal frame become `lost` (`remote_lost`), its other runs
    /// fail `ENDPOINT_CLOSED` without starting, and the endpoint closes without reconnecting.
    /// The session ends: a tombstone keeps `reason` and the runs' outcomes (a later resume is
    /// refused with `code` and them), the connection closes 1000 after the frame, and a
    /// [`ServerOutput::Terminate`] follows (for the host's `close_owner`; `endpoint` is `None`
    /// when none was opened). Requests of the session not yet performed by the host are
    /// withdrawn from the outputs. Unknown or ended sessions are ignored.
    pub fn on_endpoint_closed(&mut self, now: Mono, session: &str, code: RemoteCode, reason: &str) {
        let Some(s) = self.sessions.get_mut(session) else {
            return;
        };
        s.outbox
            .push(None, FrameClass::Milestone, frames::ended(code, reason));
        self.flush(session);
        self.outputs.retain(|o| match o {
            ServerOutput::Submit { session: x, .. }
            | ServerOutput::Cancel { session: x, .. }
            | ServerOutput::Input { session: x, .. } => x != session,
            _ => true,
        });
        let why = format!("remote session {session} ended ({code}): {reason}");
        self.end_session(now, session, why, Some(code), close::NORMAL);
    }

    /// The host submitted run `wire` of `session` as `job`: the client learns the second
    /// identity. Observe the job and feed its events to [`SessionTable::on_job_event`].
    pub fn on_submitted(&mut self, _now: Mono, session: &str, wire: u64, job: JobId) {
        let Some(s) = self.sessions.get_mut(session) else {
            return;
        };
        let Some(run) = s.runs.get_mut(&wire) else {
            return;
        };
        run.job = Some(job);
        let cancel = run.cancel.take();
        self.jobs.insert(job, (session.to_owned(), wire));
        s.outbox.push(
            Some(wire),
            FrameClass::Milestone,
            frames::accepted(wire, job.0),
        );
        self.flush(session);
        if let Some(reason) = cancel {
            self.outputs.push_back(ServerOutput::Cancel {
                session: session.into(),
                job,
                reason,
            });
        }
    }

    /// The host's submit of run `wire` failed: the client's run fails without starting.
    pub fn on_submit_failed(&mut self, _now: Mono, session: &str, wire: u64, err: &JobsError) {
        let outcome = Outcome::<Value>::Failed {
            message: err.to_string(),
            code: Some(err.code().into()),
            started: false,
        };
        self.settle(session, wire, outcome.to_json());
        self.flush(session);
    }

    /// A journal event of a run submitted for a session, in order. Progress, partials, input
    /// answers and the outcome become frames; the rest stays in the server's journal.
    pub fn on_job_event(&mut self, _now: Mono, ev: &JobEvent<V>) {
        let Some((sid, wire)) = self.jobs.get(&ev.job).cloned() else {
            return;
        };
        let terminal = matches!(ev.kind, EventKind::Finished { .. });
        if terminal {
            self.jobs.remove(&ev.job);
        }
        let Some(s) = self.sessions.get_mut(&sid) else {
            // An expired session: the outcome completes its tombstone.
            if let EventKind::Finished { outcome } = &ev.kind
                && let Some(t) = self.tombstones.iter_mut().find(|t| t.session == sid)
                && let Some(j) = t.jobs.iter_mut().find(|j| j.job == ev.job)
            {
                j.outcome = Some(outcome.to_json());
            }
            return;
        };
        let max = self.config.limits.max_frame_bytes;
        let fits = |f: &Value| encoded_len(f) + STAMP_BYTES <= max;
        let body = |t: &str| json!({"id": wire, "type": t});
        let (class, frame) = match &ev.kind {
            EventKind::Progress { value } | EventKind::Partial { value } => {
                let partial = matches!(ev.kind, EventKind::Partial { .. });
                let value = value.to_json();
                // {"t":"msg","body":{"id":W,"type":"progress","value":V}}
                if encoded_len(&value) + 64 + STAMP_BYTES > max {
                    // A report too large to carry is missed, not sent.
                    let (p, q) = if partial { (0, 1) } else { (1, 0) };
                    s.outbox.add_missed(wire, p, q);
                } else {
                    s.outbox.push_report(wire, partial, value);
                }
                self.flush(&sid);
                return;
            }
            EventKind::InputApplied { input_id } => {
                let mut b = body("input_applied");
                b["inputId"] = json!(input_id);
                let f = frames::msg(b, None);
                if fits(&f) {
                    (FrameClass::Milestone, f)
                } else {
                    (FrameClass::Milestone, too_large_input(wire, input_id, max))
                }
            }
            EventKind::InputRejected {
                input_id, reason, ..
            } => {
                let mut b = body("input_rejected");
                b["inputId"] = json!(input_id);
                b["message"] = json!(reason);
                let f = frames::msg(b, None);
                if fits(&f) {
                    (FrameClass::Milestone, f)
                } else {
                    (FrameClass::Milestone, too_large_input(wire, input_id, max))
                }
            }
            EventKind::Finished { outcome } => {
                if let Some(run) = s.runs.get_mut(&wire) {
                    run.done = true;
                    run.outcome = Some(outcome.to_json());
                }
                s.prune();
                let frame = match outcome {
                    Outcome::Succeeded { value } => {
                        let mut b = body("done");
                        b["value"] = value.to_json();
                        frames::msg(b, None)
                    }
                    Outcome::Failed {
                        message,
                        code,
                        started: true,
                    } => {
                        let mut b = body("error");
                        b["message"] = json!(message);
                        if let Some(c) = code {
                            b["code"] = json!(c);
                        }
                        frames::msg(b, None)
                    }
                    Outcome::Cancelled {
                        evidence: CancelEvidence::Acknowledged,
                    } => frames::msg(body("cancelled"), None),
                    other => frames::settled(wire, other.to_json()),
                };
                let frame = if fits(&frame) {
                    frame
                } else {
                    // The effect happened but its value cannot be carried: the run ends
                    // honestly as failed (started) rather than a frame the client's socket
                    // refuses and the server replays forever.
                    let o = Outcome::<Value>::Failed {
                        message: format!(
                            "the run's outcome exceeds the session's {max}-byte frame limit"
                        ),
                        code: Some(RemoteCode::FrameTooLarge.as_str().into()),
                        started: true,
                    }
                    .to_json();
                    if let Some(run) = s.runs.get_mut(&wire) {
                        run.outcome = Some(o.clone());
                    }
                    frames::settled(wire, o)
                };
                (FrameClass::Milestone, frame)
            }
            _ => return,
        };
        s.outbox.push(Some(wire), class, frame);
        self.flush(&sid);
    }

    /// The host's observer of `job` missed `count` events (its queue overflowed): reported to
    /// the client as missed progress.
    pub fn on_missed(&mut self, _now: Mono, job: JobId, count: u64) {
        let Some((sid, wire)) = self.jobs.get(&job).cloned() else {
            return;
        };
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.outbox.add_missed(wire, count, 0);
            self.flush(&sid);
        }
    }

    /// The server is stopping: every session ends (its runs terminated with `reason`), every
    /// socket closes with 1001.
    pub fn stop(&mut self, now: Mono, reason: &str) {
        for (conn, _) in std::mem::take(&mut self.conns) {
            self.outputs.push_back(ServerOutput::Close {
                conn,
                code: close::GOING_AWAY,
                reason: reason.into(),
            });
        }
        let ids: Vec<String> = self.sessions.keys().cloned().collect();
        for sid in ids {
            let reason = format!("remote session {sid}: {reason}");
            self.end_session(
                now,
                &sid,
                reason,
                Some(RemoteCode::SessionExpired),
                close::GOING_AWAY,
            );
        }
    }

    /// The earliest time [`SessionTable::handle_timeout`] has something to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Mono> {
        let auth = self
            .conns
            .values()
            .filter(|c| c.session.is_none())
            .map(|c| c.opened + self.config.auth_timeout_ms);
        let sessions = self.sessions.values().map(|s| match s.attach {
            Attach::Attached(_) => s.last_heard + 3 * s.heartbeat_ms,
            Attach::Detached { since } => since + s.window_ms + grace_ms(s.heartbeat_ms),
        });
        auth.chain(sessions).min()
    }

    /// Closes connections that did not authenticate in time or went silent, and expires
    /// sessions detached past their window and grace.
    pub fn handle_timeout(&mut self, now: Mono) {
        let late: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.session.is_none() && now >= c.opened + self.config.auth_timeout_ms)
            .map(|(id, _)| *id)
            .collect();
        for conn in late {
            self.conns.remove(&conn);
            let ms = self.config.auth_timeout_ms;
            self.outputs.push_back(ServerOutput::Close {
                conn,
                code: close::POLICY,
                reason: format!("no hello or resume within {ms} ms"),
            });
        }
        let mut silent = Vec::new();
        let mut expired = Vec::new();
        for (sid, s) in &self.sessions {
            match s.attach {
                Attach::Attached(conn) if now >= s.last_heard + 3 * s.heartbeat_ms => {
                    silent.push((sid.clone(), conn, 3 * s.heartbeat_ms));
                }
                Attach::Detached { since }
                    if now >= since + s.window_ms + grace_ms(s.heartbeat_ms) =>
                {
                    expired.push(sid.clone());
                }
                _ => {}
            }
        }
        for (sid, conn, ms) in silent {
            self.conns.remove(&conn);
            self.sessions.get_mut(&sid).expect("listed").attach = Attach::Detached { since: now };
            self.outputs.push_back(ServerOutput::Close {
                conn,
                code: close::SILENT,
                reason: format!("no frame for {ms} ms"),
            });
        }
        for sid in expired {
            let w = self.sessions[&sid].window_ms;
            let reason = format!("remote session {sid} not resumed within {w} ms");
            self.end_session(
                now,
                &sid,
                reason,
                Some(RemoteCode::SessionExpired),
                close::EXPIRED,
            );
        }
    }

    /// The next output for the host.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<ServerOutput<V>> {
        self.outputs.pop_front()
    }

    /// Sessions whose endpoint was opened but whose hello was not sent yet, with that
    /// endpoint: after each registry input, call [`SessionTable::on_endpoint_ready`] for those
    /// whose endpoint is `Ready`.
    pub fn awaiting_ready(&self) -> Vec<(String, EndpointId)> {
        self.sessions
            .iter()
            .filter(|(_, s)| !s.hello_sent)
            .filter_map(|(id, s)| s.endpoint.map(|e| (id.clone(), e)))
            .collect()
    }

    /// The session that owns `job`, with the client's wire id.
    pub fn session_of(&self, job: JobId) -> Option<(&str, u64)> {
        self.jobs.get(&job).map(|(s, w)| (s.as_str(), *w))
    }

    /// Whether `session` is live (attached or within its window).
    pub fn has_session(&self, session: &str) -> bool {
        self.sessions.contains_key(session)
    }

    /// Live sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// The expired sessions remembered, oldest first.
    pub fn tombstones(&self) -> impl Iterator<Item = &Tombstone> {
        self.tombstones.iter()
    }

    /// Frames and bytes held in `session`'s replay buffer.
    pub fn buffered(&self, session: &str) -> Option<(usize, usize)> {
        self.sessions
            .get(session)
            .map(|s| (s.outbox.len(), s.outbox.bytes()))
    }

    /// Protocol errors seen (all sessions and unauthenticated connections).
    pub fn protocol_errors(&self) -> u64 {
        self.protocol_errors
    }

    /// `{"sessions":[...], "tombstones":[...]}` (for `GET /api/jobs/remote/sessions`).
    pub fn to_json(&self) -> Value {
        let sessions: Vec<Value> = self
            .sessions
            .iter()
            .map(|(id, s)| {
                let (state, since) = match s.attach {
                    Attach::Attached(c) => (format!("attached:{c}"), None),
                    Attach::Detached { since } => ("detached".to_string(), Some(since)),
                };
                json!({
                    "session": id, "principal": s.principal, "owner": s.owner.0,
                    "target": s.target.label(), "label": s.label,
                    "endpoint": s.endpoint.map(|e| e.0), "state": state,
                    "detachedSince": since, "openedAt": s.opened_at, "windowMs": s.window_ms,
                    "heartbeatMs": s.heartbeat_ms, "inSeq": s.in_seq,
                    "outSeq": s.outbox.last_seq(), "buffered": s.outbox.len(),
                    "bufferedBytes": s.outbox.bytes(), "runs": s.runs.len(),
                    "unfinished": s.unfinished(), "protocolErrors": s.protocol_errors,
                })
            })
            .collect();
        let tombstones: Vec<Value> = self.tombstones.iter().map(Tombstone::to_json).collect();
        json!({"sessions": sessions, "tombstones": tombstones})
    }

    // ----- internals ------------------------------------------------------------------------

    fn send(&mut self, conn: ConnId, frame: Value) {
        self.outputs.push_back(ServerOutput::Send { conn, frame });
    }

    fn refuse(&mut self, conn: ConnId, code: RemoteCode, message: &str, close_code: u16) {
        self.conns.remove(&conn);
        self.send(conn, frames::refused(code, message, None));
        self.outputs.push_back(ServerOutput::Close {
            conn,
            code: close_code,
            reason: code.as_str().into(),
        });
    }

    fn count_error(&mut self, sid: &str) {
        self.protocol_errors += 1;
        if let Some(s) = self.sessions.get_mut(sid) {
            s.protocol_errors += 1;
        }
    }

    fn secret(&self, n: u64) -> String {
        let mut h = Sha256::new();
        h.update(self.seed);
        h.update(n.to_le_bytes());
        h.finalize()[..24]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn hello(
        &mut self,
        now: Mono,
        conn: ConnId,
        protocol: &str,
        principal: Option<String>,
        open: RemoteTarget,
        window_ms: u64,
        heartbeat_ms: u64,
        label: String,
    ) {
        let Some(principal) = principal else {
            return self.refuse(
                conn,
                RemoteCode::Unauthenticated,
                "the token was refused",
                close::POLICY,
            );
        };
        if protocol != frames::PROTOCOL {
            let m = format!("this host speaks {}, not `{protocol}`", frames::PROTOCOL);
            return self.refuse(conn, RemoteCode::Protocol, &m, close::PROTOCOL);
        }
        if !self.config.targets.contains(&open) {
            let m = format!("this host offers no {}", open.label());
            return self.refuse(conn, RemoteCode::UnknownTarget, &m, close::NORMAL);
        }
        if self.sessions.len() >= self.config.max_sessions {
            let m = format!("this host holds {} sessions", self.sessions.len());
            return self.refuse(conn, RemoteCode::SessionLimit, &m, close::TRY_LATER);
        }
        let n = self.next_session;
        self.next_session += 1;
        let id = format!("s-{n}");
        let secret = self.secret(n);
        let window_ms = if window_ms == 0 {
            self.config.max_window_ms
        } else {
            window_ms.min(self.config.max_window_ms)
        };
        let heartbeat_ms = if heartbeat_ms == 0 {
            self.config.heartbeat_ms
        } else {
            heartbeat_ms.clamp(10, 60_000)
        };
        let owner = OwnerId(format!("remote:{id}"));
        let l = self.config.limits;
        self.sessions.insert(
            id.clone(),
            Session {
                secret: secret.clone(),
                principal,
                owner: owner.clone(),
                target: open.clone(),
                label: label.clone(),
                endpoint: None,
                attach: Attach::Attached(conn),
                in_seq: 0,
                unacked_in: 0,
                outbox: ReplayBuffer::new(l.replay_frames, l.replay_bytes),
                runs: BTreeMap::new(),
                window_ms,
                heartbeat_ms,
                last_heard: now,
                protocol_errors: 0,
                hello_sent: false,
                opened_at: now,
                max_run: 0,
                full_refusals: 0,
            },
        );
        self.conns.get_mut(&conn).expect("checked").session = Some(id.clone());
        self.send(
            conn,
            frames::welcome(&id, &secret, window_ms, heartbeat_ms, &l),
        );
        self.outputs.push_back(ServerOutput::Open {
            session: id,
            target: open,
            owner,
            label,
        });
    }

    fn resume(
        &mut self,
        now: Mono,
        conn: ConnId,
        principal: Option<String>,
        sid: &str,
        secret: &str,
        ack: u64,
    ) {
        let Some(principal) = principal else {
            return self.refuse(
                conn,
                RemoteCode::Unauthenticated,
                "the token was refused",
                close::POLICY,
            );
        };
        // A session (live or tombstoned) answers only to its own principal with its secret:
        // to anyone else it is unknown, exactly as if it never existed, so that session ids
        // cannot be probed and the runs' outcomes stay private.
        let live = self.sessions.get(sid).is_some_and(|s| {
            secret_matches(&secret_digest(&s.secret), secret) && s.principal == principal
        });
        if !live {
            self.conns.remove(&conn);
            let tombstone = self.tombstones.iter().find(|t| {
                t.session == sid
                    && secret_matches(&t.secret_sha256, secret)
                    && t.principal == principal
            });
            let frame = match tombstone {
                Some(t) => {
                    let jobs = t
                        .jobs
                        .iter()
                        .map(|j| {
                            (
                                j.id.to_string(),
                                json!({"job": j.job.0, "outcome": j.outcome}),
                            )
                        })
                        .collect();
                    let how = if t.code == RemoteCode::SessionExpired {
                        "expired"
                    } else {
                        "ended"
                    };
                    frames::refused(
                        t.code,
                        &format!("session {sid} {how} at {}: {}", t.expired_at, t.reason),
                        Some(jobs),
                    )
                }
                None => frames::refused(
                    RemoteCode::SessionUnknown,
                    &format!("this host knows no session {sid}"),
                    None,
                ),
            };
            self.send(conn, frame);
            self.outputs.push_back(ServerOutput::Close {
                conn,
                code: close::EXPIRED,
                reason: "session not resumable".into(),
            });
            return;
        }
        let s = self.sessions.get_mut(sid).expect("checked");
        if let Attach::Attached(old) = s.attach
            && old != conn
        {
            self.conns.remove(&old);
            self.outputs.push_back(ServerOutput::Close {
                conn: old,
                code: close::SUPERSEDED,
                reason: RemoteCode::Superseded.as_str().into(),
            });
        }
        let s = self.sessions.get_mut(sid).expect("checked");
        s.attach = Attach::Attached(conn);
        s.last_heard = now;
        s.unacked_in = 0;
        let in_seq = s.in_seq;
        let rewound = s.outbox.rewind(ack);
        self.conns.get_mut(&conn).expect("checked").session = Some(sid.into());
        if rewound.is_err() {
            self.count_error(sid);
            let v = Violation::WrongFieldType {
                kind: "resume".into(),
                field: "ack".into(),
                expected: "a seq this host sent".into(),
                found: ack.to_string(),
            };
            self.send(conn, frames::error(RemoteCode::Protocol, &v, None));
            let s = self.sessions.get_mut(sid).expect("checked");
            let last = s.outbox.last_seq();
            let _ = s.outbox.rewind(last);
        }
        self.send(conn, frames::resumed(in_seq));
        self.flush(sid);
    }

    /// Applies a content frame's seq: false when it is a replay (ignored) or a gap (the
    /// connection is dropped so that a resume repairs it).
    fn accept_seq(&mut self, conn: ConnId, sid: &str, seq: u64) -> bool {
        let s = self.sessions.get_mut(sid).expect("checked");
        if seq <= s.in_seq {
            return false;
        }
        if seq != s.in_seq + 1 {
            let v = Violation::SeqGap {
                expected: s.in_seq + 1,
                found: seq,
            };
            self.count_error(sid);
            self.send(conn, frames::error(RemoteCode::Protocol, &v, None));
            self.drop_conn(conn, sid, close::PROTOCOL, "sequence gap; resume to repair");
            return false;
        }
        s.in_seq = seq;
        s.unacked_in += 1;
        true
    }

    fn drop_conn(&mut self, conn: ConnId, sid: &str, code: u16, reason: &str) {
        self.conns.remove(&conn);
        if let Some(s) = self.sessions.get_mut(sid)
            && s.attach == Attach::Attached(conn)
        {
            s.attach = Attach::Detached {
                since: s.last_heard,
            };
        }
        self.outputs.push_back(ServerOutput::Close {
            conn,
            code,
            reason: reason.into(),
        });
    }

    fn peer_ack(&mut self, conn: ConnId, sid: &str, ack: u64) {
        let s = self.sessions.get_mut(sid).expect("checked");
        if let Err(last) = s.outbox.on_ack(ack) {
            self.count_error(sid);
            let v = Violation::WrongFieldType {
                kind: "ack".into(),
                field: "ack".into(),
                expected: format!("at most {last}"),
                found: ack.to_string(),
            };
            self.send(conn, frames::error(RemoteCode::Protocol, &v, None));
        }
    }

    fn early_ack(&mut self, sid: &str) {
        let Some(s) = self.sessions.get_mut(sid) else {
            return;
        };
        if let Attach::Attached(conn) = s.attach
            && s.unacked_in >= 64
        {
            s.unacked_in = 0;
            let f = frames::pong(s.in_seq);
            self.send(conn, f);
        }
    }

    /// Sends the session's unsent frames when it is attached.
    fn flush(&mut self, sid: &str) {
        let Some(s) = self.sessions.get_mut(sid) else {
            return;
        };
        let Attach::Attached(conn) = s.attach else {
            return;
        };
        s.unacked_in = 0;
        for frame in s.outbox.take_unsent(s.in_seq) {
            self.outputs.push_back(ServerOutput::Send { conn, frame });
        }
    }

    fn settle(&mut self, sid: &str, wire: u64, outcome: Value) {
        let Some(s) = self.sessions.get_mut(sid) else {
            return;
        };
        let run = s.runs.entry(wire).or_default();
        run.done = true;
        run.outcome = Some(outcome.clone());
        s.prune();
        s.outbox.push(
            Some(wire),
            FrameClass::Milestone,
            frames::settled(wire, outcome),
        );
    }

    /// A refused frame of an authenticated session: an `error` reply; a refused `run` settles
    /// as failed without starting; nothing else is touched.
    fn refused_frame(&mut self, _now: Mono, conn: ConnId, sid: &str, r: FrameRefused) {
        self.count_error(sid);
        self.send(conn, frames::error(r.code, &r.violation, r.run));
        let s = self.sessions.get_mut(sid).expect("checked");
        // A refused content frame still uses its number, or the next one would be a gap.
        let consumed = match r.seq {
            Some(seq) if seq == s.in_seq + 1 => {
                s.in_seq = seq;
                s.unacked_in += 1;
                true
            }
            _ => false,
        };
        if consumed
            && let Some(wire) = r.run
            && wire > s.max_run
        {
            s.max_run = wire;
            let outcome = Outcome::<Value>::Failed {
                message: format!("the run's frame was refused: {}", r.violation.describe()),
                code: Some(r.code.as_str().into()),
                started: false,
            };
            self.settle(sid, wire, outcome.to_json());
        }
        self.flush(sid);
    }

    /// Whether the session's outbox holds as many undroppable frames as it may (frames or
    /// bytes the client has not acknowledged: `4 * max_runs + 64` frames, `replay_bytes +
    /// max_frame_bytes` bytes). Below it, the refusal count restarts.
    fn outbox_full(&mut self, sid: &str) -> bool {
        let frames_cap = 4 * self.config.max_runs + 64;
        let bytes_cap = self.config.limits.replay_bytes + self.config.limits.max_frame_bytes;
        let s = self.sessions.get_mut(sid).expect("checked");
        let full = s.outbox.milestones() >= frames_cap || s.outbox.bytes() >= bytes_cap;
        if !full {
            s.full_refusals = 0;
        }
        full
    }

    /// A request that would add an undroppable frame to a full outbox: a run settles
    /// `failed{REMOTE_BUFFER_FULL}` without starting, an input gets `error REMOTE_BUFFER_FULL`
    /// (not buffered). After [`FULL_REFUSALS`] of them the connection closes (1013) so that
    /// the client resumes and acknowledges; the session stays.
    fn refuse_full(&mut self, conn: ConnId, sid: &str, t: &str, id: u64) {
        let s = self.sessions.get_mut(sid).expect("checked");
        s.full_refusals += 1;
        let refusals = s.full_refusals;
        let message = format!(
            "the session's replay buffer holds {} unacknowledged frames; acknowledge them",
            s.outbox.len()
        );
        if refusals > FULL_REFUSALS {
            self.drop_conn(
                conn,
                sid,
                close::TRY_LATER,
                "REMOTE_BUFFER_FULL: resume and acknowledge",
            );
            return;
        }
        if t == "run" && id > s.max_run {
            s.max_run = id;
            let outcome = Outcome::<Value>::Failed {
                message,
                code: Some(RemoteCode::BufferFull.as_str().into()),
                started: false,
            };
            self.settle(sid, id, outcome.to_json());
        } else {
            let frame = json!({"t": "error", "code": RemoteCode::BufferFull.as_str(),
                               "detail": message, "id": id});
            self.send(conn, frame);
        }
    }

    /// One carried request.
    fn request(&mut self, _now: Mono, conn: ConnId, sid: &str, body: &V, job: Option<u64>) {
        let t = body
            .field("type")
            .and_then(|t| t.as_text())
            .unwrap_or_default();
        let id = body
            .field("id")
            .and_then(|v| v.as_f64())
            .filter(|n| n.fract() == 0.0 && *n >= 0.0 && *n <= 9_007_199_254_740_991.0)
            .map(|n| n as u64);
        let Some(id) = id else {
            self.count_error(sid);
            let v = Violation::MissingId { kind: t };
            self.send(conn, frames::error(RemoteCode::Protocol, &v, None));
            return;
        };
        if matches!(t.as_str(), "run" | "input") && self.outbox_full(sid) {
            return self.refuse_full(conn, sid, &t, id);
        }
        let max_runs = self.config.max_runs;
        let s = self.sessions.get_mut(sid).expect("checked");
        match t.as_str() {
            "run" => {
                if id <= s.max_run {
                    self.count_error(sid);
                    let v = Violation::BadId {
                        kind: "run".into(),
                        found: format!("{id} (run ids must grow)"),
                    };
                    self.send(conn, frames::error(RemoteCode::Protocol, &v, Some(id)));
                    return;
                }
                if s.unfinished() >= max_runs {
                    let outcome = Outcome::<Value>::Failed {
                        message: format!("the session already has {max_runs} unfinished runs"),
                        code: Some(RemoteCode::BufferFull.as_str().into()),
                        started: false,
                    };
                    self.settle(sid, id, outcome.to_json());
                    return;
                }
                let payload = body
                    .field("payload")
                    .filter(|p| p.type_name() != "undefined")
                    .unwrap_or_else(V::null);
                s.max_run = id;
                s.runs.insert(
                    id,
                    Run {
                        client_job: job,
                        ..Run::default()
                    },
                );
                self.outputs.push_back(ServerOutput::Submit {
                    session: sid.into(),
                    wire: id,
                    owner: s.owner.clone(),
                    payload,
                    origin: Origin {
                        remote_job: job.map(JobId),
                        ..Origin::default()
                    },
                });
            }
            "cancel" => match s.runs.get_mut(&id) {
                Some(run) if run.done => {}
                Some(run) => {
                    let reason = "cancelled by the remote client".to_string();
                    match run.job {
                        Some(job) => self.outputs.push_back(ServerOutput::Cancel {
                            session: sid.into(),
                            job,
                            reason,
                        }),
                        None => run.cancel = Some(reason),
                    }
                }
                None => {
                    self.count_error(sid);
                    let v = Violation::BadId {
                        kind: "cancel".into(),
                        found: format!("{id} (no such run)"),
                    };
                    self.send(conn, frames::error(RemoteCode::Protocol, &v, Some(id)));
                }
            },
            "input" => {
                let input_id = body.field("inputId").and_then(|v| v.as_text());
                let value = body
                    .field("value")
                    .filter(|p| p.type_name() != "undefined")
                    .unwrap_or_else(V::null);
                let Some(input_id) = input_id else {
                    self.count_error(sid);
                    let v = Violation::MissingField {
                        kind: "input".into(),
                        field: "inputId".into(),
                    };
                    self.send(conn, frames::error(RemoteCode::Protocol, &v, Some(id)));
                    return;
                };
                match s.runs.get(&id).map(|r| (r.job, r.done)) {
                    Some((Some(job), false)) => self.outputs.push_back(ServerOutput::Input {
                        session: sid.into(),
                        job,
                        input_id,
                        value,
                    }),
                    _ => {
                        let b = json!({"id": id, "type": "input_rejected", "inputId": input_id,
                                       "message": "the run is not running on this host"});
                        s.outbox
                            .push(Some(id), FrameClass::Milestone, frames::msg(b, None));
                    }
                }
            }
            _ => {
                self.count_error(sid);
                let v = Violation::UnknownType { name: t };
                self.send(conn, frames::error(RemoteCode::Protocol, &v, Some(id)));
            }
        }
    }

    /// Ends a session: its runs are terminated by the host; with a `tombstone` code it leaves
    /// a tombstone (a later resume is refused with that code). An attached connection is
    /// closed with `close_code`.
    fn end_session(
        &mut self,
        now: Mono,
        sid: &str,
        reason: String,
        tombstone: Option<RemoteCode>,
        close_code: u16,
    ) {
        let Some(s) = self.sessions.remove(sid) else {
            return;
        };
        if let Attach::Attached(conn) = s.attach
            && self.conns.remove(&conn).is_some()
        {
            self.outputs.push_back(ServerOutput::Close {
                conn,
                code: close_code,
                reason: reason.chars().take(120).collect(),
            });
        }
        if let Some(code) = tombstone {
            let jobs = s
                .runs
                .iter()
                .filter_map(|(wire, r)| {
                    r.job.map(|job| TombstoneJob {
                        id: *wire,
                        job,
                        client_job: r.client_job,
                        outcome: r.outcome.clone(),
                    })
                })
                .collect();
            self.tombstones.push_back(Tombstone {
                session: sid.into(),
                principal: s.principal.clone(),
                expired_at: now,
                reason: reason.clone(),
                jobs,
                code,
                secret_sha256: secret_digest(&s.secret),
            });
            while self.tombstones.len() > TOMBSTONES {
                if let Some(old) = self.tombstones.pop_front() {
                    self.jobs.retain(|_, (s, _)| *s != old.session);
                }
            }
        } else {
            self.jobs.retain(|_, (s, _)| s != sid);
        }
        self.outputs.push_back(ServerOutput::Terminate {
            session: sid.into(),
            endpoint: s.endpoint,
            owner: s.owner,
            reason,
        });
    }
}
