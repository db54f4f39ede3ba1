//! Conformance vectors: data files that describe inputs (with simulated times) and the expected
//! outputs, journals and outcomes. The runner lives in the core so that every host — native,
//! wasm under Node, wasm in Chromium — executes the same vectors against the same rules.
//!
//! A suite is `{"suite": "jobs", "vectors": [{"name", "steps": [...], "expect": {...}}]}`.
//! Each step has `at` (milliseconds, non-decreasing) and `op`; before a step runs, every timer
//! due at or before its `at` fires at its own deadline. A step may state `expect` (the call's
//! result), `expectError` (the error code) and `outputs` (everything the registry emitted since
//! the previous step). Expectations are subsets: objects need only the keys they name, arrays
//! must have the same length, and a string stands for an object with that `type` or `output`.
//! In the jobs suite each step is one host turn, after which the host flushes the requests
//! held for batch frames (`Registry::flush_sends`); a step with `"sameTurn": true` leaves the
//! turn open for the next step (at the same `at`), as a host's synchronous loop does.

use serde_json::{Value, json};

use crate::Mono;
use crate::jobs::wire::Capabilities;
use crate::jobs::{
    EndpointId, EndpointSpec, Hello, JobId, Origin, OwnerId, Registry, Submit, SubscriptionId,
    WaitId,
};

/// The result of one vector.
#[derive(Clone, Debug, PartialEq)]
pub struct VectorResult {
    pub name: String,
    /// Every mismatch, with the step and JSON path where it was found. Empty = passed.
    pub failures: Vec<String>,
}

impl VectorResult {
    /// A vector that could not start: its one failure says why.
    pub fn unusable(name: String, failure: String) -> VectorResult {
        VectorResult {
            name,
            failures: vec![failure],
        }
    }

    /// Whether the vector passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs every vector of a suite file. Errors only when the file itself is unusable.
pub fn run_suite(text: &str) -> Result<Vec<VectorResult>, String> {
    let suite: Value = serde_json::from_str(text).map_err(|e| format!("suite is not JSON: {e}"))?;
    let kind = suite["suite"].as_str().unwrap_or("");
    let vectors = suite["vectors"]
        .as_array()
        .ok_or("suite has no `vectors` array")?;
    match kind {
        "jobs" => Ok(vectors.iter().map(run_jobs_vector).collect()),
        "actors" => Ok(vectors
            .iter()
            .map(crate::actors::vectors::run_vector)
            .collect()),
        "ops" => Ok(crate::ops::vectors::run_suite(&suite)),
        "tools" => Ok(vectors
            .iter()
            .map(crate::tools::vectors::run_vector)
            .collect()),
        "frames" => crate::frames::conformance::run(&suite),
        "models" => Ok(vectors
            .iter()
            .map(crate::model::vectors::run_vector)
            .collect()),
        "agents" => Ok(vectors
            .iter()
            .map(crate::agents::vectors::run_vector)
            .collect()),
        other => Err(format!("unknown suite kind `{other}`")),
    }
}

/// Compares `actual` against the subset `expected`; returns the first mismatch path.
pub fn subset(expected: &Value, actual: &Value, path: &str) -> Result<(), String> {
    match (expected, actual) {
        (Value::String(s), Value::Object(o)) => {
            let t = o.get("type").or_else(|| o.get("output"));
            if t.and_then(Value::as_str) == Some(s.as_str()) {
                Ok(())
            } else {
                Err(format!("{path}: expected `{s}`, got {actual}"))
            }
        }
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let p = format!("{path}.{k}");
                match a.get(k) {
                    Some(av) => subset(ev, av, &p)?,
                    None if ev.is_null() => {}
                    None => return Err(format!("{p}: missing (expected {ev})")),
                }
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Err(format!(
                    "{path}: expected {} items, got {}: {}",
                    e.len(),
                    a.len(),
                    Value::Array(a.clone())
                ));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                subset(ev, av, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (Value::Number(e), Value::Number(a)) if e.as_f64() == a.as_f64() => Ok(()),
        (e, a) if e == a => Ok(()),
        (e, a) => Err(format!("{path}: expected {e}, got {a}")),
    }
}

/// Checks one step against its `expectError`, `expect` (the call's result) and `outputs`,
/// recording each mismatch under `ctx`. Shared by the suites whose steps return
/// `Result<Value, (code, message)>`.
pub(crate) fn check_step(
    ctx: &str,
    step: &Value,
    result: &Result<Value, (String, String)>,
    outputs: Vec<Value>,
    failures: &mut Vec<String>,
) {
    match (result, step.get("expectError")) {
        (Err((code, msg)), Some(want)) => {
            if want.as_str() != Some(code.as_str()) {
                failures.push(format!("{ctx}: expected error {want}, got {code}: {msg}"));
            }
        }
        (Err((code, msg)), None) => failures.push(format!("{ctx}: unexpected error {code}: {msg}")),
        (Ok(got), Some(want)) => failures.push(format!(
            "{ctx}: expected error {want}, call succeeded: {got}"
        )),
        (Ok(got), None) => {
            if let Some(want) = step.get("expect")
                && let Err(e) = subset(want, got, "result")
            {
                failures.push(format!("{ctx}: {e}"));
            }
        }
    }
    if let Some(want) = step.get("outputs")
        && let Err(e) = subset(want, &Value::Array(outputs), "outputs")
    {
        failures.push(format!("{ctx}: {e}"));
    }
}

/// One step of a vector, as [`each_step`] hands it to a suite.
pub(crate) struct Step<'a> {
    /// The step's position in the vector.
    pub(crate) index: usize,
    /// The step's time (`at`, or the previous step's when absent).
    pub(crate) at: u64,
    /// The step's `op` (empty when absent).
    pub(crate) op: &'a str,
    /// The whole step.
    pub(crate) json: &'a Value,
    /// `step {index} ({op})`: what the step's failures are reported under.
    pub(crate) ctx: String,
}

/// The step loop every suite shares: walks the vector's `steps` in order and calls `each` with
/// each one (the suite fires its due timers, applies the op and checks the step). A step's
/// `at` defaults to the previous step's; a time going backwards is a failure that ends the
/// vector.
pub(crate) fn each_step<'a>(
    v: &'a Value,
    failures: &mut Vec<String>,
    mut each: impl FnMut(Step<'a>, &mut Vec<String>),
) {
    let mut last_at = 0u64;
    let steps = v["steps"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    for (index, json) in steps.iter().enumerate() {
        let at = json["at"].as_u64().unwrap_or(last_at);
        if at < last_at {
            failures.push(format!(
                "step {index}: time goes backwards ({at} < {last_at})"
            ));
            break;
        }
        last_at = at;
        let op = json["op"].as_str().unwrap_or("");
        let ctx = format!("step {index} ({op})");
        each(
            Step {
                index,
                at,
                op,
                json,
                ctx,
            },
            failures,
        );
    }
}

/// A vector's name (`<unnamed>` without one).
pub(crate) fn vector_name(v: &Value) -> String {
    v["name"].as_str().unwrap_or("<unnamed>").to_owned()
}

/// Matches the vector's final `expect` (if any) against the state `state` builds.
pub(crate) fn check_final(v: &Value, failures: &mut Vec<String>, state: impl FnOnce() -> Value) {
    if let Some(want) = v.get("expect")
        && let Err(e) = subset(want, &state(), "final")
    {
        failures.push(e);
    }
}

fn run_jobs_vector(v: &Value) -> VectorResult {
    let name = vector_name(v);
    let mut failures = Vec::new();
    let mut reg: Registry<Value> = Registry::default();
    // The time of the host turn a `sameTurn` step left open.
    let mut open_turn: Option<u64> = None;
    each_step(v, &mut failures, |step, failures| {
        let at = Mono::from_ms(step.at);
        if open_turn.is_some_and(|t| t != step.at) {
            failures.push(format!("{}: a host turn does not span time", step.ctx));
        }
        while let Some(d) = reg.poll_timeout().filter(|d| *d <= at) {
            reg.handle_timeout(d);
        }
        let result = apply_jobs_step(&mut reg, at, step.op, step.json);
        // The host's turn ends after the step (held sends go out in batches) unless the step
        // says the next one runs in the same turn.
        open_turn = step.json["sameTurn"]
            .as_bool()
            .unwrap_or(false)
            .then_some(step.at);
        if open_turn.is_none() {
            reg.flush_sends();
        }
        let outputs: Vec<Value> = reg.drain_outputs().map(|o| o.to_json()).collect();
        check_step(&step.ctx, step.json, &result, outputs, failures);
    });
    check_final(v, &mut failures, || jobs_state(&reg));
    VectorResult { name, failures }
}

fn arg<'a>(step: &'a Value, key: &str) -> Result<&'a Value, (String, String)> {
    step.get(key)
        .ok_or_else(|| ("VECTOR".into(), format!("step lacks `{key}`")))
}

fn id_arg(step: &Value, key: &str) -> Result<u64, (String, String)> {
    arg(step, key)?
        .as_u64()
        .ok_or_else(|| ("VECTOR".into(), format!("`{key}` is not an id")))
}

fn str_arg(step: &Value, key: &str, default: &str) -> String {
    step[key].as_str().unwrap_or(default).to_owned()
}

/// Applies one registry op of a vector (shared by suites that drive a registry too).
pub(crate) fn apply_jobs_step(
    reg: &mut Registry<Value>,
    at: Mono,
    op: &str,
    s: &Value,
) -> Result<Value, (String, String)> {
    let err = |e: crate::jobs::JobsError| (e.code().to_owned(), e.to_string());
    Ok(match op {
        "open_endpoint" => {
            let mut spec =
                EndpointSpec::new(str_arg(s, "owner", "app"), str_arg(s, "label", "worker"));
            spec.hello = match &s["hello"] {
                Value::String(h) if h == "skip" => Hello::Skip,
                Value::Object(o) if o.contains_key("declared") => Hello::Declared(
                    serde_json::from_value::<Capabilities>(o["declared"].clone())
                        .map_err(|e| ("VECTOR".to_owned(), e.to_string()))?,
                ),
                _ => Hello::Await {
                    timeout_ms: s["helloTimeoutMs"].as_u64().unwrap_or(1000),
                },
            };
            if let Some(q) = s["quietMs"].as_u64() {
                spec.quiet_ms = q;
            }
            if let Some(m) = s["maxConcurrent"].as_u64() {
                spec.max_concurrent = Some(m as usize);
            }
            if let Some(m) = s["maxMessageBytes"].as_u64() {
                spec.max_message_bytes = m as usize;
            }
            // The transport offers batch frames unless the step says not (as the JS runtime's
            // transports do).
            spec.batch_sends = s["batchSends"].as_bool().unwrap_or(true);
            json!({"endpoint": reg.open_endpoint(at, spec).0})
        }
        "submit" => {
            let mut req = Submit::new(
                str_arg(s, "owner", "agent"),
                EndpointId(id_arg(s, "endpoint")?),
                s.get("payload").cloned().unwrap_or(Value::Null),
            );
            if let Some(o) = s.get("origin") {
                req.origin = serde_json::from_value::<Origin>(o.clone())
                    .map_err(|e| ("VECTOR".to_owned(), e.to_string()))?;
            }
            req.reuse_key = s["reuseKey"].as_str().map(str::to_owned);
            req.wake = s["wake"].as_bool().unwrap_or(false);
            req.note = s["note"].as_bool().unwrap_or(true);
            let r = reg.submit(at, req).map_err(err)?;
            json!({"job": r.job.0, "reused": r.reused})
        }
        "message" => {
            reg.on_message(at, EndpointId(id_arg(s, "endpoint")?), arg(s, "msg")?)
                .map_err(err)?;
            Value::Null
        }
        "cancel" => {
            let st = reg
                .cancel(at, JobId(id_arg(s, "job")?), &str_arg(s, "reason", "test"))
                .map_err(err)?;
            json!(st.as_str())
        }
        "input" => {
            let id = reg
                .send_input(
                    at,
                    JobId(id_arg(s, "job")?),
                    s["inputId"].as_str().map(str::to_owned),
                    s.get("value").cloned().unwrap_or(Value::Null),
                )
                .map_err(err)?;
            json!({"inputId": id})
        }
        "endpoint_closed" => {
            reg.on_endpoint_closed(
                at,
                EndpointId(id_arg(s, "endpoint")?),
                &str_arg(s, "reason", "closed"),
            )
            .map_err(err)?;
            Value::Null
        }
        "terminate_endpoint" => {
            reg.terminate_endpoint(
                at,
                EndpointId(id_arg(s, "endpoint")?),
                &str_arg(s, "reason", "terminated"),
            )
            .map_err(err)?;
            Value::Null
        }
        "wait" => {
            let w = reg
                .wait(at, JobId(id_arg(s, "job")?), s["timeoutMs"].as_u64())
                .map_err(err)?;
            json!({"wait": w.0})
        }
        "cancel_wait" => {
            reg.cancel_wait(WaitId(id_arg(s, "wait")?)).map_err(err)?;
            Value::Null
        }
        "observe" => {
            let sub = reg
                .observe(
                    JobId(id_arg(s, "job")?),
                    s["from"].as_u64(),
                    s["capacity"].as_u64().unwrap_or(64) as usize,
                )
                .map_err(err)?;
            json!({"subscription": sub.0})
        }
        "take" => {
            let d = reg
                .take_deliveries(SubscriptionId(id_arg(s, "subscription")?))
                .map_err(err)?;
            Value::Array(d.iter().map(|d| d.to_json()).collect())
        }
        "unsubscribe" => json!(reg.unsubscribe(SubscriptionId(id_arg(s, "subscription")?))),
        "read_mailbox" => json!(reg.read_mailbox(&OwnerId(str_arg(s, "owner", "agent")))),
        "close_owner" => json!(reg.close_owner(at, &OwnerId(str_arg(s, "owner", "agent")))),
        "advance" => Value::Null,
        "inspect" => {
            let job = JobId(id_arg(s, "job")?);
            reg.job(job)
                .map(|j| j.to_json())
                .ok_or_else(|| err(crate::jobs::JobsError::UnknownJob(job)))?
        }
        other => return Err(("VECTOR".into(), format!("unknown op `{other}`"))),
    })
}

/// The registry's observable state as JSON: jobs with journals, endpoints with logs, mailboxes.
pub fn jobs_state(reg: &Registry<Value>) -> Value {
    let mut jobs = serde_json::Map::new();
    for j in reg.jobs() {
        let mut o = j.to_json();
        o["journal"] = Value::Array(j.journal().iter().map(|e| e.to_json()).collect());
        jobs.insert(j.id.0.to_string(), o);
    }
    let mut endpoints = serde_json::Map::new();
    for e in reg.endpoints() {
        let mut o = e.to_json();
        o["events"] = Value::Array(e.events().iter().map(|e| e.to_json()).collect());
        endpoints.insert(e.id.0.to_string(), o);
    }
    let mut mailboxes = serde_json::Map::new();
    for owner in reg.jobs().map(|j| j.owner.clone()) {
        let notes: Vec<Value> = reg.peek_mailbox(&owner).map(|n| json!(n)).collect();
        mailboxes.insert(owner.0.clone(), Value::Array(notes));
    }
    json!({"jobs": jobs, "endpoints": endpoints, "mailboxes": mailboxes})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The driver reports what a step, a backwards time and the final state contradict (a
    /// runner that checked nothing would pass every vector).
    #[test]
    fn the_step_driver_reports_every_kind_of_mismatch() {
        let suite = json!({"suite": "jobs", "vectors": [
            {"name": "ok", "steps": [
                {"at": 0, "op": "open_endpoint", "hello": "skip", "expect": {"endpoint": 1}}
            ], "expect": {"endpoints": {"1": {"state": "ready"}}}},
            {"name": "wrong", "steps": [
                {"at": 0, "op": "open_endpoint", "hello": "skip", "expect": {"endpoint": 2}},
                {"at": 1, "op": "cancel", "job": 9},
                {"at": 2, "op": "advance", "expectError": "UNKNOWN_JOB"},
                {"at": 3, "op": "submit", "endpoint": 1, "payload": 1, "outputs": []},
                {"at": 1, "op": "advance"},
                {"at": 9, "op": "open_endpoint", "expect": {"endpoint": 1}}
            ], "expect": {"endpoints": {"1": {"state": "closed"}}}}
        ]});
        let r = run_suite(&suite.to_string()).unwrap();
        assert!(r[0].passed(), "{:?}", r[0].failures);
        let f = &r[1].failures;
        assert_eq!(f.len(), 6, "{f:?}");
        assert!(
            f[0].starts_with("step 0 (open_endpoint): result.endpoint"),
            "{f:?}"
        );
        assert!(f[1].starts_with("step 1 (cancel): unexpected error UNKNOWN_JOB"));
        assert!(f[2].starts_with("step 2 (advance): expected error \"UNKNOWN_JOB\""));
        assert!(f[3].starts_with("step 3 (submit): outputs"));
        assert_eq!(f[4], "step 4: time goes backwards (1 < 3)");
        assert!(f[5].starts_with("final.endpoints.1.state"), "{f:?}");
    }
}
