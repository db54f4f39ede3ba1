//! The native agent runtime inside `weft serve` (issue 11, hosts), over real processes and the
//! scripted model server (`tests/model-server/server.mjs`): a typed line streams a reply (SSE
//! `delta` + `agent` events, lines on disk); a `spawn` tool call opens a child with its own
//! agent; an enforced wait blocks the parent until the child is done, then resumes; SIGKILL
//! during a streaming step and a restart record the turn interrupted ("host restarted") and
//! re-run nothing; the harness fixture root keeps its lineage with agents running; a spawned
//! task node's agent drives ThreadDesk with the DGP tools (the coordinator never gets them); an
//! observer that reconnects with `Last-Event-ID` gets the agent lines it missed, once, in order;
//! a streaming step's text so far is served by `…/agent`; SIGTERM mid-stream exits 0 with the
//! turn interrupted ("host stopped") and a restart adds no second interruption.

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

/// One SSE event: `(name, id, data)`; `id` is `None` when the event carries none.
type Sse = (String, Option<String>, Value);

/// `/api/actors/events` with `last` as `Last-Event-ID` (or, with `query`, as
/// `?lastEventId=`): the events read on a thread, and the socket (shut it down to disconnect).
fn sse_from(addr: &str, last: Option<&str>, query: bool) -> (Receiver<Sse>, TcpStream) {
    let mut s = TcpStream::connect(addr).unwrap();
    let (path, header) = match (last, query) {
        (Some(l), true) => (format!("/api/actors/events?lastEventId={l}"), String::new()),
        (Some(l), false) => (
            "/api/actors/events".to_owned(),
            format!("Last-Event-ID: {l}\r\n"),
        ),
        (None, _) => ("/api/actors/events".to_owned(), String::new()),
    };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nAuthorization: Bearer {HUMAN}\r\n{header}\r\n"
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let r = s.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let (mut name, mut id) = (String::new(), None);
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = line.trim_end();
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_owned();
            } else if let Some(i) = line.strip_prefix("id: ") {
                id = Some(i.to_owned());
            } else if let Some(d) = line.strip_prefix("data: ")
                && let Ok(v) = serde_json::from_str::<Value>(d)
                && tx.send((std::mem::take(&mut name), id.take(), v)).is_err()
            {
                return;
            }
        }
    });
    (rx, s)
}

/// Events of `rx` until `stop` matches one (at most ~20 s).
fn collect_ids(rx: &Receiver<Sse>, stop: impl Fn(&Sse) -> bool) -> Vec<Sse> {
    let mut out = Vec::new();
    let begun = Instant::now();
    while begun.elapsed() < Duration::from_secs(20) {
        if let Ok(e) = rx.recv_timeout(Duration::from_millis(200)) {
            let done = stop(&e);
            out.push(e);
            if done {
                return out;
            }
        }
    }
    panic!("the awaited event never came; got {out:?}");
}

/// The ids of the durable agent-line events among `evs`.
fn line_ids(evs: &[Sse]) -> Vec<String> {
    evs.iter()
        .filter(|(n, _, v)| n == "agent" && v["output"] == "line")
        .map(|(_, id, _)| id.clone().expect("a durable event has an id"))
        .collect()
}

#[test]
fn an_observer_that_reconnects_with_last_event_id_gets_the_agent_lines_it_missed_once() {
    let m = ModelServer::start();
    script(
        &m,
        json!([{"text": "A slow answer, streamed in many small pieces.", "chunkSize": 4, "delayMs": 60}]),
    );
    let dir = TempDir::new("agents-resume");
    let s = start(&dir.0.join("data"), &m, &[]);
    // `whole` stays connected: the truth. `a` disconnects mid-turn and comes back.
    let (whole, _w) = sse_from(&s.addr, None, false);
    let (a, a_sock) = sse_from(&s.addr, None, false);
    for rx in [&whole, &a] {
        let (n, id, _) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!(
            (n.as_str(), id.as_deref()),
            ("change", Some("-")),
            "no line yet"
        );
    }
    let (st, _) = post(
        &s,
        "/api/actors/nodes/coordinator/messages",
        json!({"text": "tell me slowly"}),
    );
    assert_eq!(st, 200);
    let first = collect_ids(&a, |(n, _, v)| n == "agent" && v["output"] == "line");
    let seen = line_ids(&first);
    assert_eq!(first.last().unwrap().2["entry"], "turn_start", "{first:?}");
    a_sock.shutdown(std::net::Shutdown::Both).unwrap();
    drop(a);
    // The turn ends while `a` is away.
    let all = collect_ids(&whole, |(n, _, v)| {
        n == "agent" && v["output"] == "line" && v["entry"] == "turn_end"
    });
    let truth = line_ids(&all);
    assert!(truth.starts_with(&seen), "{truth:?} {seen:?}");
    let missed = &truth[seen.len()..];
    assert!(
        missed.len() >= 2,
        "the answer and the turn's end: {truth:?}"
    );
    // Back with Last-Event-ID: exactly the missed lines, in order, then the `change` event
    // carrying the newest id; the replayed data is the line on disk.
    let last = seen.last().unwrap().clone();
    let (b, _b) = sse_from(&s.addr, Some(&last), false);
    let back = collect_ids(&b, |(n, _, _)| n == "change");
    assert_eq!(line_ids(&back), missed, "{back:?}");
    assert_eq!(
        back.last().unwrap().1.as_deref(),
        truth.last().map(String::as_str)
    );
    let root = dir.0.join("data").join("chat");
    let disk = lines(&root, "coordinator");
    for (_, id, v) in back.iter().filter(|(n, _, _)| n == "agent") {
        let seq: usize = id
            .as_ref()
            .unwrap()
            .rsplit_once(':')
            .unwrap()
            .1
            .parse()
            .unwrap();
        assert_eq!(v["line"], disk[seq - 1]);
    }
    assert_eq!(
        back.iter()
            .filter(|(_, _, v)| v["entry"] == "assistant")
            .map(|(_, _, v)| v["line"]["text"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["A slow answer, streamed in many small pieces."]
    );
    // The same with the polyfill's query; an id the server does not know is one `reset`.
    let (q, _q) = sse_from(&s.addr, Some(&last), true);
    assert_eq!(
        line_ids(&collect_ids(&q, |(n, _, _)| n == "change")),
        missed
    );
    let (r, _r) = sse_from(&s.addr, Some("nowhere:7"), false);
    let reset = collect_ids(&r, |(n, _, _)| n == "change");
    let names: Vec<&str> = reset.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["reset", "change"]);
    // After the replay the stream is live: the next turn's lines come once each.
    script(&m, json!([{"text": "Again."}]));
    post(
        &s,
        "/api/actors/nodes/coordinator/messages",
        json!({"text": "once more"}),
    );
    let next = collect_ids(&b, |(n, _, v)| {
        n == "agent" && v["output"] == "line" && v["entry"] == "turn_end"
    });
    let ids = line_ids(&next);
    let mut uniq = ids.clone();
    uniq.dedup();
    assert_eq!(uniq, ids);
    assert!(ids.iter().all(|i| !truth.contains(i)), "{ids:?}");
}

#[cfg(unix)]
#[test]
fn a_streaming_steps_text_is_served_and_sigterm_records_the_turn_interrupted() {
    let m = ModelServer::start();
    let text = "a long answer that is still streaming";
    script(&m, json!([{"text": text, "hang": true}]));
    let dir = TempDir::new("agents-sigterm");
    let data = dir.0.join("data");
    let root = data.join("chat");
    let mut s = start(&data, &m, &[]);
    let (st, _) = post(
        &s,
        "/api/actors/nodes/coordinator/messages",
        json!({"text": "first question"}),
    );
    assert_eq!(st, 200);
    // Mid-stream (the model server sent every piece and holds the stream open), the node's
    // agent and the agents list carry the text so far.
    let a = until("the partial text", || {
        let (_, a) = get(&s, "/api/actors/nodes/coordinator/agent");
        (a["streaming"]["text"] == text).then_some(a)
    });
    assert_eq!(a["phase"], "model_step");
    assert_eq!(a["streaming"]["length"], text.encode_utf16().count());
    assert_eq!(a["streaming"]["truncated"], false);
    let (_, all) = get(&s, "/api/actors/agents");
    assert_eq!(all["agents"]["coordinator"]["streaming"]["text"], text);
    assert!(
        !lines(&root, "coordinator")
            .iter()
            .any(|l| l["role"] == "assistant")
    );

    // SIGTERM: the step is interrupted through the core and the process ends 0, promptly.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status();
    let begun = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            begun.elapsed() < Duration::from_secs(15),
            "weft serve did not stop"
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    assert!(status.success(), "{status:?}");
    m_wait_closed(&m, 0);
    let before = lines(&root, "coordinator");
    let end = &before.last().unwrap()["agent"];
    assert_eq!(end["entry"], "turn_end");
    assert_eq!(end["end"], "interrupted");
    let reason = end["reason"].as_str().unwrap();
    assert!(reason.contains("host stopped"), "{end}");
    assert!(!reason.contains("host restarted"), "{end}");

    // A restart finds nothing to recover: no second interruption.
    drop(s);
    let s = start(&data, &m, &[]);
    assert_eq!(lines(&root, "coordinator"), before);
    let (_, a) = get(&s, "/api/actors/nodes/coordinator/agent");
    assert_eq!(
        (&a["phase"], &a["streaming"]),
        (&json!("idle"), &Value::Null)
    );
    assert_eq!(requests(&m).len(), 1, "nothing was re-run");
}
