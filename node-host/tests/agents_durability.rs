//! The filesystem store carries the core's durability decision for agent turns
//! (`weft_core::actors::Durability`): a `Written` batch is written without an fsync (its lines
//! are in the file at once, for any process that opens the root after this one is killed), and
//! the next `Synced` batch fsyncs them in its first round — one fsync for a plain turn, the
//! file it appends to anyway counted once; a sync point with nothing of its own to write still
//! pays what is owed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use weft_core::actors::store::{ActorStore, WriteBatch};
use weft_core::actors::{ActorGraph, Durability, HarnessConfig};
use weft_core::agents::{AgentConfig, LineAck, NodeAgent, admit_user_line};
use weft_host::actors::{FsStore, now, wall_ms};

fn perform(g: &mut ActorGraph, store: &mut FsStore, batches: Vec<WriteBatch>) {
    for b in batches {
        let done = store.perform(&b).expect("store");
        g.ack(done).expect("ack");
    }
}

fn fsyncs(store: &FsStore) -> (u64, u64) {
    (
        store.stats.fsyncs.load(Ordering::Relaxed),
        store.stats.rounds.load(Ordering::Relaxed),
    )
}

#[test]
fn a_turn_is_written_before_the_ask_and_fsynced_once_at_its_end() {
    let dir = std::env::temp_dir().join(format!("weft-agents-durability-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let root = dir.join("root");
    let mut store = FsStore::open_writer(&root, Duration::ZERO).unwrap();
    let snap = store.load().unwrap();
    let mut g = ActorGraph::init(
        HarnessConfig::default(),
        &store.address(),
        &snap,
        wall_ms(),
        "t",
    )
    .unwrap();
    let b = g.take_batches();
    perform(&mut g, &mut store, b);
    let (mut a, _) = NodeAgent::open(now(), &mut g, "coordinator", AgentConfig::default()).unwrap();
    let b = g.take_batches();
    perform(&mut g, &mut store, b);
    let chat = root.join("nodes/coordinator/chat.jsonl");

    // The person's line (acknowledged with the turn's end) and `turn_start`: written, no fsync.
    let before = fsyncs(&store);
    admit_user_line(
        wall_ms(),
        &mut g,
        "coordinator",
        "first words",
        LineAck::WithTurnEnd,
    )
    .unwrap();
    a.sync(now(), &mut g).unwrap();
    let b = g.take_batches();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].sync, Durability::Written);
    perform(&mut g, &mut store, b);
    assert_eq!(fsyncs(&store), before, "a written batch issues no fsync");
    let text = std::fs::read_to_string(&chat).unwrap();
    assert!(text.contains("first words") && text.contains("turn_start"));

    // The answer and `turn_end` (synced): one fsync of `chat.jsonl` covers both batches.
    let input = a.model_input(&g).expect("the released step");
    a.on_model_response(now(), &mut g, input.step, input.builtin_answer())
        .unwrap();
    let b = g.take_batches();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].sync, Durability::Synced);
    perform(&mut g, &mut store, b);
    let after = fsyncs(&store);
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 1),
        "one fsync in one round per turn"
    );
    while a.poll_output(&g).is_some() {}

    // Written, then a sync point with nothing of its own: the empty synced batch fsyncs it.
    admit_user_line(
        wall_ms(),
        &mut g,
        "coordinator",
        "more",
        LineAck::WithTurnEnd,
    )
    .unwrap();
    let b = g.take_batches();
    perform(&mut g, &mut store, b);
    let before = fsyncs(&store);
    g.require_synced();
    let b = g.take_batches();
    assert_eq!((b.len(), b[0].op_count()), (1, 0));
    perform(&mut g, &mut store, b);
    let after = fsyncs(&store);
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1));

    // A line acknowledged on store (the desk's `POST`) is fsynced by its own batch.
    let before = fsyncs(&store);
    admit_user_line(wall_ms(), &mut g, "coordinator", "stored", LineAck::OnStore).unwrap();
    let b = g.take_batches();
    assert_eq!(b[0].sync, Durability::Synced);
    perform(&mut g, &mut store, b);
    assert_eq!(fsyncs(&store).0 - before.0, 1);

    // Written lines, then a synced batch that writes elsewhere (a metathread record that may
    // name them): the debt is paid in a round of its own before that batch writes anything,
    // so the record never reaches the disk ahead of the lines it names.
    admit_user_line(
        wall_ms(),
        &mut g,
        "coordinator",
        "named later",
        LineAck::WithTurnEnd,
    )
    .unwrap();
    let b = g.take_batches();
    perform(&mut g, &mut store, b);
    let before = fsyncs(&store);
    g.narrate(wall_ms(), "a record elsewhere").unwrap();
    let b = g.take_batches();
    assert_eq!(b[0].sync, Durability::Synced);
    assert!(
        b[0].stages.iter().flatten().all(|op| !op
            .paths()
            .iter()
            .any(|p| p == "nodes/coordinator/chat.jsonl")),
        "the batch writes only elsewhere"
    );
    perform(&mut g, &mut store, b);
    let after = fsyncs(&store);
    assert_eq!(
        after.1 - before.1,
        2,
        "the owed fsync in its own round, then the batch's own"
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
