//! The native model host (reqwest + the core's `ModelCall`) against the scripted local model
//! server, in both providers' formats: streamed text, a tool call and its result sent back,
//! 429 then success, 401, an interrupt mid-stream; and `weft chat` end to end.

mod model_support;
mod support;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use model_support::ModelServer;
use serde_json::{Value, json};
use support::TempDir;
use tokio::sync::mpsc;
use weft_core::model::{CallTimeouts, ModelChoice, ModelConfig, StreamEvent};
use weft_core::tools::{Message, Output, SessionConfig, ToolDecl, TurnEnd};
use weft_host::agent_host::{AgentHost, tool_fn};
use weft_host::model::{ModelDelta, ReqwestModel};

const PROVIDERS: [&str; 2] = ["openai", "anthropic"];

fn config(server: &ModelServer, provider: &str) -> ModelConfig {
    let mut c = ModelChoice {
        model: Some(format!("{provider}:test-model")),
        base_url: Some(server.base(provider)),
        ..ModelChoice::default()
    };
    match provider {
        "openai" => c.openai_key = Some("sk-test-openai".into()),
        _ => c.anthropic_key = Some("sk-test-anthropic".into()),
    }
    ModelConfig::resolve(&c).unwrap().unwrap()
}

fn add_schema() -> Value {
    json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
           "required": ["a", "b"]})
}

/// A host with the real model and an `add` tool whose runs are counted.
fn host(
    server: &ModelServer,
    provider: &str,
) -> (
    AgentHost,
    mpsc::UnboundedReceiver<ModelDelta>,
    Arc<AtomicUsize>,
) {
    let mut model = ReqwestModel::new(config(server, provider))
        .unwrap()
        .with_system(Some("You are terse.".into()));
    let deltas = model.deltas();
    let mut h = AgentHost::new(SessionConfig::new("agent"), model);
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    h.register(
        ToolDecl::new("add", "Adds two numbers.", add_schema()),
        tool_fn(move |args: Value, _ctx| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(json!(
                    args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0)
                ))
            }
        }),
    )
    .unwrap();
    (h, deltas, runs)
}

fn ends(h: &AgentHost) -> Vec<TurnEnd> {
    h.log
        .iter()
        .filter_map(|o| match o {
            Output::TurnEnded { end, .. } => Some(end.clone()),
            _ => None,
        })
        .collect()
}

fn last_text(h: &AgentHost) -> Option<String> {
    h.session.history().iter().rev().find_map(|m| match m {
        Message::Assistant { text, .. } => text.clone(),
        _ => None,
    })
}

/// Runs the host until idle; returns the deltas received while the turn still ran and those
/// left after it ended.
async fn run(
    h: &mut AgentHost,
    deltas: &mut mpsc::UnboundedReceiver<ModelDelta>,
) -> (Vec<StreamEvent>, Vec<StreamEvent>) {
    let mut during = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        let run = h.run_until_idle();
        tokio::pin!(run);
        loop {
            tokio::select! {
                _ = &mut run => break,
                Some(d) = deltas.recv() => during.push(d.event),
            }
        }
    })
    .await
    .expect("the turn ended within 20 s");
    let mut after = Vec::new();
    while let Ok(d) = deltas.try_recv() {
        after.push(d.event);
    }
    (during, after)
}

fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_text_reply_streams_and_the_server_sees_transcript_tools_and_stream() {
    let server = ModelServer::start();
    for (i, provider) in PROVIDERS.iter().enumerate() {
        let (mut h, mut deltas, runs) = host(&server, provider);
        server
            .script(
                json!([{"text": "Hello there, streaming world", "chunkSize": 5, "delayMs": 30,
                             "usage": {"input": 12, "output": 7}}]),
            )
            .await;
        h.submit_task(json!("Say hello"));
        let (during, after) = run(&mut h, &mut deltas).await;

        assert_eq!(ends(&h), vec![TurnEnd::Completed], "{provider}");
        assert_eq!(
            last_text(&h).as_deref(),
            Some("Hello there, streaming world")
        );
        // The reply arrived as 6 text deltas, the first ones while the turn still ran.
        let all: Vec<StreamEvent> = during.iter().chain(&after).cloned().collect();
        assert_eq!(text_of(&all), "Hello there, streaming world", "{provider}");
        assert_eq!(
            all.iter()
                .filter(|e| matches!(e, StreamEvent::TextDelta { .. }))
                .count(),
            6,
            "{provider}"
        );
        assert!(
            !text_of(&during).is_empty(),
            "{provider}: deltas arrive before the turn ends"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        let usage: Vec<(u64, u64)> = h
            .log
            .iter()
            .filter_map(|o| match o {
                Output::ModelUsage {
                    input_tokens,
                    output_tokens,
                    ..
                } => Some((*input_tokens, *output_tokens)),
                _ => None,
            })
            .collect();
        assert_eq!(usage, vec![(12, 7)], "{provider}");

        let reqs = server.requests().await;
        assert_eq!(reqs.len(), i + 1);
        let r = &reqs[i];
        let b = &r["body"];
        assert_eq!(b["stream"], true, "{provider}");
        assert_eq!(b["model"], "test-model");
        match *provider {
            "openai" => {
                assert_eq!(r["path"], "/v1/chat/completions");
                assert_eq!(r["headers"]["authorization"], "Bearer sk-test-openai");
                assert_eq!(
                    b["messages"],
                    json!([{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": "Say hello"}])
                );
                assert_eq!(b["tools"][0]["function"]["name"], "add");
                assert_eq!(b["tools"][0]["function"]["parameters"], add_schema());
                assert_eq!(b["tools"].as_array().unwrap().len(), 1);
            }
            _ => {
                assert_eq!(r["path"], "/v1/messages");
                assert_eq!(r["headers"]["x-api-key"], "sk-test-anthropic");
                assert!(r["headers"]["anthropic-version"].is_string());
                assert_eq!(b["system"], "You are terse.");
                assert_eq!(
                    b["messages"],
                    json!([{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}])
                );
                assert_eq!(b["tools"][0]["name"], "add");
                assert_eq!(b["tools"][0]["input_schema"], add_schema());
                assert_eq!(b["tools"].as_array().unwrap().len(), 1);
            }
        }
    }
}

#[tokio::test]
async fn a_tool_call_runs_and_its_result_goes_back_in_the_providers_format() {
    let server = ModelServer::start();
    for (i, provider) in PROVIDERS.iter().enumerate() {
        let (mut h, mut deltas, runs) = host(&server, provider);
        server
            .script(json!([
                {"calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]},
                {"text": "The sum is 5."}
            ]))
            .await;
        h.submit_task(json!("What is 2+3?"));
        let (during, after) = run(&mut h, &mut deltas).await;
        assert_eq!(ends(&h), vec![TurnEnd::Completed], "{provider}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{provider}");
        assert_eq!(last_text(&h).as_deref(), Some("The sum is 5."));
        let all: Vec<StreamEvent> = during.into_iter().chain(after).collect();
        assert!(all.contains(&StreamEvent::ToolCallStart {
            index: 0,
            id: "c1".into(),
            name: "add".into()
        }));
        let started: Vec<&Value> = h
            .log
            .iter()
            .filter_map(|o| match o {
                Output::StartCall { arguments, .. } => Some(arguments),
                _ => None,
            })
            .collect();
        assert_eq!(started, vec![&json!({"a": 2, "b": 3})]);

        let reqs = server.requests().await;
        assert_eq!(reqs.len(), 2 * (i + 1));
        let second = &reqs[2 * i + 1]["body"]["messages"];
        match *provider {
            "openai" => {
                let m = second.as_array().unwrap();
                assert_eq!(m.len(), 4, "system, user, assistant, tool: {second}");
                assert_eq!(m[2]["role"], "assistant");
                assert_eq!(m[2]["tool_calls"][0]["id"], "c1");
                assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "add");
                let args: Value = serde_json::from_str(
                    m[2]["tool_calls"][0]["function"]["arguments"]
                        .as_str()
                        .unwrap(),
                )
                .unwrap();
                assert_eq!(args, json!({"a": 2, "b": 3}));
                assert_eq!(
                    m[3],
                    json!({"role": "tool", "tool_call_id": "c1", "content": "5.0"})
                );
            }
            _ => {
                let m = second.as_array().unwrap();
                assert_eq!(m.len(), 3, "user, assistant, user(tool_result): {second}");
                assert_eq!(
                    m[1]["content"][0],
                    json!({"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 2, "b": 3}})
                );
                assert_eq!(m[2]["role"], "user");
                assert_eq!(
                    m[2]["content"][0],
                    json!({"type": "tool_result", "tool_use_id": "c1", "content": "5.0", "is_error": false})
                );
            }
        }
    }
}

#[tokio::test]
async fn rate_limited_then_success_is_retried_once() {
    let server = ModelServer::start();
    for (i, provider) in PROVIDERS.iter().enumerate() {
        let (mut h, mut deltas, _) = host(&server, provider);
        server
            .script(json!([
                {"status": 429, "headers": {"retry-after": "0"},
                 "body": {"error": {"type": "rate_limit_error", "message": "slow down"}}},
                {"text": "ok now"}
            ]))
            .await;
        h.submit_task(json!("hi"));
        run(&mut h, &mut deltas).await;
        assert_eq!(ends(&h), vec![TurnEnd::Completed], "{provider}");
        assert_eq!(last_text(&h).as_deref(), Some("ok now"));
        assert_eq!(server.requests().await.len(), 2 * (i + 1), "{provider}");
    }
}

#[tokio::test]
async fn unauthorized_is_model_auth_and_not_retried() {
    let server = ModelServer::start();
    for provider in PROVIDERS {
        let (mut h, mut deltas, _) = host(&server, provider);
        server
            .script(json!([
                {"status": 401, "body": {"error": {"type": "authentication_error", "message": "bad key"}}},
                {"text": "never asked"}
            ]))
            .await;
        h.submit_task(json!("hi"));
        run(&mut h, &mut deltas).await;
        match ends(&h).as_slice() {
            [TurnEnd::ModelFailed { message }] => {
                assert!(message.starts_with("MODEL_AUTH: "), "{provider}: {message}")
            }
            other => panic!("{provider}: {other:?}"),
        }
        assert_eq!(server.requests().await.len(), 1, "{provider}: no retry");
        // Drop the unused scripted reply so the next provider starts clean.
        server.reset().await;
    }
}

#[tokio::test]
async fn an_interrupt_mid_stream_drops_the_connection_and_no_call_runs() {
    let server = ModelServer::start();
    for (i, provider) in PROVIDERS.iter().enumerate() {
        let (mut h, mut deltas, runs) = host(&server, provider);
        // OpenAI streams the call's arguments too before hanging; Anthropic hangs in the text.
        server
            .script(json!([{"text": "Let me add", "chunkSize": 3,
                             "calls": [{"id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}],
                             "hang": true}]))
            .await;
        h.submit_task(json!("add 1 and 2"));
        // Run until the first delta arrives: the stream is open and has not ended.
        tokio::time::timeout(Duration::from_secs(10), async {
            let run = h.run_until(|_| false);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    _ = &mut run => unreachable!("runs until told otherwise"),
                    Some(d) = deltas.recv() => {
                        if matches!(d.event, StreamEvent::TextDelta { .. }) {
                            break;
                        }
                    }
                }
            }
        })
        .await
        .expect("a text delta within 10 s");
        h.interrupt("the user pressed stop");
        tokio::time::timeout(Duration::from_secs(10), h.run_until_idle())
            .await
            .expect("idle within 10 s");
        assert_eq!(
            ends(&h),
            vec![TurnEnd::Interrupted {
                reason: "the user pressed stop".into()
            }],
            "{provider}"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{provider}: no call ran");
        assert!(
            !h.log.iter().any(|o| matches!(o, Output::StartCall { .. })),
            "{provider}"
        );
        let r = server.wait_closed(i).await;
        assert_eq!(r["completed"], false);
    }
}

#[tokio::test]
async fn a_silent_stream_times_out_at_the_machines_deadline_and_is_dropped() {
    let server = ModelServer::start();
    let mut model = ReqwestModel::new(config(&server, "openai")).unwrap();
    model.timeouts = CallTimeouts {
        head_ms: 5_000,
        idle_ms: 150,
    };
    let mut deltas = model.deltas();
    let mut h = AgentHost::new(SessionConfig::new("agent"), model);
    server
        .script(json!([{"text": "and then", "hang": true}]))
        .await;
    h.submit_task(json!("hi"));
    let (during, after) = run(&mut h, &mut deltas).await;
    let all: Vec<StreamEvent> = during.into_iter().chain(after).collect();
    assert_eq!(text_of(&all), "and then");
    match ends(&h).as_slice() {
        [TurnEnd::ModelFailed { message }] => {
            assert!(message.starts_with("MODEL_TIMEOUT: "), "{message}")
        }
        other => panic!("{other:?}"),
    }
    server.wait_closed(0).await;
    assert_eq!(server.requests().await.len(), 1, "a timeout is not retried");
}

// ---- `weft chat` end to end ----

fn weft() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    for k in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "WEFT_MODEL",
        "WEFT_MODEL_BASE_URL",
        "TEST_MODEL_KEY",
    ] {
        c.env_remove(k);
    }
    c
}

fn init_root(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    let root = d.0.join("chat");
    let out = weft().args(["actors", "init"]).arg(&root).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

/// The node's user and assistant lines (role, text) through the actor API.
fn chat_lines(root: &std::path::Path, node: &str) -> Vec<(String, String)> {
    let (config, _) = weft_host::actors::config_from_env().unwrap();
    let mut s = weft_host::actors::Session::reader(root, config).unwrap();
    let v = weft_core::actors::api::call(
        &mut s.graph,
        weft_host::actors::wall_ms(),
        "model",
        &json!({"node": node, "recent": 100}),
        &weft_core::actors::HeuristicProposer,
    )
    .unwrap();
    v["recent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["role"].as_str().unwrap_or("").to_owned(),
                l["text"].as_str().unwrap_or("").to_owned(),
            )
        })
        .filter(|(role, _)| role == "user" || role == "assistant")
        .collect()
}

#[tokio::test]
async fn weft_chat_streams_the_reply_and_keeps_the_transcript() {
    let server = ModelServer::start();
    let d = init_root("chat-text");
    let root = d.0.join("chat");
    server
        .script(
            json!([{"text": "Hi! How can I help?", "usage": {"input": 9, "output": 6}},
                       {"text": "Still here."}]),
        )
        .await;
    let chat = |msg: &str, extra: &[&str]| {
        weft()
            .arg("chat")
            .arg(&root)
            .args(["--node", "coordinator", "--message", msg])
            .args([
                "--model",
                "openai:test-model",
                "--base-url",
                &server.base("openai"),
            ])
            .args(["--api-key-env", "TEST_MODEL_KEY"])
            .env("TEST_MODEL_KEY", "sk-from-named-var")
            .args(extra)
            .output()
            .unwrap()
    };
    let out = chat("hello", &["--system", "Be kind."]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Hi! How can I help?\n"
    );
    assert_eq!(
        chat_lines(&root, "coordinator"),
        vec![
            ("user".into(), "hello".into()),
            ("assistant".into(), "Hi! How can I help?".into())
        ]
    );
    // The second message reads the first exchange as conversation.
    let out = chat("are you there?", &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let text: String = lines
        .iter()
        .filter(|l| l["output"] == "model_delta" && l["delta"]["type"] == "text_delta")
        .map(|l| l["delta"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "Still here.");
    assert!(
        lines.iter().any(|l| l["output"] == "model_usage"
            && l["inputTokens"] == 10
            && l["outputTokens"] == 5)
    );
    let last = lines.last().unwrap();
    assert_eq!(last["output"], "turn_ended");
    assert_eq!(last["end"], "completed");

    let reqs = server.requests().await;
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0]["headers"]["authorization"],
        "Bearer sk-from-named-var"
    );
    // The system text: --system, then the node's close-out addendum.
    let m0 = reqs[0]["body"]["messages"].as_array().unwrap();
    assert_eq!(m0[0]["role"], "system");
    assert!(
        m0[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("Be kind.\n\n")
    );
    assert_eq!(&m0[1..], &[json!({"role": "user", "content": "hello"})]);
    let m1 = reqs[1]["body"]["messages"].as_array().unwrap();
    assert_eq!(m1[0]["role"], "system");
    assert_eq!(
        &m1[1..],
        &[
            json!({"role": "user", "content": "hello"}),
            json!({"role": "assistant", "content": "Hi! How can I help?"}),
            json!({"role": "user", "content": "are you there?"})
        ]
    );
    assert_eq!(chat_lines(&root, "coordinator").len(), 4);
}

#[tokio::test]
async fn weft_chat_exits_non_zero_with_the_coded_error() {
    let server = ModelServer::start();
    let d = init_root("chat-401");
    let root = d.0.join("chat");
    server
        .script(json!([{"status": 401, "body": {"error": {"message": "invalid key"}}}]))
        .await;
    let out = weft()
        .arg("chat")
        .arg(&root)
        .args(["--message", "hello", "--model", "anthropic:test-model"])
        .args(["--base-url", &server.base("anthropic")])
        .env("ANTHROPIC_API_KEY", "sk-wrong")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("MODEL_AUTH: "), "{err}");
    assert_eq!(server.requests().await.len(), 1, "no retry");
    // The user's line is kept; no reply line was written.
    assert_eq!(
        chat_lines(&root, "coordinator"),
        vec![("user".into(), "hello".into())]
    );
}

#[test]
fn weft_chat_without_a_model_says_so_and_answers_with_the_builtin_model() {
    let d = init_root("chat-builtin");
    let root = d.0.join("chat");
    let out = weft()
        .arg("chat")
        .arg(&root)
        .args(["--message", "ping"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no model configured: "), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("weft built-in model"), "{text}");
    assert!(text.contains("ping"), "{text}");
    let lines = chat_lines(&root, "coordinator");
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1].0, "assistant");
    assert!(lines[1].1.contains("MODEL_NOT_CONFIGURED"));
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn weft_chat_ctrl_c_interrupts_the_turn_and_drops_the_stream() {
    use std::io::Read;
    let server = ModelServer::start();
    let d = init_root("chat-sigint");
    let root = d.0.join("chat");
    server
        .script(json!([{"text": "streaming forever", "hang": true}]))
        .await;
    let mut child = weft()
        .arg("chat")
        .arg(&root)
        .args(["--message", "go", "--model", "openai:test-model"])
        .args(["--base-url", &server.base("openai")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first streamed text: the stream is open.
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = [0u8; 64];
    let n = stdout.read(&mut buf).unwrap();
    assert!(n > 0 && "streaming forever".starts_with(std::str::from_utf8(&buf[..n]).unwrap()));
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("MODEL_ABORTED: "), "{err}");
    server.wait_closed(0).await;
    assert_eq!(
        chat_lines(&root, "coordinator"),
        vec![("user".into(), "go".into())],
        "no reply line for an interrupted turn"
    );
}
