//! The rules of a controller runtime (the client side of DGP): which decision to take next,
//! what evidence an adapter may see, and when to stop. Hosts do the I/O (`weft agent`).

use serde_json::Value;

use super::FramesError;
use super::features;
use super::types::*;

/// Features a weft controller understands.
pub const CLIENT_FEATURES: &[&str] = features::SUPPORTED;

/// What an adapter receives: the evidence it can consume, and the optional evidence it could
/// not (recorded, never silently dropped from provenance).
#[derive(Clone, Debug, PartialEq)]
pub struct EvidencePack {
    pub evidence: Vec<Evidence>,
    pub omitted_optional: Vec<String>,
}

/// Selects a decision's evidence for an assessor that consumes `modalities` (evidence kinds
/// such as `text`, `json`, `image`). Required evidence of another kind is
/// `UNSUPPORTED_MODALITY`: the image stays in the record, and no caption stands in for it.
pub fn evidence_for(
    frame: &Frame,
    decision: &Decision,
    modalities: &[&str],
) -> Result<EvidencePack, FramesError> {
    let mut pack = EvidencePack {
        evidence: vec![],
        omitted_optional: vec![],
    };
    for id in &decision.evidence_ids {
        let e = frame
            .observations
            .iter()
            .find(|e| &e.evidence_id == id)
            .ok_or_else(|| {
                FramesError::InvalidMessage(format!("decision cites unknown evidence `{id}`"))
            })?;
        if modalities.contains(&e.kind.as_str()) {
            pack.evidence.push(e.clone());
        } else if e.required {
            return Err(FramesError::UnsupportedModality(format!(
                "required {} evidence `{id}` cannot be consumed by this assessor (it reads {}); \
                 use a capable assessor or an approved transformation",
                e.kind.as_str(),
                modalities.join(", ")
            )));
        } else {
            pack.omitted_optional.push(id.clone());
        }
    }
    Ok(pack)
}

/// The controller's next move on a frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Step<'a> {
    /// No automatic decision: the loop is done (quiescence is success).
    Quiescent,
    /// Ask the decision adapter to judge this decision.
    Assess(&'a Decision),
    /// Obtain the value of this input decision from its fulfilment service.
    Fulfil(&'a Decision),
    /// An input without fulfilment: a human (or another producer) must supply it.
    InputRequired(&'a Decision),
}

/// The first automatic decision decides the step; optional (`on_request`) interactions are
/// never taken just because they are offered. A frame needing unknown features is refused.
pub fn next_step<'a>(frame: &'a Frame, supported: &[&str]) -> Result<Step<'a>, FramesError> {
    let missing = features::missing(&frame.required_features, supported);
    if !missing.is_empty() {
        return Err(FramesError::CapabilityRequired(format!(
            "frame requires {}",
            missing.join(", ")
        )));
    }
    let Some(d) = frame
        .decisions
        .iter()
        .find(|d| d.dispatch == Dispatch::Automatic)
    else {
        return Ok(Step::Quiescent);
    };
    Ok(match (d.kind, &d.fulfillment) {
        (DecisionKind::Input, Some(_)) => Step::Fulfil(d),
        (DecisionKind::Input, None) => Step::InputRequired(d),
        _ => Step::Assess(d),
    })
}

/// What to do with a recorded judgment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterJudgment {
    /// Commit it.
    Commit,
    /// Stop: speculative judgments are recorded, never committed.
    Speculative,
    /// Stop: the resolver abstained.
    Abstained,
    /// Stop: the chosen effect requires an authenticated human, whatever the model says.
    HumanRequired,
}

/// Decides whether a judgment of `decision` is committed by an agent.
pub fn after_judgment(decision: &Decision, result: &AssessmentResult, mode: Mode) -> AfterJudgment {
    if mode == Mode::Speculative {
        return AfterJudgment::Speculative;
    }
    let Some(answer) = result
        .answer
        .as_ref()
        .filter(|_| result.status == ResultStatus::Answered)
    else {
        return AfterJudgment::Abstained;
    };
    let effect = match answer {
        Answer::Choice(c) => decision.option(&c.choice).map(|o| &o.effect),
        _ => decision.effect.as_ref(),
    };
    if effect.is_some_and(|e| e.required_actor == RequiredActor::Human) {
        AfterJudgment::HumanRequired
    } else {
        AfterJudgment::Commit
    }
}

/// An assessment request for `decision` of `frame`.
pub fn assessment_request(
    frame: &Frame,
    decision: &Decision,
    assessment_id: String,
    mode: Mode,
    resolver: Resolver,
    result: AssessmentResult,
) -> AssessmentRequest {
    AssessmentRequest {
        dgp: Dgp,
        assessment_id,
        frame_id: frame.frame_id.clone(),
        decision_id: decision.decision_id.clone(),
        mode,
        resolver,
        result,
        assumptions: None,
        required_features: None,
        extensions: None,
    }
}

/// The commit request of a recorded assessment.
pub fn commit_request(a: &AssessmentRequest) -> CommitRequest {
    CommitRequest {
        dgp: Dgp,
        frame_id: a.frame_id.clone(),
        decision_id: a.decision_id.clone(),
        assessment_id: a.assessment_id.clone(),
        required_features: None,
        extensions: None,
    }
}

/// The answer an input decision receives from a service's text: `{"value": {output_field: text}}`,
/// checked against the decision's schema so an over-long text is refused, never truncated.
pub fn fulfilment_result(
    decision: &Decision,
    text: String,
) -> Result<AssessmentResult, FramesError> {
    let f = decision.fulfillment.as_ref().ok_or_else(|| {
        FramesError::InvalidMessage(format!("{} has no fulfillment", decision.decision_id))
    })?;
    let mut value = serde_json::Map::new();
    value.insert(f.output_field.clone(), Value::String(text));
    let result = AssessmentResult {
        status: ResultStatus::Answered,
        answer: Some(Answer::Value(ValueAnswer {
            value: Value::Object(value),
            extensions: None,
        })),
        reason: None,
        uncertainty: None,
        extensions: None,
    };
    super::validate::check_result(decision, &result)?;
    Ok(result)
}
