//! The remote job endpoint of `weft serve` (`GET /api/jobs/remote`, protocol `weft-remote/1`):
//! a remote runtime opens endpoints that run on this server — child-process workers of
//! `--remote-script NAME=PATH.mjs` (the JSON-lines worker protocol of `weft run`) and the
//! built-in in-process kinds of `--remote-kind` — and drives them over one WebSocket per
//! session.
//!
//! The core decides everything (`weft_core::jobs::remote`: frames, sequencing, the replay
//! buffer, resumption, heartbeats, the window after a disconnect, tombstones); this module only
//! carries: one task per socket parses text frames and feeds the session table, and performs
//! its outputs on a server-side [`JobsHost`] (its own registry); one driver task applies the
//! workers' lines and exits and the timers, and hands the observed journal events of every
//! run back to the table.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use weft_core::frames::{FramesError, Role};
use weft_core::jobs::remote::server::{ConnId, ServerConfig, ServerOutput, SessionTable};
use weft_core::jobs::remote::{RemoteCode, close};
use weft_core::jobs::{
    Delivery, EndpointId, EndpointSpec, EndpointState, EventKind, Hello, JobId, OwnerId, Registry,
    RegistryConfig, RemoteTarget, Submit, SubscriptionId,
};

use super::auth::Auth;
use crate::agent_jobs::JobToolSpec;
use crate::jobs_host::{Inbound, Inbox, JobsHost, LocalCtx, LocalError, LocalFn, sleep_until};

/// The WebSocket route.
pub const ROUTE: &str = "/api/jobs/remote";

/// The flags of the remote job endpoint (flattened into `weft serve`).
#[derive(clap::Args, Debug, Clone)]
pub struct RemoteArgs {
    /// A worker script remote clients may open (repeatable): `NAME=PATH.mjs`, a DOM-style
    /// worker (as `weft run` takes it), run as a child process per remote session.
    #[arg(long = "remote-script", value_name = "NAME=PATH.mjs",
        value_parser = crate::agent_jobs::parse_job_tool)]
    pub remote_script: Vec<JobToolSpec>,
    /// A built-in in-process kind remote clients may open (repeatable): `sleep` (payload
    /// `{ms, progressEvery}`: waits `ms`, reporting progress every `progressEvery` ms) or
    /// `echo` (answers its payload).
    #[arg(long = "remote-kind", value_name = "NAME", value_parser = ["sleep", "echo"])]
    pub remote_kind: Vec<String>,
    /// The longest resumption window a client may ask for, in milliseconds: a session whose
    /// socket dropped keeps its jobs running this long (plus a grace of two heartbeats).
    #[arg(long, default_value_t = 60_000)]
    pub remote_window_ms: u64,
    /// Heartbeat period of remote sessions, in milliseconds (three silent periods mean the
    /// socket is dead).
    #[arg(long, default_value_t = 5_000)]
    pub remote_heartbeat_ms: u64,
    /// Most remote sessions at once (attached or within their window).
    #[arg(long, default_value_t = 32)]
    pub remote_max_sessions: usize,
    /// Bytes of frames each session keeps for replay after a disconnect (progress and partial
    /// frames beyond it are dropped oldest first and reported as missed).
    #[arg(long, default_value_t = 4 << 20)]
    pub remote_buffer_bytes: usize,
    /// A browser origin allowed to open remote sessions (repeatable), e.g.
    /// `http://127.0.0.1:5173`; other routes keep refusing foreign origins.
    #[arg(long = "remote-origin", value_name = "ORIGIN")]
    pub remote_origin: Vec<String>,
    /// Offer the remote endpoint on a non-loopback listen address too (it is mounted on
    /// loopback addresses only otherwise).
    #[arg(long)]
    pub remote_jobs: bool,
}

impl RemoteArgs {
    /// Whether anything is offered (the route is mounted only then).
    pub fn offered(&self) -> bool {
        !self.remote_script.is_empty() || !self.remote_kind.is_empty()
    }
}

/// What a remote session can open.
#[derive(Clone)]
enum Target {
    /// A worker script, one child process per session.
    Script(PathBuf),
    /// An in-process kind.
    Kind(LocalFn),
}

/// The offered targets: scripts and kinds by name.
#[derive(Clone, Default)]
struct Targets {
    scripts: BTreeMap<String, PathBuf>,
    kinds: BTreeMap<String, LocalFn>,
}

impl Targets {
    fn from_args(args: &RemoteArgs) -> Targets {
        Targets {
            scripts: args
                .remote_script
                .iter()
                .map(|s| (s.name.clone(), s.script.clone()))
                .collect(),
            kinds: args
                .remote_kind
                .iter()
                .filter_map(|k| builtin_kind(k).map(|f| (k.clone(), f)))
                .collect(),
        }
    }

    fn script(&self, name: &str) -> Option<Target> {
        self.scripts.get(name).cloned().map(Target::Script)
    }

    fn kind(&self, name: &str) -> Option<Target> {
        self.kinds.get(name).cloned().map(Target::Kind)
    }

    /// Everything offered, as the session table names it.
    fn offered(&self) -> Vec<RemoteTarget> {
        let mut all: Vec<RemoteTarget> = self
            .scripts
            .keys()
            .cloned()
            .map(RemoteTarget::Script)
            .collect();
        all.extend(self.kinds.keys().cloned().map(RemoteTarget::Kind));
        all
    }

    fn describe(&self) -> String {
        let mut parts: Vec<String> = self.scripts.keys().map(|n| format!("script {n}")).collect();
        parts.extend(self.kinds.keys().map(|n| format!("kind {n}")));
        parts.join(", ")
    }
}

/// The built-in in-process kind `name`.
fn builtin_kind(name: &str) -> Option<LocalFn> {
    match name {
        "sleep" => Some(Arc::new(|payload: Value, ctx: LocalCtx| {
            Box::pin(sleep_kind(payload, ctx))
        })),
        "echo" => Some(Arc::new(|payload: Value, _ctx: LocalCtx| {
            Box::pin(async move { Ok(json!({ "echo": payload })) })
        })),
        _ => None,
    }
}

/// Longest sleep of the `sleep` kind (one hour).
const MAX_SLEEP_MS: u64 = 3_600_000;

/// `sleep{ms, progressEvery}`: waits `ms` milliseconds (at most an hour), reporting the fraction
/// elapsed every `progressEvery` ms (none when absent or 0); a cancel stops it at once (that is
/// the acknowledgement).
async fn sleep_kind(payload: Value, mut ctx: LocalCtx) -> Result<Value, LocalError> {
    let field = |k: &str| -> Result<u64, LocalError> {
        match payload.get(k) {
            None | Some(Value::Null) => Ok(0),
            Some(v) => v.as_u64().ok_or_else(|| LocalError::Failed {
                message: format!("`{k}` must be a whole number of milliseconds"),
                code: Some("INVALID_ARGUMENT".into()),
            }),
        }
    };
    let ms = field("ms")?;
    let every = field("progressEvery")?;
    if ms > MAX_SLEEP_MS {
        return Err(LocalError::Failed {
            message: format!("`ms` must be at most {MAX_SLEEP_MS}"),
            code: Some("INVALID_ARGUMENT".into()),
        });
    }
    let start = tokio::time::Instant::now();
    let end = start + Duration::from_millis(ms);
    let mut reports = 0u64;
    loop {
        let next = if every == 0 {
            end
        } else {
            (start + Duration::from_millis(every * (reports + 1))).min(end)
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = ctx.cancelled() => return Err(LocalError::Cancelled),
        }
        if next >= end {
            return Ok(json!({ "slept": ms }));
        }
        reports += 1;
        ctx.progress(json!((every * reports) as f64 / ms as f64));
    }
}

/// Most journal events one run's observer may hold before it is told what it missed.
const OBSERVER_QUEUE: usize = 256;

/// Inbound lines the driver applies before it hands the runs' events to the table (well
/// below [`OBSERVER_QUEUE`]).
const FORWARD_EVERY: usize = 64;

/// How long a session's worker has to say hello before the base protocol is assumed.
const HELLO_WITHIN_MS: u64 = 5_000;

/// The remote endpoint: the session table, the server-side job host and the sockets.
#[derive(Clone)]
pub struct Remote {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<RemoteState>,
    /// Wakes the driver (a new deadline, a stop).
    wake: Notify,
    auth: Arc<Auth>,
    /// tungstenite's hard cap on one message (beyond it: close 1009).
    hard_cap: usize,
    /// Set once `stop` ran: new sockets are closed 1001 at once.
    stopped: AtomicBool,
    /// The driver task (ended by `stop`).
    driver: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Frames one socket's writer may have queued beyond a full replay; a client that reads slower
/// than that is disconnected (its session detaches, and a resume replays from the core's
/// bounded buffer).
const SOCKET_QUEUE: usize = 1024;

/// How long a socket the table closed may take to write its close frame.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);

/// The writing half of one socket task.
#[derive(Clone)]
struct SocketTx {
    tx: mpsc::Sender<Message>,
    /// Ends the socket task at once (even in the middle of a write to a stalled peer).
    kill: Arc<Notify>,
}

impl SocketTx {
    /// Queues `m`; a full queue ends the socket (false).
    fn send(&self, m: Message) -> bool {
        let ok = self.tx.try_send(m).is_ok();
        if !ok {
            self.kill.notify_one();
        }
        ok
    }
}

struct RemoteState {
    table: SessionTable<Value>,
    host: JobsHost,
    targets: Targets,
    node: String,
    sockets: HashMap<ConnId, SocketTx>,
    /// The endpoint of every live session (the table ends a session whose endpoint could not
    /// be opened at once, so each one here has its endpoint).
    sessions: HashMap<String, EndpointId>,
    /// Every observed run: its observer and job.
    runs: HashMap<SubscriptionId, JobId>,
    /// Sessions whose worker process is to be started, or being started, outside the lock
    /// (see [`Remote::open_pending`]).
    opening: HashMap<String, Opening>,
}

/// A session's worker process not started yet: the table learns its endpoint once it is.
struct Opening {
    script: PathBuf,
    /// Taken when the start begins.
    spec: Option<EndpointSpec>,
    /// What the session is opening (for an error).
    what: String,
    /// The table's outputs for the session meanwhile (its submits), carried once it is open.
    queued: Vec<ServerOutput<Value>>,
    /// The table ended the session meanwhile: the process is killed once started.
    ended: bool,
}

impl Remote {
    /// The remote endpoint for `args`, running worker scripts with the Node binary `node`.
    pub fn new(args: &RemoteArgs, auth: Arc<Auth>, node: &str) -> Remote {
        let mut host = JobsHost::new();
        host.keep_observed = true;
        host.registry = Registry::new(RegistryConfig {
            first_job_id: super::now_ms().max(1),
        });
        host.registry.set_journal_window(Some(OBSERVER_QUEUE));
        let targets = Targets::from_args(args);
        let mut config = ServerConfig {
            max_window_ms: args.remote_window_ms.max(1),
            heartbeat_ms: args.remote_heartbeat_ms.max(1),
            max_sessions: args.remote_max_sessions.max(1),
            targets: targets.offered(),
            ..ServerConfig::default()
        };
        config.limits.replay_bytes = args.remote_buffer_bytes.max(1);
        let hard_cap = 2 * config.limits.max_frame_bytes;
        let table = SessionTable::new(config, super::random_bytes::<32>());
        let inbox = host.take_inbox();
        let remote = Remote {
            inner: Arc::new(Inner {
                state: Mutex::new(RemoteState {
                    table,
                    host,
                    targets,
                    node: node.to_owned(),
                    sockets: HashMap::new(),
                    sessions: HashMap::new(),
                    runs: HashMap::new(),
                    opening: HashMap::new(),
                }),
                wake: Notify::new(),
                auth,
                hard_cap,
                stopped: AtomicBool::new(false),
                driver: Mutex::new(None),
            }),
        };
        let driver = tokio::spawn(remote.clone().drive(inbox));
        *remote
            .inner
            .driver
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(driver);
        remote
    }

    /// The endpoint `weft serve` mounts: `None` when nothing is offered, or when the server
    /// listens on a non-loopback address without `--remote-jobs`.
    pub fn mount(
        args: &RemoteArgs,
        addr: SocketAddr,
        auth: Arc<Auth>,
        node: &str,
    ) -> Option<Remote> {
        (args.offered() && (addr.ip().is_loopback() || args.remote_jobs))
            .then(|| Remote::new(args, auth, node))
    }

    fn lock(&self) -> MutexGuard<'_, RemoteState> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the worker processes the table asked for (`Open`), each outside the lock, then
    /// opens its endpoint and tells the table (`on_endpoint_opened`, or `on_endpoint_closed`
    /// with `OpenFailed`) before carrying the session's outputs queued meanwhile. Called after
    /// every locked section that performed the table's outputs.
    fn open_pending(&self) {
        loop {
            let (session, script, spec, node) = {
                let mut s = self.lock();
                let Some((session, o)) = s.opening.iter_mut().find(|(_, o)| o.spec.is_some())
                else {
                    return;
                };
                let spec = o.spec.take().expect("checked");
                (session.clone(), o.script.clone(), spec, s.node.clone())
            };
            let started = JobsHost::spawn_worker(&node, &script);
            let mut s = self.lock();
            let Some(o) = s.opening.remove(&session) else {
                continue;
            };
            if o.ended {
                // The session ended while its worker started: nothing runs there.
                if let Ok(child) = started {
                    crate::jobs_host::kill_group(child.id());
                    // `kill_on_drop`: the leader is killed and reaped.
                    drop(child);
                }
                continue;
            }
            match started {
                Ok(child) => {
                    let ep = s.host.attach_child(child, spec);
                    s.table.on_endpoint_opened(&session, ep);
                    s.sessions.insert(session, ep);
                    for out in o.queued {
                        s.carry(out);
                    }
                    s.check_ready();
                }
                Err(e) => {
                    let why = format!("could not start `{node}` for {}: {e}", o.what);
                    let now = s.host.now();
                    s.table
                        .on_endpoint_closed(now, &session, RemoteCode::OpenFailed, &why);
                }
            }
            s.perform();
            drop(s);
            self.inner.wake.notify_one();
        }
    }

    /// What is offered, for the start-up banner.
    pub fn describe(&self) -> String {
        self.lock().targets.describe()
    }

    /// The routes: `GET /api/jobs/remote` (the WebSocket) and `GET /api/jobs/remote/sessions`
    /// (the human token: live sessions and the tombstones of expired ones).
    pub fn routes(&self) -> Router {
        Router::new()
            .route("/api/jobs/remote", get(upgrade))
            .route("/api/jobs/remote/sessions", get(sessions))
            .with_state(self.clone())
    }

    /// Ends every session: their jobs are terminated (the server journal says `reason`), the
    /// sockets are closed 1001; returns once the close frames are written and the workers
    /// reaped (or after a few seconds).
    pub async fn stop(&self, reason: &str) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        let writers: Vec<_> = {
            let mut s = self.lock();
            let writers = s.sockets.values().cloned().collect();
            let now = s.host.now();
            s.table.stop(now, reason);
            s.perform();
            s.sockets.clear();
            writers
        };
        // The socket tasks end once their close frames are out: their writers close then.
        let all = async {
            for w in writers {
                w.tx.closed().await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), all).await;
        self.inner.wake.notify_one();
        // The terminated workers' process groups are killed by their watchers; wait until the
        // driver has seen every one reaped, so that none outlives the server.
        let reaped = async {
            while self.lock().host.open_children() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(2), reaped)
            .await
            .is_err()
        {
            // Their groups are killed now: no worker outlives the server.
            let n = self.lock().host.kill_children();
            eprintln!("weft serve: {n} remote workers were not reaped within 2 s: killed");
            let reaped = async {
                while self.lock().host.open_children() > 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(1), reaped).await;
        }
        // The driver ends with the server.
        let driver = self
            .inner
            .driver
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(d) = driver {
            d.abort();
            let _ = d.await;
        }
    }

    /// The driver: applies what the workers wrote and their exits, and the registry's and the
    /// table's timers; hands every run's journal events to the table.
    async fn drive(self, mut inbox: Inbox) {
        loop {
            let (deadline, now) = {
                let s = self.lock();
                let d = match (s.host.registry.poll_timeout(), s.table.poll_timeout()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                (d, s.host.now())
            };
            let ev = tokio::select! {
                ev = inbox.recv() => match ev {
                    Some(ev) => Some(ev),
                    None => return,
                },
                _ = sleep_until(deadline, now) => None,
                _ = self.inner.wake.notified() => continue,
            };
            let mut s = self.lock();
            s.apply(ev.as_ref());
            // The runs' events go to the table after every small batch of lines, so that a
            // run's observer queue (OBSERVER_QUEUE events) does not overflow while a flood of
            // lines is applied.
            let mut batch = 1;
            while let Some(more) = inbox.try_recv() {
                s.apply(Some(&more));
                batch += 1;
                if batch == FORWARD_EVERY {
                    s.perform();
                    batch = 0;
                }
            }
            let now = s.host.now();
            s.table.handle_timeout(now);
            s.perform();
            drop(s);
            self.open_pending();
        }
    }
}

impl RemoteState {
    /// Applies one transport event (or the timers) to the server's registry.
    fn apply(&mut self, ev: Option<&Inbound>) {
        self.host.apply(ev);
        if let Some(Inbound::Closed(ep, _)) = ev {
            // A closed worker's stderr tail was used for its closing reason: drop it (a
            // long-running server opens one worker per session).
            self.host.stderr_tail.remove(ep);
        }
    }

    /// Performs what the table and the registry asked for until neither has anything left.
    fn perform(&mut self) {
        loop {
            let mut any = false;
            while let Some(out) = self.table.poll_output() {
                any = true;
                self.carry(out);
            }
            self.host.pump();
            self.check_ready();
            any |= self.check_closed();
            for sub in self.host.take_observed() {
                any = true;
                self.forward(sub);
            }
            if !any {
                return;
            }
        }
    }

    /// Tells the table about endpoints whose worker said hello (or whose hello timed out).
    fn check_ready(&mut self) {
        let now = self.host.now();
        for (session, ep) in self.table.awaiting_ready() {
            let Some(ep) = self.host.registry.endpoint(ep) else {
                continue;
            };
            // A worker that dies before its hello is told by `check_closed`.
            if ep.state == EndpointState::Ready {
                self.table.on_endpoint_ready(now, &session, ep.capabilities);
            }
        }
    }

    /// Tells the table about sessions whose endpoint closed on its own (the worker exited or
    /// died, before or after its hello): the table decides what the client sees. The runs'
    /// own journal events go first, so that their terminal frames precede the session's end.
    /// Whether anything was told.
    fn check_closed(&mut self) -> bool {
        let closed: Vec<(String, String)> = self
            .sessions
            .iter()
            .filter_map(
                |(s, ep)| match self.host.registry.endpoint(*ep).map(|e| &e.state) {
                    Some(EndpointState::Closed { reason }) => Some((s.clone(), reason.clone())),
                    None => Some((s.clone(), "the endpoint is gone".to_owned())),
                    Some(_) => None,
                },
            )
            .collect();
        if closed.is_empty() {
            return false;
        }
        for sub in self.host.take_observed() {
            self.forward(sub);
        }
        let now = self.host.now();
        for (session, reason) in closed {
            self.sessions.remove(&session);
            self.table
                .on_endpoint_closed(now, &session, RemoteCode::EndpointClosed, &reason);
        }
        true
    }

    fn carry(&mut self, out: ServerOutput<Value>) {
        let now = self.host.now();
        // A session whose worker is starting: its submits wait for its endpoint; its end
        // kills the worker once started.
        match &out {
            ServerOutput::Submit { session, .. } => {
                if let Some(o) = self.opening.get_mut(session) {
                    o.queued.push(out);
                    return;
                }
            }
            ServerOutput::Terminate { session, .. } => {
                if let Some(o) = self.opening.get_mut(session) {
                    if o.spec.is_some() {
                        // Not started yet: it never will be.
                        self.opening.remove(session);
                    } else {
                        o.ended = true;
                        o.queued.clear();
                    }
                }
            }
            _ => {}
        }
        match out {
            ServerOutput::Send { conn, frame } => {
                if let Some(w) = self.sockets.get(&conn)
                    && !w.send(Message::Text(frame.to_string().into()))
                {
                    // The client does not keep up: its socket ends (the task reports it).
                    self.sockets.remove(&conn);
                }
            }
            ServerOutput::Close { conn, code, reason } => {
                if let Some(w) = self.sockets.remove(&conn) {
                    w.send(Message::Close(Some(CloseFrame {
                        code,
                        reason: reason.into(),
                    })));
                    tokio::spawn(async move {
                        tokio::time::sleep(CLOSE_WITHIN).await;
                        w.kill.notify_one();
                    });
                }
            }
            ServerOutput::Open {
                session,
                target,
                owner,
                label,
            } => self.open(session, &target, &owner, label),
            ServerOutput::Submit {
                session,
                wire,
                owner,
                payload,
                origin,
            } => {
                // The table withdraws the requests of a session it ended.
                let Some(&endpoint) = self.sessions.get(&session) else {
                    return;
                };
                let mut req = Submit::new("", endpoint, payload);
                req.owner = owner;
                req.origin = origin;
                // Nobody reads a remote session's mailbox: its runs' outcomes travel as frames.
                req.note = false;
                match self.host.registry.submit(now, req) {
                    Ok(sub) => {
                        let obs = self
                            .host
                            .registry
                            .observe(sub.job, Some(1), OBSERVER_QUEUE)
                            .expect("the job was just submitted");
                        self.runs.insert(obs, sub.job);
                        self.table.on_submitted(now, &session, wire, sub.job);
                    }
                    Err(e) => self.table.on_submit_failed(now, &session, wire, &e),
                }
            }
            ServerOutput::Cancel { job, reason, .. } => {
                let _ = self.host.registry.cancel(now, job, &reason);
            }
            ServerOutput::Input {
                job,
                input_id,
                value,
                ..
            } => {
                // A refusal is recorded in the job's journal (`input_rejected`), which the
                // table forwards.
                let _ = self
                    .host
                    .registry
                    .send_input(now, job, Some(input_id), value);
            }
            ServerOutput::Terminate {
                session,
                endpoint,
                owner,
                reason,
            } => {
                eprintln!("weft serve: {}", sanitize(&reason, MAX_LOGGED));
                self.sessions.remove(&session);
                if let Some(ep) = endpoint {
                    let _ = self.host.registry.terminate_endpoint(now, ep, &reason);
                    self.host.pump();
                }
                // The runs' outcomes reach the table (and its tombstone) before the owner's
                // records go.
                for sub in self.host.take_observed() {
                    self.forward(sub);
                }
                let _ = self.host.registry.close_owner(now, &owner);
                self.host.pump();
                let gone: Vec<SubscriptionId> = self
                    .runs
                    .iter()
                    .filter(|(_, job)| self.host.registry.job(**job).is_none())
                    .map(|(sub, _)| *sub)
                    .collect();
                for sub in gone {
                    self.runs.remove(&sub);
                    self.host.registry.unsubscribe(sub);
                }
            }
        }
    }

    fn open(&mut self, session: String, target: &RemoteTarget, owner: &OwnerId, label: String) {
        let found = match target {
            RemoteTarget::Script(n) => self.targets.script(n),
            RemoteTarget::Kind(n) => self.targets.kind(n),
        };
        let opened = match found {
            Some(Target::Script(path)) => {
                // Started outside the lock (`Remote::open_pending`): spawning a process here
                // would stall every socket and the driver.
                let mut spec = EndpointSpec::new(owner.0.clone(), label);
                spec.hello = Hello::Await {
                    timeout_ms: HELLO_WITHIN_MS,
                };
                self.opening.insert(
                    session,
                    Opening {
                        script: path,
                        spec: Some(spec),
                        what: target.label(),
                        queued: Vec::new(),
                        ended: false,
                    },
                );
                return;
            }
            Some(Target::Kind(f)) => Ok(self.host.open_local(&owner.0, &label, f)),
            None => Err(format!("{} is not offered", target.label())),
        };
        match opened {
            Ok(ep) => {
                self.table.on_endpoint_opened(&session, ep);
                self.sessions.insert(session, ep);
                self.check_ready();
            }
            Err(why) => {
                // The table decides what the client sees (`ended`), then asks for the
                // owner's close (`Terminate` without an endpoint).
                let now = self.host.now();
                self.table
                    .on_endpoint_closed(now, &session, RemoteCode::OpenFailed, &why);
            }
        }
    }

    /// Hands a run's observed journal events (and what its observer missed) to the table.
    fn forward(&mut self, sub: SubscriptionId) {
        let Some(&job) = self.runs.get(&sub) else {
            return;
        };
        let Ok(deliveries) = self.host.registry.take_deliveries(sub) else {
            return;
        };
        let now = self.host.now();
        let mut finished = false;
        let mut missed = false;
        for d in deliveries {
            match d {
                Delivery::Event(ev) => {
                    finished |= matches!(ev.kind, EventKind::Finished { .. });
                    self.table.on_job_event(now, &ev);
                }
                Delivery::Missed { from, to, .. } => {
                    self.table.on_missed(now, job, to + 1 - from);
                    missed = true;
                }
            }
        }
        if missed && !finished {
            // The run's final event may be among the missed ones: the registry's journal keeps
            // its milestones, so its outcome is handed to the table from there.
            let terminal = self.host.registry.job(job).and_then(|j| {
                j.journal()
                    .iter()
                    .rev()
                    .find(|ev| matches!(ev.kind, EventKind::Finished { .. }))
                    .cloned()
            });
            if let Some(ev) = terminal {
                finished = true;
                self.table.on_job_event(now, &ev);
            }
        }
        if finished {
            // Its outcome is the table's now (and the client's): the registry forgets it.
            self.runs.remove(&sub);
            self.host.registry.unsubscribe(sub);
            self.host.registry.forget(job);
        }
    }
}

/// The start-up banner's line for the remote endpoint (`None` when nothing is offered).
pub fn banner(remote: Option<&Remote>, args: &RemoteArgs, addr: SocketAddr) -> Option<String> {
    match remote {
        Some(r) => Some(format!(
            "ws://{addr}{ROUTE} ({}; window up to {} ms, heartbeat {} ms)",
            r.describe(),
            args.remote_window_ms,
            args.remote_heartbeat_ms
        )),
        None if args.offered() => Some(format!(
            "off (it is offered on loopback addresses only without --remote-jobs; listening \
             on {addr})"
        )),
        None => None,
    }
}

/// `GET /api/jobs/remote`: the WebSocket upgrade. A native client may authenticate at the
/// upgrade with `Authorization: Bearer` (a wrong token is `401`, no upgrade); browsers cannot
/// set the header, so the token always travels in the hello or resume frame too.
async fn upgrade(
    State(remote): State<Remote>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    if headers.contains_key(header::AUTHORIZATION)
        && let Err(e) = remote.inner.auth.principal(&headers)
    {
        return super::problem(&e);
    }
    let cap = remote.inner.hard_cap;
    ws.max_message_size(cap)
        .max_frame_size(cap)
        .on_upgrade(move |socket| serve_socket(remote, socket))
}

/// One socket: its frames go to the table; the table's frames for it come back through a
/// channel (written here, in order).
async fn serve_socket(remote: Remote, mut ws: WebSocket) {
    if remote.inner.stopped.load(Ordering::SeqCst) {
        let _ = ws
            .send(Message::Close(Some(CloseFrame {
                code: 1001,
                reason: "server stopping".into(),
            })))
            .await;
        return;
    }
    // Room for a resume's whole replay (the session buffer holds at most `replay_frames`
    // droppable frames plus its capped milestones, fewer than `replay_frames` by default) and
    // then `SOCKET_QUEUE`: a replay alone never overflows the queue, which would disconnect the
    // client again on every resume until its window passed.
    let capacity = 2 * remote.lock().table.config().limits.replay_frames + SOCKET_QUEUE;
    let (tx, mut rx) = mpsc::channel::<Message>(capacity);
    let kill = Arc::new(Notify::new());
    let conn = {
        let mut s = remote.lock();
        let now = s.host.now();
        let conn = s.table.on_connect(now);
        s.sockets.insert(
            conn,
            SocketTx {
                tx,
                kill: kill.clone(),
            },
        );
        s.perform();
        conn
    };
    remote.open_pending();
    remote.inner.wake.notify_one();
    let reason = loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(m) => {
                    let close = matches!(m, Message::Close(_));
                    let sent = tokio::select! {
                        r = ws.send(m) => r.is_ok(),
                        _ = kill.notified() => false,
                    };
                    if !sent {
                        break "the socket failed or stalled while writing".to_owned();
                    }
                    if close {
                        // The table closed it; wait briefly for the peer's close.
                        let _ = tokio::time::timeout(Duration::from_millis(500), async {
                            while let Some(Ok(m)) = ws.recv().await {
                                if matches!(m, Message::Close(_)) { break; }
                            }
                        }).await;
                        break "closed by the server".to_owned();
                    }
                }
                // The table dropped the socket's writer (stop): nothing more to write.
                None => break "closed by the server".to_owned(),
            },
            _ = kill.notified() => break "the client did not keep up".to_owned(),
            m = ws.recv() => match feed(&remote, conn, m) {
                Fed::More => {}
                Fed::End(why) => break why,
                Fed::TooBig => {
                    let _ = ws
                        .send(Message::Close(Some(CloseFrame {
                            code: close::TOO_BIG,
                            reason: "message over the size cap".into(),
                        })))
                        .await;
                    break "a message over the size cap".to_owned();
                }
            },
        }
    };
    let mut s = remote.lock();
    s.sockets.remove(&conn);
    let now = s.host.now();
    s.table.on_disconnect(now, conn, &reason);
    s.perform();
    drop(s);
    remote.open_pending();
    remote.inner.wake.notify_one();
}

/// What [`feed`] made of a socket message.
enum Fed {
    /// Go on reading.
    More,
    /// The socket ended (why).
    End(String),
    /// A message over the hard cap: close 1009.
    TooBig,
}

/// Feeds one message of `conn` to the table and performs what follows.
fn feed(remote: &Remote, conn: ConnId, m: Option<Result<Message, axum::Error>>) -> Fed {
    let mut s = remote.lock();
    let now = s.host.now();
    let fed = match m {
        Some(Ok(Message::Text(t))) => {
            match serde_json::from_str::<Value>(t.as_str()) {
                Ok(v) => {
                    let auth = remote.inner.auth.clone();
                    let principal_of = move |tok: &str| auth.principal_of_token(tok).map(|p| p.id);
                    s.table.on_frame(now, conn, &v, &principal_of);
                }
                Err(e) => s.table.on_undecodable(now, conn, &format!("not JSON: {e}")),
            }
            Fed::More
        }
        Some(Ok(Message::Binary(b))) => {
            let detail = format!("a binary frame of {} bytes (frames are JSON text)", b.len());
            s.table.on_undecodable(now, conn, &detail);
            Fed::More
        }
        Some(Ok(Message::Close(c))) => Fed::End(c.map_or_else(
            || "closed by the client".to_owned(),
            |c| {
                format!(
                    "closed by the client ({} {})",
                    c.code,
                    sanitize(c.reason.as_str(), MAX_LOGGED)
                )
            },
        )),
        Some(Ok(Message::Ping(_) | Message::Pong(_))) => Fed::More,
        Some(Err(e)) if too_big(&e) => Fed::TooBig,
        Some(Err(_)) => Fed::End("the socket failed".to_owned()),
        None => Fed::End("the socket closed".to_owned()),
    };
    s.perform();
    drop(s);
    remote.open_pending();
    remote.inner.wake.notify_one();
    fed
}

/// `GET /api/jobs/remote/sessions` (the human token): the live sessions and the tombstones.
async fn sessions(State(remote): State<Remote>, headers: HeaderMap) -> Response {
    match remote.inner.auth.principal(&headers) {
        Ok(p) if p.role == Role::Human => {}
        Ok(_) => {
            return super::problem(&FramesError::Forbidden(
                "the remote sessions are listed for the human token only".into(),
            ));
        }
        Err(e) => return super::problem(&e),
    }
    let s = remote.lock();
    super::json_response(s.table.to_json().to_string().into_bytes())
}

/// Whether a socket error is a message over tungstenite's size cap.
fn too_big(e: &axum::Error) -> bool {
    use tokio_tungstenite::tungstenite::Error as WsError;
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<WsError>())
        .is_some_and(|e| matches!(e, WsError::Capacity(_)))
}

/// Longest client-supplied text (in characters) the remote endpoint logs.
const MAX_LOGGED: usize = 200;

/// `s` as it may be logged: control characters replaced by spaces, at most `max` characters
/// (a longer text ends with `…`).
fn sanitize(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn logged_client_text_has_no_control_characters_and_is_capped() {
        assert_eq!(sanitize("bye\n\x1b[31mred\r", 200), "bye  [31mred ");
        let long = "x".repeat(500);
        let s = sanitize(&long, 200);
        assert_eq!(s.chars().count(), 201);
        assert!(s.ends_with('…'));
        assert_eq!(sanitize("short", 200), "short");
    }
}
