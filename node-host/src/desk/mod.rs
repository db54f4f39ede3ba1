//! The actor desk: an HTTP API over one `$CHAT_ROOT` and the browser UI that uses it (grid of
//! task tiles, tree with `+` spawn, linear view, fork panel, graph strip, coordinator thread,
//! temporal scrubber), with live updates over server-sent events.
//!
//! [`router`] is an axum `Router` to mount in any server (`weft serve` mounts it; `weft actors
//! desk` serves it alone). Routes:
//!
//! * UI: `GET /actors/` (and `/actors/desk.js`, `/actors/desk.css`).
//! * Reads: `GET /api/actors/graph`, `/api/actors/views/{linear|grid|tree|temporal|metathread}`
//!   (query: `node`, `scope`, `at`, `buckets`), `/api/actors/nodes/{id}` (fork panel),
//!   `/api/actors/nodes/{id}/mailbox?reader=`, `/api/actors/nodes/{id}/model`,
//!   `/api/actors/audit`, `/api/actors/events` (SSE: `change` events carrying the version;
//!   with agents, also `agent` events — `{"node", ...AgentOutput::to_json()}` for every
//!   released output — and `delta` events `{"node", "turn", "step", "text"}` of streaming model
//!   steps, with `at`: their offset in the step's text), `/api/actors/agents` (`{model,
//!   running, agents: {node: state}}`), `/api/actors/nodes/{id}/agent` (`404 AGENT_NOT_OPEN`
//!   when the node has none; `streaming`: the running step's text so far), `/api/actors/store`
//!   (`{kind, spareNodes}`: the store and what its spare node directories are doing, see
//!   [`store`]). The agent lines on disk are resumable events with SSE ids, replayed after
//!   `Last-Event-ID` ([`events`]).
//! * Writes (JSON bodies): `POST /api/actors/spawn`, `/api/actors/nodes/{id}/messages`,
//!   `…/route`, `…/status`, `…/resolve`, `…/archive`, `…/wait`, `POST /api/actors/refs`,
//!   `/api/actors/narrate`, `/api/actors/bookmarks`, `/api/actors/epochs`,
//!   `/api/actors/reset`, `/api/actors/export`, `POST /api/actors/nodes/{id}/interrupt`
//!   (`{"reason"?}` → `{"node", "status"}`).
//!
//! Agents ([`DeskState::start_agents`], what `weft serve` does): the native runtime
//! ([`crate::agents::Runtime`]) lives beside the graph under the same lock. Every write is
//! followed by the agents' call order (flush + fsync + ack, sync, poll); released model steps
//! run on Tokio tasks with the configured model (their answers come back under the lock), the
//! built-in model answers inline when none is configured. Host tools given with
//! [`DeskState::with_host_tools`] (`weft serve`: the DGP tools over its own ThreadDesk) are
//! declared on every task node's agent; their calls run on Tokio tasks the same way (an
//! interrupt raises the call's abort signal; the settlement comes back under the lock). A
//! person's line (`POST …/messages`) goes through the core's `admit_utterance`, and the node
//! that took it gets its agent. [`DeskState::stop_agents`] (`weft serve` on SIGTERM / Ctrl-C)
//! interrupts the running model steps through the core before the server stops.
//!
//! Every write is answered after the store acknowledged it. Errors are
//! `application/problem+json` with the core's stable `code`. JSON bodies are read strictly
//! (duplicate keys are refused) and limited to [`MAX_BODY`] bytes. The event stream ends when
//! the server shuts down.
//!
//! Access: mounted in `weft serve` ([`mount`]), every `/api/actors/…` route needs the human
//! token (`Authorization: Bearer …`; reads may be opened with
//! [`DeskAccess::reads_without_token`]); the page asks for the token. The standalone `weft
//! actors desk` ([`serve_root`]) has no tokens: it refuses any but a loopback address, and the
//! boundary refuses foreign `Host` and `Origin` headers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::Request;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};
use weft_core::actors::{
    ActorGraph, ActorStore, ActorsError, HarnessConfig, HeuristicProposer, MemoryStore,
    NodeStoreMode, api, proposer,
};
use weft_core::codes::HostError;

use crate::actors::failpoint::Failpoint;
use crate::actors::{FsStore, Session, flush, wall_ms};
use crate::agents::{AgentEvent, CallJob, HostTools, ModelJob, Runtime};
use events::{Journal, Live};

pub mod events;
use crate::serve::auth::Auth;
use crate::serve::http::{self, Shutdown, ShutdownSignal};

/// The largest JSON body a desk write accepts (larger ones are `413 PAYLOAD_TOO_LARGE`).
pub const MAX_BODY: usize = 2 * 1024 * 1024;

const INDEX_HTML: &str = include_str!("assets/index.html");
const DESK_JS: &str = include_str!("assets/desk.js");
const DESK_CSS: &str = include_str!("assets/desk.css");

enum Store {
    Fs(Box<FsStore>),
    Memory(MemoryStore),
}

struct Inner {
    graph: ActorGraph,
    store: Store,
    /// The agents of the graph's nodes (`None`: this desk runs no agents).
    agents: Option<Runtime>,
    /// The order of the last durable agent lines (resumable SSE events).
    journal: Journal,
}

/// The text a model step streamed so far (one per node, dropped when the step ends).
struct Partial {
    turn: u64,
    step: u64,
    text: String,
    /// The text's length in UTF-16 code units (the `at` of the next delta).
    units: u64,
    /// Deltas beyond [`MAX_PARTIAL`] bytes were not kept.
    truncated: bool,
}

/// The most bytes of a streaming step's text kept for pages that load mid-step.
pub const MAX_PARTIAL: usize = 256 * 1024;

type Partials = Arc<Mutex<HashMap<String, Partial>>>;

/// The text a model step streamed while its request was not durable yet (its gate is
/// closed): nobody sees it until the flush before the request succeeded.
#[derive(Default, Debug, PartialEq)]
struct Held {
    text: String,
    /// The text's length in UTF-16 code units (kept text or not).
    units: u64,
    /// Deltas beyond [`MAX_PARTIAL`] bytes were not kept.
    truncated: bool,
}

impl Held {
    /// Holds `text` back (up to [`MAX_PARTIAL`] bytes in all).
    fn push(&mut self, text: &str) {
        self.units += text.encode_utf16().count() as u64;
        if self.text.len() + text.len() <= MAX_PARTIAL {
            self.text.push_str(text);
        } else {
            self.truncated = true;
        }
    }
}

/// Where a model step's deltas go: held back while its gate is closed (`Some`), then to the
/// partials and the event streams.
struct StepStream {
    node: String,
    turn: u64,
    step: u64,
    held: Mutex<Option<Held>>,
    partials: Partials,
    events: broadcast::Sender<Live>,
}

impl StepStream {
    /// A stream that holds its deltas back until [`open`](Self::open) when `gated`.
    fn new(
        node: String,
        turn: u64,
        step: u64,
        gated: bool,
        partials: Partials,
        events: broadcast::Sender<Live>,
    ) -> StepStream {
        let s = StepStream {
            node,
            turn,
            step,
            held: Mutex::new(Some(Held::default())),
            partials,
            events,
        };
        if !gated {
            s.open();
        }
        s
    }

    /// The gate opened: the step's partial text starts with what was held, sent as one
    /// delta at 0; later deltas go out as they come.
    fn open(&self) {
        let mut held = lock(&self.held);
        let Some(h) = held.take() else {
            return;
        };
        let text = h.text.clone();
        lock(&self.partials).insert(
            self.node.clone(),
            Partial {
                turn: self.turn,
                step: self.step,
                text: h.text,
                units: h.units,
                truncated: h.truncated,
            },
        );
        if !text.is_empty() {
            self.send(text, 0);
        }
    }

    /// A text delta of the step: held back, or kept in the partials and sent.
    fn delta(&self, text: &str) {
        {
            let mut held = lock(&self.held);
            if let Some(h) = held.as_mut() {
                h.push(text);
                return;
            }
        }
        let at = {
            let mut ps = lock(&self.partials);
            match ps.get_mut(&self.node).filter(|p| p.step == self.step) {
                Some(p) => {
                    let at = p.units;
                    p.units += text.encode_utf16().count() as u64;
                    if p.text.len() + text.len() <= MAX_PARTIAL {
                        p.text.push_str(text);
                    } else {
                        p.truncated = true;
                    }
                    at
                }
                None => 0,
            }
        };
        self.send(text.to_owned(), at);
    }

    fn send(&self, text: String, at: u64) {
        let _ = self.events.send(Live::Delta {
            event: AgentEvent::Delta {
                node: self.node.clone(),
                turn: self.turn,
                step: self.step,
                text,
            },
            at,
        });
    }
}

/// Waits for `gate` to open (`true`); `false` when it was dropped closed (the flush before
/// the step's request failed). No gate: open.
async fn gate_opens(gate: Option<watch::Receiver<bool>>) -> bool {
    match gate {
        None => true,
        Some(mut g) => g.wait_for(|open| *open).await.is_ok(),
    }
}

/// Applies (fsyncs) and acknowledges every queued batch.
fn flush_store(graph: &mut ActorGraph, store: &mut Store) -> Result<(), ActorsError> {
    match store {
        Store::Fs(s) => flush(graph, s.as_mut()).map(|_| ()),
        Store::Memory(m) => {
            for b in graph.take_batches() {
                let done = m.perform(&b).map_err(ActorsError::StoreIo)?;
                graph.ack(done)?;
            }
            Ok(())
        }
    }
}

impl Inner {
    fn flush(&mut self) -> Result<(), ActorsError> {
        flush_store(&mut self.graph, &mut self.store)
    }

    /// Lets the open agents see a change before it is flushed (see `Runtime::sync_open`).
    /// An agent's error is logged as in [`pump_agents`](Self::pump_agents): the change itself
    /// stands.
    fn sync_agents(&mut self) {
        if let Some(rt) = self.agents.as_mut()
            && let Err(e) = rt.sync_open(crate::actors::now(), &mut self.graph)
        {
            eprintln!("weft desk: agents: error[{}]: {e}", e.code());
        }
    }

    /// What the agents release before a flush (reads: their model steps, see
    /// `Runtime::release`); an agent's error is logged as in [`pump_agents`](Self::pump_agents).
    fn release_agents(&mut self) -> Work {
        let Some(rt) = self.agents.as_mut() else {
            return Work::default();
        };
        // The steps released before an error run too (the runtime counts them running).
        let mut models = Vec::new();
        if let Err(e) = rt.release(crate::actors::now(), &mut self.graph, &mut models) {
            eprintln!("weft desk: agents: error[{}]: {e}", e.code());
        }
        Work {
            models,
            calls: rt.take_calls(),
        }
    }

    /// Runs the agents' call order until quiet; returns the model steps and host tool calls
    /// to run.
    fn pump_agents(&mut self) -> Work {
        let Inner {
            graph,
            store,
            agents,
            ..
        } = self;
        let Some(rt) = agents.as_mut() else {
            return Work::default();
        };
        let models = match rt.pump(crate::actors::now(), graph, &mut |g| flush_store(g, store)) {
            Ok(jobs) => jobs,
            Err(e) => {
                eprintln!("weft desk: agents: error[{}]: {e}", e.code());
                Vec::new()
            }
        };
        Work {
            models,
            calls: rt.take_calls(),
        }
    }
}

/// What a pump released for the host to run.
#[derive(Default)]
struct Work {
    models: Vec<ModelJob>,
    calls: Vec<CallJob>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Drops `node`'s partial text if it is still that of `step`.
fn forget_partial(partials: &Partials, node: &str, step: u64) {
    let mut ps = lock(partials);
    if ps.get(node).is_some_and(|p| p.step == step) {
        ps.remove(node);
    }
}

/// `node`'s streaming step and its text so far (`null` when no step of it is running).
fn streaming(partials: &Partials, rt: &Runtime, node: &str) -> Value {
    let ps = lock(partials);
    match (ps.get(node), rt.running_step(node)) {
        (Some(p), Some(s)) if s.0 == p.step => json!({
            "turn": p.turn, "step": p.step, "text": p.text, "length": p.units,
            "truncated": p.truncated,
        }),
        _ => Value::Null,
    }
}

/// Resolves once the runtime forgot the call (its abort sender was dropped).
async fn forgotten(mut abort: watch::Receiver<bool>) {
    while abort.changed().await.is_ok() {}
}

/// The model the desk's agents run, and what `GET /api/actors/agents` says about it.
struct AgentModel {
    /// The configured model (`None`: the built-in model answers inside the runtime).
    remote: Option<crate::model::ReqwestModel>,
    info: Value,
}

/// The desk's shared state: the graph, its store, and a change signal for live views.
#[derive(Clone)]
pub struct DeskState {
    inner: Arc<Mutex<Inner>>,
    changes: watch::Sender<u64>,
    /// Ends the event streams when the server shuts down.
    closing: Option<ShutdownSignal>,
    /// The model that proposes spawns on `route` (`None`: the keyword heuristic).
    proposer: Option<crate::model::ReqwestModel>,
    /// Agent outputs, model deltas and durable agent lines for the event streams.
    events: broadcast::Sender<Live>,
    /// The streaming steps' text so far, by node.
    partials: Partials,
    /// `weft serve` is stopping: released model steps are not started any more.
    stopping: Arc<std::sync::atomic::AtomicBool>,
    /// The agents' model (`None`: this desk runs no agents).
    model: Option<Arc<AgentModel>>,
    /// Host tools of the task nodes' agents, with their handler.
    host_tools: Option<HostTools>,
}

impl DeskState {
    /// Opens `root` as its writer (the desk holds the writer lock while it runs; CLI writers
    /// then wait and time out with `STORE_LOCKED`). `ACTOR_NODE_STORE=off` keeps the graph in
    /// memory only. An empty root is initialised.
    pub fn open(
        root: &Path,
        config: HarnessConfig,
        wait: Duration,
    ) -> Result<DeskState, ActorsError> {
        DeskState::open_armed(root, config, wait, None)
    }

    /// [`open`](Self::open) with the store armed with `failpoint` (the crash tests only).
    fn open_armed(
        root: &Path,
        config: HarnessConfig,
        wait: Duration,
        failpoint: Option<Failpoint>,
    ) -> Result<DeskState, ActorsError> {
        let inner = if config.node_store == NodeStoreMode::Off {
            let graph =
                ActorGraph::init(config, "memory:", &Default::default(), wall_ms(), "Desk")?;
            let mut i = Inner {
                graph,
                store: Store::Memory(MemoryStore::default()),
                agents: None,
                journal: Journal::default(),
            };
            i.flush()?;
            i
        } else {
            let mut s = match Session::writer(root, config.clone(), wait) {
                Err(ActorsError::NotInitialized) => Session::init(root, config, "Desk", wait)?,
                other => other?,
            };
            // Crash injection (the crash tests only): a long-lived writer aborted at a step.
            s.store.set_failpoint(failpoint);
            // A long-lived writer: spare node directories made ahead of its spawns (outside
            // `nodes/`; removed when it stops, and by the next writer's open after a crash).
            s.store
                .keep_spare_nodes(crate::actors::LONG_LIVED_SPARE_NODES)?;
            for d in &s.report.diagnostics {
                eprintln!("weft desk: {} {}: {}", d.code, d.file, d.message);
            }
            Inner {
                graph: s.graph,
                store: Store::Fs(Box::new(s.store)),
                agents: None,
                journal: Journal::default(),
            }
        };
        let (changes, _) = watch::channel(inner.graph.version());
        let (events, _) = broadcast::channel(1024);
        Ok(DeskState {
            inner: Arc::new(Mutex::new(inner)),
            changes,
            closing: None,
            proposer: None,
            events,
            partials: Arc::default(),
            stopping: Arc::default(),
            model: None,
            host_tools: None,
        })
    }

    /// Offers `tools` to every task node's agent (call before
    /// [`start_agents`](Self::start_agents)); the discussion surface never gets them (the core
    /// refuses work tools there with `CADENCE_VIOLATION`).
    pub fn with_host_tools(mut self, tools: Option<HostTools>) -> DeskState {
        self.host_tools = tools;
        self
    }

    /// Runs an agent on the graph's nodes with `model` (the built-in model when none is
    /// configured): nodes whose lines hold agent records are resumed from disk now (an
    /// unfinished turn is recorded interrupted by the core), other nodes get their agent when
    /// a person writes to them (`POST …/messages`), children when an agent spawns them.
    pub async fn start_agents(
        mut self,
        model: crate::model::HostModel,
    ) -> Result<DeskState, ActorsError> {
        let note = model.note().map(|_| {
            format!(
                "{}: no model configured: {}; the built-in model answers",
                weft_core::model::NO_MODEL_CONFIGURED,
                weft_core::model::builtin::HOW_TO_CONFIGURE
            )
        });
        let (remote, info) = match model {
            crate::model::HostModel::Remote(m) => {
                let c = m.config();
                let info = json!({"configured": true, "provider": c.provider.as_str(),
                    "name": c.model, "note": null});
                (Some(m), info)
            }
            crate::model::HostModel::Builtin { .. } => (
                None,
                json!({"configured": false, "provider": null, "name": null, "note": note}),
            ),
        };
        let builtin = remote.is_none();
        self.model = Some(Arc::new(AgentModel { remote, info }));
        let events = self.events.clone();
        let sink: crate::agents::Sink = Box::new(move |e| {
            // The built-in model's one delta is the step's whole text.
            let _ = events.send(match e {
                e @ AgentEvent::Delta { .. } => Live::Delta { event: e, at: 0 },
                e => Live::Agent(e),
            });
        });
        let host_tools = self.host_tools.clone();
        let resumed = self
            .with_inner(move |i| {
                let mut rt = Runtime::new(Default::default(), builtin, sink);
                if let Some(t) = &host_tools {
                    rt.set_host_tools(t);
                }
                let resumed = rt
                    .resume_all(crate::actors::now(), &mut i.graph)
                    .map_err(agents_to_actors)?;
                i.journal = Journal::open(&i.graph, rt.nodes());
                i.agents = Some(rt);
                Ok(resumed)
            })
            .await?;
        for (node, report) in resumed {
            if report["interruptedTurn"].is_u64() {
                eprintln!("weft desk: agent {node} resumed: {report}");
            }
        }
        if let Some(jobs) = self.host_tools.as_ref().and_then(|t| t.jobs.clone()) {
            // Worker-job tools: what the jobs do is carried to the agents by a pump.
            let s = self.clone();
            tokio::spawn(jobs.drive(Arc::new(move || {
                let s = s.clone();
                Box::pin(async move {
                    let _ = s.with_inner(|_| Ok(())).await;
                })
            })));
        }
        Ok(self)
    }

    /// Runs `f` under the lock (blocking), starts the model steps the agents release before a
    /// flush, performs what `f` queued, pumps the agents and signals live views; returns `f`'s
    /// result and the work to start.
    fn locked<T>(
        &self,
        f: impl FnOnce(&mut Inner) -> Result<T, ActorsError>,
    ) -> (Result<T, ActorsError>, Work) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let out = f(&mut g);
        g.sync_agents();
        // Reads go out before the flush: a released model step is asked while its lines (a
        // person's line and the `turn_start`) become durable (the core's rule, `poll_output`).
        // Their deltas reach nobody until the flush succeeded (the gate): a person never
        // sees a step whose request a crash could lose. A failed flush aborts them.
        let early = g.release_agents();
        let steps: Vec<_> = early
            .models
            .iter()
            .map(|j| (j.node.clone(), j.step))
            .collect();
        let (gate, gated) = watch::channel(false);
        self.start_jobs(early, Some(&gated));
        drop(gated);
        let flushed = g.flush();
        if flushed.is_err()
            && let Some(rt) = g.agents.as_mut()
        {
            rt.abort_released(&steps);
        }
        let jobs = g.pump_agents();
        // The agent lines now on disk go to the event streams (under the lock: in the
        // journal's order).
        let Inner {
            graph,
            agents,
            journal,
            ..
        } = &mut *g;
        if let Some(rt) = agents.as_ref() {
            for n in rt.nodes() {
                for e in journal.scan(graph, n) {
                    let _ = self.events.send(Live::Line(e));
                }
            }
        }
        if flushed.is_ok() {
            // After the person's lines went to the event streams: then the deltas.
            gate.send_replace(true);
        }
        drop(gate);
        let v = g.graph.version();
        drop(g);
        self.changes.send_if_modified(|old| {
            let changed = *old != v;
            *old = v;
            changed
        });
        (out.and_then(|o| flushed.map(|_| o)), jobs)
    }

    /// [`locked`](Self::locked) in the blocking pool; starts the work it released.
    async fn with_inner<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Inner) -> Result<T, ActorsError> + Send + 'static,
    ) -> Result<T, ActorsError> {
        let s = self.clone();
        let (out, jobs) = tokio::task::spawn_blocking(move || s.locked(f))
            .await
            .map_err(|e| ActorsError::StoreIo(format!("desk task: {e}")))?;
        self.start_jobs(jobs, None);
        out
    }

    /// Hands a finished model step or host call back to the agents ([`with_inner`](Self::with_inner):
    /// under the lock, then starts what it released); an agent's error is logged, as in a pump.
    async fn report(&self, f: impl FnOnce(&mut Inner) -> Result<(), ActorsError> + Send + 'static) {
        if let Err(e) = self.with_inner(f).await {
            eprintln!("weft desk: agents: error[{}]: {e}", e.code());
        }
    }

    /// Runs each released model step on a Tokio task: deltas go to the event streams, the
    /// answer back to the agent (under the lock), which may release the next steps. With a
    /// `gate`, a step's deltas are held back until it opens (`true`), and its answer is
    /// dropped if it closes without opening (the runtime aborted the step).
    fn start_jobs(&self, work: Work, gate: Option<&watch::Receiver<bool>>) {
        let Work { models, calls } = work;
        let stopping = self.stopping.load(std::sync::atomic::Ordering::SeqCst);
        if !stopping {
            self.start_calls(calls);
        }
        let Some(model) = self.model.clone() else {
            return;
        };
        for job in models {
            if stopping {
                // The host is stopping: the step is not asked (a restart records it
                // interrupted).
                continue;
            }
            let state = self.clone();
            let model = model.clone();
            let gate = gate.cloned();
            tokio::spawn(async move {
                let Some(remote) = model.remote.as_ref() else {
                    return;
                };
                let (node, turn, step) = (job.node.clone(), job.turn.0, job.step);
                let stream = StepStream::new(
                    node.clone(),
                    turn,
                    step.0,
                    gate.is_some(),
                    state.partials.clone(),
                    state.events.clone(),
                );
                let opened = async {
                    let open = gate_opens(gate).await;
                    if open {
                        stream.open();
                    }
                    open
                };
                let (result, opened) = tokio::join!(
                    crate::agents::run_model(remote, job, |text| stream.delta(text)),
                    opened
                );
                if !opened {
                    // Its request is not durable: the runtime forgot the step, nobody saw it.
                    return;
                }
                let Some(result) = result else {
                    // Interrupted: the agent already knows.
                    forget_partial(&state.partials, &node, step.0);
                    return;
                };
                let partials = state.partials.clone();
                state
                    .report(move |i| {
                        // The text goes under the lock the answer's line lands under.
                        forget_partial(&partials, &node, step.0);
                        if let Some(rt) = i.agents.as_mut() {
                            rt.finish(crate::actors::now(), &mut i.graph, &node, step, result)
                                .map_err(agents_to_actors)?;
                        }
                        Ok(())
                    })
                    .await;
            });
        }
    }

    /// Runs each started host tool call on a Tokio task with the host tools' handler (it sees
    /// the call's abort signal); the settlement goes back to the agent under the lock, which
    /// may release the next work. A call the runtime forgot (it was dropped) is dropped too.
    fn start_calls(&self, calls: Vec<CallJob>) {
        for call in calls {
            let state = self.clone();
            let run = self.host_tools.as_ref().map(|t| t.run.clone());
            tokio::spawn(async move {
                let CallJob {
                    node,
                    invocation,
                    tool,
                    arguments,
                    abort,
                } = call;
                let settlement = match run {
                    Some(run) => tokio::select! {
                        s = run(tool, arguments, abort.clone()) => s,
                        _ = forgotten(abort) => return,
                    },
                    None => weft_core::tools::HandlerFailure::UnknownTool(tool).into(),
                };
                state
                    .report(move |i| {
                        if let Some(rt) = i.agents.as_mut() {
                            rt.settle(
                                crate::actors::now(),
                                &mut i.graph,
                                &node,
                                invocation,
                                settlement,
                            )
                            .map_err(agents_to_actors)?;
                        }
                        Ok(())
                    })
                    .await;
            });
        }
    }

    /// Routes with `model` proposing spawns (the core's proposal rules) instead of the keyword
    /// heuristic; `None` keeps the heuristic.
    pub fn with_model_proposer(mut self, model: Option<crate::model::ReqwestModel>) -> DeskState {
        self.proposer = model;
        self
    }

    /// The host is stopping: interrupts every running model step through the core (its turn
    /// ends `interrupted` with `reason`, and that line is made durable), and starts no model
    /// step or host call any more. Gives up after `within` (a store that cannot finish: the
    /// restart rules cover what is left); `false` then.
    pub async fn stop_agents(&self, reason: &str, within: Duration) -> bool {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if self.model.is_none() {
            return true;
        }
        let (reason, said) = (reason.to_owned(), reason.to_owned());
        let stop = self.with_inner(move |i| {
            let n = match i.agents.as_mut() {
                Some(rt) => {
                    let n = rt.running();
                    rt.interrupt_all(crate::actors::now(), &mut i.graph, &reason)
                        .map_err(agents_to_actors)?;
                    n
                }
                None => 0,
            };
            // Acknowledged before the answer (the lock's flush).
            i.flush()?;
            Ok(n)
        });
        match tokio::time::timeout(within, stop).await {
            Ok(Ok(n)) => {
                if n > 0 {
                    eprintln!("weft desk: {n} running agent step(s) interrupted: {said}");
                }
                true
            }
            Ok(Err(e)) => {
                eprintln!("weft desk: agents: stopping: error[{}]: {e}", e.code());
                true
            }
            Err(_) => false,
        }
    }

    /// Ends every event stream once `signal` fires (server shutdown).
    pub fn closing_on(mut self, signal: ShutdownSignal) -> DeskState {
        self.closing = Some(signal);
        self
    }

    /// Runs `f` on the graph in the blocking pool; performs and acknowledges what it queued;
    /// signals live views.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ActorGraph) -> Result<T, ActorsError> + Send + 'static,
    ) -> Result<T, ActorsError> {
        self.with_inner(move |i| f(&mut i.graph)).await
    }
}

/// An agents error as the graph's error the desk answers with (its code is kept).
fn agents_to_actors(e: weft_core::agents::AgentsError) -> ActorsError {
    match e {
        weft_core::agents::AgentsError::Actors(a) => a,
        other => ActorsError::InvalidArgument(format!("{}: {other}", other.code())),
    }
}

/// The status the core assigns to the error ([`ActorsError::http_status`]).
fn status_of(e: &ActorsError) -> StatusCode {
    StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// An error as `application/problem+json` with the stable `code`.
pub struct Problem(pub ActorsError);

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        coded(status_of(&self.0), self.0.code(), &self.0.to_string())
    }
}

/// A problem+json response with `status`, the stable `code` and `detail`.
fn coded(status: StatusCode, code: &str, detail: &str) -> Response {
    let body = json!({
        "type": format!("https://weft.invalid/problems/actors/{}", code.to_lowercase()),
        "title": status.canonical_reason().unwrap_or("error"),
        "status": status.as_u16(),
        "code": code,
        "detail": detail,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

/// A host outcome as problem+json, with the code and status the core lists for it.
fn host_problem(e: HostError, detail: &str) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    coded(status, e.code(), detail)
}

/// An agents error as problem+json with the core's code (graph errors keep their status;
/// session refusals such as `STALE_STEP` are `409`).
fn agent_problem(e: &weft_core::agents::AgentsError) -> Response {
    let status = match e {
        weft_core::agents::AgentsError::Actors(a) => status_of(a),
        _ => StatusCode::CONFLICT,
    };
    coded(status, e.code(), &e.to_string())
}

impl From<ActorsError> for Problem {
    fn from(e: ActorsError) -> Self {
        Problem(e)
    }
}

fn ok(v: Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

type Reply = Result<Response, Problem>;

/// A write's JSON body. Writes must say `content-type: application/json`: a browser cannot send
/// that cross-origin without a CORS preflight, which the desk never answers.
fn body(h: &HeaderMap, b: &Bytes) -> Result<Value, ActorsError> {
    let json_type = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
    if !json_type {
        return Err(ActorsError::InvalidArgument(
            "writes need `content-type: application/json`".into(),
        ));
    }
    if b.is_empty() {
        return Ok(json!({}));
    }
    // The core's strict reader: duplicate keys, trailing data and non-finite numbers fail.
    let v = weft_core::frames::validate::parse_strict(b).map_err(|e| {
        ActorsError::InvalidArgument(format!("the request body is not strict JSON: {e}"))
    })?;
    if !v.is_object() {
        return Err(ActorsError::InvalidArgument(
            "the request body must be a JSON object".into(),
        ));
    }
    Ok(v)
}

/// The desk routes (see the module docs), with `state`.
pub fn router(state: DeskState) -> Router {
    Router::new()
        .route(
            "/actors",
            get(|| async { axum::response::Redirect::permanent("/actors/") }),
        )
        .route(
            "/actors/",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    INDEX_HTML,
                )
            }),
        )
        .route(
            "/actors/desk.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    DESK_JS,
                )
            }),
        )
        .route(
            "/actors/desk.css",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
                    DESK_CSS,
                )
            }),
        )
        .route("/api/actors/graph", get(graph))
        .route("/api/actors/views/{view}", get(view))
        .route("/api/actors/nodes/{id}", get(fork))
        .route("/api/actors/nodes/{id}/mailbox", get(mailbox))
        .route("/api/actors/nodes/{id}/model", get(model))
        .route("/api/actors/audit", get(audit))
        .route("/api/actors/store", get(store))
        .route("/api/actors/events", get(events))
        .route("/api/actors/spawn", post(spawn))
        .route("/api/actors/nodes/{id}/messages", post(message))
        .route("/api/actors/agents", get(agents))
        .route("/api/actors/nodes/{id}/agent", get(node_agent))
        .route("/api/actors/nodes/{id}/interrupt", post(interrupt))
        .route("/api/actors/nodes/{id}/route", post(route))
        .route("/api/actors/nodes/{id}/status", post(status))
        .route("/api/actors/nodes/{id}/resolve", post(resolve))
        .route("/api/actors/nodes/{id}/archive", post(archive))
        .route("/api/actors/nodes/{id}/wait", post(wait))
        .route("/api/actors/refs", post(add_ref))
        .route("/api/actors/narrate", post(narrate))
        .route("/api/actors/bookmarks", post(bookmark))
        .route("/api/actors/epochs", post(epoch))
        .route("/api/actors/reset", post(reset))
        .route("/api/actors/export", post(export))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// Who may use a desk mounted in `weft serve`: the holder of the human token.
pub struct DeskAccess {
    /// The server's tokens.
    pub auth: Arc<Auth>,
    /// Reads (`GET`) answer without a token; writes still need the human token.
    pub reads_without_token: bool,
}

/// The desk's access rule inside `weft serve`: the UI (`/actors/…`) is public (it asks for
/// the token); `/api/actors/…` needs the human token (reads may be opened). An agent token is
/// `403 FORBIDDEN`; no or a wrong token is `401 UNAUTHENTICATED`.
async fn access(State(a): State<Arc<DeskAccess>>, req: Request, next: Next) -> Response {
    let read = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    if !req.uri().path().starts_with("/api/actors/") || (read && a.reads_without_token) {
        return next.run(req).await;
    }
    match a.auth.principal(req.headers()) {
        Ok(p) if p.role == weft_core::frames::Role::Human => next.run(req).await,
        Ok(_) => crate::serve::problem(&weft_core::frames::FramesError::Forbidden(
            "the actor desk needs the human token".into(),
        )),
        Err(e) => crate::serve::problem(&e),
    }
}

/// The desk has no authentication of its own: it only listens on loopback addresses.
fn check_loopback(addr: SocketAddr) -> Result<(), ActorsError> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(ActorsError::InvalidArgument(format!(
            "the actor desk has no authentication; serve it on a loopback address, not {addr}"
        )))
    }
}

/// Opens `root` (with the harness variables of the environment) for a server bound to `addr`
/// and returns the desk's routes to merge into it (what `weft serve --chat-root` does), behind
/// `access`; with `proposer`, that model proposes spawns on `route`; with `agents`, every node
/// gets an agent answering with that model ([`DeskState::start_agents`]) and every task node's
/// agent the host `tools`. Its event streams end when `closing` fires. The state is returned
/// too, for [`DeskState::stop_agents`] when the server stops.
pub async fn mount(
    root: &Path,
    addr: SocketAddr,
    access: DeskAccess,
    proposer: Option<crate::model::ReqwestModel>,
    agents: Option<crate::model::HostModel>,
    tools: Option<HostTools>,
    closing: ShutdownSignal,
) -> Result<(Router, DeskState), String> {
    let fail = |e: ActorsError| format!("{}: error[{}]: {e}", root.display(), e.code());
    check_loopback(addr).map_err(fail)?;
    let (config, notes) = crate::actors::config_from_env().map_err(fail)?;
    for n in notes {
        eprintln!("weft serve: note: {n}");
    }
    let owned = root.to_owned();
    let state = tokio::task::spawn_blocking(move || {
        DeskState::open(&owned, config, Duration::from_secs(10))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(fail)?;
    let state = match agents {
        Some(m) => state
            .with_host_tools(tools)
            .start_agents(m)
            .await
            .map_err(fail)?,
        None => state,
    };
    let state = state.with_model_proposer(proposer).closing_on(closing);
    Ok((
        router(state.clone()).layer(axum::middleware::from_fn_with_state(
            Arc::new(access),
            self::access,
        )),
        state,
    ))
}

/// Opens `root` and serves the desk alone on `listen` until SIGINT (Ctrl-C) or SIGTERM, with
/// the connection limits of `weft serve`'s defaults. No tokens: loopback only. Prints the URL.
/// With `proposer`, that model proposes spawns on `route`; `failpoint` arms the store for the
/// crash tests (`None` in the shipped `weft`).
pub async fn serve_root(
    root: &Path,
    config: HarnessConfig,
    listen: &str,
    wait: Duration,
    proposer: Option<crate::model::ReqwestModel>,
    failpoint: Option<Failpoint>,
) -> Result<(), ActorsError> {
    let stop = http::stop_signal();
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| ActorsError::StoreIo(format!("listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ActorsError::StoreIo(e.to_string()))?;
    check_loopback(addr)?;
    let state = {
        let root = root.to_owned();
        tokio::task::spawn_blocking(move || DeskState::open_armed(&root, config, wait, failpoint))
            .await
            .map_err(|e| ActorsError::StoreIo(e.to_string()))??
            .with_model_proposer(proposer)
    };
    println!("weft desk: http://{addr}/actors/ (root {})", root.display());
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let shutdown = Shutdown::default();
    let app = crate::serve::guard(router(state.closing_on(shutdown.signal())), addr);
    let server = tokio::spawn(http::serve(
        listener,
        app,
        http::Limits::default(),
        shutdown.signal(),
    ));
    let signal = stop.await;
    eprintln!("weft desk: {signal}: stopping");
    shutdown.start();
    server
        .await
        .map_err(|e| ActorsError::StoreIo(e.to_string()))?;
    Ok(())
}

/// Runs a core operation (`weft_core::actors::api`) with `args` and answers with its JSON.
async fn call(s: &DeskState, op: &'static str, args: Value) -> Result<Value, Problem> {
    if let (true, Some(m), Some(node), Some(text)) = (
        op == "route",
        &s.proposer,
        args["node"].as_str(),
        args["text"].as_str(),
    ) {
        // The model is asked outside the graph's lock; its answer is read and applied by the
        // core's rules in one step.
        let (node, text) = (node.to_owned(), text.to_owned());
        let chat = s
            .with(move |g| {
                Ok(proposer::ProposalContext::of(g, &node, &text)?
                    .map(|cx| proposer::proposal_request(&cx)))
            })
            .await?;
        if let Some(chat) = chat {
            let answer = m
                .ask(&chat, &mut |_| {})
                .await
                .map_err(ActorsError::from)?
                .text
                .unwrap_or_default();
            return Ok(s
                .with(move |g| {
                    let (node, text) = (
                        args["node"].as_str().unwrap_or(""),
                        args["text"].as_str().unwrap_or(""),
                    );
                    match proposer::ProposalContext::of(g, node, text)? {
                        Some(cx) => {
                            let p = proposer::parse_proposal(&cx, &answer)?;
                            api::call(g, wall_ms(), op, &args, &proposer::DecidedProposer(p))
                        }
                        None => api::call(g, wall_ms(), op, &args, &HeuristicProposer),
                    }
                })
                .await?);
        }
    }
    Ok(
        s.with(move |g| api::call(g, wall_ms(), op, &args, &HeuristicProposer))
            .await?,
    )
}

fn with_node(mut args: Value, id: String) -> Value {
    args["node"] = Value::String(id);
    args
}

/// `GET` of a view: the query string becomes the arguments.
async fn read(
    s: DeskState,
    op: &'static str,
    q: HashMap<String, String>,
    node: Option<String>,
) -> Reply {
    let mut args = json!({});
    for (k, v) in q {
        args[k.as_str()] = match v.parse::<u64>() {
            Ok(n) if k != "node" && k != "reader" && k != "scope" => json!(n),
            _ => json!(v),
        };
    }
    if let Some(id) = node {
        args["node"] = json!(id);
    }
    Ok(ok(call(&s, op, args).await?))
}

async fn graph(State(s): State<DeskState>) -> Reply {
    read(s, "graph", HashMap::new(), None).await
}

async fn view(
    State(s): State<DeskState>,
    UrlPath(view): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let op = match view.as_str() {
        "linear" => "linear",
        "grid" => "grid",
        "tree" => "tree",
        "temporal" => "temporal",
        "metathread" => "metathread",
        other => return Err(ActorsError::InvalidArgument(format!("no view `{other}`")).into()),
    };
    read(s, op, q, None).await
}

async fn fork(State(s): State<DeskState>, UrlPath(id): UrlPath<String>) -> Reply {
    read(s, "fork", HashMap::new(), Some(id)).await
}

async fn mailbox(
    State(s): State<DeskState>,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    read(s, "mailbox", q, Some(id)).await
}

async fn model(State(s): State<DeskState>, UrlPath(id): UrlPath<String>) -> Reply {
    read(
        s,
        "model",
        HashMap::from([("recent".to_owned(), "12".to_owned())]),
        Some(id),
    )
    .await
}

async fn audit(State(s): State<DeskState>) -> Reply {
    read(s, "audit", HashMap::new(), None).await
}

/// `GET /api/actors/store`: the desk's store (`kind`: `"fs"` over the root, `"memory"` with the
/// node store off) and what its spare node directories are doing (`spareNodes`: the store's
/// [`SpareNodesStatus`](crate::actors::SpareNodesStatus) as it says it, camelCase, `null` when
/// it keeps none). The thread that makes them only changes counters, so no event announces
/// them: the page reads this on its refreshes and every few seconds.
async fn store(State(s): State<DeskState>) -> Reply {
    let v = s
        .with_inner(|i| {
            Ok(match &i.store {
                Store::Fs(f) => json!({"kind": "fs", "spareNodes": f.spare_nodes_status()}),
                Store::Memory(_) => json!({"kind": "memory", "spareNodes": null}),
            })
        })
        .await?;
    Ok(ok(v))
}

/// `GET /api/actors/events`: the live stream (see [`events`] for the resumable agent lines).
/// A client that sends `Last-Event-ID` (header, or `?lastEventId=` for polyfills) first gets
/// the durable agent lines after that id (at most [`events::REPLAY_MAX`]) or one `reset` event
/// when the gap is larger; then a `change` event whose id is the newest line's; then live
/// events.
async fn events(
    State(s): State<DeskState>,
    h: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let last = h
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| q.get("lastEventId").cloned())
        .filter(|v| !v.is_empty());
    let rx = s.changes.subscribe();
    // Subscribed before the replay is read: a line is either replayed or received live.
    let live = s.events.subscribe();
    let replay = s
        .with_inner(move |i| Ok(i.journal.after(&i.graph, last.as_deref())))
        .await?;
    let mut pending: std::collections::VecDeque<Event> = replay
        .events
        .iter()
        .map(|e| {
            Event::default()
                .event("agent")
                .id(e.id.clone())
                .data(e.data.to_string())
        })
        .collect();
    if replay.reset {
        pending.push_back(reset_event(
            "the events after Last-Event-ID are not kept: re-fetch",
        ));
    }
    pending.push_back(
        Event::default()
            .event("change")
            .id(replay.newest.clone())
            .data(json!({"version": *rx.borrow()}).to_string()),
    );
    let closing = s.closing.clone();
    let next = replay.next;
    let stream = futures_util::stream::unfold(
        (rx, live, pending, closing),
        move |(mut rx, mut live, mut pending, mut closing)| async move {
            let ev = match pending.pop_front() {
                Some(e) => e,
                None => loop {
                    let closed = async {
                        match closing.as_mut() {
                            Some(c) => c.fired().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        r = rx.changed() => {
                            r.ok()?;
                            let v = *rx.borrow_and_update();
                            break Event::default()
                                .event("change")
                                .data(json!({"version": v}).to_string());
                        }
                        e = live.recv() => match e {
                            Ok(Live::Agent(e)) => {
                                break Event::default().event(e.name()).data(e.to_json().to_string())
                            }
                            Ok(Live::Delta { event, at }) => {
                                let mut d = event.to_json();
                                d["at"] = json!(at);
                                break Event::default().event(event.name()).data(d.to_string());
                            }
                            // Replayed already.
                            Ok(Live::Line(l)) if l.cursor < next => continue,
                            Ok(Live::Line(l)) => {
                                break Event::default().event("agent").id(l.id).data(l.data.to_string())
                            }
                            // A slow reader missed events: it re-fetches.
                            Err(broadcast::error::RecvError::Lagged(_)) => {
                                break reset_event("this stream fell behind: re-fetch");
                            }
                            Err(broadcast::error::RecvError::Closed) => return None,
                        },
                        _ = closed => return None,
                    }
                },
            };
            Some((Ok::<Event, Infallible>(ev), (rx, live, pending, closing)))
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// `event: reset`: the client missed durable events and re-fetches the state.
fn reset_event(reason: &str) -> Event {
    Event::default()
        .event("reset")
        .data(json!({"reason": reason}).to_string())
}

async fn spawn(State(s): State<DeskState>, h: HeaderMap, b: Bytes) -> Reply {
    let mut args = body(&h, &b)?;
    args["trigger"] = json!("user");
    Ok((StatusCode::CREATED, ok(call(&s, "spawn", args).await?)).into_response())
}

macro_rules! node_op {
    ($name:ident, $op:literal) => {
        async fn $name(
            State(s): State<DeskState>,
            UrlPath(id): UrlPath<String>,
            h: HeaderMap,
            b: Bytes,
        ) -> Reply {
            Ok(ok(call(&s, $op, with_node(body(&h, &b)?, id)).await?))
        }
    };
}

macro_rules! root_op {
    ($name:ident, $op:literal) => {
        async fn $name(State(s): State<DeskState>, h: HeaderMap, b: Bytes) -> Reply {
            Ok(ok(call(&s, $op, body(&h, &b)?).await?))
        }
    };
}

/// `POST …/messages`: with agents running, a person's line goes through the core's
/// `admit_utterance` (appended when a model is configured, the heuristic route otherwise) and
/// the agent of the node that took it (the node or a spawned child) is opened; other roles,
/// and desks without agents, append as the plain `message` operation.
async fn message(
    State(s): State<DeskState>,
    UrlPath(id): UrlPath<String>,
    h: HeaderMap,
    b: Bytes,
) -> Reply {
    let args = with_node(body(&h, &b)?, id);
    let user = args["role"].as_str().is_none_or(|r| r == "user");
    let Some(model) = s.model.clone().filter(|_| user) else {
        return Ok(ok(call(&s, "message", args).await?));
    };
    let configured = model.remote.is_some();
    let text = args["text"]
        .as_str()
        .ok_or_else(|| ActorsError::InvalidArgument("`text` must be a string".into()))?
        .to_owned();
    let node = args["node"].as_str().unwrap_or("").to_owned();
    let r = s
        .with_inner(move |i| {
            let v = weft_core::agents::admit_utterance(
                wall_ms(),
                &mut i.graph,
                &node,
                &text,
                configured,
            )
            .map_err(agents_to_actors)?;
            let target = if v["outcome"] == "spawned" {
                v["child"].as_str()
            } else {
                v["node"].as_str()
            };
            if let (Some(t), Some(rt)) = (target, i.agents.as_mut()) {
                rt.want(t);
            }
            Ok(v)
        })
        .await?;
    Ok(ok(r))
}

/// `GET /api/actors/agents`: the agents' model and every open agent's state.
async fn agents(State(s): State<DeskState>) -> Reply {
    let info = s.model.as_ref().map(|m| m.info.clone());
    let partials = s.partials.clone();
    let states = s
        .with_inner(move |i| {
            Ok(i.agents.as_ref().map_or(json!({}), |rt| {
                let mut st = rt.states();
                if let Some(o) = st.as_object_mut() {
                    for (n, v) in o.iter_mut() {
                        v["streaming"] = streaming(&partials, rt, n);
                    }
                }
                st
            }))
        })
        .await?;
    Ok(ok(json!({
        "model": info.unwrap_or(json!({"configured": false, "provider": null, "name": null,
            "note": "this desk runs no agents (`weft serve` runs them)"})),
        "running": s.model.is_some(),
        "agents": states,
    })))
}

/// `GET /api/actors/nodes/{id}/agent`: the node's agent state (`404 AGENT_NOT_OPEN` if none),
/// with `streaming`: the running model step's `{turn, step, text, length, truncated}` so far
/// (`length` in UTF-16 units: the `at` of the next `delta`), `null` when none runs.
async fn node_agent(State(s): State<DeskState>, UrlPath(id): UrlPath<String>) -> Reply {
    let node = id.clone();
    let partials = s.partials.clone();
    let st = s
        .with_inner(move |i| {
            if i.graph.node(&node).is_none() {
                return Err(ActorsError::UnknownNode(node));
            }
            Ok(i.agents.as_ref().and_then(|rt| {
                let mut v = rt.state(&node)?;
                v["streaming"] = streaming(&partials, rt, &node);
                Some(v)
            }))
        })
        .await?;
    match st {
        Some(v) => Ok(ok(v)),
        None => Ok(host_problem(
            HostError::AgentNotOpen,
            &format!("node `{id}` has no agent (yet): write to it to start one"),
        )),
    }
}

/// `POST /api/actors/nodes/{id}/interrupt` (body `{"reason"?}`): interrupts the node's turn
/// (a streaming model step is dropped, a wait cancelled) → `{"status"}`.
async fn interrupt(
    State(s): State<DeskState>,
    UrlPath(id): UrlPath<String>,
    h: HeaderMap,
    b: Bytes,
) -> Reply {
    let args = body(&h, &b)?;
    let reason = args["reason"]
        .as_str()
        .unwrap_or("interrupted from the desk")
        .to_owned();
    let node = id.clone();
    let r = s
        .with_inner(move |i| {
            if i.graph.node(&node).is_none() {
                return Err(ActorsError::UnknownNode(node));
            }
            let Some(rt) = i.agents.as_mut() else {
                return Ok(None);
            };
            let r = rt.interrupt(crate::actors::now(), &mut i.graph, &node, &reason);
            Ok(r.map(|r| (r, rt.next_deadline())))
        })
        .await?;
    // A started call has the grace period to settle; when it ends the agents run again, so a
    // call that never settled is reported uncertain without waiting for another write.
    if let Some((_, Some(at))) = &r {
        let (s, at) = (s.clone(), *at);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(
                at.since(crate::actors::mono_now()) + 1,
            ))
            .await;
            let _ = s.with_inner(|_| Ok(())).await;
        });
    }
    let r = r.map(|(r, _)| r);
    match r {
        Some(Ok(st)) => Ok(ok(json!({"node": id, "status": st.as_str()}))),
        Some(Err(e)) => Ok(agent_problem(&e)),
        None => Ok(host_problem(
            HostError::AgentNotOpen,
            &format!("node `{id}` has no agent"),
        )),
    }
}
node_op!(route, "route");
node_op!(status, "status");
node_op!(resolve, "resolve");
node_op!(archive, "archive");
node_op!(wait, "wait");
root_op!(add_ref, "ref");
root_op!(narrate, "narrate");
root_op!(bookmark, "bookmark");
root_op!(epoch, "epoch");
root_op!(reset, "reset");
root_op!(export, "export");

#[cfg(test)]
mod tests {
    use super::*;

    fn deltas(rx: &mut broadcast::Receiver<Live>) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        while let Ok(l) = rx.try_recv() {
            if let Live::Delta {
                event: AgentEvent::Delta { text, .. },
                at,
            } = l
            {
                out.push((text, at));
            }
        }
        out
    }

    #[test]
    fn a_gated_step_streams_to_nobody_until_its_gate_opens() {
        let (events, mut rx) = broadcast::channel(16);
        let partials = Partials::default();
        let s = StepStream::new("n".into(), 1, 2, true, partials.clone(), events);
        s.delta("hé");
        s.delta("llo");
        assert!(deltas(&mut rx).is_empty(), "no delta before the gate opens");
        assert!(lock(&partials).is_empty(), "no partial text either");
        s.open();
        assert_eq!(deltas(&mut rx), [("héllo".to_owned(), 0)]);
        s.delta("!");
        assert_eq!(deltas(&mut rx), [("!".to_owned(), 5)]);
        let ps = lock(&partials);
        let p = ps.get("n").unwrap();
        assert_eq!((p.step, p.text.as_str(), p.units), (2, "héllo!", 6));
    }

    #[test]
    fn an_ungated_step_streams_at_once() {
        let (events, mut rx) = broadcast::channel(16);
        let partials = Partials::default();
        let s = StepStream::new("n".into(), 1, 2, false, partials.clone(), events);
        assert_eq!(lock(&partials).get("n").map(|p| p.units), Some(0));
        s.delta("a");
        assert_eq!(deltas(&mut rx), [("a".to_owned(), 0)]);
    }

    #[test]
    fn held_text_is_bounded() {
        let mut h = Held::default();
        h.push(&"x".repeat(MAX_PARTIAL));
        h.push("yz");
        assert_eq!(h.text.len(), MAX_PARTIAL);
        assert_eq!(h.units, MAX_PARTIAL as u64 + 2);
        assert!(h.truncated);
    }

    #[tokio::test]
    async fn a_gate_dropped_closed_does_not_open() {
        assert!(gate_opens(None).await);
        let (tx, rx) = watch::channel(false);
        drop(tx);
        assert!(!gate_opens(Some(rx)).await, "the flush failed");
        let (tx, rx) = watch::channel(false);
        tx.send_replace(true);
        drop(tx);
        assert!(gate_opens(Some(rx)).await, "opened, then dropped");
    }
}
