//! The `actors` conformance suite runner (`tests/vectors/actors.json`), dispatched by
//! [`crate::conformance::run_suite`]. Every host runs the same vectors: natively, as wasm under
//! Node and in Chromium.
//!
//! A vector has optional `config` (harness variables), optional `files` (a store to open:
//! path → text, or a JSON value written compactly; without it the graph is `init`ed with
//! `title`), and `steps`. Each step has `at` (milliseconds after 2026-01-01T00:00:00Z) and
//! `op`; it may state `expect` (a subset of the result), `expectError` (a code). After each
//! step the queued batches are applied to the memory store and acknowledged, unless the step
//! says `"hold": true` (then `take`, `apply`, `crash` and `fail` steps handle them). The final
//! `expect` is matched against `{"violations": [...], "graph": <graph view>}`.

use serde_json::{Value, json};

use super::store::{ActorStore, MemoryStore, Op, Snapshot, WriteBatch};
use super::views::Scope;
use super::{
    ActorGraph, ActorsError, Candidate, HarnessConfig, HeuristicProposer, NewLine, NodeType,
    RelatedKind, Role, RouteOutcome, SpawnRequest, Status, Trigger, WaitMode,
};
use crate::Millis;
use crate::conformance::{VectorResult, subset};

/// 2026-01-01T00:00:00.000Z: vector times are offsets from it.
pub const BASE: Millis = 1_767_225_600_000;

struct Run {
    config: HarnessConfig,
    store: MemoryStore,
    g: Option<ActorGraph>,
    held: Vec<WriteBatch>,
}

type StepResult = Result<Value, (String, String)>;

fn verr(msg: impl Into<String>) -> (String, String) {
    ("VECTOR".into(), msg.into())
}

fn aerr(e: ActorsError) -> (String, String) {
    (e.code().to_owned(), e.to_string())
}

fn s<'a>(step: &'a Value, k: &str) -> &'a str {
    step[k].as_str().unwrap_or("")
}

fn opt_s(step: &Value, k: &str) -> Option<String> {
    step[k].as_str().map(str::to_owned)
}

fn req_s<'a>(step: &'a Value, k: &str) -> Result<&'a str, (String, String)> {
    step[k]
        .as_str()
        .ok_or_else(|| verr(format!("step lacks string `{k}`")))
}

fn config_from(v: &Value) -> Result<HarnessConfig, ActorsError> {
    let vars: Vec<(String, String)> = v
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    HarnessConfig::from_vars(vars).map(|(c, _)| c)
}

/// The store's file as JSON: a JSON file parsed, a JSONL file as an array of its lines
/// (unparseable lines as strings), anything else as text.
fn file_json(bytes: &[u8], path: &str) -> Value {
    let text = String::from_utf8_lossy(bytes);
    if path.ends_with(".jsonl") {
        return Value::Array(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l).unwrap_or_else(|_| Value::String(l.to_owned())))
                .collect(),
        );
    }
    serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.into_owned()))
}

fn spawn_json(o: &super::SpawnOutcome) -> Value {
    json!({
        "parent": o.parent, "child": o.child, "type": o.node_type, "markerLine": o.marker_line,
        "childLine": o.child_line, "gitCloseout": o.git_closeout, "pausedParent": o.paused_parent, "batch": o.batch,
    })
}

impl Run {
    fn g(&mut self) -> Result<&mut ActorGraph, (String, String)> {
        self.g
            .as_mut()
            .ok_or_else(|| verr("no graph: the vector must init or open first"))
    }

    fn flush(&mut self) -> Result<(), (String, String)> {
        let Some(g) = self.g.as_mut() else {
            return Ok(());
        };
        for b in g.take_batches() {
            self.store
                .apply(&b)
                .map_err(|e| verr(format!("memory store refused batch {}: {e}", b.id)))?;
            g.ack(b.id).map_err(aerr)?;
        }
        Ok(())
    }

    fn open(&mut self, at: Millis) -> StepResult {
        let snap: Snapshot = self.store.load().map_err(verr)?;
        let (g, report) =
            ActorGraph::open(self.config.clone(), "mem://vector", &snap, at).map_err(aerr)?;
        self.g = Some(g);
        self.held.clear();
        Ok(serde_json::to_value(&report).expect("serializes"))
    }

    fn step(&mut self, at: Millis, op: &str, st: &Value) -> StepResult {
        let proposer = HeuristicProposer;
        Ok(match op {
            "init" => {
                let g = ActorGraph::init(
                    self.config.clone(),
                    "mem://vector",
                    &self.store.load().map_err(verr)?,
                    at,
                    s(st, "title"),
                )
                .map_err(aerr)?;
                self.g = Some(g);
                json!({"root": "coordinator"})
            }
            "open" => self.open(at)?,
            "config" => {
                let (c, notes) = HarnessConfig::from_vars(
                    st["vars"]
                        .as_object()
                        .map(|o| {
                            o.iter()
                                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                                .collect::<Vec<_>>()
                        })
                        .unwrap_or_default(),
                )
                .map_err(aerr)?;
                json!({"config": c, "notes": notes})
            }
            "spawn" => {
                let mut r =
                    SpawnRequest::new(req_s(st, "parent")?, NodeType::parse(req_s(st, "type")?));
                r.id = opt_s(st, "id");
                r.title = s(st, "title").to_owned();
                r.topic = s(st, "topic").to_owned();
                r.reason = s(st, "reason").to_owned();
                r.trigger = match s(st, "trigger") {
                    "model" => Trigger::Model,
                    "policy" => Trigger::Policy,
                    _ => Trigger::User,
                };
                r.git_closeout = opt_s(st, "gitCloseout").map(|c| super::GitCloseout::parse(&c));
                for w in st["waitOn"].as_array().into_iter().flatten() {
                    r.wait_on.push((
                        s(w, "node").to_owned(),
                        WaitMode::parse(w["mode"].as_str().unwrap_or("warn")),
                    ));
                }
                spawn_json(&self.g()?.spawn(at, r).map_err(aerr)?)
            }
            "message" => {
                let l = NewLine {
                    role: Role::parse(st["role"].as_str().unwrap_or("user")),
                    text: s(st, "text").to_owned(),
                    tokens: st["tokens"].as_u64(),
                    from: opt_s(st, "from"),
                };
                json!({"line": self.g()?.append(at, req_s(st, "node")?, l).map_err(aerr)?})
            }
            "route" => match self
                .g()?
                .route(at, req_s(st, "node")?, s(st, "text"), None, &proposer)
                .map_err(aerr)?
            {
                RouteOutcome::Continued { node, line } => {
                    json!({"outcome": "continued", "node": node, "line": line})
                }
                RouteOutcome::Spawned { trigger, spawn } => {
                    let mut v = spawn_json(&spawn);
                    v["outcome"] = json!("spawned");
                    v["trigger"] = json!(trigger.as_str());
                    v
                }
            },
            "status" => {
                let status = Status::parse(req_s(st, "status")?);
                let mb = self
                    .g()?
                    .set_status(
                        at,
                        req_s(st, "node")?,
                        status,
                        opt_s(st, "summary"),
                        st["awaitingUser"].as_bool(),
                    )
                    .map_err(aerr)?;
                serde_json::to_value(mb).expect("serializes")
            }
            "resolve" => {
                let mut cands = Vec::new();
                for c in st["candidates"].as_array().into_iter().flatten() {
                    cands.push(match c {
                        Value::String(x) if x == "continue" => Candidate::Continue,
                        Value::Object(o) if o.contains_key("node") => {
                            Candidate::Existing(s(c, "node").to_owned())
                        }
                        Value::Object(_) => Candidate::New {
                            node_type: NodeType::parse(c["type"].as_str().unwrap_or("task")),
                            title: s(c, "title").to_owned(),
                            topic: s(c, "topic").to_owned(),
                        },
                        _ => return Err(verr(format!("bad candidate {c}"))),
                    });
                }
                let r = self
                    .g()?
                    .resolve(at, req_s(st, "node")?, cands, s(st, "note"))
                    .map_err(aerr)?;
                json!({"parent": r.parent, "into": r.into, "created": r.created, "batch": r.batch})
            }
            "ref" => {
                let line = st["line"]
                    .as_u64()
                    .ok_or_else(|| verr("ref needs `line`"))?;
                json!({"metaLine": self.g()?.add_ref(at, req_s(st, "node")?, line, s(st, "summary")).map_err(aerr)?})
            }
            "narrate" => json!({"metaLine": self.g()?.narrate(at, s(st, "text")).map_err(aerr)?}),
            "wait" => {
                let mode = st["mode"].as_str().map(WaitMode::parse);
                self.g()?
                    .set_wait(at, req_s(st, "node")?, req_s(st, "target")?, mode)
                    .map_err(aerr)?;
                Value::Null
            }
            "relate" => {
                let kind = RelatedKind::parse(st["kind"].as_str().unwrap_or("references"));
                self.g()?
                    .relate(at, req_s(st, "from")?, req_s(st, "to")?, kind)
                    .map_err(aerr)?;
                Value::Null
            }
            "archive" => {
                self.g()?
                    .archive(
                        at,
                        req_s(st, "node")?,
                        st["hidden"].as_bool().unwrap_or(true),
                    )
                    .map_err(aerr)?;
                Value::Null
            }
            "reset" => {
                let before = BASE
                    + st["before"]
                        .as_u64()
                        .ok_or_else(|| verr("reset needs `before`"))?;
                json!({"archived": self.g()?.reset(at, before, None).map_err(aerr)?})
            }
            "bookmark" => {
                let scope = Scope::parse(s(st, "scope")).map_err(aerr)?;
                let kw: Vec<String> = st["keywords"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect();
                json!({"line": self.g()?.bookmark(at, &scope, kw, s(st, "text"), None).map_err(aerr)?})
            }
            "epoch" => {
                let nodes = st["nodes"].as_array().map(|a| {
                    a.iter()
                        .filter_map(|n| n.as_str().map(str::to_owned))
                        .collect::<Vec<_>>()
                });
                json!({"epoch": self.g()?.reframe_epoch(at, s(st, "reason"), nodes).map_err(aerr)?})
            }
            "export" => json!({"lines": self.g()?.export(at).map_err(aerr)?}),
            "take" => {
                let b = self.g()?.take_batches();
                self.held.extend(b);
                Value::Array(self.held.iter().map(WriteBatch::to_json).collect())
            }
            "apply" => {
                let held = std::mem::take(&mut self.held);
                for b in &held {
                    self.store.apply(b).map_err(verr)?;
                    self.g()?.ack(b.id).map_err(aerr)?;
                }
                json!({"applied": held.len()})
            }
            "fail" => {
                let held = std::mem::take(&mut self.held);
                for b in &held {
                    self.g()?.fail(b.id, s(st, "reason"));
                }
                json!({"failed": held.len()})
            }
            "crash" => {
                // Apply the first held batch as a crash would leave it: stages before `stage`
                // whole, the listed `ops` of `stage`, and `tear` bytes of op `tearOp`; then
                // reopen (which recovers).
                let held = std::mem::take(&mut self.held);
                let b = held
                    .first()
                    .ok_or_else(|| verr("crash needs a held batch"))?;
                let stage = st["stage"].as_u64().unwrap_or(0) as usize;
                let keep: Vec<u64> = st["ops"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_u64)
                    .collect();
                let tear_op = st["tearOp"].as_u64();
                let tear = st["tear"].as_u64().unwrap_or(0) as usize;
                for (si, ops) in b.stages.iter().enumerate() {
                    for (oi, op) in ops.iter().enumerate() {
                        if si < stage || (si == stage && keep.contains(&(oi as u64))) {
                            self.store.apply_op(op).map_err(verr)?;
                        } else if si == stage && tear_op == Some(oi as u64) {
                            let Op::Append { path, text } = op else {
                                return Err(verr("tearOp must be an append"));
                            };
                            let n = tear.min(text.len());
                            self.store
                                .files
                                .entry(path.clone())
                                .or_default()
                                .extend_from_slice(&text.as_bytes()[..n]);
                        }
                    }
                }
                self.open(at)?
            }
            "write" => {
                // Change the store behind the graph's back (corruption, other writers).
                let path = req_s(st, "path")?.to_owned();
                let text = match &st["text"] {
                    Value::String(t) => t.clone(),
                    Value::Null => String::new(),
                    v => v.to_string(),
                };
                if st["append"].as_bool().unwrap_or(false) {
                    self.store
                        .files
                        .entry(path)
                        .or_default()
                        .extend_from_slice(text.as_bytes());
                } else {
                    self.store.files.insert(path, text.into_bytes());
                }
                Value::Null
            }
            "file" => {
                let p = req_s(st, "path")?;
                match self.store.files.get(p) {
                    Some(b) => file_json(b, p),
                    None => Value::Null,
                }
            }
            "files" => {
                let prefix = s(st, "prefix");
                Value::Array(
                    self.store
                        .files
                        .keys()
                        .filter(|k| k.starts_with(prefix))
                        .map(|k| json!(k))
                        .collect(),
                )
            }
            "view" => {
                let g = self.g.as_ref().ok_or_else(|| verr("no graph"))?;
                let node = s(st, "node");
                match req_s(st, "view")? {
                    "graph" => g.graph_view(),
                    "linear" => g.linear_view(st["node"].as_str()).map_err(aerr)?,
                    "grid" => g.grid_view(at),
                    "tree" => g.tree_view(),
                    "temporal" => {
                        let scope = Scope::parse(s(st, "scope")).map_err(aerr)?;
                        let t = st["time"].as_u64().map(|t| BASE + t);
                        g.temporal_view(at, &scope, t, st["buckets"].as_u64().unwrap_or(8) as usize)
                            .map_err(aerr)?
                    }
                    "fork" => g.fork_view(node).map_err(aerr)?,
                    "metathread" => g.metathread_view(None),
                    "audit" => serde_json::to_value(g.audit()).expect("serializes"),
                    "index" => g.index_aggregate(at),
                    "lineage" => json!(g.lineage_violations()),
                    "waits" => serde_json::to_value(g.wait_checks(node).map_err(aerr)?)
                        .expect("serializes"),
                    "model" => g
                        .begin_model_call(node, st["recent"].as_u64().unwrap_or(8) as usize)
                        .map_err(aerr)?,
                    "mailbox" => g.read_mailbox(st["reader"].as_str(), node).map_err(aerr)?,
                    v => return Err(verr(format!("unknown view `{v}`"))),
                }
            }
            other => return Err(verr(format!("unknown op `{other}`"))),
        })
    }
}

/// Runs one vector of the `actors` suite.
pub fn run_vector(v: &Value) -> VectorResult {
    let name = v["name"].as_str().unwrap_or("<unnamed>").to_owned();
    let mut failures = Vec::new();
    let config = match config_from(&v["config"]) {
        Ok(c) => c,
        Err(e) => {
            return VectorResult {
                name,
                failures: vec![format!("bad vector config: {e}")],
            };
        }
    };
    let mut run = Run {
        config,
        store: MemoryStore::default(),
        g: None,
        held: Vec::new(),
    };
    if let Some(files) = v["files"].as_object() {
        for (p, c) in files {
            let text = match c {
                Value::String(t) => t.clone(),
                other => other.to_string(),
            };
            if let Some(dir) = p
                .strip_prefix("nodes/")
                .and_then(|r| r.split_once('/'))
                .map(|(id, _)| format!("nodes/{id}"))
            {
                run.store.dirs.insert(dir);
            }
            run.store.files.insert(p.clone(), text.into_bytes());
        }
    }
    let empty = vec![];
    let mut last = 0u64;
    for (i, st) in v["steps"].as_array().unwrap_or(&empty).iter().enumerate() {
        let at = st["at"].as_u64().unwrap_or(last);
        if at < last {
            failures.push(format!("step {i}: time goes backwards"));
            break;
        }
        last = at;
        let op = st["op"].as_str().unwrap_or("");
        let result = run.step(BASE + at, op, st);
        let ctx = format!("step {i} ({op})");
        match (&result, st.get("expectError")) {
            (Err((code, msg)), Some(want)) => {
                if want.as_str() != Some(code.as_str()) {
                    failures.push(format!("{ctx}: expected error {want}, got {code}: {msg}"));
                }
            }
            (Err((code, msg)), None) => {
                failures.push(format!("{ctx}: unexpected error {code}: {msg}"))
            }
            (Ok(got), Some(want)) => failures.push(format!(
                "{ctx}: expected error {want}, call succeeded: {got}"
            )),
            (Ok(got), None) => {
                if let Some(want) = st.get("expect")
                    && let Err(e) = subset(want, got, "result")
                {
                    failures.push(format!("{ctx}: {e}"));
                }
            }
        }
        // A refused call must leave nothing queued.
        if result.is_err()
            && let Some(g) = run.g.as_ref()
            && g.has_batches()
            && !st["hold"].as_bool().unwrap_or(false)
        {
            failures.push(format!("{ctx}: a refused call queued a batch"));
        }
        if !st["hold"].as_bool().unwrap_or(false)
            && !matches!(op, "take" | "fail")
            && let Err(e) = run.flush()
        {
            failures.push(format!("{ctx}: {}", e.1));
        }
    }
    if let Some(want) = v.get("expect") {
        let state = match &run.g {
            Some(g) => json!({"violations": g.lineage_violations(), "graph": g.graph_view()}),
            None => json!({}),
        };
        if let Err(e) = subset(want, &state, "final") {
            failures.push(e);
        }
    }
    VectorResult { name, failures }
}
