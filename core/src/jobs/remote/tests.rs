//! Core tests of remote job hosts, in simulated time: a client [`Registry`] ⇄ an in-memory
//! socket the test can cut ⇄ a [`SessionTable`] driving a server `Registry` whose endpoint is a
//! fake in-process worker the test answers for.

use std::collections::{HashMap, VecDeque};

use crate::Mono;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::buffer::{FrameClass, ReplayBuffer};
use super::server::{ConnId, ServerConfig, ServerOutput, SessionTable};
use super::*;
use crate::jobs::wire::WireRequest;
use crate::jobs::*;

const WINDOW: u64 = 1_500;
const HB: u64 = 100;
const GRACE: u64 = grace_ms(HB);

fn auth(token: &str) -> Option<String> {
    (token == "tok").then(|| "alice".to_string())
}

#[derive(Default)]
struct Sock {
    conn: Option<ConnId>,
}

struct World {
    now: Mono,
    client: Registry<Value>,
    server: Registry<Value>,
    table: SessionTable<Value>,
    socks: HashMap<EndpointId, Sock>,
    /// Server endpoint of each session.
    sessions: HashMap<String, EndpointId>,
    subs: Vec<SubscriptionId>,
    /// Requests the fake worker received: (server endpoint, request).
    worker: Vec<(EndpointId, WireRequest<Value>)>,
    /// Connects fail while set.
    blocked: bool,
    /// Connects hang (kept here) while set.
    stall: bool,
    stalled: Vec<EndpointId>,
    /// Server→client frames vanish (in flight when the connection dies) while set.
    drop_s2c: bool,
    /// A socket the client closes stays open on the server's side (a half-open TCP).
    half_open: bool,
    /// Frames for connections no client owns (raw test connections).
    raw: Vec<(ConnId, Value)>,
    raw_closed: Vec<(ConnId, u16)>,
    /// Submit outputs seen per (session, wire).
    submits: HashMap<(String, u64), u32>,
    server_caps: Capabilities,
    /// Opens fail with this reason while set (the host reports `on_endpoint_closed`).
    fail_open: Option<String>,
    /// Submit outputs are kept here, not performed, while set.
    hold_submits: bool,
    held: Vec<ServerOutput<Value>>,
    /// Every `Close` the table asked for.
    closes: Vec<(ConnId, u16)>,
    /// `Connect`s the client asked for.
    connects: u32,
}

/// The secret of session `s-N` of a table seeded `[7; 32]` (what its welcome frame carried).
fn secret_of(n: u64) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update([7u8; 32]);
    h.update(n.to_le_bytes());
    h.finalize()[..24]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn roundtrip(v: &Value) -> Value {
    serde_json::from_str(&v.to_string()).expect("frames are JSON")
}

impl World {
    fn new(config: ServerConfig) -> Self {
        let mut server = Registry::default();
        server.set_journal_window(Some(256));
        World {
            now: Mono::from_ms(0),
            client: Registry::default(),
            server,
            table: SessionTable::new(config, [7; 32]),
            socks: HashMap::new(),
            sessions: HashMap::new(),
            subs: Vec::new(),
            worker: Vec::new(),
            blocked: false,
            stall: false,
            stalled: Vec::new(),
            drop_s2c: false,
            half_open: false,
            raw: Vec::new(),
            raw_closed: Vec::new(),
            submits: HashMap::new(),
            server_caps: Capabilities {
                input: true,
                cancel_ack: true,
                error_code: true,
                batch: false,
            },
            fail_open: None,
            hold_submits: false,
            held: Vec::new(),
            closes: Vec::new(),
            connects: 0,
        }
    }

    fn config() -> ServerConfig {
        ServerConfig {
            targets: vec![RemoteTarget::Script("diffusion".into())],
            ..ServerConfig::default()
        }
    }

    fn open(&mut self) -> EndpointId {
        let ep = self.open_quiet();
        self.pump();
        ep
    }

    /// Opens a remote endpoint without delivering anything yet.
    fn open_quiet(&mut self) -> EndpointId {
        let mut spec = EndpointSpec::new("app", "remote diffusion");
        spec.quiet_ms = 100;
        let mut r = RemoteSpec::new(
            "ws://127.0.0.1:9/api/jobs/remote",
            "tok",
            RemoteTarget::Script("diffusion".into()),
        );
        r.window_ms = WINDOW;
        r.heartbeat_ms = HB;
        let ep = self.client.open_remote(self.now, spec, r).unwrap();
        self.socks.insert(ep, Sock::default());
        ep
    }

    fn ep_of_conn(&self, conn: ConnId) -> Option<EndpointId> {
        self.socks
            .iter()
            .find(|(_, s)| s.conn == Some(conn))
            .map(|(e, _)| *e)
    }

    fn connect(&mut self, ep: EndpointId) {
        let conn = self.table.on_connect(self.now);
        self.socks.get_mut(&ep).unwrap().conn = Some(conn);
        self.client.on_socket_open(self.now, ep).unwrap();
    }

    /// Delivers everything until quiet.
    fn pump(&mut self) {
        let now = self.now;
        loop {
            let mut busy = false;
            let outs: Vec<_> = self.client.drain_outputs().collect();
            for o in outs {
                busy = true;
                match o {
                    Output::Connect { endpoint, .. } => {
                        self.connects += 1;
                        if self.stall {
                            self.stalled.push(endpoint);
                        } else if self.blocked {
                            self.client
                                .on_socket_closed(now, endpoint, "connection refused")
                                .unwrap();
                        } else {
                            self.connect(endpoint);
                        }
                    }
                    Output::SendFrame { endpoint, frame } => {
                        if let Some(conn) = self.socks[&endpoint].conn {
                            self.table.on_frame(now, conn, &roundtrip(&frame), &auth);
                        }
                    }
                    Output::CloseSocket { endpoint, .. } => {
                        if let Some(conn) = self.socks.get_mut(&endpoint).unwrap().conn.take()
                            && !self.half_open
                        {
                            self.table.on_disconnect(now, conn, "client closed");
                        }
                    }
                    _ => {}
                }
            }
            while let Some(o) = self.table.poll_output() {
                busy = true;
                match o {
                    ServerOutput::Send { conn, frame } => match self.ep_of_conn(conn) {
                        Some(_) if self.drop_s2c => {}
                        Some(ep) => self
                            .client
                            .on_socket_frame(now, ep, &roundtrip(&frame))
                            .unwrap(),
                        None => self.raw.push((conn, frame)),
                    },
                    ServerOutput::Close { conn, code, .. } => match self.ep_of_conn(conn) {
                        Some(ep) => {
                            self.closes.push((conn, code));
                            self.socks.get_mut(&ep).unwrap().conn = None;
                            self.client
                                .on_socket_closed(now, ep, "closed by the host")
                                .unwrap();
                        }
                        None => {
                            self.closes.push((conn, code));
                            self.raw_closed.push((conn, code));
                        }
                    },
                    ServerOutput::Open { session, .. } if self.fail_open.is_some() => {
                        let why = self.fail_open.clone().unwrap();
                        self.table
                            .on_endpoint_closed(now, &session, RemoteCode::OpenFailed, &why);
                    }
                    o @ ServerOutput::Submit { .. } if self.hold_submits => self.held.push(o),
                    ServerOutput::Open { session, owner, .. } => {
                        let mut spec = EndpointSpec::new(owner.0.clone(), "diffusion");
                        spec.hello = Hello::Declared(self.server_caps);
                        spec.quiet_ms = 100;
                        let ep = self.server.open_endpoint(now, spec);
                        self.sessions.insert(session.clone(), ep);
                        self.table.on_endpoint_opened(&session, ep);
                        for (s, e) in self.table.awaiting_ready() {
                            let e = self.server.endpoint(e).unwrap();
                            if e.state == EndpointState::Ready {
                                self.table.on_endpoint_ready(now, &s, e.capabilities);
                            }
                        }
                    }
                    ServerOutput::Submit {
                        session,
                        wire,
                        owner,
                        payload,
                        origin,
                    } => {
                        *self.submits.entry((session.clone(), wire)).or_default() += 1;
                        let mut req = Submit::new(owner.0, self.sessions[&session], payload);
                        req.origin = origin;
                        match self.server.submit(now, req) {
                            Ok(s) => {
                                self.table.on_submitted(now, &session, wire, s.job);
                                self.subs
                                    .push(self.server.observe(s.job, Some(1), 4096).unwrap());
                            }
                            Err(e) => self.table.on_submit_failed(now, &session, wire, &e),
                        }
                    }
                    ServerOutput::Cancel { job, reason, .. } => {
                        self.server.cancel(now, job, &reason).unwrap();
                    }
                    ServerOutput::Input {
                        job,
                        input_id,
                        value,
                        ..
                    } => {
                        let _ = self.server.send_input(now, job, Some(input_id), value);
                    }
                    ServerOutput::Terminate {
                        endpoint, reason, ..
                    } => {
                        if let Some(ep) = endpoint {
                            self.server.terminate_endpoint(now, ep, &reason).unwrap();
                        }
                    }
                }
            }
            let outs: Vec<_> = self.server.drain_outputs().collect();
            for o in outs {
                busy = true;
                if let Output::Send { endpoint, request } = o {
                    self.worker.push((endpoint, request));
                }
            }
            for sub in self.subs.clone() {
                for d in self.server.take_deliveries(sub).unwrap() {
                    busy = true;
                    match d {
                        Delivery::Event(ev) => self.table.on_job_event(now, &ev),
                        Delivery::Missed { job, from, to } => {
                            self.table.on_missed(now, job, to - from + 1)
                        }
                    }
                }
            }
            if !busy {
                break;
            }
        }
    }

    /// Advances simulated time to `to`, firing every timer on the way.
    fn advance(&mut self, to: Mono) {
        self.advance_with(to, true);
    }

    fn advance_with(&mut self, to: Mono, client_timers: bool) {
        loop {
            let mut next = [self.server.poll_timeout(), self.table.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            if client_timers && let Some(c) = self.client.poll_timeout() {
                next = Some(next.map_or(c, |n| n.min(c)));
            }
            match next {
                Some(t) if t <= to => {
                    self.now = self.now.max(t);
                    if client_timers {
                        self.client.handle_timeout(self.now);
                    }
                    self.server.handle_timeout(self.now);
                    self.table.handle_timeout(self.now);
                    self.pump();
                }
                _ => break,
            }
        }
        self.now = to;
        self.pump();
    }

    /// The connection dies: both sides notice now; reconnects fail until `heal`.
    fn cut(&mut self, ep: EndpointId) {
        self.blocked = true;
        if let Some(conn) = self.socks.get_mut(&ep).unwrap().conn.take() {
            self.table.on_disconnect(self.now, conn, "cut");
        }
        self.client.on_socket_closed(self.now, ep, "cut").unwrap();
        self.pump();
    }

    fn submit(&mut self, ep: EndpointId, payload: Value) -> JobId {
        let j = self
            .client
            .submit(self.now, Submit::new("app", ep, payload))
            .unwrap()
            .job;
        self.pump();
        j
    }

    /// The server wire id of the `n`th run the fake worker received, with its endpoint.
    fn run(&self, n: usize) -> (EndpointId, u64) {
        let runs: Vec<_> = self
            .worker
            .iter()
            .filter(|(_, r)| matches!(r, WireRequest::Run { .. }))
            .collect();
        (runs[n].0, runs[n].1.id())
    }

    fn reply(&mut self, (ep, id): (EndpointId, u64), mut msg: Value) {
        msg["id"] = json!(id);
        self.server.on_message(self.now, ep, &msg).unwrap();
        self.pump();
    }

    fn server_job(&self, client_job: JobId) -> &Job<Value> {
        self.server
            .jobs()
            .find(|j| j.origin.remote_job == Some(client_job))
            .expect("the server names the client's job")
    }
}

fn names(j: &Job<Value>) -> Vec<&'static str> {
    j.journal().iter().map(|e| e.kind.name()).collect()
}

fn progress_values(j: &Job<Value>) -> Vec<Value> {
    j.journal()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Progress { value } => Some(value.clone()),
            _ => None,
        })
        .collect()
}

fn lost(j: &Job<Value>) -> (String, LostEvidence) {
    match j.outcome() {
        Some(Outcome::Lost { reason, evidence }) => (reason.clone(), *evidence),
        o => panic!("expected lost, got {o:?}"),
    }
}

#[test]
fn progress_and_cancel_acknowledged_across_the_socket_with_both_ids() {
    let mut w = World::new(World::config());
    let ep = w.open();
    assert_eq!(w.client.endpoint(ep).unwrap().state, EndpointState::Ready);
    assert!(w.client.endpoint(ep).unwrap().capabilities.cancel_ack);
    let job = w.submit(ep, json!({"steps": 8}));
    let run = w.run(0);
    for i in 0..3 {
        w.reply(run, json!({"type": "progress", "value": i}));
    }
    assert_eq!(
        w.client.cancel(w.now, job, "user").unwrap(),
        CancelStatus::Requested { ack_expected: true }
    );
    w.pump();
    assert!(
        w.worker
            .iter()
            .any(|(_, r)| *r == WireRequest::Cancel { id: run.1 })
    );
    w.reply(run, json!({"type": "cancelled"}));
    let j = w.client.job(job).unwrap();
    assert_eq!(
        j.outcome(),
        Some(&Outcome::Cancelled {
            evidence: CancelEvidence::Acknowledged
        })
    );
    assert_eq!(progress_values(j), [json!(0), json!(1), json!(2)]);
    let sj = w.server_job(job);
    // Both journals name both ids.
    assert_eq!(j.remote.as_ref().unwrap().job, sj.id);
    assert_eq!(j.remote.as_ref().unwrap().session, "s-1");
    assert!(j.journal().iter().any(|e| e.kind
        == EventKind::RemoteAccepted {
            session: "s-1".into(),
            remote_job: sj.id
        }));
    assert_eq!(sj.origin.remote_job, Some(job));
    assert_eq!(sj.to_json()["origin"]["remoteJob"], json!(job.0));
    assert_eq!(j.to_json()["remote"]["job"], json!(sj.id.0));
    assert_eq!(
        names(j),
        [
            "submitted",
            "started",
            "remote_accepted",
            "progress",
            "progress",
            "progress",
            "cancel_requested",
            "cancel_acknowledged",
            "outcome"
        ]
    );
    assert_eq!(
        sj.outcome(),
        Some(&Outcome::Cancelled {
            evidence: CancelEvidence::Acknowledged
        })
    );
    assert_eq!(w.submits.len(), 1);
}

#[test]
fn a_cut_resumed_within_the_window_loses_nothing_and_applies_nothing_twice() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let a = w.submit(ep, json!("a"));
    let run = w.run(0);
    for i in 0..5 {
        w.reply(run, json!({"type": "progress", "value": i}));
    }
    // The next frames are in flight when the connection dies: they never arrive.
    w.drop_s2c = true;
    for i in 5..8 {
        w.reply(run, json!({"type": "progress", "value": i}));
    }
    w.drop_s2c = false;
    w.cut(ep);
    let since = w.now;
    assert_eq!(
        w.client.endpoint(ep).unwrap().state,
        EndpointState::Suspended { since }
    );
    for i in 8..20 {
        w.reply(run, json!({"type": "progress", "value": i}));
    }
    // A submit while disconnected waits; input is refused, not buffered.
    let b = w.submit(ep, json!("b"));
    assert_eq!(w.client.job(b).unwrap().state, JobState::Queued);
    let err = w
        .client
        .send_input(w.now, a, None, json!({"x": 1}))
        .unwrap_err();
    assert_eq!(err.code(), "REMOTE_DISCONNECTED");
    w.advance(since + 400);
    w.blocked = false;
    w.advance(since + 1_000);
    assert_eq!(w.client.endpoint(ep).unwrap().state, EndpointState::Ready);
    assert_eq!(w.client.job(b).unwrap().state, JobState::Running);
    w.reply(run, json!({"type": "done", "value": "A"}));
    let run_b = w.run(1);
    w.reply(run_b, json!({"type": "done", "value": "B"}));
    let ja = w.client.job(a).unwrap();
    let expected: Vec<Value> = (0..20).map(|i| json!(i)).collect();
    assert_eq!(progress_values(ja), expected, "every event, in order");
    assert_eq!(progress_values(w.server_job(a)), expected);
    assert_eq!(
        ja.outcome(),
        Some(&Outcome::Succeeded { value: json!("A") })
    );
    assert_eq!(
        w.client.job(b).unwrap().outcome(),
        Some(&Outcome::Succeeded { value: json!("B") })
    );
    // Each client frame was applied once: one submit per run, one server job per client job.
    assert!(w.submits.values().all(|n| *n == 1));
    assert_eq!(w.submits.len(), 2);
    assert_eq!(w.server.jobs().count(), 2);
    // A replay of an applied client frame is ignored.
    let conn = w.socks[&ep].conn.unwrap();
    let dup = json!({"t": "msg", "seq": 1, "ack": 0, "body": {"id": 1, "type": "run", "payload": "a"}, "job": a.0});
    w.table.on_frame(w.now, conn, &dup, &auth);
    w.pump();
    assert_eq!(w.submits.len(), 2);
    let log: Vec<Value> = w
        .client
        .endpoint(ep)
        .unwrap()
        .events()
        .iter()
        .map(|e| e.to_json())
        .collect();
    let types: Vec<&str> = log.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(types.contains(&"disconnected") && types.contains(&"resumed"));
    assert_eq!(w.client.remote_info(ep).unwrap().disconnects, 1);
    assert_eq!(w.client.remote_info(ep).unwrap().state, "live");
}

#[test]
fn a_silent_socket_is_dropped_after_three_heartbeats_and_the_resume_supersedes_it() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    let run = w.run(0);
    let old = w.socks[&ep].conn.unwrap();
    let t0 = w.now;
    // Nothing from the host arrives any more, and the host does not see the socket end.
    w.drop_s2c = true;
    w.half_open = true;
    w.reply(run, json!({"type": "progress", "value": 1}));
    w.advance(t0 + 3 * HB - 1);
    assert_eq!(w.client.endpoint(ep).unwrap().state, EndpointState::Ready);
    w.advance(t0 + 3 * HB);
    assert_eq!(
        w.client.endpoint(ep).unwrap().state,
        EndpointState::Suspended { since: t0 + 3 * HB }
    );
    w.drop_s2c = false;
    w.advance(t0 + 3 * HB + 150);
    assert_eq!(w.client.endpoint(ep).unwrap().state, EndpointState::Ready);
    assert!(w.raw_closed.contains(&(old, close::SUPERSEDED)));
    w.reply(run, json!({"type": "done", "value": 2}));
    let j = w.client.job(job).unwrap();
    assert_eq!(progress_values(j), [json!(1)]);
    assert_eq!(j.outcome(), Some(&Outcome::Succeeded { value: json!(2) }));
}

#[test]
fn a_cut_never_resumed_is_lost_at_the_window_and_terminated_on_the_server_after_grace() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    let run = w.run(0);
    w.reply(run, json!({"type": "progress", "value": 0.5}));
    w.now = Mono::from_ms(1_000);
    w.cut(ep);
    let since = w.now;
    w.advance(since + WINDOW - 1);
    assert_eq!(w.client.job(job).unwrap().state, JobState::Running);
    w.advance(since + WINDOW);
    let j = w.client.job(job).unwrap();
    let (reason, evidence) = lost(j);
    assert_eq!(evidence, LostEvidence::RemoteDisconnected);
    assert!(
        reason.starts_with(&format!(
            "not resumed within {WINDOW} ms of the disconnect at {since}"
        )),
        "{reason}"
    );
    assert_eq!(j.journal().last().unwrap().at, since + WINDOW);
    // The link is closed: no more timers, no more connects.
    assert_eq!(w.client.remote_info(ep).unwrap().state, "closed");
    assert_eq!(w.client.poll_timeout(), None);
    assert_eq!(
        j.outcome().unwrap().to_json()["evidence"],
        json!("remote_disconnected")
    );
    // The server keeps running through the window, then terminates and records why.
    let sjob = w.server_job(job).id;
    assert_eq!(w.server.job(sjob).unwrap().state, JobState::Running);
    w.advance(since + WINDOW + GRACE - 1);
    assert_eq!(w.server.job(sjob).unwrap().state, JobState::Running);
    w.advance(since + WINDOW + GRACE);
    let sj = w.server.job(sjob).unwrap();
    let (sreason, sevidence) = lost(sj);
    assert_eq!(sevidence, LostEvidence::Terminated);
    assert_eq!(
        sreason,
        format!("remote session s-1 not resumed within {WINDOW} ms")
    );
    assert_eq!(sj.journal().last().unwrap().at, since + WINDOW + GRACE);
    let t: Vec<_> = w.table.tombstones().collect();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].session, "s-1");
    assert_eq!(t[0].jobs.len(), 1);
    assert_eq!(t[0].jobs[0].job, sjob);
    assert_eq!(
        t[0].jobs[0].outcome.as_ref().unwrap()["outcome"],
        json!("lost")
    );
    assert!(!w.table.has_session("s-1"));
    assert_eq!(w.table.to_json()["tombstones"][0]["session"], json!("s-1"));
}

#[test]
fn a_late_resume_is_refused_as_expired_and_the_server_outcome_is_late_evidence() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    let run = w.run(0);
    w.reply(run, json!({"type": "progress", "value": 1}));
    w.cut(ep);
    let since = w.now;
    // The reconnect hangs (a stalled host) past the server's expiry.
    w.blocked = false;
    w.stall = true;
    w.advance(since + 150);
    assert_eq!(w.stalled, [ep]);
    w.advance_with(since + WINDOW + GRACE + 10, false);
    assert_eq!(w.table.tombstones().count(), 1);
    assert_eq!(w.client.job(job).unwrap().state, JobState::Running);
    w.stall = false;
    w.connect(ep);
    w.pump();
    let j = w.client.job(job).unwrap();
    let (reason, evidence) = lost(j);
    assert_eq!(evidence, LostEvidence::RemoteDisconnected);
    assert!(reason.contains("REMOTE_SESSION_EXPIRED"), "{reason}");
    let late: Vec<_> = j
        .journal()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::LateEvidence { reply } => Some(reply.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(late.len(), 1);
    assert!(
        matches!(&late[0], crate::jobs::wire::Reply::Error { code: Some(c), message, .. }
            if c == "REMOTE_LOST" && message.contains("not resumed within")),
        "{late:?}"
    );
    let log = w.client.endpoint(ep).unwrap().events();
    assert!(log.iter().any(|e| matches!(&e.kind,
        EndpointEventKind::ResumeRefused { code, .. } if code == "REMOTE_SESSION_EXPIRED")));
}

#[test]
fn a_cancel_while_disconnected_is_delivered_on_resume_or_answered_by_expiry() {
    // Resumed: delivered, acknowledged.
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    let run = w.run(0);
    w.cut(ep);
    let t = w.now;
    assert_eq!(
        w.client.cancel(t, job, "user").unwrap(),
        CancelStatus::RequestedWhileDisconnected
    );
    assert_eq!(
        w.client.cancel(t, job, "again").unwrap(),
        CancelStatus::AlreadyRequested
    );
    // Far past the client's quiet period: no quiet measured across a disconnect.
    w.advance(t + 600);
    assert_eq!(w.client.job(job).unwrap().state, JobState::Running);
    assert!(
        !w.worker
            .iter()
            .any(|(_, r)| matches!(r, WireRequest::Cancel { .. }))
    );
    w.blocked = false;
    w.advance(t + 1_000);
    assert!(
        w.worker
            .iter()
            .any(|(_, r)| *r == WireRequest::Cancel { id: run.1 })
    );
    w.reply(run, json!({"type": "cancelled"}));
    let j = w.client.job(job).unwrap();
    assert_eq!(
        j.outcome(),
        Some(&Outcome::Cancelled {
            evidence: CancelEvidence::Acknowledged
        })
    );
    assert!(!names(j).contains(&"no_acknowledgement"));

    // Expired: lost, naming the cancel that never got through.
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    w.now = Mono::from_ms(500);
    w.cut(ep);
    let since = w.now;
    w.now = Mono::from_ms(700);
    assert_eq!(
        w.client.cancel(Mono::from_ms(700), job, "user").unwrap(),
        CancelStatus::RequestedWhileDisconnected
    );
    w.advance(since + WINDOW);
    let j = w.client.job(job).unwrap();
    let (reason, evidence) = lost(j);
    assert_eq!(evidence, LostEvidence::RemoteDisconnected);
    assert!(
        reason.ends_with("the cancel requested at 700 was never delivered"),
        "{reason}"
    );
    assert!(!names(j).contains(&"no_acknowledgement"));

    // A server worker without cancelAck: the quiet period is measured on the server.
    let mut w = World::new(World::config());
    w.server_caps.cancel_ack = false;
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    w.client.cancel(w.now, job, "user").unwrap();
    w.pump();
    w.advance(w.now + 100);
    let j = w.client.job(job).unwrap();
    assert_eq!(
        j.outcome(),
        Some(&Outcome::Cancelled {
            evidence: CancelEvidence::Quiet { quiet_ms: 100 }
        })
    );
    let na = j
        .journal()
        .iter()
        .find(|e| e.kind.name() == "no_acknowledgement")
        .unwrap();
    assert_eq!(na.source, Source::Endpoint(ep), "reported by the host");
}

#[test]
fn a_flood_while_cut_stays_within_the_buffer_and_is_reported_as_one_exact_gap() {
    const N: u64 = 100_000;
    let mut config = World::config();
    config.limits.replay_frames = 256;
    config.limits.replay_bytes = 16 << 10;
    let mut w = World::new(config);
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    let run = w.run(0);
    w.reply(run, json!({"type": "progress", "value": 0}));
    w.cut(ep);
    let mut max = (0, 0);
    let mut msg = json!({"id": run.1, "type": "progress", "value": 0});
    for i in 1..N {
        msg["value"] = json!(i);
        w.server.on_message(w.now, run.0, &msg).unwrap();
        if i % 2048 == 0 {
            w.pump();
            let (f, b) = w.table.buffered("s-1").unwrap();
            max = (max.0.max(f), max.1.max(b));
        }
    }
    w.reply(run, json!({"type": "done", "value": "ok"}));
    let (f, b) = w.table.buffered("s-1").unwrap();
    max = (max.0.max(f), max.1.max(b));
    assert!(max.0 <= 256 && max.1 <= 16 << 10, "{max:?}");
    w.blocked = false;
    w.advance(w.now + 300);
    let j = w.client.job(job).unwrap();
    assert_eq!(
        j.outcome(),
        Some(&Outcome::Succeeded { value: json!("ok") })
    );
    let missed: Vec<_> = j
        .journal()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::RemoteMissed { progress, partial } => Some((progress, partial)),
            _ => None,
        })
        .collect();
    assert_eq!(missed.len(), 1, "one report");
    let received = progress_values(j).len() as u64;
    assert_eq!(received + missed[0].0, N, "exact: received + missed = sent");
    assert_eq!(missed[0].1, 0);
    // Received progress is the tail, in order.
    let vals = progress_values(j);
    assert!(vals.windows(2).all(|p| p[0].as_u64() < p[1].as_u64()));
    assert_eq!(vals.last(), Some(&json!(N - 1)));
}

#[test]
fn malformed_oversized_and_out_of_sequence_frames_touch_only_their_session() {
    let mut config = World::config();
    config.limits.max_frame_bytes = 4096;
    let mut w = World::new(config);
    let e1 = w.open();
    let e2 = w.open();
    let j1 = w.submit(e1, json!(1));
    let j2 = w.submit(e2, json!(2));
    let (r1, r2) = (w.run(0), w.run(1));
    let c1 = w.socks[&e1].conn.unwrap();
    // Garbage on session 1's socket: error frames, the socket stays.
    for bad in [
        json!([1, 2]),
        json!({"t": "explode"}),
        json!({"t": "msg", "body": 3}),
        json!({"t": "ping", "ack": "x"}),
    ] {
        w.table.on_frame(w.now, c1, &bad, &auth);
    }
    w.table.on_undecodable(w.now, c1, "not JSON");
    w.pump();
    assert_eq!(w.socks[&e1].conn, Some(c1));
    let log = w.client.endpoint(e1).unwrap().events();
    let errors = log
        .iter()
        .filter(|e| matches!(e.kind, EndpointEventKind::RemoteError { .. }))
        .count();
    assert_eq!(errors, 5);
    // Garbage from the host is the client endpoint's protocol error, nothing more.
    for bad in [
        json!({"t": "wat"}),
        json!({"t": "accepted", "seq": "x"}),
        json!(7),
    ] {
        w.client.on_socket_frame(w.now, e1, &bad).unwrap();
    }
    assert_eq!(w.client.endpoint(e1).unwrap().protocol_errors(), 3);
    w.reply(r1, json!({"type": "progress", "value": 1}));
    // A sequence gap drops session 1's socket; the resume repairs it.
    w.table.on_frame(
        w.now,
        c1,
        &json!({"t": "msg", "seq": 99, "ack": 0, "body": {"id": 1, "type": "cancel"}}),
        &auth,
    );
    w.pump();
    w.advance(w.now + 300);
    assert_eq!(w.client.remote_info(e1).unwrap().state, "live");
    assert_ne!(w.socks[&e1].conn, Some(c1));
    w.reply(r1, json!({"type": "progress", "value": 2}));
    w.reply(r1, json!({"type": "done", "value": "one"}));
    w.reply(r2, json!({"type": "done", "value": "two"}));
    let a = w.client.job(j1).unwrap();
    assert_eq!(progress_values(a), [json!(1), json!(2)]);
    assert_eq!(
        a.outcome(),
        Some(&Outcome::Succeeded {
            value: json!("one")
        })
    );
    let b = w.client.job(j2).unwrap();
    assert_eq!(
        b.outcome(),
        Some(&Outcome::Succeeded {
            value: json!("two")
        })
    );
    assert_eq!(
        names(b),
        ["submitted", "started", "remote_accepted", "outcome"]
    );
    assert_eq!(w.client.endpoint(e2).unwrap().protocol_errors(), 0);
    assert!(
        !w.client
            .endpoint(e2)
            .unwrap()
            .events()
            .iter()
            .any(|e| matches!(e.kind, EndpointEventKind::RemoteError { .. }))
    );

    // A raw session: an oversized run is settled failed without starting; the next runs.
    let raw = w.table.on_connect(w.now);
    let hello = frames::hello(
        "tok",
        &RemoteTarget::Script("diffusion".into()),
        1000,
        HB,
        "raw",
    );
    w.table.on_frame(w.now, raw, &hello, &auth);
    w.pump();
    let big = json!({"t": "msg", "seq": 1, "ack": 0,
                     "body": {"id": 1, "type": "run", "payload": "x".repeat(8000)}});
    w.table.on_frame(w.now, raw, &big, &auth);
    let ok =
        json!({"t": "msg", "seq": 2, "ack": 0, "body": {"id": 2, "type": "run", "payload": 5}});
    w.table.on_frame(w.now, raw, &ok, &auth);
    w.pump();
    let frames_of = |w: &World, t: &str| -> Vec<Value> {
        w.raw
            .iter()
            .filter(|(c, f)| *c == raw && f["t"] == json!(t))
            .map(|(_, f)| f.clone())
            .collect()
    };
    let errs = frames_of(&w, "error");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0]["code"], json!("REMOTE_FRAME_TOO_LARGE"));
    let settled = frames_of(&w, "settled");
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0]["id"], json!(1));
    assert_eq!(settled[0]["outcome"]["started"], json!(false));
    assert_eq!(
        settled[0]["outcome"]["code"],
        json!("REMOTE_FRAME_TOO_LARGE")
    );
    assert_eq!(frames_of(&w, "accepted").len(), 1);
    let r3 = w.run(2);
    w.reply(r3, json!({"type": "done", "value": 6}));
    let done: Vec<_> = frames_of(&w, "msg")
        .into_iter()
        .filter(|f| f["body"]["type"] == json!("done"))
        .collect();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["body"]["id"], json!(2), "the client's wire id");
    // A frame before authentication is refused; a bad token closes 1008.
    let anon = w.table.on_connect(w.now);
    w.table
        .on_frame(w.now, anon, &json!({"t": "ping", "ack": 0}), &auth);
    let bad = frames::hello("nope", &RemoteTarget::Script("diffusion".into()), 0, 0, "");
    w.table.on_frame(w.now, anon, &bad, &auth);
    w.pump();
    let anon_frames: Vec<&Value> = w
        .raw
        .iter()
        .filter(|(c, _)| *c == anon)
        .map(|(_, f)| f)
        .collect();
    assert_eq!(anon_frames[0]["code"], json!("REMOTE_UNAUTHENTICATED"));
    assert_eq!(anon_frames[1]["t"], json!("refused"));
    assert!(w.raw_closed.contains(&(anon, close::POLICY)));
    // 5 garbage frames + the gap + the oversized run.
    assert_eq!(w.table.protocol_errors(), 7);
}

#[test]
fn a_worker_that_dies_on_the_host_is_remote_lost_not_disconnected() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    let (sep, _) = w.run(0);
    w.server
        .on_endpoint_closed(w.now, sep, "worker exited with code 1")
        .unwrap();
    w.pump();
    let (reason, evidence) = lost(w.client.job(job).unwrap());
    assert_eq!(evidence, LostEvidence::RemoteLost);
    assert_eq!(reason, "on the remote host: worker exited with code 1");
    assert_eq!(lost(w.server_job(job)).1, LostEvidence::TransportClosed);
    // The session stays; a new run fails without starting.
    let next = w.submit(ep, json!(2));
    assert!(matches!(
        w.client.job(next).unwrap().outcome(),
        Some(Outcome::Failed { code: Some(c), started: false, .. }) if c == "ENDPOINT_CLOSED"
    ));
}

#[test]
fn terminate_and_owner_close_end_the_session_deliberately() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    let conn = w.socks[&ep].conn.unwrap();
    w.client.terminate_endpoint(w.now, ep, "user stop").unwrap();
    w.pump();
    assert_eq!(w.raw_closed, [(conn, close::NORMAL)], "closed once");
    let (reason, evidence) = lost(w.client.job(job).unwrap());
    assert_eq!(
        (reason.as_str(), evidence),
        ("user stop", LostEvidence::Terminated)
    );
    // The host heard `close`: the run is terminated there now, not after the window.
    let (sreason, sevidence) = lost(w.server_job(job));
    assert_eq!(sevidence, LostEvidence::Terminated);
    assert!(
        sreason.contains("closed by its client: user stop"),
        "{sreason}"
    );
    assert_eq!(w.table.session_count(), 0);
    assert_eq!(w.socks[&ep].conn, None);

    let ep = w.open();
    let job = w.submit(ep, json!(2));
    let report = w.client.close_owner(w.now, &OwnerId::new("app"));
    w.pump();
    assert_eq!(report.endpoints, [ep]);
    let line = report.jobs.iter().find(|l| l.job == job).unwrap();
    assert_eq!(
        (line.was.as_str(), line.outcome),
        ("running", OutcomeKind::Lost)
    );
    assert_eq!(w.table.session_count(), 0);
}

#[test]
fn refused_sessions_close_the_endpoint_before_any_run() {
    let mut w = World::new(World::config());
    let mut spec = RemoteSpec::new(
        "ws://localhost:9/api/jobs/remote",
        "wrong",
        RemoteTarget::Script("diffusion".into()),
    );
    spec.window_ms = WINDOW;
    spec.heartbeat_ms = HB;
    let ep = w
        .client
        .open_remote(
            Mono::from_ms(0),
            EndpointSpec::new("app", "r"),
            spec.clone(),
        )
        .unwrap();
    w.socks.insert(ep, Sock::default());
    let job = w
        .client
        .submit(Mono::from_ms(0), Submit::new("app", ep, json!(1)))
        .unwrap()
        .job;
    w.pump();
    let e = w.client.endpoint(ep).unwrap();
    assert!(
        matches!(&e.state, EndpointState::Closed { reason } if reason.contains("REMOTE_UNAUTHENTICATED")),
        "{:?}",
        e.state
    );
    assert!(matches!(
        w.client.job(job).unwrap().outcome(),
        Some(Outcome::Failed { code: Some(c), started: false, .. }) if c == "ENDPOINT_CLOSED"
    ));
    spec.token = "tok".into();
    spec.open = RemoteTarget::Kind("nothing".into());
    let ep = w
        .client
        .open_remote(Mono::from_ms(0), EndpointSpec::new("app", "r"), spec)
        .unwrap();
    w.socks.insert(ep, Sock::default());
    w.pump();
    assert!(matches!(&w.client.endpoint(ep).unwrap().state,
        EndpointState::Closed { reason } if reason.contains("REMOTE_UNKNOWN_TARGET")));
    assert_eq!(w.client.remote_info(ep).unwrap().state, "closed");
    assert_eq!(w.client.poll_timeout(), None);
    assert_eq!(w.table.session_count(), 0);
}

#[test]
fn a_restarted_host_refuses_the_unknown_session_and_the_runs_are_lost_at_once() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    w.now = Mono::from_ms(100);
    w.cut(ep);
    // The host restarts: a new table and registry know nothing of session s-1.
    w.table = SessionTable::new(World::config(), [9; 32]);
    w.server = Registry::default();
    w.subs.clear();
    w.blocked = false;
    w.advance(Mono::from_ms(300));
    let (reason, evidence) = lost(w.client.job(job).unwrap());
    assert_eq!(evidence, LostEvidence::RemoteDisconnected);
    assert!(reason.contains("REMOTE_SESSION_UNKNOWN"), "{reason}");
    assert_eq!(w.client.remote_info(ep).unwrap().state, "closed");
    assert_eq!(w.client.poll_timeout(), None);
    assert_eq!(w.socks[&ep].conn, None, "the socket was closed");
    assert!(w.client.job(job).unwrap().journal().last().unwrap().at < Mono::from_ms(300));
}

#[test]
fn urls_need_wss_except_to_loopback() {
    assert!(check_url("wss://jobs.example/api/jobs/remote", false).is_ok());
    assert!(check_url("ws://127.0.0.1:8080/api/jobs/remote", false).is_ok());
    assert!(check_url("ws://localhost/x", false).is_ok());
    assert!(check_url("ws://[::1]:9/x", false).is_ok());
    assert!(check_url("ws://jobs.example/x", false).is_err());
    assert!(check_url("ws://jobs.example/x", true).is_ok());
    assert!(check_url("http://127.0.0.1/x", false).is_err());
    assert!(check_url("wss://u:p@jobs.example/x", false).is_err());
    let mut reg: Registry<Value> = Registry::default();
    let err = reg
        .open_remote(
            Mono::from_ms(0),
            EndpointSpec::new("o", "l"),
            RemoteSpec::new("ws://10.0.0.1/x", "t", RemoteTarget::Kind("sleep".into())),
        )
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    for c in RemoteCode::ALL {
        assert_eq!(RemoteCode::from_name(c.as_str()), Some(c));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The buffer stays within its bounds whatever is pushed, and every droppable frame is
    /// either delivered or counted in a `missed` report that precedes the run's later frames.
    #[test]
    fn the_replay_buffer_is_bounded_and_accounts_for_every_drop(
        ops in proptest::collection::vec((0u8..4, 0u64..3, 0usize..200), 1..400),
    ) {
        let (max_frames, max_bytes) = (16, 2_000);
        let mut b = ReplayBuffer::new(max_frames, max_bytes);
        let mut pushed: HashMap<u64, u64> = HashMap::new();
        let mut delivered: HashMap<u64, u64> = HashMap::new();
        let mut reported: HashMap<u64, u64> = HashMap::new();
        let mut milestones = 0usize;
        let mut out = VecDeque::new();
        for (op, wire, size) in ops {
            match op {
                0 | 1 => {
                    let class = if op == 0 { FrameClass::Progress } else { FrameClass::Partial };
                    *pushed.entry(wire).or_default() += 1;
                    b.push(Some(wire), class, json!({"t": "msg", "body": {"id": wire, "type": "progress", "value": "x".repeat(size)}}));
                }
                2 => {
                    milestones += 1;
                    b.push(Some(wire), FrameClass::Milestone, json!({"t": "accepted", "id": wire, "job": 1}));
                }
                _ => {
                    out.extend(b.take_unsent(0));
                    let last = b.last_seq();
                    b.on_ack(last).unwrap();
                }
            }
            // Bounded, except for what can never be dropped.
            prop_assert!(b.len() <= max_frames.max(b.milestones()));
            prop_assert!(b.bytes() <= max_bytes.max(b.milestones() * 300));
        }
        out.extend(b.take_unsent(0));
        let mut seq = 0;
        for f in &out {
            seq += 1;
            prop_assert_eq!(f["seq"].as_u64(), Some(seq), "contiguous");
            let id = f["id"].as_u64().or(f["body"]["id"].as_u64()).unwrap();
            match f["t"].as_str().unwrap() {
                "missed" => {
                    *reported.entry(id).or_default() +=
                        f["progress"].as_u64().unwrap() + f["partial"].as_u64().unwrap();
                }
                "msg" => *delivered.entry(id).or_default() += 1,
                _ => {}
            }
        }
        let _ = milestones;
        for (wire, n) in pushed {
            prop_assert_eq!(
                delivered.get(&wire).copied().unwrap_or(0) + reported.get(&wire).copied().unwrap_or(0),
                n
            );
        }
    }
}

#[test]
fn frame_sizes_are_counted_as_encoded() {
    for v in [
        json!({"t": "msg", "body": {"id": 1, "type": "progress", "value": 12345}}),
        json!([1, -20, null, true, false, "ab", {}]),
        json!({}),
    ] {
        assert_eq!(buffer::encoded_len(&v), v.to_string().len(), "{v}");
    }
    // A report built lazily is counted as the frame it becomes.
    let (mut a, mut b) = (ReplayBuffer::new(8, 1 << 20), ReplayBuffer::new(8, 1 << 20));
    a.push_report(12, false, json!({"x": [1, 2]}));
    let body = json!({"id": 12, "type": "progress", "value": {"x": [1, 2]}});
    b.push(Some(12), FrameClass::Progress, frames::msg(body, None));
    assert_eq!(a.bytes(), b.bytes());
    assert_eq!(a.take_unsent(3), b.take_unsent(3));
}

fn failed_unstarted(j: &Job<Value>) -> String {
    match j.outcome() {
        Some(Outcome::Failed {
            message,
            code: Some(c),
            started: false,
        }) if c == "ENDPOINT_CLOSED" => message.clone(),
        o => panic!("expected failed ENDPOINT_CLOSED without starting, got {o:?}"),
    }
}

#[test]
fn an_endpoint_the_host_cannot_open_ends_the_session_before_any_run() {
    let mut w = World::new(World::config());
    let why = "cannot start `node`: No such file or directory";
    w.fail_open = Some(why.into());
    let ep = w.open_quiet();
    let a = w
        .client
        .submit(Mono::from_ms(0), Submit::new("app", ep, json!(1)))
        .unwrap();
    let b = w
        .client
        .submit(Mono::from_ms(0), Submit::new("app", ep, json!(2)))
        .unwrap();
    w.pump();
    for job in [a.job, b.job] {
        let m = failed_unstarted(w.client.job(job).unwrap());
        assert!(m.contains("REMOTE_OPEN_FAILED") && m.contains(why), "{m}");
    }
    assert!(w.worker.is_empty() && w.submits.is_empty(), "nothing ran");
    let e = w.client.endpoint(ep).unwrap();
    assert!(
        matches!(&e.state, EndpointState::Closed { reason }
            if reason == &format!("the remote host ended session s-1 (REMOTE_OPEN_FAILED: {why})")),
        "{:?}",
        e.state
    );
    assert_eq!(w.client.remote_info(ep).unwrap().state, "closed");
    assert_eq!(w.client.poll_timeout(), None);
    assert_eq!(w.closes, [(ConnId(1), close::NORMAL)]);
    assert_eq!(w.socks[&ep].conn, None);
    // The session ended with a tombstone; nothing reconnects.
    assert_eq!(w.table.session_count(), 0);
    let t: Vec<_> = w.table.tombstones().collect();
    assert_eq!(t.len(), 1);
    assert_eq!((t[0].code, t[0].jobs.len()), (RemoteCode::OpenFailed, 0));
    assert!(t[0].reason.contains(why), "{}", t[0].reason);
    w.advance(Mono::from_ms(3 * WINDOW));
    assert_eq!(w.connects, 1);
    // A resume of it is refused with the tombstone's code and reason.
    let conn = w.table.on_connect(w.now);
    w.table.on_frame(
        w.now,
        conn,
        &frames::resume("tok", "s-1", &secret_of(1), 0),
        &auth,
    );
    w.pump();
    let (_, refused) = w.raw.iter().find(|(c, _)| *c == conn).unwrap();
    assert_eq!(refused["t"], "refused");
    assert_eq!(refused["code"], "REMOTE_OPEN_FAILED");
    assert!(refused["message"].as_str().unwrap().contains(why));
    assert_eq!(w.raw_closed, [(conn, close::EXPIRED)]);
}

#[test]
fn a_worker_that_dies_after_its_hello_ends_only_its_session() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let other = w.open();
    let a = w.submit(ep, json!("a"));
    let o = w.submit(other, json!("o"));
    let run_a = w.run(0);
    let run_o = w.run(1);
    w.reply(run_a, json!({"type": "progress", "value": 1}));
    // Run b is sent, but the host has not submitted it when the worker dies.
    w.hold_submits = true;
    let b = w.submit(ep, json!("b"));
    w.hold_submits = false;
    assert_eq!(w.held.len(), 1);
    assert_eq!(w.client.job(b).unwrap().state, JobState::Running);
    let conn = w.socks[&ep].conn.unwrap();
    let why = "worker exited with code 1";
    w.server.on_endpoint_closed(w.now, run_a.0, why).unwrap();
    // The host reports it before feeding the closure's events: `ended` decides.
    w.table
        .on_endpoint_closed(w.now, "s-1", RemoteCode::EndpointClosed, why);
    w.pump();
    let (reason, evidence) = lost(w.client.job(a).unwrap());
    assert_eq!(evidence, LostEvidence::RemoteLost);
    assert_eq!(
        reason,
        format!("the remote host ended session s-1 (REMOTE_ENDPOINT_CLOSED: {why})")
    );
    let m = failed_unstarted(w.client.job(b).unwrap());
    assert!(m.contains(why), "{m}");
    assert!(matches!(
        w.client.endpoint(ep).unwrap().state,
        EndpointState::Closed { .. }
    ));
    assert_eq!(w.client.remote_info(ep).unwrap().state, "closed");
    let err = w
        .client
        .submit(w.now, Submit::new("app", ep, json!("c")))
        .unwrap_err();
    assert_eq!(err.code(), "ENDPOINT_CLOSED");
    assert!(w.closes.contains(&(conn, close::NORMAL)));
    // The tombstone has the reason and, once fed, the server's outcome of run a.
    let t = w.table.tombstones().next().unwrap();
    assert_eq!(t.code, RemoteCode::EndpointClosed);
    assert!(t.reason.contains(why));
    assert_eq!(t.jobs.len(), 1);
    assert_eq!(
        t.jobs[0].outcome.as_ref().unwrap()["evidence"],
        "transport_closed"
    );
    // The other session is untouched and keeps working.
    assert!(w.table.has_session("s-2"));
    w.reply(run_o, json!({"type": "done", "value": "O"}));
    assert_eq!(
        w.client.job(o).unwrap().outcome(),
        Some(&Outcome::Succeeded { value: json!("O") })
    );
    assert_eq!(
        w.client.endpoint(other).unwrap().state,
        EndpointState::Ready
    );
    w.advance(w.now + 3 * WINDOW);
    assert_eq!(w.connects, 2, "no reconnect");
}

#[test]
fn a_session_ended_while_detached_refuses_the_resume_with_its_code() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let a = w.submit(ep, json!("a"));
    let run_a = w.run(0);
    w.cut(ep);
    let why = "worker killed by signal 9";
    w.server.on_endpoint_closed(w.now, run_a.0, why).unwrap();
    w.pump();
    w.table
        .on_endpoint_closed(w.now, "s-1", RemoteCode::EndpointClosed, why);
    w.blocked = false;
    w.advance(w.now + 400);
    let j = w.client.job(a).unwrap();
    let (reason, evidence) = lost(j);
    assert_eq!(evidence, LostEvidence::RemoteLost);
    assert!(
        reason.contains("REMOTE_ENDPOINT_CLOSED") && reason.contains(why),
        "{reason}"
    );
    // The host's own outcome of the run is additional evidence.
    assert!(j.journal().iter().any(|e| matches!(
        &e.kind,
        EventKind::LateEvidence { reply: crate::jobs::wire::Reply::Error { code: Some(c), .. } } if c == "REMOTE_LOST"
    )));
    assert_eq!(w.client.remote_info(ep).unwrap().state, "closed");
    assert_eq!(w.client.poll_timeout(), None);
}

#[test]
fn ended_frames_are_parsed_with_the_usual_checks() {
    let mut f = frames::ended(RemoteCode::OpenFailed, &"x".repeat(5_000));
    assert_eq!(
        f["reason"].as_str().unwrap().len(),
        frames::ENDED_REASON_CHARS
    );
    f["seq"] = json!(3);
    f["ack"] = json!(1);
    match frames::parse_server::<Value>(&f, 1 << 20).unwrap() {
        frames::ServerFrame::Ended {
            seq: 3,
            ack: 1,
            code,
            reason,
        } => assert_eq!((code.as_str(), reason.len()), ("REMOTE_OPEN_FAILED", 1_000)),
        other => panic!("{other:?}"),
    }
    let r = frames::parse_server::<Value>(&f, 100).unwrap_err();
    assert_eq!(r.code, RemoteCode::FrameTooLarge);
    let mut bad = f.clone();
    bad.as_object_mut().unwrap().remove("code");
    let r = frames::parse_server::<Value>(&bad, 1 << 20).unwrap_err();
    assert_eq!(
        r.seq,
        Some(3),
        "a refused ended frame still uses its number"
    );
    assert!(
        matches!(*r.violation, crate::jobs::wire::Violation::MissingField { ref field, .. } if field == "code")
    );
    bad["code"] = json!(7);
    assert!(frames::parse_server::<Value>(&bad, 1 << 20).is_err());
    assert!(RemoteCode::OpenFailed.ends_session() && !RemoteCode::SessionExpired.ends_session());
}

#[test]
fn a_tombstone_answers_only_to_its_session_secret() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let _job = w.submit(ep, json!(1));
    let run = w.run(0);
    w.reply(run, json!({"type": "done", "value": "private"}));
    w.cut(ep);
    w.stall = true;
    w.advance_with(w.now + WINDOW + GRACE + 10, false);
    assert_eq!(w.table.tombstones().count(), 1);
    // A valid token with a wrong secret learns nothing: the session is unknown to it.
    let wrong = w.table.on_connect(w.now);
    w.table.on_frame(
        w.now,
        wrong,
        &frames::resume("tok", "s-1", "guess", 0),
        &auth,
    );
    w.pump();
    let frames_of = |w: &World, conn: ConnId| -> Vec<Value> {
        w.raw
            .iter()
            .filter(|(c, _)| *c == conn)
            .map(|(_, f)| f.clone())
            .collect()
    };
    let got = frames_of(&w, wrong);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["t"], "refused");
    assert_eq!(got[0]["code"], "REMOTE_SESSION_UNKNOWN");
    assert_eq!(got[0].get("jobs"), None);
    let text = got[0].to_string();
    assert!(
        !text.contains("private") && !text.contains("expired"),
        "{text}"
    );
    assert_eq!(
        got[0]["message"],
        frames::refused(
            RemoteCode::SessionUnknown,
            "this host knows no session s-1",
            None
        )["message"]
    );
    // The right secret gets the tombstone and the runs' outcomes.
    let right = w.table.on_connect(w.now);
    w.table.on_frame(
        w.now,
        right,
        &frames::resume("tok", "s-1", &secret_of(1), 0),
        &auth,
    );
    w.pump();
    let got = frames_of(&w, right);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["code"], "REMOTE_SESSION_EXPIRED");
    assert_eq!(got[0]["jobs"]["1"]["outcome"]["value"], json!("private"));
    assert_eq!(
        w.table.tombstones().count(),
        1,
        "a wrong secret removes nothing"
    );
}

/// The frames the table sent to a raw test connection.
fn raw_frames(w: &World, conn: ConnId) -> Vec<Value> {
    w.raw
        .iter()
        .filter(|(c, _)| *c == conn)
        .map(|(_, f)| f.clone())
        .collect()
}

#[test]
fn an_oversized_outcome_settles_failed_and_oversized_progress_is_missed() {
    let mut config = World::config();
    config.limits.max_frame_bytes = 2_000;
    let mut w = World::new(config);
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    let run = w.run(0);
    let big = "x".repeat(3_000);
    w.reply(run, json!({"type": "progress", "value": big}));
    w.reply(run, json!({"type": "progress", "value": 1}));
    w.reply(run, json!({"type": "done", "value": big}));
    let j = w.client.job(job).unwrap();
    assert_eq!(progress_values(j), vec![json!(1)]);
    let missed: Vec<_> = j
        .journal()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RemoteMissed { progress, partial } => Some((*progress, *partial)),
            _ => None,
        })
        .collect();
    assert_eq!(missed, vec![(1, 0)]);
    match j.outcome() {
        Some(Outcome::Failed {
            code,
            started: true,
            ..
        }) => assert_eq!(code.as_deref(), Some("REMOTE_FRAME_TOO_LARGE")),
        o => panic!("expected failed, got {o:?}"),
    }
    let (_, bytes) = w.table.buffered("s-1").unwrap();
    assert!(
        bytes < 2_000,
        "no oversized frame is held for replay ({bytes} bytes)"
    );
}

#[test]
fn a_server_frame_refused_as_too_large_still_uses_its_seq() {
    let f = json!({"t": "msg", "seq": 5, "ack": 0, "body": {"id": 1, "type": "done",
                   "value": "x".repeat(500)}});
    let r = frames::parse_server(&f, 100).unwrap_err();
    assert_eq!(r.code, RemoteCode::FrameTooLarge);
    assert_eq!(r.seq, Some(5));
}

#[test]
fn a_client_that_never_acks_is_refused_buffer_full_and_dropped_but_keeps_its_session() {
    let mut config = World::config();
    config.max_runs = 4;
    let cap = 4 * 4 + 64;
    let mut w = World::new(config);
    let conn = w.table.on_connect(w.now);
    let hello = frames::hello(
        "tok",
        &RemoteTarget::Script("diffusion".into()),
        WINDOW,
        HB,
        "",
    );
    w.table.on_frame(w.now, conn, &hello, &auth);
    w.pump();
    for seq in 1..=200u64 {
        let f = json!({"t": "msg", "seq": seq, "ack": 0,
                       "body": {"type": "input", "id": 99, "inputId": "i", "value": 1}});
        w.table.on_frame(w.now, conn, &f, &auth);
        w.pump();
    }
    let (held, _) = w.table.buffered("s-1").unwrap();
    assert!(held <= cap + 1, "held {held}");
    let full = raw_frames(&w, conn)
        .iter()
        .filter(|f| f["t"] == "error" && f["code"] == "REMOTE_BUFFER_FULL")
        .count();
    assert_eq!(full, 16);
    assert_eq!(w.raw_closed, vec![(conn, close::TRY_LATER)]);
    assert!(w.table.has_session("s-1"), "the session survives");
}

#[test]
fn a_resume_with_a_wrong_secret_or_principal_is_answered_like_an_unknown_session() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    let two = |t: &str| match t {
        "tok" => Some("alice".to_string()),
        "bob" => Some("bob".to_string()),
        _ => None,
    };
    let mut answers = Vec::new();
    for (token, session, secret) in [
        ("bob", "s-1", secret_of(1)),
        ("tok", "s-1", "guess".to_string()),
        ("tok", "s-9", secret_of(9)),
    ] {
        let conn = w.table.on_connect(w.now);
        w.table.on_frame(
            w.now,
            conn,
            &frames::resume(token, session, &secret, 0),
            &two,
        );
        w.pump();
        let got = raw_frames(&w, conn);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(w.raw_closed.contains(&(conn, close::EXPIRED)));
        answers.push(got[0].to_string().replace(session, "S"));
    }
    assert!(answers.iter().all(|a| a == &answers[2]), "{answers:?}");
    assert!(answers[2].contains("REMOTE_SESSION_UNKNOWN"));
    // The client's session is untouched.
    let run = w.run(0);
    w.reply(run, json!({"type": "done", "value": 2}));
    assert!(matches!(
        w.client.job(job).unwrap().outcome(),
        Some(Outcome::Succeeded { .. })
    ));
}

#[test]
fn a_refused_resume_names_the_undelivered_cancel() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    w.now = Mono::from_ms(100);
    w.cut(ep);
    w.client.cancel(w.now, job, "user").unwrap();
    w.table = SessionTable::new(World::config(), [9; 32]);
    w.server = Registry::default();
    w.subs.clear();
    w.blocked = false;
    w.advance(Mono::from_ms(300));
    let (reason, _) = lost(w.client.job(job).unwrap());
    assert!(reason.contains("REMOTE_SESSION_UNKNOWN"), "{reason}");
    assert!(
        reason.contains("the cancel requested at 100 was never delivered"),
        "{reason}"
    );
}

#[test]
fn a_close_the_server_sees_first_is_still_resumable_when_the_client_detects_late() {
    let mut w = World::new(World::config());
    let ep = w.open();
    let job = w.submit(ep, json!(1));
    let run = w.run(0);
    w.reply(run, json!({"type": "progress", "value": 1}));
    let t0 = w.now;
    // Only the server notices: the client hears nothing more and detects the silence.
    let conn = w.socks[&ep].conn.unwrap();
    w.table.on_disconnect(t0, conn, "reset");
    w.advance(t0 + 3 * HB + 50);
    let since = match &w.client.endpoint(ep).unwrap().state {
        EndpointState::Suspended { since } => *since,
        s => panic!("expected suspended, got {s:?}"),
    };
    // The client comes back at the end of its own window, after the server's two heartbeats.
    let back = since + WINDOW - 10;
    assert!(back > t0 + WINDOW + 2 * HB);
    w.advance_with(back, false);
    assert!(w.table.has_session("s-1"), "the server kept the session");
    w.advance(back + 5);
    assert_eq!(w.client.remote_info(ep).unwrap().state, "live");
    w.reply(run, json!({"type": "done", "value": 2}));
    let j = w.client.job(job).unwrap();
    assert_eq!(progress_values(j), vec![json!(1)]);
    assert!(matches!(j.outcome(), Some(Outcome::Succeeded { .. })));
}

#[test]
fn unauthenticated_connections_beyond_max_pending_are_closed_at_once() {
    let mut config = World::config();
    config.max_pending = 2;
    let mut w = World::new(config);
    let a = w.table.on_connect(Mono::from_ms(0));
    let b = w.table.on_connect(Mono::from_ms(0));
    let c = w.table.on_connect(Mono::from_ms(0));
    w.pump();
    assert_eq!(w.raw_closed, vec![(c, close::TRY_LATER)]);
    // An authenticated one frees its place.
    let hello = frames::hello(
        "tok",
        &RemoteTarget::Script("diffusion".into()),
        WINDOW,
        HB,
        "",
    );
    w.table.on_frame(Mono::from_ms(0), a, &hello, &auth);
    let d = w.table.on_connect(Mono::from_ms(0));
    let e = w.table.on_connect(Mono::from_ms(0));
    w.pump();
    assert_eq!(
        w.raw_closed,
        vec![(c, close::TRY_LATER), (e, close::TRY_LATER)]
    );
    assert!(
        ![a, b, d]
            .iter()
            .any(|x| w.raw_closed.iter().any(|(y, _)| y == x))
    );
}

#[test]
fn debug_forms_redact_tokens_and_secrets() {
    let mut w = World::new(World::config());
    let _ep = w.open();
    let spec = RemoteSpec::new("wss://h/x", "tok-SECRET", RemoteTarget::Kind("k".into()));
    let shown = format!("{spec:?} {:?}", w.table);
    assert!(!shown.contains("tok-SECRET"), "{shown}");
    assert!(!shown.contains(&secret_of(1)), "{shown}");
    assert!(shown.contains("<redacted>"));
    let link = format!("{:?}", w.client.links);
    assert!(
        !link.contains("\"tok\"") && !link.contains(&secret_of(1)),
        "{link}"
    );
    assert!(link.contains("s-1"));
}

/// A payload whose JSON data refuses any object with a `"fn"` key: stands in for a host value
/// that is not JSON data (a JS function, cycle or BigInt; the JS rule is `jsonData` in
/// wasm/src/js.rs, tested in tests/js/node/remote-fake.test.mjs).
#[derive(Clone, Debug)]
struct Strict(Value);

impl crate::value::Payload for Strict {
    fn field(&self, key: &str) -> Option<Self> {
        self.0.field(key).map(Strict)
    }
    fn as_f64(&self) -> Option<f64> {
        self.0.as_f64()
    }
    fn as_text(&self) -> Option<String> {
        self.0.as_text()
    }
    fn as_bool(&self) -> Option<bool> {
        self.0.as_bool()
    }
    fn type_name(&self) -> &'static str {
        self.0.type_name()
    }
    fn fits_within(&self, limit: usize) -> bool {
        self.0.fits_within(limit)
    }
    fn elements(&self, max: usize) -> Option<Result<Vec<Self>, usize>> {
        self.0
            .elements(max)
            .map(|r| r.map(|v| v.into_iter().map(Strict).collect()))
    }
    fn same_as(&self, other: &Self) -> bool {
        self.0 == other.0
    }
    fn to_json(&self) -> Value {
        self.0.clone()
    }
    fn json_data(&self, name: &str) -> Result<Self, String> {
        match self.0.get("fn") {
            Some(_) => Err(format!("{name}.fn is a function")),
            None => Ok(self.clone()),
        }
    }
    fn null() -> Self {
        Strict(Value::Null)
    }
}

#[test]
fn a_value_that_is_not_json_data_is_refused_for_a_remote_endpoint_before_anything_is_recorded() {
    let now = Mono::from_ms(0);
    let mut reg: Registry<Strict> = Registry::default();
    let r = RemoteSpec::new(
        "ws://127.0.0.1:9/api/jobs/remote",
        "tok",
        RemoteTarget::Script("ticker".into()),
    );
    let ep = reg
        .open_remote(now, EndpointSpec::new("app", "remote"), r)
        .unwrap();
    reg.on_socket_open(now, ep).unwrap();
    let frame = |v: Value| Strict(v);
    reg.on_socket_frame(
        now,
        ep,
        &frame(json!({"t": "welcome", "session": "s-1", "secret": "sec",
        "windowMs": WINDOW, "heartbeatMs": HB,
        "limits": {"maxFrameBytes": 1 << 20, "replayFrames": 4096, "replayBytes": 4 << 20}})),
    )
    .unwrap();
    reg.on_socket_frame(
        now,
        ep,
        &frame(json!({"t": "msg", "seq": 1, "ack": 0, "body": {
        "type": "hello", "protocol": "weft-worker/1",
        "capabilities": {"input": true, "cancelAck": true, "errorCode": true}}})),
    )
    .unwrap();
    let job = reg
        .submit(now, Submit::new("app", ep, Strict(json!({"ticks": 3}))))
        .unwrap()
        .job;
    assert_eq!(reg.job(job).unwrap().state, JobState::Running);
    reg.drain_outputs().for_each(drop);
    let journal = reg.job(job).unwrap().journal().len();

    let bad = || Strict(json!({"fn": 1}));
    let err = reg.submit(now, Submit::new("app", ep, bad())).unwrap_err();
    assert_eq!(err.code(), "INVALID_JSON");
    assert!(
        err.to_string().contains("payload.fn is a function"),
        "{err}"
    );
    assert_eq!(reg.jobs().count(), 1, "a refused submit left a job");
    let err = reg.send_input(now, job, None, bad()).unwrap_err();
    assert_eq!(err.code(), "INVALID_JSON");
    assert!(err.to_string().contains("input.fn is a function"), "{err}");
    assert_eq!(
        reg.job(job).unwrap().journal().len(),
        journal,
        "a refused input was recorded"
    );
    assert_eq!(reg.drain_outputs().count(), 0, "a refusal sent something");

    // Valid values go on: the input id and the job id were not used by the refusals.
    assert_eq!(
        reg.send_input(now, job, None, Strict(json!({"x": 1})))
            .unwrap(),
        "input-1"
    );
    let next = reg
        .submit(now, Submit::new("app", ep, Strict(json!({"ticks": 1}))))
        .unwrap()
        .job;
    assert_eq!(next.0, job.0 + 1);
}
