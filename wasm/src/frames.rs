//! Bindings of the DGP engine (`weft_core::frames`) for JS: the same engine, rules and records
//! as `weft serve`, driving a declarative app ([`ScriptedApp`]) described as a plain object.
//! Time comes in as wall-clock milliseconds; write batches come out for the caller's store.
//! Records cross the boundary as JSON text (`wasm/js/frames.js` parses and stringifies), so the
//! module carries one serializer (serde_json's) for them instead of a second one per type.

use js_sys::{Array, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use weft_core::Wall;
use weft_core::frames::controller::Step;
use weft_core::frames::types::{AssessmentResult, Decision, Frame, Mode, Resolver};
use weft_core::frames::{
    Done, Engine, EngineConfig, FramesError, Principal, RecordKind, Role, ScriptedApp, Write,
};
use weft_core::frames::{controller, fixtures, validate};

/// The controller's run machine and its companions (module `frames`).
mod dgp_run;

use crate::js::{coded_error, error, object, opt_f64, opt_string, parse_text};

fn text(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).expect("records serialize")
}

fn principal(p: &JsValue) -> Result<Principal, JsValue> {
    let id = opt_string(p, "id")
        .ok_or_else(|| coded_error("UNAUTHENTICATED", "a principal needs an `id`"))?;
    let role = match opt_string(p, "role").as_deref() {
        Some("human") => Role::Human,
        Some("agent") | None => Role::Agent,
        Some(other) => {
            return Err(coded_error(
                "INVALID_MESSAGE",
                &format!("unknown role `{other}`"),
            ));
        }
    };
    Ok(Principal { id, role })
}

/// A DGP engine over a declarative app.
#[wasm_bindgen]
pub struct FramesEngine {
    inner: Engine<ScriptedApp>,
    pending: Vec<Write>,
}

#[wasm_bindgen]
impl FramesEngine {
    /// `app`: a scripted app description (JSON text); `options`: `{frameTtlMs, serviceBudget,
    /// idSeed, maxMessageBytes}`; `records`: what an earlier engine wrote (`[{kind, key, value}]`).
    #[wasm_bindgen(constructor)]
    pub fn new(app: &str, options: JsValue, records: JsValue) -> Result<FramesEngine, JsValue> {
        let app: serde_json::Value =
            parse_text(app).map_err(|e| coded_error("INVALID_MESSAGE", &format!("app: {e}")))?;
        let app = ScriptedApp::from_json(&app).map_err(|e| error(&e))?;
        let mut config = EngineConfig::default();
        if let Some(t) = opt_f64(&options, "frameTtlMs") {
            config.frame_ttl_ms = t as u64;
        }
        if let Some(b) = opt_f64(&options, "serviceBudget") {
            config.service_budget = b as u32;
        }
        if let Some(s) = opt_f64(&options, "idSeed") {
            config.id_seed = s as u64;
        }
        if let Some(m) = opt_f64(&options, "maxMessageBytes") {
            config.max_message_bytes = m as usize;
        }
        let mut recs = Vec::new();
        if records.is_object() {
            for r in Array::from(&records).iter() {
                let kind = opt_string(&r, "kind").and_then(|k| RecordKind::parse(&k));
                let key = opt_string(&r, "key");
                let value = Reflect::get(&r, &"value".into())
                    .ok()
                    .map(|v| Uint8Array::new(&v).to_vec());
                match (kind, key, value) {
                    (Some(k), Some(key), Some(v)) => recs.push((k, key, v)),
                    _ => {
                        return Err(coded_error(
                            "CORRUPT_RECORD",
                            "records are {kind, key, value: Uint8Array}",
                        ));
                    }
                }
            }
        }
        let done = Engine::open(app, config, recs).map_err(|e| error(&e))?;
        let mut pending = Vec::new();
        let inner = hand_off(&mut pending, done);
        Ok(FramesEngine { inner, pending })
    }

    /// The discovery document (JSON).
    pub fn manifest(&self) -> String {
        text(&self.inner.manifest())
    }

    /// Surface summaries (JSON).
    pub fn surfaces(&self) -> String {
        text(&self.inner.surfaces())
    }

    /// The graph template list (JSON).
    pub fn graphs(&self) -> String {
        text(&self.inner.graphs())
    }

    /// The services (JSON).
    pub fn services(&self) -> String {
        text(&self.inner.services())
    }

    /// A new immutable frame of a surface (JSON).
    pub fn frame(
        &mut self,
        now: f64,
        surface_id: String,
        disclosure: Option<String>,
        horizon: Option<String>,
    ) -> Result<String, JsValue> {
        let d = self
            .inner
            .frame_json(
                Wall::from_ms(now as u64),
                &surface_id,
                disclosure.as_deref(),
                horizon.as_deref(),
            )
            .map_err(|e| error(&e))?;
        let bytes = hand_off(&mut self.pending, d);
        Ok(String::from_utf8(bytes).expect("JSON is UTF-8"))
    }

    /// The exact stored frame (JSON).
    #[wasm_bindgen(js_name = storedFrame)]
    pub fn stored_frame(&self, frame_id: String) -> Result<String, JsValue> {
        self.inner
            .stored_frame(&frame_id)
            .map(|f| text(&f))
            .map_err(|e| error(&e))
    }

    /// Records an assessment; `body` is JSON text, parsed strictly (duplicate keys and
    /// non-finite numbers are refused).
    pub fn assess(&mut self, now: f64, who: JsValue, body: &str) -> Result<String, JsValue> {
        let p = principal(&who)?;
        let d = self
            .inner
            .assess_bytes(Wall::from_ms(now as u64), &p, body.as_bytes())
            .map_err(|e| error(&e))?;
        Ok(text(&*hand_off(&mut self.pending, d)))
    }

    /// Commits an assessment under an idempotency key; `body` is JSON text.
    pub fn commit(
        &mut self,
        now: f64,
        who: JsValue,
        key: Option<String>,
        body: &str,
    ) -> Result<String, JsValue> {
        let p = principal(&who)?;
        let d = self
            .inner
            .commit_bytes(
                Wall::from_ms(now as u64),
                &p,
                key.as_deref(),
                body.as_bytes(),
            )
            .map_err(|e| error(&e))?;
        Ok(text(&*hand_off(&mut self.pending, d)))
    }

    /// Changes the shared policy (every earlier frame becomes stale); returns its revision.
    #[wasm_bindgen(js_name = bumpPolicy)]
    pub fn bump_policy(&mut self) -> f64 {
        let d = self.inner.bump_policy();
        hand_off(&mut self.pending, d) as f64
    }

    /// Entries of an app read view, e.g. `bulletin` (JSON).
    pub fn entries(&self, view: String) -> String {
        let list: Vec<serde_json::Value> = self
            .inner
            .entries(&view)
            .iter()
            .map(|e| e.to_json())
            .collect();
        text(&list)
    }

    /// A surface's `{state, revision}`, or `null` (JSON).
    #[wasm_bindgen(js_name = surfaceState)]
    pub fn surface_state(&self, surface_id: String) -> String {
        match self.inner.surface_state(&surface_id) {
            Some((s, rev)) => text(&serde_json::json!({"state": s, "revision": rev})),
            None => "null".into(),
        }
    }

    /// The records written since the last call, in order: `[{kind, key, value}]`. Persist them
    /// before relying on the results that produced them.
    #[wasm_bindgen(js_name = takeWrites)]
    pub fn take_writes(&mut self) -> Array {
        self.pending
            .drain(..)
            .map(|w| {
                let v = Uint8Array::from(&w.value[..]);
                object(&[
                    ("kind", w.kind.as_str().into()),
                    ("key", w.key.into()),
                    ("value", v.into()),
                ])
            })
            .collect()
    }
}

/// The binding's persistence rule: a call's writes join `pending` (the JS host drains them
/// with `takeWrites()` and persists them before relying on the results), and its value is
/// released to JS.
fn hand_off<T>(pending: &mut Vec<Write>, done: Done<T>) -> T {
    let (persist, value) = done.split();
    let (writes, handed) = persist.hand_off();
    pending.extend(writes);
    value.release(handed)
}

/// A JS `Error` with `.code` and the HTTP `.status` a server answers the same problem with
/// (the controller reports local refusals like a server's).
fn ferr(e: &FramesError) -> JsValue {
    let err = error(e);
    crate::js::set(&err, "status", e.http_status());
    err
}

/// A typed DGP record from JSON text; a bad one is `INVALID_MESSAGE` naming `what`.
fn record<T: serde::de::DeserializeOwned>(what: &str, json: &str) -> Result<T, JsValue> {
    let v: serde_json::Value =
        parse_text(json).map_err(|e| ferr(&FramesError::InvalidMessage(format!("{what}: {e}"))))?;
    validate::typed(what, v).map_err(|e| ferr(&e))
}

/// The decision `decision_id` of `frame`, or `DECISION_NOT_OFFERED`.
fn decision<'a>(frame: &'a Frame, decision_id: &str) -> Result<&'a Decision, JsValue> {
    frame.decision(decision_id).ok_or_else(|| {
        ferr(&FramesError::DecisionNotOffered(format!(
            "no decision `{decision_id}`"
        )))
    })
}

/// The controller's modality check on a frame (JSON text): the evidence of `decisionId` an
/// assessor reading `modalities` may receive, or an `UNSUPPORTED_MODALITY` error for required
/// evidence it cannot consume.
#[wasm_bindgen(js_name = evidenceFor)]
pub fn evidence_for(
    frame: &str,
    decision_id: String,
    modalities: Vec<String>,
) -> Result<String, JsValue> {
    let frame: Frame = record("frame", frame)?;
    let d = decision(&frame, &decision_id)?;
    let mods: Vec<&str> = modalities.iter().map(String::as_str).collect();
    let pack = controller::evidence_for(&frame, d, &mods).map_err(|e| ferr(&e))?;
    let ids: Vec<&str> = pack
        .evidence
        .iter()
        .map(|e| e.evidence_id.as_str())
        .collect();
    Ok(text(
        &serde_json::json!({"evidenceIds": ids, "omittedOptional": pack.omitted_optional}),
    ))
}

/// The controller's next move on a frame (JSON text), for a client understanding
/// `supportedFeatures` (default: every feature weft's controller understands):
/// `{"step": "quiescent"}` or `{"step": "assess" | "fulfil" | "input_required", "decisionId"}`.
/// A frame requiring an unknown feature is `CAPABILITY_REQUIRED`.
#[wasm_bindgen(js_name = controllerNextStep)]
pub fn controller_next_step(
    frame: &str,
    supported_features: Option<Vec<String>>,
) -> Result<String, JsValue> {
    let frame: Frame = record("frame", frame)?;
    let supported: Vec<&str> = match &supported_features {
        Some(f) => f.iter().map(String::as_str).collect(),
        None => controller::CLIENT_FEATURES.to_vec(),
    };
    let (step, d) = match controller::next_step(&frame, &supported).map_err(|e| ferr(&e))? {
        Step::Quiescent => return Ok(r#"{"step":"quiescent"}"#.into()),
        Step::Assess(d) => ("assess", d),
        Step::Fulfil(d) => ("fulfil", d),
        Step::InputRequired(d) => ("input_required", d),
    };
    Ok(text(
        &serde_json::json!({"step": step, "decisionId": d.decision_id}),
    ))
}

/// What follows a judgment (the core's [`controller::judge`], as a run uses it): `judgment` is
/// `{"result", "resolver", "assessmentId", "speculative"?}` (JSON text) for decision
/// `decisionId` of `frame`. It is checked like a server checks an assessment and against the
/// decision (`INVALID_CHOICE`, `INVALID_ANSWER`, ...), then: `{"assessment": AssessmentRequest,
/// "after": "commit" | "speculative" | "abstained" | "human_required", "commit": CommitRequest
/// | null}` (a commit request only when an agent may commit it; never for a human-only effect).
#[wasm_bindgen(js_name = controllerJudgment)]
pub fn controller_judgment(
    frame: &str,
    decision_id: String,
    judgment: &str,
) -> Result<String, JsValue> {
    let frame: Frame = record("frame", frame)?;
    let d = decision(&frame, &decision_id)?;
    let j: serde_json::Value = record("judgment", judgment)?;
    let result: AssessmentResult =
        validate::typed("result", j["result"].clone()).map_err(|e| ferr(&e))?;
    let resolver: Resolver =
        validate::typed("resolver", j["resolver"].clone()).map_err(|e| ferr(&e))?;
    let id = j["assessmentId"].as_str().unwrap_or_default().to_owned();
    let mode = if j["speculative"] == true {
        Mode::Speculative
    } else {
        Mode::Live
    };
    let judged = controller::judge(&frame, d, id, mode, resolver, result).map_err(|e| ferr(&e))?;
    Ok(text(&serde_json::json!({
        "assessment": judged.assessment,
        "after": judged.after.as_str(),
        "commit": judged.commit,
    })))
}

/// The result (JSON text) an input decision with a `fulfillment` receives from its service's
/// `text`: `{"status": "answered", "answer": {"value": {output_field: text}}}`, checked against
/// the decision's schema (an over-long text is refused, never truncated).
#[wasm_bindgen(js_name = fulfilmentResult)]
pub fn fulfilment_result(
    frame: &str,
    decision_id: String,
    service_text: String,
) -> Result<String, JsValue> {
    let frame: Frame = record("frame", frame)?;
    let d = decision(&frame, &decision_id)?;
    controller::fulfilment_result(d, service_text)
        .map(|r| text(&r))
        .map_err(|e| ferr(&e))
}

/// The fixture judgment (`weft_core::frames::fixtures::judge`) of `decisionId` on `frame` (JSON
/// text): `{"result": AssessmentResult, "resolver": Resolver}`.
#[wasm_bindgen(js_name = fixtureJudgment)]
pub fn fixture_judgment(frame: &str, decision_id: String) -> Result<String, JsValue> {
    let frame: Frame = record("frame", frame)?;
    let d = decision(&frame, &decision_id)?;
    let result = fixtures::judge(&frame, d).map_err(|e| ferr(&e))?;
    Ok(format!(
        r#"{{"result":{},"resolver":{}}}"#,
        text(&result),
        text(&fixtures::judge_resolver())
    ))
}

/// The fixture text (`weft_core::frames::fixtures::service_text`) of a fulfilment service:
/// `{"text": string, "resolver": Resolver}`.
#[wasm_bindgen(js_name = fixtureText)]
pub fn fixture_text(service_id: &str) -> String {
    format!(
        r#"{{"text":{},"resolver":{}}}"#,
        text(&fixtures::service_text(service_id)),
        text(&fixtures::text_resolver())
    )
}
