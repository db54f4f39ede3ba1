//! Agents on actor nodes: one agent runtime where every agent *is* an actor node.
//!
//! A [`NodeAgent`] binds an agent session ([`crate::tools::Session`]) to one node of an
//! [`ActorGraph`]. The node is the agent's state: every transcript entry the session produces
//! (turn boundaries, the model's answers with their calls, call results, mail, jobs the calls
//! started, waits) becomes a line of the node's `chat.jsonl` with an additive `agent` field
//! (other readers, such as dev-centr/harness, ignore it and still read `role` and `text`). The
//! session keeps only the running step in memory; the model request of every step is built
//! from the node's lines ([`slice`]), not from a RAM transcript.
//!
//! The binding's rules live here, once:
//!
//! - **What becomes a line**, with which role: on the discussion surface (coordinator,
//!   discussion, disambiguation) only the conversation, one-line routing markers for the
//!   agent's graph tools and turn boundaries (`system`); tool noise, jobs and mail belong to
//!   task nodes (a host that offers a discussion node a work tool is refused with
//!   `CADENCE_VIOLATION`).
//! - **What the model sees** ([`slice`]): the node's recent lines within the host's context
//!   budget, rebuilt as a transcript, with a system text holding the node, its mailbox, its
//!   children's mailboxes (never their transcripts), its waits, the wait graph's maybe-stale
//!   warnings and the git close-out addendum.
//! - **When a step runs**: the wait graph. Under `enforce` (or an enforced subscription) a
//!   model step whose node waits on a non-terminal mailbox is not released to the host; the
//!   agent is `waiting` (a `wait` line), stays cancellable, and the step is released by itself
//!   when the target turns terminal. A node paused by a disambiguation child waits the same way.
//! - **Durability before effects**: an effect (a call to start, a turn's end, a spawned
//!   child, a wait, ...) is released to the host only once every line written before it is
//!   acknowledged by the store ([`ActorGraph::ack`]) *as synced*: queuing an effect is a sync
//!   point ([`ActorGraph::require_synced`]), so the batch it waits for is
//!   [`Durability::Synced`] (fsynced, with every earlier batch). A call is never started, and
//!   a turn never reported ended, on the strength of lines a crash — a power loss included —
//!   could lose. A model request is a read ([`is_read`]): it is released as soon as the lines
//!   before it are queued, and those lines are only [`Durability::Written`] (visible to a
//!   restart after the process is killed; no fsync): nothing outside the host has been told
//!   about them. The turn's end (or the call that follows) syncs them with the answer in one
//!   round — one fsync per plain turn. The same holds for a person's line acknowledged only
//!   with the turn's end ([`admit_user_line`] with [`LineAck::WithTurnEnd`]); one the host
//!   acknowledges on store (the desk's `POST`) is synced first. Acknowledgements are sync
//!   points too: a job note or observation written as mail ([`NodeAgent::deliver_note`],
//!   [`NodeAgent::post_observation`]), a job's start line, the recovery lines of
//!   [`NodeAgent::open`]. What a crash leaves: a `SIGKILL` loses nothing written; a power
//!   loss before the sync point may lose the turn's start (and a line acknowledged with the
//!   turn's end), never an acknowledged line — the restart then finds no turn, or, if the
//!   lines survived, an interrupted step, as for any step that was streaming.
//! - **Graph tools** (`spawn`, `resolve`, `wait_on`, `set_status`, `read_mailbox`) are
//!   performed by the core against the graph's rules; a spawn's routing marker is its result
//!   line. A spawned child gets its own agent (the host opens it on [`AgentOutput::Spawned`]),
//!   which takes the child's first line as its task.
//! - **Restart** ([`NodeAgent::open`]): a turn the host did not finish is ended
//!   `interrupted` ("host restarted"); a call of that turn without a result is `uncertain`
//!   with the evidence `host_restarted`; a job a call started whose completion never arrived
//!   is `lost`; mail not yet admitted is queued again; user lines not yet taken become tasks.
//!   Nothing is re-run silently: an interrupted step is asked again only when the next turn is
//!   admitted.
//!
//! # Call order
//!
//! ```text
//! open(now, graph, node, config)          // reads the node's lines, writes recovery lines
//! register_tool(decl)*                     // the host's tools (task nodes only)
//! loop {
//!     sync(now, graph)                     // after anything changed the graph (a user line,
//!                                          // a status, an ack): takes new user lines, re-checks waits
//!     on_model_response / on_model_error / on_call_settled / on_call_job /
//!     deliver_note / post_observation / wake / interrupt / handle_timeout (now, graph, ...)
//!     while let Some(o) = poll_output(graph) { ... }   // reads (a model request) now:
//!                                                      // ask the model while flushing
//!     for b in graph.take_batches() { graph.ack(store.perform(&b)?)? }
//!     while let Some(o) = poll_output(graph) { ... }   // effects once their lines are durable
//!     model_input(graph) when ModelRequest was polled; poll_timeout() for the next deadline
//! }
//! ```
//!
//! Every call borrows the graph; the agent owns no store and no clock. `now` is a
//! [`Now`]: both host clocks read together. The lines it writes carry `now.wall`; its
//! session (the interrupt grace period, `waited_ms`) runs on `now.mono`, and
//! [`NodeAgent::poll_timeout`] is a [`Mono`] deadline. A monotonic instant it persists (a job
//! note's or journal event's `at`, stamped by the registry) is written as its wall time
//! ([`Now::wall_of`]): a monotonic reading means nothing after a restart.

pub mod slice;
#[cfg(feature = "conformance")]
pub mod vectors;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use serde_json::{Map, Value, json};
use thiserror::Error;

use crate::actors::{
    ActorGraph, ActorsError, BatchId, Durability, NodeId, NodeType, Role, SpawnRequest, Status,
    Trigger, WaitMode,
};
use crate::jobs::{JobId, Note};
use crate::time::{Mono, Now, Wall};
use crate::tools::{
    HandlerId, InterruptStatus, InvocationId, Message, Output, Phase, Session, SessionConfig,
    Settlement, StepId, ToolDecl, ToolsError, TurnId,
};
use crate::vecmap::VecMap;

pub use slice::ModelInput;

/// The additive field of `chat.jsonl` lines that holds an agent's session record.
pub const AGENT_FIELD: &str = "agent";

/// The names of the tools the core performs against the graph.
pub const GRAPH_TOOLS: [&str; 5] = ["spawn", "resolve", "wait_on", "set_status", "read_mailbox"];

/// Errors of agents on nodes. Each has a stable code ([`AgentsError::code`]); a call that
/// fails changes nothing.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum AgentsError {
    /// The graph refused (unknown node, cadence, store failed, ...): its code.
    #[error(transparent)]
    Actors(#[from] ActorsError),
    /// The session refused (stale step, unknown invocation, ...): its code.
    #[error(transparent)]
    Tools(#[from] ToolsError),
    /// A host tool may not take the name of a graph tool.
    #[error("`{0}` is a graph tool the core performs; choose another name")]
    ReservedTool(String),
}

impl AgentsError {
    /// The stable string code, as JS `.code` and HTTP problem `code`.
    pub fn code(&self) -> &'static str {
        match self {
            AgentsError::Actors(e) => e.code(),
            AgentsError::Tools(e) => e.code(),
            AgentsError::ReservedTool(_) => "AGENT_TOOL_RESERVED",
        }
    }
}

impl crate::ErrorCode for AgentsError {
    fn code(&self) -> &'static str {
        AgentsError::code(self)
    }
}

/// How an agent on a node is run.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The context budget of a model request in tokens (line `tokens`, 4 bytes a token when
    /// estimated): the slice takes the most recent lines that fit.
    pub context_tokens: u64,
    /// At most this many recent lines are considered for a slice.
    pub recent_lines: usize,
    /// How long an interrupt waits for started calls (see [`SessionConfig`]).
    pub interrupt_grace_ms: u64,
    /// Model steps per turn before the turn ends with `step_limit`.
    pub max_steps_per_turn: u32,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            context_tokens: 16_000,
            recent_lines: 400,
            interrupt_grace_ms: 1000,
            max_steps_per_turn: 16,
        }
    }
}

/// Work for the host, released when the lines written before it allow (an effect once they
/// are durable, a read once they are queued: [`NodeAgent::poll_output`]).
#[derive(Clone, Debug, PartialEq)]
pub enum AgentOutput {
    /// A session output. `ModelRequest`: read [`NodeAgent::model_input`] and answer with
    /// `on_model_response`; `StartCall`: run the host's handler. Graph tools never appear.
    Session(Output),
    /// The step cannot run: the wait graph (or a disambiguation pause) blocks it.
    Waiting {
        turn: TurnId,
        step: StepId,
        on: Vec<String>,
    },
    /// The wait is over; a `ModelRequest` for the step follows.
    WaitOver { turn: TurnId, step: StepId },
    /// The agent's `spawn` created `child`: open its agent (it takes its first line as a task).
    Spawned { child: String },
}

impl AgentOutput {
    /// The JSON form, for vectors, logs and live views.
    pub fn to_json(&self) -> Value {
        match self {
            AgentOutput::Session(o) => o.to_json(),
            AgentOutput::Waiting { turn, step, on } => {
                json!({"output": "waiting", "turn": turn.0, "step": step.0, "on": on})
            }
            AgentOutput::WaitOver { turn, step } => {
                json!({"output": "wait_over", "turn": turn.0, "step": step.0})
            }
            AgentOutput::Spawned { child } => json!({"output": "spawned", "child": child}),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GraphTool {
    Spawn,
    Resolve,
    WaitOn,
    SetStatus,
    ReadMailbox,
}

/// What [`NodeAgent::open`] found and repaired.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResumeReport {
    /// The turn a restart interrupted, if any.
    pub interrupted_turn: Option<u64>,
    /// Whether that turn was waiting for its model (or blocked) when the host stopped.
    pub model_step_interrupted: bool,
    /// Calls of that turn recorded `uncertain` (host restarted).
    pub uncertain_calls: Vec<String>,
    /// Jobs whose execution died with the host, recorded `lost`.
    pub lost_jobs: Vec<u64>,
    /// Mail queued again (written before the restart, not yet admitted).
    pub requeued_mail: usize,
    /// User lines not yet taken by a turn (they become tasks at the next `sync`).
    pub pending_tasks: usize,
}

impl ResumeReport {
    /// The JSON form.
    pub fn to_json(&self) -> Value {
        json!({
            "interruptedTurn": self.interrupted_turn,
            "modelStepInterrupted": self.model_step_interrupted,
            "uncertainCalls": self.uncertain_calls,
            "lostJobs": self.lost_jobs,
            "requeuedMail": self.requeued_mail,
            "pendingTasks": self.pending_tasks,
        })
    }
}

/// The agent of one actor node. See the [module docs](self) for the rules and the call order.
#[derive(Debug)]
pub struct NodeAgent {
    node: NodeId,
    node_type: NodeType,
    config: AgentConfig,
    session: Session<Value>,
    /// History entries already written as lines.
    cursor: usize,
    graph_tools: VecMap<HandlerId, GraphTool>,
    /// Calls whose result line a graph tool already wrote (a spawn's marker).
    written_results: Vec<InvocationId>,
    queue: VecDeque<(BatchId, AgentOutput)>,
    /// The step released to the host (its `ModelRequest` was queued).
    released: Option<StepId>,
    /// The step held by the wait graph, with what it waits on.
    waiting: Option<(TurnId, StepId, Vec<String>)>,
    /// Chat lines already scanned for user input.
    scanned: u64,
    /// Task id → the user line it came from.
    task_lines: VecMap<u64, u64>,
    /// Mail written as lines and not yet admitted (line seqs).
    pending_mail: Vec<u64>,
    next_mail: u64,
    /// Jobs started by calls and not yet finished: job → call id.
    open_jobs: VecMap<u64, String>,
    /// Per journalled job: its latest repeating event not yet written, and how many such
    /// events it replaced.
    journal_latest: VecMap<u64, (Value, u64)>,
    /// The turn the entries being written belong to (the session may have moved on).
    writing_turn: Option<u64>,
    /// Lines written by the current call, committed as one batch (one fsync round).
    pending_lines: Vec<(Role, String, Map<String, Value>)>,
}

/// The side file of a node that holds the journals of the jobs its agent's calls started.
pub const JOB_JOURNAL: &str = "jobs.jsonl";

/// The journal records of `job` after sequence number `after`, from the text of a node's
/// [`JOB_JOURNAL`] (a torn last line is skipped): what an observer that reconnects missed.
/// An `elided` record says how many repeating events the file does not hold.
pub fn journal_after(text: &str, job: u64, after: u64) -> Vec<Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["job"].as_u64() == Some(job) && e["seq"].as_u64().is_some_and(|s| s > after))
        .collect()
}

fn entry(kind: &str, fields: Value) -> Map<String, Value> {
    let mut rec = Map::new();
    rec.insert("entry".into(), json!(kind));
    if let Value::Object(m) = fields {
        rec.extend(m);
    }
    let mut extra = Map::new();
    extra.insert(AGENT_FIELD.into(), Value::Object(rec));
    extra
}

fn excerpt(v: &Value, max: usize) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > max {
        let mut t: String = one_line.chars().take(max).collect();
        t.push('…');
        t
    } else {
        one_line
    }
}

impl NodeAgent {
    /// Opens the agent of `node` from its lines. A turn the previous host left unfinished is
    /// closed honestly (see the module docs) with recovery lines queued as one batch. No turn
    /// starts here: register the host's tools, then call [`sync`](Self::sync).
    pub fn open(
        now: Now,
        graph: &mut ActorGraph,
        node: &str,
        config: AgentConfig,
    ) -> Result<(NodeAgent, ResumeReport), AgentsError> {
        let meta = graph
            .node(node)
            .ok_or_else(|| ActorsError::UnknownNode(node.to_owned()))?;
        let id = NodeId::parse(node).map_err(|reason| ActorsError::InvalidNodeId {
            id: node.to_owned(),
            reason,
        })?;
        let node_type = meta.node_type.clone();
        let scan = slice::scan(graph, node);
        let mut session = Session::new(SessionConfig {
            id: format!("agent:{node}"),
            interrupt_grace_ms: config.interrupt_grace_ms,
            max_steps_per_turn: config.max_steps_per_turn,
        });
        session.resume_ids(
            scan.max_turn + 1,
            scan.max_step + 1,
            scan.max_invocation + 1,
            1,
        );
        let mut agent = NodeAgent {
            node: id,
            node_type,
            config,
            session,
            cursor: 0,
            graph_tools: VecMap::new(),
            written_results: Vec::new(),
            queue: VecDeque::new(),
            released: None,
            waiting: None,
            scanned: scan.last_task_line,
            task_lines: VecMap::new(),
            pending_mail: Vec::new(),
            next_mail: scan.max_mail + 1,
            open_jobs: VecMap::new(),
            journal_latest: VecMap::new(),
            writing_turn: None,
            pending_lines: Vec::new(),
        };
        let mut report = ResumeReport::default();
        // Recovery: an unfinished turn ends interrupted; its calls without results are uncertain.
        if let Some(open) = &scan.open_turn {
            report.interrupted_turn = Some(open.turn);
            report.model_step_interrupted = open.unanswered_calls.is_empty();
            for c in &open.unanswered_calls {
                let result = json!({
                    "invocation": c.invocation, "callId": c.call_id, "tool": c.tool,
                    "status": "uncertain", "started": true, "reason": "host restarted",
                    "evidence": "host_restarted", "mayHaveStarted": true, "step": c.step,
                });
                let role = agent.result_role(&c.tool);
                agent.write(
                    now,
                    graph,
                    role,
                    format!("{} → uncertain (host restarted)", c.tool),
                    entry("tool_result", result),
                )?;
                report.uncertain_calls.push(c.call_id.clone());
            }
            let reason = if report.model_step_interrupted {
                "host restarted during a model step"
            } else {
                "host restarted with calls running"
            };
            agent.write(
                now,
                graph,
                Role::System,
                format!("· turn {} interrupted: {reason}", open.turn),
                entry(
                    "turn_end",
                    json!({"turn": open.turn, "end": "interrupted", "reason": reason}),
                ),
            )?;
        }
        // Jobs whose completion never arrived died with the host: lost.
        for (job, call_id) in &scan.open_jobs {
            let seq = agent.next_mail;
            agent.next_mail += 1;
            let note = json!({
                "job": job, "outcome": "lost", "evidence": "host_restarted",
                "summary": "the host restarted: the job's execution died with it", "callId": call_id,
            });
            agent.write(
                now,
                graph,
                Role::Completion,
                format!("✉ job {job} lost: the host restarted"),
                entry(
                    "mail",
                    json!({"seq": seq, "at": now.wall, "kind": "job", "note": note}),
                ),
            )?;
            agent.requeue_mail(now, seq);
            report.lost_jobs.push(*job);
        }
        for seq in &scan.pending_mail {
            agent.requeue_mail(now, *seq);
        }
        report.requeued_mail = scan.pending_mail.len();
        report.pending_tasks = slice::user_lines_after(graph, node, scan.last_task_line).len();
        agent.flush_lines(now, graph)?;
        // The report is an acknowledgement of the recovery lines.
        graph.require_synced();
        agent.register_graph_tools()?;
        Ok((agent, report))
    }

    fn requeue_mail(&mut self, now: Now, seq: u64) {
        self.pending_mail.push(seq);
        self.session
            .post_observation(now.mono, "mail", json!({"line_seq": seq}));
        // The session's own mail output says nothing the lines do not; drop it.
        self.session.drain_outputs().for_each(drop);
    }

    fn is_discussion(&self) -> bool {
        self.node_type.is_discussion_surface()
    }

    fn result_role(&self, tool: &str) -> Role {
        if self.is_discussion() && GRAPH_TOOLS.contains(&tool) {
            Role::Routing
        } else {
            Role::Tool
        }
    }

    fn register_graph_tools(&mut self) -> Result<(), AgentsError> {
        let discussion = self.is_discussion();
        let disamb = self.node_type == NodeType::Disambiguation;
        let mut decls: Vec<(GraphTool, ToolDecl)> = Vec::new();
        if !disamb {
            decls.push((
                GraphTool::Spawn,
                ToolDecl::new(
                    "spawn",
                    "Fork a new bounded context: a child node with its own agent. Use it when the \
                     conversation drifts to a subject that deserves its own context (discussion), \
                     for a bounded piece of work (task), or when you cannot tell whether new lines \
                     continue this topic (disambiguation: this node pauses until it resolves). \
                     `message` is what the child is asked; read its mailbox later, never its \
                     transcript. `wait` declares a wait on the child (enforce: your next model \
                     step waits until the child is done).",
                    json!({"type": "object", "properties": {
                        "type": {"type": "string", "enum": ["task", "discussion", "disambiguation"]},
                        "title": {"type": "string"},
                        "topic": {"type": "string"},
                        "reason": {"type": "string"},
                        "message": {"type": "string"},
                        "wait": {"type": "string", "enum": ["warn", "enforce"]}
                    }, "required": ["type", "title"]}),
                ),
            ));
        }
        if disamb {
            decls.push((
                GraphTool::Resolve,
                ToolDecl::new(
                    "resolve",
                    "Resolve this disambiguation: say where the parent's unclear lines belong. Each \
                     candidate is \"continue\" (they continue the parent), {\"node\": id} (an \
                     existing child) or {\"type\", \"title\", \"topic\"} (a new child). The parent \
                     resumes routing.",
                    json!({"type": "object", "properties": {
                        "candidates": {"type": "array"},
                        "note": {"type": "string"}
                    }, "required": ["candidates"]}),
                ),
            ));
        }
        decls.push((
            GraphTool::WaitOn,
            ToolDecl::new(
                "wait_on",
                "Declare (or remove, with mode null) a wait on another node's mailbox: warn = it \
                 may be stale, keep working; enforce = your model steps wait until it is terminal.",
                json!({"type": "object", "properties": {
                    "node": {"type": "string"},
                    "mode": {"type": ["string", "null"], "enum": ["warn", "enforce", null]}
                }, "required": ["node"]}),
            ),
        ));
        decls.push((
            GraphTool::SetStatus,
            ToolDecl::new(
                "set_status",
                "Publish this node's status and a one-paragraph summary to its mailbox (what \
                 the parent and the grid read). Terminal statuses: done, failed, cancelled.",
                json!({"type": "object", "properties": {
                    "status": {"type": "string", "enum": ["idle", "running", "blocked", "awaiting_user", "done", "failed", "cancelled"]},
                    "summary": {"type": "string"}
                }, "required": ["status"]}),
            ),
        ));
        if !discussion {
            let mut d = ToolDecl::new(
                "read_mailbox",
                "Read another node's mailbox (status and summary; never its transcript).",
                json!({"type": "object", "properties": {"node": {"type": "string"}}, "required": ["node"]}),
            );
            d.supports_parallel = true;
            decls.push((GraphTool::ReadMailbox, d));
        }
        for (t, d) in decls {
            let h = self.session.register_tool(d)?;
            self.graph_tools.insert(h, t);
        }
        Ok(())
    }

    /// Declares a host tool (ops, Worker jobs, DGP tools). Refused on the discussion surface
    /// (`CADENCE_VIOLATION`: work belongs to task nodes, which a discussion agent spawns) and
    /// for the names of graph tools.
    pub fn register_tool(&mut self, decl: ToolDecl) -> Result<HandlerId, AgentsError> {
        if GRAPH_TOOLS.contains(&decl.name.as_str()) {
            return Err(AgentsError::ReservedTool(decl.name));
        }
        if self.is_discussion() {
            return Err(ActorsError::CadenceViolation {
                node: self.node.to_string(),
                node_type: self.node_type.to_string(),
                reason: format!(
                    "tool `{}` would write tool noise into the discussion surface; work tools belong \
                     to task nodes (spawn one)",
                    decl.name
                ),
            }
            .into());
        }
        Ok(self.session.register_tool(decl)?)
    }

    /// The node this agent is.
    pub fn node(&self) -> &str {
        self.node.as_str()
    }

    /// The owner id of the jobs this agent's calls start (their notes come back here).
    pub fn owner(&self) -> &crate::jobs::OwnerId {
        self.session.owner()
    }

    /// The origin to record on a job a running call submits.
    pub fn origin(&self, inv: InvocationId) -> Option<crate::jobs::Origin> {
        self.session.origin(inv)
    }

    /// The session's turn state.
    pub fn phase(&self) -> Phase {
        self.session.phase()
    }

    /// The session's counters.
    pub fn stats(&self) -> crate::tools::SessionStats {
        self.session.stats()
    }

    /// Entries of the running step the session still holds in memory (bounded by one step).
    pub fn held_entries(&self) -> usize {
        self.session.history().len()
    }

    /// What the agent is doing, for views: `{node, phase, turn, waiting, queuedTasks,
    /// pendingMail, openJobs}`.
    pub fn state(&self) -> Value {
        json!({
            "node": self.node,
            "phase": if self.waiting.is_some() { "waiting" } else { self.session.phase().as_str() },
            "turn": self.session.phase().turn().map(|t| t.0),
            "waiting": self.waiting.as_ref().map(|(_, _, on)| on.clone()),
            "queuedTasks": self.session.queued_tasks().count(),
            "pendingMail": self.pending_mail.len(),
            "openJobs": self.open_jobs.keys().copied().collect::<Vec<_>>(),
        })
    }

    // ----- inputs ---------------------------------------------------------------------------

    /// Something changed in the graph (a line, a status, an acknowledgement): new user lines
    /// of the node become tasks (one turn each, in order), and a held step is released when
    /// its waits are over.
    pub fn sync(&mut self, now: Now, graph: &mut ActorGraph) -> Result<(), AgentsError> {
        for (line, text) in slice::user_lines_after(graph, self.node.as_str(), self.scanned) {
            self.scanned = line;
            let task = self
                .session
                .submit_task(now.mono, json!({"line": line, "text": text}));
            self.task_lines.insert(task.0, line);
        }
        self.pump(now, graph)
    }

    /// The model answered the released step.
    pub fn on_model_response(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        step: StepId,
        response: crate::tools::ModelResponse,
    ) -> Result<(), AgentsError> {
        self.answer(now, graph, step, |s| {
            s.on_model_response(now.mono, step, response)
        })
    }

    /// The model step failed.
    pub fn on_model_error(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        step: StepId,
        message: &str,
    ) -> Result<(), AgentsError> {
        self.answer(now, graph, step, |s| {
            s.on_model_error(now.mono, step, message)
        })
    }

    /// Reports the released step's answer to the session (refused for any other step).
    fn answer(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        step: StepId,
        report: impl FnOnce(&mut Session<Value>) -> Result<(), ToolsError>,
    ) -> Result<(), AgentsError> {
        if self.released != Some(step) {
            return Err(ToolsError::StaleStep(step).into());
        }
        report(&mut self.session)?;
        self.released = None;
        self.pump(now, graph)
    }

    /// A host handler settled.
    pub fn on_call_settled(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        inv: InvocationId,
        settlement: Settlement<Value>,
    ) -> Result<(), AgentsError> {
        self.session.on_call_settled(now.mono, inv, settlement)?;
        self.pump(now, graph)
    }

    /// A running call started background job `job` (submitted with [`origin`](Self::origin)
    /// and [`owner`](Self::owner)). Written as a line so a restart can say the job was lost.
    pub fn on_call_job(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        inv: InvocationId,
        job: JobId,
    ) -> Result<(), AgentsError> {
        let call_id = self
            .session
            .origin(inv)
            .and_then(|o| o.tool_call)
            .unwrap_or_default();
        self.session.on_call_job(now.mono, inv, job)?;
        self.write(
            now,
            graph,
            Role::Progress,
            format!("⚙ job {} started by call {call_id}", job.0),
            entry(
                "job",
                json!({"job": job.0, "invocation": inv.0, "callId": call_id}),
            ),
        )?;
        self.open_jobs.insert(job.0, call_id);
        self.pump(now, graph)?;
        // The job is an external effect already running: its line is made durable with it.
        graph.require_synced();
        Ok(())
    }

    /// Records a journal event (its JSON form, [`crate::jobs::JobEvent::to_json`]) of a job a
    /// call of this agent started, in the node's [`JOB_JOURNAL`]. Milestones are written as
    /// they happen; a repeating event (progress, partials, input events, late evidence) is
    /// held as the job's latest and written — with an `elided` record counting the ones it
    /// replaced — before the job's next milestone. So the file grows with the job's lifecycle,
    /// not with its progress ticks, and memory holds one event per running job. Events of other
    /// jobs are ignored (`Ok(false)`).
    ///
    /// The registry stamps an event's `at` on the monotonic clock, which means nothing once the
    /// host restarts; the journal is on disk, so the record keeps the key and carries the
    /// event's wall-clock time there ([`Now::wall_of`], with `now` read as the event arrives).
    pub fn record_job_event(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        event: &Value,
    ) -> Result<bool, AgentsError> {
        let Some(job) = event["job"].as_u64() else {
            return Err(
                ActorsError::InvalidArgument("a job event has a numeric `job`".into()).into(),
            );
        };
        if self.open_jobs.get(&job).is_none() && self.journal_latest.get(&job).is_none() {
            return Ok(false);
        }
        let mut event = event.clone();
        if let Some(at) = event["at"].as_u64() {
            event["at"] = json!(now.wall_of(Mono::from_ms(at)));
        }
        let event = &event;
        let kind = event["type"].as_str().unwrap_or("");
        if !crate::jobs::is_milestone_name(kind) {
            let elided = match self.journal_latest.remove(&job) {
                Some((_, n)) => n + 1,
                None => 0,
            };
            self.journal_latest.insert(job, (event.clone(), elided));
            return Ok(true);
        }
        let mut text = String::new();
        if let Some((latest, elided)) = self.journal_latest.remove(&job) {
            if elided > 0 {
                text.push_str(&crate::actors::line_text(&json!({
                    "job": job, "type": "elided", "count": elided,
                    "before": latest["seq"],
                })));
            }
            text.push_str(&crate::actors::line_text(&latest));
        }
        text.push_str(&crate::actors::line_text(event));
        graph.append_node_file(self.node.as_str(), JOB_JOURNAL, text)?;
        Ok(true)
    }

    fn refuse_mail(&self, what: &str) -> Result<(), AgentsError> {
        if self.is_discussion() {
            return Err(ActorsError::CadenceViolation {
                node: self.node.to_string(),
                node_type: self.node_type.to_string(),
                reason: format!("{what} is worker cadence; it belongs in a task node"),
            }
            .into());
        }
        Ok(())
    }

    /// A job completion note for this agent: written as a line (before the host acknowledges
    /// it to its registry), admitted at the next turn start; it never starts a turn.
    pub fn deliver_note(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        note: &Note,
    ) -> Result<u64, AgentsError> {
        self.refuse_mail("a job note")?;
        let seq = self.next_mail;
        let mut n = serde_json::to_value(note).expect("notes serialize");
        // The registry timed the note on the monotonic clock, which means nothing after a
        // restart: the line carries its wall-clock time under the same key.
        n["at"] = json!(now.wall_of(note.at));
        self.write(
            now,
            graph,
            Role::Completion,
            format!(
                "✉ job {} {}: {}",
                note.job.0,
                note.outcome.as_str(),
                excerpt(&json!(note.summary), 160)
            ),
            entry(
                "mail",
                json!({"seq": seq, "at": now.wall, "kind": "job", "note": n}),
            ),
        )?;
        self.next_mail += 1;
        self.open_jobs.remove(&note.job.0);
        self.requeue_mail(now, seq);
        self.pump(now, graph)?;
        // The host acknowledges the note to its registry once this is acknowledged.
        graph.require_synced();
        Ok(seq)
    }

    /// The result of an observation for this agent (admitted at the next turn start).
    pub fn post_observation(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        source: &str,
        value: Value,
    ) -> Result<u64, AgentsError> {
        self.refuse_mail("an observation result")?;
        let seq = self.next_mail;
        self.write(
            now,
            graph,
            Role::Completion,
            format!("✉ {source}: {}", excerpt(&value, 160)),
            entry(
                "mail",
                json!({"seq": seq, "at": now.wall, "kind": "observation", "source": source, "value": value}),
            ),
        )?;
        self.next_mail += 1;
        self.requeue_mail(now, seq);
        self.pump(now, graph)?;
        // Acknowledged to its source once this is acknowledged.
        graph.require_synced();
        Ok(seq)
    }

    /// The application's explicit choice to wake the agent (admits its mail in a turn).
    pub fn wake(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        reason: &str,
    ) -> Result<(), AgentsError> {
        self.session.wake(now.mono, reason);
        self.pump(now, graph)
    }

    /// Interrupts the running turn (a waiting step included: the wait is cancelled).
    pub fn interrupt(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        reason: &str,
    ) -> Result<InterruptStatus, AgentsError> {
        let st = self.session.interrupt(now.mono, reason);
        if let Some((turn, step, _)) = self.waiting.take() {
            self.write(
                now,
                graph,
                Role::System,
                "▶ wait cancelled".into(),
                entry(
                    "wait_end",
                    json!({"turn": turn.0, "step": step.0, "outcome": "cancelled"}),
                ),
            )?;
        }
        self.released = None;
        self.pump(now, graph)?;
        Ok(st)
    }

    /// The next deadline (an interrupt's grace period), if any.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Mono> {
        self.session.poll_timeout()
    }

    /// Time passed: an interrupt's grace period may have ended.
    pub fn handle_timeout(&mut self, now: Now, graph: &mut ActorGraph) -> Result<(), AgentsError> {
        self.session.handle_timeout(now.mono);
        self.pump(now, graph)
    }

    /// The next output its lines allow, oldest first: an effect (a call to start, a turn's
    /// end, a spawned child, ...) once the lines written before it are acknowledged; a read
    /// ([`is_read`]: a turn's start and its model request) as soon as they are queued, so the
    /// host asks the model while it makes them durable. Outputs keep their order: a read
    /// queued behind a held effect is held with it.
    #[must_use]
    pub fn poll_output(&mut self, graph: &ActorGraph) -> Option<AgentOutput> {
        match self.queue.front() {
            Some((b, o)) if *b <= graph.acked() || is_read(o) => {
                self.queue.pop_front().map(|(_, o)| o)
            }
            _ => None,
        }
    }

    /// Outputs held until their lines are durable.
    pub fn held_outputs(&self) -> usize {
        self.queue.len()
    }

    /// The request of the released model step, built from the node's lines.
    pub fn model_input(&self, graph: &ActorGraph) -> Option<ModelInput> {
        let step = self.released?;
        let Phase::ModelStep { turn, step: s } = self.session.phase() else {
            return None;
        };
        if s != step {
            return None;
        }
        let tools = self
            .session
            .model_request()
            .map(|r| r.tools.tools().iter().map(|t| t.decl.to_json()).collect())
            .unwrap_or_default();
        Some(slice::build(
            graph,
            self.node.as_str(),
            turn,
            step,
            &self.config,
            tools,
        ))
    }

    // ----- the pump -------------------------------------------------------------------------

    fn write(
        &mut self,
        _now: Now,
        _graph: &mut ActorGraph,
        role: Role,
        text: String,
        extra: Map<String, Value>,
    ) -> Result<(), AgentsError> {
        self.pending_lines.push((role, text, extra));
        Ok(())
    }

    /// Commits the lines written so far as one batch. Called before anything else changes the
    /// graph and before outputs are queued (their gate is the batch issued last).
    fn flush_lines(&mut self, now: Now, graph: &mut ActorGraph) -> Result<(), AgentsError> {
        if self.pending_lines.is_empty() {
            return Ok(());
        }
        let lines = std::mem::take(&mut self.pending_lines);
        // Written: a sync point follows before anything is acknowledged on them (`emit`).
        graph.append_agent_lines(now.wall, self.node.as_str(), lines, Durability::Written)?;
        Ok(())
    }

    /// Queues `out` behind the lines written so far. An effect ([`is_effect`]) is a sync
    /// point: the batch issued last becomes [`Durability::Synced`] first, so that the
    /// acknowledgement `poll_output` waits for says the lines are on stable storage.
    fn emit(&mut self, graph: &mut ActorGraph, out: AgentOutput) {
        if is_effect(&out) {
            graph.require_synced();
        }
        self.queue.push_back((graph.issued(), out));
    }

    /// Writes new transcript entries, performs graph tools, checks waits, queues outputs;
    /// repeats until the session is quiet.
    fn pump(&mut self, now: Now, graph: &mut ActorGraph) -> Result<(), AgentsError> {
        loop {
            let outs: Vec<Output> = self.session.drain_outputs().collect();
            self.persist(now, graph)?;
            let mut again = false;
            for o in outs {
                match o {
                    Output::StartCall {
                        invocation,
                        handler,
                        ref arguments,
                        ..
                    } if self.graph_tools.get(&handler).is_some() => {
                        let tool = *self.graph_tools.get(&handler).expect("checked");
                        let settlement =
                            self.run_graph_tool(now, graph, tool, invocation, arguments);
                        self.session
                            .on_call_settled(now.mono, invocation, settlement)?;
                        again = true;
                    }
                    Output::ModelRequest { .. } => {}
                    Output::MailQueued { .. } => {}
                    Output::TurnEnded { .. } => {
                        self.released = None;
                        self.waiting = None;
                        self.emit(graph, AgentOutput::Session(o));
                    }
                    Output::HandlerReleased { handler }
                        if self.graph_tools.get(&handler).is_some() => {}
                    other => self.emit(graph, AgentOutput::Session(other)),
                }
            }
            if !again {
                break;
            }
        }
        self.check_step(now, graph)
    }

    /// Releases the pending model step unless the wait graph holds it.
    fn check_step(&mut self, now: Now, graph: &mut ActorGraph) -> Result<(), AgentsError> {
        let Phase::ModelStep { turn, step } = self.session.phase() else {
            return Ok(());
        };
        if self.released == Some(step) {
            return Ok(());
        }
        let on = slice::blocked_on(graph, self.node.as_str());
        if !on.is_empty() {
            if self.waiting.as_ref().map(|w| &w.2) != Some(&on) {
                self.write(
                    now,
                    graph,
                    Role::System,
                    format!("‖ waiting on {}", on.join(", ")),
                    entry("wait", json!({"turn": turn.0, "step": step.0, "on": on})),
                )?;
                self.waiting = Some((turn, step, on.clone()));
                self.flush_lines(now, graph)?;
                self.emit(graph, AgentOutput::Waiting { turn, step, on });
            }
            return Ok(());
        }
        if self.waiting.take().is_some() {
            self.write(
                now,
                graph,
                Role::System,
                "▶ wait over".into(),
                entry(
                    "wait_end",
                    json!({"turn": turn.0, "step": step.0, "outcome": "resumed"}),
                ),
            )?;
            self.flush_lines(now, graph)?;
            self.emit(graph, AgentOutput::WaitOver { turn, step });
        }
        self.released = Some(step);
        self.emit(
            graph,
            AgentOutput::Session(Output::ModelRequest { turn, step }),
        );
        Ok(())
    }

    /// Writes the session's new transcript entries as lines and lets the session forget them.
    fn persist(&mut self, now: Now, graph: &mut ActorGraph) -> Result<(), AgentsError> {
        let new: Vec<Message<Value>> = self.session.history()[self.cursor..].to_vec();
        for m in &new {
            self.persist_one(now, graph, m)?;
        }
        self.cursor = self.session.history().len();
        let dropped = self.session.compact_history();
        self.cursor -= dropped;
        self.flush_lines(now, graph)
    }

    fn persist_one(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        m: &Message<Value>,
    ) -> Result<(), AgentsError> {
        match m {
            Message::TurnStart { turn, cause } => {
                self.writing_turn = Some(turn.0);
                let task_line = match cause {
                    crate::tools::TurnCause::Task(t) => self.task_lines.remove(&t.0),
                    _ => None,
                };
                let admitted: Vec<u64> = std::mem::take(&mut self.pending_mail);
                let cause_text = match (task_line, cause) {
                    (Some(l), _) => format!("line {l}"),
                    (None, crate::tools::TurnCause::JobWake(j)) => format!("job {} woke it", j.0),
                    (None, crate::tools::TurnCause::AppWake(r)) => format!("wake: {r}"),
                    (None, _) => "task".into(),
                };
                self.write(
                    now,
                    graph,
                    Role::System,
                    format!("· turn {} ({cause_text})", turn.0),
                    entry(
                        "turn_start",
                        json!({"turn": turn.0, "cause": cause, "taskLine": task_line, "admitted": admitted}),
                    ),
                )?;
            }
            Message::Assistant { step, text, calls } => {
                let turn = self.writing_turn;
                let shown = match (
                    text.as_deref().filter(|t| !t.trim().is_empty()),
                    calls.is_empty(),
                ) {
                    (Some(t), _) => t.to_owned(),
                    (None, false) => format!(
                        "→ {}",
                        calls
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    (None, true) => String::new(),
                };
                self.write(
                    now,
                    graph,
                    Role::Assistant,
                    shown,
                    entry(
                        "assistant",
                        json!({"turn": turn, "step": step.0, "calls": calls}),
                    ),
                )?;
            }
            Message::ToolResult { step, result } => {
                if let Some(i) = self
                    .written_results
                    .iter()
                    .position(|i| *i == result.invocation)
                {
                    self.written_results.swap_remove(i);
                    return Ok(());
                }
                let mut rec = result.to_json();
                rec["step"] = json!(step.0);
                let detail = match &result.outcome {
                    crate::tools::CallOutcome::Succeeded { value } => excerpt(value, 160),
                    o => excerpt(&o.to_json()["message"].clone().or_reason(o), 160),
                };
                let role = self.result_role(&result.tool);
                self.write(
                    now,
                    graph,
                    role,
                    format!(
                        "{} → {}{}",
                        result.tool,
                        result.outcome.status(),
                        if detail.is_empty() {
                            String::new()
                        } else {
                            format!(": {detail}")
                        }
                    ),
                    entry("tool_result", rec),
                )?;
            }
            Message::TurnEnd { turn, end } => {
                let mut rec = end.to_json();
                rec["turn"] = json!(turn.0);
                let why = rec["reason"]
                    .as_str()
                    .or(rec["message"].as_str())
                    .map(|s| format!(": {s}"))
                    .unwrap_or_default();
                self.write(
                    now,
                    graph,
                    Role::System,
                    format!("· turn {} {}{why}", turn.0, end.as_str()),
                    entry("turn_end", rec),
                )?;
            }
            // Task input is the user line itself; admitted mail was written on arrival;
            // standing values and steering are not offered on nodes.
            Message::Task { .. }
            | Message::Admitted(_)
            | Message::Standing { .. }
            | Message::Steer { .. } => {}
        }
        Ok(())
    }

    // ----- graph tools ----------------------------------------------------------------------

    fn run_graph_tool(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        tool: GraphTool,
        inv: InvocationId,
        args: &Value,
    ) -> Settlement<Value> {
        let me = self.node.to_string();
        let own = self.node.clone();
        let r = graph.as_own_writer(&own, |graph| {
            self.graph_tool(now, graph, tool, inv, args, me)
        });
        match r {
            Ok(v) => Settlement::Returned(v),
            Err(e) => Settlement::Threw {
                message: e.to_string(),
                code: Some(e.code().to_owned()),
            },
        }
    }

    fn graph_tool(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        tool: GraphTool,
        inv: InvocationId,
        args: &Value,
        me: String,
    ) -> Result<Value, ActorsError> {
        let (op, call) = match tool {
            GraphTool::Spawn => return self.spawn_tool(now, graph, inv, args),
            GraphTool::Resolve => (
                "resolve",
                json!({"node": me, "candidates": args["candidates"], "note": args["note"]}),
            ),
            GraphTool::WaitOn => (
                "wait",
                json!({"node": me, "on": args["node"], "mode": args["mode"]}),
            ),
            GraphTool::SetStatus => (
                "status",
                json!({"node": me, "status": args["status"], "summary": args["summary"]}),
            ),
            GraphTool::ReadMailbox => ("mailbox", json!({"node": args["node"], "reader": me})),
        };
        // The same operations every host exposes, with the same argument checks and errors.
        crate::actors::api::call(
            graph,
            now.wall,
            op,
            &call,
            &crate::actors::HeuristicProposer,
        )
    }

    fn spawn_tool(
        &mut self,
        now: Now,
        graph: &mut ActorGraph,
        inv: InvocationId,
        args: &Value,
    ) -> Result<Value, ActorsError> {
        let t = NodeType::parse(args["type"].as_str().unwrap_or("task"));
        if !matches!(
            t,
            NodeType::Task | NodeType::Discussion | NodeType::Disambiguation
        ) {
            return Err(ActorsError::InvalidArgument(format!(
                "type `{t}` (task, discussion or disambiguation)"
            )));
        }
        let mut r = SpawnRequest::new(self.node.as_str(), t);
        r.title = args["title"].as_str().unwrap_or("").to_owned();
        r.topic = args["topic"].as_str().unwrap_or("").to_owned();
        r.reason = args["reason"].as_str().unwrap_or("").to_owned();
        r.trigger = Trigger::Model;
        let message = args["message"]
            .as_str()
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                if r.topic.trim().is_empty() {
                    r.title.clone()
                } else {
                    r.topic.clone()
                }
            });
        r.first_line = Some(crate::actors::NewLine::user(message));
        let wait = match args["wait"].as_str() {
            None => None,
            Some("warn") => Some(WaitMode::Warn),
            Some("enforce") => Some(WaitMode::Enforce),
            Some(m) => {
                return Err(ActorsError::InvalidArgument(format!(
                    "wait `{m}` (warn or enforce)"
                )));
            }
        };
        let call_id = self
            .session
            .origin(inv)
            .and_then(|o| o.tool_call)
            .unwrap_or_default();
        // The marker is the call's result line: it carries the result record.
        let result = json!({
            "invocation": inv.0, "callId": call_id, "tool": "spawn", "status": "succeeded",
            "started": true,
        });
        r.marker_extra = entry("tool_result", result);
        let out = graph.spawn(now.wall, r)?;
        let child = out.child.to_string();
        let mut value = crate::actors::api::spawn_json(&out);
        if let Some(mode) = wait {
            // The spawn just gated this node against other writers; the wait is its own write.
            let me = self.node.clone();
            match graph.as_own_writer(&me, |g| {
                g.set_wait(now.wall, me.as_str(), &child, Some(mode))
            }) {
                Ok(()) => value["wait"] = json!(args["wait"]),
                Err(e) => value["waitError"] = json!(e.to_string()),
            }
        }
        // The marker is the result line (its text names the child); the value is the session's.
        self.written_results.push(inv);
        self.emit(graph, AgentOutput::Spawned { child });
        Ok(value)
    }
}

/// `Value::or_reason`: the message of a failed outcome, or its reason.
trait OrReason {
    fn or_reason<V: crate::value::Payload>(self, o: &crate::tools::CallOutcome<V>) -> Value;
}

impl OrReason for Value {
    fn or_reason<V: crate::value::Payload>(self, o: &crate::tools::CallOutcome<V>) -> Value {
        if self.is_null() {
            o.to_json()["reason"].clone()
        } else {
            self
        }
    }
}

/// Whether `output` is a read the host may perform before the lines written before it are
/// durable (see [`NodeAgent::poll_output`]): the start of a turn and its model request. A
/// model request only reads the node's lines, so they are written without a sync point (see
/// the module docs): if a crash loses them, the turn never happened on disk (no
/// `turn_start`, and a person's line that was not synced was never acknowledged), and if they
/// survived the step is recorded interrupted, as for any step that was streaming. Effects
/// ([`is_effect`]) are sync points; everything the step's answer writes is acknowledged
/// after the lines before it (acks are cumulative), so nothing that follows the request is
/// released on lines a crash could lose.
pub fn is_read(output: &AgentOutput) -> bool {
    matches!(
        output,
        AgentOutput::Session(Output::TurnStarted { .. } | Output::ModelRequest { .. })
    )
}

/// Whether `output` is an effect: something outside the host acts on it or is told by it — a
/// call to start or abort, a turn's end (the answer to the person), a wait, a spawned child,
/// queued mail, a model stream to drop. Queuing one is a sync point (the lines before it are
/// [`Durability::Synced`] before it is released). Not effects: the reads ([`is_read`]) and
/// the host's own bookkeeping — a call's result came from the host (`call_finished`), token
/// counts (`model_usage`), a handler to drop (`handler_released`) — which are released once
/// the lines before them are acknowledged as written, like every output, without a sync
/// point of their own.
pub fn is_effect(output: &AgentOutput) -> bool {
    !is_read(output)
        && !matches!(
            output,
            AgentOutput::Session(
                Output::CallFinished { .. }
                    | Output::ModelUsage { .. }
                    | Output::HandlerReleased { .. }
            )
        )
}

/// Whether `status` ends a node's work (re-exported for hosts deciding nothing themselves).
pub fn is_terminal(status: &Status) -> bool {
    status.is_terminal()
}

/// Takes a person's utterance typed in `node` where agents run. With a model, the line is
/// appended and the node's agent decides (spawn on drift is model-proposed: its `spawn` tool);
/// without one, the keyword heuristic routes it (it may spawn a child, which then receives
/// the line). Returns the actor operation's JSON result (`{outcome, node, line}` or a spawn).
pub fn admit_utterance(
    now: Wall,
    graph: &mut ActorGraph,
    node: &str,
    text: &str,
    model_configured: bool,
) -> Result<Value, AgentsError> {
    let proposer = crate::actors::HeuristicProposer;
    if model_configured {
        let line = graph.append(now, node, crate::actors::NewLine::user(text))?;
        return Ok(json!({"outcome": "continued", "node": node, "line": line}));
    }
    Ok(crate::actors::api::call(
        graph,
        now,
        "route",
        &json!({"node": node, "text": text}),
        &proposer,
    )?)
}

/// When a host tells the person that their line was taken: the durability the line needs
/// follows from it ([`admit_user_line`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineAck {
    /// As soon as the line is stored (the desk answers `POST …/messages` after its flush):
    /// the line is [`Durability::Synced`] before that answer.
    OnStore,
    /// Only with the turn's end (`weft chat` exits with it; a RAM session answers with it):
    /// the line is [`Durability::Written`] and the turn's first lines join it. Nothing outside
    /// the host has seen it when the model is asked (a read), and the turn's end — an effect,
    /// so a sync point — makes it durable with the answer in the same round. A `SIGKILL`
    /// before that loses nothing (the lines were written); a power loss may lose the line and
    /// the turn's start, neither of which anyone was told about.
    WithTurnEnd,
}

/// Appends a person's line to `node`, where its agent runs (a model is configured), with the
/// durability `ack` calls for. Returns the line's number.
pub fn admit_user_line(
    now: Wall,
    graph: &mut ActorGraph,
    node: &str,
    text: &str,
    ack: LineAck,
) -> Result<u64, AgentsError> {
    let sync = match ack {
        LineAck::OnStore => Durability::Synced,
        LineAck::WithTurnEnd => Durability::Written,
    };
    Ok(graph.append_with(now, node, crate::actors::NewLine::user(text), sync)?)
}
