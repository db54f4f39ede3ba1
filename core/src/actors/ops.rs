//! Mutations of the actor graph. Each validates everything first (a refused call changes
//! nothing), then updates memory and queues one batch with exactly the records it changed.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::closeout::{default_closeout, system_addendum};
use super::config::AgenticUi;
use super::model::{
    ChatLine, GitCloseout, GraphEntry, Mailbox, Node, NodeType, Related, RelatedKind, Role, Status,
    WaitMode, WaitOn,
};
use super::proposer::{Proposal, ProposalContext, SpawnProposer, is_task_utterance};
use super::store::{BatchId, Durability, Op, Snapshot};
use super::time::format_rfc3339;
use super::views::Scope;
use super::{
    ActorGraph, ActorsError, BOOKMARKS, Entry, GRAPH, HarnessConfig, INDEX, NodeId, NodeState,
    THREAD, Tx, line, obj, pretty, slugify,
};
use crate::Wall;

/// The longest chat line text accepted, in bytes.
pub const MAX_TEXT_BYTES: usize = 1 << 20;

/// The most children one [`ActorGraph::spawn_batch`] creates (a batch is held in memory whole).
pub const MAX_SPAWN_BATCH: usize = 1000;

/// Why a node was spawned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The model running in the parent proposed it (the primary trigger).
    Model,
    /// A user gesture (Spawn tangent, the `+` in the tree view).
    User,
    /// Policy: a non-task utterance in a task node.
    Policy,
    /// A disambiguation resolved into a new candidate child.
    Resolution,
}

impl Trigger {
    /// The name recorded in the metathread.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Model => "model",
            Trigger::User => "user",
            Trigger::Policy => "policy",
            Trigger::Resolution => "resolution",
        }
    }
}

/// A line to append.
#[derive(Clone, Debug, PartialEq)]
pub struct NewLine {
    pub role: Role,
    pub text: String,
    /// Token count; estimated (4 bytes a token) when absent.
    pub tokens: Option<u64>,
    /// The node this line is delivered from, when it comes from another node.
    pub from: Option<String>,
}

impl NewLine {
    /// A user line.
    pub fn user(text: impl Into<String>) -> NewLine {
        NewLine {
            role: Role::User,
            text: text.into(),
            tokens: None,
            from: None,
        }
    }
}

/// A spawn request. `id` is derived from the title (or topic, or type) when absent.
#[derive(Clone, Debug)]
pub struct SpawnRequest {
    pub parent: String,
    pub node_type: NodeType,
    pub id: Option<String>,
    pub title: String,
    pub topic: String,
    pub reason: String,
    pub trigger: Trigger,
    pub git_closeout: Option<GitCloseout>,
    pub wait_on: Vec<(String, WaitMode)>,
    /// The line that drifted: it belongs to the child, not the parent.
    pub first_line: Option<NewLine>,
    /// Additive fields for the parent's routing marker (an agent's spawn call records its
    /// result there: the marker is the call's result line).
    pub marker_extra: Map<String, Value>,
}

impl SpawnRequest {
    /// A user-gesture spawn of `node_type` under `parent` with defaults.
    pub fn new(parent: impl Into<String>, node_type: NodeType) -> SpawnRequest {
        SpawnRequest {
            parent: parent.into(),
            node_type,
            id: None,
            title: String::new(),
            topic: String::new(),
            reason: String::new(),
            trigger: Trigger::User,
            git_closeout: None,
            wait_on: Vec::new(),
            first_line: None,
            marker_extra: Map::new(),
        }
    }
}

/// What a spawn did.
#[derive(Clone, Debug, PartialEq)]
pub struct SpawnOutcome {
    pub parent: NodeId,
    pub child: NodeId,
    pub node_type: NodeType,
    /// The parent's routing marker line.
    pub marker_line: u64,
    /// The child's line holding `first_line`, if one was given.
    pub child_line: Option<u64>,
    pub git_closeout: GitCloseout,
    /// Whether the parent is now paused (a disambiguation child).
    pub paused_parent: bool,
    pub batch: BatchId,
}

/// What routing an utterance did.
#[derive(Clone, Debug, PartialEq)]
pub enum RouteOutcome {
    /// The line stayed in the node.
    Continued { node: NodeId, line: u64 },
    /// The line moved to a new child (a marker stayed in the parent).
    Spawned {
        trigger: Trigger,
        spawn: SpawnOutcome,
    },
}

/// A candidate a disambiguation resolves into.
#[derive(Clone, Debug, PartialEq)]
pub enum Candidate {
    /// The lines continue the parent's topic.
    Continue,
    /// An existing child of the parent.
    Existing(String),
    /// A new child of the parent.
    New {
        node_type: NodeType,
        title: String,
        topic: String,
    },
}

/// What a resolution did.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    pub parent: NodeId,
    pub into: Vec<NodeId>,
    pub created: Vec<NodeId>,
    pub batch: BatchId,
}

/// A validated, id-allocated spawn, not yet applied.
struct Plan {
    parent: NodeId,
    id: NodeId,
    node_type: NodeType,
    title: String,
    topic: String,
    reason: String,
    trigger: Trigger,
    closeout: GitCloseout,
    explicit: bool,
    wait_on: Vec<WaitOn>,
    first_line: Option<ChatLine>,
    marker_extra: Map<String, Value>,
}

fn estimate_tokens(text: &str) -> u64 {
    text.len().div_ceil(4) as u64
}

/// Whether a node of type `parent` may spawn a child of type `child`.
pub fn may_spawn(parent: &NodeType, child: &NodeType) -> bool {
    *child != NodeType::Coordinator && *parent != NodeType::Disambiguation
}

impl ActorGraph {
    /// Creates a new graph in an empty store: the root coordinator (`coordinator`), its chat
    /// with the close-out addendum, `graph.json` and the metathread's first line.
    pub fn init(
        config: HarnessConfig,
        root_address: &str,
        snapshot: &Snapshot,
        now: Wall,
        title: &str,
    ) -> Result<ActorGraph, ActorsError> {
        if !snapshot.is_empty() {
            return Err(ActorsError::AlreadyInitialized);
        }
        let root = NodeId::parse("coordinator").expect("valid");
        let mut g = ActorGraph::empty(config, root_address, root.clone());
        let ts = format_rfc3339(now);
        let title = if title.trim().is_empty() {
            "Session"
        } else {
            title.trim()
        };
        let closeout = default_closeout(g.config.git_closeout, &NodeType::Coordinator, 0);
        let meta = Node {
            id: root.clone(),
            node_type: NodeType::Coordinator,
            address: g.address_of(&root),
            spawned_by: None,
            spawned: vec![],
            related: vec![],
            status: Status::Running,
            summary: format!("Coordinator for {title}"),
            view_epoch: None,
            awaiting_user: false,
            wait_on: vec![],
            git_closeout: Some(closeout.clone()),
            git_closeout_explicit: false,
            title: title.to_owned(),
            topic: title.to_owned(),
            hidden: false,
            archived_at: None,
            routing_paused_by: None,
            pauses_parent: false,
            resolved_into: None,
            created_at: Some(ts.clone()),
            last_event_at: Some(ts.clone()),
            last_touched_at: Some(ts.clone()),
            extra: Default::default(),
        };
        let addendum = ChatLine {
            at: ts,
            role: Role::System,
            text: system_addendum(&closeout),
            tokens: 0,
            spawn: None,
            from: None,
            extra: Default::default(),
        };
        let files = vec![
            ("meta.json".to_owned(), pretty(&meta)),
            ("chat.jsonl".to_owned(), line(&addendum)),
        ];
        g.insert_node(
            root.clone(),
            NodeState {
                meta,
                chat: vec![Entry::Ok(addendum)],
                chat_base: 0,
                mailbox: None,
                chain: Default::default(),
                meta_at: None,
                spawned_elided: None,
            },
        );
        let mut tx = Tx::new("init");
        tx.op(Op::CreateNode {
            id: root.to_string(),
            files,
        });
        tx.barrier();
        let graph = g.put_graph();
        tx.op(graph);
        let (_, m) = g.push_meta(
            "narrative",
            now,
            obj(vec![("text", json!(format!("Session started: {title}")))]),
        );
        tx.record(m);
        tx.gates.push(root.clone());
        g.commit(tx);
        g.event("init", Some(&root));
        Ok(g)
    }

    fn check_spawn_enabled(&self) -> Result<(), ActorsError> {
        match self.config.agentic_ui {
            AgenticUi::GraphGrid => Ok(()),
            AgenticUi::Serialized => Err(ActorsError::SpawnDisabled("serialized".into())),
            AgenticUi::Off => Err(ActorsError::SpawnDisabled("off".into())),
        }
    }

    fn check_not_paused(&self, id: &NodeId) -> Result<(), ActorsError> {
        match &self.state(id).meta.routing_paused_by {
            Some(by) => Err(ActorsError::RoutingPaused {
                node: id.to_string(),
                by: by.to_string(),
            }),
            None => Ok(()),
        }
    }

    fn check_text(text: &str) -> Result<(), ActorsError> {
        if text.trim().is_empty() {
            return Err(ActorsError::InvalidArgument(
                "the line's text is empty".into(),
            ));
        }
        if text.len() > MAX_TEXT_BYTES {
            return Err(ActorsError::InvalidArgument(format!(
                "the line's text is {} bytes (at most {MAX_TEXT_BYTES})",
                text.len()
            )));
        }
        Ok(())
    }

    /// The non-terminal tasks (from the [`TaskIndex`](super::TaskIndex): no node is visited).
    fn non_terminal_tasks(&mut self) -> usize {
        self.task_index().open.len()
    }

    /// Validates a spawn and allocates the child id (`reserved` holds ids planned earlier in
    /// the same call; `tasks` is [`non_terminal_tasks`](Self::non_terminal_tasks) before it).
    fn plan_spawn(
        &self,
        parent: &NodeId,
        req: SpawnRequest,
        reserved: &BTreeSet<NodeId>,
        tasks: usize,
    ) -> Result<Plan, ActorsError> {
        let ptype = &self.state(parent).meta.node_type;
        if !may_spawn(ptype, &req.node_type) {
            return Err(ActorsError::SpawnRule {
                parent_type: ptype.to_string(),
                child_type: req.node_type.to_string(),
            });
        }
        let taken = |id: &NodeId| {
            self.nodes.contains_key(id)
                || self.broken.contains_key(id.as_str())
                || self.is_unloaded(id.as_str())
                || reserved.contains(id)
        };
        let id = match &req.id {
            Some(raw) => {
                let id = NodeId::parse(raw).map_err(|reason| ActorsError::InvalidNodeId {
                    id: raw.clone(),
                    reason,
                })?;
                if taken(&id) {
                    return Err(ActorsError::NodeExists(raw.clone()));
                }
                id
            }
            None => {
                let src = [&req.title, &req.topic]
                    .into_iter()
                    .find(|s| !s.trim().is_empty())
                    .cloned();
                let mut base = slugify(&src.unwrap_or_default());
                if base.is_empty() {
                    base = slugify(req.node_type.as_str());
                }
                if base.is_empty() {
                    base = "node".into();
                }
                if req.node_type == NodeType::Disambiguation && !base.starts_with("disambig") {
                    base = format!("disambig-{base}");
                    base.truncate(48);
                }
                let mut n = 1u64;
                loop {
                    let cand = if n == 1 {
                        base.clone()
                    } else {
                        format!("{base}-{n}")
                    };
                    let id = NodeId::parse(&cand).expect("slugs are valid ids");
                    if !taken(&id) {
                        break id;
                    }
                    n += 1;
                }
            }
        };
        let mut wait_on = Vec::new();
        for (w, mode) in &req.wait_on {
            let t = self.known(w)?;
            wait_on.push(WaitOn {
                node: t,
                mode: mode.clone(),
                extra: Default::default(),
            });
        }
        let first_line = match req.first_line {
            Some(l) => {
                Self::check_text(&l.text)?;
                self.check_cadence_for_type(&id, &req.node_type, &l)?;
                Some(ChatLine {
                    at: String::new(),
                    tokens: l.tokens.unwrap_or_else(|| estimate_tokens(&l.text)),
                    role: l.role,
                    text: l.text,
                    spawn: None,
                    from: l.from.map(|f| self.known(&f)).transpose()?,
                    extra: Default::default(),
                })
            }
            None => None,
        };
        let tasks_after = tasks + usize::from(req.node_type == NodeType::Task);
        let (closeout, explicit) = match req.git_closeout {
            Some(c) => (c, true),
            None => (
                default_closeout(self.config.git_closeout, &req.node_type, tasks_after),
                false,
            ),
        };
        let title = if req.title.trim().is_empty() {
            id.to_string()
        } else {
            req.title.trim().to_owned()
        };
        let topic = if req.topic.trim().is_empty() {
            title.clone()
        } else {
            req.topic.trim().to_owned()
        };
        Ok(Plan {
            parent: parent.clone(),
            id,
            node_type: req.node_type,
            title,
            topic,
            reason: req.reason.trim().to_owned(),
            trigger: req.trigger,
            closeout,
            explicit,
            wait_on,
            first_line,
            marker_extra: req.marker_extra,
        })
    }

    /// Applies a plan: the op creating the child goes to `first`, the parent's routing marker
    /// to `later`, the metathread spawn record (which names the marker's line) to `records`.
    /// The parent's meta and `graph.json` are written by the caller.
    fn apply_spawn(
        &mut self,
        now: Wall,
        p: Plan,
        first: &mut Vec<Op>,
        later: &mut Vec<Op>,
        records: &mut Vec<Op>,
        batch: BatchId,
    ) -> SpawnOutcome {
        let ts = format_rfc3339(now);
        let disamb = p.node_type == NodeType::Disambiguation;
        let summary = if p.reason.is_empty() {
            format!("Spawned from {}", p.parent)
        } else {
            p.reason.clone()
        };
        let meta = Node {
            id: p.id.clone(),
            node_type: p.node_type.clone(),
            address: self.address_of(&p.id),
            spawned_by: Some(p.parent.clone()),
            spawned: vec![],
            related: vec![],
            status: Status::Idle,
            summary,
            view_epoch: None,
            awaiting_user: false,
            wait_on: p.wait_on,
            git_closeout: Some(p.closeout.clone()),
            git_closeout_explicit: p.explicit,
            title: p.title,
            topic: p.topic,
            hidden: false,
            archived_at: None,
            routing_paused_by: None,
            pauses_parent: disamb,
            resolved_into: None,
            created_at: Some(ts.clone()),
            last_event_at: Some(ts.clone()),
            last_touched_at: Some(ts.clone()),
            extra: Default::default(),
        };
        let mut chat = vec![ChatLine {
            at: ts.clone(),
            role: Role::System,
            text: system_addendum(&p.closeout),
            tokens: 0,
            spawn: None,
            from: None,
            extra: Default::default(),
        }];
        let child_line = p.first_line.map(|mut l| {
            l.at = ts.clone();
            chat.push(l);
            2
        });
        let files = vec![
            ("meta.json".to_owned(), pretty(&meta)),
            (
                "chat.jsonl".to_owned(),
                chat.iter().map(line).collect::<String>(),
            ),
        ];
        first.push(Op::CreateNode {
            id: p.id.to_string(),
            files,
        });
        self.insert_node(
            p.id.clone(),
            NodeState {
                meta,
                chat: chat.into_iter().map(Entry::Ok).collect(),
                chat_base: 0,
                mailbox: None,
                chain: Default::default(),
                meta_at: None,
                spawned_elided: None,
            },
        );
        let parent = self.state_mut(&p.parent);
        parent.meta.spawned.push(p.id.clone());
        parent.meta.last_event_at = Some(ts.clone());
        if disamb {
            parent.meta.routing_paused_by = Some(p.id.clone());
        }
        let mut marker = format!("→ spawned {} `{}`", p.node_type, p.id);
        if !p.reason.is_empty() {
            marker.push_str(": ");
            marker.push_str(&p.reason);
        }
        let (marker_line, op) = self.push_chat(
            &p.parent,
            ChatLine {
                at: ts,
                role: Role::Routing,
                text: marker,
                tokens: 0,
                spawn: Some(p.id.clone()),
                from: None,
                extra: p.marker_extra,
            },
        );
        later.push(op);
        let mut rec = obj(vec![
            ("parent", json!(p.parent)),
            ("child", json!(p.id)),
            ("type", json!(p.node_type)),
            ("parentLine", json!(marker_line)),
            ("reason", json!(p.reason)),
            ("trigger", json!(p.trigger.as_str())),
            ("gitCloseout", json!(p.closeout)),
        ]);
        if disamb {
            rec.insert("pausesParent".into(), json!(true));
        }
        let (_, op) = self.push_meta("spawn", now, rec);
        records.push(op);
        self.event("spawned", Some(&p.id));
        SpawnOutcome {
            parent: p.parent,
            child: p.id,
            node_type: p.node_type,
            marker_line,
            child_line,
            git_closeout: p.closeout,
            paused_parent: disamb,
            batch,
        }
    }

    /// In a high-volatility wave, task leaves whose close-out was defaulted to `per-node`
    /// switch to `coordinator-batch`, with a new addendum line.
    fn wave_downgrade(&mut self, now: Wall, later: &mut Vec<Op>) {
        // The non-terminal tasks with a defaulted `per-node` close-out, in id order, from the
        // task index: no node is visited.
        let tasks = self.task_index();
        if !super::closeout::is_high_volatility(tasks.open.len()) {
            return;
        }
        let ids: Vec<NodeId> = tasks.per_node.iter().cloned().collect();
        for id in ids {
            let c = GitCloseout::CoordinatorBatch;
            self.state_mut(&id).meta.git_closeout = Some(c.clone());
            let (_, op) = self.push_chat(
                &id,
                ChatLine {
                    at: format_rfc3339(now),
                    role: Role::System,
                    text: format!("{} (a parallel wave started)", system_addendum(&c)),
                    tokens: 0,
                    spawn: None,
                    from: None,
                    extra: Default::default(),
                },
            );
            later.push(op);
            later.push(self.put_meta(&id));
            self.event("closeout", Some(&id));
        }
    }

    /// Spawns a child. Stage 1 creates the child (its record names the parent); stage 2
    /// writes the parent's `spawned[]`, `graph.json` and the parent's routing marker; stage 3
    /// the metathread spawn record, which names the marker's line (so it is never durable
    /// without it). Parent and child are gated until the batch is acknowledged. A
    /// `disambiguation` child pauses the parent.
    pub fn spawn(&mut self, now: Wall, req: SpawnRequest) -> Result<SpawnOutcome, ActorsError> {
        self.check_spawn_enabled()?;
        let parent = self.writable(&req.parent)?;
        self.check_not_paused(&parent)?;
        let tasks = self.non_terminal_tasks();
        let plan = self.plan_spawn(&parent, req, &BTreeSet::new(), tasks)?;
        let label = format!("spawn {}", plan.id);
        let (mut outs, _) = self.commit_spawns(
            now,
            &parent,
            vec![plan],
            label,
            |_| Vec::new(),
            |_| (Vec::new(), Vec::new()),
            Vec::new(),
        );
        Ok(outs.remove(0))
    }

    /// Spawns several children of one parent in one batch (a wave): stage 1 creates every
    /// child, stage 2 writes the parent's `spawned[]`, `graph.json` and the routing markers,
    /// stage 3 the metathread spawn records — the same three rounds as one [`spawn`](Self::spawn),
    /// whatever the number of children. Every request must name the same parent; ids are
    /// allocated as for separate spawns, in order (a derived id skips those planned before
    /// it); a defaulted close-out counts the tasks planned before it. Disambiguations (which
    /// pause the parent) are spawned one at a time. At most [`MAX_SPAWN_BATCH`] children; a
    /// refused request refuses the whole batch and changes nothing.
    pub fn spawn_batch(
        &mut self,
        now: Wall,
        reqs: Vec<SpawnRequest>,
    ) -> Result<Vec<SpawnOutcome>, ActorsError> {
        self.check_spawn_enabled()?;
        let Some(first) = reqs.first() else {
            return Err(ActorsError::InvalidArgument(
                "a spawn batch needs at least one request".into(),
            ));
        };
        if reqs.len() > MAX_SPAWN_BATCH {
            return Err(ActorsError::InvalidArgument(format!(
                "a spawn batch holds at most {MAX_SPAWN_BATCH} children ({} asked)",
                reqs.len()
            )));
        }
        let parent = self.writable(&first.parent)?;
        self.check_not_paused(&parent)?;
        let mut reserved = BTreeSet::new();
        let mut plans = Vec::new();
        let before = self.non_terminal_tasks();
        let mut tasks = before;
        for r in reqs {
            if r.parent != parent.as_str() {
                return Err(ActorsError::InvalidArgument(format!(
                    "a spawn batch has one parent (`{parent}`, not `{}`)",
                    r.parent
                )));
            }
            if r.node_type == NodeType::Disambiguation {
                return Err(ActorsError::InvalidArgument(
                    "a disambiguation pauses its parent: spawn it on its own".into(),
                ));
            }
            let mut p = self.plan_spawn(&parent, r, &reserved, before)?;
            if p.node_type == NodeType::Task {
                tasks += 1;
            }
            if !p.explicit {
                p.closeout = default_closeout(self.config.git_closeout, &p.node_type, tasks);
            }
            reserved.insert(p.id.clone());
            plans.push(p);
        }
        let label = format!("spawn {} children of {parent}", plans.len());
        let (outs, _) = self.commit_spawns(
            now,
            &parent,
            plans,
            label,
            |_| Vec::new(),
            |_| (Vec::new(), Vec::new()),
            Vec::new(),
        );
        Ok(outs)
    }

    /// Applies spawn plans under one parent and commits one batch: stage 1 creates the
    /// children, stage 2 holds `mid_ops` (a resolution's decision, which must not be durable
    /// before the children it names), the next stage writes the parent's record,
    /// `graph.json`, the markers and the first part of `later_ops`; the metathread records
    /// (the spawn records and the second part of `later_ops`) come last (see `Tx`). Gates the
    /// parent, the children and `extra_gates`.
    #[allow(clippy::too_many_arguments)]
    fn commit_spawns(
        &mut self,
        now: Wall,
        parent: &NodeId,
        plans: Vec<Plan>,
        label: String,
        mid_ops: impl FnOnce(&mut ActorGraph) -> Vec<Op>,
        later_ops: impl FnOnce(&mut ActorGraph) -> (Vec<Op>, Vec<Op>),
        extra_gates: Vec<NodeId>,
    ) -> (Vec<SpawnOutcome>, BatchId) {
        let batch = self.next_batch;
        let mut first = Vec::new();
        let mut later = Vec::new();
        let mut records = Vec::new();
        let mut outs = Vec::new();
        let mut gates = vec![parent.clone()];
        gates.extend(extra_gates);
        for p in plans {
            gates.push(p.id.clone());
            outs.push(self.apply_spawn(now, p, &mut first, &mut later, &mut records, batch));
        }
        let mid = mid_ops(self);
        let (more, more_records) = later_ops(self);
        // A plain spawn changes the parent's record and graph.json only by its children:
        // both grow in place (see `patch`). Anything else rewrites them whole.
        let plain = mid.is_empty() && more.is_empty() && more_records.is_empty();
        later.extend(more);
        records.extend(more_records);
        self.wave_downgrade(now, &mut later);
        let children: Vec<NodeId> = outs
            .iter()
            .map(|o: &SpawnOutcome| o.child.clone())
            .collect();
        let mut tx = Tx::new(label);
        for op in first {
            tx.op(op);
        }
        tx.barrier();
        for op in mid {
            tx.op(op);
        }
        tx.barrier();
        let parent_path = super::meta_path(parent.as_str());
        let rewritten = later.iter().any(|op| op.paths().contains(&parent_path));
        let meta_op = match self.spawn_meta_patch(parent, &children) {
            Some(op) if plain && !rewritten => op,
            _ => self.put_meta(parent),
        };
        tx.op(meta_op);
        let g = match self.spawn_graph_patch(parent, &children) {
            Some(op) if plain => op,
            _ => self.put_graph(),
        };
        tx.op(g);
        for op in later {
            tx.op(op);
        }
        for op in records {
            tx.record(op);
        }
        tx.gates = gates;
        let id = self.commit(tx);
        debug_assert_eq!(id, batch);
        (outs, batch)
    }

    /// The patch growing `parent`'s record by `children` (just spawned: already in its
    /// `spawned`), when the record on disk is canonical, nothing else of it changed and no
    /// child pauses it; updates what the graph knows of the record on disk.
    fn spawn_meta_patch(&mut self, parent: &NodeId, children: &[NodeId]) -> Option<Op> {
        let st = self.state(parent);
        let (at, size) = st.meta_at?;
        let m = &st.meta;
        let old = m.spawned.len().checked_sub(children.len())?;
        // No child on disk before: the record has an empty `spawned` and is written whole
        // (unless the children on disk were not read: then there are some).
        let none_before = old == 0 && st.spawned_elided.is_none();
        if none_before || m.spawned[old..] != *children || m.routing_paused_by.is_some() {
            return None;
        }
        let text = super::patch::meta_patch_text(
            children.iter().map(NodeId::as_str),
            m.last_event_at.as_deref(),
        );
        let close = at + text.find("\n  ]").expect("the patch closes `spawned`") as u64;
        let new_size = at + text.len() as u64;
        self.state_mut(parent).meta_at = Some((close, new_size));
        Some(Op::Patch {
            path: super::meta_path(parent.as_str()),
            at,
            size,
            text,
        })
    }

    /// The patch adding `children`'s entries to `graph.json`, when it is canonical on disk and
    /// the children add no related edge; records the entries in the index.
    fn spawn_graph_patch(&mut self, parent: &NodeId, children: &[NodeId]) -> Option<Op> {
        let at = self.graph_at?;
        let mut entries = Vec::with_capacity(children.len());
        for c in children {
            let m = &self.state(c).meta;
            if !m.wait_on.is_empty() || !m.related.is_empty() || self.index.contains_key(c.as_str())
            {
                return None;
            }
            entries.push((
                c.to_string(),
                GraphEntry {
                    node_type: m.node_type.clone(),
                    spawned_by: Some(parent.clone()),
                    extra: Default::default(),
                },
            ));
        }
        let text = super::patch::graph_patch_text(entries.iter().map(|(k, e)| (k.as_str(), e)));
        let suffix = super::patch::GRAPH_SUFFIX.len() as u64;
        self.graph_at = Some(at + text.len() as u64 - suffix);
        self.index.extend(entries);
        Some(Op::Patch {
            path: GRAPH.to_owned(),
            at,
            size: at + suffix,
            text,
        })
    }

    /// Cadence separation: worker cadence never lands on the discussion surface, and lines
    /// from other nodes reach it only as routing markers (written by the core itself).
    fn check_cadence_for_type(
        &self,
        node: &NodeId,
        t: &NodeType,
        l: &NewLine,
    ) -> Result<(), ActorsError> {
        let violation = |reason: String| ActorsError::CadenceViolation {
            node: node.to_string(),
            node_type: t.to_string(),
            reason,
        };
        if let Role::Other(r) = &l.role {
            return Err(ActorsError::InvalidArgument(format!(
                "unknown role `{r}` (expected one of {})",
                Role::KNOWN
                    .iter()
                    .filter(|k| **k != "routing")
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if l.role == Role::Routing {
            return Err(ActorsError::InvalidArgument(
                "routing markers are written by spawn and resolve, not appended".into(),
            ));
        }
        if t.is_discussion_surface() {
            if l.role.is_worker_cadence() {
                return Err(violation(format!(
                    "`{}` lines are worker cadence; they belong in a task node's transcript, and the \
                     discussion surface gets mailbox status and routing markers only",
                    l.role
                )));
            }
            if let Some(f) = &l.from
                && f != node.as_str()
            {
                return Err(violation(format!(
                    "lines from `{f}` cannot be appended here; other nodes reach the discussion surface \
                     only through routing markers and metathread refs"
                )));
            }
        }
        Ok(())
    }

    /// Appends a line to a node's chat. Refused while the node is gated (`NOT_PERSISTED`) or
    /// paused (`ROUTING_PAUSED`), for cadence violations, and for routing markers.
    pub fn append(&mut self, now: Wall, node: &str, l: NewLine) -> Result<u64, ActorsError> {
        self.append_with(now, node, l, Durability::Synced)
    }

    /// [`append`](Self::append) in a batch of durability `sync`: `Written` only for a line
    /// nobody is told about before a later sync point (`crate::agents::admit_user_line`).
    pub(crate) fn append_with(
        &mut self,
        now: Wall,
        node: &str,
        l: NewLine,
        sync: Durability,
    ) -> Result<u64, ActorsError> {
        let id = self.writable(node)?;
        self.check_not_paused(&id)?;
        Self::check_text(&l.text)?;
        let t = self.state(&id).meta.node_type.clone();
        self.check_cadence_for_type(&id, &t, &l)?;
        let from = l.from.as_deref().map(|f| self.known(f)).transpose()?;
        let cl = ChatLine {
            at: format_rfc3339(now),
            tokens: l.tokens.unwrap_or_else(|| estimate_tokens(&l.text)),
            role: l.role,
            text: l.text,
            spawn: None,
            from,
            extra: Default::default(),
        };
        let (n, op) = self.push_chat(&id, cl);
        let mut tx = Tx::new(format!("message {id}"));
        tx.sync = sync;
        tx.op(op);
        self.commit(tx);
        self.event("line", Some(&id));
        Ok(n)
    }

    /// Appends lines an agent runtime writes for `node`'s own agent (`crate::agents`), in one
    /// batch: the additive `agent` field carries the session record. Unlike [`append`](Self::append) it
    /// is allowed while the node is paused (a turn that spawned a disambiguation child still
    /// records its results) and it may write a routing marker (the result of an agent's graph
    /// tool on the discussion surface); cadence separation is checked as for every line. The
    /// agent decides the batch's durability (`sync`).
    pub(crate) fn append_agent_lines(
        &mut self,
        now: Wall,
        node: &str,
        lines: Vec<(Role, String, Map<String, Value>)>,
        sync: Durability,
    ) -> Result<BatchId, ActorsError> {
        // Not `writable`: a spawn the agent just made gates its own node against other
        // writers until the lineage is durable, and the agent's later batches are performed
        // after it (stores are ordered).
        self.check_store()?;
        let id = self.known(node)?;
        let t = self.state(&id).meta.node_type.clone();
        for (role, _, _) in &lines {
            if *role != Role::Routing {
                self.check_cadence_for_type(
                    &id,
                    &t,
                    &NewLine {
                        role: role.clone(),
                        text: String::new(),
                        tokens: None,
                        from: None,
                    },
                )?;
            }
        }
        let mut tx = Tx::new(format!("agent {id}"));
        tx.sync = sync;
        let at = format_rfc3339(now);
        for (role, text, extra) in lines {
            let cl = ChatLine {
                at: at.clone(),
                tokens: estimate_tokens(&text),
                role,
                text,
                spawn: None,
                from: None,
                extra,
            };
            let (_, op) = self.push_chat(&id, cl);
            tx.op(op);
        }
        let batch = self.commit(tx);
        self.event("line", Some(&id));
        Ok(batch)
    }

    /// Appends `text` to a node's side file `nodes/{id}/{name}` (an agent's job journal): not a
    /// snapshot file, so open never reads it; hosts read it on demand.
    pub(crate) fn append_node_file(
        &mut self,
        node: &str,
        name: &str,
        text: String,
    ) -> Result<BatchId, ActorsError> {
        self.check_store()?;
        let id = self.known(node)?;
        let mut tx = Tx::new(format!("journal {id}"));
        tx.op(Op::Append {
            path: format!("nodes/{id}/{name}"),
            text,
        });
        Ok(self.commit(tx))
    }

    /// Routes a user utterance typed in `node`: the proposer decides (continue, spawn, or
    /// disambiguate when the boundary is unclear); if it says continue and `node` is a task
    /// and the utterance is not a task utterance, the policy trigger spawns a discussion
    /// child. A spawned child receives the utterance; the parent keeps a routing marker.
    pub fn route(
        &mut self,
        now: Wall,
        node: &str,
        text: &str,
        tokens: Option<u64>,
        proposer: &dyn SpawnProposer,
    ) -> Result<RouteOutcome, ActorsError> {
        let id = self.writable(node)?;
        self.check_not_paused(&id)?;
        Self::check_text(text)?;
        let line = NewLine {
            role: Role::User,
            text: text.to_owned(),
            tokens,
            from: None,
        };
        let st = self.state(&id);
        let ntype = st.meta.node_type.clone();
        if self.config.agentic_ui != AgenticUi::GraphGrid || ntype == NodeType::Disambiguation {
            let n = self.append(now, node, line)?;
            return Ok(RouteOutcome::Continued { node: id, line: n });
        }
        let recent: Vec<&ChatLine> = st.chat.iter().rev().filter_map(Entry::ok).take(8).collect();
        let proposal = proposer.propose(&ProposalContext {
            node: &st.meta,
            recent,
            text,
        });
        let mut req = match proposal {
            Proposal::Continue if ntype == NodeType::Task && !is_task_utterance(text) => {
                let title: String = text.chars().take(40).collect();
                let mut r = SpawnRequest::new(id.as_str(), NodeType::Discussion);
                r.title = title.trim().to_owned();
                r.topic = text.chars().take(200).collect();
                r.reason = "non-task utterance in a task node".into();
                r.trigger = Trigger::Policy;
                r
            }
            Proposal::Continue => {
                let n = self.append(now, node, line)?;
                return Ok(RouteOutcome::Continued { node: id, line: n });
            }
            Proposal::Spawn {
                node_type,
                title,
                topic,
                reason,
            } => {
                let mut r = SpawnRequest::new(id.as_str(), node_type);
                r.title = title;
                r.topic = topic;
                r.reason = reason;
                r.trigger = Trigger::Model;
                r
            }
            Proposal::Disambiguate { topic, reason } => {
                let mut r = SpawnRequest::new(id.as_str(), NodeType::Disambiguation);
                r.title = "boundary".into();
                r.topic = topic;
                r.reason = reason;
                r.trigger = Trigger::Model;
                r
            }
        };
        if !may_spawn(&ntype, &req.node_type) {
            let n = self.append(now, node, line)?;
            return Ok(RouteOutcome::Continued { node: id, line: n });
        }
        let trigger = req.trigger;
        req.first_line = Some(line);
        let spawn = self.spawn(now, req)?;
        Ok(RouteOutcome::Spawned { trigger, spawn })
    }

    /// Updates a node's mailbox: status, summary (kept when `None`) and `awaitingUser` (true
    /// for `awaiting_user` unless given). Writes `meta.json`, the next compaction-chain version
    /// `summaries/v{n}.json`, `summaries/latest.json` and a metathread summary; a terminal
    /// status also leaves a metathread ref to the node's last line.
    pub fn set_status(
        &mut self,
        now: Wall,
        node: &str,
        status: Status,
        summary: Option<String>,
        awaiting_user: Option<bool>,
    ) -> Result<Mailbox, ActorsError> {
        let id = self.writable(node)?;
        self.hold_all(std::slice::from_ref(&id))?;
        if let Status::Other(s) = &status {
            return Err(ActorsError::InvalidArgument(format!(
                "unknown status `{s}` (expected one of {})",
                Status::KNOWN.join(", ")
            )));
        }
        let ts = format_rfc3339(now);
        let st = self.state_mut(&id);
        st.meta.status = status.clone();
        if let Some(s) = summary {
            st.meta.summary = s.trim().to_owned();
        }
        st.meta.awaiting_user = awaiting_user.unwrap_or(status == Status::AwaitingUser);
        st.meta.last_event_at = Some(ts.clone());
        let version = st.chain.keys().next_back().copied().unwrap_or(0) + 1;
        let previous = st
            .mailbox
            .as_ref()
            .map(|m| m.version)
            .or((version > 1).then(|| version - 1));
        let mb = Mailbox {
            node: id.clone(),
            version,
            status: status.clone(),
            summary: st.meta.summary.clone(),
            at: ts,
            through_line: st.lines(),
            previous,
            extra: Default::default(),
        };
        st.mailbox = Some(mb.clone());
        st.chain.insert(version, Some(mb.clone()));
        let last_line = st.last_ok_line();
        let mut tx = Tx::new(format!("status {id} {status}"));
        tx.op(self.put_meta(&id));
        tx.op(Op::Put {
            path: format!("nodes/{id}/summaries/v{version}.json"),
            text: pretty(&mb),
        });
        tx.op(Op::Put {
            path: format!("nodes/{id}/summaries/latest.json"),
            text: pretty(&mb),
        });
        let (_, op) = self.push_meta(
            "summary",
            now,
            obj(vec![
                ("node", json!(id)),
                ("status", json!(status)),
                ("summary", json!(mb.summary)),
                ("version", json!(version)),
            ]),
        );
        tx.record(op);
        if status.is_terminal()
            && let Some(l) = last_line
        {
            let (_, op) = self.push_meta(
                "ref",
                now,
                obj(vec![
                    ("node", json!(id)),
                    ("line", json!(l)),
                    ("summary", json!(mb.summary)),
                ]),
            );
            tx.record(op);
        }
        self.commit(tx);
        self.event("status", Some(&id));
        Ok(mb)
    }

    /// Resolves a disambiguation: links its parent to the candidates (new children are
    /// spawned under the parent and appended to its `spawned[]`), unpauses the parent, marks
    /// the disambiguation done, and records the resolution in the metathread.
    ///
    /// Stage 1 creates the new children; stage 2 writes the disambiguation's `resolvedInto`,
    /// which is what recovery rolls forward from; stage 3 writes the parent, `graph.json` and
    /// the routing markers; stage 4 the metathread records, which name the markers' lines.
    pub fn resolve(
        &mut self,
        now: Wall,
        disambiguation: &str,
        candidates: Vec<Candidate>,
        note: &str,
    ) -> Result<Resolution, ActorsError> {
        let d = self.writable(disambiguation)?;
        let dm = &self.state(&d).meta;
        let not = |reason: &str| ActorsError::NotPausing {
            node: d.to_string(),
            reason: reason.to_owned(),
        };
        if dm.node_type != NodeType::Disambiguation {
            return Err(not("it is not a disambiguation node"));
        }
        if dm.resolved_into.is_some() {
            return Err(not("it is already resolved"));
        }
        let Some(parent) = dm.spawned_by.clone() else {
            return Err(not("it has no parent"));
        };
        let parent = self.writable(parent.as_str())?;
        self.hold_children(&parent).map_err(ActorsError::StoreIo)?;
        if self.state(&parent).meta.routing_paused_by.as_ref() != Some(&d) {
            return Err(not("its parent is not paused by it"));
        }
        if candidates.is_empty() {
            return Err(ActorsError::InvalidArgument(
                "a resolution needs at least one candidate".into(),
            ));
        }
        let mut into = Vec::new();
        let mut plans = Vec::new();
        let mut reserved = BTreeSet::new();
        let mut continue_parent = false;
        let tasks = self.non_terminal_tasks();
        for c in candidates {
            match c {
                Candidate::Continue => {
                    continue_parent = true;
                    into.push(parent.clone());
                }
                Candidate::Existing(x) => {
                    let x = self.known(&x)?;
                    if x == d || !self.state(&parent).meta.spawned.contains(&x) {
                        return Err(ActorsError::InvalidArgument(format!(
                            "`{x}` is not a child of `{parent}` (candidates are the parent, its other children, or new children)"
                        )));
                    }
                    into.push(x);
                }
                Candidate::New {
                    node_type,
                    title,
                    topic,
                } => {
                    if node_type == NodeType::Disambiguation {
                        return Err(ActorsError::InvalidArgument(
                            "a resolution cannot create another disambiguation".into(),
                        ));
                    }
                    let mut r = SpawnRequest::new(parent.as_str(), node_type);
                    r.title = title;
                    r.topic = topic;
                    r.reason = format!("resolved from `{d}`");
                    r.trigger = Trigger::Resolution;
                    let p = self.plan_spawn(&parent, r, &reserved, tasks)?;
                    reserved.insert(p.id.clone());
                    into.push(p.id.clone());
                    plans.push(p);
                }
            }
        }
        let mut seen = BTreeSet::new();
        into.retain(|i| seen.insert(i.clone()));
        let created: Vec<NodeId> = plans.iter().map(|p| p.id.clone()).collect();
        let ts = format_rfc3339(now);
        let note = note.trim().to_owned();
        let (d1, p1, into1) = (d.clone(), parent.clone(), into.clone());
        // Stage 2 records the decision on the disambiguation node itself, once the children it
        // names exist (recovery rolls the rest forward from it).
        let first = move |g: &mut ActorGraph| {
            let dm = &mut g.state_mut(&d1).meta;
            dm.resolved_into = Some(into1.clone());
            dm.status = Status::Done;
            dm.summary = format!("resolved → {}", ticks(&into1));
            dm.last_event_at = Some(ts);
            for i in into1.iter().filter(|i| **i != p1) {
                dm.related.push(Related {
                    kind: RelatedKind::ResolvedInto,
                    node: i.clone(),
                    extra: Default::default(),
                });
            }
            g.state_mut(&p1).meta.routing_paused_by = None;
            vec![g.put_meta(&d1)]
        };
        let (d2, p2, into2, note2) = (d.clone(), parent.clone(), into.clone(), note.clone());
        let later = move |g: &mut ActorGraph| {
            let mut ops = Vec::new();
            let text = if continue_parent && into2.len() == 1 {
                format!("→ boundary `{d2}` resolved: the lines continue here")
            } else {
                format!("→ boundary `{d2}` resolved into {}", ticks(&into2))
            };
            let marker = ChatLine {
                at: format_rfc3339(now),
                role: Role::Routing,
                text,
                tokens: 0,
                spawn: None,
                from: None,
                extra: Default::default(),
            };
            ops.push(g.push_chat(&p2, marker).1);
            let rec = obj(vec![
                ("node", json!(d2)),
                ("parent", json!(p2)),
                ("into", json!(into2)),
                ("continueParent", json!(continue_parent)),
                ("note", json!(note2)),
            ]);
            let mut records = vec![g.push_meta("resolution", now, rec).1];
            if let Some(l) = g.state(&d2).last_ok_line() {
                let summary = if note2.is_empty() {
                    "boundary resolved".to_owned()
                } else {
                    format!("boundary resolved: {note2}")
                };
                let rec = obj(vec![
                    ("node", json!(d2)),
                    ("line", json!(l)),
                    ("summary", json!(summary)),
                ]);
                records.push(g.push_meta("ref", now, rec).1);
            }
            (ops, records)
        };
        let (_, batch) = self.commit_spawns(
            now,
            &parent,
            plans,
            format!("resolve {d}"),
            first,
            later,
            vec![d.clone()],
        );
        self.event("resolved", Some(&d));
        Ok(Resolution {
            parent,
            into,
            created,
            batch,
        })
    }

    /// Adds a metathread ref to an existing line of a node.
    pub fn add_ref(
        &mut self,
        now: Wall,
        node: &str,
        line: u64,
        summary: &str,
    ) -> Result<u64, ActorsError> {
        self.check_store()?;
        let id = self.known(node)?;
        let st = self.state(&id);
        let bad = |reason: String| ActorsError::RefInvalid {
            node: id.to_string(),
            line,
            reason,
        };
        if line == 0 || line > st.lines() {
            return Err(bad(format!(
                "the node has {} lines (lines count from 1)",
                st.lines()
            )));
        }
        match st.line(line) {
            Some(Entry::Corrupt { .. }) => {
                return Err(bad("that line is unreadable on disk".into()));
            }
            Some(Entry::Ok(_)) => {}
            None => return Err(ActorsError::NotLoaded(format!("{id} line {line}"))),
        }
        let (n, op) = self.push_meta(
            "ref",
            now,
            obj(vec![
                ("node", json!(id)),
                ("line", json!(line)),
                ("summary", json!(summary.trim())),
            ]),
        );
        let mut tx = Tx::new(format!("ref {id}:{line}"));
        tx.record(op);
        self.commit(tx);
        self.event("ref", Some(&id));
        Ok(n)
    }

    /// Adds a coordinator narrative line to the metathread.
    pub fn narrate(&mut self, now: Wall, text: &str) -> Result<u64, ActorsError> {
        self.check_store()?;
        Self::check_text(text)?;
        let (n, op) = self.push_meta("narrative", now, obj(vec![("text", json!(text.trim()))]));
        let mut tx = Tx::new("narrative");
        tx.record(op);
        self.commit(tx);
        self.event("narrative", None);
        Ok(n)
    }

    /// Declares (`Some(mode)`) or removes (`None`) `node`'s wait subscription on `target`.
    /// A subscription that would close a cycle is refused (`WAIT_CYCLE`).
    pub fn set_wait(
        &mut self,
        now: Wall,
        node: &str,
        target: &str,
        mode: Option<WaitMode>,
    ) -> Result<(), ActorsError> {
        let id = self.writable(node)?;
        self.set_wait_of(now, id, target, mode)
    }

    fn set_wait_of(
        &mut self,
        now: Wall,
        id: NodeId,
        target: &str,
        mode: Option<WaitMode>,
    ) -> Result<(), ActorsError> {
        self.hold_all(std::slice::from_ref(&id))?;
        let t = self.known(target)?;
        if id == t {
            return Err(ActorsError::InvalidArgument(
                "a node cannot wait on itself".into(),
            ));
        }
        if let Some(WaitMode::Other(m)) = &mode {
            return Err(ActorsError::InvalidArgument(format!(
                "unknown wait mode `{m}` (warn | enforce)"
            )));
        }
        match &mode {
            Some(m) => {
                if let Some(cycle) = self.wait_path(&t, &id) {
                    let mut c = vec![id.to_string()];
                    c.extend(cycle.into_iter().map(|n| n.to_string()));
                    return Err(ActorsError::WaitCycle {
                        node: id.to_string(),
                        target: t.to_string(),
                        cycle: c,
                    });
                }
                let meta = &mut self.state_mut(&id).meta;
                match meta.wait_on.iter_mut().find(|w| w.node == t) {
                    Some(w) => w.mode = m.clone(),
                    None => meta.wait_on.push(WaitOn {
                        node: t.clone(),
                        mode: m.clone(),
                        extra: Default::default(),
                    }),
                }
            }
            None => {
                let meta = &mut self.state_mut(&id).meta;
                let before = meta.wait_on.len();
                meta.wait_on.retain(|w| w.node != t);
                if meta.wait_on.len() == before {
                    return Err(ActorsError::InvalidArgument(format!(
                        "`{id}` does not wait on `{t}`"
                    )));
                }
            }
        }
        self.state_mut(&id).meta.last_event_at = Some(format_rfc3339(now));
        let mut tx = Tx::new(format!("wait {id} → {t}"));
        tx.op(self.put_meta(&id));
        let g = self.put_graph();
        tx.op(g);
        self.commit(tx);
        self.event("wait", Some(&id));
        Ok(())
    }

    /// A path of wait edges from `from` to `to`, if one exists.
    fn wait_path(&self, from: &NodeId, to: &NodeId) -> Option<Vec<NodeId>> {
        let mut stack = vec![(from.clone(), vec![from.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((n, path)) = stack.pop() {
            if n == *to {
                return Some(path);
            }
            if !seen.insert(n.clone()) {
                continue;
            }
            if let Some(st) = self.nodes.get(&n) {
                for w in &st.meta.wait_on {
                    let mut p = path.clone();
                    p.push(w.node.clone());
                    stack.push((w.node.clone(), p));
                }
            }
        }
        None
    }

    /// Adds a related (non-spawn) edge `from → to`.
    pub fn relate(
        &mut self,
        now: Wall,
        from: &str,
        to: &str,
        kind: RelatedKind,
    ) -> Result<(), ActorsError> {
        let id = self.writable(from)?;
        self.hold_all(std::slice::from_ref(&id))?;
        let t = self.known(to)?;
        if id == t {
            return Err(ActorsError::InvalidArgument(
                "a node cannot relate to itself".into(),
            ));
        }
        let meta = &mut self.state_mut(&id).meta;
        if !meta.related.iter().any(|r| r.kind == kind && r.node == t) {
            meta.related.push(Related {
                kind,
                node: t.clone(),
                extra: Default::default(),
            });
        }
        meta.last_event_at = Some(format_rfc3339(now));
        let mut tx = Tx::new(format!("relate {id} → {t}"));
        tx.op(self.put_meta(&id));
        let g = self.put_graph();
        tx.op(g);
        self.commit(tx);
        self.event("related", Some(&id));
        Ok(())
    }

    /// Reads back the children a trusted lazy open did not read of each node in `ids`
    /// (`hold_children`) before a call changes anything, so that a record
    /// rewritten whole keeps every child and an unreadable one is refused with the store's
    /// error up front (nothing changed), not at the flush.
    fn hold_all(&mut self, ids: &[NodeId]) -> Result<(), ActorsError> {
        for id in ids {
            self.hold_children(id).map_err(ActorsError::StoreIo)?;
        }
        Ok(())
    }

    /// Archives (`hidden = true`) or restores a node. Archive is a view filter: nothing is
    /// deleted.
    pub fn archive(&mut self, now: Wall, node: &str, hidden: bool) -> Result<(), ActorsError> {
        let id = self.writable(node)?;
        self.hold_all(std::slice::from_ref(&id))?;
        if id == self.root {
            return Err(ActorsError::InvalidArgument(
                "the root coordinator cannot be archived".into(),
            ));
        }
        let meta = &mut self.state_mut(&id).meta;
        meta.hidden = hidden;
        meta.archived_at = hidden.then(|| format_rfc3339(now));
        let mut tx = Tx::new(format!("archive {id}"));
        tx.op(self.put_meta(&id));
        let (_, op) = self.push_meta(
            "archive",
            now,
            obj(vec![("node", json!(id)), ("hidden", json!(hidden))]),
        );
        tx.record(op);
        self.commit(tx);
        self.event("archive", Some(&id));
        Ok(())
    }

    /// Reset in global mode: archives every node whose last activity is before `before`,
    /// except the root, nodes awaiting the user and nodes still running or blocked. A scope
    /// filter, never a delete. Returns the archived ids.
    pub fn reset(
        &mut self,
        now: Wall,
        before: Wall,
        bookmark: Option<&str>,
    ) -> Result<Vec<NodeId>, ActorsError> {
        self.check_store()?;
        let ids: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(id, n)| {
                **id != self.root
                    && !n.meta.hidden
                    && !self.is_awaiting_user(&n.meta)
                    && !matches!(n.meta.status, Status::Running | Status::Blocked)
                    && !self.gates.contains_key(*id)
                    && self.last_activity(id).is_some_and(|t| t < before)
            })
            .map(|(id, _)| id.clone())
            .collect();
        self.hold_all(&ids)?;
        let ts = format_rfc3339(now);
        let mut tx = Tx::new("reset");
        for id in &ids {
            let m = &mut self.state_mut(id).meta;
            m.hidden = true;
            m.archived_at = Some(ts.clone());
            tx.op(self.put_meta(id));
        }
        let mut rec = obj(vec![
            ("before", json!(format_rfc3339(before))),
            ("archived", json!(ids)),
        ]);
        if let Some(b) = bookmark {
            rec.insert("bookmark".into(), json!(b));
        }
        let (_, op) = self.push_meta("reset", now, rec);
        tx.record(op);
        self.commit(tx);
        self.event("reset", None);
        Ok(ids)
    }

    /// Adds a timeline bookmark (`timeline/bookmarks.jsonl`, mirrored in the metathread).
    pub fn bookmark(
        &mut self,
        now: Wall,
        scope: &Scope,
        keywords: Vec<String>,
        text: &str,
        image: Option<&str>,
    ) -> Result<u64, ActorsError> {
        self.check_store()?;
        if let Scope::Subtree(n) = scope {
            self.known(n.as_str())?;
        }
        if text.trim().is_empty() && keywords.is_empty() {
            return Err(ActorsError::InvalidArgument(
                "a bookmark needs text or keywords".into(),
            ));
        }
        let mut rec = obj(vec![
            ("scope", json!(scope.to_string())),
            ("keywords", json!(keywords)),
            ("text", json!(text.trim())),
            ("at", json!(format_rfc3339(now))),
        ]);
        if let Some(i) = image {
            rec.insert("image".into(), json!(i));
        }
        let text_line = line(&rec);
        self.bookmarks.push(Entry::Ok(rec.clone()));
        let n = self.bookmarks.len() as u64;
        rec.remove("at");
        let mut tx = Tx::new("bookmark");
        tx.op(Op::Append {
            path: BOOKMARKS.to_owned(),
            text: text_line,
        });
        let (_, op) = self.push_meta("bookmark", now, rec);
        tx.record(op);
        self.commit(tx);
        self.event("bookmark", None);
        Ok(n)
    }

    /// The coordinator reframes a batch: writes `views/epoch-N.json` (the task tiles and their
    /// grid positions) and stamps `viewEpoch` on those nodes. Needs `ACTOR_GRAPH_EPOCHS=on`.
    pub fn reframe_epoch(
        &mut self,
        now: Wall,
        reason: &str,
        nodes: Option<Vec<String>>,
    ) -> Result<u64, ActorsError> {
        self.check_store()?;
        if !self.config.graph_epochs {
            return Err(ActorsError::EpochsDisabled);
        }
        let ids: Vec<NodeId> = match nodes {
            Some(list) => list
                .iter()
                .map(|n| self.writable(n))
                .collect::<Result<_, _>>()?,
            None => self
                .node_ids()
                .into_iter()
                .filter(|id| {
                    let m = &self.state(id).meta;
                    m.node_type == NodeType::Task && !m.hidden && !self.gates.contains_key(id)
                })
                .collect(),
        };
        self.hold_all(&ids)?;
        let epoch = self.epochs.keys().next_back().copied().unwrap_or(0) + 1;
        let cols = super::views::GRID_COLUMNS;
        let tiles: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let m = &self.state(id).meta;
                json!({"id": id, "col": i % cols, "row": i / cols, "status": m.status, "title": m.title})
            })
            .collect();
        let snap = json!({"epoch": epoch, "at": format_rfc3339(now), "reason": reason.trim(), "nodes": tiles});
        let mut tx = Tx::new(format!("epoch {epoch}"));
        tx.op(Op::Put {
            path: format!("views/epoch-{epoch}.json"),
            text: pretty(&snap),
        });
        for id in &ids {
            self.state_mut(id).meta.view_epoch = Some(epoch);
            tx.op(self.put_meta(id));
        }
        let (_, op) = self.push_meta(
            "epoch",
            now,
            obj(vec![
                ("epoch", json!(epoch)),
                ("reason", json!(reason.trim())),
                ("nodes", json!(ids)),
            ]),
        );
        tx.record(op);
        self.epochs.insert(epoch, Some(snap));
        self.commit(tx);
        self.event("epoch", None);
        Ok(epoch)
    }

    /// Writes `thread.jsonl` (every line of every node merged by time — an export, never read
    /// back) and the `orchestrator/index.json` aggregate. Returns the number of exported lines.
    pub fn export(&mut self, now: Wall) -> Result<usize, ActorsError> {
        self.check_store()?;
        let (text, n) = self.thread_export(now);
        let mut tx = Tx::new("export");
        tx.op(Op::Put {
            path: THREAD.to_owned(),
            text,
        });
        tx.op(Op::Put {
            path: INDEX.to_owned(),
            text: pretty(&self.index_aggregate(now)),
        });
        self.commit(tx);
        Ok(n)
    }

    /// Writes only the `orchestrator/index.json` aggregate.
    pub fn write_index(&mut self, now: Wall) -> Result<(), ActorsError> {
        self.check_store()?;
        let mut tx = Tx::new("index");
        tx.op(Op::Put {
            path: INDEX.to_owned(),
            text: pretty(&self.index_aggregate(now)),
        });
        self.commit(tx);
        Ok(())
    }
}

fn ticks(ids: &[NodeId]) -> String {
    ids.iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
