//! Opening a store: parse every record (tolerating what dev-centr/harness writes), report
//! what is corrupt with file and line, keep the rest of the graph working, and roll
//! half-finished spawns and resolutions forward (crash recovery). Or open lazily
//! ([`ActorGraph::open_lazy`]): only the nodes a one-shot command touches, when nothing is due
//! for recovery or diagnosis.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::model::{ChatLine, GitCloseout, GraphIndex, Mailbox, Node, NodeType, Role};
use super::store::{BatchId, Op, Snapshot};
use super::time::{format_rfc3339, parse_timestamp};
use super::{
    ActorGraph, ActorsError, BOOKMARKS, Broken, Diagnostic, Entry, GRAPH, HarnessConfig,
    METATHREAD, NodeId, NodeState, Tx, chat_path, obj,
};
use crate::Millis;

/// What [`ActorGraph::open`] found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OpenReport {
    /// Every problem, with file and (for logs) line.
    pub diagnostics: Vec<Diagnostic>,
    /// The repairs queued in the recovery batch, in words.
    pub repairs: Vec<String>,
    /// The recovery batch, when repairs were needed.
    #[serde(rename = "recoveryBatch", skip_serializing_if = "Option::is_none")]
    pub recovery_batch: Option<BatchId>,
    /// Set by a host that tried a lazy open ([`ActorGraph::open_lazy`]) and opened in full
    /// instead: why.
    #[serde(rename = "lazyFallback", skip_serializing_if = "Option::is_none")]
    pub lazy_fallback: Option<String>,
}

/// A JSONL log as read: its lines, and what was wrong with its tail.
struct Log<T> {
    entries: Vec<Entry<T>>,
    /// Bytes up to and including the last complete line.
    complete_len: u64,
    /// A torn last line: (its would-be line number, its bytes).
    torn: Option<(u64, Vec<u8>)>,
    /// The last line is complete but lacks its newline.
    missing_newline: bool,
}

fn parse_log<T: DeserializeOwned>(file: &str, bytes: &[u8], diags: &mut Vec<Diagnostic>) -> Log<T> {
    let mut log = Log {
        entries: Vec::new(),
        complete_len: 0,
        torn: None,
        missing_newline: false,
    };
    let mut offset = 0usize;
    let mut rest = bytes;
    while !rest.is_empty() {
        let (seg, terminated) = match rest.iter().position(|b| *b == b'\n') {
            Some(i) => (&rest[..i], true),
            None => (rest, false),
        };
        let next = offset + seg.len() + usize::from(terminated);
        rest = &bytes[next..];
        let blank = seg.iter().all(u8::is_ascii_whitespace);
        if blank {
            if terminated {
                log.complete_len = next as u64;
            }
            offset = next;
            continue;
        }
        let line_no = log.entries.len() as u64 + 1;
        let parsed = std::str::from_utf8(seg)
            .map_err(|e| e.to_string())
            // The byte parser (after the UTF-8 check): the one serde_json reader the core uses,
            // so every record type is compiled for one reader.
            .and_then(|s| serde_json::from_slice::<T>(s.as_bytes()).map_err(|e| e.to_string()));
        match (parsed, terminated) {
            (Ok(v), t) => {
                log.entries.push(Entry::Ok(v));
                log.complete_len = next as u64;
                log.missing_newline = !t;
            }
            (Err(e), true) => {
                diags.push(Diagnostic {
                    code: "CORRUPT_LINE",
                    file: file.to_owned(),
                    line: Some(line_no),
                    message: format!("line {line_no} is not a valid record ({e}); kept verbatim, skipped by readers"),
                    repaired: false,
                });
                log.entries.push(Entry::Corrupt {
                    raw: String::from_utf8_lossy(seg).into_owned(),
                    error: e,
                });
                log.complete_len = next as u64;
            }
            (Err(e), false) => {
                diags.push(Diagnostic {
                    code: "TORN_LINE",
                    file: file.to_owned(),
                    line: Some(line_no),
                    message: format!(
                        "the last line ({} bytes, no newline) is torn ({e}): an append was interrupted",
                        seg.len()
                    ),
                    repaired: false,
                });
                log.torn = Some((line_no, seg.to_vec()));
            }
        }
        offset = next;
    }
    log
}

fn parse_json<T: DeserializeOwned>(
    file: &str,
    bytes: &[u8],
    diags: &mut Vec<Diagnostic>,
) -> Option<T> {
    match serde_json::from_slice::<T>(bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            diags.push(Diagnostic {
                code: "CORRUPT_JSON",
                file: file.to_owned(),
                line: Some(e.line() as u64),
                message: format!("{file} is not a valid record: {e}"),
                repaired: false,
            });
            None
        }
    }
}

/// Torn tails found while loading, per path.
#[derive(Default)]
struct Tails {
    torn: Vec<(String, u64, u64, Vec<u8>)>,
    newline: Vec<String>,
}

impl Tails {
    fn note<T>(&mut self, path: &str, log: &Log<T>) {
        if let Some((line, bytes)) = &log.torn {
            self.torn
                .push((path.to_owned(), log.complete_len, *line, bytes.clone()));
        } else if log.missing_newline {
            self.newline.push(path.to_owned());
        }
    }
}

/// Parses the records of nodes `ids` from `snap`: readable nodes, and nodes whose `meta.json`
/// cannot be used (reported in `diags`).
fn read_nodes(
    snap: &Snapshot,
    ids: BTreeSet<String>,
    diags: &mut Vec<Diagnostic>,
    tails: &mut Tails,
) -> (BTreeMap<NodeId, NodeState>, BTreeMap<String, Broken>) {
    let mut nodes = BTreeMap::new();
    let mut broken = BTreeMap::new();
    for raw in ids {
        let Ok(id) = NodeId::parse(&raw) else {
            let why = NodeId::parse(&raw).unwrap_err();
            diags.push(Diagnostic {
                code: "INVALID_NODE_ID",
                file: format!("nodes/{raw}"),
                line: None,
                message: format!("directory name {raw:?} is not a valid node id ({why}); ignored"),
                repaired: false,
            });
            continue;
        };
        let mpath = format!("nodes/{id}/meta.json");
        let Some(mb) = snap.files.get(&mpath) else {
            diags.push(Diagnostic {
                code: "MISSING_META",
                file: mpath,
                line: None,
                message: format!("nodes/{id}/ has no meta.json; it is not a node (ignored)"),
                repaired: false,
            });
            continue;
        };
        let meta: Node = match serde_json::from_slice::<Node>(mb) {
            Ok(m) if m.id == id => m,
            Ok(m) => {
                let error = format!("its id is `{}`, not `{id}`", m.id);
                diags.push(Diagnostic {
                    code: "ID_MISMATCH",
                    file: mpath.clone(),
                    line: None,
                    message: error.clone(),
                    repaired: false,
                });
                broken.insert(id.to_string(), Broken { file: mpath, error });
                continue;
            }
            Err(e) => {
                diags.push(Diagnostic {
                    code: "CORRUPT_JSON",
                    file: mpath.clone(),
                    line: Some(e.line() as u64),
                    message: format!(
                        "{mpath} is not a valid node record: {e}; the node is read-only until fixed"
                    ),
                    repaired: false,
                });
                broken.insert(
                    id.to_string(),
                    Broken {
                        file: mpath,
                        error: e.to_string(),
                    },
                );
                continue;
            }
        };
        let cpath = chat_path(id.as_str());
        let chat = match snap.files.get(&cpath) {
            Some(b) => {
                let log = parse_log::<ChatLine>(&cpath, b, diags);
                tails.note(&cpath, &log);
                log.entries
            }
            None => Vec::new(),
        };
        let mut chain = BTreeMap::new();
        let prefix = format!("nodes/{id}/summaries/");
        let mut latest = None;
        for (p, b) in snap.files.range(prefix.clone()..) {
            let Some(name) = p.strip_prefix(&prefix) else {
                break;
            };
            if name == "latest.json" {
                latest = parse_json::<Mailbox>(p, b, diags);
            } else if let Some(n) = name
                .strip_prefix('v')
                .and_then(|s| s.strip_suffix(".json"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                chain.insert(n, parse_json::<Mailbox>(p, b, diags));
            }
        }
        nodes.insert(
            id,
            NodeState {
                meta,
                chat,
                mailbox: latest,
                chain,
            },
        );
    }
    (nodes, broken)
}

impl ActorGraph {
    /// Opens a graph from a store snapshot. Unreadable records are reported (file and line)
    /// and isolated: a corrupt `meta.json` makes that node read-only and leaves the rest
    /// working; a corrupt log line is kept verbatim so later line numbers stay true.
    ///
    /// Recovery: half-finished spawns are rolled forward from the child record (the first
    /// thing a spawn writes): the parent's `spawned[]`, `graph.json`, the routing marker and
    /// the metathread record are completed; resolutions likewise from the disambiguation's
    /// `resolvedInto`; torn last lines are cut off and their bytes recorded in the metathread.
    /// The repairs are applied in memory and queued as one batch (read-only hosts discard it).
    pub fn open(
        config: HarnessConfig,
        root_address: &str,
        snap: &Snapshot,
        now: Millis,
    ) -> Result<(ActorGraph, OpenReport), ActorsError> {
        let mut diags = Vec::new();
        let mut tails = Tails::default();
        let mut graph_corrupt = false;
        let graph: Option<GraphIndex> = match snap.files.get(GRAPH) {
            Some(b) => {
                let g = parse_json(GRAPH, b, &mut diags);
                graph_corrupt = g.is_none();
                g
            }
            None => None,
        };
        let mut ids: BTreeSet<String> = BTreeSet::new();
        for d in &snap.dirs {
            if let Some(id) = d.strip_prefix("nodes/")
                && !id.contains('/')
            {
                ids.insert(id.to_owned());
            }
        }
        for p in snap.files.keys() {
            if let Some(rest) = p.strip_prefix("nodes/")
                && let Some((id, _)) = rest.split_once('/')
            {
                ids.insert(id.to_owned());
            }
        }
        let (nodes, broken) = read_nodes(snap, ids, &mut diags, &mut tails);
        if nodes.is_empty() && broken.is_empty() && graph.is_none() && !graph_corrupt {
            return Err(ActorsError::NotInitialized);
        }
        let root = graph
            .as_ref()
            .map(|g| g.root.clone())
            .filter(|r| nodes.contains_key(r) || broken.contains_key(r.as_str()))
            .or_else(|| {
                let top = |want_coord: bool| {
                    nodes
                        .iter()
                        .find(|(_, n): &(&NodeId, &NodeState)| {
                            n.meta.spawned_by.is_none()
                                && (!want_coord || n.meta.node_type == NodeType::Coordinator)
                        })
                        .map(|(id, _)| id.clone())
                };
                top(true).or_else(|| top(false))
            });
        let Some(root) = root else {
            diags.push(Diagnostic {
                code: "NO_ROOT",
                file: GRAPH.to_owned(),
                line: None,
                message: "no root coordinator could be found".into(),
                repaired: false,
            });
            return Err(ActorsError::NotInitialized);
        };
        let mut g = ActorGraph::empty(config, root_address, root);
        if let Some(gr) = &graph {
            g.graph_version = gr.version;
            g.graph_extra = gr.extra.clone();
            g.index = gr.nodes.clone();
        }
        g.nodes = nodes;
        g.broken = broken;
        if let Some(b) = snap.files.get(METATHREAD) {
            let log = parse_log::<Map<String, Value>>(METATHREAD, b, &mut diags);
            tails.note(METATHREAD, &log);
            g.meta = log.entries;
        }
        if let Some(b) = snap.files.get(BOOKMARKS) {
            let log = parse_log::<Map<String, Value>>(BOOKMARKS, b, &mut diags);
            tails.note(BOOKMARKS, &log);
            g.bookmarks = log.entries;
        }
        for (p, b) in snap.files.range("views/".to_owned()..) {
            if !p.starts_with("views/") {
                break;
            }
            if let Some(n) = p
                .strip_prefix("views/epoch-")
                .and_then(|s| s.strip_suffix(".json"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                g.epochs.insert(n, parse_json::<Value>(p, b, &mut diags));
            }
        }
        let mut report = OpenReport::default();
        g.recover(
            now,
            &mut diags,
            tails,
            graph.as_ref(),
            graph_corrupt,
            &mut report,
        );
        g.diagnostics = diags.clone();
        report.diagnostics = diags;
        Ok((g, report))
    }

    fn recover(
        &mut self,
        now: Millis,
        diags: &mut Vec<Diagnostic>,
        tails: Tails,
        loaded: Option<&GraphIndex>,
        graph_corrupt: bool,
        report: &mut OpenReport,
    ) {
        // Stage 1 keeps torn bytes in quarantine records, stage 2 cuts them off (and moves an
        // unreadable graph.json aside), stage 3 completes lineage (records, markers), stage 4
        // writes the metathread records, which name the markers' lines, and the recovery's.
        let mut keep: Vec<Op> = Vec::new();
        let mut first: Vec<Op> = Vec::new();
        let mut later: Vec<Op> = Vec::new();
        let mut records: Vec<Op> = Vec::new();
        let mut repairs: Vec<String> = Vec::new();
        let mut quarantined = Vec::new();
        for (i, (path, len, line, bytes)) in tails.torn.iter().enumerate() {
            let q = format!("orchestrator/torn/{now}-{i}.json");
            let rec = json!({
                "file": path, "line": line, "offset": len, "bytes": bytes.len(),
                "text": String::from_utf8_lossy(bytes), "at": format_rfc3339(now),
            });
            keep.push(Op::Put {
                path: q.clone(),
                text: super::pretty(&rec),
            });
            first.push(Op::Truncate {
                path: path.clone(),
                len: *len,
            });
            repairs.push(format!(
                "cut the torn line {line} of {path} ({} bytes, kept in {q})",
                bytes.len()
            ));
            quarantined
                .push(json!({"file": path, "line": line, "bytes": bytes.len(), "keptIn": q}));
            for d in diags.iter_mut() {
                if d.code == "TORN_LINE" && d.file == *path {
                    d.repaired = true;
                }
            }
        }
        for path in &tails.newline {
            first.push(Op::Append {
                path: path.clone(),
                text: "\n".into(),
            });
            repairs.push(format!("terminated the last line of {path}"));
        }
        if graph_corrupt {
            let aside = format!("graph.json.corrupt-{now}");
            first.push(Op::Rename {
                from: GRAPH.to_owned(),
                to: aside.clone(),
            });
            repairs.push(format!("moved the unreadable graph.json to {aside}"));
        }

        let mut dirty: BTreeSet<NodeId> = BTreeSet::new();
        // Children in creation order, so that roll-forward appends keep spawn order.
        let mut order: Vec<(Option<Millis>, NodeId)> = self
            .nodes
            .iter()
            .map(|(id, n)| {
                (
                    n.meta.created_at.as_deref().and_then(parse_timestamp),
                    id.clone(),
                )
            })
            .collect();
        order.sort();
        for (_, c) in &order {
            let cm = self.nodes[c].meta.clone();
            let Some(p) = cm.spawned_by.clone() else {
                continue;
            };
            if !self.nodes.contains_key(&p) {
                let (code, why) = if self.broken.contains_key(p.as_str()) {
                    ("PARENT_CORRUPT", "is unreadable")
                } else {
                    ("DANGLING_PARENT", "does not exist")
                };
                diags.push(Diagnostic {
                    code,
                    file: super::meta_path(c.as_str()),
                    line: None,
                    message: format!("`{c}` names `{p}` as its parent, which {why}"),
                    repaired: false,
                });
                continue;
            }
            if !self.nodes[&p].meta.spawned.contains(c) {
                self.state_mut(&p).meta.spawned.push(c.clone());
                dirty.insert(p.clone());
                repairs.push(format!(
                    "linked `{c}` into `{p}`.spawned (half-finished spawn)"
                ));
            }
            let marker = self.nodes[&p]
                .chat
                .iter()
                .position(|e| e.ok().and_then(ChatLine::spawned_child).as_ref() == Some(c));
            let marker_line = match marker {
                Some(i) => i as u64 + 1,
                None => {
                    let l = ChatLine {
                        at: format_rfc3339(now),
                        role: Role::Routing,
                        text: format!("→ spawned {} `{c}` (recovered)", cm.node_type),
                        tokens: 0,
                        spawn: Some(c.clone()),
                        from: None,
                        extra: Default::default(),
                    };
                    let (n, op) = self.push_chat(&p, l);
                    later.push(op);
                    repairs.push(format!(
                        "wrote the routing marker for `{c}` into `{p}` (line {n})"
                    ));
                    n
                }
            };
            let record = self.meta.iter().enumerate().find_map(|(i, e)| {
                let m = e.ok()?;
                (m.get("kind").and_then(Value::as_str) == Some("spawn")
                    && m.get("child").and_then(Value::as_str) == Some(c.as_str()))
                .then(|| {
                    let parent = m.get("parent").and_then(Value::as_str).unwrap_or("");
                    let line = m.get("parentLine").and_then(Value::as_u64);
                    (i as u64 + 1, parent.to_owned(), line)
                })
            });
            // A record that names another line than the marker (a store written before records
            // waited for their markers, or by another tool) cannot be rewritten in an
            // append-only log: it is reported, and audit flags it too.
            if let Some((meta_line, parent, line)) = &record
                && (parent != p.as_str() || *line != Some(marker_line))
            {
                diags.push(Diagnostic {
                    code: "SPAWN_RECORD_MISMATCH",
                    file: METATHREAD.to_owned(),
                    line: Some(*meta_line),
                    message: format!(
                        "the spawn record of `{c}` names `{parent}` line {}, but `{c}`'s routing marker is `{p}` line {marker_line}",
                        line.map_or("(none)".to_owned(), |l| l.to_string())
                    ),
                    repaired: false,
                });
            }
            if record.is_none() {
                let rec = obj(vec![
                    ("parent", json!(p)),
                    ("child", json!(c)),
                    ("type", json!(cm.node_type)),
                    ("parentLine", json!(marker_line)),
                    ("reason", json!("")),
                    ("trigger", json!("recovery")),
                ]);
                let (_, op) = self.push_meta("spawn", now, rec);
                records.push(op);
                repairs.push(format!("wrote the metathread spawn record of `{c}`"));
            }
        }
        // Parents: children that do not exist, duplicates, mismatches.
        let pids: Vec<NodeId> = self.nodes.keys().cloned().collect();
        for p in &pids {
            let spawned = self.nodes[p].meta.spawned.clone();
            let mut seen = BTreeSet::new();
            let mut dup = false;
            for c in &spawned {
                if !seen.insert(c.clone()) {
                    dup = true;
                    continue;
                }
                match self.nodes.get(c) {
                    None if self.broken.contains_key(c.as_str()) => {}
                    None => diags.push(Diagnostic {
                        code: "DANGLING_CHILD",
                        file: super::meta_path(p.as_str()),
                        line: None,
                        message: format!("`{p}`.spawned lists `{c}`, which does not exist"),
                        repaired: false,
                    }),
                    Some(cn) if cn.meta.spawned_by.as_ref() != Some(p) => diags.push(Diagnostic {
                        code: "LINEAGE_MISMATCH",
                        file: super::meta_path(p.as_str()),
                        line: None,
                        message: format!(
                            "`{p}`.spawned lists `{c}`, whose spawnedBy is {}",
                            cn.meta
                                .spawned_by
                                .as_ref()
                                .map_or("absent".to_owned(), |x| format!("`{x}`"))
                        ),
                        repaired: false,
                    }),
                    Some(_) => {}
                }
            }
            if dup {
                let mut seen = BTreeSet::new();
                self.state_mut(p)
                    .meta
                    .spawned
                    .retain(|c| seen.insert(c.clone()));
                dirty.insert(p.clone());
                repairs.push(format!("removed duplicate entries from `{p}`.spawned"));
            }
        }
        // Disambiguations: resolutions and pauses roll forward.
        for (_, d) in &order {
            let dm = self.nodes[d].meta.clone();
            if dm.node_type != NodeType::Disambiguation {
                continue;
            }
            let Some(p) = dm.spawned_by.clone().filter(|p| self.nodes.contains_key(p)) else {
                continue;
            };
            if let Some(into) = &dm.resolved_into {
                if self.nodes[&p].meta.routing_paused_by.as_ref() == Some(d) {
                    self.state_mut(&p).meta.routing_paused_by = None;
                    dirty.insert(p.clone());
                    repairs.push(format!(
                        "unpaused `{p}`: `{d}` is resolved (half-finished resolution)"
                    ));
                }
                let has = self.meta.iter().filter_map(Entry::ok).any(|m| {
                    m.get("kind").and_then(Value::as_str) == Some("resolution")
                        && m.get("node").and_then(Value::as_str) == Some(d.as_str())
                });
                if !has {
                    let needle = format!("boundary `{d}` resolved");
                    if !self.nodes[&p]
                        .chat
                        .iter()
                        .filter_map(Entry::ok)
                        .any(|l| l.role == Role::Routing && l.text.contains(&needle))
                    {
                        let l = ChatLine {
                            at: format_rfc3339(now),
                            role: Role::Routing,
                            text: format!(
                                "→ {needle} into {} (recovered)",
                                into.iter()
                                    .map(|i| format!("`{i}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                            tokens: 0,
                            spawn: None,
                            from: None,
                            extra: Default::default(),
                        };
                        later.push(self.push_chat(&p, l).1);
                    }
                    let rec = obj(vec![
                        ("node", json!(d)),
                        ("parent", json!(p)),
                        ("into", json!(into)),
                        ("continueParent", json!(into.contains(&p))),
                        ("note", json!("")),
                        ("recovered", json!(true)),
                    ]);
                    records.push(self.push_meta("resolution", now, rec).1);
                    repairs.push(format!("wrote the metathread resolution record of `{d}`"));
                }
            } else if dm.pauses_parent && self.nodes[&p].meta.routing_paused_by.is_none() {
                self.state_mut(&p).meta.routing_paused_by = Some(d.clone());
                dirty.insert(p.clone());
                repairs.push(format!(
                    "paused `{p}` for `{d}` (half-finished disambiguation spawn)"
                ));
            }
        }
        for p in &pids {
            let Some(by) = self.nodes[p].meta.routing_paused_by.clone() else {
                continue;
            };
            let ok = self.nodes.get(&by).is_some_and(|d| {
                d.meta.node_type == NodeType::Disambiguation
                    && d.meta.spawned_by.as_ref() == Some(p)
                    && d.meta.resolved_into.is_none()
            });
            if !ok {
                self.state_mut(p).meta.routing_paused_by = None;
                dirty.insert(p.clone());
                diags.push(Diagnostic {
                    code: "STALE_PAUSE",
                    file: super::meta_path(p.as_str()),
                    line: None,
                    message: format!(
                        "`{p}` was paused by `{by}`, which is not a pending disambiguation of it"
                    ),
                    repaired: true,
                });
                repairs.push(format!("unpaused `{p}` (stale pause by `{by}`)"));
            }
        }
        // A mailbox whose status and awaitingUser disagree (dev-centr/harness writes
        // `awaiting_user` with `awaitingUser: false`): reported as on disk, not rewritten.
        for p in &pids {
            let m = &self.nodes[p].meta;
            if m.status == super::Status::AwaitingUser && !m.awaiting_user {
                let why = "status is `awaiting_user` but awaitingUser is false (or absent)";
                diags.push(Diagnostic {
                    code: "STATUS_CONTRADICTION",
                    file: super::meta_path(p.as_str()),
                    line: None,
                    message: format!(
                        "`{p}`: {why} (status `{}`, awaitingUser {}); both are reported as written",
                        m.status, m.awaiting_user
                    ),
                    repaired: false,
                });
            }
        }
        for p in &dirty {
            later.insert(0, self.put_meta(p));
        }
        // graph.json: rewrite when it is missing, unreadable, or disagrees on lineage.
        let derived = self.graph_index();
        let lineage = |g: &GraphIndex| -> Vec<(String, String, Option<String>)> {
            g.nodes
                .iter()
                .map(|(k, e)| {
                    (
                        k.clone(),
                        e.node_type.to_string(),
                        e.spawned_by.as_ref().map(|s| s.to_string()),
                    )
                })
                .collect()
        };
        let stale = match loaded {
            None => true,
            Some(l) => l.root != derived.root || lineage(l) != lineage(&derived),
        };
        // What graph.json says that the node records contradict: reported as on disk (the
        // records win; a writer's recovery rewrites the index and says what it dropped).
        if let Some(l) = loaded {
            for (k, e) in &l.nodes {
                let Some(d) = derived.nodes.get(k) else {
                    diags.push(Diagnostic {
                        code: "GRAPH_NODE_MISSING",
                        file: GRAPH.to_owned(),
                        line: None,
                        message: format!(
                            "graph.json lists `{k}` ({}, spawnedBy {}), which has no node record (nodes/{k}/meta.json)",
                            e.node_type,
                            e.spawned_by.as_ref().map_or("absent".to_owned(), |x| format!("`{x}`"))
                        ),
                        repaired: true,
                    });
                    repairs.push(format!("dropped `{k}` from graph.json: no node record"));
                    continue;
                };
                if d.spawned_by != e.spawned_by || d.node_type != e.node_type {
                    let by = |x: &Option<NodeId>| {
                        x.as_ref().map_or("absent".to_owned(), |x| format!("`{x}`"))
                    };
                    diags.push(Diagnostic {
                        code: "GRAPH_LINEAGE_MISMATCH",
                        file: GRAPH.to_owned(),
                        line: None,
                        message: format!(
                            "graph.json says `{k}` is a {} spawned by {}; nodes/{k}/meta.json says a {} spawned by {}",
                            e.node_type,
                            by(&e.spawned_by),
                            d.node_type,
                            by(&d.spawned_by)
                        ),
                        repaired: true,
                    });
                }
            }
        }
        if stale {
            let op = self.put_graph();
            later.insert(0, op);
            if loaded.is_some() || !graph_corrupt {
                repairs.push("rewrote the graph.json index from the node records".into());
            }
            if loaded.is_none() && !graph_corrupt {
                diags.push(Diagnostic {
                    code: "MISSING_INDEX",
                    file: GRAPH.to_owned(),
                    line: None,
                    message: "graph.json is missing; rebuilt from the node records".into(),
                    repaired: true,
                });
            }
        }
        for d in diags.iter_mut() {
            if d.code == "CORRUPT_JSON" && d.file == GRAPH {
                d.repaired = true;
            }
        }
        if repairs.is_empty() {
            return;
        }
        let mut rec = obj(vec![("repairs", json!(repairs))]);
        if !quarantined.is_empty() {
            rec.insert("torn".into(), Value::Array(quarantined));
        }
        let (_, op) = self.push_meta("recovery", now, rec);
        records.push(op);
        let mut tx = Tx::new("recovery");
        for op in keep {
            tx.op(op);
        }
        tx.barrier();
        for op in first {
            tx.op(op);
        }
        tx.barrier();
        for op in later {
            tx.op(op);
        }
        for op in records {
            tx.record(op);
        }
        report.recovery_batch = Some(self.commit(tx));
        report.repairs = repairs;
        self.event("recovered", None);
    }
}

/// What [`ActorGraph::open_lazy`] decided.
#[derive(Debug)]
pub enum LazyOpen {
    /// The graph, holding the nodes the command touches (and what `graph.json` says of the
    /// others).
    Ready(Box<ActorGraph>),
    /// The store must be opened in full ([`ActorGraph::open`]): recovery or a diagnostic is
    /// due, or the store is not one a lazy open can trust. The reason, in words.
    Full(String),
}

impl ActorGraph {
    /// Opens a graph lazily, for a command that touches the nodes `targets` (a spawn's parent
    /// and the nodes its request names; a message's node and `from`; a status change's node).
    ///
    /// `head` holds `graph.json`, the metathread and, in `dirs`, the listing of `nodes/` (no
    /// node record). The core then says which nodes it needs and `read` (the host) adds their
    /// files to the snapshot (`meta.json`, `chat.jsonl`, `summaries/*.json`), at most once.
    /// Only what is read is held: the other nodes are known from `graph.json` (their ids stay
    /// taken, their entries and related edges are written back as loaded) and any call that
    /// would need one fails with `NOT_LOADED`.
    ///
    /// A lazy open queues no recovery and reports no diagnostic: whenever the store might need
    /// either, it answers [`LazyOpen::Full`] and the host opens in full, which recovers. That is
    /// the case when `graph.json` is missing or unreadable, when it and the `nodes/` listing
    /// disagree (a spawn renamed its child into place and stopped, or another tool wrote a
    /// node), when the metathread has a torn or corrupt line, when a node other than the root
    /// has no metathread spawn record naming its parent (a spawn's last stage is that record,
    /// so every half-finished spawn lacks it), when a disambiguation has no resolution record
    /// (pending, or a resolution stopped half-way), and when any record read is corrupt, torn,
    /// contradicts `graph.json`, or holds what open would repair or report (duplicate or
    /// dangling children, a stale pause, a status/awaitingUser contradiction). The writer's
    /// store has already moved whole staged nodes into place, so pending work shows as one of
    /// those.
    ///
    /// A spawn (`spawns`) also needs every task node when the wave rule could change one: under
    /// `GIT_CLOSEOUT=per-node`, or when a task's spawn record does not show a close-out other
    /// than `per-node` (recovered or foreign records). Otherwise the rule cannot change any node
    /// it did not read, and no task is read.
    pub fn open_lazy<E>(
        config: HarnessConfig,
        root_address: &str,
        head: Snapshot,
        targets: &[&str],
        spawns: bool,
        mut read: impl FnMut(&[String], &mut Snapshot) -> Result<(), E>,
    ) -> Result<LazyOpen, E> {
        let mut snap = head;
        let full = |why: String| Ok(LazyOpen::Full(why));
        let Some(gb) = snap.files.get(GRAPH) else {
            return full("graph.json is missing".into());
        };
        let index: GraphIndex = match serde_json::from_slice(gb) {
            Ok(g) => g,
            Err(e) => return full(format!("graph.json is unreadable ({e})")),
        };
        let listed: BTreeSet<&str> = snap
            .dirs
            .iter()
            .filter_map(|d| d.strip_prefix("nodes/"))
            .filter(|d| !d.contains('/'))
            .collect();
        if !listed
            .iter()
            .copied()
            .eq(index.nodes.keys().map(String::as_str))
        {
            return full("nodes/ and graph.json list different nodes".into());
        }
        let root = index.root.clone();
        if !index.nodes.contains_key(root.as_str()) {
            return full("graph.json does not list its root".into());
        }
        let mut diags = Vec::new();
        let meta_log = match snap.files.get(METATHREAD) {
            Some(b) => parse_log::<Map<String, Value>>(METATHREAD, b, &mut diags),
            None => Log {
                entries: Vec::new(),
                complete_len: 0,
                torn: None,
                missing_newline: false,
            },
        };
        if !diags.is_empty() || meta_log.torn.is_some() || meta_log.missing_newline {
            return full("the metathread has a torn or corrupt line".into());
        }
        // What the metathread says: each child's parent and close-out; resolved nodes.
        let mut recorded: BTreeMap<&str, (&str, Option<GitCloseout>)> = BTreeMap::new();
        let mut resolved: BTreeSet<&str> = BTreeSet::new();
        for m in meta_log.entries.iter().filter_map(Entry::ok) {
            let s = |k: &str| m.get(k).and_then(Value::as_str);
            match s("kind") {
                Some("spawn") => {
                    if let (Some(c), Some(p)) = (s("child"), s("parent")) {
                        recorded.insert(c, (p, s("gitCloseout").map(GitCloseout::parse)));
                    }
                }
                Some("resolution") => {
                    if let Some(n) = s("node") {
                        resolved.insert(n);
                    }
                }
                _ => {}
            }
        }
        for (id, e) in &index.nodes {
            let by = e.spawned_by.as_ref().map(NodeId::as_str);
            if *id == root.as_str() {
                if by.is_some() {
                    return full("graph.json gives its root a parent".into());
                }
                continue;
            }
            let Some(p) = by.filter(|p| index.nodes.contains_key(*p)) else {
                return full(format!("graph.json gives `{id}` no parent it lists"));
            };
            if recorded.get(id.as_str()).map(|r| r.0) != Some(p) {
                return full(format!(
                    "`{id}` has no metathread spawn record naming `{p}` (a spawn may be half-finished)"
                ));
            }
            if e.node_type == NodeType::Disambiguation && !resolved.contains(id.as_str()) {
                return full(format!("disambiguation `{id}` has no resolution record"));
            }
        }
        let mut want: BTreeSet<String> = targets
            .iter()
            .filter(|t| index.nodes.contains_key(**t))
            .map(|t| (*t).to_owned())
            .collect();
        let tasks = index
            .nodes
            .iter()
            .filter(|(_, e)| e.node_type == NodeType::Task);
        let wave_needs_tasks = spawns
            && (config.git_closeout == super::CloseoutDefault::PerNode
                || tasks.clone().any(|(id, _)| {
                    !matches!(
                        recorded.get(id.as_str()),
                        Some((_, Some(c))) if *c != GitCloseout::PerNode && !matches!(c, GitCloseout::Other(_))
                    )
                }));
        if wave_needs_tasks {
            want.extend(tasks.map(|(id, _)| id.clone()));
        }
        let missing: Vec<String> = want
            .iter()
            .filter(|id| !snap.files.contains_key(&super::meta_path(id)))
            .cloned()
            .collect();
        if !missing.is_empty() {
            read(&missing, &mut snap)?;
        }
        if let Some(id) = want
            .iter()
            .find(|id| !snap.files.contains_key(&super::meta_path(id)))
        {
            return full(format!("nodes/{id}/meta.json is missing"));
        }
        let mut tails = Tails::default();
        let (nodes, broken) = read_nodes(&snap, want, &mut diags, &mut tails);
        if let Some(d) = diags.first() {
            return full(format!("{} needs a full open ({})", d.file, d.code));
        }
        if !broken.is_empty() || !tails.torn.is_empty() || !tails.newline.is_empty() {
            return full("a node record needs a full open".into());
        }
        let mut child_count: BTreeMap<&str, usize> = BTreeMap::new();
        for e in index.nodes.values() {
            if let Some(p) = &e.spawned_by {
                *child_count.entry(p.as_str()).or_default() += 1;
            }
        }
        for (id, st) in &nodes {
            let m = &st.meta;
            let e = &index.nodes[id.as_str()];
            if e.node_type != m.node_type || e.spawned_by != m.spawned_by {
                return full(format!("graph.json and nodes/{id}/meta.json disagree"));
            }
            let mut seen = BTreeSet::new();
            for c in &m.spawned {
                let ok = seen.insert(c)
                    && index
                        .nodes
                        .get(c.as_str())
                        .is_some_and(|ce| ce.spawned_by.as_ref() == Some(id));
                if !ok {
                    return full(format!("`{id}`.spawned needs a full open (`{c}`)"));
                }
            }
            let children = child_count.get(id.as_str()).copied().unwrap_or(0);
            if children != m.spawned.len() {
                return full(format!("`{id}`.spawned and graph.json disagree"));
            }
            if let Some(by) = &m.routing_paused_by {
                let pending = index.nodes.get(by.as_str()).is_some_and(|d| {
                    d.node_type == NodeType::Disambiguation
                        && d.spawned_by.as_ref() == Some(id)
                        && !resolved.contains(by.as_str())
                });
                if !pending {
                    return full(format!("`{id}` has a stale pause"));
                }
            }
            if m.status == super::Status::AwaitingUser && !m.awaiting_user {
                return full(format!("`{id}`: status and awaitingUser disagree"));
            }
        }
        let unloaded: BTreeSet<String> = index
            .nodes
            .keys()
            .filter(|k| !nodes.contains_key(k.as_str()))
            .cloned()
            .collect();
        let mut g = ActorGraph::empty(config, root_address, root);
        g.graph_version = index.version;
        g.graph_extra = index.extra.clone();
        g.lazy = Some(super::Lazy {
            related: index
                .related
                .iter()
                .filter(|e| unloaded.contains(e.from.as_str()))
                .cloned()
                .collect(),
            unloaded,
        });
        g.index = index.nodes;
        g.nodes = nodes;
        g.meta = meta_log.entries;
        Ok(LazyOpen::Ready(Box::new(g)))
    }
}
