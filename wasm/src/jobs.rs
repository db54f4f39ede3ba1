//! Bindings of the job registry. The JS runtime (`wasm/js/runtime.js`) owns the transports and
//! timers; every decision is made by `weft_core::jobs::Registry`.

use js_sys::Array;
use wasm_bindgen::prelude::*;
use weft_core::jobs::wire::{Capabilities, Reply, Violation, WireRequest};
use weft_core::jobs::{
    CancelEvidence, Delivery, EndpointId, EndpointSpec, EventKind, Hello, InputRejector, Job,
    JobEvent, JobId, JobsError, Origin, Outcome, Output, OwnerId, Registry, RegistryConfig, Submit,
    SubscriptionId, WaitEnd, WaitId,
};

use crate::js::{Js, array, error, json, object, opt, opt_bool, opt_f64, opt_string, set};

fn ms(now: f64) -> u64 {
    if now.is_finite() && now > 0.0 {
        now as u64
    } else {
        0
    }
}

/// The portable job registry, as a JS class. Times are milliseconds on a monotonic clock the
/// caller chooses (the JS runtime uses `performance.now()`).
#[wasm_bindgen]
pub struct JobRegistry {
    inner: Registry<Js>,
}

impl Default for JobRegistry {
    fn default() -> Self {
        Self::new(None)
    }
}

#[wasm_bindgen]
impl JobRegistry {
    /// A new registry; job ids start at `firstJobId` (default 1).
    #[wasm_bindgen(constructor)]
    pub fn new(first_job_id: Option<f64>) -> JobRegistry {
        JobRegistry {
            inner: Registry::new(RegistryConfig {
                first_job_id: first_job_id.map(ms).unwrap_or(1).max(1),
            }),
        }
    }

    /// Registers an endpoint. `spec`: `{owner, label, hello: "await"|"skip"|{declared:caps},
    /// helloTimeoutMs, quietMs, maxConcurrent, maxMessageBytes}`.
    #[wasm_bindgen(js_name = openEndpoint)]
    pub fn open_endpoint(&mut self, now: f64, spec: JsValue) -> Result<f64, JsValue> {
        let mut s = EndpointSpec::new(
            opt_string(&spec, "owner").unwrap_or_else(|| "app".into()),
            opt_string(&spec, "label").unwrap_or_else(|| "worker".into()),
        );
        s.hello = match opt(&spec, "hello") {
            Some(h) if h.as_string().as_deref() == Some("skip") => Hello::Skip,
            Some(h) if h.as_bool() == Some(false) => Hello::Skip,
            Some(h) if h.is_object() => {
                let declared = opt(&h, "declared").unwrap_or(h);
                Hello::Declared(Capabilities {
                    input: opt_bool(&declared, "input").unwrap_or(false),
                    cancel_ack: opt_bool(&declared, "cancelAck").unwrap_or(false),
                    error_code: opt_bool(&declared, "errorCode").unwrap_or(false),
                })
            }
            Some(h) if h.as_string().as_deref() != Some("await") && h.as_bool() != Some(true) => {
                return Err(crate::js::coded_error(
                    "INVALID_ARGUMENT",
                    "hello must be \"await\", \"skip\" or {declared: {input, cancelAck, errorCode}}",
                ));
            }
            _ => Hello::Await {
                timeout_ms: opt_f64(&spec, "helloTimeoutMs").map(ms).unwrap_or(1000),
            },
        };
        if let Some(q) = opt_f64(&spec, "quietMs") {
            s.quiet_ms = ms(q);
        }
        if let Some(m) = opt_f64(&spec, "maxConcurrent") {
            if m < 1.0 {
                return Err(crate::js::coded_error(
                    "INVALID_ARGUMENT",
                    "maxConcurrent must be at least 1",
                ));
            }
            s.max_concurrent = Some(m as usize);
        }
        if let Some(m) = opt_f64(&spec, "maxMessageBytes") {
            s.max_message_bytes = m as usize;
        }
        Ok(self.inner.open_endpoint(ms(now), s).0 as f64)
    }

    /// A message from the endpoint's worker, passed through untouched.
    #[wasm_bindgen(js_name = onMessage)]
    pub fn on_message(&mut self, now: f64, endpoint: f64, msg: JsValue) -> Result<(), JsValue> {
        self.inner
            .on_message(ms(now), EndpointId(endpoint as u64), &Js(msg))
            .map_err(|e| error(&e))
    }

    /// A message the transport could not decode (e.g. `messageerror`).
    #[wasm_bindgen(js_name = onUndecodable)]
    pub fn on_undecodable(&mut self, now: f64, endpoint: f64, detail: &str) -> Result<(), JsValue> {
        self.inner
            .on_undecodable(ms(now), EndpointId(endpoint as u64), detail)
            .map_err(|e| error(&e))
    }

    /// The worker went away on its own (threw, exited, disconnected).
    #[wasm_bindgen(js_name = onEndpointClosed)]
    pub fn on_endpoint_closed(
        &mut self,
        now: f64,
        endpoint: f64,
        reason: &str,
    ) -> Result<(), JsValue> {
        self.inner
            .on_endpoint_closed(ms(now), EndpointId(endpoint as u64), reason)
            .map_err(|e| error(&e))
    }

    /// Terminates the endpoint (emits a `terminate` output; running jobs become `lost`).
    #[wasm_bindgen(js_name = terminateEndpoint)]
    pub fn terminate_endpoint(
        &mut self,
        now: f64,
        endpoint: f64,
        reason: &str,
    ) -> Result<(), JsValue> {
        self.inner
            .terminate_endpoint(ms(now), EndpointId(endpoint as u64), reason)
            .map_err(|e| error(&e))
    }

    /// Submits a job. `opts`: `{owner, origin: {thread, turn, toolCall}, reuseKey, note, wake}`.
    /// Returns `{job, reused}`.
    pub fn submit(
        &mut self,
        now: f64,
        endpoint: f64,
        payload: JsValue,
        opts: JsValue,
    ) -> Result<JsValue, JsValue> {
        let mut req = Submit::new(
            opt_string(&opts, "owner").unwrap_or_else(|| "app".into()),
            EndpointId(endpoint as u64),
            Js(payload),
        );
        if let Some(o) = opt(&opts, "origin") {
            req.origin = Origin {
                thread: opt_string(&o, "thread"),
                turn: opt_string(&o, "turn"),
                tool_call: opt_string(&o, "toolCall"),
            };
        }
        req.reuse_key = opt_string(&opts, "reuseKey");
        req.note = opt_bool(&opts, "note").unwrap_or(true);
        req.wake = opt_bool(&opts, "wake").unwrap_or(false);
        let r = self.inner.submit(ms(now), req).map_err(|e| error(&e))?;
        Ok(object(&[
            ("job", (r.job.0 as f64).into()),
            ("reused", r.reused.into()),
        ]))
    }

    /// Asks the job's execution to stop; returns the status name.
    pub fn cancel(&mut self, now: f64, job: f64, reason: &str) -> Result<String, JsValue> {
        self.inner
            .cancel(ms(now), JobId(job as u64), reason)
            .map(|s| s.as_str().to_owned())
            .map_err(|e| error(&e))
    }

    /// Delivers structured input; returns the input id.
    #[wasm_bindgen(js_name = sendInput)]
    pub fn send_input(
        &mut self,
        now: f64,
        job: f64,
        value: JsValue,
        input_id: Option<String>,
    ) -> Result<String, JsValue> {
        self.inner
            .send_input(ms(now), JobId(job as u64), input_id, Js(value))
            .map_err(|e| error(&e))
    }

    /// Starts a wait; ends with a `wait_settled` output.
    pub fn wait(&mut self, now: f64, job: f64, timeout_ms: Option<f64>) -> Result<f64, JsValue> {
        self.inner
            .wait(ms(now), JobId(job as u64), timeout_ms.map(ms))
            .map(|w| w.0 as f64)
            .map_err(|e| error(&e))
    }

    /// Cancels a wait (the job keeps running).
    #[wasm_bindgen(js_name = cancelWait)]
    pub fn cancel_wait(&mut self, wait: f64) -> Result<(), JsValue> {
        self.inner
            .cancel_wait(WaitId(wait as u64))
            .map_err(|e| error(&e))
    }

    /// Subscribes to a job's journal (`from`: replay from that sequence number).
    pub fn observe(&mut self, job: f64, from: Option<f64>, capacity: f64) -> Result<f64, JsValue> {
        self.inner
            .observe(JobId(job as u64), from.map(ms), capacity as usize)
            .map(|s| s.0 as f64)
            .map_err(|e| error(&e))
    }

    /// Takes a subscription's queued deliveries (events and `{type:"missed"}` ranges).
    #[wasm_bindgen(js_name = takeDeliveries)]
    pub fn take_deliveries(&mut self, sub: f64) -> Result<Array, JsValue> {
        let d = self
            .inner
            .take_deliveries(SubscriptionId(sub as u64))
            .map_err(|e| error(&e))?;
        Ok(array(d.iter().map(|d| match d {
            Delivery::Event(e) => event_js(e),
            Delivery::Missed { job, from, to } => object(&[
                ("type", "missed".into()),
                ("job", (job.0 as f64).into()),
                ("from", (*from as f64).into()),
                ("to", (*to as f64).into()),
            ]),
        })))
    }

    /// Stops an observation.
    pub fn unsubscribe(&mut self, sub: f64) -> bool {
        self.inner.unsubscribe(SubscriptionId(sub as u64))
    }

    /// Takes the owner's unread completion notes.
    #[wasm_bindgen(js_name = readMailbox)]
    pub fn read_mailbox(&mut self, owner: &str) -> JsValue {
        json(&self.inner.read_mailbox(&OwnerId::new(owner)))
    }

    /// Number of unread notes of the owner.
    #[wasm_bindgen(js_name = mailboxLength)]
    pub fn mailbox_length(&self, owner: &str) -> f64 {
        self.inner.peek_mailbox(&OwnerId::new(owner)).count() as f64
    }

    /// Disposes what the owner owns; returns the report.
    #[wasm_bindgen(js_name = closeOwner)]
    pub fn close_owner(&mut self, now: f64, owner: &str) -> JsValue {
        json(&self.inner.close_owner(ms(now), &OwnerId::new(owner)))
    }

    /// The next deadline (ms), if any.
    #[wasm_bindgen(js_name = pollTimeout)]
    pub fn poll_timeout(&self) -> Option<f64> {
        self.inner.poll_timeout().map(|t| t as f64)
    }

    /// Fires the timers due at `now`.
    #[wasm_bindgen(js_name = handleTimeout)]
    pub fn handle_timeout(&mut self, now: f64) {
        self.inner.handle_timeout(ms(now));
    }

    /// All pending outputs, as JS objects (`{output: "send" | "terminate" | ...}`).
    #[wasm_bindgen(js_name = drainOutputs)]
    pub fn drain_outputs(&mut self) -> Array {
        let out = Array::new();
        for o in self.inner.drain_outputs() {
            out.push(&output_js(o));
        }
        out
    }

    /// A job summary (`undefined` when unknown).
    pub fn job(&self, job: f64) -> JsValue {
        self.inner
            .job(JobId(job as u64))
            .map(job_js)
            .unwrap_or(JsValue::UNDEFINED)
    }

    /// The job's journal from sequence number `from` (default 1).
    pub fn journal(&self, job: f64, from: Option<f64>) -> Result<Array, JsValue> {
        let j = self
            .inner
            .job(JobId(job as u64))
            .ok_or_else(|| error(&JobsError::UnknownJob(JobId(job as u64))))?;
        let from = from.map(ms).unwrap_or(1);
        Ok(array(
            j.journal().iter().filter(|e| e.seq >= from).map(event_js),
        ))
    }

    /// The job's journal as JSON text (values via JSON.stringify), for export.
    #[wasm_bindgen(js_name = journalJson)]
    pub fn journal_json(&self, job: f64) -> Result<String, JsValue> {
        let j = self
            .inner
            .job(JobId(job as u64))
            .ok_or_else(|| error(&JobsError::UnknownJob(JobId(job as u64))))?;
        let v: Vec<_> = j.journal().iter().map(|e| e.to_json()).collect();
        Ok(serde_json::to_string(&v).expect("json"))
    }

    /// Summaries of the retained jobs, optionally of one owner.
    pub fn jobs(&self, owner: Option<String>) -> Array {
        match owner {
            Some(o) => {
                let o = OwnerId::new(o);
                array(self.inner.jobs_of(&o).map(job_js))
            }
            None => array(self.inner.jobs().map(job_js)),
        }
    }

    /// An endpoint's summary with its log (`undefined` when unknown).
    pub fn endpoint(&self, endpoint: f64) -> JsValue {
        match self.inner.endpoint(EndpointId(endpoint as u64)) {
            Some(e) => {
                let mut v = e.to_json();
                v["events"] = e.events().iter().map(|e| e.to_json()).collect();
                json(&v)
            }
            None => JsValue::UNDEFINED,
        }
    }

    /// Journal events recorded since creation (for benchmarks).
    #[wasm_bindgen(js_name = eventsRecorded)]
    pub fn events_recorded(&self) -> f64 {
        self.inner.events_recorded() as f64
    }
}

fn caps_js(c: &Capabilities) -> JsValue {
    object(&[
        ("input", c.input.into()),
        ("cancelAck", c.cancel_ack.into()),
        ("errorCode", c.error_code.into()),
    ])
}

fn origin_js(o: &Origin) -> JsValue {
    json(o)
}

/// The outcome as `{outcome, value | message, code, started | evidence, quietMs | reason}`.
pub fn outcome_js(o: &Outcome<Js>) -> JsValue {
    match o {
        Outcome::Succeeded { value } => {
            object(&[("outcome", "succeeded".into()), ("value", value.0.clone())])
        }
        Outcome::Failed {
            message,
            code,
            started,
        } => object(&[
            ("outcome", "failed".into()),
            ("message", message.as_str().into()),
            (
                "code",
                code.as_deref()
                    .map(JsValue::from_str)
                    .unwrap_or(JsValue::NULL),
            ),
            ("started", (*started).into()),
        ]),
        Outcome::Cancelled { evidence } => {
            let o = object(&[
                ("outcome", "cancelled".into()),
                ("evidence", evidence.as_str().into()),
            ]);
            if let CancelEvidence::Quiet { quiet_ms } = evidence {
                set(&o, "quietMs", *quiet_ms as f64);
            }
            o
        }
        Outcome::Lost { reason } => object(&[
            ("outcome", "lost".into()),
            ("reason", reason.as_str().into()),
        ]),
    }
}

fn job_js(j: &Job<Js>) -> JsValue {
    object(&[
        ("job", (j.id.0 as f64).into()),
        ("owner", j.owner.0.as_str().into()),
        ("origin", origin_js(&j.origin)),
        ("endpoint", (j.endpoint.0 as f64).into()),
        ("state", j.state.as_str().into()),
        (
            "wireId",
            j.wire_id
                .map(|w| JsValue::from(w as f64))
                .unwrap_or(JsValue::NULL),
        ),
        (
            "capabilities",
            j.capabilities
                .as_ref()
                .map(caps_js)
                .unwrap_or(JsValue::NULL),
        ),
        ("cancelRequested", j.cancel_requested_at.is_some().into()),
        (
            "outcome",
            j.outcome().map(outcome_js).unwrap_or(JsValue::NULL),
        ),
        ("events", (j.journal().len() as f64).into()),
    ])
}

fn violation_js(v: &Violation) -> JsValue {
    let o = json(v);
    set(&o, "message", v.describe());
    o
}

fn reply_js(r: &Reply<Js>) -> JsValue {
    let o = object(&[("type", r.kind().into())]);
    if let Some(id) = r.id() {
        set(&o, "id", id as f64);
    }
    match r {
        Reply::Hello {
            protocol,
            capabilities,
        } => {
            set(
                &o,
                "protocol",
                protocol
                    .as_deref()
                    .map(JsValue::from_str)
                    .unwrap_or(JsValue::NULL),
            );
            set(&o, "capabilities", caps_js(capabilities));
        }
        Reply::Partial { value, .. }
        | Reply::Progress { value, .. }
        | Reply::Done { value, .. } => {
            set(&o, "value", value.0.clone());
        }
        Reply::Error { message, code, .. } => {
            set(&o, "message", message.as_str());
            if let Some(c) = code {
                set(&o, "code", c.as_str());
            }
        }
        Reply::Cancelled { .. } => {}
        Reply::InputApplied { input_id, .. } => set(&o, "inputId", input_id.as_str()),
        Reply::InputRejected {
            input_id, message, ..
        } => {
            set(&o, "inputId", input_id.as_str());
            set(&o, "message", message.as_str());
        }
    }
    o
}

/// A journal event as a JS object; values are the original JS values.
pub fn event_js(e: &JobEvent<Js>) -> JsValue {
    let o = object(&[
        ("job", (e.job.0 as f64).into()),
        ("seq", (e.seq as f64).into()),
        ("at", (e.at as f64).into()),
        ("source", e.source.label().into()),
        ("type", e.kind.name().into()),
    ]);
    match &e.kind {
        EventKind::Submitted { payload, reuse_key } => {
            set(&o, "payload", payload.0.clone());
            if let Some(k) = reuse_key {
                set(&o, "reuseKey", k.as_str());
            }
        }
        EventKind::Started {
            wire_id,
            capabilities,
        } => {
            set(&o, "wireId", *wire_id as f64);
            set(&o, "capabilities", caps_js(capabilities));
        }
        EventKind::Progress { value } | EventKind::Partial { value } => {
            set(&o, "value", value.0.clone())
        }
        EventKind::InputDelivered { input_id } | EventKind::InputApplied { input_id } => {
            set(&o, "inputId", input_id.as_str())
        }
        EventKind::InputRejected {
            input_id,
            by,
            reason,
        } => {
            set(&o, "inputId", input_id.as_str());
            set(
                &o,
                "by",
                match by {
                    InputRejector::Registry => "registry",
                    InputRejector::Worker => "worker",
                },
            );
            set(&o, "reason", reason.as_str());
        }
        EventKind::CancelRequested { reason } | EventKind::Terminated { reason } => {
            set(&o, "reason", reason.as_str())
        }
        EventKind::CancelAcknowledged => {}
        EventKind::NoAcknowledgement { quiet_ms } => {
            set(&o, "quietMs", *quiet_ms as f64);
            set(
                &o,
                "note",
                "no acknowledgement available: the worker does not announce cancelAck",
            );
        }
        EventKind::ProtocolError { violation } => {
            set(&o, "violation", violation_js(violation));
            set(&o, "message", violation.describe());
        }
        EventKind::Finished { outcome } => {
            let oc = outcome_js(outcome);
            js_sys::Object::assign(
                o.unchecked_ref::<js_sys::Object>(),
                oc.unchecked_ref::<js_sys::Object>(),
            );
        }
        EventKind::LateEvidence { reply } => set(&o, "reply", reply_js(reply)),
    }
    o
}

fn request_js(r: WireRequest<Js>) -> JsValue {
    match r {
        WireRequest::Run { id, payload } => object(&[
            ("id", (id as f64).into()),
            ("type", "run".into()),
            ("payload", payload.0),
        ]),
        WireRequest::Cancel { id } => {
            object(&[("id", (id as f64).into()), ("type", "cancel".into())])
        }
        WireRequest::Input {
            id,
            input_id,
            value,
        } => object(&[
            ("id", (id as f64).into()),
            ("type", "input".into()),
            ("inputId", input_id.into()),
            ("value", value.0),
        ]),
    }
}

fn output_js(o: Output<Js>) -> JsValue {
    match o {
        Output::Send { endpoint, request } => object(&[
            ("output", "send".into()),
            ("endpoint", (endpoint.0 as f64).into()),
            ("message", request_js(request)),
        ]),
        Output::Terminate { endpoint } => object(&[
            ("output", "terminate".into()),
            ("endpoint", (endpoint.0 as f64).into()),
        ]),
        Output::WaitSettled { wait, job, end } => {
            let o = object(&[
                ("output", "wait_settled".into()),
                ("wait", (wait.0 as f64).into()),
                ("job", (job.0 as f64).into()),
                ("end", end.as_str().into()),
            ]);
            if let WaitEnd::Finished(k) = end {
                set(&o, "outcome", k.as_str());
            }
            o
        }
        Output::Observed { subscription } => object(&[
            ("output", "observed".into()),
            ("subscription", (subscription.0 as f64).into()),
        ]),
        Output::JobFinished { job, outcome } => object(&[
            ("output", "job_finished".into()),
            ("job", (job.0 as f64).into()),
            ("outcome", outcome.as_str().into()),
        ]),
        Output::NoteQueued { owner, job } => object(&[
            ("output", "note_queued".into()),
            ("owner", owner.0.into()),
            ("job", (job.0 as f64).into()),
        ]),
        Output::Wake { owner, job } => object(&[
            ("output", "wake".into()),
            ("owner", owner.0.into()),
            ("job", (job.0 as f64).into()),
        ]),
    }
}
