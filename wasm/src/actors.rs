//! Bindings of the actor graph. The JS package (`wasm/js/actors.js`) owns persistence
//! (IndexedDB in browsers, memory anywhere): it hands the core a snapshot, performs the batches
//! the core queues and acknowledges them. Every rule is `weft_core::actors`.

use std::collections::{BTreeMap, VecDeque};

use js_sys::{Array, Object, Reflect, Uint8Array};
use serde_json::{Value, json};
use wasm_bindgen::prelude::*;
use weft_core::actors::store::{InFlight, Snapshot};
use weft_core::actors::{
    ActorGraph, ActorsError, HarnessConfig, HeuristicProposer, OpenReport, api,
};
use weft_core::agents::{self, AGENT_FIELD, AgentConfig, AgentsError, NodeAgent, ResumeReport};
use weft_core::jobs::{JobId, Note, Origin, OutcomeKind, OwnerId};
use weft_core::tools::{
    HandlerFailure, InvocationId, ModelResponse, Settlement, StepId, ToolDecl, ToolsError,
};

use crate::js::{error, from_js_json, json, ms};

/// A wall-clock reading (`Date.now()`): what actor lines and metas carry.
fn wall(now: f64) -> weft_core::Wall {
    weft_core::Wall::from_ms(ms(now))
}

/// Both host clocks of a call: `now` from `Date.now()`, `mono` from `performance.now()`.
fn clocks(now: f64, mono: f64) -> weft_core::time::Now {
    weft_core::time::Now::new(weft_core::Mono::from_ms(ms(mono)), wall(now))
}

fn config(vars: &JsValue) -> Result<(HarnessConfig, Vec<String>), JsValue> {
    let mut pairs = Vec::new();
    if vars.is_object() {
        for k in Object::keys(&Object::from(vars.clone())).iter() {
            let key = k.as_string().unwrap_or_default();
            let v = Reflect::get(vars, &k)?;
            if let Some(s) = v.as_string() {
                pairs.push((key, s));
            } else if let Some(b) = v.as_bool() {
                pairs.push((key, if b { "on".into() } else { "off".into() }));
            }
        }
    }
    HarnessConfig::from_vars(pairs).map_err(|e| error(&e))
}

/// A snapshot from `{path: string | Uint8Array}`; node directories are derived from the paths.
fn snapshot(files: &JsValue) -> Result<Snapshot, JsValue> {
    let mut snap = Snapshot::default();
    if !files.is_object() {
        return Ok(snap);
    }
    let mut dirs = BTreeMap::new();
    for k in Object::keys(&Object::from(files.clone())).iter() {
        let path = k.as_string().unwrap_or_default();
        let v = Reflect::get(files, &k)?;
        let bytes = match v.as_string() {
            Some(s) => s.into_bytes(),
            None if v.is_instance_of::<Uint8Array>() => Uint8Array::from(v).to_vec(),
            None => continue,
        };
        if let Some(rest) = path.strip_prefix("nodes/")
            && let Some((id, _)) = rest.split_once('/')
        {
            dirs.insert(format!("nodes/{id}"), ());
        }
        if weft_core::actors::store::is_snapshot_path(&path) {
            snap.files.insert(path, bytes);
        }
    }
    snap.dirs = dirs.into_keys().collect();
    Ok(snap)
}

/// The actor graph of one `$CHAT_ROOT`, as a JS class. Times are Unix-epoch milliseconds.
#[wasm_bindgen(js_name = ActorGraph)]
pub struct ActorGraphJs {
    inner: ActorGraph,
    report: OpenReport,
    notes: Vec<String>,
    /// The batches handed to the JS store, oldest first, until it reports them performed.
    in_flight: VecDeque<InFlight>,
}

#[wasm_bindgen(js_class = ActorGraph)]
impl ActorGraphJs {
    /// Opens a graph from stored files (`{path: text}`), recovering what an interrupted writer
    /// left (the recovery batch is queued: take and persist it first). `config` holds harness
    /// variables (`{ACTOR_WAIT_GRAPH: "enforce"}`). Throws `NOT_INITIALIZED` for an empty store.
    pub fn open(
        config_vars: JsValue,
        address: &str,
        files: JsValue,
        now: f64,
    ) -> Result<ActorGraphJs, JsValue> {
        let (c, notes) = config(&config_vars)?;
        let (inner, report) =
            ActorGraph::open(c, address, &snapshot(&files)?, wall(now)).map_err(|e| error(&e))?;
        Ok(ActorGraphJs {
            inner,
            report,
            notes,
            in_flight: VecDeque::new(),
        })
    }

    /// Creates a graph (root coordinator) in an empty store; its batch is queued.
    pub fn init(
        config_vars: JsValue,
        address: &str,
        now: f64,
        title: &str,
    ) -> Result<ActorGraphJs, JsValue> {
        let (c, notes) = config(&config_vars)?;
        let inner = ActorGraph::init(c, address, &Snapshot::default(), wall(now), title)
            .map_err(|e| error(&e))?;
        Ok(ActorGraphJs {
            inner,
            report: OpenReport::default(),
            notes,
            in_flight: VecDeque::new(),
        })
    }

    /// What open found: `{diagnostics, repairs, recoveryBatch}`.
    #[wasm_bindgen(getter)]
    pub fn report(&self) -> JsValue {
        json(&self.report)
    }

    /// Notes about the harness variables (deprecated names).
    #[wasm_bindgen(getter)]
    pub fn notes(&self) -> JsValue {
        json(&self.notes)
    }

    /// Performs an operation of `weft_core::actors::api` (`spawn`, `message`, `route`,
    /// `status`, …, and the views `graph`, `grid`, `tree`, …) with camelCase `args`.
    pub fn call(&mut self, op: &str, now: f64, args: JsValue) -> Result<JsValue, JsValue> {
        let args: serde_json::Value = if args.is_undefined() || args.is_null() {
            serde_json::json!({})
        } else {
            from_js_json(&args).map_err(|e| {
                error(&ActorsError::InvalidArgument(format!(
                    "arguments are not JSON-like: {e}"
                )))
            })?
        };
        let out = api::call(&mut self.inner, wall(now), op, &args, &HeuristicProposer)
            .map_err(|e| error(&e))?;
        Ok(json(&out))
    }

    /// The queued batches, oldest first: `[{id, label, gates, stages: [[{op, path, text, …}]]}]`.
    #[wasm_bindgen(js_name = takeBatches)]
    pub fn take_batches(&mut self) -> Array {
        self.inner
            .take_batches()
            .into_iter()
            .map(|b| {
                let (v, in_flight) = b.hand_off();
                self.in_flight.push_back(in_flight);
                json(&v)
            })
            .collect()
    }

    /// Whether batches are queued and not yet taken (lines written since the last take).
    #[wasm_bindgen(js_name = hasBatches)]
    pub fn has_batches(&self) -> bool {
        self.inner.has_batches()
    }

    /// The store performed batch `id` (and every earlier one) durably. Only a batch taken
    /// with `takeBatches` can be acknowledged (`INVALID_ARGUMENT` otherwise; one acknowledged
    /// already is a no-op).
    pub fn ack(&mut self, id: f64) -> Result<(), JsValue> {
        let id = ms(id);
        let Some(at) = self.in_flight.iter().position(|f| f.id() == id) else {
            if id <= self.inner.acked() {
                return Ok(());
            }
            return Err(error(&ActorsError::InvalidArgument(format!(
                "batch {id} was not taken from this graph"
            ))));
        };
        // Acknowledging a batch acknowledges every earlier one (the store is ordered).
        let done = self
            .in_flight
            .drain(..=at)
            .next_back()
            .expect("`at` is in range");
        self.inner.ack(done.performed()).map_err(|e| error(&e))
    }

    /// The store failed batch `id`: later writes are refused until the store is reopened.
    pub fn fail(&mut self, id: f64, detail: &str) {
        let id = ms(id);
        // Later batches stay held: acknowledging one is refused by the core (`STORE_FAILED`).
        self.in_flight.retain(|f| f.id() > id);
        self.inner.fail(id, detail);
    }

    /// Increases with every change.
    #[wasm_bindgen(getter)]
    pub fn version(&self) -> f64 {
        self.inner.version() as f64
    }

    /// The changes since the last drain: `[{seq, kind, node}]`.
    #[wasm_bindgen(js_name = drainEvents)]
    pub fn drain_events(&mut self) -> JsValue {
        json(&self.inner.drain_events())
    }
}

/// The harness variables as the core reads them: `{config, notes}`.
#[wasm_bindgen(js_name = actorConfig)]
pub fn actor_config(vars: JsValue) -> Result<JsValue, JsValue> {
    let (c, notes) = config(&vars)?;
    Ok(json(&serde_json::json!({"config": c, "notes": notes})))
}

/// Applies a batch's ops (their JSON, in order) the way the core's memory store does — path
/// checks, `createNode` refused over an existing node, `patch` refused on a record of another
/// size — to `current` (`{path: text | null}`: the files the ops touch, and each created
/// node's `meta.json`), and returns the touched paths' new contents (`null`: gone). The JS
/// memory and IndexedDB stores apply batches through it, so the op semantics live once, in
/// the core. A refused op changes nothing (`STORE_IO`).
#[wasm_bindgen(js_name = applyStoreOps)]
pub fn apply_store_ops(current: JsValue, ops: JsValue) -> Result<JsValue, JsValue> {
    use weft_core::actors::store::{MemoryStore, Op};
    let refuse = |e: String| error(&ActorsError::StoreIo(e));
    let cur = from_js_json(&current).map_err(&refuse)?;
    let ops = from_js_json(&ops).map_err(&refuse)?;
    let mut store = MemoryStore::default();
    for (p, v) in cur.as_object().into_iter().flatten() {
        if let Some(t) = v.as_str() {
            store.files.insert(p.clone(), t.as_bytes().to_vec());
            if let Some(dir) = p.strip_suffix("/meta.json") {
                store.dirs.insert(dir.to_owned());
            }
        }
    }
    let mut touched = Vec::new();
    for v in ops
        .as_array()
        .ok_or_else(|| refuse("ops must be an array".into()))?
    {
        let op = Op::from_json(v).map_err(&refuse)?;
        touched.extend(op.paths());
        store.apply_op(&op).map_err(&refuse)?;
    }
    let mut out = serde_json::Map::new();
    for p in touched {
        let v = store
            .files
            .get(&p)
            .map(|b| Value::String(String::from_utf8_lossy(b).into_owned()))
            .unwrap_or(Value::Null);
        out.insert(p, v);
    }
    Ok(json(&Value::Object(out)))
}

/// The nodes whose chat holds agent lines (the agents a reopened store resumes), in id order.
#[wasm_bindgen(js_class = ActorGraph)]
impl ActorGraphJs {
    /// The ids of nodes with at least one line carrying the `agent` field.
    #[wasm_bindgen(js_name = agentNodes)]
    pub fn agent_nodes(&self) -> Vec<String> {
        self.inner
            .node_ids()
            .into_iter()
            .filter(|n| {
                self.inner.chat(n.as_str()).is_some_and(|lines| {
                    lines
                        .iter()
                        .filter_map(|e| e.ok())
                        .any(|l| l.extra.contains_key(AGENT_FIELD))
                })
            })
            .map(|n| n.to_string())
            .collect()
    }
}

fn args_json(v: &JsValue, what: &str) -> Result<Value, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(json!({}));
    }
    from_js_json(v).map_err(|e| {
        error(&ActorsError::InvalidArgument(format!(
            "{what} is not JSON-like: {e}"
        )))
    })
}

fn agents_err(e: AgentsError) -> JsValue {
    error(&e)
}

/// The agent of one actor node (`weft_core::agents::NodeAgent`). Every call borrows the
/// store's graph; the JS host (`wasm/js/node-agent.js`) persists the batches the calls queue,
/// acknowledges them, syncs and polls. Times are Unix-epoch milliseconds.
#[wasm_bindgen(js_name = NodeAgent)]
pub struct NodeAgentJs {
    inner: NodeAgent,
    report: ResumeReport,
}

#[wasm_bindgen(js_class = NodeAgent)]
impl NodeAgentJs {
    /// Opens the agent of `node`: reads its lines and writes the recovery lines of a restart
    /// (queued on the graph). `config`: `{contextTokens?, recentLines?, interruptGraceMs?,
    /// maxStepsPerTurn?}`.
    pub fn open(
        graph: &mut ActorGraphJs,
        node: &str,
        config: JsValue,
        now: f64,
        mono: f64,
    ) -> Result<NodeAgentJs, JsValue> {
        let c = args_json(&config, "the agent configuration")?;
        let mut ac = AgentConfig::default();
        if let Some(t) = c["contextTokens"].as_u64() {
            ac.context_tokens = t;
        }
        if let Some(n) = c["recentLines"].as_u64() {
            ac.recent_lines = n as usize;
        }
        if let Some(g) = c["interruptGraceMs"].as_u64() {
            ac.interrupt_grace_ms = g;
        }
        if let Some(s) = c["maxStepsPerTurn"].as_u64() {
            ac.max_steps_per_turn = u32::try_from(s).unwrap_or(u32::MAX);
        }
        let (inner, report) =
            NodeAgent::open(clocks(now, mono), &mut graph.inner, node, ac).map_err(agents_err)?;
        Ok(NodeAgentJs { inner, report })
    }

    /// What open found and repaired: `{interruptedTurn, modelStepInterrupted, uncertainCalls,
    /// lostJobs, requeuedMail, pendingTasks}`.
    #[wasm_bindgen(getter)]
    pub fn report(&self) -> JsValue {
        json(&self.report.to_json())
    }

    /// The node this agent is.
    #[wasm_bindgen(getter)]
    pub fn node(&self) -> String {
        self.inner.node().to_owned()
    }

    /// Declares a host tool `{name, description?, parameters?, supportsParallel?,
    /// mayStartJob?}`; returns its handler id. Refused on the discussion surface
    /// (`CADENCE_VIOLATION`) and for graph tool names (`AGENT_TOOL_RESERVED`).
    #[wasm_bindgen(js_name = registerTool)]
    pub fn register_tool(&mut self, decl: JsValue) -> Result<f64, JsValue> {
        let decl = ToolDecl::from_json(&args_json(&decl, "a tool declaration")?)
            .map_err(|e| agents_err(e.into()))?;
        Ok(self.inner.register_tool(decl).map_err(agents_err)?.0 as f64)
    }

    /// Something changed in the graph: takes new user lines, re-checks waits.
    pub fn sync(&mut self, graph: &mut ActorGraphJs, now: f64, mono: f64) -> Result<(), JsValue> {
        self.inner
            .sync(clocks(now, mono), &mut graph.inner)
            .map_err(agents_err)
    }

    /// The next output whose lines are durable (`AgentOutput::to_json`), or `undefined`.
    #[wasm_bindgen(js_name = pollOutput)]
    pub fn poll_output(&mut self, graph: &ActorGraphJs) -> JsValue {
        match self.inner.poll_output(&graph.inner) {
            Some(o) => json(&o.to_json()),
            None => JsValue::UNDEFINED,
        }
    }

    /// The released step's model input `{node, turn, step, system, messages, tools, warnings,
    /// lines}`, or `undefined`.
    #[wasm_bindgen(js_name = modelInput)]
    pub fn model_input(&self, graph: &ActorGraphJs) -> JsValue {
        match self.inner.model_input(&graph.inner) {
            Some(m) => json(&m.to_json()),
            None => JsValue::UNDEFINED,
        }
    }

    /// The built-in deterministic model's answer to the released step (`{text}`), or
    /// `undefined`.
    #[wasm_bindgen(js_name = builtinAnswer)]
    pub fn builtin_answer(&self, graph: &ActorGraphJs) -> JsValue {
        match self.inner.model_input(&graph.inner) {
            Some(m) => json(&json!({"text": m.builtin_answer().text})),
            None => JsValue::UNDEFINED,
        }
    }

    /// The model answered step `step`: `{text?, calls?: [{id, name, arguments}], usage?}`.
    #[wasm_bindgen(js_name = onModelResponse)]
    pub fn on_model_response(
        &mut self,
        graph: &mut ActorGraphJs,
        now: f64,
        mono: f64,
        step: f64,
        response: JsValue,
    ) -> Result<(), JsValue> {
        let v = args_json(&response, "a model response")?;
        let r = ModelResponse::from_json(&v)
            .map_err(|m| agents_err(ToolsError::InvalidResponse(m).into()))?;
        self.inner
            .on_model_response(clocks(now, mono), &mut graph.inner, StepId(ms(step)), r)
            .map_err(agents_err)
    }

    /// Model step `step` failed with `message`.
    #[wasm_bindgen(js_name = onModelError)]
    pub fn on_model_error(
        &mut self,
        graph: &mut ActorGraphJs,
        now: f64,
        mono: f64,
        step: f64,
        message: &str,
    ) -> Result<(), JsValue> {
        self.inner
            .on_model_error(
                clocks(now, mono),
                &mut graph.inner,
                StepId(ms(step)),
                message,
            )
            .map_err(agents_err)
    }

    /// A host tool settled: `{value}` (returned), `{error, code?}` (threw) or `{aborted:
    /// true}`.
    #[wasm_bindgen(js_name = onCallSettled)]
    pub fn on_call_settled(
        &mut self,
        graph: &mut ActorGraphJs,
        now: f64,
        mono: f64,
        invocation: f64,
        settlement: JsValue,
    ) -> Result<(), JsValue> {
        let v = args_json(&settlement, "a settlement")?;
        let detail = || v["detail"].as_str().unwrap_or("").to_owned();
        let s = if v["aborted"] == json!(true) {
            Settlement::Aborted
        } else if let Some(f) = v["failure"].as_str() {
            // A failure of the host itself: its code and words are the core's.
            match f {
                "unknown_tool" => HandlerFailure::UnknownTool(detail()),
                "invalid_result" => HandlerFailure::InvalidResult(detail()),
                "lost" => HandlerFailure::Lost(detail()),
                other => {
                    return Err(agents_err(AgentsError::Tools(ToolsError::InvalidArgument(
                        format!(
                            "unknown handler failure `{other}` (unknown_tool, invalid_result, lost)"
                        ),
                    ))));
                }
            }
            .into()
        } else if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            Settlement::Threw {
                message: e.as_str().map_or_else(|| e.to_string(), str::to_owned),
                code: v["code"].as_str().map(str::to_owned),
            }
        } else {
            Settlement::Returned(v.get("value").cloned().unwrap_or(Value::Null))
        };
        self.inner
            .on_call_settled(
                clocks(now, mono),
                &mut graph.inner,
                InvocationId(ms(invocation)),
                s,
            )
            .map_err(agents_err)
    }

    /// The owner id the jobs this agent's calls start are submitted with (their completion
    /// notes come back to this agent).
    #[wasm_bindgen(getter)]
    pub fn owner(&self) -> String {
        self.inner.owner().0.clone()
    }

    /// The origin `{thread, turn, toolCall}` to submit a job of running call `invocation`
    /// with, or `undefined` when the invocation is not running.
    pub fn origin(&self, invocation: f64) -> JsValue {
        match self.inner.origin(InvocationId(ms(invocation))) {
            Some(o) => json(&serde_json::to_value(o).unwrap_or(Value::Null)),
            None => JsValue::UNDEFINED,
        }
    }

    /// Running call `invocation` started background job `job` (submitted with `owner` and
    /// `origin(invocation)`; its tool declared `mayStartJob`): written as a `job` line.
    #[wasm_bindgen(js_name = onCallJob)]
    pub fn on_call_job(
        &mut self,
        graph: &mut ActorGraphJs,
        now: f64,
        mono: f64,
        invocation: f64,
        job: f64,
    ) -> Result<(), JsValue> {
        self.inner
            .on_call_job(
                clocks(now, mono),
                &mut graph.inner,
                InvocationId(ms(invocation)),
                JobId(ms(job)),
            )
            .map_err(agents_err)
    }

    /// Records a journal event (`{job, seq, at, source, type, ...}`) of a job a call of this
    /// agent started in the node's `jobs.jsonl`: milestones at once, repeating events as the
    /// job's latest (written before the next milestone). Returns whether the job is this
    /// agent's.
    #[wasm_bindgen(js_name = recordJobEvent)]
    pub fn record_job_event(
        &mut self,
        graph: &mut ActorGraphJs,
        now: f64,
        mono: f64,
        event: JsValue,
    ) -> Result<bool, JsValue> {
        let v = args_json(&event, "a job event")?;
        self.inner
            .record_job_event(clocks(now, mono), &mut graph.inner, &v)
            .map_err(agents_err)
    }

    /// A completion note for this agent (`{correlation, job, owner, origin, outcome, summary,
    /// at}`, as a job runtime's mailbox hands it over): written as a `mail` line, admitted at
    /// the next turn start. Returns its mail sequence number.
    #[wasm_bindgen(js_name = deliverNote)]
    pub fn deliver_note(
        &mut self,
        graph: &mut ActorGraphJs,
        now: f64,
        mono: f64,
        note: JsValue,
    ) -> Result<f64, JsValue> {
        let v = args_json(&note, "a completion note")?;
        let invalid = |what: &str| {
            error(&ActorsError::InvalidArgument(format!(
                "a completion note needs {what}"
            )))
        };
        let job = v["job"]
            .as_u64()
            .ok_or_else(|| invalid("a numeric `job`"))?;
        let outcome: OutcomeKind = serde_json::from_value(v["outcome"].clone())
            .map_err(|_| invalid("an `outcome` (succeeded, failed, cancelled or lost)"))?;
        let origin: Origin = match v.get("origin").filter(|o| !o.is_null()) {
            Some(o) => {
                serde_json::from_value(o.clone()).map_err(|_| invalid("an object `origin`"))?
            }
            None => Origin::default(),
        };
        let note = Note {
            correlation: v["correlation"]
                .as_str()
                .map_or_else(|| format!("job-{job}"), str::to_owned),
            job: JobId(job),
            owner: v["owner"]
                .as_str()
                .map_or_else(|| self.inner.owner().clone(), OwnerId::new),
            origin,
            outcome,
            summary: v["summary"].as_str().unwrap_or("").to_owned(),
            at: weft_core::Mono::from_ms(v["at"].as_u64().unwrap_or_else(|| ms(mono))),
        };
        Ok(self
            .inner
            .deliver_note(clocks(now, mono), &mut graph.inner, &note)
            .map_err(agents_err)? as f64)
    }

    /// The result of an observation for this agent (a line; admitted at the next turn start).
    #[wasm_bindgen(js_name = postObservation)]
    pub fn post_observation(
        &mut self,
        graph: &mut ActorGraphJs,
        now: f64,
        mono: f64,
        source: &str,
        value: JsValue,
    ) -> Result<f64, JsValue> {
        let v = if value.is_undefined() {
            Value::Null
        } else {
            args_json(&value, "an observation value")?
        };
        Ok(self
            .inner
            .post_observation(clocks(now, mono), &mut graph.inner, source, v)
            .map_err(agents_err)? as f64)
    }

    /// The application's explicit choice to wake the agent (admits its mail in a turn).
    pub fn wake(
        &mut self,
        graph: &mut ActorGraphJs,
        now: f64,
        mono: f64,
        reason: &str,
    ) -> Result<(), JsValue> {
        self.inner
            .wake(clocks(now, mono), &mut graph.inner, reason)
            .map_err(agents_err)
    }

    /// Interrupts the running turn (a waiting step included); returns `not_running`, `ended`,
    /// `stopping` or `already_interrupting`.
    pub fn interrupt(
        &mut self,
        graph: &mut ActorGraphJs,
        now: f64,
        mono: f64,
        reason: &str,
    ) -> Result<String, JsValue> {
        Ok(self
            .inner
            .interrupt(clocks(now, mono), &mut graph.inner, reason)
            .map_err(agents_err)?
            .as_str()
            .to_owned())
    }

    /// The next deadline (an interrupt's grace period), if any, on the monotonic clock (the
    /// `mono` the calls take): arm a timer for `at - performance.now()`.
    #[wasm_bindgen(js_name = pollTimeout)]
    pub fn poll_timeout(&self) -> Option<f64> {
        self.inner.poll_timeout().map(|t| t.as_ms() as f64)
    }

    /// Time passed: an interrupt's grace period may have ended.
    #[wasm_bindgen(js_name = handleTimeout)]
    pub fn handle_timeout(
        &mut self,
        graph: &mut ActorGraphJs,
        now: f64,
        mono: f64,
    ) -> Result<(), JsValue> {
        self.inner
            .handle_timeout(clocks(now, mono), &mut graph.inner)
            .map_err(agents_err)
    }

    /// `{node, phase, turn, waiting, queuedTasks, pendingMail, openJobs}`.
    pub fn state(&self) -> JsValue {
        json(&self.inner.state())
    }

    /// Outputs held until their lines are durable.
    #[wasm_bindgen(js_name = heldOutputs)]
    pub fn held_outputs(&self) -> f64 {
        self.inner.held_outputs() as f64
    }
}

/// A person's utterance typed in `node` where agents run (`weft_core::agents::admit_utterance`):
/// appended when a model is configured (the agent's spawn tool decides), routed by the
/// keyword heuristic otherwise.
#[wasm_bindgen(js_name = admitUtterance)]
pub fn admit_utterance(
    graph: &mut ActorGraphJs,
    now: f64,
    node: &str,
    text: &str,
    model_configured: bool,
) -> Result<JsValue, JsValue> {
    let out = agents::admit_utterance(
        weft_core::Wall::from_ms(ms(now)),
        &mut graph.inner,
        node,
        text,
        model_configured,
    )
    .map_err(agents_err)?;
    Ok(json(&out))
}

/// The journal records of `job` after sequence number `after` from the text of a node's
/// `jobs.jsonl` (`weft_core::agents::journal_after`; a torn last line is skipped): what an
/// observer that reconnects missed.
#[wasm_bindgen(js_name = journalAfter)]
pub fn journal_after(text: &str, job: f64, after: f64) -> JsValue {
    json(&Value::Array(agents::journal_after(
        text,
        ms(job),
        ms(after),
    )))
}
