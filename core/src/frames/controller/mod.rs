//! The DGP controller (the client side of DGP), written once for every host: which decision
//! to take next, what evidence an adapter may see, whether a judgment may be committed (this
//! module's rules), one surface's run as a sans-IO machine ([`run`]: the requests, the events,
//! the retry rule, the stop points, the report), the HTTP rules ([`http`]: trusted URLs and
//! links, what an answer means, the controller's own codes) and the agent tools' declarations
//! ([`tools`]). Hosts carry bytes and keep a timer: `weft agent` and its tools
//! (`node-host/src/agent`), `createDgpController` / `dgpTools` in JS (`wasm/js/dgp-*.js`).

pub mod http;
pub mod run;
pub mod tools;

#[cfg(test)]
mod tests;

pub use http::{BaseUrl, HttpAnswer, Problem};
pub use run::{
    Event, EventKind, HttpRequest, JudgeRequest, Judgment, Method, Output, Run, RunConfig,
    RunOptions, RunReport, ServiceBudget, StopPoint,
};

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

impl AfterJudgment {
    /// The wire name (`commit`, `speculative`, `abstained`, `human_required`).
    pub fn as_str(self) -> &'static str {
        match self {
            AfterJudgment::Commit => "commit",
            AfterJudgment::Speculative => "speculative",
            AfterJudgment::Abstained => "abstained",
            AfterJudgment::HumanRequired => "human_required",
        }
    }
}

/// A checked judgment: what to record, and what follows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    /// The assessment request to record.
    pub assessment: AssessmentRequest,
    /// What follows once it is recorded.
    pub after: AfterJudgment,
    /// The commit request, when an agent may commit it (never for a human-only effect).
    pub commit: Option<CommitRequest>,
}

/// Checks a judgment of `decision` of `frame` like a server checks an assessment, and against
/// the decision (`INVALID_CHOICE`, `INVALID_ANSWER`, ...), and builds what to record and what
/// follows it: the one check → judgment → commit sequence of every host.
pub fn judge(
    frame: &Frame,
    decision: &Decision,
    assessment_id: String,
    mode: Mode,
    resolver: Resolver,
    result: AssessmentResult,
) -> Result<Judged, FramesError> {
    let assessment = assessment_request(frame, decision, assessment_id, mode, resolver, result);
    super::validate::check_assessment_request(&assessment)?;
    super::validate::check_result(decision, &assessment.result)?;
    let after = after_judgment(decision, &assessment.result, mode);
    let commit = (after == AfterJudgment::Commit).then(|| commit_request(&assessment));
    Ok(Judged {
        assessment,
        after,
        commit,
    })
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
