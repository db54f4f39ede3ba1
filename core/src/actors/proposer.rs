//! Spawn proposals. The primary trigger of a spawn is the model running in the parent proposing
//! one; [`SpawnProposer`] is that seam (a host can put a model behind it). The default,
//! [`HeuristicProposer`], is deterministic: it looks for drift markers ("side note", "also",
//! "another idea", ...) and for continuation cues mixed with them (then the boundary is unclear
//! and it asks for a disambiguation node instead of guessing).

use super::model::{ChatLine, Node, NodeType};

/// What the proposer sees: the node (type, topic), its recent lines and the new utterance.
pub struct ProposalContext<'a> {
    pub node: &'a Node,
    pub recent: Vec<&'a ChatLine>,
    pub text: &'a str,
}

/// A proposer's decision for one utterance.
#[derive(Clone, Debug, PartialEq)]
pub enum Proposal {
    /// The utterance continues the node's topic.
    Continue,
    /// The utterance deserves its own bounded context.
    Spawn {
        node_type: NodeType,
        title: String,
        topic: String,
        reason: String,
    },
    /// It is unclear whether the utterance continues or forks: ask first.
    Disambiguate { topic: String, reason: String },
}

/// Decides whether an utterance forks the conversation.
pub trait SpawnProposer {
    /// The decision for `cx.text` in `cx.node`.
    fn propose(&self, cx: &ProposalContext<'_>) -> Proposal;
}

/// The deterministic default proposer.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeuristicProposer;

const DRIFT: &[&str] = &[
    "side note",
    "another idea",
    "separately",
    "new topic",
    "different topic",
    "unrelated",
    "while we're at it",
    "while we are at it",
    "by the way",
    "btw",
    "on another note",
    "tangent",
    "also",
];

const CONTINUE: &[&str] = &[
    "continue",
    "keep going",
    "carry on",
    "resume",
    "back to",
    "finish the",
    "either",
];

const TASK_VERBS: &[&str] = &[
    "fix",
    "merge",
    "write",
    "add",
    "update",
    "implement",
    "refactor",
    "sync",
    "release",
    "deploy",
    "run",
    "create",
    "remove",
    "rename",
    "bump",
    "build",
    "test",
    "start",
    "open",
    "close",
    "ship",
    "publish",
    "migrate",
    "delete",
    "port",
    "review",
    "rebase",
    "push",
    "commit",
    "draft",
    "prepare",
    "set",
];

const QUESTION_WORDS: &[&str] = &[
    "who", "what", "why", "how", "when", "where", "which", "should", "could", "would", "is", "are",
    "do", "does", "did", "can", "may", "might", "whose", "whom",
];

const EXPLORATORY: &[&str] = &[
    "i wonder",
    "thoughts on",
    "what do you think",
    "side note",
    "curious",
    "let's discuss",
    "brainstorm",
];

fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Whether `phrase` occurs in `text` on word boundaries (case-insensitive).
fn has_phrase(text: &str, phrase: &str) -> bool {
    let t = format!(" {} ", words(text).join(" "));
    let p = format!(" {} ", words(phrase).join(" "));
    t.contains(&p)
}

/// Whether an utterance asks for work: an imperative with a task verb ("fix the flaky
/// test"), "please …", "let's …", or a request phrased as a question ("can you merge …").
pub fn is_task_request(text: &str) -> bool {
    let w = words(text);
    let Some(first) = w.first() else { return false };
    if first == "please" || first == "let's" || TASK_VERBS.contains(&first.as_str()) {
        return true;
    }
    matches!(first.as_str(), "can" | "could" | "would" | "will")
        && w.get(1).is_some_and(|x| matches!(x.as_str(), "you" | "we"))
        && w.iter()
            .skip(2)
            .take(2)
            .any(|x| TASK_VERBS.contains(&x.as_str()))
}

/// Whether an utterance belongs in a task node: anything but a question or an exploratory
/// musing, unless it is a task request phrased as one. The policy trigger spawns a discussion
/// child for a non-task utterance in a task node.
pub fn is_task_utterance(text: &str) -> bool {
    let Some(first) = words(text).into_iter().next() else {
        return false;
    };
    if is_task_request(text) {
        return true;
    }
    let question = text.trim_end().ends_with('?') || QUESTION_WORDS.contains(&first.as_str());
    let exploratory = EXPLORATORY.iter().any(|p| has_phrase(text, p));
    !(question || exploratory)
}

/// A short title from an utterance: the part after a drift marker, up to 40 characters.
fn title_from(text: &str) -> String {
    let lower = text.to_lowercase();
    let mut start = 0;
    for m in DRIFT {
        if let Some(i) = lower.find(m) {
            start = start.max(i + m.len());
            break;
        }
    }
    let rest = text
        .get(start..)
        .unwrap_or(text)
        .trim_start_matches([':', ',', ' ', '-', '—'])
        .trim();
    let rest = if rest.is_empty() { text.trim() } else { rest };
    let mut t: String = rest.chars().take(40).collect();
    if rest.chars().count() > 40 {
        t = t.trim_end().to_owned();
    }
    t
}

impl SpawnProposer for HeuristicProposer {
    fn propose(&self, cx: &ProposalContext<'_>) -> Proposal {
        let text = cx.text;
        let drift = DRIFT.iter().any(|m| has_phrase(text, m));
        if !drift {
            return Proposal::Continue;
        }
        let cont = CONTINUE.iter().any(|m| has_phrase(text, m));
        let topic: String = text.chars().take(200).collect();
        if cont {
            return Proposal::Disambiguate {
                topic,
                reason: "mixed continuation and new ideas".into(),
            };
        }
        let title = title_from(text);
        let node_type = if is_task_request(&title) {
            NodeType::Task
        } else {
            NodeType::Discussion
        };
        Proposal::Spawn {
            node_type,
            title,
            topic,
            reason: "model-proposed spawn on drift".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_and_non_task_utterances() {
        for t in [
            "Start with the README links.",
            "please merge docs#3",
            "Can you fix the flaky test?",
            "Bump the version",
        ] {
            assert!(is_task_utterance(t), "{t}");
        }
        for t in [
            "Who can sign the CLA for the org?",
            "I wonder whether the bot config is shared",
            "why is CI red",
        ] {
            assert!(!is_task_utterance(t), "{t}");
        }
    }

    #[test]
    fn heuristic_spawns_on_drift_and_disambiguates_mixed_lines() {
        let node: Node =
            serde_json::from_value(serde_json::json!({"id": "n", "type": "discussion"})).unwrap();
        let p = |text: &'static str| {
            HeuristicProposer.propose(&ProposalContext {
                node: &node,
                recent: vec![],
                text,
            })
        };
        assert_eq!(
            p("Let's look at the merge conflict in README"),
            Proposal::Continue
        );
        assert!(matches!(
            p("Side note: the bot config lives in .github"),
            Proposal::Spawn {
                node_type: NodeType::Discussion,
                ..
            }
        ));
        assert!(matches!(
            p("Also, fix the flaky CI test"),
            Proposal::Spawn {
                node_type: NodeType::Task,
                ..
            }
        ));
        assert!(matches!(
            p("Continue the merge or we could also refactor the timeline engine"),
            Proposal::Disambiguate { .. }
        ));
        // "also" only counts as a word.
        assert_eq!(p("The alsoran branch is stale"), Proposal::Continue);
    }
}
