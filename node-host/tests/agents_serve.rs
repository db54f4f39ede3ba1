//! The native agent runtime inside `weft serve` (issue 11, hosts), over real processes and the
//! scripted model server (`tests/model-server/server.mjs`): a typed line streams a reply (SSE
//! `delta` + `agent` events, lines on disk); a `spawn` tool call opens a child with its own
//! agent; an enforced wait blocks the parent until the child is done, then resumes; SIGKILL
//! during a streaming step and a restart record the turn interrupted ("host restarted") and
//! re-run nothing; the harness fixture root keeps its lineage with agents running; a spawned
//! task node's agent drives ThreadDesk with the DGP tools (the coordinator never gets them).

mod common;
mod model_support;
mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use model_support::ModelServer;
use serde_json::{Value, json};
use support::{HUMAN, Server, TempDir, control, http};

fn start(data: &Path, m: &ModelServer, extra: &[&str]) -> Server {
    start_env(data, m, extra, &[])
}

/// `weft serve` with the scripted model as the agents' model and `env` set.
fn start_env(data: &Path, m: &ModelServer, extra: &[&str], env: &[(&str, &str)]) -> Server {
    let mut child = std::process::Command::new(support::weft())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .args([
            "--model",
            "openai:test-agent",
            "--base-url",
            &m.base("openai"),
        ])
        .args(extra)
        .env("WEFT_HUMAN_TOKEN", HUMAN)
        .env("WEFT_AGENT_TOKEN", support::AGENT)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("weft serve starts");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "weft serve ended: {head:?}"
        );
        let done = line.contains("discovery:");
        head.push(line);
        if done {
            break;
        }
    }
    // The start-up lines say where the desk is and which model the agents run.
    assert!(
        head.iter().any(|l| l.contains("actor desk:  http://")),
        "{head:?}"
    );
    assert!(
        head.iter()
            .any(|l| l.contains("agents:") && l.contains("openai:test-agent")),
        "{head:?}"
    );
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut sink);
    });
    let base = head[0]
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let addr = base.trim_start_matches("http://").to_owned();
    Server { child, base, addr }
}

fn get(s: &Server, path: &str) -> (u16, Value) {
    let a = http(
        &s.addr,
        "GET",
        path,
        &[("authorization", &format!("Bearer {HUMAN}"))],
        None,
    );
    (a.status, a.json())
}

fn post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    let b = body.to_string();
    let a = http(
        &s.addr,
        "POST",
        path,
        &[
            ("authorization", &format!("Bearer {HUMAN}")),
            ("content-type", "application/json"),
        ],
        Some(b.as_bytes()),
    );
    if a.status >= 400 {
        assert_eq!(
            a.header("content-type"),
            Some("application/problem+json"),
            "{path}"
        );
    }
    (a.status, a.json())
}

fn script(m: &ModelServer, replies: Value) {
    control(
        &m.url,
        "POST",
        "/_script",
        Some(json!({ "replies": replies })),
    );
}

fn requests(m: &ModelServer) -> Vec<Value> {
    control(&m.url, "GET", "/_requests", None)
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Polls `f` until it returns `Some` (at most ~20 s).
fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let begun = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            begun.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The node's chat lines on disk.
fn lines(root: &Path, node: &str) -> Vec<Value> {
    std::fs::read_to_string(root.join("nodes").join(node).join("chat.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn entries(ls: &[Value]) -> Vec<String> {
    ls.iter()
        .filter_map(|l| l["agent"]["entry"].as_str().map(str::to_owned))
        .collect()
}

/// SSE events `(name, data)` of `/api/actors/events`, read on a thread.
fn sse(addr: &str) -> Receiver<(String, Value)> {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /api/actors/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nAuthorization: Bearer {HUMAN}\r\n\r\n"
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(s);
        let mut name = String::new();
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = line.trim_end();
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_owned();
            } else if let Some(d) = line.strip_prefix("data: ")
                && let Ok(v) = serde_json::from_str::<Value>(d)
                && tx.send((std::mem::take(&mut name), v)).is_err()
            {
                return;
            }
        }
    });
    // The stream's first event is the current version: the subscription is live.
    let (n, _) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(n, "change");
    rx
}

/// Collects events until `stop` matches one (at most ~20 s).
fn collect(
    rx: &Receiver<(String, Value)>,
    stop: impl Fn(&str, &Value) -> bool,
) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let begun = Instant::now();
    while begun.elapsed() < Duration::from_secs(20) {
        if let Ok((n, v)) = rx.recv_timeout(Duration::from_millis(200)) {
            let done = stop(&n, &v);
            out.push((n, v));
            if done {
                return out;
            }
        }
    }
    panic!("the awaited event never came; got {out:?}");
}

#[test]
fn a_typed_line_streams_the_agents_reply_and_the_turn_is_on_disk() {
    let m = ModelServer::start();
    script(
        &m,
        json!([{"text": "Hello from the coordinator's agent.", "chunkSize": 6}]),
    );
    let dir = TempDir::new("agents-http");
    let data = dir.0.join("data");
    let s = start(&data, &m, &[]);
    // No agent before anyone writes (the node exists).
    assert_eq!(
        get(&s, "/api/actors/nodes/coordinator/agent").1["code"],
        "AGENT_NOT_OPEN"
    );
    let events = sse(&s.addr);
    let (st, r) = post(
        &s,
        "/api/actors/nodes/coordinator/messages",
        json!({"text": "hi agent"}),
    );
    assert_eq!((st, &r["outcome"]), (200, &json!("continued")), "{r}");
    let got = collect(&events, |n, v| n == "agent" && v["output"] == "turn_ended");
    let deltas: Vec<&Value> = got
        .iter()
        .filter(|(n, _)| n == "delta")
        .map(|(_, v)| v)
        .collect();
    assert!(deltas.len() > 1, "the reply streamed in pieces: {got:?}");
    assert!(deltas.iter().all(|d| d["node"] == "coordinator"));
    let text: String = deltas.iter().map(|d| d["text"].as_str().unwrap()).collect();
    assert_eq!(text, "Hello from the coordinator's agent.");
    let outputs: Vec<&str> = got
        .iter()
        .filter(|(n, _)| n == "agent")
        .map(|(_, v)| v["output"].as_str().unwrap())
        .collect();
    assert_eq!(outputs.first(), Some(&"turn_started"));
    assert!(outputs.contains(&"model_request"));
    assert_eq!(got.last().unwrap().1["end"], "completed");

    // The turn's lines, in order, with the node.
    let ls = lines(&data.join("chat"), "coordinator");
    let tail: Vec<(&str, &str)> = ls[ls.len() - 4..]
        .iter()
        .map(|l| (l["role"].as_str().unwrap(), l["text"].as_str().unwrap()))
        .collect();
    assert_eq!(tail[0], ("user", "hi agent"));
    assert_eq!(
        tail[2],
        ("assistant", "Hello from the coordinator's agent.")
    );
    assert_eq!(
        entries(&ls[ls.len() - 3..]),
        ["turn_start", "assistant", "turn_end"]
    );
    // The request was built from the node slice, with the graph tools.
    let reqs = requests(&m);
    assert_eq!(reqs.len(), 1);
    let body = &reqs[0]["body"];
    assert_eq!(body["model"], "test-agent");
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["role"], "system");
    assert_eq!(
        msgs.last().unwrap(),
        &json!({"role": "user", "content": "hi agent"})
    );
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"spawn"), "{tools:?}");

    let (st, a) = get(&s, "/api/actors/agents");
    assert_eq!(st, 200);
    assert_eq!(a["model"]["configured"], true);
    assert_eq!(a["model"]["name"], "test-agent");
    assert_eq!(a["agents"]["coordinator"]["phase"], "idle");
    let (st, a) = get(&s, "/api/actors/nodes/coordinator/agent");
    assert_eq!((st, &a["phase"]), (200, &json!("idle")));
    let (st, a) = get(&s, "/api/actors/nodes/nobody/agent");
    assert_eq!((st, a["code"].as_str()), (404, Some("UNKNOWN_NODE")));
    let (st, a) = post(&s, "/api/actors/nodes/nobody/interrupt", json!({}));
    assert_eq!((st, a["code"].as_str()), (404, Some("UNKNOWN_NODE")));
}

#[test]
fn a_spawn_tool_call_opens_a_child_agent_and_an_enforced_wait_blocks_until_it_is_done() {
    let m = ModelServer::start();
    script(
        &m,
        json!([
            {"calls": [
                {"id": "call-1", "name": "spawn", "arguments": {
                    "type": "task", "title": "Docs sync", "message": "Write the release notes."}},
                {"id": "call-2", "name": "wait_on", "arguments": {
                    "node": "docs-sync", "mode": "enforce"}}]},
            {"text": "working on the notes", "hang": true},
            {"text": "The child is done: notes written."}
        ]),
    );
    let dir = TempDir::new("agents-spawn");
    let data = dir.0.join("data");
    let root = data.join("chat");
    let s = start_env(&data, &m, &[], &[("ACTOR_WAIT_GRAPH", "enforce")]);
    let events = sse(&s.addr);
    let (st, _) = post(
        &s,
        "/api/actors/nodes/coordinator/messages",
        json!({"text": "please get the release notes written"}),
    );
    assert_eq!(st, 200);
    let got = collect(&events, |n, v| n == "agent" && v["output"] == "waiting");
    let child = got
        .iter()
        .find(|(n, v)| n == "agent" && v["output"] == "spawned")
        .map(|(_, v)| v["child"].as_str().unwrap().to_owned())
        .expect("a spawned event");
    let waiting = &got.last().unwrap().1;
    assert_eq!(waiting["node"], "coordinator");
    assert_eq!(waiting["on"], json!([child]));

    // The child has its own agent, asking the model about its own first line.
    until("the child's model request", || {
        (requests(&m).len() == 2).then_some(())
    });
    let reqs = requests(&m);
    let last = reqs[1]["body"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last,
        json!({"role": "user", "content": "Write the release notes."})
    );
    let (_, a) = get(&s, "/api/actors/agents");
    assert_eq!(a["agents"][&child]["phase"], "model_step", "{a}");
    assert_eq!(a["agents"]["coordinator"]["phase"], "waiting");
    assert_eq!(a["agents"]["coordinator"]["waiting"], json!([child]));

    // Interrupting the child drops its stream; the parent still waits (the child is not done).
    let (st, r) = post(
        &s,
        &format!("/api/actors/nodes/{child}/interrupt"),
        json!({"reason": "enough"}),
    );
    assert_eq!(st, 200, "{r}");
    m_wait_closed(&m, 1);
    until("the child's interrupted turn", || {
        lines(&root, &child)
            .iter()
            .any(|l| l["agent"]["entry"] == "turn_end" && l["agent"]["end"] == "interrupted")
            .then_some(())
    });
    let (_, a) = get(&s, "/api/actors/nodes/coordinator/agent");
    assert_eq!(a["phase"], "waiting");
    assert_eq!(requests(&m).len(), 2, "the parent's step did not run");

    // The child's status turns done: the parent's step is released by itself.
    let (st, _) = post(
        &s,
        &format!("/api/actors/nodes/{child}/status"),
        json!({"status": "done", "summary": "release notes written"}),
    );
    assert_eq!(st, 200);
    let got = collect(&events, |n, v| {
        n == "agent" && v["node"] == "coordinator" && v["output"] == "turn_ended"
    });
    assert!(
        got.iter()
            .any(|(n, v)| n == "agent" && v["output"] == "wait_over" && v["node"] == "coordinator")
    );
    let c = lines(&root, "coordinator");
    let kinds = entries(&c);
    let pos = |k: &str| kinds.iter().position(|x| x == k).unwrap();
    assert!(pos("wait") < pos("wait_end"), "{kinds:?}");
    assert_eq!(c.last().unwrap()["agent"]["end"], "completed");
    let answer = c.iter().rev().find(|l| l["role"] == "assistant").unwrap();
    assert_eq!(answer["text"], "The child is done: notes written.");
    // The spawn's result is a routing marker on the discussion surface.
    assert!(
        c.iter()
            .any(|l| l["role"] == "routing" && l["agent"]["entry"] == "tool_result")
    );
    // The parent's resumed step read the child's mailbox, never its transcript.
    let reqs = requests(&m);
    assert_eq!(reqs.len(), 3);
    let sys = reqs[2]["body"]["messages"][0]["content"].as_str().unwrap();
    assert!(sys.contains("release notes written"), "{sys}");
    assert!(!sys.contains("working on the notes"));
    // The child's lines are its own.
    let kids = entries(&lines(&root, &child));
    assert_eq!(kids.first().map(String::as_str), Some("turn_start"));
}

fn m_wait_closed(m: &ModelServer, i: usize) {
    until("the dropped stream", || {
        requests(m)
            .get(i)
            .is_some_and(|r| r["closedByClient"] == true)
            .then_some(())
    });
}

#[cfg(unix)]
#[test]
fn sigkill_during_a_streaming_step_then_restart_records_it_interrupted_and_reruns_nothing() {
    let m = ModelServer::start();
    script(
        &m,
        json!([{"text": "a long answer that is still streaming", "hang": true}]),
    );
    let dir = TempDir::new("agents-crash");
    let data = dir.0.join("data");
    let root = data.join("chat");
    let s = start(&data, &m, &[]);
    let (st, _) = post(
        &s,
        "/api/actors/nodes/coordinator/messages",
        json!({"text": "first question"}),
    );
    assert_eq!(st, 200);
    until("the streaming step", || {
        (requests(&m).len() == 1).then_some(())
    });
    until("the turn's start on disk", || {
        entries(&lines(&root, "coordinator"))
            .contains(&"turn_start".to_owned())
            .then_some(())
    });
    s.kill(); // SIGKILL: nothing beyond what was acknowledged
    m_wait_closed(&m, 0);
    let before = lines(&root, "coordinator");
    assert!(!before.iter().any(|l| l["role"] == "assistant"));
    assert_eq!(
        entries(&before).last().map(String::as_str),
        Some("turn_start")
    );

    // Restart on the same root: the agent resumes from disk before the server answers.
    script(&m, json!([{"text": "Second answer."}]));
    let s = start(&data, &m, &[]);
    let after = lines(&root, "coordinator");
    assert_eq!(after.len(), before.len() + 1, "one recovery line");
    let end = &after.last().unwrap()["agent"];
    assert_eq!(end["entry"], "turn_end");
    assert_eq!(end["end"], "interrupted");
    assert!(
        end["reason"].as_str().unwrap().contains("host restarted"),
        "{end}"
    );
    let (_, a) = get(&s, "/api/actors/nodes/coordinator/agent");
    assert_eq!(a["phase"], "idle");

    // A second message works; the interrupted step was not asked again.
    let events = sse(&s.addr);
    post(
        &s,
        "/api/actors/nodes/coordinator/messages",
        json!({"text": "second question"}),
    );
    collect(&events, |n, v| n == "agent" && v["output"] == "turn_ended");
    let reqs = requests(&m);
    assert_eq!(reqs.len(), 2, "nothing was re-run");
    // The next turn is admitted with the interrupted question and the core's note about it.
    let msgs = reqs[1]["body"]["messages"].as_array().unwrap();
    let last = msgs.last().unwrap();
    assert_eq!(last["role"], "user");
    let text = last["content"].as_str().unwrap();
    assert!(text.starts_with("first question"), "{text}");
    assert!(text.contains("interrupted: host restarted"), "{text}");
    assert!(text.ends_with("second question"), "{text}");
    let ls = lines(&root, "coordinator");
    assert_eq!(ls.last().unwrap()["agent"]["end"], "completed");
    let answers: Vec<&Value> = ls.iter().filter(|l| l["role"] == "assistant").collect();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["text"], "Second answer.");
}

#[test]
fn the_harness_fixture_root_keeps_its_lineage_with_agents_running() {
    let fixture = common::repo().join("../shared/fixtures/harness-root");
    assert!(
        fixture.join("graph.json").is_file(),
        "the shared fixture is missing"
    );
    let m = ModelServer::start();
    // A harness node's unanswered user lines are pending tasks too: one reply each.
    script(&m, Value::Array(vec![json!({"text": "Noted."}); 8]));
    let dir = TempDir::new("agents-fixture");
    let root = dir.0.join("root");
    common::copy_dir(&fixture, &root);
    let before = common::snapshot(&root);
    let lineage = |d: &common::Disk| -> Vec<(String, Value, Value, Value)> {
        d.metas
            .iter()
            .map(|(k, m)| {
                (
                    k.clone(),
                    m["type"].clone(),
                    m["spawnedBy"].clone(),
                    m["spawned"].clone(),
                )
            })
            .collect()
    };
    let expected = lineage(&common::read_disk(&root));
    let s = start(
        &dir.0.join("data"),
        &m,
        &["--chat-root", root.to_str().unwrap()],
    );
    // Opening it with agents running writes nothing: no node was run by an agent yet.
    let (st, a) = get(&s, "/api/actors/agents");
    assert_eq!((st, &a["agents"]), (200, &json!({})));
    s.stop();
    let after = common::snapshot(&root);
    let changed: Vec<&String> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v) && !k.starts_with(".weft"))
        .map(|(k, _)| k)
        .collect();
    assert!(changed.is_empty(), "opening rewrote {changed:?}");

    // A typed line gets an answer; the lineage stays identical and valid.
    let s = start(
        &dir.0.join("data"),
        &m,
        &["--chat-root", root.to_str().unwrap()],
    );
    let events = sse(&s.addr);
    post(
        &s,
        "/api/actors/nodes/coordinator/messages",
        json!({"text": "status?"}),
    );
    collect(&events, |n, v| n == "agent" && v["output"] == "turn_ended");
    until("the coordinator's agent to be quiet", || {
        let (_, a) = get(&s, "/api/actors/nodes/coordinator/agent");
        (a["phase"] == "idle" && a["queuedTasks"] == 0).then_some(())
    });
    s.stop();
    let d = common::read_disk(&root);
    assert_eq!(lineage(&d), expected);
    assert_eq!(common::lineage_problems(&d), Vec::<String>::new());
    let c = &d.chats["coordinator"];
    let ends: Vec<&Value> = c
        .iter()
        .filter(|l| l["agent"]["entry"] == "turn_end")
        .collect();
    assert!(!ends.is_empty());
    assert!(
        ends.iter().all(|l| l["agent"]["end"] == "completed"),
        "{ends:?}"
    );
    assert_eq!(c.last().unwrap()["agent"]["entry"], "turn_end");
    assert!(
        c.iter()
            .any(|l| l["role"] == "assistant" && l["text"] == "Noted.")
    );
}

#[test]
fn a_task_nodes_agent_drives_threaddesk_with_the_dgp_tools_and_the_coordinator_stays_clean() {
    let m = ModelServer::start();
    script(
        &m,
        json!([
            // The coordinator spawns a task node and waits for it (enforced).
            {"calls": [
                {"id": "call-1", "name": "spawn", "arguments": {
                    "type": "task", "title": "Desk triage", "message": "Drive thread-73 once."}},
                {"id": "call-2", "name": "wait_on", "arguments": {
                    "node": "desk-triage", "mode": "enforce"}}]},
            // The task node's agent lists the surfaces, then drives one for one step.
            {"calls": [{"id": "t-1", "name": "dgp_surfaces", "arguments": {}}]},
            {"calls": [{"id": "t-2", "name": "dgp_run_surface", "arguments": {
                "surface_id": "thread-73", "max_steps": 1}}]},
            // The judge is the agents' model.
            {"text": "{\"choice\": \"investigate\", \"reason\": \"scripted judge\"}"},
            {"text": "thread-73 is under investigation."}
        ]),
    );
    let dir = TempDir::new("agents-dgp");
    let data = dir.0.join("data");
    let root = data.join("chat");
    let s = start_env(&data, &m, &[], &[("ACTOR_WAIT_GRAPH", "enforce")]);
    let (st, _) = post(
        &s,
        "/api/actors/nodes/coordinator/messages",
        json!({"text": "please triage the CI threads"}),
    );
    assert_eq!(st, 200);
    let child = "desk-triage";
    until("the task node's finished turn", || {
        lines(&root, child)
            .iter()
            .any(|l| l["agent"]["entry"] == "turn_end")
            .then_some(())
    });
    let (_, a) = get(&s, "/api/actors/agents");
    assert_eq!(a["agents"][child]["phase"], "idle", "{a}");
    let kid = lines(&root, child);
    let results: Vec<&Value> = kid
        .iter()
        .filter(|l| l["agent"]["entry"] == "tool_result")
        .collect();
    let tools: Vec<(&str, &str, &str)> = results
        .iter()
        .map(|l| {
            (
                l["role"].as_str().unwrap(),
                l["agent"]["tool"].as_str().unwrap(),
                l["agent"]["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tools,
        [
            ("tool", "dgp_surfaces", "succeeded"),
            ("tool", "dgp_run_surface", "succeeded")
        ],
        "{kid:?}"
    );
    assert_eq!(kid.last().unwrap()["agent"]["end"], "completed");
    let listed = &results[0]["agent"]["value"]["surfaces"];
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["surface_id"] == "thread-73"),
        "{listed}"
    );
    let run = &results[1]["agent"]["value"];
    assert_eq!(run["surface_id"], "thread-73");
    let commits = run["commits"].as_array().unwrap();
    assert_eq!(commits.len(), 1, "{run}");
    // ThreadDesk recorded the commit: its receipt is served and the thread moved on.
    let id = commits[0]["receipt_id"].as_str().unwrap();
    let auth = format!("Bearer {}", support::AGENT);
    let r = http(
        &s.addr,
        "GET",
        &format!("/dgp/receipts/{id}"),
        &[("authorization", &auth)],
        None,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["receipt_id"], id);
    let list = http(
        &s.addr,
        "GET",
        "/dgp/surfaces",
        &[("authorization", &auth)],
        None,
    )
    .json();
    let t73 = list["surfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["surface_id"] == "thread-73")
        .unwrap()
        .clone();
    assert_eq!(t73["state"], "investigating", "{t73}");
    // The judgment was the agents' model's, recorded with its resolver.
    let assessed = run["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "assessed")
        .unwrap();
    let resolver = &assessed["assessment"]["resolver"];
    assert_eq!(
        (&resolver["kind"], &resolver["model"]),
        (&json!("llm"), &json!("test-agent")),
        "{assessed}"
    );
    let reqs = requests(&m);
    assert_eq!(reqs.len(), 5);
    let names = |i: usize| -> Vec<String> {
        reqs[i]["body"]["tools"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    // Cadence: the task node is offered the DGP tools, the coordinator never is, and its
    // chat holds no tool lines.
    assert!(
        names(1).contains(&"dgp_run_surface".to_owned()),
        "{:?}",
        names(1)
    );
    assert!(
        !names(0).iter().any(|n| n.starts_with("dgp_")),
        "{:?}",
        names(0)
    );
    let c = lines(&root, "coordinator");
    assert!(!c.iter().any(|l| l["role"] == "tool"), "{c:?}");
    assert_eq!(
        get(&s, "/api/actors/nodes/coordinator/agent").1["phase"],
        "waiting"
    );
}
