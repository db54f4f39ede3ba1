//! The deterministic fixture judge and text service of the controller: they reproduce the
//! seed's ThreadDesk walkthroughs without a model, and label themselves so (resolver `rule`,
//! provider `weft-fixture`). One definition for `weft agent`, the native agent tools and the JS
//! `dgpFixtureAdapter` / `dgpFixtureText`.

use super::FramesError;
use super::types::*;

/// The resolver recorded for a fixture judgment.
pub fn judge_resolver() -> Resolver {
    resolver("deterministic-fixtures-not-a-model")
}

/// The resolver recorded for a fixture text.
pub fn text_resolver() -> Resolver {
    resolver("canned-text-not-a-model")
}

fn resolver(model: &str) -> Resolver {
    Resolver {
        kind: ResolverKind::Rule,
        provider: Some("weft-fixture".into()),
        model: Some(model.into()),
        extensions: None,
    }
}

fn answered(answer: Answer) -> AssessmentResult {
    AssessmentResult {
        status: ResultStatus::Answered,
        answer: Some(answer),
        reason: None,
        uncertainty: None,
        extensions: None,
    }
}

/// The fixture judgment of `d` on `frame`. recovery: `retry` on thread-42 while offered, else
/// `request_reasoning` while offered, else `investigate`; update: `draft_update` while offered,
/// else `finish`; review: `publish` (the controller stops there: it needs a human); any other
/// choice: the first option by id. Probability 0.5, score 0; free input is refused
/// (`INVALID_ANSWER`: input nodes are the text service's).
pub fn judge(frame: &Frame, d: &Decision) -> Result<AssessmentResult, FramesError> {
    let offered = |id: &str| d.option(id).is_some();
    let pick = match d.kind {
        DecisionKind::Choice => match d.node_id.as_str() {
            "recovery" if frame.surface_id == "thread-42" && offered("retry") => "retry",
            "recovery" if offered("request_reasoning") => "request_reasoning",
            "recovery" if offered("investigate") => "investigate",
            "update" if offered("draft_update") => "draft_update",
            "update" if offered("finish") => "finish",
            "review" if offered("publish") => "publish",
            _ => d
                .options
                .iter()
                .flatten()
                .map(|o| o.id.as_str())
                .min()
                .ok_or_else(|| FramesError::InvalidChoice("no options".into()))?,
        },
        DecisionKind::Probability => {
            return Ok(answered(Answer::Probability(ProbabilityAnswer {
                probability: 0.5,
                extensions: None,
            })));
        }
        DecisionKind::Score => {
            return Ok(answered(Answer::Score(ScoreAnswer {
                score: 0.0,
                extensions: None,
            })));
        }
        DecisionKind::Input => {
            return Err(FramesError::InvalidAnswer(
                "the fixture adapter does not write free input".into(),
            ));
        }
    };
    Ok(answered(Answer::Choice(ChoiceAnswer {
        choice: pick.into(),
        input: Default::default(),
        extensions: None,
    })))
}

/// The canned text for `d`'s fulfilment service ([`service_text`]).
pub fn text(d: &Decision) -> &'static str {
    service_text(d.fulfillment.as_ref().map_or("", |f| f.service_id.as_str()))
}

/// The canned text a fixture service returns (`llm.reason`: an analysis; any other service: a
/// draft); not model output.
pub fn service_text(service_id: &str) -> &'static str {
    if service_id == "llm.reason" {
        "FIXTURE ANALYSIS: the runner exit does not identify a reliable cause, and the log does not justify \
         repeated retries. An engineer should inspect the runner configuration and collect more logs."
    } else {
        "FIXTURE DRAFT: the simulated CI retry completed successfully. No real tests were executed. \
         This update awaits human review and has not been sent anywhere."
    }
}
