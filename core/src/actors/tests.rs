//! Unit and property tests of the actor graph. Scenario coverage shared with every host lives
//! in the conformance vectors (`tests/vectors/actors.json`).

use proptest::prelude::*;
use serde_json::Value;

use super::*;

const T0: Wall = Wall::from_ms(1_798_568_411_000); // 2026-12-29

/// A graph over a memory store, flushing and acknowledging batches like a host.
struct World {
    store: MemoryStore,
    g: ActorGraph,
    now: Wall,
    config: HarnessConfig,
}

impl World {
    fn with(config: HarnessConfig) -> World {
        let store = MemoryStore::default();
        let g =
            ActorGraph::init(config.clone(), "mem://t", &Snapshot::default(), T0, "Test").unwrap();
        let mut w = World {
            store,
            g,
            now: T0,
            config,
        };
        w.flush();
        w
    }
    fn new() -> World {
        World::with(HarnessConfig::default())
    }
    fn tick(&mut self) -> Wall {
        self.now += 1000;
        self.now
    }
    fn flush(&mut self) {
        for b in self.g.take_batches() {
            let done = self.store.perform(&b).unwrap();
            self.g.ack(done).unwrap();
        }
    }
    fn reopen(&mut self) -> OpenReport {
        let snap = self.store.load().unwrap();
        let (g, r) = ActorGraph::open(self.config.clone(), "mem://t", &snap, self.now).unwrap();
        self.g = g;
        self.flush();
        r
    }
    fn spawn(&mut self, parent: &str, t: NodeType, title: &str) -> NodeId {
        let now = self.tick();
        let mut r = SpawnRequest::new(parent, t);
        r.title = title.into();
        let out = self.g.spawn(now, r).unwrap();
        self.flush();
        out.child
    }
    fn file(&self, p: &str) -> String {
        String::from_utf8(self.store.files.get(p).cloned().unwrap_or_default()).unwrap()
    }
    fn lineage(&self) -> Vec<(String, Option<String>, Vec<String>)> {
        self.g
            .node_ids()
            .iter()
            .map(|id| {
                let n = self.g.node(id.as_str()).unwrap();
                (
                    id.to_string(),
                    n.spawned_by.as_ref().map(|s| s.to_string()),
                    n.spawned.iter().map(|s| s.to_string()).collect(),
                )
            })
            .collect()
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, ActorsError>) -> &'static str {
    r.unwrap_err().code()
}

#[test]
fn a_spawn_is_one_batch_and_gates_both_nodes_until_acknowledged() {
    let mut w = World::new();
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.title = "docs sync".into();
    r.reason = "multi-repo docs".into();
    let out = w.g.spawn(w.now + 1, r).unwrap();
    assert_eq!(out.child.as_str(), "docs-sync");
    assert_eq!(
        out.marker_line, 2,
        "line 1 is the coordinator's close-out addendum"
    );
    // Neither node accepts a message before the store acknowledges the lineage.
    for n in ["coordinator", "docs-sync"] {
        assert_eq!(
            code(w.g.append(w.now + 2, n, NewLine::user("hi"))),
            "NOT_PERSISTED"
        );
    }
    let batches = w.g.take_batches();
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    assert_eq!(b.gates, vec!["coordinator", "docs-sync"]);
    assert_eq!(b.stages.len(), 3);
    assert!(matches!(&b.stages[0][..], [Op::CreateNode { id, .. }] if id == "docs-sync"));
    let paths: Vec<String> = b.stages[1].iter().flat_map(Op::paths).collect();
    assert_eq!(
        paths,
        [
            "nodes/coordinator/meta.json",
            "graph.json",
            "nodes/coordinator/chat.jsonl",
        ]
    );
    // The metathread record names the marker's line, so it is durable only after the marker.
    let paths: Vec<String> = b.stages[2].iter().flat_map(Op::paths).collect();
    assert_eq!(paths, ["orchestrator/meta.jsonl"]);
    let done = w.store.perform(b).unwrap();
    w.g.ack(done).unwrap();
    assert_eq!(
        w.g.append(
            w.now + 3,
            "docs-sync",
            NewLine::user("start with the links")
        )
        .unwrap(),
        2
    );
    assert!(w.g.lineage_violations().is_empty());
    // What is on disk is what is in memory.
    let meta: Value = serde_json::from_str(&w.file("nodes/docs-sync/meta.json")).unwrap();
    assert_eq!(meta["spawnedBy"], "coordinator");
    assert_eq!(meta["gitCloseout"], "coordinator-batch");
    let coord: Value = serde_json::from_str(&w.file("nodes/coordinator/meta.json")).unwrap();
    assert_eq!(coord["spawned"], serde_json::json!(["docs-sync"]));
    assert!(
        w.file("nodes/coordinator/chat.jsonl")
            .contains("→ spawned task `docs-sync`: multi-repo docs")
    );
}

#[test]
fn lines_for_one_log_queued_back_to_back_share_one_batch() {
    let mut w = World::new();
    let task = w.spawn("coordinator", NodeType::Task, "docs sync");
    let first = w.g.issued() + 1;
    {
        let now = w.tick();
        w.g.append(now, "coordinator", NewLine::user("one"))
            .unwrap();
    }
    {
        let now = w.tick();
        w.g.append(now, "coordinator", NewLine::user("two"))
            .unwrap();
    }
    let last = w.g.issued();
    assert_eq!(last, first + 1, "each call still issues its own id");
    // A line for another log, then one more for the first: three batches in all, in order.
    {
        let now = w.tick();
        w.g.append(now, task.as_str(), NewLine::user("elsewhere"))
            .unwrap();
    }
    {
        let now = w.tick();
        w.g.append(now, "coordinator", NewLine::user("three"))
            .unwrap();
    }
    let batches = w.g.take_batches();
    assert_eq!(batches.len(), 3);
    let b = &batches[0];
    assert_eq!(b.id, last, "the joined batch carries the later id");
    let [stage] = b.stages.as_slice() else {
        panic!("one stage: {:?}", b.stages)
    };
    let [Op::Append { path, text }] = stage.as_slice() else {
        panic!("one append: {stage:?}")
    };
    assert_eq!(path, "nodes/coordinator/chat.jsonl");
    assert_eq!(text.lines().count(), 2, "both lines, in one write");
    assert!(text.find("\"one\"").unwrap() < text.find("\"two\"").unwrap());
    // Acknowledging the joined batch acknowledges both calls (acks are cumulative).
    let done = w.store.perform(b).unwrap();
    w.g.ack(done).unwrap();
    assert_eq!(w.g.acked(), last);
    for b in &batches[1..] {
        let done = w.store.perform(b).unwrap();
        w.g.ack(done).unwrap();
    }
    w.reopen();
    let texts: Vec<String> = w
        .file("nodes/coordinator/chat.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["role"] == "user")
        .map(|v| v["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(texts, ["one", "two", "three"]);
    // A spawn (stages, gates) is never joined with the lines queued before it.
    {
        let now = w.tick();
        w.g.append(now, "coordinator", NewLine::user("four"))
            .unwrap();
    }
    let now = w.tick();
    w.g.spawn(now, SpawnRequest::new("coordinator", NodeType::Task))
        .unwrap();
    let batches = w.g.take_batches();
    assert_eq!(batches.len(), 2);
    assert!(batches[1].gates.contains(&"coordinator".to_owned()));
}

/// Durability is an output acknowledged like a send: the gate of a spawn lifts only with the
/// store's proof that it performed the batch (`perform` → `Applied` → `ack`), a store that
/// refuses the batch hands back no proof, an out-of-line store's batch is acknowledged with
/// the `InFlight` it was handed off with, and a proof another graph made is refused.
#[test]
fn a_batch_is_acknowledged_only_with_the_proof_its_store_performed_it() {
    let mut w = World::new();
    let now = w.tick();
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.id = Some("kid".into());
    w.g.spawn(now, r).unwrap();
    let b = w.g.take_batches().remove(0);
    // A store that refuses the batch (the node exists there already): no proof, still gated.
    let mut full = w.store.clone();
    full.dirs.insert("nodes/kid".into());
    assert!(full.perform(&b).is_err());
    assert_eq!(
        code(w.g.append(now, "kid", NewLine::user("x"))),
        "NOT_PERSISTED"
    );
    // Handed off to a store that performs it out of line: the JSON it is sent is the batch's,
    // and the `InFlight` held until the store reports back acknowledges it.
    let want = b.to_json();
    let (json, in_flight) = b.hand_off();
    assert_eq!(json, want);
    assert_eq!(in_flight.id(), w.g.issued());
    let mut other = World::new();
    let now2 = other.tick();
    other
        .g
        .spawn(now2, SpawnRequest::new("coordinator", NodeType::Task))
        .unwrap();
    let mut later = other.g.take_batches();
    for _ in 0..3 {
        other.g.narrate(other.now, "more").unwrap();
        later.extend(other.g.take_batches());
    }
    let foreign = later.pop().unwrap();
    assert!(foreign.id > w.g.issued());
    let foreign = other.store.perform(&foreign).unwrap();
    assert_eq!(code(w.g.ack(foreign)), "INVALID_ARGUMENT");
    assert!(w.g.acked() < in_flight.id());
    w.g.ack(in_flight.performed()).unwrap();
    assert_eq!(w.g.acked(), w.g.issued());
    w.g.append(now, "kid", NewLine::user("x")).unwrap();
}

#[test]
fn a_failed_batch_stops_all_writes_until_reopen() {
    let mut w = World::new();
    let now = w.tick();
    w.g.spawn(now, SpawnRequest::new("coordinator", NodeType::Task))
        .unwrap();
    let b = w.g.take_batches().remove(0);
    w.g.fail(b.id, "disk full");
    assert_eq!(
        code(w.g.append(now, "coordinator", NewLine::user("x"))),
        "STORE_FAILED"
    );
    assert_eq!(code(w.g.narrate(now, "x")), "STORE_FAILED");
    // A later batch the store performed cannot be acknowledged over the failed one (acks are
    // cumulative: it would release what waits on the failed batch).
    let now = w.tick();
    let mut w2 = World::new();
    w2.g.spawn(now, SpawnRequest::new("coordinator", NodeType::Task))
        .unwrap();
    let mut bs = w2.g.take_batches();
    w2.g.narrate(now, "later").unwrap();
    bs.extend(w2.g.take_batches());
    assert_eq!(bs.len(), 2);
    let later = w2.store.perform(&bs[1]).unwrap();
    w2.g.fail(bs[0].id, "disk full");
    assert_eq!(code(w2.g.ack(later)), "STORE_FAILED");
    assert!(w2.g.acked() < bs[0].id);
    // The batch never reached the store: reopening shows the graph without it.
    w.reopen();
    assert!(w.g.node("task").is_none());
    w.g.append(now, "coordinator", NewLine::user("x")).unwrap();
}

#[test]
fn reopening_reproduces_the_graph_and_keeps_unknown_fields() {
    let mut w = World::new();
    w.spawn("coordinator", NodeType::Discussion, "CLA permissions");
    w.spawn("coordinator", NodeType::Task, "docs sync");
    w.spawn("cla-permissions", NodeType::Task, "ask the org admin");
    let before = w.lineage();
    // Another writer added fields this version does not know.
    let p = "nodes/docs-sync/meta.json";
    let mut v: Value = serde_json::from_str(&w.file(p)).unwrap();
    v["mixrModel"] = "z-ai/glm".into();
    v["waitOn"] = serde_json::json!([{"node": "cla-permissions", "mode": "warn", "since": 3}]);
    w.store
        .files
        .insert(p.into(), serde_json::to_vec(&v).unwrap());
    let r = w.reopen();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    assert!(r.repairs.is_empty(), "{:?}", r.repairs);
    assert_eq!(w.lineage(), before);
    let now = w.tick();
    w.g.set_status(
        now,
        "docs-sync",
        Status::Running,
        Some("PR open".into()),
        None,
    )
    .unwrap();
    w.flush();
    let v: Value = serde_json::from_str(&w.file(p)).unwrap();
    assert_eq!(v["mixrModel"], "z-ai/glm");
    assert_eq!(v["waitOn"][0]["since"], 3);
    assert_eq!(v["status"], "running");
}

#[test]
fn disambiguation_pauses_the_parent_until_resolved() {
    let mut w = World::new();
    let now = w.tick();
    let out =
        w.g.route(
            now,
            "coordinator",
            "Continue the merge or we could also refactor the timeline engine",
            None,
            &HeuristicProposer,
        )
        .unwrap();
    let RouteOutcome::Spawned { spawn, .. } = out else {
        panic!("{out:?}")
    };
    assert_eq!(spawn.child.as_str(), "disambig-boundary");
    assert!(spawn.paused_parent);
    assert_eq!(
        spawn.child_line,
        Some(2),
        "the ambiguous line belongs to the child"
    );
    w.flush();
    assert_eq!(
        code(w.g.append(now, "coordinator", NewLine::user("hello?"))),
        "ROUTING_PAUSED"
    );
    assert_eq!(
        code(w.g.spawn(now, SpawnRequest::new("coordinator", NodeType::Task))),
        "ROUTING_PAUSED"
    );
    // The boundary can be discussed in the disambiguation node itself.
    w.g.append(now, "disambig-boundary", NewLine::user("both, separately"))
        .unwrap();
    w.flush();
    assert_eq!(
        code(w.g.resolve(now, "coordinator", vec![Candidate::Continue], "")),
        "NOT_PAUSING"
    );
    assert_eq!(
        code(w.g.resolve(now, "disambig-boundary", vec![], "")),
        "INVALID_ARGUMENT"
    );
    let res =
        w.g.resolve(
            w.now + 5,
            "disambig-boundary",
            vec![
                Candidate::Continue,
                Candidate::New {
                    node_type: NodeType::Task,
                    title: "refactor timeline engine".into(),
                    topic: String::new(),
                },
            ],
            "merge continues here; refactor is its own task",
        )
        .unwrap();
    assert_eq!(res.created.len(), 1);
    let b = &w.g.take_batches()[0];
    assert_eq!(
        b.stages.len(),
        4,
        "children, then the decision, then the parent and its markers, then the records"
    );
    let done = w.store.perform(b).unwrap();
    w.g.ack(done).unwrap();
    w.g.append(w.now + 6, "coordinator", NewLine::user("back to the merge"))
        .unwrap();
    let c = w.g.node("coordinator").unwrap();
    assert_eq!(
        c.spawned.iter().map(NodeId::as_str).collect::<Vec<_>>(),
        ["disambig-boundary", "refactor-timeline-engine"]
    );
    assert_eq!(w.g.node("disambig-boundary").unwrap().status, Status::Done);
    assert_eq!(
        code(w.g.resolve(
            w.now + 7,
            "disambig-boundary",
            vec![Candidate::Continue],
            ""
        )),
        "NOT_PAUSING"
    );
    let meta = w.file("orchestrator/meta.jsonl");
    assert!(meta.contains(r#""kind":"resolution""#) && meta.contains("refactor-timeline-engine"));
    assert!(
        w.g.lineage_violations().is_empty(),
        "{:?}",
        w.g.lineage_violations()
    );
    let before = w.lineage();
    w.reopen();
    assert_eq!(w.lineage(), before);
}

#[test]
fn cadence_separation_keeps_worker_noise_off_the_discussion_surface() {
    let mut w = World::new();
    w.spawn("coordinator", NodeType::Task, "build");
    w.spawn("coordinator", NodeType::Discussion, "ideas");
    let now = w.tick();
    for (node, role) in [
        ("coordinator", Role::Progress),
        ("ideas", Role::Tool),
        ("coordinator", Role::Completion),
    ] {
        let l = NewLine {
            role,
            text: "50% done".into(),
            tokens: None,
            from: None,
        };
        assert_eq!(
            code(w.g.append(now, node, l)),
            "CADENCE_VIOLATION",
            "{node}"
        );
    }
    let from_task = NewLine {
        role: Role::Assistant,
        text: "done: all green".into(),
        tokens: None,
        from: Some("build".into()),
    };
    assert_eq!(
        code(w.g.append(now, "coordinator", from_task)),
        "CADENCE_VIOLATION"
    );
    let routing = NewLine {
        role: Role::Routing,
        text: "→ fake".into(),
        tokens: None,
        from: None,
    };
    assert_eq!(code(w.g.append(now, "build", routing)), "INVALID_ARGUMENT");
    // Worker cadence is fine in the task's own transcript.
    w.g.append(
        now,
        "build",
        NewLine {
            role: Role::Progress,
            text: "50%".into(),
            tokens: None,
            from: None,
        },
    )
    .unwrap();
    w.g.append(
        now,
        "build",
        NewLine {
            role: Role::Tool,
            text: "cargo test: ok".into(),
            tokens: None,
            from: None,
        },
    )
    .unwrap();
    // Nothing was appended to the coordinator.
    assert_eq!(w.g.chat("coordinator").unwrap().len(), 3);
}

#[test]
fn the_wait_graph_warns_blocks_and_refuses_cycles() {
    let mut w = World::new();
    w.spawn("coordinator", NodeType::Task, "cla");
    w.spawn("coordinator", NodeType::Task, "ci");
    w.spawn("coordinator", NodeType::Task, "release");
    let now = w.tick();
    w.g.set_wait(now, "release", "cla", Some(WaitMode::Warn))
        .unwrap();
    w.g.set_wait(now, "release", "ci", Some(WaitMode::Enforce))
        .unwrap();
    w.flush();
    assert_eq!(
        code(w.g.set_wait(now, "ci", "release", Some(WaitMode::Warn))),
        "WAIT_CYCLE"
    );
    assert_eq!(
        code(w.g.set_wait(now, "ci", "ci", Some(WaitMode::Warn))),
        "INVALID_ARGUMENT"
    );
    assert_eq!(code(w.g.begin_model_call("release", 5)), "WAIT_BLOCKED");
    w.g.set_status(now, "ci", Status::Done, Some("green".into()), None)
        .unwrap();
    w.flush();
    let slice = w.g.begin_model_call("release", 5).unwrap();
    assert_eq!(
        slice["warnings"].as_array().unwrap().len(),
        1,
        "cla is still idle: maybe stale"
    );
    assert_eq!(slice["closeout"]["allowsAutomaticPush"], false);
    let read = w.g.read_mailbox(Some("release"), "cla").unwrap();
    assert_eq!(read["maybeStale"], true);
    let read = w.g.read_mailbox(Some("release"), "ci").unwrap();
    assert_eq!(read["maybeStale"], false);
    assert_eq!(read["mailbox"]["summary"], "green");
    // The graph index carries the wait edges.
    let graph: Value = serde_json::from_str(&w.file("graph.json")).unwrap();
    assert_eq!(graph["related"].as_array().unwrap().len(), 2);
    // ACTOR_WAIT_GRAPH=off: nothing warns or blocks; enforce: every subscription blocks.
    for (mode, outcome) in [("off", "off"), ("enforce", "blocked")] {
        let (c, _) = HarnessConfig::from_vars([("ACTOR_WAIT_GRAPH", mode)]).unwrap();
        w.config = c;
        w.reopen();
        assert_eq!(
            w.g.wait_checks("release").unwrap()[0].outcome,
            outcome,
            "{mode}"
        );
    }
}

#[test]
fn a_high_volatility_wave_moves_defaulted_leaves_to_coordinator_batch() {
    let (c, _) = HarnessConfig::from_vars([("GIT_CLOSEOUT", "per-node")]).unwrap();
    let mut w = World::with(c);
    w.spawn("coordinator", NodeType::Task, "one");
    assert_eq!(
        w.g.node("one").unwrap().git_closeout,
        Some(GitCloseout::PerNode)
    );
    let now = w.tick();
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.title = "pinned".into();
    r.git_closeout = Some(GitCloseout::PerNode);
    w.g.spawn(now, r).unwrap();
    w.flush();
    // The explicit one keeps per-node; the defaulted one joined the wave.
    assert_eq!(
        w.g.node("pinned").unwrap().git_closeout,
        Some(GitCloseout::PerNode)
    );
    assert_eq!(
        w.g.node("one").unwrap().git_closeout,
        Some(GitCloseout::CoordinatorBatch)
    );
    let chat = w.file("nodes/one/chat.jsonl");
    assert!(
        chat.lines()
            .last()
            .unwrap()
            .contains("GIT_CLOSEOUT=coordinator-batch"),
        "{chat}"
    );
    w.spawn("coordinator", NodeType::Task, "three");
    assert_eq!(
        w.g.node("three").unwrap().git_closeout,
        Some(GitCloseout::CoordinatorBatch)
    );
    assert!(w.file("nodes/three/chat.jsonl").starts_with(r#"{"at":"#));
    assert!(w.file("nodes/three/chat.jsonl").contains("do not push"));
}

#[test]
fn routing_spawns_on_drift_and_on_policy() {
    let mut w = World::new();
    let t = w.spawn("coordinator", NodeType::Task, "merge docs");
    let now = w.tick();
    let out =
        w.g.route(
            now,
            t.as_str(),
            "Start with the README links.",
            None,
            &HeuristicProposer,
        )
        .unwrap();
    assert!(
        matches!(out, RouteOutcome::Continued { line: 2, .. }),
        "{out:?}"
    );
    let out =
        w.g.route(
            now,
            t.as_str(),
            "Who can sign the CLA for the org?",
            None,
            &HeuristicProposer,
        )
        .unwrap();
    let RouteOutcome::Spawned {
        trigger: Trigger::Policy,
        spawn,
    } = out
    else {
        panic!("{out:?}")
    };
    assert_eq!(spawn.node_type, NodeType::Discussion);
    w.flush();
    let out =
        w.g.route(
            now,
            "coordinator",
            "Side note: the bot config lives in .github",
            None,
            &HeuristicProposer,
        )
        .unwrap();
    let RouteOutcome::Spawned {
        trigger: Trigger::Model,
        spawn,
    } = out
    else {
        panic!("{out:?}")
    };
    assert_eq!(spawn.child.as_str(), "the-bot-config-lives-in-github");
    w.flush();
    // The drifted line lives in the child; the parent has only the marker.
    let chat = w.g.chat("coordinator").unwrap();
    let last = chat.last().unwrap().ok().unwrap();
    assert_eq!(last.role, Role::Routing);
    assert_eq!(
        w.g.chat(spawn.child.as_str()).unwrap()[1]
            .ok()
            .unwrap()
            .text,
        "Side note: the bot config lives in .github"
    );
    // Serialized mode never spawns.
    let (c, _) = HarnessConfig::from_vars([("ACTOR_AGENTIC_UI", "serialized")]).unwrap();
    w.config = c;
    w.reopen();
    let out =
        w.g.route(
            w.now,
            "coordinator",
            "Side note: another idea",
            None,
            &HeuristicProposer,
        )
        .unwrap();
    assert!(matches!(out, RouteOutcome::Continued { .. }));
    assert_eq!(
        code(w.g.spawn(w.now, SpawnRequest::new("coordinator", NodeType::Task))),
        "SPAWN_DISABLED"
    );
}

#[test]
fn refs_must_point_at_lines_and_audit_peeks_at_them() {
    let mut w = World::new();
    let t = w.spawn("coordinator", NodeType::Task, "ci");
    let now = w.tick();
    w.g.append(now, t.as_str(), NewLine::user("rerun the flaky test"))
        .unwrap();
    assert_eq!(code(w.g.add_ref(now, t.as_str(), 3, "x")), "REF_INVALID");
    assert_eq!(code(w.g.add_ref(now, t.as_str(), 0, "x")), "REF_INVALID");
    assert_eq!(code(w.g.add_ref(now, "nope", 1, "x")), "UNKNOWN_NODE");
    w.g.add_ref(now, t.as_str(), 2, "asked for a rerun")
        .unwrap();
    w.g.set_status(now, t.as_str(), Status::Done, Some("green".into()), None)
        .unwrap();
    w.flush();
    let a = w.g.audit();
    // The spawn marker ref, the explicit ref, and the terminal-status ref.
    assert_eq!((a.refs, a.ok, a.problems), (3, 3, 0), "{a:?}");
    assert_eq!(
        a.entries[1].peek.as_ref().unwrap()["text"],
        "rerun the flaky test"
    );
    assert_eq!(a.entries[2].summary, "green");
    // Mailbox chain: v1 + latest.
    assert!(w.store.files.contains_key("nodes/ci/summaries/v1.json"));
    assert!(w.store.files.contains_key("nodes/ci/summaries/latest.json"));
}

#[test]
fn a_spawn_cut_after_its_first_stage_is_rolled_forward_on_open() {
    let mut w = World::new();
    w.spawn("coordinator", NodeType::Task, "a");
    let now = w.tick();
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.title = "b".into();
    w.g.spawn(now, r).unwrap();
    let b = w.g.take_batches().remove(0);
    for op in &b.stages[0] {
        w.store.apply_op(op).unwrap();
    }
    // And the marker append was torn halfway.
    if let Op::Append { path, text } = &b.stages[1][2] {
        w.store
            .files
            .get_mut(path)
            .unwrap()
            .extend_from_slice(&text.as_bytes()[..text.len() / 2]);
    } else {
        panic!("the third op of stage 2 is the marker");
    }
    let r = w.reopen();
    let codes: Vec<&str> = r.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["TORN_LINE"]);
    assert_eq!(r.diagnostics[0].file, "nodes/coordinator/chat.jsonl");
    assert_eq!(r.diagnostics[0].line, Some(3));
    assert!(r.diagnostics[0].repaired);
    assert!(
        r.repairs.iter().any(|x| x.contains("linked `b`")),
        "{:?}",
        r.repairs
    );
    assert!(
        w.g.lineage_violations().is_empty(),
        "{:?}",
        w.g.lineage_violations()
    );
    assert_eq!(w.g.node("coordinator").unwrap().spawned.len(), 2);
    // The torn bytes were kept, not dropped.
    let kept: Vec<&String> = w
        .store
        .files
        .keys()
        .filter(|k| k.starts_with("orchestrator/torn/"))
        .collect();
    assert_eq!(kept.len(), 1);
    // Reopening again finds nothing to do.
    let r = w.reopen();
    assert!(r.repairs.is_empty() && r.diagnostics.is_empty(), "{r:?}");
}

#[test]
fn corrupt_records_are_reported_and_isolated() {
    let mut w = World::new();
    w.spawn("coordinator", NodeType::Task, "good");
    w.spawn("coordinator", NodeType::Task, "bad");
    let now = w.tick();
    w.g.append(now, "good", NewLine::user("one")).unwrap();
    w.g.append(now, "good", NewLine::user("two")).unwrap();
    w.flush();
    w.store.files.insert(
        "nodes/bad/meta.json".into(),
        b"{\"id\": \"bad\", \"type\": ".to_vec(),
    );
    // A corrupt middle line keeps later line numbers.
    let chat = w
        .file("nodes/good/chat.jsonl")
        .replacen("\"one\"", "\"one", 1);
    w.store
        .files
        .insert("nodes/good/chat.jsonl".into(), chat.into_bytes());
    w.store.dirs.insert("nodes/empty".into());
    let r = w.reopen();
    let mut codes: Vec<(&str, &str, Option<u64>)> = r
        .diagnostics
        .iter()
        .map(|d| (d.code, d.file.as_str(), d.line))
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            ("CORRUPT_JSON", "nodes/bad/meta.json", Some(1)),
            ("CORRUPT_LINE", "nodes/good/chat.jsonl", Some(2)),
            ("MISSING_META", "nodes/empty/meta.json", None),
        ]
    );
    assert_eq!(
        code(w.g.append(now, "bad", NewLine::user("x"))),
        "NODE_CORRUPT"
    );
    assert_eq!(w.g.append(now, "good", NewLine::user("three")).unwrap(), 4);
    assert_eq!(code(w.g.add_ref(now, "good", 2, "corrupt")), "REF_INVALID");
    let view = w.g.graph_view();
    assert_eq!(view["broken"][0]["id"], "bad");
    assert_eq!(view["broken"][0]["spawnedBy"], "coordinator");
    assert!(
        w.g.lineage_violations().is_empty(),
        "{:?}",
        w.g.lineage_violations()
    );
    // The unreadable record is not overwritten by later writes.
    w.spawn("coordinator", NodeType::Task, "more");
    assert_eq!(
        w.file("nodes/bad/meta.json"),
        "{\"id\": \"bad\", \"type\": "
    );
}

#[test]
fn a_corrupt_graph_index_is_moved_aside_and_rebuilt() {
    let mut w = World::new();
    w.spawn("coordinator", NodeType::Task, "a");
    w.store
        .files
        .insert("graph.json".into(), b"{not json".to_vec());
    let r = w.reopen();
    assert_eq!(r.diagnostics[0].code, "CORRUPT_JSON");
    assert!(
        w.store
            .files
            .keys()
            .any(|k| k.starts_with("graph.json.corrupt-"))
    );
    let g: Value = serde_json::from_str(&w.file("graph.json")).unwrap();
    assert_eq!(g["nodes"]["a"]["spawnedBy"], "coordinator");
}

#[test]
fn temporal_view_replays_visibility_and_fades_idle_nodes() {
    let mut w = World::new();
    w.spawn("coordinator", NodeType::Task, "early");
    w.now += 3 * 3600 * 1000;
    w.spawn("coordinator", NodeType::Task, "late");
    let now = w.tick();
    w.g.set_status(
        now,
        "late",
        Status::AwaitingUser,
        Some("question".into()),
        None,
    )
    .unwrap();
    w.flush();
    let later = now + 10 * 3600 * 1000;
    let v =
        w.g.temporal_view(later, &Scope::Global, Some(T0 + 60_000), 8)
            .unwrap();
    let vis = |v: &Value, id: &str| {
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(vis(&v, "early")["visible"], true);
    assert_eq!(
        vis(&v, "late")["visible"],
        false,
        "not spawned yet at that time"
    );
    let v = w.g.temporal_view(later, &Scope::Global, None, 8).unwrap();
    let early = vis(&v, "early")["opacity"].as_f64().unwrap();
    assert!((0.25..1.0).contains(&early), "{early}");
    assert_eq!(
        vis(&v, "late")["opacity"],
        1.0,
        "awaiting the user: never faded"
    );
    assert_eq!(v["tokens"].as_array().unwrap().len(), 8);
    let v =
        w.g.temporal_view(
            later,
            &Scope::Subtree(NodeId::parse("late").unwrap()),
            None,
            4,
        )
        .unwrap();
    assert_eq!(v["nodes"].as_array().unwrap().len(), 1);
}

#[test]
fn epochs_bookmarks_reset_and_export() {
    let mut w = World::new();
    w.spawn("coordinator", NodeType::Task, "a");
    w.spawn("coordinator", NodeType::Task, "b");
    let now = w.tick();
    assert_eq!(
        code(w.g.reframe_epoch(now, "wave 1", None)),
        "EPOCHS_DISABLED"
    );
    let (c, _) = HarnessConfig::from_vars([("ACTOR_GRAPH_EPOCHS", "on")]).unwrap();
    w.config = c;
    w.reopen();
    assert_eq!(w.g.reframe_epoch(now, "wave 1", None).unwrap(), 1);
    w.flush();
    assert_eq!(w.g.node("b").unwrap().view_epoch, Some(1));
    let snap: Value = serde_json::from_str(&w.file("views/epoch-1.json")).unwrap();
    assert_eq!(snap["nodes"][1]["id"], "b");
    w.g.bookmark(
        now,
        &Scope::Subtree(NodeId::parse("a").unwrap()),
        vec!["ci".into()],
        "wave 1 started",
        None,
    )
    .unwrap();
    assert_eq!(
        code(w.g.bookmark(now, &Scope::Global, vec![], " ", None)),
        "INVALID_ARGUMENT"
    );
    w.g.set_status(now, "a", Status::Done, None, None).unwrap();
    w.flush();
    let archived = w.g.reset(now + 10_000, now + 5_000, None).unwrap();
    assert_eq!(
        archived.iter().map(NodeId::as_str).collect::<Vec<_>>(),
        ["a", "b"]
    );
    w.flush();
    assert!(
        w.store.files.contains_key("nodes/a/meta.json"),
        "reset never deletes"
    );
    assert!(w.g.node("a").unwrap().hidden);
    assert_eq!(w.g.grid_view(now)["total"], 0);
    let n = w.g.export(now).unwrap();
    w.flush();
    let thread = w.file("thread.jsonl");
    assert_eq!(thread.lines().count(), n + 1);
    assert!(
        thread
            .lines()
            .next()
            .unwrap()
            .contains("not a source of truth")
    );
    let reopened = w.reopen();
    assert!(reopened.diagnostics.is_empty());
    let idx: Value = serde_json::from_str(&w.file("orchestrator/index.json")).unwrap();
    assert_eq!(
        idx["nodes"]["coordinator"]["refLines"],
        serde_json::json!([2, 3])
    );
}

#[test]
fn ids_are_validated_and_unique() {
    let mut w = World::new();
    let now = w.tick();
    for bad in ["../x", "a/b", "", "x\0", ".tmp"] {
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some(bad.into());
        assert_eq!(code(w.g.spawn(now, r)), "INVALID_NODE_ID", "{bad:?}");
    }
    assert_eq!(
        code(w.g.append(now, "../../etc", NewLine::user("x"))),
        "INVALID_NODE_ID"
    );
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.id = Some("coordinator".into());
    assert_eq!(code(w.g.spawn(now, r)), "NODE_EXISTS");
    assert_eq!(
        code(w.g.spawn(now, SpawnRequest::new("coordinator", NodeType::Coordinator))),
        "SPAWN_RULE"
    );
    // Nothing was queued by the refused calls.
    assert!(!w.g.has_batches());
    w.spawn("coordinator", NodeType::Task, "same");
    assert_eq!(
        w.spawn("coordinator", NodeType::Task, "same").as_str(),
        "same-2"
    );
}

// ----- property tests --------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Step {
    Spawn(usize, u8),
    Message(usize, u8),
    Route(usize, u8),
    Status(usize, u8),
    Resolve(usize, u8),
    Ref(usize, u8),
    Reopen,
    /// The next batch is cut: stages before `stage` applied, a subset of `stage`, maybe torn.
    Crash {
        stage: u8,
        mask: u8,
        tear: u8,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Step::Spawn(a, b)),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Step::Message(a, b)),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Step::Route(a, b)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Step::Status(a, b)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Step::Resolve(a, b)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Step::Ref(a, b)),
        1 => Just(Step::Reopen),
        2 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(stage, mask, tear)| Step::Crash { stage, mask, tear }),
    ]
}

const TEXTS: &[&str] = &[
    "Start with the README links.",
    "Side note: the bot config lives in .github",
    "Continue the merge or we could also refactor the timeline engine",
    "Who can sign the CLA?",
    "Also, fix the flaky CI test",
    "ok",
];

/// Applies a batch partially, as a crash would leave it.
fn apply_cut(store: &mut MemoryStore, b: &WriteBatch, stage: u8, mask: u8, tear: u8) {
    let cut = stage as usize % (b.stages.len() + 1);
    for (si, s) in b.stages.iter().enumerate() {
        if si < cut {
            for op in s {
                store.apply_op(op).unwrap();
            }
        } else if si == cut {
            for (oi, op) in s.iter().enumerate() {
                if mask & (1 << (oi % 8)) == 0 {
                    continue;
                }
                match op {
                    Op::Append { path, text } if tear.is_multiple_of(3) => {
                        let n = (tear as usize).min(text.len().saturating_sub(1));
                        store
                            .files
                            .entry(path.clone())
                            .or_default()
                            .extend_from_slice(&text.as_bytes()[..n]);
                    }
                    _ => store.apply_op(op).unwrap(),
                }
            }
        }
    }
}

/// The next reopen after a crash: its recovery batch is itself cut by `cut` (then the root is
/// opened again, which recovers whatever that left).
fn reopen_with_recovery_cut(w: &mut World, cut: Option<(u8, u8, u8)>) {
    let Some((stage, mask, tear)) = cut else {
        w.reopen();
        return;
    };
    let snap = w.store.load().unwrap();
    let (g, _) = ActorGraph::open(w.config.clone(), "mem://t", &snap, w.now).unwrap();
    w.g = g;
    if let Some(b) = w.g.take_batches().first() {
        apply_cut(&mut w.store, b, stage, mask, tear);
    }
    w.reopen();
}

/// Performs one step (refused calls are fine: they must change nothing). `Crash` only arms
/// `crash` for the next batch.
fn perform(w: &mut World, now: Wall, s: &Step, crash: &mut Option<(u8, u8, u8)>) {
    let ids = w.g.node_ids();
    let pick = |i: usize| ids[i % ids.len()].to_string();
    let _ = match *s {
        Step::Spawn(i, t) => {
            let types = [
                NodeType::Task,
                NodeType::Discussion,
                NodeType::Disambiguation,
            ];
            let mut r = SpawnRequest::new(pick(i), types[t as usize % 3].clone());
            r.title = format!("n{}", t % 5);
            w.g.spawn(now, r).map(|_| ())
        }
        Step::Message(i, t) => {
            let roles = [Role::User, Role::Assistant, Role::Progress, Role::Tool];
            let l = NewLine {
                role: roles[t as usize % 4].clone(),
                text: format!("line {t}"),
                tokens: None,
                from: None,
            };
            w.g.append(now, &pick(i), l).map(|_| ())
        }
        Step::Route(i, t) => {
            w.g.route(
                now,
                &pick(i),
                TEXTS[t as usize % TEXTS.len()],
                None,
                &HeuristicProposer,
            )
            .map(|_| ())
        }
        Step::Status(i, t) => {
            let st = [
                Status::Running,
                Status::Done,
                Status::Blocked,
                Status::AwaitingUser,
            ];
            w.g.set_status(
                now,
                &pick(i),
                st[t as usize % 4].clone(),
                Some(format!("s{t}")),
                None,
            )
            .map(|_| ())
        }
        Step::Resolve(i, t) => {
            let c = match t % 3 {
                0 => vec![Candidate::Continue],
                1 => vec![Candidate::New {
                    node_type: NodeType::Task,
                    title: format!("r{t}"),
                    topic: String::new(),
                }],
                _ => vec![
                    Candidate::Continue,
                    Candidate::New {
                        node_type: NodeType::Discussion,
                        title: "d".into(),
                        topic: String::new(),
                    },
                ],
            };
            w.g.resolve(now, &pick(i), c, "").map(|_| ())
        }
        Step::Ref(i, t) => {
            let n = pick(i);
            let len = w.g.chat(&n).map_or(0, |c| c.len()) as u64;
            w.g.add_ref(now, &n, (t as u64) % (len + 2), "r")
                .map(|_| ())
        }
        Step::Reopen => {
            w.reopen();
            Ok(())
        }
        Step::Crash { stage, mask, tear } => {
            *crash = Some((stage, mask, tear));
            Ok(())
        }
    };
}

/// What a sequence has established: every node acknowledged, with its parent.
struct Acked(std::collections::BTreeMap<String, Option<String>>);

impl Acked {
    fn new() -> Acked {
        Acked([("coordinator".to_owned(), None)].into())
    }

    /// Flushes the queued batches — the first one cut instead when a crash is armed, then the
    /// root reopened (with its recovery cut by `recovery_cut` too, if given) — and checks the
    /// invariants: no lineage violation, every acknowledged node kept with its parent.
    fn settle(
        &mut self,
        w: &mut World,
        crash: &mut Option<(u8, u8, u8)>,
        recovery_cut: impl Fn((u8, u8, u8)) -> Option<(u8, u8, u8)>,
        after: &dyn std::fmt::Debug,
    ) -> Result<(), TestCaseError> {
        let mut crashed = None;
        for b in w.g.take_batches() {
            if let Some((stage, mask, tear)) = crash.take() {
                apply_cut(&mut w.store, &b, stage, mask, tear);
                crashed = Some((stage, mask, tear));
                break;
            }
            let done = w.store.perform(&b).unwrap();
            w.g.ack(done).unwrap();
        }
        if let Some(c) = crashed {
            reopen_with_recovery_cut(w, recovery_cut(c));
        } else {
            for id in w.g.node_ids() {
                let n = w.g.node(id.as_str()).unwrap();
                let p = n.spawned_by.as_ref().map(|p| p.to_string());
                self.0.insert(id.to_string(), p);
            }
        }
        let v = w.g.lineage_violations();
        prop_assert!(v.is_empty(), "violations after {:?}: {:?}", after, v);
        for (id, parent) in &self.0 {
            let n = w.g.node(id);
            prop_assert!(n.is_some(), "acknowledged node {} lost", id);
            prop_assert_eq!(
                &n.unwrap().spawned_by.as_ref().map(|p| p.to_string()),
                parent
            );
        }
        Ok(())
    }
}

/// Runs `steps` on a fresh graph and checks the lineage invariants after each. With
/// `crash_recovery`, every recovery that follows a crash is cut too (by the crash's numbers,
/// permuted).
fn check_sequence(steps: Vec<Step>, crash_recovery: bool) -> Result<(), TestCaseError> {
    let mut w = World::new();
    let mut acked = Acked::new();
    let mut crash = None;
    for s in steps {
        let now = w.tick();
        perform(&mut w, now, &s, &mut crash);
        // Refused calls queue nothing; performed ones are flushed (or cut by a crash).
        let again = |(stage, mask, tear)| crash_recovery.then_some((mask, tear, stage));
        acked.settle(&mut w, &mut crash, again, &s)?;
    }
    // Whatever happened, a final reopen finds a consistent store and changes nothing more.
    w.reopen();
    let r = w.reopen();
    prop_assert!(r.repairs.is_empty(), "{:?}", r.repairs);
    prop_assert!(w.g.lineage_violations().is_empty());
    Ok(())
}

/// A step of the broader property: every base step, plus resolving the pending
/// disambiguation into any mix of candidates (existing siblings included) and the graph's
/// other writers.
#[derive(Clone, Debug)]
enum Wide {
    Base(Step),
    /// Resolves the first pending disambiguation; bits of the `u8` choose `continue`, an
    /// existing sibling (the `usize` picks it), a new task, a new discussion.
    ResolvePending(u8, usize),
    Archive(usize, bool),
    Reset(u8),
    Wait(usize, usize, u8),
    Relate(usize, usize),
    Bookmark,
    Narrate,
    Export,
    Epoch,
}

fn wide_step() -> impl Strategy<Value = Wide> {
    prop_oneof![
        12 => step().prop_map(Wide::Base),
        4 => (any::<u8>(), any::<usize>()).prop_map(|(a, b)| Wide::ResolvePending(a, b)),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(a, b)| Wide::Archive(a, b)),
        1 => any::<u8>().prop_map(Wide::Reset),
        1 => (any::<usize>(), any::<usize>(), any::<u8>()).prop_map(|(a, b, c)| Wide::Wait(a, b, c)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Wide::Relate(a, b)),
        1 => Just(Wide::Bookmark),
        1 => Just(Wide::Narrate),
        1 => Just(Wide::Export),
        1 => Just(Wide::Epoch),
    ]
}

fn perform_wide(w: &mut World, now: Wall, s: &Wide, crash: &mut Option<(u8, u8, u8)>) {
    let ids = w.g.node_ids();
    let pick = |i: usize| ids[i % ids.len()].to_string();
    let _ = match *s {
        Wide::Base(ref b) => {
            perform(w, now, b, crash);
            Ok(())
        }
        Wide::ResolvePending(t, k) => {
            let pending = ids.iter().find(|id| {
                let n = w.g.node(id.as_str()).unwrap();
                n.node_type == NodeType::Disambiguation && n.resolved_into.is_none()
            });
            let Some(d) = pending else { return };
            let parent = w.g.node(d.as_str()).unwrap().spawned_by.clone().unwrap();
            let siblings: Vec<String> =
                w.g.node(parent.as_str())
                    .unwrap()
                    .spawned
                    .iter()
                    .filter(|c| *c != d)
                    .map(|c| c.to_string())
                    .collect();
            let mut c = vec![];
            if t & 1 != 0 {
                c.push(Candidate::Continue);
            }
            if t & 2 != 0 && !siblings.is_empty() {
                c.push(Candidate::Existing(siblings[k % siblings.len()].clone()));
            }
            for (bit, node_type) in [(4, NodeType::Task), (8, NodeType::Discussion)] {
                if t & bit != 0 || (bit == 4 && c.is_empty()) {
                    c.push(Candidate::New {
                        node_type,
                        title: format!("z{}", t % 3),
                        topic: String::new(),
                    });
                }
            }
            w.g.resolve(now, d.as_str(), c, "n").map(|_| ())
        }
        Wide::Archive(i, hidden) => w.g.archive(now, &pick(i), hidden),
        Wide::Reset(t) => w.g.reset(now, now - t as u64 * 1000, None).map(|_| ()),
        Wide::Wait(a, b, m) => {
            let mode =
                [None, Some(WaitMode::Warn), Some(WaitMode::Enforce)][m as usize % 3].clone();
            w.g.set_wait(now, &pick(a), &pick(b), mode)
        }
        Wide::Relate(a, b) => w.g.relate(now, &pick(a), &pick(b), RelatedKind::References),
        Wide::Bookmark => {
            w.g.bookmark(now, &Scope::Global, vec!["k".into()], "b", None)
                .map(|_| ())
        }
        Wide::Narrate => w.g.narrate(now, "story").map(|_| ()),
        Wide::Export => w.g.export(now).map(|_| ()),
        Wide::Epoch => w.g.reframe_epoch(now, "wave", None).map(|_| ()),
    };
}

proptest! {
    // 48 cases each by default (the suite stays fast); `PROPTEST_CASES=20000 cargo test -p
    // weft-core --lib actors::tests` for a long hunt.
    #![proptest_config(ProptestConfig { cases: crate::test_cases(48), ..ProptestConfig::default() })]

    /// After any sequence of spawn / message / route / status / resolve / ref operations,
    /// reopenings and crashes (a batch cut at any stage, with any subset of that stage's ops,
    /// appends torn), lineage is consistent, refs point at lines, and every acknowledged node
    /// survives with the parent it was acknowledged with.
    #[test]
    fn lineage_invariants_hold_under_any_sequence_and_crash(steps in proptest::collection::vec(step(), 1..40)) {
        check_sequence(steps, false)?;
    }

    /// The same when the recovery after each crash is itself cut by a crash (a host killed
    /// while it repairs): the next open still converges.
    #[test]
    fn lineage_invariants_hold_when_recovery_itself_crashes(steps in proptest::collection::vec(step(), 1..40)) {
        check_sequence(steps, true)?;
    }

    /// Every writer of the graph (resolutions into existing siblings, archive, reset, waits,
    /// related edges, bookmarks, narrative, export, epochs; per-node close-out so that waves
    /// write to parents' chats) under crashes of batches and of recoveries: lineage holds, the
    /// audit finds no bad ref, open leaves nothing unrepaired, and a final reopen is clean.
    #[test]
    fn every_writer_keeps_lineage_audit_and_recovery_clean(steps in proptest::collection::vec(wide_step(), 1..60)) {
        let (c, _) = HarnessConfig::from_vars([("ACTOR_GRAPH_EPOCHS", "on"), ("GIT_CLOSEOUT", "per-node")]).unwrap();
        let mut w = World::with(c);
        let mut acked = Acked::new();
        let mut crash = None;
        for s in steps {
            let now = w.tick();
            perform_wide(&mut w, now, &s, &mut crash);
            acked.settle(&mut w, &mut crash, |(stage, mask, tear)| Some((mask, tear, stage)), &s)?;
            let audit = w.g.audit();
            let bad: Vec<&AuditEntry> = audit.entries.iter().filter(|e| !e.ok).collect();
            prop_assert!(bad.is_empty(), "audit after {:?}: {:?}", s, bad);
            let open: Vec<&Diagnostic> = w.g.diagnostics().iter().filter(|d| !d.repaired).collect();
            prop_assert!(open.is_empty(), "unrepaired diagnostics after {:?}: {:?}", s, open);
        }
        w.reopen();
        let r = w.reopen();
        prop_assert!(r.repairs.is_empty() && r.diagnostics.is_empty(), "{:?}", r);
        prop_assert!(w.g.lineage_violations().is_empty());
    }
}

#[test]
fn a_spawn_batch_is_one_batch_of_three_stages_whatever_its_size() {
    let mut w = World::new();
    let now = w.tick();
    let reqs: Vec<SpawnRequest> = (0..4)
        .map(|_| SpawnRequest::new("coordinator", NodeType::Task))
        .collect();
    let outs = w.g.spawn_batch(now, reqs).unwrap();
    let ids: Vec<&str> = outs.iter().map(|o| o.child.as_str()).collect();
    assert_eq!(ids, ["task", "task-2", "task-3", "task-4"]);
    assert_eq!(
        code(w.g.append(now, "task-2", NewLine::user("x"))),
        "NOT_PERSISTED"
    );
    let batches = w.g.take_batches();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].stages.len(), 3);
    assert_eq!(
        batches[0].stages[0].len(),
        4,
        "the children, created together"
    );
    for b in batches {
        let done = w.store.perform(&b).unwrap();
        w.g.ack(done).unwrap();
    }
    w.g.append(now, "task-2", NewLine::user("x")).unwrap();
    w.flush();
    let r = w.reopen();
    assert!(r.diagnostics.is_empty() && r.repairs.is_empty(), "{r:?}");
    assert_eq!(w.g.node("coordinator").unwrap().spawned.len(), 4);
    // A refused request refuses the batch.
    let mut bad = SpawnRequest::new("coordinator", NodeType::Task);
    bad.id = Some("task".into());
    let reqs = vec![SpawnRequest::new("coordinator", NodeType::Task), bad];
    assert_eq!(code(w.g.spawn_batch(now, reqs)), "NODE_EXISTS");
    assert!(!w.g.has_batches());
    assert_eq!(w.g.node("coordinator").unwrap().spawned.len(), 4);
}

/// The head a lazy open reads (graph.json, the metathread, the node listing) and a reader
/// that adds node files from the whole snapshot, counting the nodes asked for.
fn lazy_open(
    w: &mut World,
    targets: &[&str],
    spawns: bool,
) -> (Result<LazyOpen, ActorsError>, Vec<String>) {
    lazy_open_with(w, targets, spawns, false)
}

/// [`lazy_open`], from a head the host `trusted` (no listing of `nodes/`: it is asked for
/// when the open cannot use the trust).
fn lazy_open_with(
    w: &mut World,
    targets: &[&str],
    spawns: bool,
    trusted: bool,
) -> (Result<LazyOpen, ActorsError>, Vec<String>) {
    let full = w.store.load().unwrap();
    let mut head = LazySnapshot {
        snap: Snapshot {
            files: full
                .files
                .iter()
                .filter(|(p, _)| *p == GRAPH || *p == METATHREAD)
                .map(|(p, b)| (p.clone(), b.clone()))
                .collect(),
            dirs: if trusted {
                Vec::new()
            } else {
                full.dirs.clone()
            },
        },
        tails: Default::default(),
        meta_mark: None,
        graph_ends: None,
        record_ends: Default::default(),
        trusted,
    };
    head.snap.dirs.sort();
    let mut asked = Vec::new();
    let out = ActorGraph::open_lazy(
        w.config.clone(),
        "mem://t",
        head,
        targets,
        spawns,
        |ask, head| {
            if ask.listing {
                asked.push("(listing)".into());
                head.snap.dirs = full.dirs.clone();
            }
            for id in ask.nodes {
                asked.push(id.clone());
                let prefix = format!("nodes/{id}/");
                for (p, b) in full.files.range(prefix.clone()..) {
                    if !p.starts_with(&prefix) {
                        break;
                    }
                    if p.ends_with("/chat.jsonl") {
                        // The end of the log only, as the filesystem store reads it.
                        let at = tail_start(b, ask.tail_lines, true).unwrap();
                        let tail = LogTail {
                            offset: at as u64,
                            lines_before: count_lines(&b[..at]),
                            bytes: b[at..].to_vec(),
                        };
                        head.tails.insert(p.clone(), tail);
                    } else {
                        head.snap.files.insert(p.clone(), b.clone());
                    }
                }
            }
            Ok::<(), ActorsError>(())
        },
    );
    (out, asked)
}

#[test]
fn a_trusted_lazy_open_keeps_ids_taken_and_grows_the_records_in_place() {
    let mut w = World::new();
    let a = w.spawn("coordinator", NodeType::Task, "alpha");
    w.spawn("coordinator", NodeType::Task, "beta");
    let now = w.tick();
    let (out, asked) = lazy_open_with(&mut w, &["coordinator"], true, true);
    let LazyOpen::Ready(mut lazy) = out.unwrap() else {
        panic!("a trusted head opens lazily")
    };
    assert!(lazy.opened_trusted());
    assert_eq!(asked, ["coordinator"], "no listing, no other node");
    // Ids of nodes not read stay taken; a derived id skips them.
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.id = Some(a.to_string());
    assert_eq!(code(lazy.spawn(now, r)), "NODE_EXISTS");
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.title = "alpha".into();
    let o = lazy.spawn(now, r).unwrap();
    assert_eq!(o.child.as_str(), "alpha-2");
    assert_eq!(
        code(lazy.append(now, a.as_str(), NewLine::user("x"))),
        "NOT_LOADED"
    );
    let batches = lazy.take_batches();
    let ops: Vec<(&str, String)> = batches[0].stages[1]
        .iter()
        .map(|op| {
            (
                op.to_json()["op"].as_str().unwrap().to_owned(),
                op.paths()[0].clone(),
            )
        })
        .map(|(k, p)| (if k == "patch" { "patch" } else { "other" }, p))
        .collect();
    assert!(ops.contains(&("patch", "graph.json".into())), "{ops:?}");
    assert!(
        ops.contains(&("patch", "nodes/coordinator/meta.json".into())),
        "{ops:?}"
    );
    for b in batches {
        let done = w.store.perform(&b).unwrap();
        lazy.ack(done).unwrap();
    }
    assert!(lazy.lazy_trusted());
    // A spawn that rewrites graph.json whole (a wait is a related edge) parses it first, so
    // the rewrite keeps every entry.
    let (out, _) = lazy_open_with(&mut w, &["coordinator", a.as_str()], true, true);
    let LazyOpen::Ready(mut lazy) = out.unwrap() else {
        panic!("opens lazily")
    };
    let mut r = SpawnRequest::new("coordinator", NodeType::Discussion);
    r.id = Some("gamma".into());
    r.wait_on.push((a.to_string(), WaitMode::Warn));
    lazy.spawn(now, r).unwrap();
    for b in lazy.take_batches() {
        let done = w.store.perform(&b).unwrap();
        lazy.ack(done).unwrap();
    }
    let r = w.reopen();
    assert!(r.diagnostics.is_empty() && r.repairs.is_empty(), "{r:?}");
    assert_eq!(w.g.node_ids().len(), 5);
    assert!(w.g.lineage_violations().is_empty());
    // A trusted head the open cannot use (GIT_CLOSEOUT=per-node now): it asks for the listing.
    w.config.git_closeout = crate::actors::CloseoutDefault::PerNode;
    let (out, asked) = lazy_open_with(&mut w, &["coordinator"], true, true);
    let LazyOpen::Ready(lazy) = out.unwrap() else {
        panic!("opens lazily")
    };
    assert!(!lazy.opened_trusted() && !lazy.lazy_trusted());
    assert_eq!(asked[0], "(listing)");
}

#[test]
fn a_lazy_open_reads_only_what_a_command_touches_and_writes_what_a_full_open_writes() {
    let mut w = World::new();
    let a = w.spawn("coordinator", NodeType::Task, "alpha");
    let b = w.spawn("coordinator", NodeType::Discussion, "beta");
    let now = w.tick();
    w.g.set_wait(now, b.as_str(), a.as_str(), Some(WaitMode::Warn))
        .unwrap();
    w.flush();
    let (out, asked) = lazy_open(&mut w, &["coordinator"], true);
    let LazyOpen::Ready(mut lazy) = out.unwrap() else {
        panic!("a clean store opens lazily")
    };
    assert_eq!(asked, ["coordinator"]);
    assert_eq!(
        code(lazy.append(now, b.as_str(), NewLine::user("x"))),
        "NOT_LOADED"
    );
    let (mut full, _) =
        ActorGraph::open(w.config.clone(), "mem://t", &w.store.load().unwrap(), now).unwrap();
    assert!(!full.has_batches());
    let now = w.tick();
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.title = "alpha".into();
    let o1 = lazy.spawn(now, r.clone()).unwrap();
    let o2 = full.spawn(now, r).unwrap();
    assert_eq!(
        o1.child.as_str(),
        "alpha-2",
        "ids of unread nodes stay taken"
    );
    assert_eq!(o1.child, o2.child);
    let (lb, fb) = (lazy.take_batches(), full.take_batches());
    assert_eq!(
        lb.iter().map(WriteBatch::to_json).collect::<Vec<_>>(),
        fb.iter().map(WriteBatch::to_json).collect::<Vec<_>>()
    );
    // A spawn cut before its last stage (no metathread record) needs the full open.
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.id = Some("cut".into());
    w.g.spawn(w.now, r).unwrap();
    let mut batch = w.g.take_batches().remove(0);
    batch.stages.pop();
    w.store.apply(&batch).unwrap();
    let (out, _) = lazy_open(&mut w, &["coordinator"], true);
    match out.unwrap() {
        LazyOpen::Full(why) => assert!(why.contains("`cut`"), "{why}"),
        LazyOpen::Ready(_) => panic!("a half-finished spawn opens in full"),
    }
}

#[test]
fn a_lazy_spawn_reads_every_task_only_when_the_wave_rule_may_change_one() {
    let config = HarnessConfig {
        git_closeout: CloseoutDefault::PerNode,
        ..HarnessConfig::default()
    };
    let mut w = World::with(config);
    w.spawn("coordinator", NodeType::Task, "one");
    w.spawn("coordinator", NodeType::Discussion, "talk");
    let (out, asked) = lazy_open(&mut w, &["coordinator"], true);
    assert!(matches!(out.unwrap(), LazyOpen::Ready(_)));
    assert_eq!(asked, ["coordinator", "one"]);
    let (_, asked) = lazy_open(&mut w, &["talk"], false);
    assert_eq!(asked, ["talk"], "a message reads its node only");
    w.config = HarnessConfig::default();
    let (_, asked) = lazy_open(&mut w, &["coordinator"], true);
    assert_eq!(
        asked,
        ["coordinator", "one"],
        "`one` was spawned per-node: the wave may move it"
    );
}

/// Hosts answer with the status the core assigns (the desk's problem+json): one per kind of
/// refusal, the model's failures as a bad gateway.
#[test]
fn every_error_has_the_http_status_of_its_kind() {
    let cases = [
        (ActorsError::UnknownNode("n".into()), "UNKNOWN_NODE", 404),
        (ActorsError::NotInitialized, "NOT_INITIALIZED", 404),
        (
            ActorsError::InvalidArgument("x".into()),
            "INVALID_ARGUMENT",
            400,
        ),
        (
            ActorsError::RefInvalid {
                node: "n".into(),
                line: 1,
                reason: "r".into(),
            },
            "REF_INVALID",
            422,
        ),
        (ActorsError::StoreLocked("l".into()), "STORE_LOCKED", 503),
        (ActorsError::StoreIo("e".into()), "STORE_IO", 500),
        (ActorsError::NodeExists("n".into()), "NODE_EXISTS", 409),
        (
            ActorsError::SymlinkRefused("s".into()),
            "SYMLINK_REFUSED",
            409,
        ),
        (
            ActorsError::HardLinkRefused("h".into()),
            "HARD_LINK_REFUSED",
            409,
        ),
        (
            ActorsError::Model(crate::model::ModelError::Timeout("t".into())),
            "MODEL_TIMEOUT",
            502,
        ),
    ];
    for (e, code, status) in cases {
        assert_eq!((e.code(), e.http_status()), (code, status));
    }
}

/// A host's reads of a record handed by its ends ([`GraphLookup::record`]): ranges of its
/// bytes, or nothing (`None`: the record cannot be read).
#[derive(Debug)]
struct RecordBytes(Option<Vec<u8>>);

impl GraphLookup for RecordBytes {
    fn exists(&self, _: &str) -> bool {
        false
    }
    fn graph(&self) -> Option<Vec<u8>> {
        None
    }
    fn record(&self, _: &str, from: u64, to: u64) -> Option<Vec<u8>> {
        self.0
            .as_ref()?
            .get(from as usize..to as usize)
            .map(<[u8]>::to_vec)
    }
}

/// A trusted lazy open of `target` whose `meta.json` is handed by its ends: the first bytes up
/// to a little past `spawned`'s key, the last 100 (`readable`: whether the rest can be read).
fn lazy_open_by_ends(w: &mut World, target: &str, readable: bool) -> Box<ActorGraph> {
    let full = w.store.load().unwrap();
    let head = LazySnapshot {
        snap: Snapshot {
            files: full
                .files
                .iter()
                .filter(|(p, _)| *p == GRAPH || *p == METATHREAD)
                .map(|(p, b)| (p.clone(), b.clone()))
                .collect(),
            dirs: Vec::new(),
        },
        trusted: true,
        ..Default::default()
    };
    let out = ActorGraph::open_lazy(
        w.config.clone(),
        "mem://t",
        head,
        &[target],
        true,
        |ask, head| {
            for id in ask.nodes {
                let meta = full.files[&meta_path(id)].clone();
                let k = meta
                    .windows(11)
                    .position(|x| x == b"\"spawned\": ")
                    .unwrap();
                let tail = meta[meta.len() - 100..].to_vec();
                let ends = RecordEnds {
                    head: meta[..k + 40].to_vec(),
                    tail,
                    size: meta.len() as u64,
                    lookup: std::sync::Arc::new(RecordBytes(readable.then_some(meta))),
                };
                head.record_ends.insert(id.clone(), ends);
                let chat = full.files[&format!("nodes/{id}/chat.jsonl")].clone();
                let at = tail_start(&chat, ask.tail_lines, true).unwrap();
                head.tails.insert(
                    format!("nodes/{id}/chat.jsonl"),
                    LogTail {
                        offset: at as u64,
                        lines_before: count_lines(&chat[..at]),
                        bytes: chat[at..].to_vec(),
                    },
                );
            }
            Ok::<(), ActorsError>(())
        },
    );
    match out.unwrap() {
        LazyOpen::Ready(g) => g,
        LazyOpen::Full(why) => panic!("fell back: {why}"),
    }
}

#[test]
fn a_record_read_by_its_ends_grows_in_place_and_is_read_whole_before_a_rewrite() {
    let mut w = World::new();
    let kids: Vec<NodeId> = (0..30)
        .map(|i| w.spawn("coordinator", NodeType::Task, &format!("kid {i}")))
        .collect();
    let now = w.tick();
    // A spawn patches the record without its children.
    let mut lazy = lazy_open_by_ends(&mut w, "coordinator", true);
    assert!(lazy.opened_trusted());
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.id = Some("by-ends".into());
    lazy.spawn(now, r).unwrap();
    let batches = lazy.take_batches();
    let ops: Vec<Value> = batches[0].stages[1].iter().map(Op::to_json).collect();
    assert!(
        ops.iter()
            .any(|o| o["op"] == "patch" && o["path"] == "nodes/coordinator/meta.json"),
        "{ops:?}"
    );
    for b in batches {
        let done = w.store.perform(&b).unwrap();
        lazy.ack(done).unwrap();
    }
    assert!(lazy.lazy_trusted());
    assert_eq!(lazy.lazy_records(), ["nodes/coordinator/meta.json"]);
    // A status change rewrites it whole: with every child, the ones read back first.
    lazy.set_status(now, "coordinator", Status::Idle, Some("x".into()), None)
        .unwrap();
    for b in lazy.take_batches() {
        let done = w.store.perform(&b).unwrap();
        lazy.ack(done).unwrap();
    }
    let r = w.reopen();
    assert!(r.diagnostics.is_empty() && r.repairs.is_empty(), "{r:?}");
    let mut want = kids.clone();
    want.push(NodeId::parse("by-ends").unwrap());
    assert_eq!(w.g.node("coordinator").unwrap().spawned, want);
    assert_eq!(w.g.node("coordinator").unwrap().status, Status::Idle);
    assert!(w.g.lineage_violations().is_empty());
    // When the children cannot be read back, the change is refused up front with the store's
    // error (nothing queued, the node unchanged), and the record keeps every child.
    let before = w.store.load().unwrap().files[&meta_path("coordinator")].clone();
    let mut lazy = lazy_open_by_ends(&mut w, "coordinator", false);
    let err = lazy
        .set_status(now, "coordinator", Status::Done, None, None)
        .unwrap_err();
    assert_eq!(err.code(), "STORE_IO", "{err}");
    assert!(lazy.take_batches().is_empty());
    assert_ne!(lazy.node("coordinator").unwrap().status, Status::Done);
    assert_eq!(
        w.store.load().unwrap().files[&meta_path("coordinator")],
        before
    );
    w.reopen();
    assert_eq!(w.g.node("coordinator").unwrap().spawned, want);
}

/// The nodes a spawn visits (`NODES_VISITED`) and the ops of its batch, in a graph grown to
/// `nodes` nodes under the root (one in four a task, so the wave rule is live), for a single
/// task spawned under the root, one under a task, and a wave of ten under the root.
fn spawn_work(nodes: usize) -> Vec<(u64, usize)> {
    let mut w = World::new();
    let mut k = 0;
    while w.g.nodes.len() < nodes {
        let n = (nodes - w.g.nodes.len()).min(MAX_SPAWN_BATCH);
        let reqs = (0..n)
            .map(|_| {
                k += 1;
                let t = if k % 4 == 0 {
                    NodeType::Task
                } else {
                    NodeType::Discussion
                };
                let mut r = SpawnRequest::new("coordinator", t);
                r.id = Some(format!("p{k}"));
                r
            })
            .collect();
        let now = w.tick();
        w.g.spawn_batch(now, reqs).unwrap();
        w.flush();
    }
    let mut out = Vec::new();
    let mut measure = |w: &mut World, f: &dyn Fn(&mut ActorGraph, Wall)| {
        let now = w.tick();
        let before = NODES_VISITED.with(|c| c.get());
        f(&mut w.g, now);
        let visited = NODES_VISITED.with(|c| c.get()) - before;
        let batches = w.g.take_batches();
        let ops = batches
            .iter()
            .flat_map(|b| b.stages.iter().flatten())
            .count();
        for b in batches {
            let done = w.store.perform(&b).unwrap();
            w.g.ack(done).unwrap();
        }
        out.push((visited, ops));
    };
    let task = |id: &str, parent: &str| {
        let mut r = SpawnRequest::new(parent, NodeType::Task);
        r.id = Some(id.into());
        r
    };
    measure(&mut w, &|g, now| {
        g.spawn(now, task("probe", "coordinator")).unwrap();
    });
    measure(&mut w, &|g, now| {
        g.spawn(now, task("probe-child", "probe")).unwrap();
    });
    measure(&mut w, &|g, now| {
        let reqs = (0..10).map(|i| task(&format!("wave{i}"), "coordinator"));
        g.spawn_batch(now, reqs.collect()).unwrap();
    });
    // (The lineage check is quadratic in a parent's children: at the small size only.)
    assert!(nodes > 1_000 || w.g.lineage_violations().is_empty());
    out
}

#[test]
fn a_spawn_visits_no_node_whatever_the_graph_and_parent_size() {
    let small = spawn_work(100);
    let large = spawn_work(10_000);
    assert_eq!(
        small, large,
        "(nodes visited, ops) per spawn at 100 vs 10,000 nodes"
    );
    assert!(
        small.iter().all(|(visited, _)| *visited == 0),
        "a spawn walks no node: {small:?}"
    );
}
