//! The `tools` conformance suite runner: one agent session over one job registry.
//!
//! A vector is `{"name", "session"?: {"id", "graceMs", "maxSteps"}, "script"?: [responses],
//! "steps": [...], "expect"?: {...}}`. Steps follow the jobs suite's rules (`at`, `op`,
//! `expect`, `expectError`, `outputs`); `outputs` lists the session's outputs since the
//! previous step and `jobOutputs` the registry's. Every registry output is carried to the
//! session as a host would (`Session::on_registry_output`). Ops not listed below are registry
//! ops of the jobs suite (`open_endpoint`, `submit`, `message`, `cancel`, ...).
//!
//! Session ops: `register {tool}`, `unregister {name}`, `task {input}`, `cancel_task {task}`,
//! `steer {input}`, `wake {reason}`, `post {source, value}`, `standing {key, value}`,
//! `model {response?}` (without `response`: the script's next answer), `model_error
//! {message}`, `settle {invocation, value | error+code | aborted}`, `call_job {invocation,
//! job}`, `submit_job {invocation, endpoint, payload, wake?, note?}`, `interrupt {reason}`,
//! `state`, `transcript {from?}`, `model_request` (the pending request: its tools and its new
//! `input`, i.e. the messages after the model's last answer in this turn). The final `expect` is matched against
//! `{"session": state, "transcript": [...], "jobs": registry state}`.

use serde_json::{Value, json};

use super::{
    InvocationId, Message, ModelResponse, ScriptedModel, Session, SessionConfig, Settlement,
    StepId, TaskId, ToolDecl, ToolsError,
};
use crate::Mono;
use crate::conformance::{
    VectorResult, apply_jobs_step, check_final, check_step, each_step, jobs_state, subset,
    vector_name,
};
use crate::jobs::{EndpointId, JobId, Registry, Submit};

type StepResult = Result<Value, (String, String)>;

struct Harness {
    reg: Registry<Value>,
    session: Session<Value>,
    model: ScriptedModel,
    job_outputs: Vec<Value>,
}

impl Harness {
    /// Carries registry outputs to the session, recording them.
    fn pump(&mut self, at: Mono) {
        let outs: Vec<_> = self.reg.drain_outputs().collect();
        for o in outs {
            self.job_outputs.push(o.to_json());
            self.session.on_registry_output(at, &o, &mut self.reg);
        }
    }

    /// Fires every registry and session timer due at or before `at`, each at its deadline.
    fn advance(&mut self, at: Mono) {
        loop {
            let r = self.reg.poll_timeout().filter(|d| *d <= at);
            let s = self.session.poll_timeout().filter(|d| *d <= at);
            match (r, s) {
                (Some(r), Some(s)) if r <= s => {
                    self.reg.handle_timeout(r);
                    self.pump(r);
                }
                (Some(r), None) => {
                    self.reg.handle_timeout(r);
                    self.pump(r);
                }
                (_, Some(s)) => self.session.handle_timeout(s),
                (None, None) => return,
            }
        }
    }
}

/// Runs one vector of the `tools` suite.
pub fn run_vector(v: &Value) -> VectorResult {
    let name = vector_name(v);
    let mut failures = Vec::new();
    let cfg = &v["session"];
    let mut config = SessionConfig::new(cfg["id"].as_str().unwrap_or("agent"));
    if let Some(g) = cfg["graceMs"].as_u64() {
        config.interrupt_grace_ms = g;
    }
    if let Some(m) = cfg["maxSteps"].as_u64() {
        config.max_steps_per_turn = m as u32;
    }
    let mut script = Vec::new();
    for (i, r) in v["script"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        match ModelResponse::from_json(r) {
            Ok(r) => script.push(r),
            Err(e) => {
                failures.push(format!("script[{i}]: {e}"));
                return VectorResult { name, failures };
            }
        }
    }
    let mut h = Harness {
        reg: Registry::default(),
        session: Session::new(config),
        model: ScriptedModel::new(script),
        job_outputs: Vec::new(),
    };
    each_step(v, &mut failures, |step, failures| {
        let at = Mono::from_ms(step.at);
        h.advance(at);
        let result = apply(&mut h, at, step.op, step.json);
        h.pump(at);
        let outputs: Vec<Value> = h.session.drain_outputs().map(|o| o.to_json()).collect();
        let job_outputs = std::mem::take(&mut h.job_outputs);
        check_step(&step.ctx, step.json, &result, outputs, failures);
        if let Some(want) = step.json.get("jobOutputs")
            && let Err(e) = subset(want, &Value::Array(job_outputs), "jobOutputs")
        {
            failures.push(format!("{}: {e}", step.ctx));
        }
    });
    check_final(v, &mut failures, || {
        json!({
            "session": h.session.to_json(),
            "transcript": transcript(&h.session, 0),
            "jobs": jobs_state(&h.reg),
        })
    });
    VectorResult { name, failures }
}

fn transcript(s: &Session<Value>, from: usize) -> Value {
    Value::Array(
        s.history()
            .iter()
            .skip(from)
            .map(Message::to_json)
            .collect(),
    )
}

fn vector_err(msg: impl Into<String>) -> (String, String) {
    ("VECTOR".into(), msg.into())
}

fn id(step: &Value, key: &str) -> Result<u64, (String, String)> {
    step[key]
        .as_u64()
        .ok_or_else(|| vector_err(format!("`{key}` is not an id")))
}

fn apply(h: &mut Harness, at: Mono, op: &str, s: &Value) -> StepResult {
    let err = |e: ToolsError| (e.code().to_owned(), e.to_string());
    let input = || s.get("input").cloned().unwrap_or(Value::Null);
    Ok(match op {
        "register" => {
            let decl = ToolDecl::from_json(&s["tool"]).map_err(err)?;
            json!({"handler": h.session.register_tool(decl).map_err(err)?.0})
        }
        "unregister" => {
            h.session
                .unregister_tool(s["name"].as_str().unwrap_or(""))
                .map_err(err)?;
            Value::Null
        }
        "task" => json!({"task": h.session.submit_task(at, input()).0}),
        "cancel_task" => {
            h.session.cancel_task(TaskId(id(s, "task")?)).map_err(err)?;
            Value::Null
        }
        "steer" => {
            h.session.steer(at, input()).map_err(err)?;
            Value::Null
        }
        "wake" => {
            h.session.wake(at, s["reason"].as_str().unwrap_or("app"));
            Value::Null
        }
        "post" => {
            let seq = h.session.post_observation(
                at,
                s["source"].as_str().unwrap_or("observation"),
                s.get("value").cloned().unwrap_or(Value::Null),
            );
            json!({"seq": seq})
        }
        "standing" => {
            h.session.set_standing(
                s["key"].as_str().unwrap_or("desire"),
                s.get("value").cloned().unwrap_or(Value::Null),
            );
            Value::Null
        }
        "model" => match s.get("response") {
            None => {
                if !h.session.step_with(at, &mut h.model).map_err(err)? {
                    return Err(vector_err("no model request is pending"));
                }
                Value::Null
            }
            Some(r) => {
                let response = ModelResponse::from_json(r).map_err(vector_err)?;
                let step = match s["step"].as_u64() {
                    Some(n) => StepId(n),
                    None => h
                        .session
                        .model_request()
                        .map(|r| r.step)
                        .ok_or_else(|| vector_err("no model request is pending"))?,
                };
                h.session
                    .on_model_response(at, step, response)
                    .map_err(err)?;
                Value::Null
            }
        },
        "model_error" => {
            let step = h
                .session
                .model_request()
                .map(|r| r.step)
                .ok_or_else(|| vector_err("no model request is pending"))?;
            h.session
                .on_model_error(at, step, s["message"].as_str().unwrap_or("model failed"))
                .map_err(err)?;
            Value::Null
        }
        "settle" => {
            let inv = InvocationId(id(s, "invocation")?);
            let settlement = if s["aborted"].as_bool() == Some(true) {
                Settlement::Aborted
            } else if let Some(m) = s["error"].as_str() {
                Settlement::Threw {
                    message: m.to_owned(),
                    code: s["code"].as_str().map(str::to_owned),
                }
            } else {
                Settlement::Returned(s.get("value").cloned().unwrap_or(Value::Null))
            };
            h.session
                .on_call_settled(at, inv, settlement)
                .map_err(err)?;
            Value::Null
        }
        "call_job" => {
            h.session
                .on_call_job(at, InvocationId(id(s, "invocation")?), JobId(id(s, "job")?))
                .map_err(err)?;
            Value::Null
        }
        "submit_job" => {
            let mut req = Submit::new(
                "ignored: the session owns the job",
                EndpointId(id(s, "endpoint")?),
                s.get("payload").cloned().unwrap_or(Value::Null),
            );
            req.wake = s["wake"].as_bool().unwrap_or(false);
            req.note = s["note"].as_bool().unwrap_or(true);
            let r = h
                .session
                .submit_job(at, InvocationId(id(s, "invocation")?), &mut h.reg, req)
                .map_err(err)?;
            json!({"job": r.job.0})
        }
        "interrupt" => json!(
            h.session
                .interrupt(at, s["reason"].as_str().unwrap_or("user"))
                .as_str()
        ),
        "state" => h.session.to_json(),
        "transcript" => transcript(&h.session, s["from"].as_u64().unwrap_or(0) as usize),
        "model_request" => {
            let r = h
                .session
                .model_request()
                .ok_or_else(|| vector_err("no model request is pending"))?;
            // The step's new input: everything after the model's last answer in this turn.
            let last = r
                .messages
                .iter()
                .rposition(|m| matches!(m, Message::Assistant { .. } | Message::TurnStart { .. }))
                .map_or(0, |i| match r.messages[i] {
                    Message::TurnStart { .. } => i,
                    _ => i + 1,
                });
            json!({
                "turn": r.turn.0, "step": r.step.0, "toolsVersion": r.tools.version,
                "tools": r.tools.tools().iter().map(|t| t.decl.name.clone()).collect::<Vec<_>>(),
                "input": r.messages[last..].iter().map(Message::to_json).collect::<Vec<_>>(),
            })
        }
        _ => apply_jobs_step(&mut h.reg, at, op, s)?,
    })
}
