//! Decision adapters (who judges a decision) and text services (who fills an input node).
//! The controller talks to both through traits, so fixtures, an external HTTP service and a
//! model ([`ModelAdapter`], [`ModelText`]) are interchangeable.

use std::future::Future;
use std::pin::Pin;

use serde_json::{Value, json};
use weft_core::frames::controller::EvidencePack;
use weft_core::frames::fixtures;
use weft_core::frames::model_judge;
use weft_core::frames::types::*;
use weft_core::model::ModelError;

use super::client::{CallError, Client};
use crate::model::ReqwestModel;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Judges decisions. `modalities` are the evidence kinds it really consumes: the controller
/// refuses (`UNSUPPORTED_MODALITY`) to send it a decision whose required evidence it cannot see.
pub trait DecisionAdapter: Send + Sync {
    /// Evidence kinds this adapter consumes (`text`, `json`, `image`, ...).
    fn modalities(&self) -> Vec<String>;
    /// A result for `decision`, and the resolver identity to record.
    fn decide<'a>(
        &'a self,
        frame: &'a Frame,
        decision: &'a Decision,
        evidence: &'a EvidencePack,
    ) -> BoxFuture<'a, Result<(AssessmentResult, Resolver), CallError>>;
}

/// Produces text for input nodes that name a fulfilment service.
pub trait TextService: Send + Sync {
    /// Evidence kinds the service consumes.
    fn modalities(&self) -> Vec<String>;
    /// Text for `decision`'s fulfilment, and the resolver identity to record.
    fn generate<'a>(
        &'a self,
        frame: &'a Frame,
        decision: &'a Decision,
        evidence: &'a EvidencePack,
    ) -> BoxFuture<'a, Result<(String, Resolver), CallError>>;
}

/// Deterministic fixtures reproducing the seed's walkthroughs ([`fixtures::judge`]); not a
/// model, and labelled so.
pub struct FixtureAdapter;

impl DecisionAdapter for FixtureAdapter {
    fn modalities(&self) -> Vec<String> {
        vec!["text".into(), "json".into()]
    }

    fn decide<'a>(
        &'a self,
        frame: &'a Frame,
        d: &'a Decision,
        _evidence: &'a EvidencePack,
    ) -> BoxFuture<'a, Result<(AssessmentResult, Resolver), CallError>> {
        Box::pin(async move { Ok((fixtures::judge(frame, d)?, fixtures::judge_resolver())) })
    }
}

/// Canned texts for the fixture services ([`fixtures::text`]); not model output.
pub struct FixtureText;

impl TextService for FixtureText {
    fn modalities(&self) -> Vec<String> {
        vec!["text".into(), "json".into()]
    }

    fn generate<'a>(
        &'a self,
        _frame: &'a Frame,
        d: &'a Decision,
        _evidence: &'a EvidencePack,
    ) -> BoxFuture<'a, Result<(String, Resolver), CallError>> {
        Box::pin(async move { Ok((fixtures::text(d).to_owned(), fixtures::text_resolver())) })
    }
}

/// An external decision service over HTTP.
///
/// Request: `POST <url>` with `{"dgp": "0.1", "surface_id", "frame_id", "decision": Decision,
/// "evidence": [Evidence...], "omitted_optional_evidence": [ids]}`. Answer:
/// `{"result": AssessmentResult, "resolver": Resolver}`. The result is validated against the
/// decision before it is recorded; evidence is data, never instructions.
pub struct HttpAdapter {
    pub client: Client,
    pub url: String,
    pub modalities: Vec<String>,
}

impl DecisionAdapter for HttpAdapter {
    fn modalities(&self) -> Vec<String> {
        self.modalities.clone()
    }

    fn decide<'a>(
        &'a self,
        frame: &'a Frame,
        d: &'a Decision,
        ev: &'a EvidencePack,
    ) -> BoxFuture<'a, Result<(AssessmentResult, Resolver), CallError>> {
        Box::pin(async move {
            let body = json!({
                "dgp": "0.1", "surface_id": frame.surface_id, "frame_id": frame.frame_id,
                "decision": d, "evidence": ev.evidence, "omitted_optional_evidence": ev.omitted_optional,
            });
            let v = self.client.post(&self.url, &body, &[]).await?;
            let bad =
                |e: String| CallError::Transport(format!("decision service answered badly: {e}"));
            let result: AssessmentResult =
                serde_json::from_value(v["result"].clone()).map_err(|e| bad(e.to_string()))?;
            let resolver: Resolver =
                serde_json::from_value(v["resolver"].clone()).map_err(|e| bad(e.to_string()))?;
            weft_core::frames::validate::check_result_shape(&result)?;
            Ok((result, resolver))
        })
    }
}

/// An external text service over HTTP: `POST <url>` with `{"service_id", "purpose",
/// "output_field", "max_chars", "evidence": [...]}`; answer `{"text": "...", "resolver"?: {...}}`.
pub struct HttpText {
    pub client: Client,
    pub url: String,
}

impl TextService for HttpText {
    fn modalities(&self) -> Vec<String> {
        vec!["text".into(), "json".into()]
    }

    fn generate<'a>(
        &'a self,
        _frame: &'a Frame,
        d: &'a Decision,
        ev: &'a EvidencePack,
    ) -> BoxFuture<'a, Result<(String, Resolver), CallError>> {
        Box::pin(async move {
            let f = d
                .fulfillment
                .as_ref()
                .ok_or_else(|| CallError::Transport("no fulfillment".into()))?;
            let max = d
                .input_schema
                .as_ref()
                .and_then(|s| s["properties"][&f.output_field]["maxLength"].as_u64());
            let body = json!({"service_id": f.service_id, "purpose": f.purpose, "output_field": f.output_field,
                              "max_chars": max, "evidence": ev.evidence});
            let v: Value = self.client.post(&self.url, &body, &[]).await?;
            let text = v["text"].as_str().ok_or_else(|| {
                CallError::Transport("text service answered without `text`".into())
            })?;
            let resolver = serde_json::from_value(v["resolver"].clone()).unwrap_or(Resolver {
                kind: ResolverKind::Llm,
                provider: Some("http-text-service".into()),
                model: None,
                extensions: None,
            });
            Ok((text.to_owned(), resolver))
        })
    }
}

/// A model error as the controller reports it: the model's code (`MODEL_AUTH`,
/// `MODEL_BAD_RESPONSE`, ...) as a problem of the (gateway) model service.
pub fn model_problem(e: ModelError) -> CallError {
    CallError::Problem {
        status: 502,
        code: e.code().to_owned(),
        detail: e.to_string(),
    }
}

/// The text of a model's answer (a model asked for text that selects tools answered nothing).
async fn ask_text(
    model: &ReqwestModel,
    chat: &weft_core::model::ChatRequest,
) -> Result<String, CallError> {
    let r = model.ask(chat, &mut |_| {}).await.map_err(model_problem)?;
    Ok(r.text.unwrap_or_default())
}

/// The evidence kinds a model reads (text and JSON).
fn model_modalities() -> Vec<String> {
    model_judge::MODEL_MODALITIES
        .iter()
        .map(|m| m.to_string())
        .collect()
}

/// A model judges: [`model_judge::judge_request`] asks it, [`model_judge::parse_judgment`]
/// reads and validates its answer (an invalid answer is a coded error, never recorded). It
/// reads text and JSON evidence only; the resolver is `llm` with the provider and model.
pub struct ModelAdapter {
    pub model: ReqwestModel,
}

impl DecisionAdapter for ModelAdapter {
    fn modalities(&self) -> Vec<String> {
        model_modalities()
    }

    fn decide<'a>(
        &'a self,
        frame: &'a Frame,
        d: &'a Decision,
        ev: &'a EvidencePack,
    ) -> BoxFuture<'a, Result<(AssessmentResult, Resolver), CallError>> {
        Box::pin(async move {
            let chat = model_judge::judge_request(frame, d, ev)?;
            let answer = ask_text(&self.model, &chat).await?;
            let result = model_judge::parse_judgment(d, &answer)?;
            Ok((result, model_judge::model_resolver(self.model.config())))
        })
    }
}

/// A model writes the texts of fulfilment services ([`model_judge::text_request`]); its
/// answer is checked by [`model_judge::parse_text`] (empty or over-long: a coded error).
pub struct ModelText {
    pub model: ReqwestModel,
}

impl TextService for ModelText {
    fn modalities(&self) -> Vec<String> {
        model_modalities()
    }

    fn generate<'a>(
        &'a self,
        frame: &'a Frame,
        d: &'a Decision,
        ev: &'a EvidencePack,
    ) -> BoxFuture<'a, Result<(String, Resolver), CallError>> {
        Box::pin(async move {
            let chat = model_judge::text_request(frame, d, ev)?;
            let answer = ask_text(&self.model, &chat).await?;
            let text = model_judge::parse_text(d, &answer)?;
            Ok((text, model_judge::model_resolver(self.model.config())))
        })
    }
}
