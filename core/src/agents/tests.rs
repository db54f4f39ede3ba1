//! Unit tests of agents on nodes beyond the shared vectors (`tests/vectors/agents.json`).

use serde_json::{Value, json};

use super::*;
use crate::actors::store::{ActorStore, MemoryStore};
use crate::actors::vectors::BASE;
use crate::actors::{HarnessConfig, SpawnRequest, WriteBatch};
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
        let done = store.perform(&b).unwrap();
        g.ack(done).unwrap();
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

/// The batches queued so far: (durability, the `agent.entry` kinds and roles of their lines).
fn queued(g: &mut ActorGraph) -> Vec<(Durability, Vec<String>, WriteBatch)> {
    g.take_batches()
        .into_iter()
        .map(|b| {
            let kinds = b
                .stages
                .iter()
                .flatten()
                .flat_map(|op| match op {
                    crate::actors::Op::Append { text, .. } => text
                        .lines()
                        .map(|l| {
                            let v: Value = serde_json::from_str(l).unwrap();
                            v[AGENT_FIELD]["entry"].as_str().map_or_else(
                                || v["role"].as_str().unwrap().to_owned(),
                                str::to_owned,
                            )
                        })
                        .collect::<Vec<_>>(),
                    _ => Vec::new(),
                })
                .collect();
            (b.sync, kinds, b)
        })
        .collect()
}

fn names(outs: &[Value]) -> Vec<&str> {
    outs.iter().map(|o| o["output"].as_str().unwrap()).collect()
}

/// The durability rule of a turn (module docs, "Durability before effects"): the lines before
/// a read (the person's line acknowledged with the turn's end, `turn_start`, a call's result
/// before the next model request) are written only; every effect (a call started, the turn's
/// end) waits for a synced batch that holds every line before it; a line acknowledged on
/// store, and mail, are synced. A plain turn is thus one synced batch.
#[test]
fn lines_before_a_read_are_written_and_every_effect_waits_for_a_synced_batch() {
    let (mut g, mut store) = graph();
    flush(&mut g, &mut store);
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.id = Some("work".into());
    g.spawn(BASE, r).unwrap();
    flush(&mut g, &mut store);
    let (mut a, _) = NodeAgent::open(at(0), &mut g, "work", AgentConfig::default()).unwrap();
    flush(&mut g, &mut store);
    a.register_tool(ToolDecl::new(
        "probe",
        "A test tool.",
        json!({"type": "object", "properties": {}}),
    ))
    .unwrap();

    // The person's line (acknowledged with the turn's end) and `turn_start`: one written
    // batch; the reads go out before it is performed.
    admit_user_line(BASE + 1, &mut g, "work", "probe it", LineAck::WithTurnEnd).unwrap();
    a.sync(at(1), &mut g).unwrap();
    assert_eq!(
        names(&outputs(&mut a, &g)),
        ["turn_started", "model_request"]
    );
    let b = queued(&mut g);
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].0, b[0].1.clone()),
        (
            Durability::Written,
            vec!["user".into(), "turn_start".into()]
        )
    );
    assert_eq!(b[0].2.to_json()["sync"], "written");
    let step = a.model_input(&g).unwrap().step;

    // A call: an effect, released only once a synced batch with its `assistant` line is
    // acknowledged (the `uncertain` rule needs it on stable storage before the call starts).
    let call = crate::tools::ToolCall::new("c1", "probe", json!({}));
    a.on_model_response(at(2), &mut g, step, ModelResponse::calls(vec![call]))
        .unwrap();
    assert!(
        outputs(&mut a, &g).is_empty(),
        "the call waits for its line"
    );
    let done = store.perform(&b[0].2).unwrap();
    g.ack(done).unwrap();
    assert!(
        outputs(&mut a, &g).is_empty(),
        "a written batch acknowledges no effect"
    );
    let b = queued(&mut g);
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].0, b[0].1.clone()),
        (Durability::Synced, vec!["assistant".into()])
    );
    let done = store.perform(&b[0].2).unwrap();
    g.ack(done).unwrap();
    let outs = outputs(&mut a, &g);
    assert_eq!(names(&outs), ["start_call"]);
    let inv = InvocationId(outs[0]["invocation"].as_u64().unwrap());

    // Its result precedes a read (the next model request): written again.
    a.on_call_settled(at(3), &mut g, inv, Settlement::Returned(json!("ok")))
        .unwrap();
    // `call_finished` is the host's own bookkeeping: released once the line is written.
    assert!(outputs(&mut a, &g).is_empty());
    let b = queued(&mut g);
    assert_eq!(
        b.iter().map(|x| (x.0, x.1.clone())).collect::<Vec<_>>(),
        [(Durability::Written, vec!["tool_result".to_owned()])]
    );
    let done = store.perform(&b[0].2).unwrap();
    g.ack(done).unwrap();
    assert_eq!(
        names(&outputs(&mut a, &g)),
        ["call_finished", "model_request"]
    );

    // The answer and `turn_end`: the turn's end is an effect, so their batch is synced (a
    // file store fsyncs the written lines before it in the same round).
    let step = a.model_input(&g).unwrap().step;
    a.on_model_response(at(4), &mut g, step, ModelResponse::text("done"))
        .unwrap();
    assert!(
        outputs(&mut a, &g).is_empty(),
        "the end waits for its lines"
    );
    let b = queued(&mut g);
    assert_eq!(
        b.iter().map(|x| (x.0, x.1.clone())).collect::<Vec<_>>(),
        [(
            Durability::Synced,
            vec!["assistant".to_owned(), "turn_end".to_owned()]
        )]
    );
    assert!(b[0].2.to_json().get("sync").is_none());
    let done = store.perform(&b[0].2).unwrap();
    g.ack(done).unwrap();
    assert_eq!(names(&outputs(&mut a, &g)), ["turn_ended"]);

    // Acknowledged on store (the desk's `POST`): synced, and its turn's start joins it.
    admit_user_line(BASE + 5, &mut g, "work", "again", LineAck::OnStore).unwrap();
    a.sync(at(5), &mut g).unwrap();
    let b = queued(&mut g);
    assert_eq!(
        b.iter().map(|x| (x.0, x.1.clone())).collect::<Vec<_>>(),
        [(
            Durability::Synced,
            vec!["user".to_owned(), "turn_start".to_owned()]
        )]
    );
    let done = store.perform(&b[0].2).unwrap();
    g.ack(done).unwrap();
    outputs(&mut a, &g);

    // Mail is acknowledged to its source: synced.
    a.post_observation(at(6), &mut g, "probe", json!({"seen": 1}))
        .unwrap();
    let b = queued(&mut g);
    assert!(b.iter().any(|x| x.1.contains(&"mail".to_owned())));
    assert_eq!(b.last().unwrap().0, Durability::Synced);
}

/// A sync point after a written batch was already taken is an empty synced batch (the store
/// then fsyncs what the written one left); after a synced batch it issues nothing.
#[test]
fn a_sync_point_after_a_taken_written_batch_is_an_empty_synced_batch() {
    let (mut g, mut store) = graph();
    flush(&mut g, &mut store);
    admit_user_line(BASE, &mut g, "coordinator", "hi", LineAck::WithTurnEnd).unwrap();
    let b = g.take_batches();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].sync, Durability::Written);
    g.require_synced();
    let s = g.take_batches();
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].sync, s[0].op_count()), (Durability::Synced, 0));
    assert!(s[0].id > b[0].id);
    g.require_synced();
    assert!(!g.has_batches(), "nothing is owed after a synced batch");
    for x in b.iter().chain(&s) {
        let done = store.perform(x).unwrap();
        g.ack(done).unwrap();
    }
}

/// A slice whose window starts after the mail and the task line its turn took still shows
/// them where the turn took them, and earlier user lines the turns took are not repeated.
#[test]
fn a_slice_shows_what_its_turns_took_from_before_the_window() {
    let (mut g, mut store) = graph();
    flush(&mut g, &mut store);
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.id = Some("work".into());
    g.spawn(BASE, r).unwrap();
    flush(&mut g, &mut store);
    let config = AgentConfig {
        recent_lines: 1,
        ..AgentConfig::default()
    };
    let (mut a, _) = NodeAgent::open(at(0), &mut g, "work", config).unwrap();
    flush(&mut g, &mut store);
    let ask = |a: &mut NodeAgent, g: &mut ActorGraph, store: &mut MemoryStore, t, text: &str| {
        admit_user_line(BASE + t, g, "work", text, LineAck::WithTurnEnd).unwrap();
        a.sync(at(t), g).unwrap();
        flush(g, store);
        outputs(a, g);
        a.model_input(g).expect("released step")
    };
    for i in 0..3 {
        let input = ask(&mut a, &mut g, &mut store, 1 + i, &format!("earlier {i}"));
        a.on_model_response(at(1 + i), &mut g, input.step, input.builtin_answer())
            .unwrap();
        flush(&mut g, &mut store);
        outputs(&mut a, &g);
    }
    a.post_observation(at(10), &mut g, "probe", json!({"seen": 1}))
        .unwrap();
    flush(&mut g, &mut store);
    outputs(&mut a, &g);
    let input = ask(&mut a, &mut g, &mut store, 11, "now");
    let n = g.chat("work").unwrap().len() as u64;
    // The window is the `turn_start` alone; its mail and task line are lines before it.
    assert_eq!(input.lines, (n, n));
    let roles: Vec<&str> = input
        .messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["mail", "user"], "{:?}", input.messages);
    assert_eq!(input.messages[0]["value"], json!({"seen": 1}));
    assert_eq!(input.messages[1]["text"], "now");
    // A wider window shows the earlier turns once each (their task lines where they started).
    let wide = slice::build(
        &g,
        "work",
        input.turn,
        input.step,
        &AgentConfig::default(),
        Vec::new(),
    );
    let users: Vec<&str> = wide
        .messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["earlier 0", "earlier 1", "earlier 2", "now"]);
    assert_eq!(wide.messages.last(), input.messages.last());
    assert_eq!(
        wide.messages.iter().filter(|m| m["role"] == "mail").count(),
        1
    );
}
