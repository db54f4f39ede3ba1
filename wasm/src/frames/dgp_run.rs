//! The DGP controller's run machine for JS (`wasm/js/dgp-controller.js` is its HTTP/timer
//! loop): [`DgpRun`] delegates every method to [`weft_core::frames::controller::Run`], whose
//! documentation gives the call order; [`DgpBudget`] is a controller's text-service budget,
//! [`DgpBaseUrl`] the core's URL and link rule, and the tool declarations and reports are the
//! core's. Outputs cross as JSON text.

use serde_json::{Value, json};
use wasm_bindgen::prelude::*;
use weft_core::frames::controller::http::{ADAPTER_ERROR, BaseUrl, HttpAnswer, Problem};
use weft_core::frames::controller::{
    Judgment, Output, Run, RunConfig, RunOptions, RunReport, ServiceBudget, tools,
};
use weft_core::frames::types::{AssessmentResult, Resolver};
use weft_core::frames::validate;

use crate::js::{coded_error, parse_text, set};

fn text(v: &Value) -> String {
    v.to_string()
}

/// A controller's text-service budget, shared by its runs.
#[wasm_bindgen]
pub struct DgpBudget(ServiceBudget);

#[wasm_bindgen]
impl DgpBudget {
    /// A budget of `max` requests.
    #[wasm_bindgen(constructor)]
    pub fn new(max: u32) -> DgpBudget {
        DgpBudget(ServiceBudget::new(max))
    }

    /// Requests asked for so far.
    #[wasm_bindgen(getter)]
    pub fn used(&self) -> u32 {
        self.0.used()
    }
}

/// A checked base URL (https anywhere; plain http to loopback unless `allowInsecureHttp`).
#[wasm_bindgen]
pub struct DgpBaseUrl(BaseUrl);

#[wasm_bindgen]
impl DgpBaseUrl {
    /// Checks `base`; a refused one throws `INVALID_ARGUMENT`.
    #[wasm_bindgen(constructor)]
    pub fn new(base: &str, allow_insecure_http: bool) -> Result<DgpBaseUrl, JsValue> {
        BaseUrl::parse(base, allow_insecure_http)
            .map(DgpBaseUrl)
            .map_err(|m| coded_error("INVALID_ARGUMENT", &format!("`baseUrl`: {m}")))
    }

    /// The URL of a server-provided link; one leaving the origin throws `UNTRUSTED_LINK`
    /// (with `.problem`, the event-log form).
    pub fn resolve(&self, link: &str) -> Result<String, JsValue> {
        self.0.resolve(link).map_err(|p| problem_error(&p))
    }
}

fn problem_error(p: &Problem) -> JsValue {
    let err = coded_error(&p.code, &p.detail);
    if let Some(s) = p.status {
        set(&err, "status", s);
    }
    err
}

/// One surface's run (the core's machine; see `weft_core::frames::controller::run`).
#[wasm_bindgen]
pub struct DgpRun(Run);

fn problem_of(json: &str) -> Problem {
    serde_json::from_str::<Value>(json)
        .map(|v| Problem::from_json(&v))
        .unwrap_or_else(|_| Problem::new(0, ADAPTER_ERROR, json))
}

fn strings(v: Vec<String>) -> Vec<String> {
    if v.is_empty() {
        controller_defaults()
    } else {
        v
    }
}

fn controller_defaults() -> Vec<String> {
    weft_core::frames::controller::run::DEFAULT_MODALITIES
        .iter()
        .map(|m| m.to_string())
        .collect()
}

#[wasm_bindgen]
impl DgpRun {
    /// A run of `surfaceId`: `steps`, `speculative`, the modalities of the adapter and the text
    /// service (empty: `text`, `json`) and 32 fresh random bytes (the run's ids).
    #[wasm_bindgen(constructor)]
    pub fn new(
        surface_id: String,
        steps: u32,
        speculative: bool,
        judge_modalities: Vec<String>,
        text_modalities: Vec<String>,
        id_seed: Vec<u8>,
    ) -> Result<DgpRun, JsValue> {
        let seed: [u8; 32] = id_seed
            .try_into()
            .map_err(|_| coded_error("INVALID_ARGUMENT", "the id seed is 32 bytes"))?;
        let mut config = RunConfig::new(surface_id, seed);
        config.options = RunOptions { steps, speculative };
        config.judge_modalities = strings(judge_modalities);
        config.text_modalities = strings(text_modalities);
        Ok(DgpRun(Run::new(config)))
    }

    /// The next output as JSON text, or `undefined`: `{kind: "http", id, method, link, body,
    /// headers, write, timeoutMs}`, `{kind: "judge" | "generate", decisionId, frame, decision,
    /// evidence: {evidence, omittedOptional}}`, `{kind: "event", event}` or `{kind: "done",
    /// report}`.
    #[wasm_bindgen(js_name = pollOutput)]
    pub fn poll_output(&mut self) -> Option<String> {
        let out = match self.0.poll_output()? {
            Output::Http(r) => {
                let headers: serde_json::Map<String, Value> = r
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect();
                json!({
                    "kind": "http", "id": r.id, "method": r.method.as_str(), "link": r.link,
                    "body": r.body.map(|b| String::from_utf8(b).expect("JSON is UTF-8")),
                    "headers": headers, "write": r.write,
                    "timeoutMs": weft_core::frames::controller::http::REQUEST_TIMEOUT_MS,
                })
            }
            Output::Judge(j) => judge_json("judge", &j),
            Output::Generate(j) => judge_json("generate", &j),
            Output::Event(e) => json!({"kind": "event", "event": e.to_json()}),
            Output::Done(r) => json!({"kind": "done", "report": r.to_json()}),
        };
        Some(text(&out))
    }

    /// When `handleTimeout` is due, if a timer is armed.
    #[wasm_bindgen(js_name = pollTimeout)]
    pub fn poll_timeout(&self) -> Option<f64> {
        self.0.poll_timeout().map(|t| t.as_ms() as f64)
    }

    /// The answer to request `id`: its status and body text.
    #[wasm_bindgen(js_name = handleHttp)]
    pub fn handle_http(
        &mut self,
        now: f64,
        id: f64,
        status: u16,
        body: String,
        budget: &mut DgpBudget,
    ) {
        let answer = HttpAnswer::Answered {
            status,
            body: body.into_bytes(),
        };
        self.0.handle_http(
            weft_core::Mono::from_ms(now as u64),
            id as u64,
            answer,
            &mut budget.0,
        );
    }

    /// No usable answer to request `id` (what happened).
    #[wasm_bindgen(js_name = handleHttpFailure)]
    pub fn handle_http_failure(
        &mut self,
        now: f64,
        id: f64,
        detail: String,
        budget: &mut DgpBudget,
    ) {
        self.0.handle_http(
            weft_core::Mono::from_ms(now as u64),
            id as u64,
            HttpAnswer::Failed(detail),
            &mut budget.0,
        );
    }

    /// The adapter's `{result, resolver}` (JSON text); a bad shape stops the run with
    /// `INVALID_MESSAGE`.
    #[wasm_bindgen(js_name = handleJudgment)]
    pub fn handle_judgment(&mut self, now: f64, judgment: &str) {
        let parsed = parse_text::<Value>(judgment)
            .map_err(|e| Problem::new(422, "INVALID_MESSAGE", format!("judgment: {e}")))
            .and_then(|v| {
                let result: AssessmentResult =
                    validate::typed("result", v["result"].clone()).map_err(Problem::from)?;
                let resolver: Resolver =
                    validate::typed("resolver", v["resolver"].clone()).map_err(Problem::from)?;
                Ok(Judgment { result, resolver })
            });
        self.0
            .handle_judgment(weft_core::Mono::from_ms(now as u64), parsed);
    }

    /// The adapter failed: `{code?, detail, status?}` (JSON text; no code: `ADAPTER_ERROR`).
    #[wasm_bindgen(js_name = handleJudgmentFailure)]
    pub fn handle_judgment_failure(&mut self, now: f64, problem: &str) {
        self.0.handle_judgment(
            weft_core::Mono::from_ms(now as u64),
            Err(problem_of(problem)),
        );
    }

    /// The text service's text and the resolver to record (JSON text).
    #[wasm_bindgen(js_name = handleText)]
    pub fn handle_text(&mut self, now: f64, service_text: String, resolver: &str) {
        let resolver = parse_text::<Value>(resolver)
            .map_err(|e| Problem::new(422, "INVALID_MESSAGE", format!("resolver: {e}")))
            .and_then(|v| validate::typed("resolver", v).map_err(Problem::from));
        self.0.handle_text(
            weft_core::Mono::from_ms(now as u64),
            resolver.map(|r| (service_text, r)),
        );
    }

    /// The text service failed: `{code?, detail, status?}` (JSON text).
    #[wasm_bindgen(js_name = handleTextFailure)]
    pub fn handle_text_failure(&mut self, now: f64, problem: &str) {
        self.0.handle_text(
            weft_core::Mono::from_ms(now as u64),
            Err(problem_of(problem)),
        );
    }

    /// The timer of `pollTimeout` is due.
    #[wasm_bindgen(js_name = handleTimeout)]
    pub fn handle_timeout(&mut self, now: f64) {
        self.0.handle_timeout(weft_core::Mono::from_ms(now as u64));
    }

    /// Asks the run to stop at its next safe point.
    #[wasm_bindgen(js_name = handleStop)]
    pub fn handle_stop(&mut self, now: f64) {
        self.0.handle_stop(weft_core::Mono::from_ms(now as u64));
    }
}

fn judge_json(kind: &str, j: &weft_core::frames::controller::JudgeRequest) -> Value {
    json!({
        "kind": kind,
        "decisionId": j.decision_id,
        "frame": j.frame,
        "decision": j.decision(),
        "evidence": {"evidence": j.evidence.evidence, "omittedOptional": j.evidence.omitted_optional},
    })
}

/// The report (JSON text) of a run that never began (a stop while it waited for its surface),
/// or, with `problem` (`{code, detail, status?}` JSON text), of one that failed before its
/// first step.
#[wasm_bindgen(js_name = dgpRunReport)]
pub fn dgp_run_report(surface_id: &str, problem: Option<String>) -> String {
    let r = match problem {
        None => RunReport::never_began(surface_id),
        Some(p) => RunReport::failed(surface_id, problem_of(&p)),
    };
    text(&r.to_json())
}

/// The declarations of `dgp_surfaces` and `dgp_run_surface` (JSON text: `[{name, description,
/// parameters, supportsParallel, safeToCancel}]`).
#[wasm_bindgen(js_name = dgpToolDeclarations)]
pub fn dgp_tool_declarations() -> String {
    let list: Vec<Value> = tools::declarations()
        .iter()
        .map(|d| {
            json!({"name": d.name, "description": d.description, "parameters": d.parameters,
                   "supportsParallel": d.supports_parallel, "safeToCancel": d.safe_to_cancel})
        })
        .collect();
    text(&json!(list))
}

/// The surface and options of a `dgp_run_surface` call (`args` JSON text; `defaults`
/// `steps`/`speculative`): `{surfaceId, steps, speculative}`, or `undefined` without a string
/// `surface_id`.
#[wasm_bindgen(js_name = dgpRunArguments)]
pub fn dgp_run_arguments(args: &str, steps: u32, speculative: bool) -> Option<String> {
    let args: Value = parse_text(args).ok()?;
    let (sid, o) = tools::run_arguments(&args, RunOptions { steps, speculative })?;
    Some(text(
        &json!({"surfaceId": sid, "steps": o.steps, "speculative": o.speculative}),
    ))
}

/// The most steps one `dgp_run_surface` call may take.
#[wasm_bindgen(js_name = dgpMaxSteps)]
pub fn dgp_max_steps() -> u32 {
    tools::MAX_STEPS
}

/// Steps of a run unless asked otherwise.
#[wasm_bindgen(js_name = dgpDefaultSteps)]
pub fn dgp_default_steps() -> u32 {
    weft_core::frames::controller::run::DEFAULT_STEPS
}

/// The JSON value (text) of an answer (`status`, body text), read by the core's rule: a
/// non-2xx status throws the problem it names (`.code`, `.status`), a 2xx body that is not JSON
/// throws `TRANSPORT_ERROR`.
#[wasm_bindgen(js_name = dgpAnswer)]
pub fn dgp_answer(status: u16, body: String) -> Result<String, JsValue> {
    let answer = HttpAnswer::Answered {
        status,
        body: body.into_bytes(),
    };
    weft_core::frames::controller::http::answer_json(answer)
        .map(|v| text(&v))
        .map_err(|p| problem_error(&p))
}

/// The surface-list link of a discovery document (JSON text); a server that does not speak
/// DGP 0.1 throws `INVALID_MESSAGE`.
#[wasm_bindgen(js_name = dgpSurfacesLink)]
pub fn dgp_surfaces_link(manifest: &str) -> Result<String, JsValue> {
    let v: Value = parse_text(manifest).unwrap_or(Value::Null);
    weft_core::frames::controller::http::surfaces_link(&v).map_err(|p| problem_error(&p))
}

/// A transport failure (`TRANSPORT_ERROR`: no usable answer, the outcome is unknown) as the
/// problem JSON a run is fed and a host throws.
#[wasm_bindgen(js_name = dgpTransportProblem)]
pub fn dgp_transport_problem(detail: &str) -> String {
    text(&Problem::transport(detail).to_json())
}

/// The problem JSON of a text request made of a host without a text service
/// (`SERVICE_UNAVAILABLE`).
#[wasm_bindgen(js_name = dgpNoTextService)]
pub fn dgp_no_text_service() -> String {
    text(&Problem::no_text_service().to_json())
}

/// How long a host waits for one answer (ms).
#[wasm_bindgen(js_name = dgpRequestTimeoutMs)]
pub fn dgp_request_timeout_ms() -> f64 {
    weft_core::frames::controller::http::REQUEST_TIMEOUT_MS as f64
}
