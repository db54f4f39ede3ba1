//! `weft actors route --proposer model` against the scripted local model server: the model's
//! spawn proposal is applied by the core's route rules; a malformed proposal is
//! `MODEL_BAD_RESPONSE` and writes nothing; with no model configured the CLI says so and the
//! keyword heuristic proposes.

mod model_support;
mod support;

use std::process::{Command, Output};

use model_support::ModelServer;
use serde_json::{Value, json};
use support::{HUMAN, Server, TempDir, control, http, weft};

fn actors(args: &[&str]) -> Output {
    Command::new(weft())
        .arg("actors")
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("WEFT_MODEL")
        .env_remove("WEFT_MODEL_BASE_URL")
        .output()
        .expect("weft actors runs")
}

fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn chat_lines(root: &std::path::Path, node: &str) -> usize {
    std::fs::read_to_string(root.join("nodes").join(node).join("chat.jsonl"))
        .unwrap()
        .lines()
        .count()
}

#[test]
fn a_model_proposes_spawns_for_weft_actors_route() {
    let dir = TempDir::new("actors-model-proposer");
    let root = dir.0.join("root");
    let r = root.to_str().unwrap();
    assert!(actors(&["init", r]).status.success());
    let m = ModelServer::start();
    let base = m.base("openai");
    let model = [
        "--proposer",
        "model",
        "--model",
        "openai:test-proposer",
        "--base-url",
        &base,
        "--json",
    ];
    control(
        &m.url,
        "POST",
        "/_script",
        Some(json!({"replies": [
            {"text": "{\"proposal\": \"spawn\", \"type\": \"task\", \"title\": \"Fix flaky CI\", \"reason\": \"a bounded job\"}"},
            {"text": "spawn it as a task"},
        ]})),
    );
    // No drift keyword: the heuristic would continue; the model proposes the spawn.
    let text = "Oh, and CI is flaky again";
    let o = actors(
        &[
            &["route", r, "--node", "coordinator", "--text", text],
            &model[..],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = stdout_json(&o);
    assert_eq!(
        (&v["outcome"], &v["trigger"], &v["type"], &v["id"]),
        (
            &json!("spawned"),
            &json!("model"),
            &json!("task"),
            &json!("fix-flaky-ci")
        )
    );
    let reqs = control(&m.url, "GET", "/_requests", None);
    let body = &reqs[0]["body"];
    assert_eq!(
        (&body["model"], &body["stream"]),
        (&json!("test-proposer"), &json!(true))
    );
    let user = body["messages"][1]["content"].as_str().unwrap();
    assert!(
        user.contains("Node `coordinator` (type: coordinator"),
        "{user}"
    );
    assert!(user.ends_with(&format!("utterance:\n{text}\n")), "{user}");

    // A malformed proposal: a coded error, nothing written.
    let before = chat_lines(&root, "coordinator");
    let o = actors(
        &[
            &[
                "route",
                r,
                "--node",
                "coordinator",
                "--text",
                "and the docs",
            ],
            &model[..],
        ]
        .concat(),
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout_json(&o)["error"]["code"], "MODEL_BAD_RESPONSE");
    assert_eq!(chat_lines(&root, "coordinator"), before);

    // No model configured: said so; the heuristic spawns on its drift keyword.
    let o = actors(&[
        "route",
        r,
        "--node",
        "coordinator",
        "--text",
        "Side note: the bot config lives in .github",
        "--proposer",
        "model",
        "--json",
    ]);
    assert!(o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no model configured (MODEL_NOT_CONFIGURED)")
    );
    assert_eq!(stdout_json(&o)["type"], "discussion");
    assert_eq!(
        control(&m.url, "GET", "/_requests", None)
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn weft_serve_desk_routes_through_the_model_proposer() {
    let dir = TempDir::new("serve-desk-proposer");
    let root = dir.0.join("root");
    let m = ModelServer::start();
    let base = m.base("openai");
    control(
        &m.url,
        "POST",
        "/_script",
        Some(json!({"replies": [
            {"text": "{\"proposal\": \"spawn\", \"type\": \"task\", \"title\": \"Fix flaky CI\", \"reason\": \"a bounded job\"}"},
        ]})),
    );
    let s = Server::start(
        &dir.0.join("data"),
        &[
            "--chat-root",
            root.to_str().unwrap(),
            "--desk-proposer",
            "model",
            "--model",
            "openai:test-proposer",
            "--base-url",
            &base,
        ],
    );
    let auth = format!("Bearer {HUMAN}");
    let body = json!({"text": "Oh, and CI is flaky again"}).to_string();
    let a = http(
        &s.addr,
        "POST",
        "/api/actors/nodes/coordinator/route",
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        Some(body.as_bytes()),
    );
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let v = a.json();
    // No drift keyword: the heuristic would continue; the server's model proposed the spawn.
    assert_eq!(
        (&v["outcome"], &v["trigger"], &v["type"]),
        (&json!("spawned"), &json!("model"), &json!("task"))
    );
    let reqs = control(&m.url, "GET", "/_requests", None);
    assert_eq!(reqs.as_array().map(Vec::len), Some(1));
    assert_eq!(reqs[0]["body"]["model"], "test-proposer");
}
