//! Unit tests of agents on nodes beyond the shared vectors (`tests/vectors/agents.json`).

use serde_json::{Value, json};

use super::*;
use crate::actors::store::{ActorStore, MemoryStore};
use crate::actors::vectors::BASE;
use crate::actors::{HarnessConfig, SpawnRequest};
use crate::tools::ModelResponse;

fn graph() -> (ActorGraph, MemoryStore) {
    let mut store = MemoryStore::default();
    let snap = store.load().unwrap();
    let g = ActorGraph::init(HarnessConfig::default(), "/chat", &snap, BASE, "t").unwrap();
    (g, store)
}

/// `ms` after [`BASE`] on both clocks (the monotonic one starts at 0).
fn at(ms: u64) -> Now {
    Now::new(Mono::from_ms(ms), BASE + ms)
}

fn flush(g: &mut ActorGraph, store: &mut MemoryStore) {
    for b in g.take_batches() {
        store.apply(&b).unwrap();
        g.ack(b.id).unwrap();
    }
}

fn outputs(a: &mut NodeAgent, g: &ActorGraph) -> Vec<Value> {
    std::iter::from_fn(|| a.poll_output(g))
        .map(|o| o.to_json())
        .collect()
}

/// One user line and the model's answer; returns the answered step's output names.
fn turn(a: &mut NodeAgent, g: &mut ActorGraph, store: &mut MemoryStore, now: Now, text: &str) {
    g.append(now.wall, "coordinator", crate::actors::NewLine::user(text))
        .unwrap();
    flush(g, store);
    a.sync(now, g).unwrap();
    flush(g, store);
    let outs = outputs(a, g);
    assert!(
        outs.iter().any(|o| o["output"] == "model_request"),
        "{outs:?}"
    );
    let input = a.model_input(g).expect("released step");
    a.on_model_response(now, g, input.step, input.builtin_answer())
        .unwrap();
    flush(g, store);
    outputs(a, g);
}

#[test]
fn memory_holds_one_step_while_the_node_holds_the_conversation() {
    let (mut g, mut store) = graph();
    flush(&mut g, &mut store);
    let (mut a, _) = NodeAgent::open(at(0), &mut g, "coordinator", AgentConfig::default()).unwrap();
    for i in 0..200 {
        turn(&mut a, &mut g, &mut store, at(i), &format!("message {i}"));
        assert_eq!(a.held_entries(), 0, "the session forgets what is on disk");
        assert_eq!(a.held_outputs(), 0);
    }
    // 200 turns × (user, turn_start, assistant, turn_end) plus the root's first lines.
    let lines = g.chat("coordinator").unwrap().len();
    assert!(lines >= 800, "{lines}");
    // The slice is bounded by the budget, not by the conversation.
    g.append(
        BASE + 999,
        "coordinator",
        crate::actors::NewLine::user("last"),
    )
    .unwrap();
    flush(&mut g, &mut store);
    a.sync(at(999), &mut g).unwrap();
    flush(&mut g, &mut store);
    outputs(&mut a, &g);
    let input = a.model_input(&g).unwrap();
    assert!(input.messages.len() < 400, "{}", input.messages.len());
    assert_eq!(input.last_user_text().as_deref(), Some("last"));
}

#[test]
fn agent_lines_are_read_by_readers_that_ignore_unknown_fields() {
    let (mut g, mut store) = graph();
    flush(&mut g, &mut store);
    let (mut a, _) = NodeAgent::open(at(0), &mut g, "coordinator", AgentConfig::default()).unwrap();
    turn(&mut a, &mut g, &mut store, at(1), "hello");
    let text = String::from_utf8(store.files["nodes/coordinator/chat.jsonl"].clone()).unwrap();
    // A harness-style reader: role and text, nothing else.
    #[derive(serde::Deserialize)]
    struct Minimal {
        role: String,
        text: String,
    }
    let lines: Vec<Minimal> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.role == "assistant" && l.text.contains("built-in model"))
    );
    assert!(lines.iter().all(|l| !l.role.is_empty()));
    // Reopening the store keeps lineage and reads every line.
    let snap = store.load().unwrap();
    let (g2, report) =
        ActorGraph::open(HarnessConfig::default(), "/chat", &snap, BASE + 2).unwrap();
    assert!(report.diagnostics.is_empty(), "{:?}", report.diagnostics);
    assert_eq!(g2.chat("coordinator").unwrap().len(), lines.len());
    assert!(g2.lineage_violations().is_empty());
}

#[test]
fn host_tools_cannot_take_graph_tool_names_and_bad_input_changes_nothing() {
    let (mut g, mut store) = graph();
    flush(&mut g, &mut store);
    g.spawn(BASE, SpawnRequest::new("coordinator", NodeType::Task))
        .unwrap();
    flush(&mut g, &mut store);
    let id = g.node("coordinator").unwrap().spawned[0].to_string();
    let (mut a, _) = NodeAgent::open(at(0), &mut g, &id, AgentConfig::default()).unwrap();
    let e = a
        .register_tool(ToolDecl::new("spawn", "mine", json!({"type": "object"})))
        .unwrap_err();
    assert_eq!(e.code(), "AGENT_TOOL_RESERVED");
    let before = g.chat(&id).unwrap().len();
    let e = a
        .on_model_response(at(0), &mut g, StepId(99), ModelResponse::text("x"))
        .unwrap_err();
    assert_eq!(e.code(), "STALE_STEP");
    assert_eq!(g.chat(&id).unwrap().len(), before);
    assert!(!g.has_batches());
    assert_eq!(
        NodeAgent::open(at(0), &mut g, "nope", AgentConfig::default())
            .unwrap_err()
            .code(),
        "UNKNOWN_NODE"
    );
}

#[test]
fn admit_utterance_appends_with_a_model_and_routes_without_one() {
    let (mut g, mut store) = graph();
    flush(&mut g, &mut store);
    g.spawn(BASE, SpawnRequest::new("coordinator", NodeType::Task))
        .unwrap();
    flush(&mut g, &mut store);
    let task = g.node("coordinator").unwrap().spawned[0].to_string();
    // With a model, a non-task utterance in a task node stays there: the agent decides.
    let r = admit_utterance(BASE, &mut g, &task, "what about lunch?", true).unwrap();
    assert_eq!(r["outcome"], "continued");
    flush(&mut g, &mut store);
    // Without one, the heuristic's policy trigger spawns a discussion child.
    let r = admit_utterance(BASE, &mut g, &task, "what about dinner?", false).unwrap();
    assert_eq!(r["outcome"], "spawned", "{r}");
}

#[test]
fn a_journal_event_and_a_note_are_persisted_on_the_wall_clock() {
    // The registry stamps events and notes on the monotonic clock (here: `at` ms after the
    // vector's start, on a wall clock `BASE` later); what lands on disk is the wall time.
    let v = json!({
        "name": "monotonic `at`s are written as wall time",
        "steps": [
            {"op": "spawn", "parent": "coordinator", "type": "task", "id": "task-a", "title": "A"},
            {"op": "agent", "node": "task-a", "tools": [{"name": "render", "mayStartJob": true}]},
            {"op": "say", "node": "task-a", "text": "render"},
            {"op": "model", "node": "task-a", "calls": [{"id": "r1", "name": "render", "arguments": {}}]},
            {"op": "job", "node": "task-a", "call": "r1", "job": 7},
            {"at": 500, "op": "jobEvent", "node": "task-a",
             "event": {"job": 7, "seq": 1, "at": 120, "type": "submitted"},
             "files": {"nodes/task-a/jobs.jsonl": [{"seq": 1, "at": BASE.as_ms() + 120}]}},
            {"at": 900, "op": "note", "node": "task-a", "job": 7, "summary": "done",
             "lines": {"task-a": [{"agent": {"entry": "mail", "at": BASE.as_ms() + 900,
                                             "note": {"job": 7, "at": BASE.as_ms() + 900}}}]}}
        ]
    });
    let r = super::vectors::run_vector(&v);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
}
