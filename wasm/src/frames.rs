//! Bindings of the DGP engine (`weft_core::frames`) for JS: the same engine, rules and records
//! as `weft serve`, driving a declarative app ([`ScriptedApp`]) described as a plain object.
//! Time comes in as wall-clock milliseconds; write batches come out for the caller's store.

use js_sys::{Array, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use weft_core::frames::controller;
use weft_core::frames::types::Frame;
use weft_core::frames::{
    Engine, EngineConfig, FramesError, Principal, RecordKind, Role, ScriptedApp, Write,
};

use crate::js::{coded_error, error, json, object, opt_f64};

fn to_value(v: &JsValue, what: &str) -> Result<serde_json::Value, JsValue> {
    serde_wasm_bindgen::from_value(v.clone())
        .map_err(|e| coded_error("INVALID_MESSAGE", &format!("{what}: {e}")))
}

fn principal(p: &JsValue) -> Result<Principal, JsValue> {
    let id = crate::js::opt_string(p, "id")
        .ok_or_else(|| coded_error("UNAUTHENTICATED", "a principal needs an `id`"))?;
    let role = match crate::js::opt_string(p, "role").as_deref() {
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
    /// `app`: a scripted app description; `options`: `{frameTtlMs, serviceBudget, idSeed,
    /// maxMessageBytes}`; `records`: what an earlier engine wrote (`[{kind, key, value}]`).
    #[wasm_bindgen(constructor)]
    pub fn new(app: JsValue, options: JsValue, records: JsValue) -> Result<FramesEngine, JsValue> {
        let app = ScriptedApp::from_json(&to_value(&app, "app")?).map_err(|e| error(&e))?;
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
                let kind = crate::js::opt_string(&r, "kind").and_then(|k| RecordKind::parse(&k));
                let key = crate::js::opt_string(&r, "key");
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
        Ok(FramesEngine {
            inner: done.value,
            pending: done.writes,
        })
    }

    /// The discovery document.
    pub fn manifest(&self) -> JsValue {
        json(&self.inner.manifest())
    }

    /// Surface summaries.
    pub fn surfaces(&self) -> JsValue {
        json(&self.inner.surfaces())
    }

    /// The graph template list.
    pub fn graphs(&self) -> JsValue {
        json(&self.inner.graphs())
    }

    /// The services.
    pub fn services(&self) -> JsValue {
        json(&self.inner.services())
    }

    /// A new immutable frame of a surface.
    pub fn frame(
        &mut self,
        now: f64,
        surface_id: String,
        disclosure: Option<String>,
        horizon: Option<String>,
    ) -> Result<JsValue, JsValue> {
        let d = self
            .inner
            .frame(
                now as u64,
                &surface_id,
                disclosure.as_deref(),
                horizon.as_deref(),
            )
            .map_err(|e| error(&e))?;
        self.pending.extend(d.writes);
        Ok(json(&d.value))
    }

    /// The exact stored frame.
    #[wasm_bindgen(js_name = storedFrame)]
    pub fn stored_frame(&self, frame_id: String) -> Result<JsValue, JsValue> {
        self.inner
            .stored_frame(&frame_id)
            .map(|f| json(&f))
            .map_err(|e| error(&e))
    }

    /// Records an assessment. `body` is an object, or JSON text (parsed strictly: duplicate
    /// keys and non-finite numbers are refused).
    pub fn assess(&mut self, now: f64, who: JsValue, body: JsValue) -> Result<JsValue, JsValue> {
        let p = principal(&who)?;
        let d = match body.as_string() {
            Some(text) => self.inner.assess_bytes(now as u64, &p, text.as_bytes()),
            None => self
                .inner
                .assess(now as u64, &p, to_value(&body, "assessment")?),
        }
        .map_err(|e| error(&e))?;
        self.pending.extend(d.writes);
        Ok(json(&*d.value))
    }

    /// Commits an assessment under an idempotency key.
    pub fn commit(
        &mut self,
        now: f64,
        who: JsValue,
        key: Option<String>,
        body: JsValue,
    ) -> Result<JsValue, JsValue> {
        let p = principal(&who)?;
        let d = match body.as_string() {
            Some(text) => self
                .inner
                .commit_bytes(now as u64, &p, key.as_deref(), text.as_bytes()),
            None => self
                .inner
                .commit(now as u64, &p, key.as_deref(), to_value(&body, "commit")?),
        }
        .map_err(|e| error(&e))?;
        self.pending.extend(d.writes);
        Ok(json(&*d.value))
    }

    /// Changes the shared policy (every earlier frame becomes stale); returns its revision.
    #[wasm_bindgen(js_name = bumpPolicy)]
    pub fn bump_policy(&mut self) -> f64 {
        let d = self.inner.bump_policy();
        self.pending.extend(d.writes);
        d.value as f64
    }

    /// Entries of an app read view (e.g. `bulletin`).
    pub fn entries(&self, view: String) -> JsValue {
        let list: Vec<serde_json::Value> = self
            .inner
            .entries(&view)
            .iter()
            .map(|e| e.to_json())
            .collect();
        json(&list)
    }

    /// A surface's state and revision.
    #[wasm_bindgen(js_name = surfaceState)]
    pub fn surface_state(&self, surface_id: String) -> JsValue {
        match self.inner.surface_state(&surface_id) {
            Some((s, rev)) => object(&[
                ("state", json(s)),
                ("revision", JsValue::from_f64(rev as f64)),
            ]),
            None => JsValue::NULL,
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

/// The controller's modality check: the evidence of `decisionId` an assessor reading
/// `modalities` may receive, or an `UNSUPPORTED_MODALITY` error for required evidence it
/// cannot consume.
#[wasm_bindgen(js_name = evidenceFor)]
pub fn evidence_for(
    frame: JsValue,
    decision_id: String,
    modalities: Vec<String>,
) -> Result<JsValue, JsValue> {
    let frame: Frame = serde_json::from_value(to_value(&frame, "frame")?)
        .map_err(|e| error(&FramesError::InvalidMessage(format!("frame: {e}"))))?;
    let d = frame.decision(&decision_id).ok_or_else(|| {
        error(&FramesError::DecisionNotOffered(format!(
            "no decision `{decision_id}`"
        )))
    })?;
    let mods: Vec<&str> = modalities.iter().map(String::as_str).collect();
    let pack = controller::evidence_for(&frame, d, &mods).map_err(|e| error(&e))?;
    let ids: Vec<&str> = pack
        .evidence
        .iter()
        .map(|e| e.evidence_id.as_str())
        .collect();
    Ok(object(&[
        ("evidenceIds", json(&ids)),
        ("omittedOptional", json(&pack.omitted_optional)),
    ]))
}
