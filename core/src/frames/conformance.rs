//! The `frames` conformance suite: vectors that drive the engine (over a [`ScriptedApp`]) step
//! by step and compare results, errors, HTTP statuses and persisted writes.
//!
//! Suite: `{"suite": "frames", "app": {...scripted app...}, "config": {...}, "vectors": [...]}`.
//! A vector may override `app` and `config`. Steps:
//!
//! * `frame` `{surface, disclosure?, horizon?, save?}`; `stored_frame` `{frame}`
//! * `assess` `{as, frame, node, choice? | value? | abstain?, input?, mode?, resolver?, id?,
//!   extra?, drop?, body? | raw?, save?}`; `commit` `{as, assessment, key?, frame?, node?,
//!   extra?, body? | raw?, save?}`
//! * `bump_policy`, `restart` (reopen the engine from the writes persisted so far),
//!   `surfaces`, `state` `{surface}`, `entries` `{view}`, `blob` `{surface, sha256}`,
//!   `adapter` `{frame, node, modalities}` (the controller's modality check)
//!
//! Every step may carry `at` (milliseconds after the suite epoch), `expect` (a subset of the
//! result), `expectError` (a code), `expectStatus` (its HTTP status) and `writes` (the kinds
//! of records persisted, in order). A string `"$alias.path"` in a body is replaced by that
//! field of a saved result, `"$alias:node"` by the decision id of `node` in saved frame `alias`.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::app::{Principal, Role};
use super::engine::{Done, Engine, EngineConfig, RecordKind, Write};
use super::scripted::ScriptedApp;
use super::{FramesError, controller};
use crate::Wall;
use crate::conformance::{VectorResult, each_step, subset, vector_name};

/// The vector clock's epoch: 2026-09-19T17:58:34Z.
pub const EPOCH_MS: u64 = 1_789_840_714_000;

/// Runs the vectors of a `frames` suite.
pub fn run(suite: &Value) -> Result<Vec<VectorResult>, String> {
    let vectors = suite["vectors"]
        .as_array()
        .ok_or("suite has no `vectors` array")?;
    Ok(vectors.iter().map(|v| run_vector(suite, v)).collect())
}

struct Run {
    app: Value,
    config: EngineConfig,
    engine: Engine<ScriptedApp>,
    store: BTreeMap<(RecordKind, String), Vec<u8>>,
    saved: HashMap<String, Value>,
}

fn config_from(v: &Value) -> EngineConfig {
    let mut c = EngineConfig {
        id_seed: 7,
        ..EngineConfig::default()
    };
    if let Some(t) = v["frame_ttl_ms"].as_u64() {
        c.frame_ttl_ms = t;
    }
    if let Some(b) = v["service_budget"].as_u64() {
        c.service_budget = b as u32;
    }
    if let Some(m) = v["max_message_bytes"].as_u64() {
        c.max_message_bytes = m as usize;
    }
    c
}

impl Run {
    fn persist(&mut self, writes: &[Write]) {
        for w in writes {
            self.store.insert((w.kind, w.key.clone()), w.value.clone());
        }
    }

    /// Makes a call's writes durable in the runner's store, then releases its value; the
    /// writes come back for the step's `writes` check.
    fn persisted<T>(&mut self, done: Done<T>) -> (T, Vec<Write>) {
        let (persist, pending) = done.split();
        self.persist(persist.writes());
        let writes = persist.writes().to_vec();
        (pending.release(persist.ack()), writes)
    }

    fn open(&mut self) -> Result<Vec<Write>, FramesError> {
        let app = ScriptedApp::from_json(&self.app)?;
        let records: Vec<_> = self
            .store
            .iter()
            .filter(|((k, _), _)| *k != RecordKind::Blob)
            .map(|((k, key), v)| (*k, key.clone(), v.clone()))
            .collect();
        let (engine, writes) = self.persisted(Engine::open(app, self.config.clone(), records)?);
        self.engine = engine;
        Ok(writes)
    }
}

fn principal(name: &str) -> Principal {
    Principal {
        id: name.to_owned(),
        role: if name.starts_with("human") {
            Role::Human
        } else {
            Role::Agent
        },
    }
}

/// Replaces `$alias.path` and `$alias:node` strings with saved values.
fn resolve(v: &Value, saved: &HashMap<String, Value>) -> Result<Value, String> {
    Ok(match v {
        Value::String(s) if s.starts_with('$') => {
            let body = &s[1..];
            if let Some((alias, node)) = body.split_once(':') {
                let f = saved
                    .get(alias)
                    .ok_or(format!("nothing saved as `{alias}`"))?;
                json!(format!(
                    "{}:{node}",
                    f["frame_id"]
                        .as_str()
                        .ok_or(format!("`{alias}` is not a frame"))?
                ))
            } else {
                let mut parts = body.split('.');
                let alias = parts.next().unwrap_or_default();
                let mut cur = saved
                    .get(alias)
                    .ok_or(format!("nothing saved as `{alias}`"))?
                    .clone();
                for p in parts {
                    cur = match p.parse::<usize>() {
                        Ok(i) => cur[i].clone(),
                        Err(_) => cur[p].clone(),
                    };
                }
                if cur.is_null() {
                    return Err(format!("`{s}` resolves to nothing"));
                }
                cur
            }
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| resolve(x, saved))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| Ok((k.clone(), resolve(x, saved)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

fn run_vector(suite: &Value, v: &Value) -> VectorResult {
    let name = vector_name(v);
    let mut failures = Vec::new();
    let app = v.get("app").unwrap_or(&suite["app"]).clone();
    let config = config_from(v.get("config").unwrap_or(&suite["config"]));
    let scripted = match ScriptedApp::from_json(&app) {
        Ok(a) => a,
        Err(e) => return VectorResult::unusable(name, format!("app: {e}")),
    };
    let engine = match Engine::open(scripted, config.clone(), vec![]) {
        Ok(d) => d,
        Err(e) => return VectorResult::unusable(name, format!("open: {e}")),
    };
    let (persist, engine) = engine.split();
    let store = persist
        .writes()
        .iter()
        .map(|w| ((w.kind, w.key.clone()), w.value.clone()))
        .collect();
    let mut run = Run {
        app,
        config,
        engine: engine.release(persist.ack()),
        store,
        saved: HashMap::new(),
    };
    each_step(v, &mut failures, |s, failures| {
        let (op, step, ctx) = (s.op, s.json, &s.ctx);
        let result = apply_step(&mut run, Wall::from_ms(EPOCH_MS + s.at), op, step, s.index);
        let (result, writes) = match result {
            Ok((value, writes)) => (Ok(value), writes),
            Err(e) => (Err(e), vec![]),
        };
        if let Some(want) = step.get("writes") {
            let kinds: Vec<Value> = writes.iter().map(|w| json!(w.kind.as_str())).collect();
            if want != &Value::Array(kinds.clone()) {
                failures.push(format!(
                    "{ctx}: expected writes {want}, got {}",
                    Value::Array(kinds)
                ));
            }
        }
        match (&result, step.get("expectError")) {
            (Err(StepError::Frames(e)), Some(want)) => {
                if want.as_str() != Some(e.code()) {
                    failures.push(format!(
                        "{ctx}: expected error {want}, got {}: {e}",
                        e.code()
                    ));
                }
                if let Some(s) = step["expectStatus"].as_u64()
                    && s != e.http_status() as u64
                {
                    failures.push(format!(
                        "{ctx}: expected HTTP status {s}, got {}",
                        e.http_status()
                    ));
                }
            }
            (Err(StepError::Frames(e)), None) => {
                failures.push(format!("{ctx}: unexpected error {}: {e}", e.code()))
            }
            (Err(StepError::Vector(m)), _) => failures.push(format!("{ctx}: bad vector: {m}")),
            (Ok(_), Some(want)) => {
                failures.push(format!("{ctx}: expected error {want}, the call succeeded"))
            }
            (Ok(got), None) => {
                if let Some(alias) = step["save"].as_str() {
                    run.saved.insert(alias.to_owned(), got.clone());
                }
                if let Some(want) = step.get("expect") {
                    match resolve(want, &run.saved) {
                        Ok(want) => {
                            if let Err(e) = subset(&want, got, "result") {
                                failures.push(format!("{ctx}: {e}"));
                            }
                        }
                        Err(e) => failures.push(format!("{ctx}: bad vector: {e}")),
                    }
                }
            }
        }
    });
    VectorResult { name, failures }
}

enum StepError {
    Frames(FramesError),
    Vector(String),
}

impl From<FramesError> for StepError {
    fn from(e: FramesError) -> Self {
        StepError::Frames(e)
    }
}

fn json_of<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("records serialize")
}

fn apply_step(
    run: &mut Run,
    now: Wall,
    op: &str,
    s: &Value,
    index: usize,
) -> Result<(Value, Vec<Write>), StepError> {
    let vec_err = StepError::Vector;
    let text = |k: &str| s[k].as_str().map(str::to_owned);
    Ok(match op {
        "frame" => {
            let surface = text("surface").ok_or_else(|| vec_err("frame needs `surface`".into()))?;
            let horizon = match &s["horizon"] {
                Value::Number(n) => Some(n.to_string()),
                Value::String(t) => Some(t.clone()),
                _ => None,
            };
            // The server's path (a per-state JSON template) must equal the typed rendering.
            let d = run.engine.frame_json(
                now,
                &surface,
                s["disclosure"].as_str(),
                horizon.as_deref(),
            )?;
            let (d, writes) = run.persisted(d);
            let v: Value =
                serde_json::from_slice(&d).map_err(|e| vec_err(format!("frame JSON: {e}")))?;
            let typed = json_of(
                &run.engine
                    .stored_frame(v["frame_id"].as_str().unwrap_or_default())?,
            );
            if typed != v {
                return Err(vec_err(format!(
                    "template rendering differs from the typed frame: {v} vs {typed}"
                )));
            }
            (v, writes)
        }
        "stored_frame" => {
            let id = resolve(&s["frame"], &run.saved).map_err(vec_err)?;
            let id = id.as_str().unwrap_or_default();
            (json_of(&run.engine.stored_frame(id)?), vec![])
        }
        "assess" => {
            let who = principal(s["as"].as_str().unwrap_or("agent"));
            let d = if let Some(raw) = s["raw"].as_str() {
                run.engine.assess_bytes(now, &who, raw.as_bytes())?
            } else {
                let body = match s.get("body") {
                    Some(b) => resolve(b, &run.saved).map_err(vec_err)?,
                    None => assessment_body(run, s, index).map_err(vec_err)?,
                };
                run.engine.assess(now, &who, body)?
            };
            let (d, writes) = run.persisted(d);
            let v = json_of(&*d);
            if s.get("save").is_none() {
                run.saved.insert(d.assessment_id.clone(), v.clone());
            }
            (v, writes)
        }
        "commit" => {
            let who = principal(s["as"].as_str().unwrap_or("agent"));
            let key = match &s["key"] {
                Value::Null => Some(format!("k-{index}")),
                Value::Bool(false) => None,
                k => Some(k.as_str().unwrap_or_default().to_owned()),
            };
            let d = if let Some(raw) = s["raw"].as_str() {
                run.engine
                    .commit_bytes(now, &who, key.as_deref(), raw.as_bytes())?
            } else {
                let body = match s.get("body") {
                    Some(b) => resolve(b, &run.saved).map_err(vec_err)?,
                    None => commit_body(run, s).map_err(vec_err)?,
                };
                run.engine.commit(now, &who, key.as_deref(), body)?
            };
            let (d, writes) = run.persisted(d);
            (json_of(&*d), writes)
        }
        "bump_policy" => {
            let d = run.engine.bump_policy();
            let (d, writes) = run.persisted(d);
            (json!({"policy_revision": d}), writes)
        }
        "restart" => {
            let writes = run.open()?;
            (json!({"restarted": true}), writes)
        }
        "surfaces" => (run.engine.surfaces(), vec![]),
        "state" => {
            let surface = text("surface").unwrap_or_default();
            let (state, revision) = run
                .engine
                .surface_state(&surface)
                .ok_or_else(|| FramesError::NotFound(format!("no surface `{surface}`")))?;
            (json!({"state": state, "revision": revision}), vec![])
        }
        "entries" => {
            let view = text("view").unwrap_or_else(|| "bulletin".into());
            (
                Value::Array(
                    run.engine
                        .entries(&view)
                        .iter()
                        .map(|e| e.to_json())
                        .collect(),
                ),
                vec![],
            )
        }
        "blob" => {
            let sha = resolve(&s["sha256"], &run.saved).map_err(vec_err)?;
            let (meta, key) = run.engine.blob(
                &text("surface").unwrap_or_default(),
                sha.as_str().unwrap_or_default(),
            )?;
            let stored = run.store.get(&(RecordKind::Blob, key)).map_or(0, Vec::len);
            (
                json!({"mime_type": meta.mime_type, "byte_length": meta.byte_length, "stored_bytes": stored}),
                vec![],
            )
        }
        "adapter" => {
            let frame: super::types::Frame = serde_json::from_value(
                run.saved
                    .get(s["frame"].as_str().unwrap_or_default())
                    .cloned()
                    .unwrap_or_default(),
            )
            .map_err(|e| vec_err(format!("saved frame: {e}")))?;
            let node = s["node"].as_str().unwrap_or_default();
            let d = frame
                .decisions
                .iter()
                .find(|d| d.node_id == node)
                .ok_or_else(|| vec_err(format!("no node `{node}` in the frame")))?;
            let modalities: Vec<&str> = s["modalities"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let pack = controller::evidence_for(&frame, d, &modalities)?;
            let ids: Vec<&str> = pack
                .evidence
                .iter()
                .map(|e| e.evidence_id.as_str())
                .collect();
            (
                json!({"evidence": ids, "omitted_optional": pack.omitted_optional}),
                vec![],
            )
        }
        other => return Err(vec_err(format!("unknown op `{other}`"))),
    })
}

fn saved_frame<'a>(run: &'a Run, s: &Value) -> Result<&'a Value, String> {
    let alias = s["frame"]
        .as_str()
        .ok_or("step needs `frame` (a saved frame alias)")?;
    run.saved
        .get(alias)
        .ok_or(format!("nothing saved as `{alias}`"))
}

fn assessment_body(run: &Run, s: &Value, index: usize) -> Result<Value, String> {
    let frame = saved_frame(run, s)?;
    let fid = frame["frame_id"].as_str().unwrap_or_default();
    let node = s["node"].as_str().ok_or("assess needs `node`")?;
    let result = if s["abstain"].as_bool() == Some(true) {
        json!({"status": "abstain", "reason": "insufficient evidence"})
    } else if let Some(c) = s["choice"].as_str() {
        json!({"status": "answered", "answer": {"choice": c, "input": s.get("input").cloned().unwrap_or(json!({}))}})
    } else {
        json!({"status": "answered", "answer": {"value": s.get("value").cloned().unwrap_or(Value::Null)}})
    };
    let mut body = json!({
        "dgp": "0.1",
        "assessment_id": s["id"].as_str().map_or(format!("a-{index}"), str::to_owned),
        "frame_id": fid,
        "decision_id": format!("{fid}:{node}"),
        "mode": s["mode"].as_str().unwrap_or("live"),
        "resolver": s.get("resolver").cloned().unwrap_or(json!({"kind": "rule"})),
        "result": result,
    });
    if let Some(Value::Object(extra)) = s.get("extra") {
        for (k, v) in extra {
            body[k] = resolve(v, &run.saved)?;
        }
    }
    for k in s["drop"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        body.as_object_mut().expect("object").remove(k);
    }
    Ok(body)
}

fn commit_body(run: &Run, s: &Value) -> Result<Value, String> {
    let alias = s["assessment"]
        .as_str()
        .ok_or("commit needs `assessment`")?;
    let a = run
        .saved
        .get(alias)
        .ok_or(format!("nothing saved as `{alias}`"))?;
    let mut body = json!({
        "dgp": "0.1",
        "frame_id": a["frame_id"],
        "decision_id": a["decision_id"],
        "assessment_id": a["assessment_id"],
    });
    if s.get("frame").is_some() {
        let f = saved_frame(run, s)?;
        body["frame_id"] = f["frame_id"].clone();
        if let Some(node) = s["node"].as_str() {
            body["decision_id"] = json!(format!(
                "{}:{node}",
                f["frame_id"].as_str().unwrap_or_default()
            ));
        }
    }
    if let Some(Value::Object(extra)) = s.get("extra") {
        for (k, v) in extra {
            body[k] = resolve(v, &run.saved)?;
        }
    }
    Ok(body)
}
