//! The native job host: drives `weft_core::jobs::Registry` with real transports and a real
//! clock. Transports are child processes speaking JSON lines on stdio (any DOM-style worker
//! script, started with `node` through the weft worker shim) and in-process Tokio tasks.
//!
//! The host only carries: it feeds lines, exits and timer ticks into the registry and performs
//! the registry's outputs (write a line, kill a process, wake a waiter).
//!
//! Child processes are bounded and reaped with their group: each worker runs in its own process
//! group, which is killed when the endpoint is terminated, when the worker exits (its leftover
//! descendants go with it) and when the host is dropped. A worker's exit is seen from its
//! process status, not from the end of its stdout (a descendant may hold that open). Lines are
//! cut as bytes arrive (a line over the limit is refused without being buffered whole), and a
//! bounded channel carries them to the host, so a worker that writes faster than the host
//! applies is slowed down by its pipe instead of filling memory.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};
use weft_core::Mono;
use weft_core::codes::HostError;
use weft_core::jobs::wire::{Capabilities, WireRequest};
use weft_core::jobs::{
    EndpointId, EndpointSpec, Hello, JobId, Output, Registry, RemoteSpec, SubscriptionId, WaitEnd,
    WaitId,
};

/// The worker shim: runs DOM-style worker scripts with JSON lines on stdio.
pub const WORKER_SHIM: &str = include_str!("../../wasm/js/worker-shim.mjs");

/// Longest stdout line accepted from a child; longer lines are refused as oversized (the
/// excess is discarded as it arrives, never buffered).
const MAX_LINE: usize = 64 << 20;

/// Longest stderr line kept from a child; the rest of a longer line is discarded.
const MAX_STDERR_LINE: usize = 16 << 10;

/// How many transport events of child processes may wait for the host (backpressure: a
/// worker that writes faster than the host applies blocks on its pipe).
const CHILD_QUEUE: usize = 64;

/// After a worker process exited, how long its stdout/stderr may stay silent before the host
/// stops reading them (only a descendant that left the worker's process group can hold them
/// open; what the worker wrote before exiting is already in the pipe).
const IDLE_AFTER_EXIT: Duration = Duration::from_millis(200);

/// What arrives from transports.
#[derive(Debug)]
pub enum Inbound {
    /// One message (a parsed JSON value) from an endpoint.
    Message(EndpointId, Value),
    /// A line that is not JSON.
    Undecodable(EndpointId, String),
    /// A line the child wrote on stderr.
    Stderr(EndpointId, String),
    /// The transport ended.
    Closed(EndpointId, String),
    /// A remote endpoint's socket (of this generation) opened.
    SocketOpen(EndpointId, u64),
    /// One text frame of a remote endpoint's socket, decoded.
    SocketFrame(EndpointId, u64, Value),
    /// A frame of a remote endpoint's socket that is not JSON text.
    SocketUndecodable(EndpointId, u64, String),
    /// A remote endpoint's socket closed, or its connect failed.
    SocketClosed(EndpointId, u64, String),
}

/// An in-process job body: `payload` and a context to report progress and observe cancels.
pub type LocalFn = Arc<
    dyn Fn(Value, LocalCtx) -> Pin<Box<dyn Future<Output = Result<Value, LocalError>> + Send>>
        + Send
        + Sync,
>;

/// Why an in-process job did not produce a value.
#[derive(Debug, Clone)]
pub enum LocalError {
    /// It stopped because it was cancelled (this is the acknowledgement).
    Cancelled,
    /// It failed.
    Failed {
        message: String,
        code: Option<String>,
    },
}

/// What an in-process job sees: progress/partial reporting and its cancel signal.
#[derive(Clone)]
pub struct LocalCtx {
    id: u64,
    endpoint: EndpointId,
    tx: mpsc::UnboundedSender<Inbound>,
    cancel: watch::Receiver<bool>,
}

impl LocalCtx {
    /// Reports progress (a fraction, or any value).
    pub fn progress(&self, value: Value) {
        let _ = self.tx.send(Inbound::Message(
            self.endpoint,
            serde_json::json!({"id": self.id, "type": "progress", "value": value}),
        ));
    }

    /// Reports a partial output.
    pub fn partial(&self, value: Value) {
        let _ = self.tx.send(Inbound::Message(
            self.endpoint,
            serde_json::json!({"id": self.id, "type": "partial", "value": value}),
        ));
    }

    /// Whether a cancel was requested.
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Resolves once a cancel is requested.
    pub async fn cancelled(&mut self) {
        let _ = self.cancel.wait_for(|c| *c).await;
    }
}

enum Transport {
    Child {
        stdin: mpsc::UnboundedSender<String>,
        kill: Option<oneshot::Sender<()>>,
        pid: Option<u32>,
    },
    Local {
        f: LocalFn,
        runs: HashMap<u64, watch::Sender<bool>>,
    },
    /// A remote endpoint: its current socket, if any (the registry's link decides when to
    /// connect, what to write and when to close).
    Remote {
        socket: Option<Socket>,
        generations: u64,
    },
}

/// The host: a registry, its transports, a clock and the waiters of `wait`.
pub struct JobsHost {
    pub registry: Registry<Value>,
    start: Instant,
    transports: HashMap<EndpointId, Transport>,
    tx: mpsc::UnboundedSender<Inbound>,
    rx: mpsc::UnboundedReceiver<Inbound>,
    /// Child-process and socket transports: lines, frames, stderr and closures, bounded (a
    /// transport that delivers faster than the host applies waits).
    child_tx: mpsc::Sender<Inbound>,
    child_rx: mpsc::Receiver<Inbound>,
    waiters: HashMap<WaitId, oneshot::Sender<WaitEnd>>,
    /// Lines children wrote on stderr, most recent last (bounded per endpoint).
    pub stderr_tail: HashMap<EndpointId, Vec<String>>,
    /// When set, `job_finished`, `note_queued` and `wake` outputs are kept for
    /// [`JobsHost::take_notices`] (an agent host carries them to its sessions).
    pub keep_notices: bool,
    notices: Vec<Output<Value>>,
    /// When set, the subscriptions of `observed` outputs are kept for
    /// [`JobsHost::take_observed`] (the remote endpoint forwards every run's journal).
    pub keep_observed: bool,
    observed: Vec<SubscriptionId>,
}

impl Default for JobsHost {
    fn default() -> Self {
        Self::new()
    }
}

impl JobsHost {
    /// A host with an empty registry; its clock is the process's monotonic clock
    /// ([`crate::actors::mono_now`]), shared with the agents.
    pub fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let (child_tx, child_rx) = mpsc::channel(CHILD_QUEUE);
        JobsHost {
            registry: Registry::default(),
            start: crate::actors::mono_origin(),
            transports: HashMap::new(),
            tx,
            rx,
            child_tx,
            child_rx,
            waiters: HashMap::new(),
            stderr_tail: HashMap::new(),
            keep_notices: false,
            notices: Vec::new(),
            keep_observed: false,
            observed: Vec::new(),
        }
    }

    /// The host's monotonic clock: milliseconds since the host started.
    pub fn now(&self) -> Mono {
        Mono::from_ms(self.start.elapsed().as_millis() as u64)
    }

    /// Starts `node <shim> <script>` as an endpoint. The script is a DOM-style worker.
    pub fn open_child(
        &mut self,
        node: &str,
        script: &Path,
        spec: EndpointSpec,
    ) -> std::io::Result<EndpointId> {
        let child = JobsHost::spawn_worker(node, script)?;
        Ok(self.attach_child(child, spec))
    }

    /// Starts `node <shim> <script>` (in its own process group) without opening its endpoint:
    /// a host that must not hold a lock while the process starts spawns it with this, then
    /// opens its endpoint with [`JobsHost::attach_child`].
    pub fn spawn_worker(node: &str, script: &Path) -> std::io::Result<Child> {
        let script = std::fs::canonicalize(script)?;
        Command::new(node)
            .arg("--input-type=module")
            .arg("--eval")
            .arg(WORKER_SHIM)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group: a terminal Ctrl-C reaches weft, which decides what to do.
            .process_group(0)
            .spawn()
    }

    /// Opens the endpoint of a worker process started by [`JobsHost::spawn_worker`].
    pub fn attach_child(&mut self, mut child: Child, spec: EndpointSpec) -> EndpointId {
        let id = self.registry.open_endpoint(self.now(), spec);
        let pid = child.id();
        let mut stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (stdin_tx, mut stdin_rx) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(line) = stdin_rx.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
            // Dropping stdin closes it: the shim exits.
        });
        // Set once the process has exited: the readers then stop at the first silence.
        let (exited_tx, exited_rx) = watch::channel(false);
        let tx = self.child_tx.clone();
        let mut exited = exited_rx.clone();
        let out_task = tokio::spawn(async move {
            let mut reader = BufReader::with_capacity(64 << 10, stdout);
            let mut buf = Vec::new();
            loop {
                let msg = match read_line(&mut reader, &mut buf, MAX_LINE, false, &mut exited).await
                {
                    Line::End => break,
                    Line::TooLong(len) => Inbound::Undecodable(
                        id,
                        format!("line of {len} bytes exceeds the {MAX_LINE}-byte limit"),
                    ),
                    Line::Complete => {
                        let line = String::from_utf8_lossy(&buf);
                        let line = line.trim_end();
                        if line.is_empty() {
                            continue;
                        }
                        match serde_json::from_str::<Value>(line) {
                            Ok(v) => Inbound::Message(id, v),
                            Err(e) => Inbound::Undecodable(
                                id,
                                format!("not JSON ({e}): {}", truncate(line, 120)),
                            ),
                        }
                    }
                };
                if tx.send(msg).await.is_err() {
                    break;
                }
            }
        });
        let tx = self.child_tx.clone();
        let mut exited = exited_rx;
        let err_task = tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut buf = Vec::new();
            loop {
                match read_line(&mut reader, &mut buf, MAX_STDERR_LINE, true, &mut exited).await {
                    Line::End => break,
                    Line::Complete | Line::TooLong(_) => {}
                }
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim_end_matches(['\n', '\r']).to_owned();
                if tx.send(Inbound::Stderr(id, line)).await.is_err() {
                    break;
                }
            }
        });
        let (kill_tx, kill_rx) = oneshot::channel::<()>();
        let tx = self.child_tx.clone();
        tokio::spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s,
                _ = kill_rx => {
                    kill_group(pid);
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            // The worker is gone: so are the descendants it left in its group (they would
            // otherwise outlive it and hold its stdout open).
            kill_group(pid);
            let _ = exited_tx.send(true);
            // Deliver every line the child wrote before reporting that it ended.
            let _ = out_task.await;
            let _ = err_task.await;
            let reason = match status {
                Ok(s) if s.success() => "worker process exited (status 0)".to_owned(),
                Ok(s) => match s.code() {
                    Some(c) => format!("worker process exited with status {c}"),
                    None => format!("worker process was killed ({s})"),
                },
                Err(e) => format!("worker process could not be awaited: {e}"),
            };
            let _ = tx.send(Inbound::Closed(id, reason)).await;
        });
        self.transports.insert(
            id,
            Transport::Child {
                stdin: stdin_tx,
                kill: Some(kill_tx),
                pid,
            },
        );
        self.pump();
        id
    }

    /// Opens an in-process endpoint whose runs are Tokio tasks executing `f`.
    pub fn open_local(&mut self, owner: &str, label: &str, f: LocalFn) -> EndpointId {
        let mut spec = EndpointSpec::new(owner, label);
        spec.hello = Hello::Declared(Capabilities {
            input: false,
            cancel_ack: true,
            error_code: true,
            batch: false,
        });
        let id = self.registry.open_endpoint(self.now(), spec);
        self.transports.insert(
            id,
            Transport::Local {
                f,
                runs: HashMap::new(),
            },
        );
        id
    }

    /// Opens an endpoint on a remote job host (`weft serve`'s `/api/jobs/remote`, protocol
    /// `weft-remote/1`): the registry's link frames, sequences, resumes and times it; this host
    /// opens, writes and closes its WebSocket (tokio-tungstenite). Refused with
    /// `INVALID_ARGUMENT` for a URL that is not `wss://` (or `ws://` to loopback).
    pub fn open_remote(
        &mut self,
        spec: EndpointSpec,
        remote: RemoteSpec,
    ) -> Result<EndpointId, weft_core::jobs::JobsError> {
        let now = self.now();
        let id = self.registry.open_remote(now, spec, remote)?;
        self.transports.insert(
            id,
            Transport::Remote {
                socket: None,
                generations: 0,
            },
        );
        self.pump();
        Ok(id)
    }

    /// Kills the process group of every child endpoint still open (their watchers then reap
    /// them and report the close); returns how many there were.
    pub fn kill_children(&self) -> usize {
        let mut n = 0;
        for t in self.transports.values() {
            if let Transport::Child { pid, .. } = t {
                kill_group(*pid);
                n += 1;
            }
        }
        n
    }

    /// How many child-process endpoints are still open (their process not yet reaped).
    pub fn open_children(&self) -> usize {
        self.transports
            .values()
            .filter(|t| matches!(t, Transport::Child { .. }))
            .count()
    }

    /// The OS process id of a child endpoint.
    pub fn pid(&self, ep: EndpointId) -> Option<u32> {
        match self.transports.get(&ep) {
            Some(Transport::Child { pid, .. }) => *pid,
            _ => None,
        }
    }

    /// Registers a waiter for `job`; the receiver resolves when the wait ends.
    pub fn wait(
        &mut self,
        job: JobId,
        timeout_ms: Option<u64>,
    ) -> Result<oneshot::Receiver<WaitEnd>, weft_core::jobs::JobsError> {
        let now = self.now();
        let w = self.registry.wait(now, job, timeout_ms)?;
        let (tx, rx) = oneshot::channel();
        self.waiters.insert(w, tx);
        self.pump();
        Ok(rx)
    }

    /// Waits for the next inbound event or timer, applies it, and performs the outputs.
    /// Returns what was applied (None for a timer tick).
    pub async fn step(&mut self) -> Option<Inbound> {
        let sleep = sleep_until(self.registry.poll_timeout(), self.now());
        let ev = tokio::select! {
            ev = self.rx.recv() => ev,
            Some(ev) = self.child_rx.recv() => Some(ev),
            _ = sleep => None,
        };
        self.apply(ev.as_ref());
        ev
    }

    /// Applies one inbound event (or fires due timers when `None`), then performs outputs.
    pub fn apply(&mut self, ev: Option<&Inbound>) {
        let now = self.now();
        match ev {
            Some(Inbound::Message(ep, v)) => {
                let _ = self.registry.on_message(now, *ep, v);
            }
            Some(Inbound::Undecodable(ep, detail)) => {
                let _ = self.registry.on_undecodable(now, *ep, detail);
            }
            Some(Inbound::Stderr(ep, line)) => {
                let tail = self.stderr_tail.entry(*ep).or_default();
                tail.push(line.clone());
                if tail.len() > 20 {
                    tail.remove(0);
                }
            }
            Some(Inbound::Closed(ep, reason)) => {
                let mut reason = reason.clone();
                if let Some(tail) = self.stderr_tail.get(ep) {
                    // The most telling stderr line: the last error line, else the last line.
                    let line = tail
                        .iter()
                        .rev()
                        .find(|l| l.contains("Error") || l.contains("Exception"))
                        .or(tail.last());
                    if let Some(line) = line {
                        reason = format!("{reason}; stderr: {}", truncate(line.trim(), 200));
                    }
                }
                let _ = self.registry.on_endpoint_closed(now, *ep, &reason);
                self.transports.remove(ep);
            }
            Some(Inbound::SocketOpen(ep, g)) if self.current_socket(*ep, *g) => {
                let _ = self.registry.on_socket_open(now, *ep);
            }
            Some(Inbound::SocketFrame(ep, g, v)) if self.current_socket(*ep, *g) => {
                let _ = self.registry.on_socket_frame(now, *ep, v);
            }
            Some(Inbound::SocketUndecodable(ep, g, detail)) if self.current_socket(*ep, *g) => {
                let _ = self.registry.on_undecodable(now, *ep, detail);
            }
            Some(Inbound::SocketClosed(ep, g, reason)) if self.current_socket(*ep, *g) => {
                if let Some(Transport::Remote { socket, .. }) = self.transports.get_mut(ep) {
                    *socket = None;
                }
                let _ = self.registry.on_socket_closed(now, *ep, reason);
            }
            // An earlier socket's events: that socket was closed or replaced.
            Some(
                Inbound::SocketOpen(..)
                | Inbound::SocketFrame(..)
                | Inbound::SocketUndecodable(..)
                | Inbound::SocketClosed(..),
            ) => {}
            None => {}
        }
        self.registry.handle_timeout(now);
        self.pump();
    }

    /// Performs every pending registry output.
    pub fn pump(&mut self) {
        let outputs: Vec<_> = self.registry.drain_outputs().collect();
        // Remote endpoints whose socket's outgoing queue was full: that socket is dropped.
        let mut stalled: Vec<EndpointId> = Vec::new();
        for out in outputs {
            match out {
                Output::Send { endpoint, request } => self.send(endpoint, request),
                // Only for transports opened with `batch_sends` (this host opens none).
                Output::SendBatch { endpoint, requests } => {
                    for request in requests {
                        self.send(endpoint, request);
                    }
                }
                Output::Terminate { endpoint } => match self.transports.get_mut(&endpoint) {
                    Some(Transport::Child { kill, .. }) => {
                        if let Some(k) = kill.take() {
                            let _ = k.send(());
                        }
                    }
                    Some(Transport::Local { runs, .. }) => {
                        for (_, c) in runs.drain() {
                            let _ = c.send(true);
                        }
                    }
                    // A remote endpoint's link closes its socket itself (`CloseSocket`).
                    Some(Transport::Remote { .. }) | None => {}
                },
                Output::WaitSettled { wait, end, .. } => {
                    if let Some(w) = self.waiters.remove(&wait) {
                        let _ = w.send(end);
                    }
                }
                Output::Observed { subscription } => {
                    if self.keep_observed && !self.observed.contains(&subscription) {
                        self.observed.push(subscription);
                    }
                }
                notice @ (Output::JobFinished { .. }
                | Output::NoteQueued { .. }
                | Output::Wake { .. }) => {
                    if self.keep_notices {
                        self.notices.push(notice);
                    }
                }
                Output::Connect { endpoint, url } => {
                    if let Some(Transport::Remote {
                        socket,
                        generations,
                    }) = self.transports.get_mut(&endpoint)
                    {
                        // One socket per endpoint: a previous one is dropped (its events are
                        // stale from now on).
                        if let Some(old) = socket.take() {
                            old.task.abort();
                        }
                        *generations += 1;
                        *socket = Some(spawn_socket(
                            endpoint,
                            *generations,
                            url,
                            self.child_tx.clone(),
                        ));
                    }
                }
                Output::SendFrame { endpoint, frame } => {
                    if let Some(Transport::Remote { socket, .. }) =
                        self.transports.get_mut(&endpoint)
                        && let Some(s) = socket
                        && let Err(mpsc::error::TrySendError::Full(_)) =
                            s.out.try_send(SocketOut::Text(frame.to_string()))
                    {
                        // The server does not read what this host writes: the socket is
                        // dropped (its link resumes on a new one).
                        if let Some(s) = socket.take() {
                            s.task.abort();
                        }
                        stalled.push(endpoint);
                    }
                }
                Output::CloseSocket {
                    endpoint,
                    code,
                    reason,
                } => {
                    // No report is expected: the socket is forgotten now and its end ignored.
                    if let Some(Transport::Remote { socket, .. }) =
                        self.transports.get_mut(&endpoint)
                        && let Some(s) = socket.take()
                        && s.out.try_send(SocketOut::Close(code, reason)).is_err()
                    {
                        // Its queue is full: the socket ends without a close frame.
                        s.task.abort();
                    }
                }
            }
        }
        if !stalled.is_empty() {
            let now = self.now();
            for ep in stalled {
                let reason =
                    format!("the server did not read this host's frames ({SOCKET_QUEUE} queued)");
                let _ = self.registry.on_socket_closed(now, ep, &reason);
            }
            self.pump();
        }
    }

    /// Whether generation `g` is `ep`'s current socket.
    fn current_socket(&self, ep: EndpointId, g: u64) -> bool {
        matches!(self.transports.get(&ep),
            Some(Transport::Remote { socket: Some(s), .. }) if s.generation == g)
    }

    fn send(&mut self, endpoint: EndpointId, request: WireRequest<Value>) {
        match self.transports.get_mut(&endpoint) {
            Some(Transport::Child { stdin, .. }) => {
                let mut line = request.to_json().to_string();
                line.push('\n');
                let _ = stdin.send(line);
            }
            Some(Transport::Local { f, runs }) => match request {
                WireRequest::Run { id, payload } => {
                    // Forget runs whose body has finished (its context was dropped).
                    runs.retain(|_, c| c.receiver_count() > 0);
                    let (cancel_tx, cancel_rx) = watch::channel(false);
                    runs.insert(id, cancel_tx);
                    let ctx = LocalCtx {
                        id,
                        endpoint,
                        tx: self.tx.clone(),
                        cancel: cancel_rx,
                    };
                    let fut = f(payload, ctx);
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        // A panicking body fails its own job only.
                        let result = tokio::spawn(fut).await;
                        let msg = match result {
                            Ok(Ok(v)) => serde_json::json!({"id": id, "type": "done", "value": v}),
                            Ok(Err(LocalError::Cancelled)) => {
                                serde_json::json!({"id": id, "type": "cancelled"})
                            }
                            Ok(Err(LocalError::Failed { message, code })) => {
                                serde_json::json!({"id": id, "type": "error", "message": message, "code": code})
                            }
                            Err(e) => serde_json::json!({"id": id, "type": "error",
                                "message": format!("the job body panicked: {e}"), "code": HostError::Panic.code()}),
                        };
                        let _ = tx.send(Inbound::Message(endpoint, msg));
                    });
                }
                WireRequest::Cancel { id } => {
                    if let Some(c) = runs.get(&id) {
                        let _ = c.send(true);
                    }
                }
                WireRequest::Input { .. } => {}
            },
            // A remote endpoint's requests travel in frames (`SendFrame`).
            Some(Transport::Remote { .. }) | None => {}
        }
    }

    /// Takes the kept `job_finished`, `note_queued` and `wake` outputs, in order (see
    /// [`JobsHost::keep_notices`]).
    pub fn take_notices(&mut self) -> Vec<Output<Value>> {
        std::mem::take(&mut self.notices)
    }

    /// Takes the subscriptions that have deliveries waiting, in the order they were first
    /// observed (see [`JobsHost::keep_observed`]).
    pub fn take_observed(&mut self) -> Vec<SubscriptionId> {
        std::mem::take(&mut self.observed)
    }

    /// A sender for injecting inbound events (used by tests and in-process bodies).
    pub fn sender(&self) -> mpsc::UnboundedSender<Inbound> {
        self.tx.clone()
    }

    /// Moves the host's inbound queues out, for a host shared behind a lock: the owner of the
    /// [`Inbox`] receives without holding the host and applies each event with
    /// [`JobsHost::apply`]. Afterwards [`JobsHost::step`] must not be used (it would see closed
    /// queues).
    pub fn take_inbox(&mut self) -> Inbox {
        let (_, rx) = mpsc::unbounded_channel();
        let (_, child_rx) = mpsc::channel(1);
        Inbox {
            rx: std::mem::replace(&mut self.rx, rx),
            child_rx: std::mem::replace(&mut self.child_rx, child_rx),
        }
    }
}

/// The inbound queues of a [`JobsHost`] taken out with [`JobsHost::take_inbox`].
#[derive(Debug)]
pub struct Inbox {
    rx: mpsc::UnboundedReceiver<Inbound>,
    child_rx: mpsc::Receiver<Inbound>,
}

impl Inbox {
    /// The next inbound event (`None` once both queues are closed: the host is gone).
    pub async fn recv(&mut self) -> Option<Inbound> {
        tokio::select! {
            Some(ev) = self.rx.recv() => Some(ev),
            Some(ev) = self.child_rx.recv() => Some(ev),
            else => None,
        }
    }

    /// An inbound event that is already waiting, if any.
    pub fn try_recv(&mut self) -> Option<Inbound> {
        self.rx
            .try_recv()
            .ok()
            .or_else(|| self.child_rx.try_recv().ok())
    }
}

impl Drop for JobsHost {
    /// Kills the process group of every child endpoint still open: no worker, and nothing a
    /// worker started, outlives its host.
    fn drop(&mut self) {
        for t in self.transports.values() {
            match t {
                Transport::Child { pid, .. } => kill_group(*pid),
                Transport::Remote {
                    socket: Some(s), ..
                } => s.task.abort(),
                _ => {}
            }
        }
    }
}

/// What the host writes on a remote endpoint's socket.
enum SocketOut {
    /// One text frame.
    Text(String),
    /// A close frame; the socket ends after it.
    Close(u16, String),
}

/// The live socket of a remote endpoint: `generation` tells its events from an earlier
/// socket's (which are ignored once a newer one exists).
struct Socket {
    generation: u64,
    out: mpsc::Sender<SocketOut>,
    task: tokio::task::JoinHandle<()>,
}

/// Longest WebSocket message a remote endpoint's socket accepts: twice the core's default
/// frame limit, the server's own cap (the socket is opened before the `welcome`, so the
/// default limits are the ones both sides start from); this only bounds what is buffered
/// before the core sees it.
fn max_socket_message() -> usize {
    2 * weft_core::jobs::remote::Limits::default().max_frame_bytes
}

/// Frames a remote endpoint's socket may have queued for writing; a server that reads slower
/// than that loses the socket (and the link resumes on a new one).
const SOCKET_QUEUE: usize = 1024;

/// Opens a socket to `url` and carries it: frames in as [`Inbound::SocketFrame`], `out` onto
/// the socket, the end as [`Inbound::SocketClosed`] (also when the connect fails).
fn spawn_socket(
    endpoint: EndpointId,
    generation: u64,
    url: String,
    tx: mpsc::Sender<Inbound>,
) -> Socket {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::{
        CloseFrame, WebSocketConfig, frame::coding::CloseCode,
    };
    let (out, mut rx) = mpsc::channel::<SocketOut>(SOCKET_QUEUE);
    let task = tokio::spawn(async move {
        let cap = max_socket_message();
        let config = WebSocketConfig::default()
            .max_message_size(Some(cap))
            .max_frame_size(Some(cap));
        let connect =
            tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), true);
        let mut ws = match tokio::time::timeout(CONNECT_WITHIN, connect).await {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => {
                let _ = tx
                    .send(Inbound::SocketClosed(
                        endpoint,
                        generation,
                        format!("could not connect to {url}: {e}"),
                    ))
                    .await;
                return;
            }
            Err(_) => {
                let _ = tx
                    .send(Inbound::SocketClosed(
                        endpoint,
                        generation,
                        format!(
                            "could not connect to {url} within {} ms",
                            CONNECT_WITHIN.as_millis()
                        ),
                    ))
                    .await;
                return;
            }
        };
        let _ = tx.send(Inbound::SocketOpen(endpoint, generation)).await;
        let reason = loop {
            tokio::select! {
                o = rx.recv() => match o {
                    Some(SocketOut::Text(t)) => {
                        if let Err(e) = ws.send(Message::text(t)).await {
                            break format!("the socket failed while writing: {e}");
                        }
                    }
                    Some(SocketOut::Close(code, reason)) => {
                        let _ = ws.send(Message::Close(Some(CloseFrame { code: CloseCode::from(code), reason: reason.clone().into() }))).await;
                        let _ = tokio::time::timeout(Duration::from_millis(500), async {
                            while let Some(Ok(m)) = ws.next().await {
                                if m.is_close() { break; }
                            }
                        }).await;
                        break format!("closed by this host ({code} {reason})");
                    }
                    None => break "closed by this host".to_owned(),
                },
                m = ws.next() => match m {
                    Some(Ok(Message::Text(t))) => {
                        let ev = match serde_json::from_str::<Value>(t.as_str()) {
                            Ok(v) => Inbound::SocketFrame(endpoint, generation, v),
                            Err(e) => Inbound::SocketUndecodable(endpoint, generation, format!("not JSON ({e}): {}", truncate(t.as_str(), 120))),
                        };
                        let _ = tx.send(ev).await;
                    }
                    Some(Ok(Message::Binary(b))) => {
                        let _ = tx.send(Inbound::SocketUndecodable(endpoint, generation, format!("a binary frame of {} bytes (frames are JSON text)", b.len()))).await;
                    }
                    Some(Ok(Message::Close(c))) => {
                        break match c {
                            Some(c) => format!("closed by the server ({} {})", u16::from(c.code), c.reason.as_str()),
                            None => "closed by the server".to_owned(),
                        };
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break format!("the connection failed: {e}"),
                    None => break "the connection ended".to_owned(),
                },
            }
        };
        let _ = tx
            .send(Inbound::SocketClosed(endpoint, generation, reason))
            .await;
    });
    Socket {
        generation,
        out,
        task,
    }
}

/// How long a remote endpoint's connect (TCP and the WebSocket handshake) may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// What [`read_line`] found.
enum Line {
    /// A line is in the buffer (its newline, if any, included).
    Complete,
    /// The line was longer than the limit; its length in bytes. The buffer holds its first
    /// `limit` bytes when the prefix is kept, else nothing.
    TooLong(usize),
    /// End of input (or silence after the process exited).
    End,
}

/// Reads one line into `buf`, cutting it at `limit` bytes as the bytes arrive: the rest of a
/// longer line is counted and discarded, never buffered. Once `exited` is set, a read that
/// stays silent for [`IDLE_AFTER_EXIT`] ends the input.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
    keep_prefix: bool,
    exited: &mut watch::Receiver<bool>,
) -> Line {
    buf.clear();
    if buf.capacity() > 1 << 20 {
        // A long line was read: do not keep its buffer for the short ones that follow.
        buf.shrink_to(64 << 10);
    }
    let mut len = 0usize;
    loop {
        let chunk = loop {
            if *exited.borrow() {
                match tokio::time::timeout(IDLE_AFTER_EXIT, reader.fill_buf()).await {
                    Ok(r) => break r,
                    Err(_) => return Line::End,
                }
            }
            tokio::select! {
                r = reader.fill_buf() => break r,
                c = exited.changed() => if c.is_err() {
                    // The process watcher is gone: read on without a silence bound.
                    break reader.fill_buf().await;
                },
            }
        };
        let chunk = match chunk {
            Ok(c) if !c.is_empty() => c,
            // End of input: a last line without a newline still counts.
            _ if len > limit => return Line::TooLong(len),
            _ if len > 0 => return Line::Complete,
            _ => return Line::End,
        };
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if len + take <= limit {
            buf.extend_from_slice(&chunk[..take]);
        } else if keep_prefix {
            let room = limit.saturating_sub(buf.len()).min(take);
            buf.extend_from_slice(&chunk[..room]);
        } else if buf.capacity() > 0 {
            // Over the limit: what was kept of this line is useless, give it back now.
            *buf = Vec::new();
        }
        len += take;
        reader.consume(take);
        if done {
            return if len > limit {
                Line::TooLong(len)
            } else {
                Line::Complete
            };
        }
    }
}

/// Kills a child's whole process group (the child is its leader: it was started with
/// `process_group(0)`).
pub(crate) fn kill_group(pid: Option<u32>) {
    #[cfg(target_os = "linux")]
    if let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: killpg only sends a signal; an empty group gives ESRCH, which is ignored.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pid;
}

/// Sleeps until a core's next deadline (`poll_timeout`, host milliseconds) given the host's
/// `now`; never wakes when there is none.
pub(crate) async fn sleep_until(deadline: Option<Mono>, now: Mono) {
    match deadline {
        Some(d) => tokio::time::sleep(Duration::from_millis(d.since(now))).await,
        None => std::future::pending().await,
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}
