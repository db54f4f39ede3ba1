//! Projections of one graph (linear, grid, tree, temporal), the fork panel, the wait graph,
//! mailbox reads, the model-call slice, audit and exports. All read-only; all JSON-shaped so
//! every host (CLI, HTTP desk, wasm) serves the same thing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use serde_json::{Value, json};

use super::closeout::{allows_automatic_push, system_addendum};
use super::config::WaitGraphMode;
use super::model::{ChatLine, GitCloseout, Node, NodeType, Status, WaitMode};
use super::ops::may_spawn;
use super::time::{format_rfc3339, parse_timestamp};
use super::{ActorGraph, ActorsError, Entry, NodeId};
use crate::Wall;

/// Task tiles per grid row (also the epoch snapshot layout).
pub const GRID_COLUMNS: usize = 4;

/// A temporal scope: the whole root, or one node's subtree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Global,
    Subtree(NodeId),
}

impl Scope {
    /// Reads `global` or `node:{id}`.
    pub fn parse(s: &str) -> Result<Scope, ActorsError> {
        match s {
            "" | "global" => Ok(Scope::Global),
            _ => match s.strip_prefix("node:") {
                Some(id) => NodeId::parse(id).map(Scope::Subtree).map_err(|reason| {
                    ActorsError::InvalidNodeId {
                        id: id.to_owned(),
                        reason,
                    }
                }),
                None => Err(ActorsError::InvalidArgument(format!(
                    "scope `{s}` (expected `global` or `node:<id>`)"
                ))),
            },
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Global => f.write_str("global"),
            Scope::Subtree(n) => write!(f, "node:{n}"),
        }
    }
}

/// The state of one wait subscription.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WaitCheck {
    pub node: String,
    /// The mode the subscription declares.
    pub mode: WaitMode,
    /// What applies under `ACTOR_WAIT_GRAPH` (`off`, `warn` or `enforce`).
    pub effective: String,
    pub status: String,
    /// `terminal` (satisfied), `warn` (maybe stale, proceed), `blocked`, `missing`, `off`.
    pub outcome: &'static str,
    pub message: String,
}

/// One metathread ref, walked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditEntry {
    /// The metathread line holding the ref.
    #[serde(rename = "metaLine")]
    pub meta_line: u64,
    /// `ref`, or `spawn` (its `parentLine` refers to the routing marker).
    pub kind: String,
    pub node: String,
    pub line: u64,
    pub summary: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The referenced line, peeked (role, text up to 200 characters, at).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peek: Option<Value>,
}

/// The result of walking every ref of the metathread.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditReport {
    pub refs: usize,
    pub ok: usize,
    pub problems: usize,
    pub entries: Vec<AuditEntry>,
}

fn peek(l: &ChatLine) -> Value {
    let text: String = l.text.chars().take(200).collect();
    json!({"role": l.role, "text": text, "at": l.at})
}

impl ActorGraph {
    /// Whether a node is waiting for the user (never faded, never archived by reset).
    pub fn is_awaiting_user(&self, n: &Node) -> bool {
        n.awaiting_user || n.status == Status::AwaitingUser
    }

    /// The last moment anything happened on a node at or before `at` (record timestamps and
    /// chat lines).
    pub fn activity_before(&self, id: &NodeId, at: Wall) -> Option<Wall> {
        let st = self.nodes.get(id)?;
        let m = &st.meta;
        let mut best: Option<Wall> = None;
        let mut see = |t: Option<Wall>| {
            if let Some(t) = t.filter(|t| *t <= at) {
                best = Some(best.map_or(t, |b| b.max(t)));
            }
        };
        for s in [&m.created_at, &m.last_event_at, &m.last_touched_at] {
            see(s.as_deref().and_then(parse_timestamp));
        }
        for l in st.chat.iter().rev().filter_map(Entry::ok) {
            if let Some(t) = parse_timestamp(&l.at)
                && t <= at
            {
                see(Some(t));
                break;
            }
        }
        best
    }

    /// The last moment anything happened on a node.
    pub fn last_activity(&self, id: &NodeId) -> Option<Wall> {
        self.activity_before(id, Wall::MAX)
    }

    /// Temporal fade: 1.0 while active, dimming linearly to the floor as the node idles.
    /// Nodes awaiting the user and terminal nodes never fade.
    pub fn opacity(&self, id: &NodeId, at: Wall) -> f64 {
        let Some(st) = self.nodes.get(id) else {
            return 1.0;
        };
        if self.is_awaiting_user(&st.meta) || st.meta.status.is_terminal() {
            return 1.0;
        }
        let Some(last) = self.activity_before(id, at) else {
            return 1.0;
        };
        let idle = at.since(last);
        let c = &self.config;
        if idle <= c.fade_after_ms {
            return 1.0;
        }
        if idle >= c.fade_full_ms || c.fade_full_ms <= c.fade_after_ms {
            return c.fade_floor;
        }
        let f = (idle - c.fade_after_ms) as f64 / (c.fade_full_ms - c.fade_after_ms) as f64;
        1.0 - f * (1.0 - c.fade_floor)
    }

    /// The node and every descendant through `spawned[]`.
    pub fn subtree(&self, id: &NodeId) -> BTreeSet<NodeId> {
        let mut out = BTreeSet::new();
        let mut stack = vec![id.clone()];
        while let Some(n) = stack.pop() {
            if out.insert(n.clone())
                && let Some(c) = self.children(n.as_str())
            {
                stack.extend(c.iter().cloned());
            }
        }
        out
    }

    fn in_scope(&self, scope: &Scope) -> Result<Vec<NodeId>, ActorsError> {
        Ok(match scope {
            Scope::Global => self.node_ids(),
            Scope::Subtree(n) => {
                let n = self.known(n.as_str())?;
                let sub = self.subtree(&n);
                self.node_ids()
                    .into_iter()
                    .filter(|i| sub.contains(i))
                    .collect()
            }
        })
    }

    /// The wait subscriptions of `node`, checked against their targets' mailboxes.
    pub fn wait_checks(&self, node: &str) -> Result<Vec<WaitCheck>, ActorsError> {
        let id = self.known(node)?;
        let mode = self.config.wait_graph;
        Ok(self
            .state(&id)
            .meta
            .wait_on
            .iter()
            .map(|w| {
                let effective = match (mode, &w.mode) {
                    (WaitGraphMode::Off, _) => "off",
                    (WaitGraphMode::Enforce, _)
                    | (_, WaitMode::Enforce)
                    | (_, WaitMode::Other(_)) => "enforce",
                    (WaitGraphMode::Warn, WaitMode::Warn) => "warn",
                };
                let target = self.nodes.get(&w.node);
                let status = target.map_or("missing".to_owned(), |t| t.meta.status.to_string());
                let (outcome, message) = match target {
                    _ if effective == "off" => ("off", "ACTOR_WAIT_GRAPH=off".to_owned()),
                    None => (
                        if effective == "enforce" {
                            "blocked"
                        } else {
                            "warn"
                        },
                        format!("`{}` does not exist (or is unreadable)", w.node),
                    ),
                    Some(t) if t.meta.status.is_terminal() => (
                        "terminal",
                        format!("`{}` is {status}: safe to read", w.node),
                    ),
                    Some(_) if effective == "warn" => (
                        "warn",
                        format!(
                            "`{}` is {status}: its mailbox may be stale or partial",
                            w.node
                        ),
                    ),
                    Some(_) => (
                        "blocked",
                        format!("`{}` is {status}: blocked until it is terminal", w.node),
                    ),
                };
                WaitCheck {
                    node: w.node.to_string(),
                    mode: w.mode.clone(),
                    effective: effective.into(),
                    status,
                    outcome,
                    message,
                }
            })
            .collect())
    }

    /// What a model call in `node` receives: the node record, its mailbox, the last `recent`
    /// lines, its wait subscriptions and its close-out policy. Refused with `WAIT_BLOCKED`
    /// when an enforced subscription is not terminal.
    pub fn begin_model_call(&self, node: &str, recent: usize) -> Result<Value, ActorsError> {
        let id = self.known(node)?;
        let waits = self.wait_checks(node)?;
        let blocked: Vec<String> = waits
            .iter()
            .filter(|w| w.outcome == "blocked")
            .map(|w| format!("{} ({})", w.node, w.status))
            .collect();
        if !blocked.is_empty() {
            return Err(ActorsError::WaitBlocked {
                node: id.to_string(),
                on: blocked,
            });
        }
        let st = self.state(&id);
        let start = st.chat.len().saturating_sub(recent);
        let lines: Vec<Value> = st.chat[start..]
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                e.ok().map(
                    |l| json!({"line": st.chat_base + (start + i) as u64 + 1, "role": l.role, "text": l.text, "at": l.at}),
                )
            })
            .collect();
        let warnings: Vec<&String> = waits
            .iter()
            .filter(|w| w.outcome == "warn")
            .map(|w| &w.message)
            .collect();
        Ok(json!({
            "node": st.meta,
            "mailbox": st.mailbox,
            "recent": lines,
            "waits": waits,
            "warnings": warnings,
            "closeout": self.closeout_info(&st.meta),
        }))
    }

    fn closeout_info(&self, m: &Node) -> Value {
        let c = m.git_closeout.clone().unwrap_or(GitCloseout::Off);
        json!({"gitCloseout": c, "allowsAutomaticPush": allows_automatic_push(&c), "systemAddendum": system_addendum(&c)})
    }

    /// Reads `target`'s mailbox on behalf of `reader`. Under `ACTOR_WAIT_GRAPH` warn/enforce,
    /// reading a non-terminal sibling's (or subscribed node's) mailbox carries a maybe-stale
    /// warning.
    pub fn read_mailbox(&self, reader: Option<&str>, target: &str) -> Result<Value, ActorsError> {
        let t = self.known(target)?;
        let st = self.state(&t);
        let mailbox = match &st.mailbox {
            Some(m) => serde_json::to_value(m).expect("serializes"),
            None => {
                json!({"node": t, "version": 0, "status": st.meta.status, "summary": st.meta.summary, "throughLine": 0})
            }
        };
        let mut warning = None;
        if let Some(r) = reader {
            let r = self.known(r)?;
            let rm = &self.state(&r).meta;
            let sibling = r != t && rm.spawned_by.is_some() && rm.spawned_by == st.meta.spawned_by;
            let subscribed = rm.wait_on.iter().any(|w| w.node == t);
            if self.config.wait_graph != WaitGraphMode::Off
                && (sibling || subscribed)
                && !st.meta.status.is_terminal()
            {
                warning = Some(format!(
                    "maybe stale: `{t}` is {} — its mailbox may be partial; continue independent work",
                    st.meta.status
                ));
            }
        }
        Ok(
            json!({"node": t, "mailbox": mailbox, "maybeStale": warning.is_some(), "warning": warning}),
        )
    }

    fn node_json(&self, id: &NodeId) -> Value {
        let st = self.state(id);
        let m = &st.meta;
        let (spawned, partial) = self.children_read(id.as_str()).unwrap_or_default();
        let mut v = json!({
            "id": id,
            "type": m.node_type,
            "title": m.title,
            "topic": m.topic,
            "spawnedBy": m.spawned_by,
            "spawned": spawned,
            "status": m.status,
            "summary": m.summary,
            // As written on disk (a contradicting status is diagnosed at open).
            "awaitingUser": m.awaiting_user,
            "hidden": m.hidden,
            "pausedBy": m.routing_paused_by,
            "resolvedInto": m.resolved_into,
            "gitCloseout": m.git_closeout,
            "waitOn": m.wait_on,
            "related": m.related,
            "viewEpoch": m.view_epoch,
            "createdAt": m.created_at,
            "lastActivity": self.last_activity(id).map(format_rfc3339),
            "lines": st.lines(),
            "mailboxVersion": st.mailbox.as_ref().map_or(0, |mb| mb.version),
            "persisted": !self.gates.contains_key(id),
        });
        if let Some(why) = partial {
            // `spawned` (and the edges and tree rows under this node) list only the children
            // spawned since a lazy open: the others could not be read back.
            v["spawnedIncomplete"] = json!(why);
        }
        v
    }

    /// Edges for views: spawn edges, then wait and related edges.
    fn edges(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for id in self.node_ids() {
            for c in self.children(id.as_str()).unwrap_or_default().iter() {
                out.push(json!({"from": id, "to": c, "kind": "spawn"}));
            }
        }
        for e in self.graph_index().related {
            out.push(json!({"from": e.from, "to": e.to, "kind": e.kind}));
        }
        out
    }

    /// Every node with its type, spawnedBy and spawned list (spawn order), the unreadable
    /// nodes, the edges and the diagnostics of open.
    pub fn graph_view(&self) -> Value {
        let broken: Vec<Value> = self
            .broken
            .iter()
            .map(|(id, b)| {
                let e = self.index.get(id);
                json!({"id": id, "type": e.map(|e| e.node_type.to_string()), "spawnedBy": e.and_then(|e| e.spawned_by.clone()),
                       "file": b.file, "error": b.error})
            })
            .collect();
        json!({
            "root": self.root,
            "version": self.seq,
            "config": self.config,
            "nodes": self.node_ids().iter().map(|id| self.node_json(id)).collect::<Vec<_>>(),
            "broken": broken,
            "edges": self.edges(),
            "diagnostics": self.diagnostics,
        })
    }

    /// Linear (discussion cadence): the discussion-surface nodes, the focused transcript, and
    /// a compact worker status list that is never mixed into transcript lines.
    pub fn linear_view(&self, focus: Option<&str>) -> Result<Value, ActorsError> {
        let focus = match focus {
            Some(f) => self.known(f)?,
            None => self.root.clone(),
        };
        let ids = self.node_ids();
        let discussions: Vec<Value> = ids
            .iter()
            .filter(|id| {
                let m = &self.state(id).meta;
                m.node_type.is_discussion_surface() && !m.hidden
            })
            .map(|id| self.node_json(id))
            .collect();
        let workers: Vec<Value> = self
            .creation_order()
            .iter()
            .filter(|id| {
                let m = &self.state(id).meta;
                m.node_type == NodeType::Task && !m.hidden
            })
            .map(|id| {
                let m = &self.state(id).meta;
                json!({"id": id, "title": m.title, "status": m.status, "summary": m.summary})
            })
            .collect();
        Ok(json!({
            "focus": focus,
            "discussions": discussions,
            "transcript": self.transcript(&focus),
            "workers": workers,
        }))
    }

    fn transcript(&self, id: &NodeId) -> Vec<Value> {
        self.state(id)
            .chat
            .iter()
            .enumerate()
            .map(|(i, e)| match e {
                Entry::Ok(l) => {
                    let mut v = serde_json::to_value(l).expect("serializes");
                    v["line"] = json!(i + 1);
                    v
                }
                Entry::Corrupt { raw, error } => {
                    json!({"line": i + 1, "corrupt": raw, "error": error})
                }
            })
            .collect()
    }

    /// Grid (work cadence): one tile per visible task with its status mailbox; positions come
    /// from the latest epoch snapshot for nodes it includes, then spawn order.
    pub fn grid_view(&self, now: Wall) -> Value {
        let latest = self
            .epochs
            .iter()
            .next_back()
            .and_then(|(n, v)| v.as_ref().map(|v| (*n, v)));
        let mut placed: BTreeMap<String, usize> = BTreeMap::new();
        if let Some((_, snap)) = latest {
            for (i, t) in snap["nodes"].as_array().into_iter().flatten().enumerate() {
                if let Some(id) = t["id"].as_str() {
                    placed.insert(id.to_owned(), i);
                }
            }
        }
        let mut tasks: Vec<NodeId> = self
            .creation_order()
            .into_iter()
            .filter(|id| {
                let m = &self.state(id).meta;
                m.node_type == NodeType::Task && !m.hidden
            })
            .collect();
        tasks.sort_by_key(|id| placed.get(id.as_str()).copied().unwrap_or(usize::MAX));
        let tiles: Vec<Value> = tasks
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let mut v = self.node_json(id);
                v["opacity"] = json!(self.opacity(id, now));
                v["col"] = json!(i % GRID_COLUMNS);
                v["row"] = json!(i / GRID_COLUMNS);
                v["waits"] = json!(self.wait_checks(id.as_str()).unwrap_or_default());
                v["closeout"] = self.closeout_info(&self.state(id).meta);
                v
            })
            .collect();
        let running = tasks
            .iter()
            .filter(|id| self.state(id).meta.status == Status::Running)
            .count();
        json!({"epoch": latest.map(|(n, _)| n), "tiles": tiles, "running": running, "total": tasks.len(), "columns": GRID_COLUMNS})
    }

    /// Tree (left to right): depth is the column (root at 0), rows follow depth-first spawn
    /// order; `canSpawn` lists the types the `+` of a node may create.
    pub fn tree_view(&self) -> Value {
        let mut nodes = Vec::new();
        let mut row = 0usize;
        let mut stack = vec![(self.root.clone(), 0usize)];
        let mut seen = BTreeSet::new();
        while let Some((id, depth)) = stack.pop() {
            if !seen.insert(id.clone()) || !self.nodes.contains_key(&id) {
                continue;
            }
            let m = &self.state(&id).meta;
            let mut v = self.node_json(&id);
            v["depth"] = json!(depth);
            v["row"] = json!(row);
            let can: Vec<&str> = NodeType::KNOWN
                .iter()
                .copied()
                .filter(|t| may_spawn(&m.node_type, &NodeType::parse(t)) && *t != "disambiguation")
                .collect();
            v["canSpawn"] = json!(can);
            nodes.push(v);
            row += 1;
            for c in self.children(id.as_str()).unwrap_or_default().iter().rev() {
                stack.push((c.clone(), depth + 1));
            }
        }
        for id in self.node_ids() {
            if !seen.contains(&id) {
                let mut v = self.node_json(&id);
                v["depth"] = json!(0);
                v["row"] = json!(row);
                v["canSpawn"] = json!([]);
                v["detached"] = json!(true);
                nodes.push(v);
                row += 1;
            }
        }
        json!({"root": self.root, "nodes": nodes, "edges": self.edges()})
    }

    /// Temporal layout for a scope: which nodes were visible at `at` (created by then and not
    /// archived by then), their fade, the token-volume series bucketed over the scope's time
    /// range, the bookmarks and epochs. `at` defaults to `now`.
    pub fn temporal_view(
        &self,
        now: Wall,
        scope: &Scope,
        at: Option<Wall>,
        buckets: usize,
    ) -> Result<Value, ActorsError> {
        let at = at.unwrap_or(now);
        let ids = self.in_scope(scope)?;
        let buckets = buckets.clamp(1, 1000);
        let mut from = Wall::MAX;
        let mut to = now.max(at);
        let mut points: Vec<(Wall, u64, &NodeId)> = Vec::new();
        for id in &ids {
            let st = self.state(id);
            if let Some(c) = st.meta.created_at.as_deref().and_then(parse_timestamp) {
                from = from.min(c);
            }
            for l in st.chat.iter().filter_map(Entry::ok) {
                if let Some(t) = parse_timestamp(&l.at) {
                    from = from.min(t);
                    to = to.max(t);
                    points.push((t, l.tokens, id));
                }
            }
        }
        if from == Wall::MAX {
            from = to;
        }
        let span = to.since(from).max(1);
        let mut series = vec![0u64; buckets];
        for (t, tokens, _) in &points {
            if *t <= at {
                let b = ((t.since(from) as u128 * buckets as u128) / (span as u128 + 1)) as usize;
                series[b.min(buckets - 1)] += tokens;
            }
        }
        let peak = series.iter().copied().max().unwrap_or(0).max(1);
        let heat: Vec<f64> = series.iter().map(|v| *v as f64 / peak as f64).collect();
        let nodes: Vec<Value> = ids
            .iter()
            .map(|id| {
                let m = &self.state(id).meta;
                let created = m.created_at.as_deref().and_then(parse_timestamp);
                let archived = m.hidden && m.archived_at.as_deref().and_then(parse_timestamp).is_none_or(|a| a <= at);
                let visible = created.is_none_or(|c| c <= at) && !archived;
                json!({
                    "id": id, "type": m.node_type, "title": m.title, "status": m.status,
                    "visible": visible, "archived": archived,
                    "opacity": if visible { self.opacity(id, at) } else { 0.0 },
                    "createdAt": m.created_at, "lastActivity": self.activity_before(id, at).map(format_rfc3339),
                    "awaitingUser": self.is_awaiting_user(m),
                })
            })
            .collect();
        let in_scope: BTreeSet<&NodeId> = ids.iter().collect();
        let bookmarks: Vec<Value> = self
            .bookmarks
            .iter()
            .filter_map(Entry::ok)
            .filter(|b| match scope {
                Scope::Global => true,
                Scope::Subtree(_) => b
                    .get("scope")
                    .and_then(Value::as_str)
                    .and_then(|s| s.strip_prefix("node:"))
                    .and_then(|s| NodeId::parse(s).ok())
                    .is_some_and(|n| in_scope.contains(&n)),
            })
            .map(|b| Value::Object(b.clone()))
            .collect();
        let epochs: Vec<Value> = self
            .epochs
            .iter()
            .filter_map(|(n, v)| v.as_ref().map(|v| json!({"epoch": n, "at": v["at"], "reason": v["reason"], "nodes": v["nodes"].as_array().map_or(0, Vec::len)})))
            .collect();
        Ok(json!({
            "scope": scope.to_string(),
            "at": format_rfc3339(at),
            "from": format_rfc3339(from),
            "to": format_rfc3339(to),
            "nodes": nodes,
            "tokens": series,
            "heat": heat,
            "bookmarks": bookmarks,
            "epochs": epochs,
        }))
    }

    /// The fork panel: a node's record, its full transcript, mailbox and compaction chain,
    /// wait checks and close-out policy.
    pub fn fork_view(&self, node: &str) -> Result<Value, ActorsError> {
        let id = self.known(node)?;
        let st = self.state(&id);
        let chain: Vec<Value> = st
            .chain
            .iter()
            .map(|(n, m)| match m {
                Some(m) => serde_json::to_value(m).expect("serializes"),
                None => json!({"version": n, "corrupt": true}),
            })
            .collect();
        Ok(json!({
            "node": self.node_json(&id),
            "meta": st.meta,
            "transcript": self.transcript(&id),
            "mailbox": st.mailbox,
            "chain": chain,
            "waits": self.wait_checks(node)?,
            "closeout": self.closeout_info(&st.meta),
        }))
    }

    /// The last `limit` metathread entries (all when `None`), with their line numbers.
    pub fn metathread_view(&self, limit: Option<usize>) -> Value {
        let start = limit.map_or(0, |l| self.meta.len().saturating_sub(l));
        let lines: Vec<Value> = self.meta[start..]
            .iter()
            .enumerate()
            .map(|(i, e)| match e {
                Entry::Ok(m) => {
                    let mut v = Value::Object(m.clone());
                    v["line"] = json!(start + i + 1);
                    v
                }
                Entry::Corrupt { raw, error } => {
                    json!({"line": start + i + 1, "corrupt": raw, "error": error})
                }
            })
            .collect();
        json!({"total": self.meta.len(), "lines": lines})
    }

    /// Audit: walks the metathread's refs (and the routing-marker refs of spawn records) and
    /// peeks at each referenced line in its node's own log — no merged scroll is replayed.
    pub fn audit(&self) -> AuditReport {
        let mut entries = Vec::new();
        for (i, e) in self.meta.iter().enumerate() {
            let Entry::Ok(m) = e else { continue };
            let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
            let (node, line, expect_child) = match kind {
                "ref" => (m.get("node"), m.get("line"), None),
                "spawn" => (
                    m.get("parent"),
                    m.get("parentLine"),
                    m.get("child").and_then(Value::as_str),
                ),
                _ => continue,
            };
            let node = node.and_then(Value::as_str).unwrap_or("").to_owned();
            let line = line.and_then(Value::as_u64).unwrap_or(0);
            let summary = m
                .get("summary")
                .or_else(|| m.get("reason"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let mut entry = AuditEntry {
                meta_line: i as u64 + 1,
                kind: kind.to_owned(),
                node: node.clone(),
                line,
                summary,
                ok: false,
                problem: None,
                peek: None,
            };
            let target = NodeId::parse(&node).ok().and_then(|n| self.nodes.get(&n));
            match target {
                None if self.broken.contains_key(&node) => {
                    entry.problem = Some(format!("`{node}` is unreadable"))
                }
                None => entry.problem = Some(format!("no node `{node}`")),
                Some(st) => match st.chat.get((line as usize).wrapping_sub(1)) {
                    None => entry.problem = Some(format!("`{node}` has {} lines", st.chat.len())),
                    Some(Entry::Corrupt { .. }) => {
                        entry.problem = Some("the line is unreadable".into())
                    }
                    Some(Entry::Ok(l)) => {
                        entry.peek = Some(peek(l));
                        match expect_child {
                            Some(c)
                                if l.spawned_child().as_ref().map(NodeId::as_str) != Some(c) =>
                            {
                                entry.problem =
                                    Some(format!("line {line} is not the routing marker of `{c}`"))
                            }
                            _ => entry.ok = true,
                        }
                    }
                },
            }
            entries.push(entry);
        }
        let ok = entries.iter().filter(|e| e.ok).count();
        AuditReport {
            refs: entries.len(),
            ok,
            problems: entries.len() - ok,
            entries,
        }
    }

    /// `orchestrator/index.json`: per node its type, status, summary, line range, the lines
    /// the metathread refers to, and mailbox version.
    pub fn index_aggregate(&self, now: Wall) -> Value {
        let mut refs: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for m in self.meta.iter().filter_map(Entry::ok) {
            let (n, l) = match m.get("kind").and_then(Value::as_str) {
                Some("ref") => (m.get("node"), m.get("line")),
                Some("spawn") => (m.get("parent"), m.get("parentLine")),
                _ => continue,
            };
            if let (Some(n), Some(l)) = (n.and_then(Value::as_str), l.and_then(Value::as_u64)) {
                refs.entry(n.to_owned()).or_default().insert(l);
            }
        }
        let mut nodes = serde_json::Map::new();
        for id in self.node_ids() {
            let st = self.state(&id);
            let ats: Vec<&str> = st
                .chat
                .iter()
                .filter_map(Entry::ok)
                .map(|l| l.at.as_str())
                .collect();
            nodes.insert(
                id.to_string(),
                json!({
                    "type": st.meta.node_type, "status": st.meta.status, "summary": st.meta.summary,
                    "lines": [1.min(st.lines()), st.lines()],
                    "firstAt": ats.first(), "lastAt": ats.last(),
                    "refLines": refs.get(id.as_str()).map(|s| s.iter().copied().collect::<Vec<_>>()).unwrap_or_default(),
                    "mailboxVersion": st.mailbox.as_ref().map_or(0, |m| m.version),
                }),
            );
        }
        json!({"version": 1, "at": format_rfc3339(now), "root": self.root, "metathreadLines": self.meta.len(), "nodes": nodes})
    }

    /// `thread.jsonl`: a header, then every line of every node merged by time (ties in spawn
    /// order, then line order). An export for reading and replay tools; never read back.
    pub fn thread_export(&self, now: Wall) -> (String, usize) {
        let ids = self.node_ids();
        let mut all: Vec<(Wall, usize, usize, Value)> = Vec::new();
        for (ni, id) in ids.iter().enumerate() {
            for (li, e) in self.state(id).chat.iter().enumerate() {
                let (t, v) = match e {
                    Entry::Ok(l) => {
                        let mut v = serde_json::to_value(l).expect("serializes");
                        v["node"] = json!(id);
                        v["line"] = json!(li + 1);
                        (parse_timestamp(&l.at).unwrap_or(Wall::MAX), v)
                    }
                    Entry::Corrupt { raw, .. } => (
                        Wall::MAX,
                        json!({"node": id, "line": li + 1, "corrupt": raw}),
                    ),
                };
                all.push((t, ni, li, v));
            }
        }
        all.sort_by_key(|a| (a.0, a.1, a.2));
        let mut out = super::line(&json!({
            "kind": "export", "at": format_rfc3339(now), "root": self.root, "nodes": ids.len(), "lines": all.len(),
            "note": "an export of the per-node logs; not a source of truth",
        }));
        for (_, _, _, v) in &all {
            out.push_str(&super::line(v));
        }
        (out, all.len())
    }
}
