//! The `agents` conformance suite runner (`tests/vectors/agents.json`), dispatched by
//! [`crate::conformance::run_suite`]: agents on actor nodes over a memory store, run natively,
//! as wasm under Node and in Chromium.
//!
//! A vector has optional `config` (harness variables), optional `context` (`contextTokens`,
//! `recentLines`) and `steps`. Each step has `op` and may state `at` (ms after
//! [`crate::actors::vectors::BASE`]), `expect` (a subset of the result), `expectError` (a
//! code), `outputs` (the agents' released outputs of the step, each `{node, output, ...}`),
//! `lines` (`{node: [subsets]}`: exactly the lines the step appended), `input` (`{node:
//! subset}` of the released step's model input), `systemContains` (`{node: [substrings]}`),
//! `state` (`{node: subset}`) and `files` (`{path: subset}` of the store).
//!
//! After each step the queued batches are applied to the memory store and acknowledged and
//! every agent is synced, unless the step says `"hold": true` (every agent is synced and what
//! it releases before a flush is drained, then the batches stay unapplied; `flush` applies
//! them; `crash` drops them, as a host killed before its store wrote them).
//!
//! Ops: `graph {call, args}` (any actor operation), `spawn {parent, type, id, title?}` and `status {node, status, summary?}` (the graph,
//! as another writer), `say {node, text}` (a user line), `agent {node, tools?: [{name,
//! parallel?, mayStartJob?}]}` (open the node's agent; the result is its resume report),
//! `model {node, text?, calls?}`, `modelError {node, message}`, `settle {node, call, value? |
//! error?}`, `job {node, call, job}`, `note {node, job, outcome, summary?}`, `observe {node,
//! source, value}`, `jobEvent {node, event}`, `interrupt {node, reason?}`, `wake {node, reason?}`, `tick` (timeouts),
//! `flush`, `crash` (reopen the graph and every agent from the store; the result maps node →
//! resume report).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{AgentConfig, AgentOutput, AgentsError, NodeAgent};
use crate::actors::store::{ActorStore, MemoryStore, WriteBatch};
use crate::actors::vectors::BASE;
use crate::actors::{ActorGraph, HarnessConfig, HeuristicProposer};
use crate::conformance::{VectorResult, check_step, subset};
use crate::jobs::{JobId, Note, Origin, OutcomeKind};
use crate::time::{Mono, Now};
use crate::tools::{InvocationId, ModelResponse, Output, Settlement, ToolCall, ToolDecl};

type StepResult = Result<Value, (String, String)>;

fn verr(msg: impl Into<String>) -> (String, String) {
    ("VECTOR".into(), msg.into())
}

fn aerr(e: impl Into<AgentsError>) -> (String, String) {
    let e = e.into();
    (e.code().to_owned(), e.to_string())
}

struct Run {
    config: HarnessConfig,
    agent_config: AgentConfig,
    store: MemoryStore,
    g: ActorGraph,
    agents: BTreeMap<String, NodeAgent>,
    tools: BTreeMap<String, Value>,
    calls: BTreeMap<(String, String), InvocationId>,
    held: Vec<WriteBatch>,
    outputs: Vec<Value>,
    /// The step's time on both clocks: `Mono::from_ms(at)` and `Wall::from_ms(BASE + at)`,
    /// as the frames runner derives them (vector files state one number).
    now: Now,
}

fn s<'a>(step: &'a Value, k: &str) -> Result<&'a str, (String, String)> {
    step[k]
        .as_str()
        .ok_or_else(|| verr(format!("step lacks string `{k}`")))
}

impl Run {
    fn open_agent(&mut self, node: &str, tools: &Value) -> StepResult {
        let (mut a, report) =
            NodeAgent::open(self.now, &mut self.g, node, self.agent_config.clone())
                .map_err(aerr)?;
        for t in tools.as_array().into_iter().flatten() {
            let mut d = ToolDecl::new(
                t["name"].as_str().unwrap_or("tool"),
                t["description"].as_str().unwrap_or("a host tool"),
                t.get("parameters")
                    .cloned()
                    .unwrap_or(json!({"type": "object"})),
            );
            d.supports_parallel = t["parallel"].as_bool().unwrap_or(false);
            d.may_start_job = t["mayStartJob"].as_bool().unwrap_or(false);
            a.register_tool(d).map_err(aerr)?;
        }
        self.tools.insert(node.to_owned(), tools.clone());
        self.agents.insert(node.to_owned(), a);
        Ok(report.to_json())
    }

    /// The graph and the agent of `node`, borrowed together.
    fn parts(&mut self, node: &str) -> Result<(&mut ActorGraph, &mut NodeAgent), (String, String)> {
        let a = self
            .agents
            .get_mut(node)
            .ok_or_else(|| verr(format!("no agent open on `{node}`")))?;
        Ok((&mut self.g, a))
    }

    /// The node and invocation of the step's started `call`.
    fn started_call(&self, step: &Value) -> Result<(String, InvocationId), (String, String)> {
        let node = s(step, "node")?.to_owned();
        let call = s(step, "call")?.to_owned();
        let inv = *self
            .calls
            .get(&(node.clone(), call.clone()))
            .ok_or_else(|| verr(format!("call `{call}` of `{node}` never started")))?;
        Ok((node, inv))
    }

    /// Applies and acknowledges queued batches and syncs every agent until quiet.
    fn settle(&mut self) -> Result<(), (String, String)> {
        for _ in 0..16 {
            let batches = self.g.take_batches();
            for b in &batches {
                let done = self.store.perform(b).map_err(verr)?;
                self.g.ack(done).map_err(aerr)?;
            }
            let nodes: Vec<String> = self.agents.keys().cloned().collect();
            for n in &nodes {
                let now = self.now;
                let a = self.agents.get_mut(n).expect("listed");
                a.sync(now, &mut self.g).map_err(aerr)?;
            }
            let agents = self.agents.len();
            self.drain();
            if !self.g.has_batches() && self.agents.len() == agents {
                return Ok(());
            }
        }
        Err(verr("agents did not settle in 16 rounds"))
    }

    /// Syncs every agent with the graph (nothing is applied).
    fn sync_all(&mut self) -> Result<(), (String, String)> {
        for a in self.agents.values_mut() {
            a.sync(self.now, &mut self.g).map_err(aerr)?;
        }
        Ok(())
    }

    fn drain(&mut self) {
        let mut opened = Vec::new();
        for (n, a) in self.agents.iter_mut() {
            while let Some(o) = a.poll_output(&self.g) {
                if let AgentOutput::Session(Output::StartCall {
                    invocation,
                    call_id,
                    ..
                }) = &o
                {
                    self.calls.insert((n.clone(), call_id.clone()), *invocation);
                }
                if let AgentOutput::Spawned { child } = &o {
                    opened.push(child.clone());
                }
                let mut v = o.to_json();
                v["node"] = json!(n);
                self.outputs.push(v);
            }
        }
        // A spawned child gets its own agent (no host tools: vectors give them with `agent`).
        for c in opened {
            if !self.agents.contains_key(&c) {
                let _ = self.open_agent(&c, &Value::Null);
            }
        }
    }

    fn step(&mut self, step: &Value) -> StepResult {
        let now = self.now;
        let op = s(step, "op")?;
        match op {
            "spawn" => {
                crate::actors::api::call(&mut self.g, now.wall, "spawn", step, &HeuristicProposer)
                    .map_err(aerr)
            }
            "status" => {
                crate::actors::api::call(&mut self.g, now.wall, "status", step, &HeuristicProposer)
                    .map_err(aerr)
            }
            "say" => crate::actors::api::call(
                &mut self.g,
                now.wall,
                "message",
                &json!({"node": step["node"], "text": step["text"]}),
                &HeuristicProposer,
            )
            .map_err(aerr),
            "graph" => crate::actors::api::call(
                &mut self.g,
                now.wall,
                s(step, "call")?,
                &step["args"],
                &HeuristicProposer,
            )
            .map_err(aerr),
            "agent" => self.open_agent(s(step, "node")?, &step["tools"]),
            "model" | "modelError" => {
                let node = s(step, "node")?;
                let g = &self.g;
                let a = self
                    .agents
                    .get_mut(node)
                    .ok_or_else(|| verr(format!("no agent open on `{node}`")))?;
                let input = a
                    .model_input(g)
                    .ok_or_else(|| verr(format!("`{node}` has no released model step")))?;
                let step_id = input.step;
                if op == "modelError" {
                    a.on_model_error(
                        now,
                        &mut self.g,
                        step_id,
                        step["message"].as_str().unwrap_or("failed"),
                    )
                    .map_err(aerr)?;
                } else {
                    let calls: Vec<ToolCall> = step["calls"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| {
                            ToolCall::new(
                                c["id"].as_str().unwrap_or(""),
                                c["name"].as_str().unwrap_or(""),
                                c["arguments"].clone(),
                            )
                        })
                        .collect();
                    let mut r = ModelResponse::calls(calls);
                    r.text = step["text"].as_str().map(str::to_owned);
                    a.on_model_response(now, &mut self.g, step_id, r)
                        .map_err(aerr)?;
                }
                Ok(json!({"step": step_id.0}))
            }
            "settle" => {
                let (node, inv) = self.started_call(step)?;
                let settlement = match step.get("error") {
                    Some(e) => Settlement::Threw {
                        message: e.as_str().unwrap_or("failed").to_owned(),
                        code: None,
                    },
                    None => Settlement::Returned(step["value"].clone()),
                };
                let a = self.agents.get_mut(&node).expect("call of an agent");
                a.on_call_settled(now, &mut self.g, inv, settlement)
                    .map_err(aerr)?;
                Ok(json!({"invocation": inv.0}))
            }
            "job" => {
                let (node, inv) = self.started_call(step)?;
                let job = JobId(step["job"].as_u64().unwrap_or(1));
                let a = self.agents.get_mut(&node).expect("call of an agent");
                a.on_call_job(now, &mut self.g, inv, job).map_err(aerr)?;
                Ok(json!({"job": job.0}))
            }
            "note" => {
                let node = s(step, "node")?.to_owned();
                let job = step["job"].as_u64().unwrap_or(1);
                let outcome = match step["outcome"].as_str().unwrap_or("succeeded") {
                    "succeeded" => OutcomeKind::Succeeded,
                    "failed" => OutcomeKind::Failed,
                    "cancelled" => OutcomeKind::Cancelled,
                    _ => OutcomeKind::Lost,
                };
                let (g, a) = self.parts(&node)?;
                let note = Note {
                    correlation: format!("job-{job}"),
                    job: JobId(job),
                    owner: a.owner().clone(),
                    origin: Origin::default(),
                    outcome,
                    summary: step["summary"].as_str().unwrap_or("").to_owned(),
                    at: now.mono,
                };
                let seq = a.deliver_note(now, g, &note).map_err(aerr)?;
                Ok(json!({"seq": seq}))
            }
            "observe" => {
                let node = s(step, "node")?.to_owned();
                let source = s(step, "source")?.to_owned();
                let value = step["value"].clone();
                let (g, a) = self.parts(&node)?;
                let seq = a.post_observation(now, g, &source, value).map_err(aerr)?;
                Ok(json!({"seq": seq}))
            }
            "interrupt" => {
                let node = s(step, "node")?.to_owned();
                let reason = step["reason"].as_str().unwrap_or("interrupted").to_owned();
                let (g, a) = self.parts(&node)?;
                let st = a.interrupt(now, g, &reason).map_err(aerr)?;
                Ok(json!({"status": st.as_str()}))
            }
            "wake" => {
                let node = s(step, "node")?.to_owned();
                let reason = step["reason"].as_str().unwrap_or("wake").to_owned();
                let (g, a) = self.parts(&node)?;
                a.wake(now, g, &reason).map_err(aerr)?;
                Ok(Value::Null)
            }
            "jobEvent" => {
                let node = s(step, "node")?.to_owned();
                let (g, a) = self.parts(&node)?;
                let kept = a.record_job_event(now, g, &step["event"]).map_err(aerr)?;
                Ok(json!({"recorded": kept}))
            }
            "tick" => {
                let nodes: Vec<String> = self.agents.keys().cloned().collect();
                for n in nodes {
                    let a = self.agents.get_mut(&n).expect("listed");
                    a.handle_timeout(now, &mut self.g).map_err(aerr)?;
                }
                Ok(Value::Null)
            }
            "flush" => {
                for b in std::mem::take(&mut self.held) {
                    let done = self.store.perform(&b).map_err(verr)?;
                    self.g.ack(done).map_err(aerr)?;
                }
                Ok(Value::Null)
            }
            "crash" => {
                self.held.clear();
                self.g.discard_batches();
                let snap = self.store.load().map_err(verr)?;
                let (g, _) = ActorGraph::open(self.config.clone(), "/chat", &snap, now.wall)
                    .map_err(aerr)?;
                self.g = g;
                self.calls.clear();
                let nodes: Vec<(String, Value)> = self
                    .tools
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                self.agents.clear();
                let mut reports = serde_json::Map::new();
                for (n, t) in nodes {
                    reports.insert(n.clone(), self.open_agent(&n, &t)?);
                }
                Ok(Value::Object(reports))
            }
            other => Err(verr(format!("unknown op `{other}`"))),
        }
    }
}

fn line_json(g: &ActorGraph, node: &str, from: usize) -> Vec<Value> {
    g.chat(node)
        .unwrap_or_default()
        .iter()
        .skip(from)
        .map(|e| match e.ok() {
            Some(l) => serde_json::to_value(l).expect("lines serialize"),
            None => Value::Null,
        })
        .collect()
}

/// Runs one vector of the `agents` suite.
pub fn run_vector(v: &Value) -> VectorResult {
    let name = v["name"].as_str().unwrap_or("?").to_owned();
    let mut failures = Vec::new();
    let vars: Vec<(String, String)> = v["config"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, x)| (k.clone(), x.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let config = match HarnessConfig::from_vars(vars) {
        Ok((c, _)) => c,
        Err(e) => {
            return VectorResult {
                name,
                failures: vec![format!("config: {e}")],
            };
        }
    };
    let mut agent_config = AgentConfig::default();
    if let Some(t) = v["context"]["contextTokens"].as_u64() {
        agent_config.context_tokens = t;
    }
    if let Some(n) = v["context"]["recentLines"].as_u64() {
        agent_config.recent_lines = n as usize;
    }
    let mut store = MemoryStore::default();
    let snap = store.load().expect("memory");
    let g = match ActorGraph::init(config.clone(), "/chat", &snap, BASE, "vector root") {
        Ok(g) => g,
        Err(e) => {
            return VectorResult {
                name,
                failures: vec![format!("init: {e}")],
            };
        }
    };
    let mut run = Run {
        config,
        agent_config,
        store,
        g,
        agents: BTreeMap::new(),
        tools: BTreeMap::new(),
        calls: BTreeMap::new(),
        held: Vec::new(),
        outputs: Vec::new(),
        now: Now::new(Mono::ZERO, BASE),
    };
    if let Err(e) = run.settle() {
        failures.push(format!("init: {}", e.1));
    }
    crate::conformance::each_step(v, &mut failures, |st, failures| {
        let (ctx, step) = (st.ctx, st.json);
        run.now = Now::new(Mono::from_ms(st.at), BASE + st.at);
        let before: BTreeMap<String, usize> = run
            .g
            .node_ids()
            .into_iter()
            .map(|n| {
                let len = run.g.chat(n.as_str()).map_or(0, <[_]>::len);
                (n.to_string(), len)
            })
            .collect();
        run.outputs.clear();
        let mut result = run.step(step);
        if step["hold"].as_bool() == Some(true) {
            // The host's order: the agents see the change, release what may go before the
            // flush (reads), then the batches are taken (and here held).
            if result.is_ok()
                && let Err(e) = run.sync_all()
            {
                result = Err(e);
            }
            run.drain();
            run.held.extend(run.g.take_batches());
        } else if (step["op"] != "crash" || result.is_ok())
            && let Err(e) = run.settle()
        {
            result = Err(e);
        }
        let outputs = std::mem::take(&mut run.outputs);
        check_step(&ctx, step, &result, outputs, failures);
        for (node, want) in step["lines"].as_object().into_iter().flatten() {
            let from = before.get(node).copied().unwrap_or(0);
            let got = Value::Array(line_json(&run.g, node, from));
            if let Err(e) = subset(want, &got, &format!("lines.{node}")) {
                failures.push(format!("{ctx}: {e}"));
            }
        }
        for (node, want) in step["input"].as_object().into_iter().flatten() {
            let got = run
                .agents
                .get(node)
                .and_then(|a| a.model_input(&run.g))
                .map_or(Value::Null, |m| m.to_json());
            if let Err(e) = subset(want, &got, &format!("input.{node}")) {
                failures.push(format!("{ctx}: {e}"));
            }
        }
        for (node, want) in step["systemContains"].as_object().into_iter().flatten() {
            let system = run
                .agents
                .get(node)
                .and_then(|a| a.model_input(&run.g))
                .map(|m| m.system)
                .unwrap_or_default();
            for w in want.as_array().into_iter().flatten() {
                let w = w.as_str().unwrap_or("");
                if !system.contains(w) {
                    failures.push(format!(
                        "{ctx}: system text of `{node}` lacks {w:?}: {system:?}"
                    ));
                }
            }
        }
        for (node, want) in step["state"].as_object().into_iter().flatten() {
            let got = run.agents.get(node).map_or(Value::Null, NodeAgent::state);
            if let Err(e) = subset(want, &got, &format!("state.{node}")) {
                failures.push(format!("{ctx}: {e}"));
            }
        }
        for (path, want) in step["files"].as_object().into_iter().flatten() {
            let got = run.store.files.get(path).map_or(Value::Null, |b| {
                let text = String::from_utf8_lossy(b);
                if path.ends_with(".jsonl") {
                    Value::Array(
                        text.lines()
                            .filter(|l| !l.trim().is_empty())
                            .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
                            .collect(),
                    )
                } else {
                    serde_json::from_str(&text).unwrap_or(Value::Null)
                }
            });
            if let Err(e) = subset(want, &got, &format!("files.{path}")) {
                failures.push(format!("{ctx}: {e}"));
            }
        }
    });
    VectorResult { name, failures }
}
