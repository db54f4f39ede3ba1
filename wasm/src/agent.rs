//! Bindings of agent sessions. The JS agent (`wasm/js/agent.js`) owns handlers, the model call,
//! abort controllers and timers; every decision (group boundaries, what an interrupt reports,
//! when mail becomes model input) is made by `weft_core::tools::Session`.

use js_sys::Array;
use serde_json::json;
use wasm_bindgen::prelude::*;
use weft_core::jobs::{EndpointId, JobId, Submit};
use weft_core::tools::{
    CallOutcome, CallResult, HandlerFailure, InvocationId, Mail, MailItem, ModelResponse, Session,
    SessionConfig, Settlement, StepId, TaskId, ToolDecl, ToolsError,
};

use crate::jobs::JobRegistry;
use crate::js::{
    Js, coded_error, error, from_js_json, json, mono, ms, object, opt, opt_bool, opt_string,
    parse_text, set,
};

fn from_js(v: &JsValue, what: &str) -> Result<serde_json::Value, JsValue> {
    if v.is_undefined() {
        return Ok(serde_json::Value::Null);
    }
    from_js_json(v).map_err(|e| {
        coded_error(
            "INVALID_ARGUMENT",
            &format!("{what} must be JSON data: {e}"),
        )
    })
}

fn err(e: ToolsError) -> JsValue {
    error(&e)
}

/// Validates tool arguments against a parameters schema with the core's rules (the subset of
/// JSON Schema weft enforces). Returns `{ok, errors}`; a schema weft cannot enforce throws
/// `INVALID_SCHEMA`.
#[wasm_bindgen(js_name = validateToolArguments)]
pub fn validate_tool_arguments(schema: JsValue, args: JsValue) -> Result<JsValue, JsValue> {
    let schema = from_js(&schema, "a schema")?;
    weft_core::tools::schema::check_tool_schema(&schema).map_err(|message| {
        err(ToolsError::InvalidSchema {
            tool: "(validateToolArguments)".into(),
            message,
        })
    })?;
    let errors = weft_core::tools::schema::validate(&schema, &from_js(&args, "arguments")?);
    Ok(json(&json!({"ok": errors.is_empty(), "errors": errors})))
}

/// One agent session, as a JS class. Times are milliseconds on the runtime's clock.
#[wasm_bindgen]
pub struct AgentSession {
    inner: Session<Js>,
}

#[wasm_bindgen]
impl AgentSession {
    /// A new idle session. `options`: `{id, graceMs, maxSteps}`.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> AgentSession {
        let mut config =
            SessionConfig::new(opt_string(&options, "id").unwrap_or_else(|| "agent".into()));
        if let Some(g) = opt(&options, "graceMs").and_then(|v| v.as_f64()) {
            config.interrupt_grace_ms = ms(g);
        }
        if let Some(m) = opt(&options, "maxSteps").and_then(|v| v.as_f64()) {
            config.max_steps_per_turn = m.max(1.0) as u32;
        }
        AgentSession {
            inner: Session::new(config),
        }
    }

    /// The session id (thread and job owner).
    #[wasm_bindgen(getter)]
    pub fn id(&self) -> String {
        self.inner.id().to_owned()
    }

    /// Declares a tool (`{name, description, parameters, supportsParallel, mayStartJob,
    /// safeToCancel}`); returns its handler id.
    #[wasm_bindgen(js_name = registerTool)]
    pub fn register_tool(&mut self, decl: JsValue) -> Result<f64, JsValue> {
        let decl = ToolDecl::from_json(&from_js(&decl, "a tool declaration")?).map_err(err)?;
        self.inner
            .register_tool(decl)
            .map(|h| h.0 as f64)
            .map_err(err)
    }

    /// Removes a tool.
    #[wasm_bindgen(js_name = unregisterTool)]
    pub fn unregister_tool(&mut self, name: &str) -> Result<(), JsValue> {
        self.inner.unregister_tool(name).map_err(err)
    }

    /// The current declarations: `{version, tools: [...]}`.
    pub fn tools(&mut self) -> JsValue {
        json(&self.inner.tools().to_json())
    }

    /// Submits a task; returns its id.
    #[wasm_bindgen(js_name = submitTask)]
    pub fn submit_task(&mut self, now: f64, input: JsValue) -> f64 {
        self.inner.submit_task(mono(now), Js::from_js(input)).0 as f64
    }

    /// Withdraws a queued task.
    #[wasm_bindgen(js_name = cancelTask)]
    pub fn cancel_task(&mut self, task: f64) -> Result<(), JsValue> {
        self.inner.cancel_task(TaskId(task as u64)).map_err(err)
    }

    /// Queues steering input for the running turn.
    pub fn steer(&mut self, now: f64, input: JsValue) -> Result<(), JsValue> {
        self.inner.steer(mono(now), Js::from_js(input)).map_err(err)
    }

    /// The application's explicit choice to wake the agent.
    pub fn wake(&mut self, now: f64, reason: &str) {
        self.inner.wake(mono(now), reason);
    }

    /// A job submitted with `wake` finished.
    #[wasm_bindgen(js_name = jobWake)]
    pub fn job_wake(&mut self, now: f64, job: f64) {
        self.inner.job_wake(mono(now), JobId(job as u64));
    }

    /// Moves this agent's completion notes from the registry's mailbox to the session's.
    #[wasm_bindgen(js_name = takeNotes)]
    pub fn take_notes(&mut self, now: f64, registry: &mut JobRegistry) -> f64 {
        let notes = registry.inner.read_mailbox(self.inner.owner());
        let n = notes.len();
        for note in notes {
            self.inner.deliver_note(mono(now), note);
        }
        n as f64
    }

    /// Queues an observation result for the next turn; returns its mail sequence number.
    #[wasm_bindgen(js_name = postObservation)]
    pub fn post_observation(&mut self, now: f64, source: &str, value: JsValue) -> f64 {
        self.inner
            .post_observation(mono(now), source, Js::from_js(value)) as f64
    }

    /// Sets a standing desire (shown at the next turn start if changed; never a task).
    #[wasm_bindgen(js_name = setStanding)]
    pub fn set_standing(&mut self, key: &str, value: JsValue) {
        self.inner.set_standing(key, Js::from_js(value));
    }

    /// The pending model request's ids (`{turn, step, toolsVersion, messages}`: `messages`
    /// is the transcript length), or undefined.
    #[wasm_bindgen(js_name = modelRequest)]
    pub fn model_request(&self) -> JsValue {
        match self.inner.model_request() {
            Some(r) => object(&[
                ("turn", (r.turn.0 as f64).into()),
                ("step", (r.step.0 as f64).into()),
                ("toolsVersion", (r.tools.version as f64).into()),
                ("messages", (r.messages.len() as f64).into()),
            ]),
            None => JsValue::UNDEFINED,
        }
    }

    /// The tool snapshot of the pending model request (declarations with their handler ids).
    #[wasm_bindgen(js_name = requestTools)]
    pub fn request_tools(&self) -> JsValue {
        match self.inner.model_request() {
            Some(r) => json(&r.tools.to_json()["tools"]),
            None => JsValue::UNDEFINED,
        }
    }

    /// The model answered `step`; the answer as JSON text (`JSON.stringify` of `{text,
    /// calls}`). One string crosses the boundary instead of a walk over JS objects.
    #[wasm_bindgen(js_name = onModelResponseJson)]
    pub fn on_model_response_json(
        &mut self,
        now: f64,
        step: f64,
        text: &str,
    ) -> Result<(), JsValue> {
        let v: serde_json::Value = parse_text(text)
            .map_err(|e| err(ToolsError::InvalidResponse(format!("not JSON: {e}"))))?;
        let r = ModelResponse::from_json(&v).map_err(|m| err(ToolsError::InvalidResponse(m)))?;
        self.inner
            .on_model_response(mono(now), StepId(step as u64), r)
            .map_err(err)
    }

    /// The model step failed.
    #[wasm_bindgen(js_name = onModelError)]
    pub fn on_model_error(&mut self, now: f64, step: f64, message: &str) -> Result<(), JsValue> {
        self.inner
            .on_model_error(mono(now), StepId(step as u64), message)
            .map_err(err)
    }

    /// A handler returned `value`.
    #[wasm_bindgen(js_name = settleValue)]
    pub fn settle_value(
        &mut self,
        now: f64,
        invocation: f64,
        value: JsValue,
    ) -> Result<(), JsValue> {
        self.settle(now, invocation, Settlement::Returned(Js::from_js(value)))
    }

    /// A handler threw.
    #[wasm_bindgen(js_name = settleError)]
    pub fn settle_error(
        &mut self,
        now: f64,
        invocation: f64,
        message: &str,
        code: Option<String>,
    ) -> Result<(), JsValue> {
        self.settle(
            now,
            invocation,
            Settlement::Threw {
                message: message.to_owned(),
                code,
            },
        )
    }

    /// No handler is bound to the call's tool: settled with the core's `UNKNOWN_TOOL`
    /// (`HandlerFailure::UnknownTool`), as every host settles it.
    #[wasm_bindgen(js_name = settleUnknownTool)]
    pub fn settle_unknown_tool(
        &mut self,
        now: f64,
        invocation: f64,
        tool: &str,
    ) -> Result<(), JsValue> {
        self.settle(
            now,
            invocation,
            Settlement::from(HandlerFailure::UnknownTool(tool.to_owned())),
        )
    }

    /// A handler stopped because it was asked to abort.
    #[wasm_bindgen(js_name = settleAborted)]
    pub fn settle_aborted(&mut self, now: f64, invocation: f64) -> Result<(), JsValue> {
        self.settle(now, invocation, Settlement::Aborted)
    }

    fn settle(&mut self, now: f64, invocation: f64, s: Settlement<Js>) -> Result<(), JsValue> {
        self.inner
            .on_call_settled(mono(now), InvocationId(invocation as u64), s)
            .map_err(err)
    }

    /// Submits a job for a running call of a tool declared `mayStartJob` (owner: this agent;
    /// origin: the call). `options`: `{wake, note, reuseKey}`. Returns the job id.
    #[wasm_bindgen(js_name = submitJob)]
    pub fn submit_job(
        &mut self,
        now: f64,
        invocation: f64,
        registry: &mut JobRegistry,
        endpoint: f64,
        payload: JsValue,
        options: JsValue,
    ) -> Result<f64, JsValue> {
        let mut req = Submit::new(
            "set by the session",
            EndpointId(endpoint as u64),
            Js::from_js(payload),
        );
        req.wake = opt_bool(&options, "wake").unwrap_or(false);
        req.note = opt_bool(&options, "note").unwrap_or(true);
        req.reuse_key = opt_string(&options, "reuseKey");
        self.inner
            .submit_job(
                mono(now),
                InvocationId(invocation as u64),
                &mut registry.inner,
                req,
            )
            .map(|s| s.job.0 as f64)
            .map_err(err)
    }

    /// The origin (`{thread, turn, toolCall}`) for a job a running call starts.
    pub fn origin(&self, invocation: f64) -> JsValue {
        self.inner
            .origin(InvocationId(invocation as u64))
            .map(|o| json(&o))
            .unwrap_or(JsValue::UNDEFINED)
    }

    /// Interrupts the running turn; returns `not_running`, `ended`, `stopping` or
    /// `already_interrupting`.
    pub fn interrupt(&mut self, now: f64, reason: &str) -> String {
        self.inner.interrupt(mono(now), reason).as_str().to_owned()
    }

    /// The next deadline (ms), if any.
    #[wasm_bindgen(js_name = pollTimeout)]
    pub fn poll_timeout(&self) -> Option<f64> {
        self.inner.poll_timeout().map(|t| t.as_ms() as f64)
    }

    /// Fires the timers due at `now`.
    #[wasm_bindgen(js_name = handleTimeout)]
    pub fn handle_timeout(&mut self, now: f64) {
        self.inner.handle_timeout(mono(now));
    }

    /// All pending outputs as JSON text (an array; `JSON.parse` it): one string crosses the
    /// boundary per drain, the cheapest form for hot loops.
    #[wasm_bindgen(js_name = drainOutputsJson)]
    pub fn drain_outputs_json(&mut self) -> String {
        let outs: Vec<serde_json::Value> =
            self.inner.drain_outputs().map(|o| o.to_json()).collect();
        serde_json::to_string(&outs).unwrap_or_default()
    }

    /// `idle`, `model_step`, `running_tools` or `interrupted`.
    #[wasm_bindgen(getter)]
    pub fn phase(&self) -> String {
        self.inner.phase().as_str().to_owned()
    }

    /// A summary: phase, queued tasks, calls of the running step, counters.
    pub fn state(&self) -> JsValue {
        let mut v = self.inner.to_json();
        // Mail carries application values: read it with `mailbox()`, not as JSON text.
        v["mailbox"] = json!(self.inner.mailbox().count());
        json(&v)
    }

    /// Unadmitted mail, in arrival order (values are the original JS values).
    pub fn mailbox(&self) -> Array {
        self.inner.mailbox().map(mail_js).collect()
    }

    /// The transcript from message `from` in the cheap form: `[jsonText, patches]`, where
    /// `patches` is a flat list `[index, path, value, ...]` of the application values (JS values
    /// kept by reference) to put back into message `index` at `path` (`value`, `input` or
    /// `result.value`). The JS agent keeps its transcript mirror with it.
    #[wasm_bindgen(js_name = transcriptJson)]
    pub fn transcript_json(&self, from: f64) -> Array {
        let from = ms(from) as usize;
        let patches = Array::new();
        let mut text = String::from("[");
        for (i, m) in self.inner.history().iter().skip(from).enumerate() {
            if i > 0 {
                text.push(',');
            }
            let json = if m.has_values() {
                let stripped = m.map_values(|path, v| {
                    patches.push(&JsValue::from(i as f64));
                    patches.push(&JsValue::from_str(path));
                    patches.push(&v.to_js());
                    serde_json::Value::Null
                });
                serde_json::to_string(&stripped)
            } else {
                serde_json::to_string(m)
            };
            text.push_str(&json.unwrap_or_default());
        }
        text.push(']');
        let result = Array::new();
        result.push(&JsValue::from_str(&text));
        result.push(&patches);
        result
    }

    /// Number of transcript messages.
    #[wasm_bindgen(js_name = transcriptLength)]
    pub fn transcript_length(&self) -> f64 {
        self.inner.history().len() as f64
    }
}

/// A call result as a JS object; a succeeded call's value is the original JS value.
fn call_result_js(r: &CallResult<Js>) -> JsValue {
    match &r.outcome {
        CallOutcome::Succeeded { value } => {
            let stripped = CallResult {
                outcome: CallOutcome::Succeeded { value: Js::Null },
                ..r.clone()
            };
            let o = json(&stripped.to_json());
            set(&o, "value", value.to_js());
            o
        }
        _ => json(&r.to_json()),
    }
}

fn mail_js(m: &Mail<Js>) -> JsValue {
    let base = || {
        object(&[
            ("seq", (m.seq as f64).into()),
            ("at", (m.at.as_ms() as f64).into()),
            ("kind", m.item.kind().into()),
        ])
    };
    match &m.item {
        MailItem::Observation { source, value } => {
            let o = base();
            set(&o, "source", source.as_str());
            set(&o, "value", value.to_js());
            o
        }
        MailItem::LateResult { turn, result } => {
            let o = base();
            set(&o, "turn", turn.0 as f64);
            set(&o, "result", call_result_js(result));
            o
        }
        // No application values inside.
        MailItem::Job(_) | MailItem::LateJob { .. } => json(&m.to_json()),
    }
}
