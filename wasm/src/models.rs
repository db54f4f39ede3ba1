//! Bindings of the model providers (`weft_core::model`) for JS: the sans-IO [`ModelCall`]
//! machine of one model step, the configuration resolver and the built-in model's answer.
//! `wasm/js/models.js` only moves bytes: it sends what the machine asks with `fetch`, feeds the
//! answer's head and body chunks back, and arms one timer at `pollTimeout`. Request building,
//! status classification, retries, SSE parsing and argument assembly all happen here, in the
//! core. Records cross the boundary as JSON text; body chunks as bytes.

use serde_json::{Value, json};
use wasm_bindgen::prelude::*;
use weft_core::model::{
    self, CallOutput, CallTimeouts, ChatRequest, ModelChoice, ModelConfig, ModelError, RetryPolicy,
    builtin::BuiltinModel,
};

use crate::js::{coded_error, error, mono, parse_text};

fn parse(what: &str, text: &str) -> Result<Value, JsValue> {
    parse_text(text).map_err(|e| coded_error("INVALID_ARGUMENT", &format!("{what}: {e}")))
}

fn error_json(e: &ModelError) -> Value {
    let mut v = e.to_json();
    v["stepMessage"] = e.step_message().into();
    v
}

fn output_json(o: CallOutput) -> Value {
    match o {
        CallOutput::Send { attempt, request } => {
            let headers: serde_json::Map<String, Value> = request
                .headers
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            json!({"output": "send", "attempt": attempt, "url": request.url,
                "headers": headers, "body": request.body})
        }
        CallOutput::Event(e) => {
            let mut v = serde_json::to_value(&e).expect("stream events serialize");
            v["output"] = "event".into();
            v
        }
        CallOutput::Done(Ok(r)) => json!({"output": "done", "response": r.to_json()}),
        CallOutput::Done(Err(e)) => json!({"output": "done", "error": error_json(&e)}),
    }
}

/// One model step: the request, its retries, the streamed answer and its deadlines.
#[wasm_bindgen]
pub struct ModelCall {
    inner: model::ModelCall,
}

#[wasm_bindgen]
impl ModelCall {
    /// `options`: JSON text `{provider, model, baseUrl?, apiKey?, maxTokens?,
    /// parallelToolCalls?, system?, retry?: {maxAttempts?, baseDelayMs?, maxDelayMs?},
    /// timeouts?: {headMs?, idleMs?}}`; `messages`: the session transcript (JSON text of the
    /// agent's `request.messages`); `tools`: the step's tool declarations (JSON text). Throws
    /// MODEL_INVALID_CONFIG for an unusable configuration. Queues the first `send`.
    #[wasm_bindgen(constructor)]
    pub fn new(now: f64, options: &str, messages: &str, tools: &str) -> Result<ModelCall, JsValue> {
        let o = parse("options", options)?;
        let config = ModelConfig::from_json(&o).map_err(|e| error(&e))?;
        let messages = parse("messages", messages)?;
        let tools = parse("tools", tools)?;
        let empty = Vec::new();
        let chat = ChatRequest::from_transcript(
            o["system"].as_str(),
            messages.as_array().unwrap_or(&empty),
            tools.as_array().unwrap_or(&empty),
        );
        let policy = RetryPolicy::from_json(&o["retry"]);
        let d = CallTimeouts::default();
        let t = &o["timeouts"];
        let timeouts = CallTimeouts {
            head_ms: t["headMs"].as_u64().unwrap_or(d.head_ms),
            idle_ms: t["idleMs"].as_u64().unwrap_or(d.idle_ms),
        };
        Ok(ModelCall {
            inner: model::ModelCall::new(mono(now), &config, &chat, policy, timeouts),
        })
    }

    /// The queued outputs as JSON text of an array, in order: `{output: "send", attempt, url,
    /// headers, body}`, `{output: "event", type, ...}` (`text_delta`, `tool_call_start`,
    /// `tool_call_delta`, `tool_call_end`, `usage`, `finish`), and one `{output: "done",
    /// response}` / `{output: "done", error: {code, message, stepMessage, status?,
    /// retryAfterMs?}}`. `"[]"` when nothing is queued.
    #[wasm_bindgen(js_name = drainJson)]
    pub fn drain_json(&mut self) -> String {
        // Written straight into one buffer: a streamed reply drains once per body chunk, and
        // its events need no `Value` in between.
        let mut out = String::from("[");
        while let Some(o) = self.inner.poll_output() {
            if out.len() > 1 {
                out.push(',');
            }
            match o {
                CallOutput::Event(e) => {
                    let text = serde_json::to_string(&e).expect("stream events serialize");
                    // `{"type":...}` becomes `{"output":"event","type":...}`.
                    out.push_str("{\"output\":\"event\",");
                    out.push_str(&text[1..]);
                }
                other => out.push_str(&output_json(other).to_string()),
            }
        }
        out.push(']');
        out
    }

    /// The head of the answer: its status and `Retry-After` header.
    #[wasm_bindgen(js_name = onHead)]
    pub fn on_head(&mut self, now: f64, status: u16, retry_after: Option<String>) {
        self.inner
            .on_head(mono(now), status, retry_after.as_deref());
    }

    /// Whether the answer is an error whose (bounded) body should be read whole.
    #[wasm_bindgen(js_name = wantsErrorBody)]
    pub fn wants_error_body(&self) -> bool {
        self.inner.wants_error_body()
    }

    /// The body of a non-2xx answer (at most `maxErrorBody()` bytes of it).
    #[wasm_bindgen(js_name = onErrorBody)]
    pub fn on_error_body(&mut self, now: f64, body: &[u8]) {
        self.inner.on_error_body(mono(now), body);
    }

    /// The next chunk of a streamed body.
    #[wasm_bindgen(js_name = onBody)]
    pub fn on_body(&mut self, now: f64, bytes: &[u8]) {
        self.inner.on_body(mono(now), bytes);
    }

    /// The body ended.
    #[wasm_bindgen(js_name = onEnd)]
    pub fn on_end(&mut self, now: f64) {
        self.inner.on_end(mono(now));
    }

    /// The connection failed (before or during the answer).
    #[wasm_bindgen(js_name = onTransportError)]
    pub fn on_transport_error(&mut self, now: f64, message: &str) {
        self.inner.on_transport_error(mono(now), message);
    }

    /// The step was interrupted: `done` with MODEL_ABORTED.
    pub fn abort(&mut self, reason: &str) {
        self.inner.abort(reason);
    }

    /// The next deadline (ms), if any.
    #[wasm_bindgen(js_name = pollTimeout)]
    pub fn poll_timeout(&self) -> Option<f64> {
        self.inner.poll_timeout().map(|t| t.as_ms() as f64)
    }

    /// Time passed: a retry is sent, or a silent model times out.
    #[wasm_bindgen(js_name = handleTimeout)]
    pub fn handle_timeout(&mut self, now: f64) {
        self.inner.handle_timeout(mono(now));
    }

    /// Whether `done` was emitted.
    #[wasm_bindgen(getter, js_name = isDone)]
    pub fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    /// Attempts sent so far.
    #[wasm_bindgen(getter)]
    pub fn attempts(&self) -> u32 {
        self.inner.attempts()
    }
}

/// The most bytes of an error body the host reads before classifying it.
#[wasm_bindgen(js_name = maxErrorBody)]
pub fn max_error_body() -> u32 {
    model::MAX_ERROR_BODY as u32
}

/// Resolves what a user configured (JSON text `{model?: "PROVIDER:NAME", baseUrl?, openaiKey?,
/// anthropicKey?, maxTokens?}`) into the JSON text of a configuration `{provider, model,
/// baseUrl, apiKey?, maxTokens, parallelToolCalls}`, or `null` when no model is configured.
/// Throws MODEL_INVALID_CONFIG.
#[wasm_bindgen(js_name = resolveModelConfig)]
pub fn resolve_model_config(choice: &str) -> Result<String, JsValue> {
    let c = parse("choice", choice)?;
    let choice = ModelChoice::from_json(&c);
    let config = ModelConfig::resolve(&choice).map_err(|e| error(&e))?;
    Ok(match config {
        None => "null".into(),
        Some(c) => json!({"provider": c.provider.as_str(), "model": c.model,
            "baseUrl": c.base_url, "apiKey": c.api_key, "maxTokens": c.max_tokens,
            "parallelToolCalls": c.parallel_tool_calls, "label": c.label()})
        .to_string(),
    })
}

/// The built-in model's answer to a transcript (JSON text of the agent's `request.messages`):
/// it says that no model is configured and how to configure one, and repeats the last input.
#[wasm_bindgen(js_name = builtinAnswer)]
pub fn builtin_answer(messages: &str) -> Result<String, JsValue> {
    let m = parse("messages", messages)?;
    let last = m.as_array().and_then(|a| {
        a.iter().rev().find_map(|m| match m["role"].as_str() {
            Some("task" | "steer") => Some(match &m["input"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
            _ => None,
        })
    });
    Ok(BuiltinModel::answer(last.as_deref()))
}

/// The code hosts show when no model is configured (`MODEL_NOT_CONFIGURED`).
#[wasm_bindgen(js_name = noModelConfigured)]
pub fn no_model_configured() -> String {
    model::NO_MODEL_CONFIGURED.into()
}
