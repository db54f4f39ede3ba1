//! The native agent runtime: every node of a `$CHAT_ROOT` may have a
//! [`NodeAgent`](weft_core::agents::NodeAgent), driven here in the core's call order (see
//! `weft_core::agents`). The host only carries bytes: after a change it syncs the agents
//! ([`Runtime::sync_open`]) and starts the reads they release before any flush
//! ([`Runtime::release`]: a model step is asked while its lines are written); then
//! [`Runtime::pump`] performs each batch of lines (through the caller's `flush`, which
//! applies — fsyncing as the batch's `Durability`, decided by the core, says — and
//! acknowledges), syncs every agent, and turns the outputs the lines allow into work:
//!
//! - a released model step becomes a [`ModelJob`] (the request built from the node slice with
//!   `ModelInput::chat_request`) that the host runs with its model client ([`run_model`]); its
//!   answer comes back with [`Runtime::finish`]. With no model configured the built-in model
//!   answers inside the pump (one text delta).
//! - `Spawned` opens the child's agent; graph tools are performed by the core. A call of a host
//!   tool the runtime runs ([`Runtime::set_host_tools`], e.g. the DGP tools in `weft serve`)
//!   becomes a [`CallJob`] ([`Runtime::take_calls`]) that the host runs on a task with its
//!   [`HostTools::run`]; the settlement comes back with [`Runtime::settle`]. An `AbortCall`
//!   (an interrupt) raises the job's abort signal; a call of a tool without a handler is
//!   settled as thrown with the core's `HandlerFailure::UnknownTool` (`UNKNOWN_TOOL`). A call
//!   of a Worker-job tool ([`HostTools::jobs`],
//!   `weft serve --job-tool`) starts a job instead; the pump carries its journal and its note
//!   to the agent ([`crate::agent_jobs`]).
//! - [`Runtime::interrupt`] drops the running step's abort sender (the HTTP stream is dropped)
//!   and interrupts the turn.
//!
//! Agents are opened at start for nodes that already hold agent lines (resumed from disk, with
//! the core's recovery lines), and lazily for nodes a person writes to ([`Runtime::want`]) and
//! children the agents spawn. Every released output and text delta goes to the runtime's sink
//! as an [`AgentEvent`] (the desk streams them over SSE; `weft chat` prints them).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use weft_core::Mono;
use weft_core::actors::{ActorGraph, ActorsError};
use weft_core::agents::{AGENT_FIELD, AgentConfig, AgentOutput, AgentsError, NodeAgent};
use weft_core::model::{ChatRequest, StreamEvent};
use weft_core::time::Now;
use weft_core::tools::{
    HandlerFailure, InterruptStatus, InvocationId, ModelResponse, Output, Settlement, StepId,
    ToolDecl, TurnEnd, TurnId,
};

use crate::model::ReqwestModel;

/// What a runtime publishes for live views.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentEvent {
    /// A released agent output (`AgentOutput::to_json`) of `node`.
    Output {
        /// The node whose agent released it.
        node: String,
        /// The output's JSON form.
        output: Value,
    },
    /// A streamed text delta of a model step.
    Delta {
        /// The node whose agent asked.
        node: String,
        /// The turn of the step.
        turn: u64,
        /// The step.
        step: u64,
        /// The text that arrived.
        text: String,
    },
}

impl AgentEvent {
    /// The SSE event name: `agent` or `delta`.
    pub fn name(&self) -> &'static str {
        match self {
            AgentEvent::Output { .. } => "agent",
            AgentEvent::Delta { .. } => "delta",
        }
    }

    /// The event's data: `{"node", ...output}` or `{"node", "turn", "step", "text"}`.
    pub fn to_json(&self) -> Value {
        match self {
            AgentEvent::Output { node, output } => {
                let mut v = output.clone();
                v["node"] = json!(node);
                v
            }
            AgentEvent::Delta {
                node,
                turn,
                step,
                text,
            } => json!({"node": node, "turn": turn, "step": step, "text": text}),
        }
    }
}

/// One released model step for the host to run (see [`run_model`]).
#[derive(Debug)]
pub struct ModelJob {
    /// The node whose agent asks.
    pub node: String,
    /// The turn of the step.
    pub turn: TurnId,
    /// The step (answer it with [`Runtime::finish`]).
    pub step: StepId,
    /// The request, built from the node slice.
    pub chat: ChatRequest,
    /// Resolves when the step is interrupted (its sender is dropped): drop the stream then.
    pub abort: oneshot::Receiver<()>,
}

/// One started call of a host tool for the host to run with [`HostTools::run`]; settle it with
/// [`Runtime::settle`].
#[derive(Debug)]
pub struct CallJob {
    /// The node whose agent called.
    pub node: String,
    /// The call's invocation.
    pub invocation: InvocationId,
    /// The tool called.
    pub tool: String,
    /// Its arguments (already checked against the tool's schema by the core).
    pub arguments: Value,
    /// Becomes `true` when the call is aborted (an interrupt); its sender is dropped when the
    /// runtime forgets the call.
    pub abort: watch::Receiver<bool>,
}

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Runs one host tool call: `(tool, arguments, abort signal)` → its settlement.
pub type CallHandler =
    Arc<dyn Fn(String, Value, watch::Receiver<bool>) -> BoxFuture<Settlement<Value>> + Send + Sync>;

/// Host tools a runtime offers to its task nodes' agents, with their handler.
#[derive(Clone)]
pub struct HostTools {
    /// The declarations registered on every task node's agent.
    pub decls: Vec<ToolDecl>,
    /// Runs a call of any of them.
    pub run: CallHandler,
    /// The job host of the Worker-job tools among them (`weft serve --job-tool`): their calls
    /// start jobs there instead of running `run` (see [`crate::agent_jobs`]).
    pub jobs: Option<Arc<crate::agent_jobs::AgentJobs>>,
}

impl std::fmt::Debug for HostTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.decls.iter().map(|d| d.name.as_str()).collect();
        f.debug_struct("HostTools").field("decls", &names).finish()
    }
}

/// Where released outputs and deltas go.
pub type Sink = Box<dyn FnMut(AgentEvent) + Send>;

/// The host tools a task node's agent gets (a hook for hosts; none by default).
pub type ToolsFor = Box<dyn Fn(&str) -> Vec<ToolDecl> + Send>;

/// The agents of one actor graph. See the [module docs](self).
pub struct Runtime {
    agents: BTreeMap<String, NodeAgent>,
    config: AgentConfig,
    builtin: bool,
    system: Option<String>,
    running: HashMap<String, (StepId, oneshot::Sender<()>)>,
    to_open: Vec<String>,
    sink: Sink,
    tools: Option<ToolsFor>,
    /// Host tools whose calls become [`CallJob`]s.
    handled: HashSet<String>,
    /// Started host calls not taken yet.
    calls: Vec<CallJob>,
    /// The abort signals of the host calls running, by node and invocation.
    aborts: HashMap<(String, InvocationId), watch::Sender<bool>>,
    /// How each node's last turn ended.
    ends: HashMap<String, TurnEnd>,
    /// The job host of the Worker-job tools (see [`HostTools::jobs`]).
    jobs: Option<Arc<crate::agent_jobs::AgentJobs>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .field("builtin", &self.builtin)
            .finish()
    }
}

/// Whether `node`'s chat holds any agent line (it was run by an agent before).
pub fn has_agent_lines(graph: &ActorGraph, node: &str) -> bool {
    graph.chat(node).unwrap_or_default().iter().any(|e| {
        e.ok()
            .is_some_and(|l| l.extra.get(AGENT_FIELD).is_some_and(Value::is_object))
    })
}

fn ignore_stale(r: Result<(), AgentsError>) -> Result<(), AgentsError> {
    match r {
        Err(AgentsError::Tools(_)) => Ok(()),
        other => other,
    }
}

impl Runtime {
    /// A runtime whose steps are answered by a configured model (`builtin == false`: the host
    /// runs [`ModelJob`]s) or by the built-in model (`builtin == true`: inside the pump).
    pub fn new(config: AgentConfig, builtin: bool, sink: Sink) -> Runtime {
        Runtime {
            agents: BTreeMap::new(),
            config,
            builtin,
            system: None,
            running: HashMap::new(),
            to_open: Vec::new(),
            sink,
            tools: None,
            handled: HashSet::new(),
            calls: Vec::new(),
            aborts: HashMap::new(),
            ends: HashMap::new(),
            jobs: None,
        }
    }

    /// Text put before every step's system text (e.g. `weft chat --system`).
    pub fn with_system(mut self, system: Option<String>) -> Runtime {
        self.system = system.filter(|s| !s.trim().is_empty());
        self
    }

    /// The hook that declares host tools for an agent when it opens (task nodes only: the
    /// core refuses work tools on the discussion surface, and such a refusal is skipped).
    pub fn set_tools(&mut self, tools: ToolsFor) {
        self.tools = Some(tools);
    }

    /// Declares `tools` on every task node's agent when it opens (see
    /// [`set_tools`](Self::set_tools)) and turns their calls into [`CallJob`]s the host runs
    /// with `tools.run` ([`take_calls`](Self::take_calls), [`settle`](Self::settle)).
    pub fn set_host_tools(&mut self, tools: &HostTools) {
        self.handled = tools.decls.iter().map(|d| d.name.clone()).collect();
        self.jobs = tools.jobs.clone();
        let decls = tools.decls.clone();
        self.set_tools(Box::new(move |_| decls.clone()));
    }

    /// The host tool calls started since the last take, for the host to run.
    pub fn take_calls(&mut self) -> Vec<CallJob> {
        std::mem::take(&mut self.calls)
    }

    /// The number of host tool calls running on the host.
    pub fn running_calls(&self) -> usize {
        self.aborts.len()
    }

    /// The earliest deadline of any agent (an interrupt's grace period): pump at that time.
    pub fn next_deadline(&self) -> Option<Mono> {
        self.agents
            .values()
            .filter_map(NodeAgent::poll_timeout)
            .min()
    }

    /// The host's handler settled `node`'s call `invocation`; a stale settlement (the agent
    /// already closed the call) is dropped. Call [`pump`](Self::pump) afterwards.
    pub fn settle(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        node: &str,
        invocation: InvocationId,
        settlement: Settlement<Value>,
    ) -> Result<(), AgentsError> {
        self.aborts.remove(&(node.to_owned(), invocation));
        let Some(a) = self.agents.get_mut(node) else {
            return Ok(());
        };
        ignore_stale(a.on_call_settled(now, graph, invocation, settlement))
    }

    /// Whether a real model answers (otherwise the built-in one).
    pub fn model_configured(&self) -> bool {
        !self.builtin
    }

    /// Opens the agents of every node that holds agent lines (their unfinished turns are
    /// closed by the core's recovery lines); returns the nodes opened with their reports.
    pub fn resume_all(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
    ) -> Result<Vec<(String, Value)>, AgentsError> {
        let mut out = Vec::new();
        for id in graph.node_ids() {
            let n = id.as_str().to_owned();
            if has_agent_lines(graph, &n)
                && let Some(r) = self.open(now, graph, &n)?
            {
                out.push((n, r));
            }
        }
        Ok(out)
    }

    /// Opens `node`'s agent unless it is open; returns its resume report when it was opened.
    pub fn open(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        node: &str,
    ) -> Result<Option<Value>, AgentsError> {
        if self.agents.contains_key(node) {
            return Ok(None);
        }
        let (mut a, report) = NodeAgent::open(now, graph, node, self.config.clone())?;
        if let Some(tools) = &self.tools {
            for d in tools(node) {
                match a.register_tool(d) {
                    Ok(_) => {}
                    Err(AgentsError::Actors(ActorsError::CadenceViolation { .. })) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.agents.insert(node.to_owned(), a);
        Ok(Some(report.to_json()))
    }

    /// Asks for `node`'s agent to be opened at the next [`pump`](Self::pump) (a person wrote to
    /// it).
    pub fn want(&mut self, node: &str) {
        if !self.agents.contains_key(node) {
            self.to_open.push(node.to_owned());
        }
    }

    /// Whether `node` has an agent.
    pub fn has(&self, node: &str) -> bool {
        self.agents.contains_key(node)
    }

    /// `node`'s agent state (`NodeAgent::state`), if it has an agent.
    pub fn state(&self, node: &str) -> Option<Value> {
        self.agents.get(node).map(NodeAgent::state)
    }

    /// Every agent's state, by node.
    pub fn states(&self) -> Value {
        Value::Object(
            self.agents
                .iter()
                .map(|(k, a)| (k.clone(), a.state()))
                .collect(),
        )
    }

    /// How `node`'s last turn (in this runtime) ended.
    pub fn last_end(&self, node: &str) -> Option<&TurnEnd> {
        self.ends.get(node)
    }

    /// Whether `node`'s agent is idle with no task queued.
    pub fn is_quiet(&self, node: &str) -> bool {
        self.agents
            .get(node)
            .is_none_or(|a| a.state()["phase"] == "idle" && a.state()["queuedTasks"] == 0)
    }

    /// The number of model steps running on the host.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// The model step of `node` running on the host, if any.
    pub fn running_step(&self, node: &str) -> Option<StepId> {
        self.running.get(node).map(|r| r.0)
    }

    /// The nodes that have an open agent, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.agents.keys().map(String::as_str)
    }

    /// Syncs every open agent with the graph (and fires due timeouts), writing nothing yet.
    /// Hosts call it right after a change, before they flush, so that the lines the change
    /// makes an agent write (a person's line and its `turn_start`) join its batch and become
    /// durable in one round (the core's group commit); [`pump`](Self::pump) does the rest.
    pub fn sync_open(&mut self, now: Now, graph: &mut ActorGraph) -> Result<(), AgentsError> {
        for a in self.agents.values_mut() {
            if a.poll_timeout().is_some_and(|t| t <= now.mono) {
                a.handle_timeout(now, graph)?;
            }
            a.sync(now, graph)?;
        }
        Ok(())
    }

    /// Runs the call order until quiet: `flush` (apply — fsync when the batch is synced — and
    /// ack every queued batch),
    /// open wanted agents, sync every agent, poll what durable lines allow. Returns the model
    /// steps the host must run.
    pub fn pump(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        flush: &mut dyn FnMut(&mut ActorGraph) -> Result<(), ActorsError>,
    ) -> Result<Vec<ModelJob>, AgentsError> {
        let mut jobs = Vec::new();
        for _ in 0..64 {
            flush(graph)?;
            for n in std::mem::take(&mut self.to_open) {
                if graph.node(&n).is_some() {
                    self.open(now, graph, &n)?;
                }
            }
            self.sync_open(now, graph)?;
            let mut progressed = match &self.jobs {
                Some(j) => j.carry(now, graph, &mut self.agents)?,
                None => false,
            };
            flush(graph)?;
            progressed |= self.poll_all(now, graph, &mut jobs)?;
            if !progressed && !graph.has_batches() && self.to_open.is_empty() {
                break;
            }
        }
        Ok(jobs)
    }

    /// Releases what the agents' lines allow now (see `NodeAgent::poll_output`): called
    /// before a flush it releases the reads — a model request becomes a [`ModelJob`] the host
    /// starts while it makes the lines before it durable —; after one, also the effects the
    /// acknowledged lines allow. Returns the model steps to run (appended to `jobs`) and
    /// whether anything moved (an answer, a settlement, an agent to open).
    fn poll_all(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        jobs: &mut Vec<ModelJob>,
    ) -> Result<bool, AgentsError> {
        let mut progressed = false;
        let Runtime {
            agents,
            builtin,
            system,
            running,
            to_open,
            sink,
            ends,
            handled,
            calls,
            aborts,
            jobs: job_tools,
            ..
        } = self;
        for (n, a) in agents.iter_mut() {
            while let Some(o) = a.poll_output(graph) {
                sink(AgentEvent::Output {
                    node: n.clone(),
                    output: o.to_json(),
                });
                match o {
                    AgentOutput::Session(Output::ModelRequest { turn, step }) => {
                        let Some(mut input) = a.model_input(graph) else {
                            continue;
                        };
                        if *builtin {
                            let r = input.builtin_answer();
                            if let Some(text) = &r.text {
                                sink(AgentEvent::Delta {
                                    node: n.clone(),
                                    turn: turn.0,
                                    step: step.0,
                                    text: text.clone(),
                                });
                            }
                            ignore_stale(a.on_model_response(now, graph, step, r))?;
                            progressed = true;
                        } else {
                            if let Some(s) = system.as_deref() {
                                input.system = format!("{s}\n\n{}", input.system);
                            }
                            let (tx, rx) = oneshot::channel();
                            running.insert(n.clone(), (step, tx));
                            jobs.push(ModelJob {
                                node: n.clone(),
                                turn,
                                step,
                                chat: input.chat_request(),
                                abort: rx,
                            });
                        }
                    }
                    AgentOutput::Session(Output::AbortModel { step })
                        if running.get(n).is_some_and(|r| r.0 == step) =>
                    {
                        running.remove(n);
                    }
                    AgentOutput::Session(Output::StartCall {
                        invocation,
                        tool,
                        arguments,
                        ..
                    }) if job_tools.as_ref().is_some_and(|j| j.handles(&tool)) => {
                        let j = job_tools.as_ref().expect("checked");
                        j.start(now, graph, n, a, invocation, &tool, arguments)?;
                        progressed = true;
                    }
                    AgentOutput::Session(Output::StartCall {
                        invocation,
                        tool,
                        arguments,
                        ..
                    }) if handled.contains(&tool) => {
                        let (tx, rx) = watch::channel(false);
                        aborts.insert((n.clone(), invocation), tx);
                        calls.push(CallJob {
                            node: n.clone(),
                            invocation,
                            tool,
                            arguments,
                            abort: rx,
                        });
                    }
                    AgentOutput::Session(Output::AbortCall { invocation, .. }) => {
                        if let Some(tx) = aborts.get(&(n.clone(), invocation)) {
                            tx.send_replace(true);
                        }
                    }
                    AgentOutput::Session(Output::StartCall {
                        invocation, tool, ..
                    }) => {
                        // No host handler is registered for this tool on this host.
                        a.on_call_settled(
                            now,
                            graph,
                            invocation,
                            Settlement::from(HandlerFailure::UnknownTool(tool)),
                        )?;
                        progressed = true;
                    }
                    AgentOutput::Session(Output::TurnEnded { end, .. }) => {
                        ends.insert(n.clone(), end);
                    }
                    AgentOutput::Spawned { child } => {
                        to_open.push(child);
                        progressed = true;
                    }
                    _ => {}
                }
            }
        }
        Ok(progressed)
    }

    /// The model steps the agents release before a flush (reads: see
    /// `NodeAgent::poll_output`). Hosts call it after [`sync_open`](Self::sync_open) and
    /// start the jobs before they flush, so that the model is asked while the lines that
    /// precede the request become durable; [`pump`](Self::pump) then flushes and releases
    /// the rest. The jobs are appended to `jobs`, also those released before an error (their
    /// steps are running: the host starts them or [aborts](Self::abort_released) them).
    ///
    /// With the built-in model it releases nothing: its answer is computed inside the
    /// runtime, so asking it early gains nothing, and [`pump`](Self::pump) answers it after
    /// the person's line is durable (its lines then go in a batch of their own).
    pub fn release(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        jobs: &mut Vec<ModelJob>,
    ) -> Result<(), AgentsError> {
        if self.builtin {
            return Ok(());
        }
        self.poll_all(now, graph, jobs).map(|_| ())
    }

    /// Forgets the released model steps `steps` (node, step) that are still running: their
    /// abort senders are dropped, so [`run_model`] returns `None`. Hosts call it when the
    /// flush that had to follow [`release`](Self::release) failed: nobody may see a step
    /// whose request is not durable.
    pub fn abort_released(&mut self, steps: &[(String, StepId)]) {
        for (node, step) in steps {
            if self.running.get(node).is_some_and(|r| r.0 == *step) {
                self.running.remove(node);
            }
        }
    }

    /// The host's model answered (or failed) `node`'s `step`; a stale answer (the step was
    /// interrupted meanwhile) is dropped. Call [`pump`](Self::pump) afterwards.
    pub fn finish(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        node: &str,
        step: StepId,
        result: Result<ModelResponse, String>,
    ) -> Result<(), AgentsError> {
        if self.running.get(node).is_some_and(|r| r.0 == step) {
            self.running.remove(node);
        }
        let Some(a) = self.agents.get_mut(node) else {
            return Ok(());
        };
        ignore_stale(match result {
            Ok(r) => a.on_model_response(now, graph, step, r),
            Err(m) => a.on_model_error(now, graph, step, &m),
        })
    }

    /// Interrupts `node`'s turn (a running model stream is dropped; a wait is cancelled).
    /// `None` when the node has no agent.
    pub fn interrupt(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        node: &str,
        reason: &str,
    ) -> Option<Result<InterruptStatus, AgentsError>> {
        let a = self.agents.get_mut(node)?;
        self.running.remove(node);
        if let Some(j) = &self.jobs {
            // The jobs the node's calls started stop with its turn.
            j.cancel_node(node, reason);
        }
        Some(a.interrupt(now, graph, reason))
    }

    /// Interrupts every running model step (the host is stopping): the streams are dropped
    /// and the turns end `interrupted` with `reason`.
    pub fn interrupt_all(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        reason: &str,
    ) -> Result<(), AgentsError> {
        let nodes: Vec<String> = self.running.keys().cloned().collect();
        for n in nodes {
            if let Some(r) = self.interrupt(now, graph, &n, reason) {
                r?;
            }
        }
        Ok(())
    }
}

/// Runs `job` with `model`, passing each text delta to `on_delta`; `None` when the step was
/// interrupted first (the future, and with it the connection, is dropped).
pub async fn run_model(
    model: &ReqwestModel,
    job: ModelJob,
    mut on_delta: impl FnMut(&str) + Send,
) -> Option<Result<ModelResponse, String>> {
    let ModelJob {
        chat, mut abort, ..
    } = job;
    let mut sink = |e: StreamEvent| {
        if let StreamEvent::TextDelta { text } = &e {
            on_delta(text);
        }
    };
    let ask = model.ask(&chat, &mut sink);
    tokio::select! {
        r = ask => Some(r.map_err(|e| e.step_message())),
        _ = &mut abort => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use weft_core::actors::{ActorStore, HarnessConfig, MemoryStore, NewLine};

    use super::*;

    fn graph() -> (ActorGraph, MemoryStore) {
        let (config, _) = HarnessConfig::from_vars(Vec::<(String, String)>::new()).unwrap();
        let mut store = MemoryStore::default();
        let snap = store.load().unwrap();
        let mut g = ActorGraph::init(
            config,
            "memory:",
            &snap,
            weft_core::Wall::from_ms(1_000),
            "test",
        )
        .unwrap();
        flusher(&mut store)(&mut g).unwrap();
        (g, store)
    }

    fn runtime(builtin: bool) -> (Runtime, Arc<Mutex<Vec<AgentEvent>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let rt = Runtime::new(
            AgentConfig::default(),
            builtin,
            Box::new(move |e| s.lock().unwrap().push(e)),
        );
        (rt, seen)
    }

    fn flusher(store: &mut MemoryStore) -> impl FnMut(&mut ActorGraph) -> Result<(), ActorsError> {
        move |g: &mut ActorGraph| {
            for b in g.take_batches() {
                let done = store.perform(&b).map_err(ActorsError::StoreIo)?;
                g.ack(done)?;
            }
            Ok(())
        }
    }

    /// `ms` on both clocks (the tests' simulated time).
    fn t(ms: u64) -> Now {
        Now::new(Mono::from_ms(ms), weft_core::Wall::from_ms(ms))
    }

    fn released(rt: &mut Runtime, now: Now, g: &mut ActorGraph) -> Vec<ModelJob> {
        let mut jobs = Vec::new();
        rt.release(now, g, &mut jobs).unwrap();
        jobs
    }

    #[test]
    fn the_builtin_model_is_not_released_before_the_flush_but_answered_by_the_pump() {
        let (mut g, mut store) = graph();
        let (mut rt, _) = runtime(true);
        rt.open(t(2_000), &mut g, "coordinator").unwrap();
        flusher(&mut store)(&mut g).unwrap();
        g.append(t(2_000).wall, "coordinator", NewLine::user("hi"))
            .unwrap();
        rt.sync_open(t(2_000), &mut g).unwrap();
        let batches = g.take_batches();
        assert_eq!(batches.len(), 1, "the person's line and `turn_start`");
        assert!(released(&mut rt, t(2_000), &mut g).is_empty());
        assert!(
            !g.has_batches(),
            "no answer was written before the person's line is durable"
        );
        for b in batches {
            let done = store.perform(&b).unwrap();
            g.ack(done).unwrap();
        }
        assert_eq!(rt.last_end("coordinator"), None);
        rt.pump(t(2_001), &mut g, &mut flusher(&mut store)).unwrap();
        assert_eq!(rt.last_end("coordinator"), Some(&TurnEnd::Completed));
    }

    #[test]
    fn aborting_a_released_step_fires_its_abort_and_forgets_it() {
        let (mut g, mut store) = graph();
        let (mut rt, _) = runtime(false);
        rt.open(t(2_000), &mut g, "coordinator").unwrap();
        flusher(&mut store)(&mut g).unwrap();
        g.append(t(2_000).wall, "coordinator", NewLine::user("hi"))
            .unwrap();
        rt.sync_open(t(2_000), &mut g).unwrap();
        let mut jobs = released(&mut rt, t(2_000), &mut g);
        assert_eq!(jobs.len(), 1);
        assert_eq!(rt.running(), 1);
        let job = jobs.remove(0);
        // Another step of the same node is not touched.
        rt.abort_released(&[("coordinator".into(), StepId(job.step.0 + 1))]);
        assert_eq!(rt.running(), 1);
        let mut abort = job.abort;
        assert!(
            abort
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Empty)
        );
        rt.abort_released(&[("coordinator".into(), job.step)]);
        assert_eq!(rt.running(), 0);
        assert_eq!(
            abort.try_recv(),
            Err(oneshot::error::TryRecvError::Closed),
            "run_model sees the abort"
        );
    }

    #[test]
    fn the_builtin_model_answers_a_wanted_node_inside_the_pump() {
        let (mut g, mut store) = graph();
        let (mut rt, seen) = runtime(true);
        g.append(t(2_000).wall, "coordinator", NewLine::user("hello"))
            .unwrap();
        rt.want("coordinator");
        let jobs = rt.pump(t(2_000), &mut g, &mut flusher(&mut store)).unwrap();
        assert!(
            jobs.is_empty(),
            "no host model step with the built-in model"
        );
        assert!(!g.has_batches(), "every line is durable");
        assert_eq!(rt.last_end("coordinator"), Some(&TurnEnd::Completed));
        assert!(rt.is_quiet("coordinator"));
        let seen = seen.lock().unwrap();
        let deltas: Vec<&AgentEvent> = seen
            .iter()
            .filter(|e| matches!(e, AgentEvent::Delta { .. }))
            .collect();
        assert_eq!(deltas.len(), 1);
        assert_eq!(seen.last().unwrap().to_json()["output"], "turn_ended");
        let chat = g.chat("coordinator").unwrap();
        let answer = chat
            .iter()
            .filter_map(|e| e.ok())
            .find(|l| l.role == weft_core::actors::Role::Assistant)
            .unwrap();
        assert!(answer.text.contains("hello"));
    }

    #[test]
    fn a_released_step_is_a_job_an_interrupt_aborts_and_a_late_answer_is_dropped() {
        let (mut g, mut store) = graph();
        let (mut rt, _) = runtime(false);
        rt.open(t(2_000), &mut g, "coordinator").unwrap();
        g.append(t(2_000).wall, "coordinator", NewLine::user("hi"))
            .unwrap();
        let mut jobs = rt.pump(t(2_000), &mut g, &mut flusher(&mut store)).unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(rt.running(), 1);
        let mut job = jobs.pop().unwrap();
        assert_eq!(job.node, "coordinator");
        assert!(job.chat.system.is_some());
        assert!(
            job.abort
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Empty)
        );
        let st = rt
            .interrupt(t(3_000), &mut g, "coordinator", "stop")
            .unwrap()
            .unwrap();
        assert_eq!(st.as_str(), "ended");
        assert_eq!(rt.running(), 0);
        assert!(
            job.abort
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Closed)
        );
        // The model's answer arriving after the interrupt changes nothing.
        rt.finish(
            t(3_001),
            &mut g,
            "coordinator",
            job.step,
            Ok(ModelResponse::text("late")),
        )
        .unwrap();
        let jobs = rt.pump(t(3_001), &mut g, &mut flusher(&mut store)).unwrap();
        assert!(jobs.is_empty());
        assert!(matches!(
            rt.last_end("coordinator"),
            Some(TurnEnd::Interrupted { .. })
        ));
        assert!(
            !g.chat("coordinator")
                .unwrap()
                .iter()
                .filter_map(|e| e.ok())
                .any(|l| l.text == "late")
        );
        assert!(rt.interrupt(t(3_002), &mut g, "nobody", "x").is_none());
    }

    #[test]
    fn a_model_step_is_released_before_its_lines_are_flushed_and_the_turn_ends_after() {
        let (mut g, mut store) = graph();
        let (mut rt, seen) = runtime(false);
        rt.open(t(2_000), &mut g, "coordinator").unwrap();
        flusher(&mut store)(&mut g).unwrap();
        let acked = g.acked();
        // The host's order: the change, `sync_open`, `release` (start the model), the flush.
        g.append(t(2_000).wall, "coordinator", NewLine::user("hi"))
            .unwrap();
        rt.sync_open(t(2_000), &mut g).unwrap();
        let mut jobs = Vec::new();
        rt.release(t(2_000), &mut g, &mut jobs).unwrap();
        assert_eq!(jobs.len(), 1, "the model is asked before the flush");
        assert_eq!(g.acked(), acked, "nothing is acknowledged yet");
        assert!(
            g.has_batches(),
            "the person's line and `turn_start` are still queued"
        );
        let mut batches = g.take_batches();
        assert_eq!(
            batches.len(),
            1,
            "one batch: the person's line and `turn_start`"
        );
        // The answer arrives while that batch is being written: its lines queue behind it and
        // the turn's end is not released.
        let step = jobs[0].step;
        rt.finish(
            t(2_001),
            &mut g,
            "coordinator",
            step,
            Ok(ModelResponse::text("hello")),
        )
        .unwrap();
        assert!(released(&mut rt, t(2_001), &mut g).is_empty());
        assert_eq!(
            rt.last_end("coordinator"),
            None,
            "the end waits for the acks"
        );
        let first = batches.remove(0);
        let done = store.perform(&first).unwrap();
        g.ack(done).unwrap();
        assert!(released(&mut rt, t(2_001), &mut g).is_empty());
        assert_eq!(
            rt.last_end("coordinator"),
            None,
            "the answer's lines are not durable yet"
        );
        rt.pump(t(2_002), &mut g, &mut flusher(&mut store)).unwrap();
        assert_eq!(rt.last_end("coordinator"), Some(&TurnEnd::Completed));
        let outputs: Vec<Value> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|e| matches!(e, AgentEvent::Output { .. }))
            .map(|e| e.to_json()["output"].clone())
            .collect();
        assert_eq!(
            outputs,
            [
                json!("turn_started"),
                json!("model_request"),
                json!("turn_ended")
            ]
        );
    }

    #[test]
    fn a_host_tool_call_is_a_job_on_task_nodes_only_and_an_interrupt_raises_its_abort() {
        let (mut g, mut store) = graph();
        let (mut rt, _) = runtime(false);
        let run: CallHandler = Arc::new(|_, _, _| Box::pin(async { Settlement::Aborted }));
        let decl = ToolDecl::new(
            "probe",
            "A test tool.",
            json!({"type": "object", "properties": {}}),
        )
        .safe_to_cancel(true);
        rt.set_host_tools(&HostTools {
            decls: vec![decl],
            run,
            jobs: None,
        });
        weft_core::actors::api::call(
            &mut g,
            t(2_000).wall,
            "spawn",
            &json!({"parent": "coordinator", "type": "task", "id": "work", "title": "Work"}),
            &weft_core::actors::HeuristicProposer,
        )
        .unwrap();
        flusher(&mut store)(&mut g).unwrap();
        // The discussion surface is refused the tool (and opens anyway); the task node has it.
        rt.open(t(2_000), &mut g, "coordinator").unwrap();
        rt.open(t(2_000), &mut g, "work").unwrap();
        g.append(t(2_000).wall, "coordinator", NewLine::user("hi"))
            .unwrap();
        g.append(t(2_000).wall, "work", NewLine::user("probe it"))
            .unwrap();
        let jobs = rt.pump(t(2_000), &mut g, &mut flusher(&mut store)).unwrap();
        let offered = |n: &str| -> Vec<String> {
            let j = jobs.iter().find(|j| j.node == n).unwrap();
            j.chat.tools.iter().map(|t| t.name.clone()).collect()
        };
        assert!(!offered("coordinator").contains(&"probe".to_owned()));
        assert!(offered("work").contains(&"probe".to_owned()));
        let step = jobs.iter().find(|j| j.node == "work").unwrap().step;
        rt.finish(
            t(2_001),
            &mut g,
            "work",
            step,
            Ok(ModelResponse::calls(vec![weft_core::tools::ToolCall::new(
                "c1",
                "probe",
                json!({}),
            )])),
        )
        .unwrap();
        assert!(
            rt.pump(t(2_001), &mut g, &mut flusher(&mut store))
                .unwrap()
                .is_empty()
        );
        let mut calls = rt.take_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(rt.running_calls(), 1);
        let call = calls.pop().unwrap();
        assert_eq!((call.node.as_str(), call.tool.as_str()), ("work", "probe"));
        assert!(!*call.abort.borrow());
        // An interrupt aborts the running call; its settlement closes the turn.
        rt.interrupt(t(2_002), &mut g, "work", "stop")
            .unwrap()
            .unwrap();
        rt.pump(t(2_002), &mut g, &mut flusher(&mut store)).unwrap();
        assert!(*call.abort.borrow());
        rt.settle(
            t(2_003),
            &mut g,
            "work",
            call.invocation,
            Settlement::Aborted,
        )
        .unwrap();
        rt.pump(t(2_003), &mut g, &mut flusher(&mut store)).unwrap();
        assert_eq!(rt.running_calls(), 0);
        assert!(matches!(
            rt.last_end("work"),
            Some(TurnEnd::Interrupted { .. })
        ));
        let results: Vec<String> = g
            .chat("work")
            .unwrap()
            .iter()
            .filter_map(|e| e.ok())
            .filter(|l| {
                l.extra
                    .get(AGENT_FIELD)
                    .is_some_and(|a| a["entry"] == "tool_result")
            })
            .map(|l| {
                let a = &l.extra[AGENT_FIELD];
                format!("{} {}", a["status"], a["evidence"])
            })
            .collect();
        // The core's rule: an acknowledged abort is uncertain, with that evidence.
        assert_eq!(results, [r#""uncertain" "abort_acknowledged""#]);
    }
}
