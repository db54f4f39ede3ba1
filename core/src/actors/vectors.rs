//! The `actors` conformance suite runner (`tests/vectors/actors.json`), dispatched by
//! [`crate::conformance::run_suite`]. Every host runs the same vectors: natively, as wasm under
//! Node and in Chromium.
//!
//! A vector has optional `config` (harness variables), optional `files` (a store to open:
//! path → text, or a JSON value written compactly; without it the graph is `init`ed with
//! `title`), and `steps`. Each step has `at` (milliseconds after 2026-01-01T00:00:00Z) and
//! `op`; it may state `expect` (a subset of the result), `expectError` (a code). After each
//! step the queued batches are applied to the memory store and acknowledged, unless the step
//! says `"hold": true` (then `take`, `apply`, `crash`, `crashSweep` and `fail` steps handle
//! them). The final `expect` is matched against `{"violations": [...], "graph": <graph view>}`.

use serde_json::{Value, json};

use super::store::{ActorStore, MemoryStore, Op, Snapshot, WriteBatch};
use super::{ActorGraph, ActorsError, HarnessConfig, HeuristicProposer};
use crate::Wall;
use crate::conformance::{VectorResult, check_final, check_step, each_step, vector_name};

/// 2026-01-01T00:00:00.000Z: vector times are offsets from it.
pub const BASE: Wall = Wall::from_ms(1_767_225_600_000);

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
            let done = self
                .store
                .perform(&b)
                .map_err(|e| verr(format!("memory store refused batch {}: {e}", b.id)))?;
            g.ack(done).map_err(aerr)?;
        }
        Ok(())
    }

    fn open(&mut self, at: Wall) -> StepResult {
        let snap: Snapshot = self.store.load().map_err(verr)?;
        let (g, report) =
            ActorGraph::open(self.config.clone(), "mem://vector", &snap, at).map_err(aerr)?;
        self.g = Some(g);
        self.held.clear();
        Ok(serde_json::to_value(&report).expect("serializes"))
    }

    /// Every state a crash can leave the first held batch in — the stages before a cut
    /// whole, any subset of the cut stage's ops (a stage's ops have no order among them), and
    /// with `tear` the left-out appends of that stage half written — each opened (which
    /// recovers) from a copy of the store. Each must recover to a graph without lineage
    /// violations in which every node that existed before the batch keeps its parent, and a
    /// second open must find nothing left to repair. Afterwards the batch is applied whole and
    /// acknowledged, so the vector continues as if it had been performed. Returns the number
    /// of cuts tried and the first failures.
    fn crash_sweep(&mut self, at: Wall, tear: bool) -> StepResult {
        /// Ops of one stage enumerated as subsets: 2^12 is already plenty.
        const MAX_STAGE_OPS: usize = 12;
        let held = std::mem::take(&mut self.held);
        let b = held
            .first()
            .ok_or_else(|| verr("crashSweep needs a held batch"))?
            .clone();
        let mut base = self.store.clone();
        let lineage = |g: &ActorGraph| -> Vec<(String, Option<String>)> {
            g.node_ids()
                .iter()
                .map(|id| {
                    let parent = g.node(id.as_str()).and_then(|n| n.spawned_by.clone());
                    (id.to_string(), parent.map(|p| p.to_string()))
                })
                .collect()
        };
        let (before, _) = ActorGraph::open(
            self.config.clone(),
            "mem://vector",
            &base.load().map_err(verr)?,
            at,
        )
        .map_err(aerr)?;
        let before = lineage(&before);
        let mut cuts = 0u64;
        let mut failures = Vec::new();
        for cut in 0..=b.stages.len() {
            let ops = b.stages.get(cut).map_or(&[][..], Vec::as_slice);
            if ops.len() > MAX_STAGE_OPS {
                return Err(verr(format!(
                    "stage {cut} has {} ops; crashSweep enumerates at most {MAX_STAGE_OPS}",
                    ops.len()
                )));
            }
            for mask in 0u32..(1 << ops.len()) {
                let left_out_append = ops.iter().enumerate().any(|(i, op)| {
                    mask & (1 << i) == 0 && matches!(op, Op::Append { .. } | Op::Patch { .. })
                });
                for torn in [false, true] {
                    if torn && !(tear && left_out_append) {
                        continue;
                    }
                    cuts += 1;
                    let mut store = base.clone();
                    for s in &b.stages[..cut] {
                        for op in s {
                            store.apply_op(op).map_err(verr)?;
                        }
                    }
                    for (i, op) in ops.iter().enumerate() {
                        if mask & (1 << i) != 0 {
                            store.apply_op(op).map_err(verr)?;
                        } else if let (true, Op::Append { path, text }) = (torn, op) {
                            let half = &text.as_bytes()[..text.len() / 2];
                            store
                                .files
                                .entry(path.clone())
                                .or_default()
                                .extend_from_slice(half);
                        } else if let (true, Op::Patch { path, at, text, .. }) = (torn, op) {
                            // A positioned write cut short: the bytes before `at` as they
                            // were, then half the patch.
                            let half = &text.as_bytes()[..text.len() / 2];
                            if let Some(f) = store.files.get_mut(path) {
                                f.truncate(*at as usize);
                                f.extend_from_slice(half);
                            }
                        }
                    }
                    let kept: Vec<usize> =
                        (0..ops.len()).filter(|i| mask & (1 << i) != 0).collect();
                    let problems = Self::recover_copy(&self.config, &mut store, at, &before)
                        .unwrap_or_else(|e| vec![e]);
                    if !problems.is_empty() && failures.len() < 3 {
                        failures.push(json!({
                            "stage": cut, "ops": kept, "torn": torn, "problems": problems,
                        }));
                    }
                }
            }
        }
        let done = self.store.perform(&b).map_err(verr)?;
        self.g()?.ack(done).map_err(aerr)?;
        Ok(json!({"cuts": cuts, "failures": failures}))
    }

    /// Opens a crashed store (performing the recovery batch), then checks it: lineage
    /// violations, nodes of `before` lost or re-parented, and repairs a second open still
    /// finds.
    fn recover_copy(
        config: &HarnessConfig,
        store: &mut MemoryStore,
        at: Wall,
        before: &[(String, Option<String>)],
    ) -> Result<Vec<String>, String> {
        let open = |store: &mut MemoryStore| {
            let snap = store.load()?;
            ActorGraph::open(config.clone(), "mem://vector", &snap, at)
                .map_err(|e| format!("open: {e}"))
        };
        let (mut g, _) = open(store)?;
        for b in g.take_batches() {
            let done = store.perform(&b)?;
            g.ack(done).map_err(|e| e.to_string())?;
        }
        let mut problems = g.lineage_violations();
        for (id, parent) in before {
            match g.node(id) {
                None => problems.push(format!("`{id}` was lost")),
                Some(n) if n.spawned_by.as_ref().map(|p| p.to_string()) != *parent => {
                    problems.push(format!("`{id}` changed parent to {:?}", n.spawned_by))
                }
                Some(_) => {}
            }
        }
        let (_, again) = open(store)?;
        if !again.repairs.is_empty() {
            problems.push(format!("a second open still repairs: {:?}", again.repairs));
        }
        Ok(problems)
    }

    fn step(&mut self, at: Wall, op: &str, st: &Value) -> StepResult {
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
            "reset" => {
                let mut args = st.clone();
                args["before"] = json!(
                    BASE + st["before"]
                        .as_u64()
                        .ok_or_else(|| verr("reset needs `before`"))?
                );
                super::api::call(self.g()?, at, "reset", &args, &proposer).map_err(aerr)?
            }
            "take" => {
                let b = self.g()?.take_batches();
                self.held.extend(b);
                Value::Array(self.held.iter().map(WriteBatch::to_json).collect())
            }
            "apply" => {
                let held = std::mem::take(&mut self.held);
                for b in &held {
                    let done = self.store.perform(b).map_err(verr)?;
                    self.g()?.ack(done).map_err(aerr)?;
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
            "crashSweep" => self.crash_sweep(at, st["tear"].as_bool().unwrap_or(false))?,
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
                let mut args = st.clone();
                args["at"] = st["time"].as_u64().map_or(Value::Null, |t| json!(BASE + t));
                if args["buckets"].is_null() {
                    args["buckets"] = json!(8);
                }
                let view = req_s(st, "view")?;
                super::api::call(self.g()?, at, view, &args, &proposer).map_err(aerr)?
            }
            op => super::api::call(self.g()?, at, op, st, &proposer).map_err(aerr)?,
        })
    }
}

/// Runs one vector of the `actors` suite.
pub fn run_vector(v: &Value) -> VectorResult {
    let name = vector_name(v);
    let mut failures = Vec::new();
    let config = match config_from(&v["config"]) {
        Ok(c) => c,
        Err(e) => return VectorResult::unusable(name, format!("bad vector config: {e}")),
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
    each_step(v, &mut failures, |step, failures| {
        let (op, st, ctx) = (step.op, step.json, &step.ctx);
        let result = run.step(BASE + step.at, op, st);
        // The actor suite states no `outputs`: the step's result and error only.
        check_step(ctx, st, &result, Vec::new(), failures);
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
    });
    check_final(v, &mut failures, || match &run.g {
        Some(g) => json!({"violations": g.lineage_violations(), "graph": g.graph_view()}),
        None => json!({}),
    });
    VectorResult { name, failures }
}
