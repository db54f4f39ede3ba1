//! The actor graph: agent chat as a persisted graph of actor nodes.
//!
//! A node is a bounded conversation context with a type, an address, spawn links and a mailbox.
//! [`ActorGraph`] holds the graph exactly as it is on disk (`meta.json` and `chat.jsonl` are
//! authoritative; the structs mirror them 1:1 and every mutation rewrites or appends the
//! records it changed). It is sans-IO: every call takes `now` (Unix-epoch milliseconds, since
//! timestamps are persisted) and queues [`WriteBatch`]es the host performs on its store and
//! acknowledges with the store's proof ([`ActorStore::perform`] → [`Applied`] →
//! [`ActorGraph::ack`]). A spawn's lineage — the parent's `spawned[]`, the
//! child's `spawnedBy`, the graph edge and both addresses — is in one batch, and neither node
//! accepts a message (`NOT_PERSISTED`) until that batch is acknowledged.
//!
//! Rules that live here, once: spawn (model-proposed via [`SpawnProposer`], user gesture,
//! policy trigger), disambiguation pauses, the metathread and its audit, mailboxes with their
//! compaction chain, the wait graph, cadence separation, git close-out, archive/reset, epochs,
//! and crash recovery of half-finished spawns on open ([`ActorGraph::open`]). A one-shot
//! command may open lazily ([`ActorGraph::open_lazy`]): the core names the nodes it needs, the
//! host reads only those, and a store that needs recovery is opened in full instead.
//!
//! # Call order
//!
//! ```text
//! let (mut graph, report) = ActorGraph::open(config, address, &store.load()?, now)?;
//!                                      // or open_lazy: the host reads the nodes it names
//! per command or event:
//!     graph.spawn(now, ..) | append(now, ..) | route(now, ..) | api::call(&mut graph, now, ..);
//!     for b in graph.take_batches() {  // recovery first, then every change, oldest first
//!         match store.perform(&b) {    // stage by stage, durably
//!             Ok(done) => graph.ack(done)?,        // only the store's proof acknowledges
//!             Err(e) => { graph.fail(b.id, &e.to_string()); break }  // reopen to recover
//!         }
//!     }
//!     a store that performs batches out of line (the JS stores behind the wasm binding):
//!         let (json, in_flight) = b.hand_off();  send json;  hold in_flight;
//!         on the store's report: graph.ack(in_flight.performed())?
//!     graph.drain_events()             // live views
//! ```

pub mod api;
pub mod closeout;
pub mod config;
pub mod id;
mod lineage;
mod load;
pub mod model;
mod ops;
mod patch;
pub mod proposer;
pub mod store;
pub mod time;
#[cfg(feature = "conformance")]
pub mod vectors;
mod views;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value, json};
use thiserror::Error;

pub use config::{AgenticUi, CloseoutDefault, HarnessConfig, NodeStoreMode, WaitGraphMode};
pub use id::{MAX_NODE_ID_BYTES, NodeId, slugify};
pub use load::{
    GraphEnds, GraphLookup, LAZY_TAIL_LINES, LazyOpen, LazyRead, LazySnapshot, LogMark, OpenReport,
    RecordEnds,
};
pub use model::{
    ChatLine, Edge, GitCloseout, GraphEntry, GraphIndex, Mailbox, Node, NodeType, Related,
    RelatedKind, Role, Status, WaitMode, WaitOn,
};
pub use ops::{
    Candidate, MAX_SPAWN_BATCH, NewLine, Resolution, RouteOutcome, SpawnOutcome, SpawnRequest,
    Trigger,
};
pub use proposer::{HeuristicProposer, Proposal, ProposalContext, SpawnProposer};
pub use store::{
    ActorStore, Applied, BatchId, Durability, InFlight, LogTail, MemoryStore, Op, Snapshot,
    WriteBatch, count_lines, tail_start,
};
pub use views::{AuditEntry, AuditReport, Scope, WaitCheck};

use crate::Wall;

/// Errors of the actor graph. Each has a stable code (see [`ActorsError::code`]). A call that
/// fails changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ActorsError {
    #[error("no node `{0}`")]
    UnknownNode(String),
    #[error("invalid node id {id:?}: it {reason}")]
    InvalidNodeId { id: String, reason: String },
    #[error("node `{0}` already exists")]
    NodeExists(String),
    #[error(
        "node `{node}` does not accept messages yet: batch {batch} ({label}) that records its lineage is not acknowledged by the store"
    )]
    NotPersisted {
        node: String,
        batch: BatchId,
        label: String,
    },
    #[error(
        "node `{node}` is paused: disambiguation `{by}` must resolve the boundary first (write to `{by}` or resolve it)"
    )]
    RoutingPaused { node: String, by: String },
    #[error("cadence violation on `{node}` ({node_type}): {reason}")]
    CadenceViolation {
        node: String,
        node_type: String,
        reason: String,
    },
    #[error("a {parent_type} node cannot spawn a {child_type} node")]
    SpawnRule {
        parent_type: String,
        child_type: String,
    },
    #[error("spawning is disabled: ACTOR_AGENTIC_UI={0}")]
    SpawnDisabled(String),
    #[error("`{node}` is not a pending disambiguation: {reason}")]
    NotPausing { node: String, reason: String },
    #[error("ref to `{node}` line {line} is invalid: {reason}")]
    RefInvalid {
        node: String,
        line: u64,
        reason: String,
    },
    #[error("model call of `{node}` is blocked by the wait graph: {}", .on.join(", "))]
    WaitBlocked { node: String, on: Vec<String> },
    #[error("`{node}` waiting on `{target}` would close a wait cycle: {}", .cycle.join(" → "))]
    WaitCycle {
        node: String,
        target: String,
        cycle: Vec<String>,
    },
    #[error("epoch snapshots are off (ACTOR_GRAPH_EPOCHS=off)")]
    EpochsDisabled,
    #[error("node `{node}` cannot be used: {file} is unreadable ({detail})")]
    NodeCorrupt {
        node: String,
        file: String,
        detail: String,
    },
    #[error("the store failed batch {batch}: {detail}; reopen the root to continue")]
    StoreFailed { batch: BatchId, detail: String },
    #[error("the store is locked by another writer: {0}")]
    StoreLocked(String),
    #[error("store I/O error: {0}")]
    StoreIo(String),
    /// A symbolic link where the store reads or writes: stores follow no link inside the root.
    #[error("{0} is a symbolic link: the store follows no links inside its root")]
    SymlinkRefused(String),
    /// A file the store would write has a second name (a hard link, perhaps from outside the
    /// root): writing it would write that other file too, so the store refuses.
    #[error("{0} has another name (a hard link): the store writes no file that has one")]
    HardLinkRefused(String),
    /// A graph opened lazily ([`ActorGraph::open_lazy`]) was asked about a node whose records
    /// the host did not load: the host must name every node a command touches.
    #[error("node `{0}` was not loaded by this lazy open (the host must name it)")]
    NotLoaded(String),
    #[error("{var}={value:?} is not valid (expected {expected})")]
    Config {
        var: String,
        value: String,
        expected: String,
    },
    #[error("no actor graph here: run init first")]
    NotInitialized,
    #[error("an actor graph already exists here")]
    AlreadyInitialized,
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The model asked for a proposal failed or answered outside the proposal format; its
    /// code is the model's (`MODEL_BAD_RESPONSE`, `MODEL_CONNECT`, ...). Nothing was written.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
}

impl ActorsError {
    /// The stable string code, as JS `.code` and HTTP problem `code`.
    pub fn code(&self) -> &'static str {
        match self {
            ActorsError::UnknownNode(_) => "UNKNOWN_NODE",
            ActorsError::InvalidNodeId { .. } => "INVALID_NODE_ID",
            ActorsError::NodeExists(_) => "NODE_EXISTS",
            ActorsError::NotPersisted { .. } => "NOT_PERSISTED",
            ActorsError::RoutingPaused { .. } => "ROUTING_PAUSED",
            ActorsError::CadenceViolation { .. } => "CADENCE_VIOLATION",
            ActorsError::SpawnRule { .. } => "SPAWN_RULE",
            ActorsError::SpawnDisabled(_) => "SPAWN_DISABLED",
            ActorsError::NotPausing { .. } => "NOT_PAUSING",
            ActorsError::RefInvalid { .. } => "REF_INVALID",
            ActorsError::WaitBlocked { .. } => "WAIT_BLOCKED",
            ActorsError::WaitCycle { .. } => "WAIT_CYCLE",
            ActorsError::EpochsDisabled => "EPOCHS_DISABLED",
            ActorsError::NodeCorrupt { .. } => "NODE_CORRUPT",
            ActorsError::StoreFailed { .. } => "STORE_FAILED",
            ActorsError::StoreLocked(_) => "STORE_LOCKED",
            ActorsError::StoreIo(_) => "STORE_IO",
            ActorsError::SymlinkRefused(_) => "SYMLINK_REFUSED",
            ActorsError::HardLinkRefused(_) => "HARD_LINK_REFUSED",
            ActorsError::NotLoaded(_) => "NOT_LOADED",
            ActorsError::Config { .. } => "CONFIG_INVALID",
            ActorsError::NotInitialized => "NOT_INITIALIZED",
            ActorsError::AlreadyInitialized => "ALREADY_INITIALIZED",
            ActorsError::InvalidArgument(_) => "INVALID_ARGUMENT",
            ActorsError::Model(e) => e.code(),
        }
    }

    /// The HTTP status a host answers this error with (in its problem+json, beside the
    /// [`code`](ActorsError::code)): missing → 404, malformed → 400, against the graph's rules
    /// → 422, the store unavailable → 503, the store's I/O → 500, the model → 502, any other
    /// conflict with the graph's state → 409.
    pub fn http_status(&self) -> u16 {
        match self {
            ActorsError::UnknownNode(_) | ActorsError::NotInitialized => 404,
            ActorsError::InvalidArgument(_)
            | ActorsError::InvalidNodeId { .. }
            | ActorsError::Config { .. } => 400,
            ActorsError::CadenceViolation { .. }
            | ActorsError::SpawnRule { .. }
            | ActorsError::RefInvalid { .. } => 422,
            ActorsError::StoreFailed { .. } | ActorsError::StoreLocked(_) => 503,
            ActorsError::StoreIo(_) => 500,
            ActorsError::Model(_) => 502,
            ActorsError::NodeExists(_)
            | ActorsError::NotPersisted { .. }
            | ActorsError::RoutingPaused { .. }
            | ActorsError::SpawnDisabled(_)
            | ActorsError::NotPausing { .. }
            | ActorsError::WaitBlocked { .. }
            | ActorsError::WaitCycle { .. }
            | ActorsError::EpochsDisabled
            | ActorsError::NodeCorrupt { .. }
            | ActorsError::SymlinkRefused(_)
            | ActorsError::HardLinkRefused(_)
            | ActorsError::NotLoaded(_)
            | ActorsError::AlreadyInitialized => 409,
        }
    }
}

impl crate::ErrorCode for ActorsError {
    fn code(&self) -> &'static str {
        ActorsError::code(self)
    }
}

/// A problem found in a store: the file, the line when it is a log line, and what was done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// `CORRUPT_JSON`, `TORN_LINE`, `MISSING_META`, `DANGLING_CHILD`, ...
    pub code: &'static str,
    pub file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    pub message: String,
    /// Whether open queued a repair for it (the repair is in the recovery batch).
    pub repaired: bool,
}

/// One line of a JSONL log: parsed, or kept verbatim when it is not valid (line numbers of
/// the lines after it stay what they are on disk).
#[derive(Clone, Debug, PartialEq)]
pub enum Entry<T> {
    Ok(T),
    Corrupt { raw: String, error: String },
}

impl<T> Entry<T> {
    /// The parsed line, if it parsed.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Entry::Ok(t) => Some(t),
            Entry::Corrupt { .. } => None,
        }
    }
}

/// A node as the graph holds it: its record and its log.
#[derive(Clone, Debug)]
pub(crate) struct NodeState {
    pub meta: Node,
    /// The chat lines held: all of them, or (opened lazily) the last ones, after `chat_base`.
    pub chat: Vec<Entry<ChatLine>>,
    /// Lines before `chat[0]` that were not read (0 unless opened lazily from a tail).
    pub chat_base: u64,
    pub mailbox: Option<Mailbox>,
    /// Compaction chain versions present (None = present but unreadable).
    pub chain: BTreeMap<u64, Option<Mailbox>>,
    /// `meta.json` on disk, when it is canonical with a non-empty `spawned` (see
    /// [`patch`]): where a patch adding a child starts, and the record's length.
    pub meta_at: Option<(u64, u64)>,
    /// Set when a trusted lazy open read `meta.json` by its ends ([`RecordEnds`]): the
    /// children on disk then were not read, and `meta.spawned` holds only the children
    /// spawned since. Read back ([`ActorGraph::put_meta`]) before the record is written whole.
    pub spawned_elided: Option<Elided>,
}

/// The children of a node record a trusted lazy open did not read ([`NodeState::spawned_elided`]):
/// the element lines of canonical `meta.json`'s `spawned`, bytes `from..to` of the record as
/// it was opened. Patches write only after `to`, so the bytes stay where they were until the
/// record is written whole.
#[derive(Clone, Debug)]
pub(crate) struct Elided {
    pub from: u64,
    pub to: u64,
    pub lookup: std::sync::Arc<dyn GraphLookup>,
}

impl Elided {
    /// The children the bytes name, in order, or why they cannot be read.
    fn read(&self, id: &NodeId) -> Result<Vec<NodeId>, String> {
        let b = self
            .lookup
            .record(id.as_str(), self.from, self.to)
            .ok_or_else(|| format!("nodes/{id}/meta.json cannot be read"))?;
        patch::elided_children(&b)
            .ok_or_else(|| format!("nodes/{id}/meta.json changed under the writer"))
    }
}

impl NodeState {
    fn lines(&self) -> u64 {
        self.chat_base + self.chat.len() as u64
    }

    /// The chat line numbered `n` (from 1), when it is held.
    pub(crate) fn line(&self, n: u64) -> Option<&Entry<ChatLine>> {
        let i = n.checked_sub(self.chat_base + 1)?;
        self.chat.get(usize::try_from(i).ok()?)
    }

    /// The number of the last readable line held.
    pub(crate) fn last_ok_line(&self) -> Option<u64> {
        self.chat
            .iter()
            .rposition(|e| e.ok().is_some())
            .map(|i| self.chat_base + i as u64 + 1)
    }
}

/// A node whose `meta.json` cannot be read. It is listed (with what `graph.json` knows of it)
/// and refuses every write; the rest of the graph works.
#[derive(Clone, Debug)]
pub(crate) struct Broken {
    pub file: String,
    pub error: String,
}

/// The actor graph of one `$CHAT_ROOT`.
#[derive(Debug)]
pub struct ActorGraph {
    config: HarnessConfig,
    root_address: String,
    root: NodeId,
    graph_version: u64,
    graph_extra: Map<String, Value>,
    /// `graph.json`'s entries as loaded (extra fields preserved), updated on spawn.
    index: BTreeMap<String, GraphEntry>,
    /// `graph.json` on disk, when it holds `index` in canonical form (see [`patch`]): where a
    /// patch adding entries starts.
    graph_at: Option<u64>,
    nodes: BTreeMap<NodeId, NodeState>,
    broken: BTreeMap<String, Broken>,
    meta: Vec<Entry<Map<String, Value>>>,
    /// Metathread lines before `meta[0]` that were not kept (0 unless opened lazily).
    meta_base: u64,
    bookmarks: Vec<Entry<Map<String, Value>>>,
    epochs: BTreeMap<u64, Option<Value>>,
    outbox: Vec<WriteBatch>,
    next_batch: BatchId,
    acked: BatchId,
    /// Whether the batch issued last is [`Durability::Written`] (a sync point is owed before
    /// anything is acknowledged on it: [`ActorGraph::require_synced`]).
    written_tail: bool,
    gates: BTreeMap<NodeId, BatchId>,
    gate_labels: BTreeMap<BatchId, String>,
    failed: Option<(BatchId, String)>,
    events: Vec<Value>,
    seq: u64,
    diagnostics: Vec<Diagnostic>,
    /// Set when the graph was opened lazily: what it knows of the nodes it did not read.
    lazy: Option<Lazy>,
    /// What the wave rule reads of the nodes, kept as they change ([`TaskIndex`]); `None`
    /// until first used after the nodes were replaced whole (an open).
    tasks: Option<TaskIndex>,
    /// Nodes handed out for change ([`ActorGraph::state_mut`]) or added since `tasks` was
    /// last brought up to date.
    touched: Vec<NodeId>,
}

/// What the wave rule (`closeout`) reads of every node, kept so that a spawn reads it without
/// visiting every node: the non-terminal tasks, and those of them a wave downgrades (a
/// defaulted `per-node` close-out). Derived from each node's own record only, so bringing it
/// up to date re-reads just the nodes changed since ([`ActorGraph::task_index`]).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct TaskIndex {
    /// Non-terminal tasks.
    pub open: BTreeSet<NodeId>,
    /// Non-terminal tasks whose `per-node` close-out was defaulted (not explicit).
    pub per_node: BTreeSet<NodeId>,
}

impl TaskIndex {
    fn of(nodes: &BTreeMap<NodeId, NodeState>) -> TaskIndex {
        let mut ix = TaskIndex::default();
        for (id, st) in walk_nodes(nodes) {
            ix.note(id, Some(st));
        }
        ix
    }

    /// Puts `id` where its record (`None`: no record) says it belongs.
    fn note(&mut self, id: &NodeId, st: Option<&NodeState>) {
        let m = st.map(|s| &s.meta);
        let open = m.is_some_and(|m| m.node_type == NodeType::Task && !m.status.is_terminal());
        let per_node = open
            && m.is_some_and(|m| {
                !m.git_closeout_explicit && m.git_closeout == Some(GitCloseout::PerNode)
            });
        for (set, member) in [(&mut self.open, open), (&mut self.per_node, per_node)] {
            if !member {
                set.remove(id);
            } else if !set.contains(id) {
                set.insert(id.clone());
            }
        }
    }
}

/// What a lazily opened graph keeps of the nodes whose records it did not read.
#[derive(Debug, Default)]
pub(crate) struct Lazy {
    /// Ids `graph.json` lists whose records were not loaded.
    pub unloaded: std::collections::BTreeSet<String>,
    /// `graph.json`'s related edges from those nodes, kept as loaded.
    pub related: Vec<Edge>,
    /// What the open learnt of the logs it read, for the host to hand back next time.
    pub marks: BTreeMap<String, LogMark>,
    /// The metathread's records agreed with `graph.json` (every child has its record, every
    /// task's close-out is one the wave rule leaves alone, every disambiguation is resolved).
    pub agreed: bool,
    /// `graph.json` as a trusted open found it, not parsed (`index` then holds only the
    /// entries added since): ids are looked up in it, and it is parsed when the whole index
    /// is needed ([`ActorGraph::ensure_index`]).
    pub raw: Option<Vec<u8>>,
    /// Digests of the ids `raw` lists, computed once look-ups become many.
    pub raw_ids: std::cell::OnceCell<std::collections::HashSet<u64>>,
    /// Look-ups in `raw` so far.
    pub raw_lookups: std::cell::Cell<u32>,
    /// In place of `raw`, when the host handed `graph.json` as its ends
    /// ([`LazySnapshot::graph_ends`]): ids are looked up through the host, and `graph.json`
    /// is read whole through it when the whole index is needed.
    pub lookup: Option<std::sync::Arc<dyn GraphLookup>>,
    /// The open trusted the host's stamps ([`LazySnapshot::trusted`]).
    pub trusted: bool,
}

/// A change to the graph, for live views: `{"seq", "kind", "node"}`.
pub type ActorEvent = Value;

/// Pending writes of one call, turned into a [`WriteBatch`] by `commit`.
///
/// Metathread records go through [`record`](Tx::record), never [`op`](Tx::op): a record can
/// name a chat line (a spawn record's `parentLine`, a ref's `line`), and the ops of a stage
/// have no order among them, so a crash can keep any subset of a stage. Were a record in the
/// stage that appends the line it names, a crash could keep the record and lose the line — and
/// another line appended by the same stage would then sit at the number the record names
/// (recovery can rewrite the lost line, but only at the end of the log). So `commit` writes
/// the records after everything else: in a stage of their own when the batch writes a chat log
/// or the metathread itself (see [`orders_records`]), in the last stage otherwise.
#[derive(Default)]
pub(crate) struct Tx {
    pub label: String,
    pub stages: Vec<Vec<Op>>,
    pub gates: Vec<NodeId>,
    pub records: Vec<Op>,
    /// [`Durability::Synced`] unless the caller says otherwise (agent lines before a read).
    pub sync: Durability,
}

impl Tx {
    pub fn new(label: impl Into<String>) -> Tx {
        Tx {
            label: label.into(),
            stages: vec![Vec::new()],
            gates: Vec::new(),
            records: Vec::new(),
            sync: Durability::Synced,
        }
    }
    /// Adds an op to the current stage. Metathread records go through [`record`](Tx::record).
    pub fn op(&mut self, op: Op) {
        debug_assert!(
            !matches!(&op, Op::Append { path, text } if path == METATHREAD && !text.trim().is_empty()),
            "metathread records go through Tx::record"
        );
        self.stages.last_mut().expect("a stage").push(op);
    }
    /// Adds a metathread record (an op from `push_meta`); records are written after every
    /// other op of the batch.
    pub fn record(&mut self, op: Op) {
        debug_assert!(matches!(&op, Op::Append { path, .. } if path == METATHREAD));
        self.records.push(op);
    }
    /// Starts a new stage: what follows is performed after everything before is durable.
    pub fn barrier(&mut self) {
        if !self.stages.last().is_some_and(Vec::is_empty) {
            self.stages.push(Vec::new());
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Nodes visited on this thread by [`walk_nodes`] (tests count a spawn's work with it).
    pub(crate) static NODES_VISITED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Every node in id order, each visit counted in tests ([`NODES_VISITED`]): the walk the
/// rules use when they derive something from every node.
pub(crate) fn walk_nodes(
    nodes: &BTreeMap<NodeId, NodeState>,
) -> impl Iterator<Item = (&NodeId, &NodeState)> {
    nodes.iter().inspect(|_| {
        #[cfg(test)]
        NODES_VISITED.with(|c| c.set(c.get() + 1));
    })
}

pub(crate) fn meta_path(id: &str) -> String {
    format!("nodes/{id}/meta.json")
}
pub(crate) fn chat_path(id: &str) -> String {
    format!("nodes/{id}/chat.jsonl")
}
pub(crate) const GRAPH: &str = "graph.json";
pub(crate) const METATHREAD: &str = "orchestrator/meta.jsonl";
pub(crate) const INDEX: &str = "orchestrator/index.json";
pub(crate) const BOOKMARKS: &str = "timeline/bookmarks.jsonl";
pub(crate) const THREAD: &str = "thread.jsonl";

/// A stage's appends to one log as one op: one write and one fsync per log per stage (an
/// agent's answer and its `turn_end` are one write). The ops of a stage have no order among
/// themselves except per path, and that order is kept.
fn join_appends(stage: Vec<Op>) -> Vec<Op> {
    let mut out: Vec<Op> = Vec::with_capacity(stage.len());
    for op in stage {
        if let Op::Append { path, text } = &op
            && let Some(Op::Append { text: prev, .. }) = out
                .iter_mut()
                .rev()
                .find(|o| o.paths().iter().any(|p| p == path))
        {
            prev.push_str(text);
            continue;
        }
        out.push(op);
    }
    out
}

/// The one path a batch only appends to, in a single stage and without gates: such batches
/// are the lines of one log (a person's message, then the agent's `turn_start`, say).
fn sole_log(b: &WriteBatch) -> Option<&str> {
    let [stage] = b.stages.as_slice() else {
        return None;
    };
    if !b.gates.is_empty() {
        return None;
    }
    let mut path = None;
    for op in stage {
        match op {
            Op::Append { path: p, .. } if path.is_none_or(|q| q == p) => path = Some(p.as_str()),
            _ => return None,
        }
    }
    path
}

/// Group commit: a batch that only appends to the log the previous queued batch only appended
/// to joins it, so the store makes both durable in one round (one write, one fsync). Nothing a
/// crash can expose changes: the lines land in the same order in the same file, as if one call
/// had written them, and acknowledging the joined batch acknowledges both (acks are
/// cumulative). Batches that create, gate or touch other files keep their own stages.
fn coalesces(last: &WriteBatch, next: &WriteBatch) -> bool {
    matches!((sole_log(last), sole_log(next)), (Some(a), Some(b)) if a == b)
}

impl WriteBatch {
    /// Takes `next` (see [`coalesces`]) into this batch: its lines after this batch's, its id,
    /// and the stronger of the two durabilities.
    fn absorb(&mut self, next: WriteBatch) {
        self.sync = self.sync.max(next.sync);
        let mut text = String::new();
        for op in next.stages.into_iter().flatten() {
            if let Op::Append { text: t, .. } = op {
                text.push_str(&t);
            }
        }
        if let Some(Op::Append { text: mine, .. }) = self.stages[0].last_mut() {
            mine.push_str(&text);
        }
        self.id = next.id;
        self.label = format!("{}; {}", self.label, next.label);
    }
}

/// Whether an op obliges the batch's metathread records to wait for it in a stage of their
/// own: it writes lines a record can name (a chat log, including a new node's) or the
/// metathread itself (recovery cuts a torn tail or terminates its last line before appending).
pub(crate) fn orders_records(op: &Op) -> bool {
    op.paths()
        .iter()
        .any(|p| p == METATHREAD || p.starts_with("nodes/") && p.ends_with("/chat.jsonl"))
}

pub(crate) fn pretty(v: &impl Serialize) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("records serialize");
    s.push('\n');
    s
}

/// One JSONL line (compact JSON and a newline), as stores append them.
pub fn line_text(v: &impl Serialize) -> String {
    line(v)
}

pub(crate) fn line(v: &impl Serialize) -> String {
    let mut s = serde_json::to_string(v).expect("records serialize");
    s.push('\n');
    s
}

impl ActorGraph {
    fn empty(config: HarnessConfig, root_address: &str, root: NodeId) -> ActorGraph {
        ActorGraph {
            config,
            root_address: root_address.trim_end_matches('/').to_owned(),
            root,
            graph_version: 1,
            graph_extra: Map::new(),
            index: BTreeMap::new(),
            graph_at: None,
            nodes: BTreeMap::new(),
            broken: BTreeMap::new(),
            meta: Vec::new(),
            meta_base: 0,
            bookmarks: Vec::new(),
            epochs: BTreeMap::new(),
            outbox: Vec::new(),
            next_batch: 1,
            acked: 0,
            written_tail: false,
            gates: BTreeMap::new(),
            gate_labels: BTreeMap::new(),
            failed: None,
            events: Vec::new(),
            seq: 0,
            diagnostics: Vec::new(),
            lazy: None,
            tasks: Some(TaskIndex::default()),
            touched: Vec::new(),
        }
    }

    // ----- host interface ------------------------------------------------------------------

    /// The harness variables in force.
    pub fn config(&self) -> &HarnessConfig {
        &self.config
    }

    /// The root node (the coordinator).
    pub fn root(&self) -> &NodeId {
        &self.root
    }

    /// Takes the queued batches, oldest first. The host performs them in order and
    /// acknowledges each with the store's proof (`store.perform(&b)` → [`ack`](Self::ack)),
    /// or reports failure ([`fail`](Self::fail)).
    #[must_use = "perform the batches on the store, then `ack` each with its `Applied`"]
    pub fn take_batches(&mut self) -> Vec<WriteBatch> {
        std::mem::take(&mut self.outbox)
    }

    /// Whether batches are waiting to be taken.
    pub fn has_batches(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Drops queued batches without performing them (read-only hosts: what open would repair
    /// is then visible in memory and in the report, but nothing is written).
    pub fn discard_batches(&mut self) {
        self.outbox.clear();
    }

    /// The store performed batch `done.id()` (and, stores being ordered, every earlier one)
    /// durably: `done` is its proof, made by [`ActorStore::perform`] (or, for a store that
    /// performs batches out of line, [`InFlight::performed`](store::InFlight::performed)).
    /// Nodes gated by those batches accept messages again. Refused (`INVALID_ARGUMENT`) for a
    /// batch this graph never issued (a proof from another graph).
    ///
    /// A batch id is no proof, and a proof cannot be made up:
    ///
    /// ```compile_fail
    /// fn ack_by_id(g: &mut weft_core::actors::ActorGraph) {
    ///     let _ = g.ack(g.issued());
    /// }
    /// ```
    ///
    /// ```compile_fail
    /// let forged = weft_core::actors::Applied(1);
    /// ```
    pub fn ack(&mut self, done: Applied) -> Result<(), ActorsError> {
        let id = done.id();
        if id >= self.next_batch {
            return Err(ActorsError::InvalidArgument(format!(
                "batch {id} was never issued"
            )));
        }
        // Acknowledgements are cumulative: one at or past a failed batch would release what
        // waits on the failed one.
        if let Some((failed, detail)) = &self.failed
            && id >= *failed
        {
            return Err(ActorsError::StoreFailed {
                batch: *failed,
                detail: detail.clone(),
            });
        }
        self.acked = self.acked.max(id);
        self.gates.retain(|_, b| *b > id);
        self.gate_labels.retain(|b, _| *b > id);
        Ok(())
    }

    /// The store failed batch `id`. Memory and store may now disagree, so every later mutation
    /// is refused (`STORE_FAILED`) until the host reopens the root, which recovers.
    pub fn fail(&mut self, id: BatchId, detail: &str) {
        if self.failed.is_none() {
            self.failed = Some((id, detail.to_owned()));
        }
    }

    /// The highest acknowledged batch.
    pub fn acked(&self) -> BatchId {
        self.acked
    }

    /// The last batch issued (0 before the first): everything changed so far is durable once
    /// this batch is acknowledged.
    pub fn issued(&self) -> BatchId {
        self.next_batch - 1
    }

    /// Whether the store failed a batch (every later mutation is refused until a reopen).
    pub fn store_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Events since the last drain (for live views).
    #[must_use = "the events are gone once drained: hand them to the live views"]
    pub fn drain_events(&mut self) -> Vec<ActorEvent> {
        std::mem::take(&mut self.events)
    }

    /// A counter that increases with every change (live views poll or wait on it).
    pub fn version(&self) -> u64 {
        self.seq
    }

    /// What open found in the store (corrupt files, torn lines, repairs).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// Node ids in spawn order: the root, then depth-first through `spawned[]`, then nodes
    /// not reachable from the root (sorted).
    pub fn node_ids(&self) -> Vec<NodeId> {
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = vec![self.root.clone()];
        while let Some(id) = stack.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            if let Some(n) = self.nodes.get(&id) {
                out.push(id.clone());
                for c in n.meta.spawned.iter().rev() {
                    stack.push(c.clone());
                }
            }
        }
        for id in self.nodes.keys() {
            if !seen.contains(id) {
                out.push(id.clone());
            }
        }
        out
    }

    /// Node ids in creation order (`createdAt`, then spawn order): the order of grid tiles
    /// and worker lists.
    pub fn creation_order(&self) -> Vec<NodeId> {
        let mut ids: Vec<(Option<Wall>, usize, NodeId)> = self
            .node_ids()
            .into_iter()
            .enumerate()
            .map(|(i, id)| {
                (
                    self.nodes[&id]
                        .meta
                        .created_at
                        .as_deref()
                        .and_then(time::parse_timestamp),
                    i,
                    id,
                )
            })
            .collect();
        ids.sort_by_key(|(t, i, _)| (t.unwrap_or(Wall::MAX), *i));
        ids.into_iter().map(|(_, _, id)| id).collect()
    }

    /// A node's record. On a graph opened lazily from trusted stamps, a parent read by the
    /// ends of its record ([`LazySnapshot::record_ends`]) lists in `spawned` only the children
    /// spawned since the open: [`children`](Self::children) lists them all.
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.get(id).map(|n| &n.meta)
    }

    /// The children of node `id`, in spawn order (`None`: no such node loaded). The children a
    /// trusted lazy open did not read of the record ([`NodeState::spawned_elided`]) are read
    /// back through the host for this answer, the graph unchanged (O(children) bytes, as a
    /// full open reads); when they cannot be read (the record changed under the writer), the
    /// ones spawned since the open, a partial list: [`children_read`](Self::children_read) says
    /// so (the views mark such a node `spawnedIncomplete`).
    pub fn children(&self, id: &str) -> Option<std::borrow::Cow<'_, [NodeId]>> {
        self.children_read(id).map(|(c, _)| c)
    }

    /// [`children`](Self::children), with why the list is partial (`Some`: the children the
    /// lazy open did not read could not be read back; only those spawned since are listed).
    pub fn children_read(
        &self,
        id: &str,
    ) -> Option<(std::borrow::Cow<'_, [NodeId]>, Option<String>)> {
        let (nid, st) = self.nodes.get_key_value(id)?;
        let Some(e) = &st.spawned_elided else {
            return Some((std::borrow::Cow::Borrowed(&st.meta.spawned), None));
        };
        Some(match e.read(nid) {
            Ok(mut all) => {
                all.extend(st.meta.spawned.iter().cloned());
                (std::borrow::Cow::Owned(all), None)
            }
            Err(why) => (std::borrow::Cow::Borrowed(&st.meta.spawned), Some(why)),
        })
    }

    /// A node's chat lines (1-based line `n` is index `n - 1`).
    pub fn chat(&self, id: &str) -> Option<&[Entry<ChatLine>]> {
        self.nodes.get(id).map(|n| n.chat.as_slice())
    }

    /// A node's latest mailbox.
    pub fn mailbox(&self, id: &str) -> Option<&Mailbox> {
        self.nodes.get(id).and_then(|n| n.mailbox.as_ref())
    }

    /// The metathread entries.
    pub fn metathread(&self) -> &[Entry<Map<String, Value>>] {
        &self.meta
    }

    /// Ids of nodes whose `meta.json` is unreadable.
    pub fn broken_nodes(&self) -> Vec<String> {
        self.broken.keys().cloned().collect()
    }

    // ----- internals shared by ops, load and views ----------------------------------------

    pub(crate) fn event(&mut self, kind: &str, node: Option<&NodeId>) {
        self.seq += 1;
        self.events
            .push(json!({"seq": self.seq, "kind": kind, "node": node.map(NodeId::as_str)}));
    }

    pub(crate) fn commit(&mut self, tx: Tx) -> BatchId {
        let id = self.next_batch;
        self.next_batch += 1;
        let mut stages = tx.stages;
        stages.retain(|s| !s.is_empty());
        if !tx.records.is_empty() {
            // See `Tx`: records after every line they may name.
            let separate = stages.iter().flatten().any(orders_records);
            match stages.last_mut() {
                Some(last) if !separate => last.extend(tx.records),
                _ => stages.push(tx.records),
            }
        }
        let stages: Vec<Vec<Op>> = stages.into_iter().map(join_appends).collect();
        for op in stages.iter().flatten() {
            self.note_written(op);
        }
        if !tx.gates.is_empty() {
            self.gate_labels.insert(id, tx.label.clone());
        }
        for g in &tx.gates {
            self.gates.insert(g.clone(), id);
        }
        let batch = WriteBatch {
            id,
            label: tx.label,
            stages,
            gates: tx.gates.iter().map(|g| g.to_string()).collect(),
            sync: if tx.gates.is_empty() {
                tx.sync
            } else {
                Durability::Synced
            },
        };
        match self.outbox.last_mut() {
            Some(last) if coalesces(last, &batch) => last.absorb(batch),
            _ => self.outbox.push(batch),
        }
        self.written_tail = self
            .outbox
            .last()
            .is_some_and(|b| b.sync == Durability::Written);
        id
    }

    /// A sync point: makes the batch issued last (and with it every earlier one, see
    /// [`Durability`]) [`Durability::Synced`], so that its acknowledgement says the lines are
    /// on stable storage. The queued last batch is upgraded; when it was already taken, an
    /// empty `Synced` batch is issued (a file store then fsyncs what the written batches left).
    /// Nothing is issued when the batch issued last is already `Synced`. The agents' rule
    /// (`crate::agents`): before an effect or an acknowledgement.
    pub fn require_synced(&mut self) {
        if !self.written_tail {
            return;
        }
        self.written_tail = false;
        match self.outbox.last_mut() {
            Some(last) => last.sync = Durability::Synced,
            None => {
                self.commit(Tx::new("sync"));
            }
        }
    }

    /// Keeps what the graph knows of the records on disk (see [`patch`]) true after `op`:
    /// a whole record written says where the next patch starts (patches update it where
    /// they are made).
    fn note_written(&mut self, op: &Op) {
        match op {
            Op::Put { path, text } if path == GRAPH => {
                self.graph_at = patch::graph_patch_at(text.as_bytes());
            }
            Op::Put { path, text } => {
                let node = path
                    .strip_prefix("nodes/")
                    .and_then(|r| r.strip_suffix("/meta.json"))
                    .and_then(|id| self.nodes.get_mut(id));
                if let Some(st) = node {
                    st.meta_at = if st.meta.spawned.is_empty() {
                        None
                    } else {
                        patch::meta_patch_at(text.as_bytes(), st.meta.last_event_at.is_some())
                    };
                }
            }
            Op::Rename { from, .. } if from == GRAPH => self.graph_at = None,
            _ => {}
        }
    }

    pub(crate) fn address_of(&self, id: &NodeId) -> String {
        format!("{}/nodes/{id}", self.root_address)
    }

    /// Resolves a node id given by a caller: valid, known, readable.
    pub(crate) fn known(&self, id: &str) -> Result<NodeId, ActorsError> {
        let nid = NodeId::parse(id).map_err(|reason| ActorsError::InvalidNodeId {
            id: id.to_owned(),
            reason,
        })?;
        if let Some(b) = self.broken.get(id) {
            return Err(ActorsError::NodeCorrupt {
                node: id.to_owned(),
                file: b.file.clone(),
                detail: b.error.clone(),
            });
        }
        if !self.nodes.contains_key(&nid) {
            if self.is_unloaded(id) {
                return Err(ActorsError::NotLoaded(id.to_owned()));
            }
            return Err(ActorsError::UnknownNode(id.to_owned()));
        }
        Ok(nid)
    }

    /// Like [`known`](Self::known), and the node must accept writes now: the store works and no
    /// unacknowledged lineage batch gates it.
    pub(crate) fn writable(&self, id: &str) -> Result<NodeId, ActorsError> {
        self.check_store()?;
        let nid = self.known(id)?;
        if let Some(b) = self.gates.get(&nid) {
            return Err(ActorsError::NotPersisted {
                node: nid.to_string(),
                batch: *b,
                label: self.gate_labels.get(b).cloned().unwrap_or_default(),
            });
        }
        Ok(nid)
    }

    /// Whether `id` is a node a lazy open knows of but did not read.
    pub(crate) fn is_unloaded(&self, id: &str) -> bool {
        self.lazy.as_ref().is_some_and(|l| {
            l.unloaded.contains(id)
                || l.raw.as_ref().is_some_and(|raw| {
                    // A few look-ups search the bytes; more (a derived id trying candidates)
                    // digest every id once.
                    let n = l.raw_lookups.get() + 1;
                    l.raw_lookups.set(n);
                    let listed = match l.raw_ids.get() {
                        None if n <= 4 => true,
                        None => l
                            .raw_ids
                            .get_or_init(|| patch::graph_ids(raw))
                            .contains(&patch::id_digest(id)),
                        Some(ids) => ids.contains(&patch::id_digest(id)),
                    };
                    listed && patch::graph_lists(raw, id)
                })
                || l.lookup
                    .as_ref()
                    .is_some_and(|k| NodeId::parse(id).is_ok() && k.exists(id))
        })
    }

    /// Parses `graph.json` when a trusted lazy open left it unparsed (see [`Lazy::raw`]):
    /// before anything needs the whole index (a rewrite of `graph.json`).
    pub(crate) fn ensure_index(&mut self) {
        let Some(l) = self.lazy.as_mut() else {
            return;
        };
        let raw = match (l.raw.take(), l.lookup.take()) {
            (Some(raw), _) => raw,
            (None, Some(k)) => match k.graph() {
                Some(raw) => raw,
                None => {
                    // Unreadable now: the rewrite holds what is known, and no later open may
                    // trust it (a full open rebuilds the rest from the node records).
                    l.agreed = false;
                    return;
                }
            },
            (None, None) => return,
        };
        l.raw_ids = Default::default();
        let Ok(g) = serde_json::from_slice::<GraphIndex>(&raw) else {
            // Not what the trusted open was told; the rewrite holds what is known, and a full
            // open rebuilds the rest from the node records.
            return;
        };
        let mut index = g.nodes;
        index.extend(std::mem::take(&mut self.index));
        l.unloaded = index
            .keys()
            .filter(|k| !self.nodes.contains_key(k.as_str()))
            .cloned()
            .collect();
        l.related = g
            .related
            .into_iter()
            .filter(|e| l.unloaded.contains(e.from.as_str()))
            .collect();
        self.index = index;
        self.graph_version = g.version;
        self.graph_extra = g.extra;
    }

    /// Whether the graph was opened lazily from a trusted head ([`LazySnapshot::trusted`]):
    /// `graph.json` was neither parsed nor compared with a listing of `nodes/`.
    pub fn opened_trusted(&self) -> bool {
        self.lazy.as_ref().is_some_and(|l| l.trusted)
    }

    /// Whether a later lazy open may trust `graph.json` and `nodes/` as this graph leaves them
    /// (see [`LazySnapshot::trusted`]), provided nothing else changed them: the graph was
    /// opened lazily and everything its open checks agreed, `graph.json` is in canonical form
    /// (see [`patch`]), the store never failed, the wave
    /// rule reads no task (`GIT_CLOSEOUT` is not `per-node`, every task read has a close-out
    /// other than `per-node`), and no node read is paused or an unresolved disambiguation.
    /// A host keeps stamps of both only when this holds after its last write.
    pub fn lazy_trusted(&self) -> bool {
        let Some(l) = &self.lazy else {
            return false;
        };
        l.agreed
            && self.graph_at.is_some()
            && self.failed.is_none()
            && self.config.git_closeout != CloseoutDefault::PerNode
            && self.nodes.values().all(|n| {
                let m = &n.meta;
                let closeout_ok = m.node_type != NodeType::Task
                    || matches!(&m.git_closeout, Some(c) if *c != GitCloseout::PerNode && !matches!(c, GitCloseout::Other(_)));
                closeout_ok
                    && m.routing_paused_by.is_none()
                    && !(m.node_type == NodeType::Disambiguation && m.resolved_into.is_none())
            })
    }

    /// The node records a host may keep stamps of once this graph's batches are performed,
    /// so that a later trusted lazy open reads them by their ends
    /// ([`LazySnapshot::record_ends`]): when [`lazy_trusted`](Self::lazy_trusted), the
    /// records of the nodes read that are canonical with a non-empty `spawned` (as this graph
    /// wrote or read them); otherwise none.
    pub fn lazy_records(&self) -> Vec<String> {
        if !self.lazy_trusted() {
            return Vec::new();
        }
        self.nodes
            .iter()
            .filter(|(_, n)| n.meta_at.is_some())
            .map(|(id, _)| meta_path(id.as_str()))
            .collect()
    }

    /// Whether the graph was opened lazily (it holds only the nodes the host loaded).
    pub fn is_lazy(&self) -> bool {
        self.lazy.is_some()
    }

    /// What a lazy open learnt of the logs it read, by path (the metathread and the chats of
    /// the nodes read), as they were when it opened: a host may keep these and hand them back
    /// to the next lazy open ([`LazySnapshot::meta_mark`], [`LogTail`]) so that it reads only
    /// the bytes after them. Empty for a graph opened in full.
    pub fn lazy_marks(&self) -> &BTreeMap<String, LogMark> {
        static NONE: BTreeMap<String, LogMark> = BTreeMap::new();
        self.lazy.as_ref().map_or(&NONE, |l| &l.marks)
    }

    pub(crate) fn check_store(&self) -> Result<(), ActorsError> {
        match &self.failed {
            Some((batch, detail)) => Err(ActorsError::StoreFailed {
                batch: *batch,
                detail: detail.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Runs `f` with `node`'s lineage gate lifted: an agent's own graph tools write to its node
    /// right after a spawn it made. The gate protects the node from *other* writers until the
    /// lineage is durable; the agent's later batches are performed after it (stores perform
    /// batches in order), so its own writes cannot overtake the lineage.
    pub(crate) fn as_own_writer<T>(&mut self, node: &NodeId, f: impl FnOnce(&mut Self) -> T) -> T {
        let gate = self.gates.remove(node);
        let r = f(self);
        if let Some(b) = gate {
            let e = self.gates.entry(node.clone()).or_insert(b);
            *e = (*e).max(b);
        }
        r
    }

    pub(crate) fn state(&self, id: &NodeId) -> &NodeState {
        &self.nodes[id]
    }

    /// A node to change: noted for the [`TaskIndex`], which re-reads it at its next use.
    pub(crate) fn state_mut(&mut self, id: &NodeId) -> &mut NodeState {
        self.touch(id);
        self.nodes.get_mut(id).expect("checked node")
    }

    /// Adds (or replaces) a node.
    pub(crate) fn insert_node(&mut self, id: NodeId, st: NodeState) {
        self.touch(&id);
        self.nodes.insert(id, st);
    }

    /// Replaces every node (an open): the [`TaskIndex`] is rebuilt at its next use.
    pub(crate) fn set_nodes(&mut self, nodes: BTreeMap<NodeId, NodeState>) {
        self.nodes = nodes;
        self.tasks = None;
        self.touched.clear();
    }

    fn touch(&mut self, id: &NodeId) {
        if self.tasks.is_none() || self.touched.last() == Some(id) {
            return;
        }
        if self.touched.len() > self.nodes.len() {
            // More changes than nodes since the last use: a rebuild costs no more.
            self.tasks = None;
            self.touched.clear();
            return;
        }
        self.touched.push(id.clone());
    }

    /// The [`TaskIndex`], brought up to date: by the nodes changed since its last use, or
    /// (once after an open) by one walk of every node.
    pub(crate) fn task_index(&mut self) -> &TaskIndex {
        let touched = std::mem::take(&mut self.touched);
        let nodes = &self.nodes;
        let ix = self.tasks.get_or_insert_with(|| TaskIndex::of(nodes));
        for id in &touched {
            ix.note(id, nodes.get(id));
        }
        #[cfg(test)]
        {
            let mut full = TaskIndex::default();
            for (id, st) in nodes {
                full.note(id, Some(st));
            }
            assert_eq!(*ix, full, "the task index follows every change of a node");
        }
        ix
    }

    /// The op writing `id`'s record whole. A record whose children a trusted lazy open did
    /// not read ([`NodeState::spawned_elided`]) reads them first (through the host) and holds
    /// them from then on; when they cannot be read, the op is one the store refuses (a patch
    /// expecting a size no record has), so the batch fails as on an I/O error and no record
    /// lacking its children is ever written.
    pub(crate) fn put_meta(&mut self, id: &NodeId) -> Op {
        let path = meta_path(id.as_str());
        if let Err(why) = self.hold_children(id) {
            return Op::Patch {
                path,
                at: 0,
                size: u64::MAX,
                text: format!("refused: {why}"),
            };
        }
        Op::Put {
            path,
            text: pretty(&self.nodes[id].meta),
        }
    }

    /// Reads back the children a trusted lazy open did not read of `id`'s record
    /// ([`NodeState::spawned_elided`]), so that `meta.spawned` holds them all: before anything
    /// consults the whole list. Fails (the list stays as it was) when they cannot be read.
    pub(crate) fn hold_children(&mut self, id: &NodeId) -> Result<(), String> {
        let st = self.nodes.get_mut(id).expect("checked node");
        let Some(e) = &st.spawned_elided else {
            return Ok(());
        };
        let mut children = e.read(id)?;
        children.append(&mut st.meta.spawned);
        st.meta.spawned = children;
        st.spawned_elided = None;
        Ok(())
    }

    /// `graph.json` as it should be now: the loaded index updated with every node's type and
    /// parent, broken nodes kept as they were, related edges derived from the node records.
    pub(crate) fn graph_index(&self) -> GraphIndex {
        let mut nodes = BTreeMap::new();
        for (id, st) in &self.nodes {
            let mut e = self.index.get(id.as_str()).cloned().unwrap_or(GraphEntry {
                node_type: st.meta.node_type.clone(),
                spawned_by: None,
                extra: Map::new(),
            });
            e.node_type = st.meta.node_type.clone();
            e.spawned_by = st.meta.spawned_by.clone();
            nodes.insert(id.to_string(), e);
        }
        for id in self.broken.keys() {
            if let Some(e) = self.index.get(id) {
                nodes.insert(id.clone(), e.clone());
            }
        }
        // Per node, in id order (the order a full open writes): derived from the records of
        // loaded nodes, kept as loaded for the nodes a lazy open did not read.
        let mut by_node: BTreeMap<String, Vec<Edge>> = BTreeMap::new();
        if let Some(l) = &self.lazy {
            // A lazy graph's index lists exactly the nodes read and not read (a node whose
            // record is broken opens in full): start from it (one clone, no lookups) and put
            // back what the records of the nodes read say.
            let mut all = self.index.clone();
            all.extend(std::mem::take(&mut nodes));
            nodes = all;
            for e in &l.related {
                by_node
                    .entry(e.from.to_string())
                    .or_default()
                    .push(e.clone());
            }
        }
        for (id, st) in &self.nodes {
            let related = by_node.entry(id.to_string()).or_default();
            for w in &st.meta.wait_on {
                related.push(Edge {
                    from: id.clone(),
                    to: w.node.clone(),
                    kind: RelatedKind::WaitsOn,
                });
            }
            for r in &st.meta.related {
                if r.kind != RelatedKind::WaitsOn
                    || !st.meta.wait_on.iter().any(|w| w.node == r.node)
                {
                    related.push(Edge {
                        from: id.clone(),
                        to: r.node.clone(),
                        kind: r.kind.clone(),
                    });
                }
            }
        }
        let related = by_node.into_values().flatten().collect();
        GraphIndex {
            version: self.graph_version,
            root: self.root.clone(),
            nodes,
            related,
            extra: self.graph_extra.clone(),
        }
    }

    pub(crate) fn put_graph(&mut self) -> Op {
        self.ensure_index();
        let g = self.graph_index();
        let text = pretty(&g);
        self.index = g.nodes;
        Op::Put {
            path: GRAPH.to_owned(),
            text,
        }
    }

    /// Appends a chat line in memory and returns its 1-based number and the store op.
    pub(crate) fn push_chat(&mut self, id: &NodeId, l: ChatLine) -> (u64, Op) {
        let text = line(&l);
        // Only the chat changes: nothing the task index reads.
        let st = self.nodes.get_mut(id).expect("checked node");
        st.chat.push(Entry::Ok(l));
        (
            st.lines(),
            Op::Append {
                path: chat_path(id.as_str()),
                text,
            },
        )
    }

    /// Appends a metathread entry (`kind` and `at` are added) and returns its line and op.
    pub(crate) fn push_meta(
        &mut self,
        kind: &str,
        now: Wall,
        mut fields: Map<String, Value>,
    ) -> (u64, Op) {
        fields.insert("kind".into(), Value::String(kind.to_owned()));
        fields.insert("at".into(), Value::String(time::format_rfc3339(now)));
        let text = line(&fields);
        self.meta.push(Entry::Ok(fields));
        (
            self.meta_base + self.meta.len() as u64,
            Op::Append {
                path: METATHREAD.to_owned(),
                text,
            },
        )
    }
}

/// Builds a JSON object from key/value pairs (a small helper for metathread entries).
pub(crate) fn obj(pairs: Vec<(&str, Value)>) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
