//! A root of 10,000 nodes, generated on disk (not spawned one by one): it opens, and a spawn, a
//! message and a status change through the CLI's lazy writer ([`Session::writer_lazy`]) each
//! open the same number of files as on a root of 10 nodes (counted by the store's walls) and
//! read as many bytes: `graph.json` and the parent's `meta.json` (the records that grow with
//! the root) are read by their ends, logs from their ends. A lazy command writes exactly what a
//! full open would have written, and a root that needs recovery falls back to the full open,
//! which recovers.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use weft_core::actors::{HarnessConfig, NewLine, NodeType, Role, SpawnRequest, Status};
use weft_host::actors::Session;

const NOW: weft_core::Wall = weft_core::Wall::from_ms(1_800_000_000_000);
const TEMPLATE: &str = "gen-00000";

/// A root with the coordinator and `n` task children, written directly: one task is spawned
/// through the CLI as the template, the others are copies of its files (under ids of the same
/// length), with the coordinator's `spawned[]`, routing markers, `graph.json` entries and
/// metathread spawn records a spawn writes.
fn generate(name: &str, n: usize) -> PathBuf {
    let root = scratch(name);
    let r = root.to_str().unwrap();
    run_json(&["actors", "init", r, "--json"]);
    run_json(&["actors", "spawn", r, "--id", TEMPLATE, "--json"]);
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap();
    let t_meta = read(&format!("nodes/{TEMPLATE}/meta.json"));
    let t_chat = read(&format!("nodes/{TEMPLATE}/chat.jsonl"));
    let mut c_chat = read("nodes/coordinator/chat.jsonl");
    let t_marker = c_chat.lines().last().unwrap().to_owned();
    let mut meta_log = read("orchestrator/meta.jsonl");
    let t_record = meta_log.lines().last().unwrap().to_owned();
    assert!(t_record.contains(TEMPLATE) && t_marker.contains(TEMPLATE));
    let mut graph: Value = serde_json::from_str(&read("graph.json")).unwrap();
    let mut coord: Value = serde_json::from_str(&read("nodes/coordinator/meta.json")).unwrap();
    let mut lines = c_chat.lines().count() as u64;
    for i in 1..n {
        let id = format!("gen-{i:05}");
        let dir = root.join("nodes").join(&id);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("meta.json"), t_meta.replace(TEMPLATE, &id)).unwrap();
        std::fs::write(dir.join("chat.jsonl"), &t_chat).unwrap();
        lines += 1;
        c_chat.push_str(&t_marker.replace(TEMPLATE, &id));
        c_chat.push('\n');
        let mut rec: Value = serde_json::from_str(&t_record.replace(TEMPLATE, &id)).unwrap();
        rec["parentLine"] = json!(lines);
        meta_log.push_str(&serde_json::to_string(&rec).unwrap());
        meta_log.push('\n');
        graph["nodes"][&id] = graph["nodes"][TEMPLATE].clone();
        coord["spawned"].as_array_mut().unwrap().push(json!(id));
    }
    let write = |rel: &str, text: String| std::fs::write(root.join(rel), text).unwrap();
    write("nodes/coordinator/chat.jsonl", c_chat);
    write("orchestrator/meta.jsonl", meta_log);
    write(
        "graph.json",
        serde_json::to_string_pretty(&graph).unwrap() + "\n",
    );
    write(
        "nodes/coordinator/meta.json",
        serde_json::to_string_pretty(&coord).unwrap() + "\n",
    );
    root
}

fn config() -> HarnessConfig {
    HarnessConfig::default()
}

fn lazy(root: &Path, targets: &[&str], spawns: bool) -> Session {
    let s = Session::writer_lazy(root, config(), Duration::from_secs(5), targets, spawns).unwrap();
    assert_eq!(s.report.lazy_fallback, None, "the lazy open fell back");
    assert!(s.graph.is_lazy());
    s
}

/// Files opened and bytes read by a spawn, a message and a status change, one writer each (as
/// the CLI runs them), after one spawn that finds the logs rewritten by [`generate`] (and reads
/// them whole once).
fn costs(root: &Path, tag: &str) -> ([(u64, u64); 3], u64) {
    let spawn_one = |id: String| {
        let mut s = lazy(root, &["coordinator"], true);
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some(id);
        s.graph.spawn(NOW, r).unwrap();
        s.flush().unwrap();
        let written = s.store.stats.bytes_written.load(Ordering::Relaxed);
        (
            (s.store.opens(), s.store.bytes_read()),
            written,
            s.graph.opened_trusted(),
        )
    };
    // The first spawn also rewrites graph.json and the coordinator's record whole: generate
    // wrote them with sorted keys, not in the canonical form a spawn grows in place.
    // It leaves stamps of graph.json and nodes/ that the next commands trust: they neither
    // parse graph.json nor list nodes/.
    let (_, _, trusted) = spawn_one(format!("warm-{tag}"));
    assert!(
        !trusted,
        "generate changed graph.json and nodes/ behind the stamps"
    );
    let (spawn, written, trusted) = spawn_one(format!("new-{tag}"));
    assert!(trusted, "the spawn after a lazy spawn trusts its stamps");
    let child = format!("new-{tag}");
    let mut s = lazy(root, &[&child], false);
    assert!(s.graph.opened_trusted());
    let line = s.graph.append(NOW, &child, NewLine::user("hello")).unwrap();
    assert_eq!(line, 2, "the child's addendum, then this line");
    s.flush().unwrap();
    let message = (s.store.opens(), s.store.bytes_read());
    drop(s);
    let mut s = lazy(root, &["gen-00003"], false);
    s.graph
        .set_status(NOW, "gen-00003", Status::Done, Some("ok".into()), None)
        .unwrap();
    s.flush().unwrap();
    let status = (s.store.opens(), s.store.bytes_read());
    ([spawn, message, status], written)
}

fn size(root: &Path, rel: &str) -> u64 {
    std::fs::metadata(root.join(rel)).unwrap().len()
}

#[test]
fn a_spawn_a_message_and_a_status_change_open_as_many_files_at_10_as_at_10000_nodes() {
    let small = generate("scale-10", 10);
    let big = generate("scale-10k", 10_000);
    let (at_10, written_10) = costs(&small, "a");
    let (at_10k, written_10k) = costs(&big, "a");
    // Bytes written by a spawn: the child, the patches growing graph.json and the parent's
    // record, the marker and the record — the same at 10,000 nodes as at 10 (a few digits of
    // line numbers apart), never the records that grow with the root.
    assert!(
        written_10k <= written_10 + 64 && written_10k < 4096,
        "a spawn wrote {written_10k} bytes at 10,000 nodes, {written_10} at 10"
    );
    let opens = |c: &[(u64, u64); 3]| c.map(|(o, _)| o);
    assert_eq!(
        opens(&at_10),
        opens(&at_10k),
        "files opened (spawn, message, status)"
    );
    for c in opens(&at_10) {
        assert!(c <= 30, "a command opened {c} files: {at_10:?}");
    }
    // Bytes: graph.json and the coordinator's meta.json are read by their ends only (trusted
    // stamps: ids are looked up in nodes/, the children are not read), and the logs
    // (1.9 MB of metathread, 1.2 MB of coordinator chat at 10,000 nodes) are read from a kept
    // mark and their last lines — within a few stride lengths of what the small root reads.
    let grown = |rel: &str| size(&big, rel) - size(&small, rel);
    let graph = grown("graph.json");
    let coord = grown("nodes/coordinator/meta.json");
    let logs = size(&big, "orchestrator/meta.jsonl") + size(&big, "nodes/coordinator/chat.jsonl");
    let slack = 64 * 1024;
    assert!(logs > 20 * slack, "the big root's logs are big: {logs}");
    assert!(
        graph > 10 * slack,
        "the big root's graph.json is big: {graph}"
    );
    assert!(
        coord > 2 * slack,
        "the big root's parent record is big: {coord}"
    );
    for i in 0..3 {
        let (small_b, big_b) = (at_10[i].1, at_10k[i].1);
        assert!(
            big_b <= small_b + slack,
            "command {i} read {big_b} bytes at 10,000 nodes, {small_b} at 10 \
             (graph.json grew {graph}, the coordinator's meta.json {coord})"
        );
    }
    // The big root holds the four changes (read without weft: a full open of 10,000 nodes
    // is not what this test pays for); the small one opens whole, in full, without a
    // diagnostic.
    // Trusted at 10,000 nodes, ids are still looked up: an id taken is refused, a derived id
    // skips the ids taken.
    let mut s = lazy(&big, &["coordinator"], true);
    assert!(s.graph.opened_trusted());
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.id = Some("gen-09999".into());
    let e = s.graph.spawn(NOW, r).unwrap_err();
    assert_eq!(e.code(), "NODE_EXISTS", "{e}");
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.title = "new a".into();
    let out = s.graph.spawn(NOW, r).unwrap();
    let derived = out.child.to_string();
    assert!(
        derived.starts_with("new-a") && derived != "new-a",
        "{derived}"
    );
    s.flush().unwrap();
    drop(s);
    let graph: Value =
        serde_json::from_slice(&std::fs::read(big.join("graph.json")).unwrap()).unwrap();
    assert_eq!(graph["nodes"].as_object().unwrap().len(), 10_004);
    assert_eq!(graph["nodes"][&derived]["spawnedBy"], "coordinator");
    assert_eq!(graph["nodes"]["new-a"]["spawnedBy"], "coordinator");
    let coord: Value =
        serde_json::from_slice(&std::fs::read(big.join("nodes/coordinator/meta.json")).unwrap())
            .unwrap();
    assert_eq!(coord["spawned"].as_array().unwrap().len(), 10_003);
    let chat = std::fs::read_to_string(big.join("nodes/new-a/chat.jsonl")).unwrap();
    assert_eq!(chat.lines().count(), 2);
    let done: Value =
        serde_json::from_slice(&std::fs::read(big.join("nodes/gen-00003/meta.json")).unwrap())
            .unwrap();
    assert_eq!(done["status"], "done");
    let s = Session::reader(&small, config()).unwrap();
    assert!(
        s.report.diagnostics.is_empty(),
        "{:?}",
        s.report.diagnostics
    );
    assert_eq!(s.graph.node_ids().len(), 13);
    assert_eq!(s.graph.chat("new-a").unwrap().len(), 2);
    assert_eq!(s.graph.node("gen-00003").unwrap().status, Status::Done);
    assert!(lineage_problems(&read_disk(&small)).is_empty());
    let _ = std::fs::remove_dir_all(&big);
    let _ = std::fs::remove_dir_all(&small);
}

/// A spawn's reads do not grow with its parent's children: the parent's `meta.json` (whose
/// stamp the last lazy writer kept) is read by its ends, never its `spawned[]`. A record
/// changed behind its stamp is read whole; a whole rewrite of a record read by its ends (a
/// status change) keeps every child.
#[test]
fn a_spawn_reads_as_many_bytes_under_4000_children_as_under_400() {
    let small = generate("children-400", 400);
    let big = generate("children-4000", 4000);
    let spawn = |root: &Path, id: &str| {
        let mut s = lazy(root, &["coordinator"], true);
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some(id.into());
        s.graph.spawn(NOW, r).unwrap();
        s.flush().unwrap();
        (
            s.store.opens(),
            s.store.bytes_read(),
            s.graph.opened_trusted(),
        )
    };
    let record = |root: &Path| root.join("nodes/coordinator/meta.json");
    let mut at = Vec::new();
    for root in [&small, &big] {
        // The first spawn rewrites the generated records in canonical form and keeps their
        // stamps; the next ones read the parent by its ends.
        spawn(root, "warm-1");
        let (_, _, trusted) = spawn(root, "warm-2");
        assert!(trusted);
        at.push(spawn(root, "measured"));
    }
    let grown =
        size(&big, "nodes/coordinator/meta.json") - size(&small, "nodes/coordinator/meta.json");
    assert!(grown > 60_000, "the big parent's record is big: {grown}");
    let ((o_small, b_small, _), (o_big, b_big, _)) = (at[0], at[1]);
    assert_eq!(o_small, o_big, "files opened");
    assert!(
        b_big <= b_small + 1024,
        "a spawn read {b_big} bytes under 4,000 children, {b_small} under 400 (the record grew {grown})"
    );
    // Changed behind its stamp (rewritten by another tool, same bytes): read whole once, then
    // by its ends again.
    let bytes = std::fs::read(record(&big)).unwrap();
    std::fs::write(record(&big), &bytes).unwrap();
    let (_, b, _) = spawn(&big, "after-edit");
    assert!(
        b >= b_big + bytes.len() as u64 - 8192,
        "read {b} after the edit"
    );
    let (_, b, _) = spawn(&big, "after-edit-2");
    assert!(
        b <= b_small + 1024,
        "read {b} once the stamp was kept again"
    );
    // A status change of the parent rewrites its record whole, with every child.
    let mut s = lazy(&big, &["coordinator"], false);
    assert!(s.graph.opened_trusted());
    s.graph
        .set_status(NOW, "coordinator", Status::Idle, Some("x".into()), None)
        .unwrap();
    s.flush().unwrap();
    assert!(s.store.bytes_read() >= grown, "the children were read back");
    drop(s);
    let coord: Value = serde_json::from_slice(&std::fs::read(record(&big)).unwrap()).unwrap();
    let spawned = coord["spawned"].as_array().unwrap();
    assert_eq!(spawned.len(), 4000 + 5);
    assert_eq!(spawned[0], TEMPLATE);
    assert_eq!(spawned[4004], "after-edit-2");
    assert_eq!(coord["status"], "idle");
    let (_, _, trusted) = spawn(&big, "after-status");
    assert!(trusted);
    let s = Session::reader(&big, config()).unwrap();
    assert!(
        s.report.diagnostics.is_empty(),
        "{:?}",
        s.report.diagnostics
    );
    assert_eq!(s.graph.node("coordinator").unwrap().spawned.len(), 4006);
    drop(s);
    let _ = std::fs::remove_dir_all(&big);
    let _ = std::fs::remove_dir_all(&small);
}

/// The long-lived writer (desk, `weft serve`) holds the whole graph: its spawns grow
/// graph.json and the parent's record in place too, so the 300th spawn writes as many bytes as
/// the second (a few digits of line numbers apart), while graph.json alone has grown past what
/// a whole rewrite would cost.
#[test]
fn a_long_lived_writer_spawn_writes_as_many_bytes_at_300_nodes_as_at_3() {
    let root = generate("scale-long", 2);
    let mut s = Session::writer(&root, config(), Duration::from_secs(5)).unwrap();
    let mut per_spawn = Vec::new();
    for i in 0..300 {
        let before = s.store.stats.bytes_written.load(Ordering::Relaxed);
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some(format!("long-{i:03}"));
        s.graph.spawn(NOW, r).unwrap();
        s.flush().unwrap();
        per_spawn.push(s.store.stats.bytes_written.load(Ordering::Relaxed) - before);
    }
    drop(s);
    let (second, last) = (per_spawn[1], per_spawn[299]);
    let graph = size(&root, "graph.json");
    assert!(
        graph > 15_000,
        "graph.json holds 302 entries: {graph} bytes"
    );
    assert!(
        last <= second + 64 && last < 4096,
        "the 300th spawn wrote {last} bytes, the second {second}"
    );
    let s = Session::reader(&root, config()).unwrap();
    assert!(
        s.report.diagnostics.is_empty(),
        "{:?}",
        s.report.diagnostics
    );
    assert_eq!(s.graph.node_ids().len(), 303);
    assert_eq!(s.graph.node("coordinator").unwrap().spawned.len(), 302);
    assert!(lineage_problems(&read_disk(&root)).is_empty());
    let _ = std::fs::remove_dir_all(&root);
}

/// What a power loss can leave of a spawn's in-place writes: the parent's record and
/// graph.json cut inside the bytes the patch added. The next writer's open repairs both
/// (`TORN_RECORD`, graph.json rebuilt from the records) and links the child again.
#[test]
fn a_torn_patch_of_the_parent_and_graph_json_is_repaired_on_open() {
    let root = generate("scale-torn", 3);
    for id in ["p-1", "p-2"] {
        let mut s = lazy(&root, &["coordinator"], true);
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some(id.into());
        s.graph.spawn(NOW, r).unwrap();
        s.flush().unwrap();
    }
    let cut = |rel: &str, needle: &str| {
        let p = root.join(rel);
        let text = std::fs::read_to_string(&p).unwrap();
        let at = text.rfind(needle).unwrap() + needle.len() / 2;
        let mut b = text.as_bytes()[..at].to_vec();
        b.extend_from_slice(&[0u8; 9]);
        std::fs::write(&p, b).unwrap();
    };
    cut("nodes/coordinator/meta.json", "\"p-2\"");
    cut("graph.json", "\"p-2\": {");
    let s = Session::writer(&root, config(), Duration::from_secs(5)).unwrap();
    let codes: Vec<&str> = s.report.diagnostics.iter().map(|d| d.code).collect();
    assert!(codes.contains(&"TORN_RECORD"), "{codes:?}");
    assert!(
        s.report
            .repairs
            .iter()
            .any(|r| r.contains("linked `p-2` into `coordinator`")),
        "{:?}",
        s.report.repairs
    );
    assert_eq!(s.graph.node("coordinator").unwrap().spawned.len(), 5);
    drop(s);
    assert!(lineage_problems(&read_disk(&root)).is_empty());
    let s = Session::reader(&root, config()).unwrap();
    assert!(s.report.repairs.is_empty(), "{:?}", s.report.repairs);
    let _ = std::fs::remove_dir_all(&root);
}

/// Every file of `root`, with the paths of `roots` spelled out replaced (node addresses).
fn files(root: &Path, roots: &[&Path]) -> BTreeMap<String, Vec<u8>> {
    let addrs: Vec<String> = roots
        .iter()
        .map(|r| {
            std::fs::canonicalize(r)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    snapshot(root)
        .into_iter()
        .filter(|(k, _)| !k.starts_with(".weft"))
        .map(|(k, v)| {
            let mut t = String::from_utf8(v).unwrap();
            for a in &addrs {
                t = t.replace(a.as_str(), "ROOT");
            }
            (k, t.into_bytes())
        })
        .collect()
}

#[test]
fn a_lazy_command_writes_what_a_full_open_writes() {
    // 150 nodes: graph.json is past what a trusted open reads whole (it reads its ends).
    let a = generate("scale-lazy", 150);
    assert!(
        size(&a, "graph.json") > 2 * 4096,
        "graph.json is read by its ends"
    );
    let b = scratch("scale-full").join("root");
    copy_dir(&a, &b);
    let run = |root: &Path, lazy_open: bool| {
        let open = |targets: &[&str], spawns: bool| {
            if lazy_open {
                lazy(root, targets, spawns)
            } else {
                Session::writer(root, config(), Duration::from_secs(5)).unwrap()
            }
        };
        // A first spawn rewrites graph.json (generate's sorted keys) in canonical form: the
        // next lazy opens trust the stamps it keeps.
        let mut s = open(&["coordinator"], true);
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some("warm".into());
        s.graph.spawn(NOW, r).unwrap();
        s.flush().unwrap();
        drop(s);
        let mut s = open(&["gen-00002"], false);
        s.graph
            .set_status(NOW, "gen-00002", Status::Running, None, None)
            .unwrap();
        s.flush().unwrap();
        drop(s);
        let mut s = open(&["coordinator", "gen-00002"], true);
        // Trusted, with graph.json handed by its ends: the wait edge makes the spawn rewrite
        // graph.json whole, which reads it whole first.
        assert_eq!(s.graph.opened_trusted(), lazy_open);
        let mut r = SpawnRequest::new("coordinator", NodeType::Discussion);
        r.title = "Docs sync".into();
        r.wait_on
            .push(("gen-00002".into(), weft_core::actors::WaitMode::Warn));
        let o = s.graph.spawn(NOW, r).unwrap();
        s.flush().unwrap();
        drop(s);
        let child = o.child.to_string();
        let mut s = open(&[&child, "gen-00002"], false);
        let mut l = NewLine::user("from the worker");
        l.role = Role::Assistant;
        s.graph.append(NOW, &child, l).unwrap();
        s.flush().unwrap();
    };
    run(&a, true);
    run(&b, false);
    let (fa, fb) = (files(&a, &[&a, &b]), files(&b, &[&a, &b]));
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    for (k, v) in &fa {
        assert_eq!(
            String::from_utf8_lossy(v),
            String::from_utf8_lossy(&fb[k]),
            "{k} differs (lazy, full)"
        );
    }
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn a_half_finished_spawn_makes_the_lazy_open_fall_back_and_recover() {
    let root = generate("scale-crash", 5);
    // A spawn that stopped before its last stage: no metathread record for `gen-00004`.
    let p = root.join("orchestrator/meta.jsonl");
    let log = std::fs::read_to_string(&p).unwrap();
    let kept: Vec<&str> = log
        .lines()
        .filter(|l| !l.contains("\"child\":\"gen-00004\""))
        .collect();
    assert_eq!(kept.len() + 1, log.lines().count());
    std::fs::write(&p, kept.join("\n") + "\n").unwrap();
    let s = Session::writer_lazy(
        &root,
        config(),
        Duration::from_secs(5),
        &["gen-00001"],
        false,
    )
    .unwrap();
    let why = s
        .report
        .lazy_fallback
        .clone()
        .expect("falls back to a full open");
    assert!(why.contains("gen-00004"), "{why}");
    assert!(!s.graph.is_lazy());
    assert!(
        s.report
            .repairs
            .iter()
            .any(|r| r.contains("spawn record of `gen-00004`")),
        "{:?}",
        s.report.repairs
    );
    drop(s);
    // Recovered: the next command opens lazily again.
    let s = lazy(&root, &["gen-00001"], false);
    assert!(s.graph.node("gen-00001").is_some());
    assert!(
        s.graph.node("gen-00002").is_none(),
        "only what the command names is read"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn spawn_count_spawns_a_wave_in_one_batch() {
    let root = generate("scale-count", 3);
    let r = root.to_str().unwrap();
    let v = run_json(&["actors", "spawn", r, "--count", "3", "--id", "w", "--json"]);
    let ids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["w-1", "w-2", "w-3"]);
    let batches: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["batch"].as_u64().unwrap())
        .collect();
    assert!(
        batches.windows(2).all(|b| b[0] == b[1]),
        "one batch: {batches:?}"
    );
    assert!(lineage_problems(&read_disk(&root)).is_empty());
    run_json(&[
        "actors", "message", r, "--node", "w-2", "--text", "hi", "--json",
    ]);
    let _ = std::fs::remove_dir_all(&root);
}

/// With marks kept from an earlier command (the logs are read from them, not whole), what a
/// full open would recover or report still sends the command to the full open: a node whose
/// spawn record is missing (the sums of digests disagree) and a torn last metathread line.
#[test]
fn kept_marks_still_see_a_missing_spawn_record_and_a_torn_tail() {
    let root = generate("scale-marks", 5);
    let mut s = lazy(&root, &["coordinator"], true);
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.id = Some("warm".into());
    s.graph.spawn(NOW, r).unwrap();
    s.flush().unwrap();
    drop(s);
    assert!(root.join(weft_host::actors::fs_store::MARKS_FILE).is_file());
    // Another tool adds a node to nodes/, graph.json and the parent, without a record.
    let dir = root.join("nodes/foreign");
    std::fs::create_dir(&dir).unwrap();
    let meta = std::fs::read_to_string(root.join("nodes/gen-00001/meta.json")).unwrap();
    std::fs::write(dir.join("meta.json"), meta.replace("gen-00001", "foreign")).unwrap();
    std::fs::copy(
        root.join("nodes/gen-00001/chat.jsonl"),
        dir.join("chat.jsonl"),
    )
    .unwrap();
    let gp = root.join("graph.json");
    let mut graph: Value = serde_json::from_slice(&std::fs::read(&gp).unwrap()).unwrap();
    graph["nodes"]["foreign"] = graph["nodes"]["gen-00001"].clone();
    std::fs::write(&gp, serde_json::to_string_pretty(&graph).unwrap() + "\n").unwrap();
    let cp = root.join("nodes/coordinator/meta.json");
    let mut coord: Value = serde_json::from_slice(&std::fs::read(&cp).unwrap()).unwrap();
    coord["spawned"]
        .as_array_mut()
        .unwrap()
        .push(json!("foreign"));
    std::fs::write(&cp, serde_json::to_string_pretty(&coord).unwrap() + "\n").unwrap();
    let s = Session::writer_lazy(
        &root,
        config(),
        Duration::from_secs(5),
        &["gen-00001"],
        false,
    )
    .unwrap();
    let why = s.report.lazy_fallback.clone().expect("falls back");
    assert!(
        why.contains("`foreign` has no metathread spawn record"),
        "{why}"
    );
    drop(s);
    // Recovered (the full open wrote the record); lazy again, from the marks.
    let s = lazy(&root, &["gen-00001"], false);
    drop(s);
    let mp = root.join("orchestrator/meta.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&mp).unwrap();
    std::io::Write::write_all(&mut f, b"{\"kind\":\"narr").unwrap();
    drop(f);
    let s = Session::writer_lazy(
        &root,
        config(),
        Duration::from_secs(5),
        &["gen-00001"],
        false,
    )
    .unwrap();
    let why = s.report.lazy_fallback.clone().expect("falls back");
    assert!(why.contains("torn"), "{why}");
    assert!(
        s.report.diagnostics.iter().any(|d| d.code == "TORN_LINE"),
        "{:?}",
        s.report.diagnostics
    );
    drop(s);
    // Line numbers from a kept mark: messages, then status changes (which read the chat's
    // last line from before its mark) name the lines a full count gives.
    for (i, text) in ["one", "two", "three"].into_iter().enumerate() {
        let mut s = lazy(&root, &["gen-00001"], false);
        let n = s
            .graph
            .append(NOW, "gen-00001", NewLine::user(text))
            .unwrap();
        s.flush().unwrap();
        assert_eq!(n, 2 + i as u64);
    }
    let chat = std::fs::read_to_string(root.join("nodes/gen-00001/chat.jsonl")).unwrap();
    assert_eq!(chat.lines().count(), 4);
    // `gen-00002`'s first status change leaves a mark at the end of its chat; the second reads
    // the last line from before that mark.
    for st in [Status::Running, Status::Done] {
        let mut s = lazy(&root, &["gen-00002"], false);
        let mb = s
            .graph
            .set_status(NOW, "gen-00002", st, None, None)
            .unwrap();
        s.flush().unwrap();
        assert_eq!(mb.through_line, 1);
    }
    let marks =
        std::fs::read_to_string(root.join(weft_host::actors::fs_store::MARKS_FILE)).unwrap();
    assert!(marks.contains("nodes/gen-00002/chat.jsonl"), "{marks}");
    let log = std::fs::read_to_string(&mp).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(
        (last["kind"].as_str(), last["line"].as_u64()),
        (Some("ref"), Some(1))
    );
    assert!(lineage_problems(&read_disk(&root)).is_empty());
    let _ = std::fs::remove_dir_all(&root);
}

/// A lazy writer of `root` (the coordinator asked for) that spawned the task `id` and flushed.
fn lazy_spawn(root: &Path, id: &str) -> Session {
    let mut s = lazy(root, &["coordinator"], true);
    let mut r = SpawnRequest::new("coordinator", NodeType::Task);
    r.id = Some(id.into());
    s.graph.spawn(NOW, r).unwrap();
    s.flush().unwrap();
    s
}

/// A one-shot command's views list every child of a parent whose record a trusted lazy open
/// read by its ends (only the children spawned since are held in memory): the graph view's
/// `spawned`, the tree's spawn edges, `children` and `subtree` read the rest back, in spawn
/// order, as a full open lists them.
#[test]
fn a_lazy_view_lists_every_child_of_a_parent_read_by_its_ends() {
    let root = generate("lazy-view", 400);
    let spawn = |id: &str| lazy_spawn(&root, id);
    // The first spawn rewrites the generated records canonically, the second is trusted.
    drop(spawn("warm-1"));
    drop(spawn("warm-2"));
    let s = spawn("seen");
    assert!(s.graph.opened_trusted());
    let held = s.graph.node("coordinator").unwrap().spawned.clone();
    assert_eq!(
        held.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        ["seen"],
        "the parent was read by its ends"
    );
    let full = Session::reader(&root, config()).unwrap();
    let want = full.graph.node("coordinator").unwrap().spawned.clone();
    drop(full);
    assert_eq!(want.len(), 400 + 3);
    let coordinator = weft_core::actors::NodeId::parse("coordinator").unwrap();
    assert_eq!(*s.graph.children("coordinator").unwrap(), want[..]);
    let view = s.graph.graph_view();
    let node = view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "coordinator")
        .unwrap();
    assert_eq!(node["spawned"], json!(want));
    assert!(node.get("spawnedIncomplete").is_none(), "{node}");
    let tree = s.graph.tree_view();
    let edges: Vec<&str> = tree["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "spawn" && e["from"] == "coordinator")
        .map(|e| e["to"].as_str().unwrap())
        .collect();
    assert_eq!(edges, want.iter().map(|c| c.as_str()).collect::<Vec<_>>());
    assert_eq!(s.graph.subtree(&coordinator).len(), 400 + 3 + 1);
    // Views change nothing: the parent still holds only the child spawned since the open.
    assert_eq!(s.graph.node("coordinator").unwrap().spawned, held);
    drop(s);
    let _ = std::fs::remove_dir_all(&root);
}

/// When the children a lazy open did not read cannot be read back (the parent's record
/// changed under the writer), a view says its list is partial (`spawnedIncomplete`) instead
/// of looking complete.
#[test]
fn a_lazy_view_whose_children_cannot_be_read_back_says_so() {
    let root = generate("lazy-view-partial", 400);
    let spawn = |id: &str| lazy_spawn(&root, id);
    drop(spawn("warm-1"));
    drop(spawn("warm-2"));
    let s = spawn("seen");
    assert!(s.graph.opened_trusted());
    assert_eq!(
        s.graph.node("coordinator").unwrap().spawned.len(),
        1,
        "read by its ends"
    );
    let node = |s: &Session| {
        let view = s.graph.graph_view();
        view["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == "coordinator")
            .unwrap()
            .clone()
    };
    // The record shrinks under the writer before anything read its elided children back:
    // they cannot be read back. (Read back whole, a view has no marker: the test above.)
    std::fs::write(root.join("nodes/coordinator/meta.json"), b"{}").unwrap();
    let n = node(&s);
    assert_eq!(n["spawned"], json!(["seen"]), "{n}");
    assert!(n["spawnedIncomplete"].is_string(), "{n}");
    assert!(s.graph.children_read("coordinator").unwrap().1.is_some());
    drop(s);
    let _ = std::fs::remove_dir_all(&root);
}

/// The marks a lazy command keeps are replaced without a new inode: the previous version stays
/// beside them and the next command overwrites it and exchanges it into place, so the two
/// files trade places and no inode is made or freed for them.
#[test]
fn kept_marks_trade_places_with_their_spare_instead_of_making_an_inode() {
    use std::os::unix::fs::MetadataExt;
    use weft_host::actors::fs_store::{MARKS_FILE, MARKS_SPARE};
    let root = generate("marks-spare", 3);
    let ino = |name: &str| std::fs::metadata(root.join(name)).map(|m| m.ino()).ok();
    let mut seen = Vec::new();
    for i in 0..4 {
        let mut s = lazy(&root, &["coordinator"], true);
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some(format!("m-{i}"));
        s.graph.spawn(NOW, r).unwrap();
        s.flush().unwrap();
        drop(s);
        seen.push((ino(MARKS_FILE), ino(MARKS_SPARE)));
    }
    // From the second write on both exist, and each write swaps them.
    for w in seen[1..].windows(2) {
        let ((m0, s0), (m1, s1)) = (w[0], w[1]);
        assert!(m0.is_some() && s0.is_some(), "{seen:?}");
        assert_eq!((m1, s1), (s0, m0), "{seen:?}");
    }
    let marks: Value =
        serde_json::from_slice(&std::fs::read(root.join(MARKS_FILE)).unwrap()).unwrap();
    assert_eq!(marks["v"], 1);
    assert!(lineage_problems(&read_disk(&root)).is_empty());
    let _ = std::fs::remove_dir_all(&root);
}

/// A hard link planted where the marks' spare lives (`.weft-marks.json.spare`, overwritten in
/// place by the next write of the marks) is never written through: the file it names
/// (outside the root) keeps its bytes, and the marks are written fresh and still used.
#[test]
fn a_hard_link_planted_at_the_marks_spare_is_not_written_through() {
    use weft_host::actors::fs_store::{MARKS_FILE, MARKS_SPARE};
    let root = generate("marks-spare-link", 3);
    let outside = root.with_extension("outside-file");
    std::fs::write(&outside, b"keep me").unwrap();
    for i in 0..3 {
        let _ = std::fs::remove_file(root.join(MARKS_SPARE));
        std::fs::hard_link(&outside, root.join(MARKS_SPARE)).unwrap();
        let mut s = lazy(&root, &["coordinator"], true);
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some(format!("h-{i}"));
        s.graph.spawn(NOW, r).unwrap();
        s.flush().unwrap();
        drop(s);
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep me", "write {i}");
    }
    let marks: Value =
        serde_json::from_slice(&std::fs::read(root.join(MARKS_FILE)).unwrap()).unwrap();
    assert_eq!(marks["v"], 1);
    assert!(lineage_problems(&read_disk(&root)).is_empty());
    let _ = std::fs::remove_file(&outside);
    let _ = std::fs::remove_dir_all(&root);
}
