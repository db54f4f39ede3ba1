//! The runner of the `ops` conformance suite (`tests/vectors/ops.json`), dispatched from
//! [`crate::conformance::run_suite`]. Every host runs the same vectors against this core.
//!
//! A vector is `{"name", "graph": GraphSpec, "endpoints": [...], "steps": [...], "expect"}`, or
//! `{"name", "kind": "claims", "steps": [...]}` for the standing-desire reconciler. Endpoints
//! are opened in order before the graph loads (ids from 1): `{"hello": "skip" | "await" |
//! {"declared": caps}, "maxConcurrent": n, "quietMs": n}`. Steps have `at` (ms, non-decreasing;
//! due timers fire first), `op`, and optional `expect`, `expectError` and `outputs` (everything
//! the app emitted during the step), matched as subsets (see [`crate::conformance::subset`]).
//! A calculation is named by `"calc": "instance:generation"` or by `"cell"` (its current one).
//! An optional `"retention": {"operations", "calculations", "writes"}` sets the app's limits;
//! the `retained` step reports what is kept and what was pruned. A `tool` step calls a published
//! tool (`owner`: whom a still-waiting operation is hosted for, default `agent`); when it waits,
//! the app's reply is what the caller receives, not an output: `tool_reply` takes it.

use serde_json::{Value, json};

use super::claims::Claims;
use super::operation::{ObserveRequest, Selection};
use super::tools::{ToolCallId, ToolCaller, ToolReply};
use super::*;
use crate::Mono;
use crate::conformance::{VectorResult, check_final, check_step, each_step, subset, vector_name};
use crate::jobs::{
    EndpointId, EndpointSpec, Hello, JobId, Origin, OwnerId, Registry, RegistryConfig, WaitId,
    wire::Capabilities,
};

type StepErr = (String, String);

fn verr(msg: impl Into<String>) -> StepErr {
    ("VECTOR".into(), msg.into())
}

/// Runs every vector of an `ops` suite. The suite may define shared `graphs` (a vector's
/// `"graph"` may name one) and `preludes` (step lists a vector's `"prelude"` runs first).
pub fn run_suite(suite: &Value) -> Vec<VectorResult> {
    let empty = vec![];
    suite["vectors"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|v| {
            let mut v = v.clone();
            if let Some(g) = v["graph"].as_str() {
                v["graph"] = suite["graphs"][g].clone();
            }
            if let Some(p) = v["prelude"].as_str() {
                let mut steps = suite["preludes"][p].as_array().cloned().unwrap_or_default();
                steps.extend(v["steps"].as_array().cloned().unwrap_or_default());
                v["steps"] = Value::Array(steps);
            }
            run_vector(&v)
        })
        .collect()
}

/// Runs one vector of the `ops` suite.
pub fn run_vector(v: &Value) -> VectorResult {
    let name = vector_name(v);
    if v["kind"].as_str() == Some("claims") {
        return run_claims_vector(name, v);
    }
    let mut failures = Vec::new();
    let mut retention = Retention::default();
    let limit = |k: &str, d: usize| v["retention"][k].as_u64().map_or(d, |n| n as usize);
    retention.operations = limit("operations", retention.operations);
    retention.calculations = limit("calculations", retention.calculations);
    retention.writes = limit("writes", retention.writes);
    let mut app: App<Value> = App::new(AppConfig {
        instance: v["instance"].as_u64().unwrap_or(1),
        retention,
        ..AppConfig::default()
    });
    let reg = &mut Registry::new(RegistryConfig::default());
    for (i, e) in v["endpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        if let Err(err) = open_endpoint(reg, e) {
            failures.push(format!("endpoint {i}: {}", err.1));
        }
    }
    let spec: GraphSpec = match serde_json::from_value(v["graph"].clone()) {
        Ok(s) => s,
        Err(e) => return VectorResult::unusable(name, format!("graph spec: {e}")),
    };
    if let Err(e) = app.load(Mono::ZERO, reg, spec) {
        failures.push(format!("load: {} {e}", e.code()));
    }
    let initial: Vec<Value> = app.drain_outputs().map(|o| output_json(&o)).collect();
    if let Some(want) = v.get("loadOutputs")
        && let Err(e) = subset(want, &Value::Array(initial), "loadOutputs")
    {
        failures.push(e);
    }
    let mut calls = ToolCalls::default();
    each_step(v, &mut failures, |step, failures| {
        let at = Mono::from_ms(step.at);
        while let Some(d) = app.poll_timeout(reg).filter(|d| *d <= at) {
            app.handle_timeout(d, reg);
        }
        // Replies that came with the timers are taken before the step (a `tool_reply` reads them).
        let mut outputs = calls.take_outputs(&mut app);
        let result = apply_step(&mut app, reg, &mut calls, at, step.op, step.json);
        outputs.extend(calls.take_outputs(&mut app));
        check_step(&step.ctx, step.json, &result, outputs, failures);
        if let Err(e) = records_agree(&app) {
            failures.push(format!("{}: {e}", step.ctx));
        }
    });
    check_final(v, &mut failures, || state_json(&app, reg));
    VectorResult { name, failures }
}

/// Every retained outcome and receipt written straight to text (what the wasm binding hands
/// JS) is the text of its JSON value: the same fields, in the same order.
fn records_agree(app: &App<Value>) -> Result<(), String> {
    for o in app.operations() {
        if let Some(r) = app.outcome_record(o.id) {
            let got = serde_json::to_string(&r).unwrap_or_default();
            let want = app.outcome_json(o.id).to_string();
            if got != want {
                return Err(format!(
                    "outcome of op {} as text: {got}, as JSON: {want}",
                    o.id.0
                ));
            }
        }
    }
    for w in app.write_records() {
        let got = app
            .receipt_record(w.id)
            .map(|r| serde_json::to_string(&r).unwrap_or_default())
            .unwrap_or_default();
        let want = app.receipt_json(w.id).to_string();
        if got != want {
            return Err(format!(
                "receipt {} as text: {got}, as JSON: {want}",
                w.id.0
            ));
        }
    }
    Ok(())
}

fn open_endpoint(reg: &mut Registry<Value>, e: &Value) -> Result<EndpointId, StepErr> {
    let mut spec = EndpointSpec::new(
        e["owner"].as_str().unwrap_or("app"),
        e["label"].as_str().unwrap_or("worker"),
    );
    spec.hello = match &e["hello"] {
        Value::String(h) if h == "skip" => Hello::Skip,
        Value::Object(o) if o.contains_key("declared") => Hello::Declared(
            serde_json::from_value::<Capabilities>(o["declared"].clone())
                .map_err(|e| verr(e.to_string()))?,
        ),
        _ => Hello::Await {
            timeout_ms: e["helloTimeoutMs"].as_u64().unwrap_or(1000),
        },
    };
    if let Some(q) = e["quietMs"].as_u64() {
        spec.quiet_ms = q;
    }
    if let Some(m) = e["maxConcurrent"].as_u64() {
        spec.max_concurrent = Some(m as usize);
    }
    Ok(reg.open_endpoint(Mono::ZERO, spec))
}

/// The runner's side of the tool calls that wait, kept as a host keeps them: the latest call
/// waiting on each operation, and the replies the app gave ([`AppOutput::ToolReplied`]). The
/// replies are what the caller receives, not outputs a vector lists: a `tool_reply` step takes
/// the reply of the latest call that waited on its `operation`.
#[derive(Default)]
struct ToolCalls {
    waiting: std::collections::HashMap<u64, ToolCallId>,
    replies: std::collections::HashMap<ToolCallId, Result<Value, StepErr>>,
}

impl ToolCalls {
    /// Drains the app's outputs: tool replies are kept, the rest returned as JSON, in order.
    fn take_outputs(&mut self, app: &mut App<Value>) -> Vec<Value> {
        let mut out = Vec::new();
        for o in app.drain_outputs() {
            match o {
                AppOutput::ToolReplied { call, reply, .. } => {
                    let reply = reply.map_err(|e| (e.code().to_owned(), e.to_string()));
                    self.replies.insert(call, reply);
                }
                other => out.push(output_json(&other)),
            }
        }
        out
    }
}

/// Calls the registry directly, then hands its outputs to the app.
fn jobs_call<T>(
    app: &mut App<Value>,
    reg: &mut Registry<Value>,
    at: Mono,
    f: impl FnOnce(&mut Registry<Value>) -> T,
) -> T {
    let r = f(reg);
    app.on_registry_outputs(at, reg);
    r
}

/// The JSON form of an app output.
pub fn output_json<V: Payload>(o: &AppOutput<V>) -> Value {
    match o {
        AppOutput::Compute {
            calc,
            cell,
            inputs,
            previous,
        } => {
            json!({"output": "compute", "calc": calc.to_json(), "cell": cell, "inputs": inputs.to_json(),
                    "previous": previous.as_ref().map(|p| p.to_json())})
        }
        AppOutput::Abort {
            calc, cell, reason, ..
        } => {
            json!({"output": "abort", "calc": calc.to_json(), "cell": cell, "reason": reason})
        }
        AppOutput::Jobs(j) => j.to_json(),
        AppOutput::OpFinished {
            op,
            outcome,
            snapshot,
            ..
        } => json!({"output": "op_finished", "op": op.0,
            "outcome": outcome.as_str(), "snapshot": snapshot.as_ref().map(|s| s.to_json())}),
        AppOutput::ToolReplied { call, op, reply } => match reply {
            Ok(v) => json!({"output": "tool_replied", "call": call.0, "op": op.0, "reply": v}),
            Err(e) => json!({"output": "tool_replied", "call": call.0, "op": op.0,
                "error": {"code": e.code(), "message": e.to_string()}}),
        },
    }
}

/// The app's observable state: controls, cells, operations, calculations, writes, jobs.
pub fn state_json(app: &App<Value>, reg: &Registry<Value>) -> Value {
    let snap = app.snapshot();
    let mut ops = serde_json::Map::new();
    for o in app.operations() {
        ops.insert(
            o.id.0.to_string(),
            app.operation_json(o.id).unwrap_or(Value::Null),
        );
    }
    let mut calcs = serde_json::Map::new();
    for c in app.calcs.keys() {
        calcs.insert(c.to_string(), app.calc_json(*c).unwrap_or(Value::Null));
    }
    let writes: Vec<Value> = app
        .write_records()
        .map(|w| app.receipt_json(w.id))
        .collect();
    let mut s = snap.to_json();
    s["operations"] = Value::Object(ops);
    s["calcs"] = Value::Object(calcs);
    s["writes"] = Value::Array(writes);
    s["jobs"] = crate::conformance::jobs_state(reg)["jobs"].clone();
    s
}

fn calc_arg(app: &App<Value>, s: &Value) -> Result<CalcId, StepErr> {
    if let Some(c) = s["calc"].as_str() {
        return CalcId::parse(c).ok_or_else(|| verr(format!("bad calc id `{c}`")));
    }
    let cell = s["cell"]
        .as_str()
        .ok_or_else(|| verr("step needs `calc` or `cell`"))?;
    app.cell_view(cell)
        .map_err(|e| (e.code().into(), e.to_string()))?
        .current
        .ok_or_else(|| verr(format!("cell `{cell}` has no calculation in flight")))
}

fn pairs(v: &Value) -> Result<Vec<(String, Value)>, StepErr> {
    match v {
        Value::Null => Ok(vec![]),
        Value::Object(m) => Ok(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        Value::Array(a) => a
            .iter()
            .map(|p| match p.as_array().map(Vec::as_slice) {
                Some([Value::String(k), v]) => Ok((k.clone(), v.clone())),
                _ => Err(verr("pairs are [name, value]")),
            })
            .collect(),
        _ => Err(verr("writes are an object or an array of [name, value]")),
    }
}

fn actor(s: &Value) -> Actor {
    Actor {
        by: s["by"].as_str().unwrap_or("agent").into(),
        tool_call: s["toolCall"].as_str().map(str::to_owned),
    }
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn apply_step(
    app: &mut App<Value>,
    reg: &mut Registry<Value>,
    calls: &mut ToolCalls,
    at: Mono,
    op: &str,
    s: &Value,
) -> Result<Value, StepErr> {
    let err = |e: OpsError| (e.code().to_owned(), e.to_string());
    let op_id = |s: &Value| {
        s["operation"]
            .as_u64()
            .map(OpId)
            .ok_or_else(|| verr("step needs `operation`"))
    };
    Ok(match op {
        "set" => {
            let name = s["name"].as_str().ok_or_else(|| verr("set needs `name`"))?;
            let w = app.set(at, name, &s["value"], actor(s)).map_err(err)?;
            app.receipt_json(w)
        }
        "set_many" => {
            let ws = app
                .set_many(at, &pairs(&s["writes"])?, actor(s))
                .map_err(err)?;
            json!(ws.iter().map(|w| app.receipt_json(*w)).collect::<Vec<_>>())
        }
        "flush" => json!({"revision": app.flush(at, reg)}),
        "act" => {
            let name = s["name"].as_str().ok_or_else(|| verr("act needs `name`"))?;
            let (inv, ws) = app
                .act(at, name, &pairs(&s["args"])?, actor(s))
                .map_err(err)?;
            json!({"invocation": inv.0, "writes": ws.iter().map(|w| app.receipt_json(*w)).collect::<Vec<_>>()})
        }
        "observe" => {
            let mut req = ObserveRequest::new(pairs(&s["writes"])?, names(&s["waitFor"]));
            req.select = if let Some(sel) = s["selector"].as_str() {
                Selection::Selector(sel.into())
            } else if s["select"].is_array() {
                Selection::Outputs(names(&s["select"]))
            } else {
                Selection::None
            };
            req.on_supersede = match s["onSupersede"].as_str() {
                Some("follow") => OnSupersede::Follow,
                _ => OnSupersede::End,
            };
            req.on_failure = match s["onFailure"].as_str() {
                Some("collect") => OnFailure::Collect,
                _ => OnFailure::End,
            };
            req.timeout_ms = s["timeoutMs"].as_u64();
            req.actor = actor(s);
            let id = app.observe(at, reg, req).map_err(err)?;
            json!({"operation": id.0})
        }
        "done" | "partial" | "progress" | "fail" | "finish" => {
            let calc = calc_arg(app, s)?;
            let r = match op {
                "done" => app.calc_done(at, reg, calc, s["value"].clone()),
                "finish" => app.calc_finish(at, reg, calc),
                "partial" => app.calc_partial(at, reg, calc, s["value"].clone()),
                "progress" => {
                    app.calc_progress(at, reg, calc, s["value"].as_f64().unwrap_or(f64::NAN))
                }
                _ => app.calc_failed(
                    at,
                    reg,
                    calc,
                    s["message"].as_str().unwrap_or("failed"),
                    s["code"].as_str(),
                ),
            }
            .map_err(err)?;
            json!({"calc": calc.to_json(), "report": r.as_str()})
        }
        "message" => {
            let ep = EndpointId(
                s["endpoint"]
                    .as_u64()
                    .ok_or_else(|| verr("needs `endpoint`"))?,
            );
            app.on_worker_message(at, reg, ep, &s["msg"]).map_err(err)?;
            Value::Null
        }
        "endpoint_closed" => {
            let ep = EndpointId(
                s["endpoint"]
                    .as_u64()
                    .ok_or_else(|| verr("needs `endpoint`"))?,
            );
            app.on_endpoint_closed(at, reg, ep, s["reason"].as_str().unwrap_or("closed"))
                .map_err(err)?;
            Value::Null
        }
        "cancel_op" => {
            let k = app
                .cancel_op(at, reg, op_id(s)?, s["reason"].as_str().unwrap_or("test"))
                .map_err(err)?;
            json!(k.as_str())
        }
        "host_as_job" => {
            let j = app
                .host_as_job(
                    at,
                    reg,
                    op_id(s)?,
                    s["owner"].as_str().unwrap_or("agent"),
                    Origin::default(),
                )
                .map_err(err)?;
            json!({"job": j.0})
        }
        "cancel_job" => {
            let job = JobId(s["job"].as_u64().ok_or_else(|| verr("needs `job`"))?);
            let st = jobs_call(app, reg, at, |r| {
                r.cancel(at, job, s["reason"].as_str().unwrap_or("test"))
            })
            .map_err(|e| (e.code().to_owned(), e.to_string()))?;
            json!(st.as_str())
        }
        "wait_job" => {
            let job = JobId(s["job"].as_u64().ok_or_else(|| verr("needs `job`"))?);
            let w = jobs_call(app, reg, at, |r| r.wait(at, job, s["timeoutMs"].as_u64()))
                .map_err(|e| (e.code().to_owned(), e.to_string()))?;
            json!({"wait": w.0})
        }
        "cancel_wait" => {
            let w = WaitId(s["wait"].as_u64().ok_or_else(|| verr("needs `wait`"))?);
            jobs_call(app, reg, at, |r| r.cancel_wait(w))
                .map_err(|e| (e.code().to_owned(), e.to_string()))?;
            Value::Null
        }
        "read_mailbox" => {
            let owner = OwnerId(s["owner"].as_str().unwrap_or("agent").into());
            json!(jobs_call(app, reg, at, |r| r.read_mailbox(&owner)))
        }
        "replace_graph" => {
            let cells: Vec<CellSpec> = serde_json::from_value(s["cells"].clone())
                .map_err(|e| verr(format!("cells: {e}")))?;
            let inst = s["instance"]
                .as_u64()
                .ok_or_else(|| verr("needs `instance`"))?;
            app.replace_graph(at, reg, inst, cells).map_err(err)?;
            Value::Null
        }
        "dispose_graph" => {
            app.dispose_graph(at, reg);
            Value::Null
        }
        "record_result" => {
            app.record_result(op_id(s)?, s["value"].clone())
                .map_err(err)?;
            Value::Null
        }
        "submit_task" => {
            let cell = s["cell"].as_str().ok_or_else(|| verr("needs `cell`"))?;
            let j = app
                .submit_task(
                    at,
                    reg,
                    cell,
                    &pairs(&s["overrides"])?,
                    s["owner"].as_str().unwrap_or("agent"),
                    Origin::default(),
                )
                .map_err(err)?;
            json!({"job": j.0})
        }
        "tool" => {
            let name = s["name"].as_str().ok_or_else(|| verr("needs `name`"))?;
            let mut caller = ToolCaller::from(actor(s));
            if let Some(owner) = s["owner"].as_str() {
                caller.owner = owner.into();
            }
            match app
                .call_tool(at, reg, name, &s["args"], caller)
                .map_err(err)?
            {
                ToolReply::Ready(v) => v,
                ToolReply::Wait { call, op, wait_ms } => {
                    calls.waiting.insert(op.0, call);
                    json!({"wait": op.0, "waitMs": wait_ms})
                }
            }
        }
        "tool_reply" => {
            let op = op_id(s)?;
            let call = *calls
                .waiting
                .get(&op.0)
                .ok_or_else(|| verr(format!("no tool call waits on operation {}", op.0)))?;
            let reply = calls
                .replies
                .remove(&call)
                .ok_or_else(|| verr("the waiting tool call has not replied"))?;
            calls.waiting.remove(&op.0);
            reply?
        }
        "tools" => json!(
            app.tool_definitions()
                .iter()
                .map(|t| t.to_json())
                .collect::<Vec<_>>()
        ),
        "inspect" => app.operation_json(op_id(s)?).map_err(err)?,
        "calc" => {
            let c = calc_arg(app, s)?;
            app.calc_json(c).map_err(err)?
        }
        "calcs_of" => {
            let cell = s["cell"].as_str().ok_or_else(|| verr("needs `cell`"))?;
            json!(
                app.calcs_of(cell)
                    .iter()
                    .map(|c| c.to_json())
                    .collect::<Vec<_>>()
            )
        }
        "cell" => {
            let cell = s["name"].as_str().ok_or_else(|| verr("needs `name`"))?;
            super::reports::cell_view_json(&app.cell_view(cell).map_err(err)?)
        }
        "report" => app.report(s["full"].as_bool().unwrap_or(false)),
        "snapshot" => app.snapshot().to_json(),
        "retained" => {
            let (calcs, writes, operations) = app.retained();
            let p = app.pruned();
            json!({"calculations": calcs, "writes": writes, "operations": operations,
                "jobs": reg.jobs().count(),
                "pruned": {"operations": p.operations, "calculations": p.calculations,
                    "writes": p.writes, "jobs": p.jobs}})
        }
        "state" => state_json(app, reg),
        "advance" => Value::Null,
        other => return Err(verr(format!("unknown op `{other}`"))),
    })
}

fn run_claims_vector(name: String, v: &Value) -> VectorResult {
    let mut failures = Vec::new();
    let mut claims: Claims<Value> = Claims::new();
    each_step(v, &mut failures, |step, failures| {
        let (at, op, s, ctx) = (Mono::from_ms(step.at), step.op, step.json, &step.ctx);
        let claim = s["claim"].as_str().unwrap_or("c");
        let attempt = s["attempt"].as_u64().unwrap_or(0);
        let r: Result<Value, (String, String)> = match op {
            "desire" => {
                claims.desire(
                    at,
                    claim,
                    (!s["desire"].is_null()).then(|| s["desire"].clone()),
                );
                Ok(Value::Null)
            }
            "acquired" => claims
                .acquired(at, claim, attempt)
                .map(|b| json!({"adopted": b})),
            "acquire_failed" => claims
                .acquire_failed(at, claim, attempt, s["error"].as_str().unwrap_or("failed"))
                .map(|_| Value::Null),
            "released" => claims
                .released(at, claim, attempt, s["error"].as_str())
                .map(|_| Value::Null),
            "retry" => claims.retry(at, claim).map(|_| Value::Null),
            "state" => Ok(claims.to_json(claim)),
            other => {
                failures.push(format!("step {}: unknown op `{other}`", step.index));
                return;
            }
        }
        .map_err(|e| (e.code().to_owned(), e.to_string()));
        let outputs: Vec<Value> = claims
            .drain_outputs()
            .map(|o| o.to_json(|d| d.clone()))
            .collect();
        check_step(ctx, s, &r, outputs, failures);
        if let Some(want) = s.get("phase")
            && want.as_str() != Some(claims.phase(claim).as_str())
        {
            failures.push(format!(
                "{ctx}: phase {} (expected {want})",
                claims.phase(claim).as_str()
            ));
        }
    });
    VectorResult { name, failures }
}
