//! `weft agent --judge model --text model` against `weft serve` and the scripted local model
//! server (`tests/model-server/server.mjs`): a model's judgments and draft drive the ThreadDesk
//! walkthrough A to its human-review stop; an invalid model answer is a coded stop, never
//! recorded; with no model configured the agent says so and the fixtures judge.

mod model_support;
mod support;

use std::process::Command;

use model_support::ModelServer;
use serde_json::{Value, json};
use support::*;

/// `weft agent` with no model key or model choice inherited from the environment.
fn run_agent(server: &Server, args: &[&str]) -> Vec<Value> {
    let out = Command::new(weft())
        .args(["agent", "--base-url", &server.base])
        .args(args)
        .env("WEFT_AGENT_TOKEN", AGENT)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("WEFT_MODEL")
        .env_remove("WEFT_MODEL_BASE_URL")
        .output()
        .expect("weft agent runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "weft agent failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn script(m: &ModelServer, replies: Value) {
    control(
        &m.url,
        "POST",
        "/_script",
        Some(json!({ "replies": replies })),
    );
}

/// The user text of an OpenAI request the server received.
fn user_text(r: &Value) -> String {
    r["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_model_judges_walkthrough_a_to_the_human_stop() {
    let dir = TempDir::new("agent-model");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    let m = ModelServer::start();
    let question = d.frame("thread-42", AGENT)["decisions"][0]["question"]
        .as_str()
        .unwrap()
        .to_owned();
    let model = [
        "--judge",
        "model",
        "--text",
        "model",
        "--model",
        "openai:test-judge",
        "--model-base-url",
        &m.base("openai"),
    ];

    script(
        &m,
        json!([
            {"text": "{\"choice\": \"retry\", \"input\": {}, \"reason\": \"exit 137 looks transient\"}", "chunkSize": 7},
            {"text": "```json\n{\"choice\": \"draft_update\"}\n```"},
            {"text": "MODEL DRAFT: the simulated retry passed. Awaiting human review."},
            {"text": "{\"choice\": \"publish\", \"reason\": \"the draft matches the log\"}"},
        ]),
    );
    let evs = run_agent(&server, &[&["--surface", "thread-42"], &model[..]].concat());
    let a = events(&evs, "thread-42");
    let ks = kinds(&a);
    assert_eq!(ks.last().unwrap(), "human_review_required", "{ks:?}");
    assert_eq!(ks.iter().filter(|k| *k == "committed").count(), 3, "{ks:?}");
    let assessed: Vec<&Value> = a
        .iter()
        .filter(|e| e["event"] == "assessed")
        .copied()
        .collect();
    assert_eq!(assessed.len(), 4);
    for e in &assessed {
        d.record("AssessmentRequest", e["assessment"].clone());
        assert_eq!(
            e["assessment"]["resolver"],
            json!({"kind": "llm", "provider": "openai", "model": "test-judge"})
        );
    }
    assert_eq!(
        assessed[0]["assessment"]["result"]["reason"],
        "exit 137 looks transient"
    );
    // The model's draft is what the human reviews.
    let f = d.frame("thread-42", HUMAN);
    let draft = f["observations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["evidence_id"] == "draft")
        .unwrap();
    assert_eq!(
        draft["content"],
        "MODEL DRAFT: the simulated retry passed. Awaiting human review."
    );
    // What the model server received: four streamed requests, the first carrying the frame's
    // question and the offered options.
    let reqs = control(&m.url, "GET", "/_requests", None);
    let reqs = reqs.as_array().unwrap();
    assert_eq!(reqs.len(), 4);
    for r in reqs {
        assert_eq!(r["path"], "/v1/chat/completions");
        assert_eq!(r["body"]["stream"], true);
        assert_eq!(r["body"]["model"], "test-judge");
        assert_eq!(r["body"]["messages"][0]["role"], "system");
    }
    let first = user_text(&reqs[0]);
    assert!(first.contains(&format!("Question: {question}")), "{first}");
    assert!(first.contains("- `retry`"), "{first}");
    assert!(user_text(&reqs[2]).contains("service `llm.generate_text`"));

    // An option the decision does not offer: a coded stop, nothing recorded.
    control(&m.url, "POST", "/_reset", None);
    script(&m, json!([{"text": "{\"choice\": \"delete_the_repo\"}"}]));
    let evs = run_agent(&server, &[&["--surface", "thread-73"], &model[..]].concat());
    let b = events(&evs, "thread-73");
    let last = b.last().unwrap();
    assert_eq!(last["event"], "stopped", "{b:?}");
    assert_eq!(last["problem"]["code"], "INVALID_CHOICE");
    assert!(!kinds(&b).contains(&"assessed".to_owned()));

    // No model configured: said so, and the labelled fixtures judge instead.
    let evs = run_agent(
        &server,
        &["--surface", "thread-73", "--judge", "model", "--steps", "1"],
    );
    assert_eq!(evs[0]["event"], "note");
    assert_eq!(evs[0]["code"], "MODEL_NOT_CONFIGURED");
    let assessed = evs.iter().find(|e| e["event"] == "assessed").unwrap();
    assert_eq!(
        assessed["assessment"]["resolver"]["provider"],
        "weft-fixture"
    );
    assert_eq!(
        control(&m.url, "GET", "/_requests", None)
            .as_array()
            .unwrap()
            .len(),
        1
    );
    d.validate();
}
