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
use super::store::{BatchId, LogTail, Op, Snapshot};
use super::time::{format_rfc3339, parse_timestamp};
use super::{
    ActorGraph, ActorsError, BOOKMARKS, Broken, Diagnostic, Entry, GRAPH, HarnessConfig,
    METATHREAD, NodeId, NodeState, Tx, chat_path, obj,
};
use crate::Wall;

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
    parse_log_from(file, bytes, 0, diags)
}

/// [`parse_log`] of a log's tail: `bytes` start after line `base` (diagnostics name the lines
/// of the whole file; `complete_len` is relative to `bytes`).
fn parse_log_from<T: DeserializeOwned>(
    file: &str,
    bytes: &[u8],
    base: u64,
    diags: &mut Vec<Diagnostic>,
) -> Log<T> {
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
        let line_no = base + log.entries.len() as u64 + 1;
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
    /// Node records a crash tore during a patch, repaired in memory: recovery rewrites them.
    records: Vec<NodeId>,
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

/// Records a trusted lazy open read by their ends, by node id (see [`LazySnapshot::record_ends`]).
type FromEndsMap = BTreeMap<String, (super::patch::FromEnds, std::sync::Arc<dyn GraphLookup>)>;

/// Parses node `id`'s `meta.json` from `snap` (a record torn by a crash during a patch is
/// repaired in memory, noted in `tails`): the record and where a patch adding a child starts
/// (see [`super::patch::meta_patch_at`]), or `None` when it cannot be used (reported in
/// `diags`; a corrupt record or another id also in `broken`).
fn parse_record(
    snap: &Snapshot,
    id: &NodeId,
    diags: &mut Vec<Diagnostic>,
    tails: &mut Tails,
    broken: &mut BTreeMap<String, Broken>,
) -> Option<(Node, Option<(u64, u64)>)> {
    let mpath = format!("nodes/{id}/meta.json");
    let Some(mb) = snap.files.get(&mpath) else {
        diags.push(Diagnostic {
            code: "MISSING_META",
            file: mpath,
            line: None,
            message: format!("nodes/{id}/ has no meta.json; it is not a node (ignored)"),
            repaired: false,
        });
        return None;
    };
    let parsed = serde_json::from_slice::<Node>(mb);
    let repaired = match &parsed {
        Err(_) => super::patch::repair_torn_meta(mb).filter(|m| m.id == *id),
        Ok(_) => None,
    };
    if let Some(m) = &repaired {
        diags.push(Diagnostic {
            code: "TORN_RECORD",
            file: mpath.clone(),
            line: None,
            message: format!(
                "{mpath} ends in a spawn's torn in-place write; its `spawned` was cut back to the last whole child ({}) and the record is rewritten",
                m.spawned.len()
            ),
            repaired: true,
        });
        tails.records.push(id.clone());
    }
    let meta: Node = match repaired.map(Ok).unwrap_or(parsed) {
        Ok(m) if m.id == *id => m,
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
            return None;
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
            return None;
        }
    };
    let meta_at = if meta.spawned.is_empty() {
        None
    } else {
        super::patch::meta_patch_at(mb, meta.last_event_at.is_some())
    };
    Some((meta, meta_at))
}

/// Parses the records of nodes `ids` from `snap` (or, for the ids in `from_ends`, from their
/// ends): readable nodes, and nodes whose `meta.json` cannot be used (reported in `diags`).
fn read_nodes(
    snap: &Snapshot,
    log_tails: &BTreeMap<String, LogTail>,
    ids: BTreeSet<String>,
    from_ends: &mut FromEndsMap,
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
        let (meta, meta_at, spawned_elided) = match from_ends.remove(id.as_str()) {
            Some((f, lookup)) => {
                let elided = super::Elided {
                    from: f.from,
                    to: f.to,
                    lookup,
                };
                (f.node, Some(f.meta_at), Some(elided))
            }
            None => match parse_record(snap, &id, diags, tails, &mut broken) {
                Some((meta, meta_at)) => (meta, meta_at, None),
                None => continue,
            },
        };
        let cpath = chat_path(id.as_str());
        let (chat, chat_base) = match (snap.files.get(&cpath), log_tails.get(&cpath)) {
            (Some(b), _) => {
                let log = parse_log::<ChatLine>(&cpath, b, diags);
                tails.note(&cpath, &log);
                (log.entries, 0)
            }
            (None, Some(t)) => {
                let log = parse_log_from::<ChatLine>(&cpath, &t.bytes, t.lines_before, diags);
                tails.note(&cpath, &log);
                (log.entries, t.lines_before)
            }
            (None, None) => (Vec::new(), 0),
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
                chat_base,
                mailbox: latest,
                chain,
                meta_at,
                spawned_elided,
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
        now: Wall,
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
        let (nodes, broken) = read_nodes(
            snap,
            &BTreeMap::new(),
            ids,
            &mut FromEndsMap::new(),
            &mut diags,
            &mut tails,
        );
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
            g.graph_at = snap
                .files
                .get(GRAPH)
                .and_then(|b| super::patch::graph_patch_at(b));
        }
        g.set_nodes(nodes);
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
        now: Wall,
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

        let mut dirty: BTreeSet<NodeId> = tails.records.iter().cloned().collect();
        // Children in creation order, so that roll-forward appends keep spawn order.
        let mut order: Vec<(Option<Wall>, NodeId)> = self
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

/// The chat lines a lazy open parses from the end of each node's `chat.jsonl`: the last one
/// (whether the log ends torn, unterminated or corrupt). The commands that open lazily append
/// and name the next line; none reads earlier lines.
pub const LAZY_TAIL_LINES: usize = 1;

/// What [`ActorGraph::open_lazy`] asks the host to read.
#[derive(Debug)]
pub struct LazyRead<'a> {
    /// The nodes whose `meta.json` and `summaries/*.json` go into
    /// [`LazySnapshot::snap`] and whose `chat.jsonl` goes into [`LazySnapshot::tails`] (or,
    /// whole, into `snap`).
    pub nodes: &'a [String],
    /// How many of the last chat lines the tail must hold (see
    /// [`tail_start`](super::tail_start)).
    pub tail_lines: usize,
    /// The whole metathread is needed (into [`LazySnapshot::snap`], `meta_mark` cleared): what
    /// the mark summarises does not agree with `graph.json`, and the open must see why.
    pub metathread: bool,
    /// The listing of `nodes/` is needed (into [`LazySnapshot::snap`]'s `dirs`): the host
    /// trusted its stamps and did not list, but the open cannot use that trust (`graph.json`
    /// is not in canonical form, or `GIT_CLOSEOUT` is now `per-node`).
    pub listing: bool,
}

/// What a lazy open learnt of a log's first `len` bytes (whole lines). A host may keep it and
/// hand it back ([`LazySnapshot::meta_mark`], [`super::LogTail`]) so that the next lazy open
/// reads only what follows, after checking that those bytes are still what they were.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LogMark {
    /// The bytes summarised, ending at a line boundary.
    pub len: u64,
    /// Their lines, as open numbers them.
    pub lines: u64,
    /// The metathread: the sum of the digests of its spawn records (child, parent, type,
    /// whether a task's close-out is other than `per-node`).
    #[serde(default)]
    pub spawns: u64,
    /// The metathread: the sum of the digests of its resolution records (node).
    #[serde(default)]
    pub resolutions: u64,
}

/// What a host hands [`ActorGraph::open_lazy`]: whole files in `snap`, and the ends of logs
/// in `tails` (by path). A log given whole in `snap` is read whole.
#[derive(Clone, Debug, Default)]
pub struct LazySnapshot {
    /// `graph.json`, the metathread and the `nodes/` listing (the head), then the records of
    /// the nodes read.
    pub snap: Snapshot,
    /// Log tails, by path (`nodes/<id>/chat.jsonl`).
    pub tails: BTreeMap<String, LogTail>,
    /// When set, `snap` holds only the metathread's bytes after `len`, and this summarises the
    /// bytes before (a mark an earlier lazy open returned, see
    /// [`ActorGraph::lazy_marks`]).
    pub meta_mark: Option<LogMark>,
    /// The host vouches that `graph.json` and the `nodes/` directory are exactly as a writer
    /// left them whose graph said [`ActorGraph::lazy_trusted`] after its last write (file
    /// stamps it kept match: device, inode, size, modification time). The open then does not
    /// parse `graph.json` (it reads its root, and looks ids up in its bytes) and needs no
    /// listing of `nodes/` in `snap.dirs`: it costs the same at any node count. The metathread
    /// and the records read are checked as always.
    pub trusted: bool,
    /// With `trusted`, a host may hand `graph.json` as its two ends instead of whole (not in
    /// `snap`): the open reads the root from the first bytes and checks the canonical tail,
    /// and looks ids up through the host ([`GraphLookup`]) rather than in the bytes, so a
    /// spawn reads a bounded number of bytes of it at any node count.
    pub graph_ends: Option<GraphEnds>,
    /// With `trusted`, a host may hand a node's `meta.json` as its two ends instead of whole
    /// (not in `snap`), by node id, when its own stamp of the record shows it unchanged since
    /// a writer whose graph said [`ActorGraph::lazy_trusted`] left it (see
    /// [`ActorGraph::lazy_records`]): the open reads the record's fields from the first bytes
    /// and its closing bytes from the last, never the children between (`spawned`, the part
    /// that grows with the node), so a spawn costs the same under a parent of any size. A
    /// record whose ends are not canonical, or handed to an open that is not trusted, is read
    /// whole through [`GraphLookup::record`].
    pub record_ends: BTreeMap<String, RecordEnds>,
}

/// A node's `meta.json` as a host hands a trusted lazy open without reading it whole
/// ([`LazySnapshot::record_ends`]).
#[derive(Clone, Debug)]
pub struct RecordEnds {
    /// Its first bytes (enough to hold the fields before `spawned`).
    pub head: Vec<u8>,
    /// Its last bytes (the last child, `spawned`'s close and `lastEventAt`).
    pub tail: Vec<u8>,
    /// Its size in bytes (from the stamp the host checked).
    pub size: u64,
    /// How the core reads the rest ([`GraphLookup::record`]).
    pub lookup: std::sync::Arc<dyn GraphLookup>,
}

/// `graph.json` as a host hands a trusted lazy open without reading it whole
/// ([`LazySnapshot::graph_ends`]).
#[derive(Clone, Debug)]
pub struct GraphEnds {
    /// Its first bytes (enough to hold `version` and `root`, its first keys).
    pub head: Vec<u8>,
    /// Its last bytes.
    pub tail: Vec<u8>,
    /// Its size in bytes (from the stamp the host checked).
    pub size: u64,
    /// How the core asks the host about the rest.
    pub lookup: std::sync::Arc<dyn GraphLookup>,
}

/// What a host answers about a `graph.json` it handed as its ends ([`GraphEnds`]). With
/// trusted stamps `graph.json` and `nodes/` list the same nodes, so a node is listed exactly
/// when its directory exists.
pub trait GraphLookup: std::fmt::Debug + Send + Sync {
    /// Whether `nodes/<id>` exists (no link followed). When the host cannot tell (an I/O
    /// error), `true`: the id is then treated as taken.
    fn exists(&self, id: &str) -> bool;
    /// `graph.json` whole, when the core needs the whole index (a rewrite), or `None` when
    /// it cannot be read.
    fn graph(&self) -> Option<Vec<u8>>;
    /// Bytes `from..to` of `nodes/<id>/meta.json` (no link followed), or `None` when they
    /// cannot be read (the file is shorter, or an I/O error). Hosts that hand no record by
    /// its ends ([`LazySnapshot::record_ends`]) need not answer.
    fn record(&self, id: &str, from: u64, to: u64) -> Option<Vec<u8>> {
        let _ = (id, from, to);
        None
    }
}

/// A string field of a metathread record, or `None` when it holds anything else.
struct MaybeStr<'a>(Option<std::borrow::Cow<'a, str>>);

impl<'de> serde::Deserialize<'de> for MaybeStr<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = MaybeStr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(MaybeStr(Some(v.into())))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(MaybeStr(Some(v.to_owned().into())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(MaybeStr(Some(v.into())))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(MaybeStr(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(MaybeStr(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(MaybeStr(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(MaybeStr(None))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(MaybeStr(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(MaybeStr(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                while a
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(MaybeStr(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// The fields of a metathread record a lazy open consults; a line parses as one exactly when
/// it parses as the JSON object open reads (duplicate keys: the last wins).
#[derive(Default)]
struct MetaRec<'a> {
    kind: Option<std::borrow::Cow<'a, str>>,
    child: Option<std::borrow::Cow<'a, str>>,
    parent: Option<std::borrow::Cow<'a, str>>,
    closeout: Option<std::borrow::Cow<'a, str>>,
    node: Option<std::borrow::Cow<'a, str>>,
    node_type: Option<std::borrow::Cow<'a, str>>,
}

impl<'de> serde::Deserialize<'de> for MetaRec<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = MetaRec<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                let mut r = MetaRec::default();
                while let Some(k) = a.next_key::<MaybeStr<'de>>()? {
                    let slot = match k.0.as_deref() {
                        Some("kind") => &mut r.kind,
                        Some("child") => &mut r.child,
                        Some("parent") => &mut r.parent,
                        Some("gitCloseout") => &mut r.closeout,
                        Some("node") => &mut r.node,
                        Some("type") => &mut r.node_type,
                        _ => {
                            a.next_value::<serde::de::IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = a.next_value::<MaybeStr<'de>>()?.0;
                }
                Ok(r)
            }
        }
        d.deserialize_map(V)
    }
}

/// A digest of a record's fields (FNV-1a, then a 64-bit finaliser): summed over the records
/// of a log, so that a summary extends by the lines appended after it.
fn digest(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        // 0xff never occurs in UTF-8: the fields cannot run into each other.
        for b in p.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The digest of a spawn record, and of the `graph.json` entry it must match.
fn spawn_digest(child: &str, parent: &str, node_type: &str, closeout_ok: bool) -> u64 {
    digest(&[
        "spawn",
        child,
        parent,
        node_type,
        if closeout_ok { "1" } else { "0" },
    ])
}

/// The digest of a resolution record, and of the disambiguation entry it must match.
fn resolution_digest(node: &str) -> u64 {
    digest(&["resolution", node])
}

/// What a lazy open learns from the metathread (or from the bytes after a mark).
struct MetaScan<'a> {
    /// The summary of everything up to the end of the bytes scanned.
    mark: LogMark,
    /// Per child of a spawn record scanned: the parent and close-out it names (the last
    /// record wins).
    recorded: BTreeMap<std::borrow::Cow<'a, str>, (std::borrow::Cow<'a, str>, Option<GitCloseout>)>,
    /// The nodes a resolution record scanned names.
    resolved: BTreeSet<std::borrow::Cow<'a, str>>,
}

/// Scans metathread bytes (after `base`, or the whole log) for [`ActorGraph::open_lazy`]
/// without keeping its records: `None` when a line is torn, unterminated or corrupt (what
/// open would report), as [`parse_log`] decides.
fn scan_metathread(bytes: &[u8], base: Option<LogMark>) -> Option<MetaScan<'_>> {
    let mut scan = MetaScan {
        mark: base.unwrap_or_default(),
        recorded: BTreeMap::new(),
        resolved: BTreeSet::new(),
    };
    scan.mark.len += bytes.len() as u64;
    let mut rest = bytes;
    while !rest.is_empty() {
        let i = memchr::memchr(b'\n', rest)?;
        let (seg, next) = (&rest[..i], &rest[i + 1..]);
        rest = next;
        if seg.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        std::str::from_utf8(seg).ok()?;
        let r: MetaRec<'_> = serde_json::from_slice(seg).ok()?;
        scan.mark.lines += 1;
        match r.kind.as_deref() {
            Some("spawn") => {
                if let (Some(c), Some(p)) = (r.child, r.parent) {
                    let close = r.closeout.as_deref().map(GitCloseout::parse);
                    let t = r.node_type.as_deref().unwrap_or("");
                    let ok = t != NodeType::Task.as_str()
                        || matches!(&close, Some(c) if *c != GitCloseout::PerNode && !matches!(c, GitCloseout::Other(_)));
                    scan.mark.spawns = scan.mark.spawns.wrapping_add(spawn_digest(&c, &p, t, ok));
                    scan.recorded.insert(c, (p, close));
                }
            }
            Some("resolution") => {
                if let Some(n) = r.node {
                    scan.mark.resolutions =
                        scan.mark.resolutions.wrapping_add(resolution_digest(&n));
                    scan.resolved.insert(n);
                }
            }
            _ => {}
        }
    }
    Some(scan)
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
    ///
    /// From a trusted head ([`LazySnapshot::trusted`]) the checks of `graph.json` against the
    /// listing, against the metathread's digests and against the records read are skipped
    /// (the records' own checks are not): the writer that kept the stamps made them, and
    /// nothing changed either file since. The open reads the
    /// root from `graph.json`'s bytes and looks ids up in them, so its cost does not grow with
    /// the node count. A trusted head it cannot use (not canonical, `GIT_CLOSEOUT=per-node`)
    /// makes it ask for the listing ([`LazyRead::listing`]) and check as usual.
    pub fn open_lazy<E>(
        config: HarnessConfig,
        root_address: &str,
        head: LazySnapshot,
        targets: &[&str],
        spawns: bool,
        mut read: impl FnMut(&LazyRead<'_>, &mut LazySnapshot) -> Result<(), E>,
    ) -> Result<LazyOpen, E> {
        let mut head = head;
        let meta_bytes = head.snap.files.remove(METATHREAD);
        let full = |why: String| Ok(LazyOpen::Full(why));
        // Trusted (see `LazySnapshot::trusted`): graph.json is neither parsed nor compared
        // with a listing, only its root read; what this open would check of it held when the
        // writer that left it checked it last.
        let may_trust = head.trusted && config.git_closeout != super::CloseoutDefault::PerNode;
        let trust_root = |bytes: &[u8], at: Option<u64>| {
            (may_trust && at.is_some())
                .then(|| super::patch::graph_root(bytes))
                .flatten()
        };
        // Handed as its ends (`LazySnapshot::graph_ends`): ids are looked up through the
        // host; when the ends cannot be trusted, the open reads it whole and goes on as usual.
        let mut lookup = None;
        let (gb, graph_at, trusted_root) =
            match (head.snap.files.remove(GRAPH), head.graph_ends.take()) {
                (Some(gb), _) => {
                    let at = super::patch::graph_patch_at(&gb);
                    let root = trust_root(&gb, at);
                    (gb, at, root)
                }
                (None, Some(ends)) => {
                    let at = super::patch::graph_patch_at_ends(&ends);
                    match trust_root(&ends.head, at) {
                        Some(root) => {
                            lookup = Some(ends.lookup);
                            (Vec::new(), at, Some(root))
                        }
                        None => {
                            let Some(gb) = ends.lookup.graph() else {
                                return full("graph.json is unreadable".into());
                            };
                            let at = super::patch::graph_patch_at(&gb);
                            let root = trust_root(&gb, at);
                            (gb, at, root)
                        }
                    }
                }
                (None, None) => return full("graph.json is missing".into()),
            };
        let trusted = trusted_root.is_some();
        if head.trusted && !trusted {
            let ask = LazyRead {
                nodes: &[],
                tail_lines: LAZY_TAIL_LINES,
                metathread: false,
                listing: true,
            };
            read(&ask, &mut head)?;
        }
        let index: GraphIndex = match &trusted_root {
            Some(root) => GraphIndex {
                version: 1,
                root: root.clone(),
                nodes: BTreeMap::new(),
                related: Vec::new(),
                extra: Default::default(),
            },
            None => match serde_json::from_slice(&gb) {
                Ok(g) => g,
                Err(e) => return full(format!("graph.json is unreadable ({e})")),
            },
        };
        let lists = |id: &str| {
            if let Some(l) = &lookup {
                NodeId::parse(id).is_ok() && l.exists(id)
            } else if trusted {
                super::patch::graph_lists(&gb, id)
            } else {
                index.nodes.contains_key(id)
            }
        };
        if !trusted {
            let listed: BTreeSet<&str> = head
                .snap
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
        }
        let root = index.root.clone();
        if !lists(root.as_str()) {
            return full("graph.json does not list its root".into());
        }
        let mut diags = Vec::new();
        // What graph.json asks of the metathread: a spawn record per child naming its parent
        // (and, for a task, a close-out the wave rule cannot change), a resolution record per
        // disambiguation — as sums of digests, compared with the metathread's.
        let (mut want_spawns, mut want_resolutions) = (0u64, 0u64);
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
            let d = spawn_digest(id, p, e.node_type.as_str(), true);
            want_spawns = want_spawns.wrapping_add(d);
            if e.node_type == NodeType::Disambiguation {
                want_resolutions = want_resolutions.wrapping_add(resolution_digest(id));
            }
        }
        let torn = || full("the metathread has a torn or corrupt line".into());
        let Some(first) =
            scan_metathread(meta_bytes.as_deref().unwrap_or_default(), head.meta_mark)
        else {
            return torn();
        };
        // Equal sums: every child has exactly one record, naming its parent, and every
        // disambiguation one resolution; no task's record leaves the wave rule a node to move.
        let agrees = trusted
            || first.mark.spawns == want_spawns && first.mark.resolutions == want_resolutions;
        let mut whole = None;
        if !agrees && head.meta_mark.is_some() {
            let ask = LazyRead {
                nodes: &[],
                tail_lines: LAZY_TAIL_LINES,
                metathread: true,
                listing: false,
            };
            head.meta_mark = None;
            read(&ask, &mut head)?;
            whole = head.snap.files.remove(METATHREAD);
        }
        let rescan = match &whole {
            Some(b) => match scan_metathread(b, None) {
                Some(s) => Some(s),
                None => return torn(),
            },
            None => None,
        };
        let scan = rescan.as_ref().unwrap_or(&first);
        let agreed = agrees
            || rescan.as_ref().is_some_and(|r| {
                r.mark.spawns == want_spawns && r.mark.resolutions == want_resolutions
            });
        if !agrees {
            // The records as the whole metathread has them: why the sums differ.
            for (id, e) in &index.nodes {
                let Some(p) = e.spawned_by.as_ref().map(NodeId::as_str) else {
                    continue;
                };
                if scan.recorded.get(id.as_str()).map(|r| r.0.as_ref()) != Some(p) {
                    return full(format!(
                        "`{id}` has no metathread spawn record naming `{p}` (a spawn may be half-finished)"
                    ));
                }
                if e.node_type == NodeType::Disambiguation && !scan.resolved.contains(id.as_str()) {
                    return full(format!("disambiguation `{id}` has no resolution record"));
                }
            }
        }
        let mut want: BTreeSet<String> = targets
            .iter()
            .filter(|t| lists(t))
            .map(|t| (*t).to_owned())
            .collect();
        let tasks = index
            .nodes
            .iter()
            .filter(|(_, e)| e.node_type == NodeType::Task);
        let wave_needs_tasks = spawns
            && (config.git_closeout == super::CloseoutDefault::PerNode
                || !agrees && tasks.clone().any(|(id, _)| {
                    !matches!(
                        scan.recorded.get(id.as_str()),
                        Some((_, Some(c))) if *c != GitCloseout::PerNode && !matches!(c, GitCloseout::Other(_))
                    )
                }));
        if wave_needs_tasks {
            want.extend(tasks.map(|(id, _)| id.clone()));
        }
        let has_record = |head: &LazySnapshot, id: &str| {
            head.snap.files.contains_key(&super::meta_path(id)) || head.record_ends.contains_key(id)
        };
        let missing: Vec<String> = want
            .iter()
            .filter(|id| !has_record(&head, id))
            .cloned()
            .collect();
        if !missing.is_empty() {
            let ask = LazyRead {
                nodes: &missing,
                tail_lines: LAZY_TAIL_LINES,
                metathread: false,
                listing: false,
            };
            read(&ask, &mut head)?;
        }
        if let Some(id) = want.iter().find(|id| !has_record(&head, id)) {
            return full(format!("nodes/{id}/meta.json is missing"));
        }
        // Records handed by their ends: their fields from the ends when the open is trusted
        // and the ends are canonical; otherwise read whole.
        let mut from_ends = FromEndsMap::new();
        for (id, ends) in std::mem::take(&mut head.record_ends) {
            let path = super::meta_path(&id);
            if !want.contains(&id) || head.snap.files.contains_key(&path) {
                continue;
            }
            match trusted
                .then(|| super::patch::meta_from_ends(&ends, &id))
                .flatten()
            {
                Some(f) => {
                    from_ends.insert(id, (f, ends.lookup));
                }
                None => match ends.lookup.record(&id, 0, ends.size) {
                    Some(b) => {
                        head.snap.files.insert(path, b);
                    }
                    None => return full(format!("{path} is unreadable")),
                },
            }
        }
        let mut tails = Tails::default();
        let (nodes, broken) = read_nodes(
            &head.snap,
            &head.tails,
            want,
            &mut from_ends,
            &mut diags,
            &mut tails,
        );
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
            if m.routing_paused_by.is_some() {
                // Every disambiguation has its resolution record (checked above, or when the
                // trusted state was left): the pause is stale, which open reports.
                return full(format!("`{id}` has a stale pause"));
            }
            if m.status == super::Status::AwaitingUser && !m.awaiting_user {
                return full(format!("`{id}`: status and awaitingUser disagree"));
            }
            if trusted {
                continue;
            }
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
        let mut marks = BTreeMap::new();
        marks.insert(METATHREAD.to_owned(), scan.mark);
        for (path, t) in &head.tails {
            let st = path
                .strip_prefix("nodes/")
                .and_then(|r| r.strip_suffix("/chat.jsonl"))
                .and_then(|id| nodes.get(id));
            if let Some(st) = st {
                let len = t.offset + t.bytes.len() as u64;
                let lines = st.lines();
                marks.insert(
                    path.clone(),
                    LogMark {
                        len,
                        lines,
                        ..LogMark::default()
                    },
                );
            }
        }
        g.lazy = Some(super::Lazy {
            marks,
            related: index
                .related
                .iter()
                .filter(|e| unloaded.contains(e.from.as_str()))
                .cloned()
                .collect(),
            unloaded,
            agreed,
            raw: (trusted && lookup.is_none()).then_some(gb),
            lookup,
            raw_ids: Default::default(),
            raw_lookups: Default::default(),
            trusted,
        });
        g.index = index.nodes;
        g.graph_at = graph_at;
        g.set_nodes(nodes);
        g.meta_base = scan.mark.lines;
        Ok(LazyOpen::Ready(Box::new(g)))
    }
}
