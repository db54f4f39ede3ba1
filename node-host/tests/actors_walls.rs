//! The filesystem store within its walls, and what other readers can trust: a symbolic link
//! where the store reads or writes is refused with `SYMLINK_REFUSED` and its target is left
//! untouched; `graph.json` / `meta.json` contradictions are diagnosed, not silently rewritten;
//! a reader running beside a writer sees no spurious diagnostic.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use serde_json::Value;
use weft_core::actors::store::ActorStore;
use weft_core::actors::{ActorGraph, HarnessConfig, NodeType, SpawnRequest};
use weft_host::actors::FsStore;

/// A root with the coordinator and one task `a`.
fn small_root(name: &str) -> std::path::PathBuf {
    let root = scratch(name);
    let r = root.to_str().unwrap();
    run_json(&["actors", "init", r, "--json"]);
    run_json(&["actors", "spawn", r, "--id", "a", "--json"]);
    root
}

/// Every file under `dir` with its bytes, and the directory names (what "untouched" means).
fn contents(dir: &Path) -> (Vec<String>, std::collections::BTreeMap<String, Vec<u8>>) {
    let mut names = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            names.push(e.path().to_string_lossy().into_owned());
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
    names.sort();
    (names, snapshot(dir))
}

/// Replaces `rel` in `root` by a link to a copy of it outside the root (or, when `rel` does
/// not exist, a link to an empty outside directory / file); returns the outside path.
fn link_out(root: &Path, rel: &str, dir: bool) -> std::path::PathBuf {
    let outside = scratch("walls-outside").join("target");
    let p = root.join(rel);
    if p.exists() {
        std::fs::rename(&p, &outside).unwrap();
    } else if dir {
        std::fs::create_dir_all(&outside).unwrap();
    } else {
        std::fs::write(&outside, b"outside\n").unwrap();
    }
    std::os::unix::fs::symlink(&outside, &p).unwrap();
    outside
}

#[test]
fn a_link_where_the_store_reads_or_writes_is_refused_and_its_target_untouched() {
    // (what to link, a directory?, a writing command after the root's path, a reader refuses too?)
    let cases: [(&str, bool, &[&str], bool); 7] = [
        (".weft-lock", false, &["spawn", "--id", "x"], false),
        (
            "nodes/a/chat.jsonl",
            false,
            &["message", "--node", "a", "--text", "hi"],
            true,
        ),
        ("orchestrator", true, &["narrate", "--text", "n"], true),
        ("timeline", true, &["bookmark", "--text", "b"], true),
        (
            "nodes/a",
            true,
            &["spawn", "--parent", "a", "--id", "y"],
            true,
        ),
        (".weft", true, &["spawn", "--id", "z"], true),
        ("graph.json", false, &["spawn", "--id", "w"], true),
    ];
    for (rel, dir, cmd, reader_refuses) in cases {
        let root = small_root("walls-link");
        let r = root.to_str().unwrap().to_owned();
        let outside = link_out(&root, rel, dir);
        let before = if dir {
            contents(&outside)
        } else {
            (
                vec![],
                [(String::new(), std::fs::read(&outside).unwrap())].into(),
            )
        };
        let mut args = vec!["actors", cmd[0], &r];
        args.extend_from_slice(&cmd[1..]);
        args.push("--json");
        let e = run_err(&args, "SYMLINK_REFUSED", 74);
        assert!(
            e["error"]["message"].as_str().unwrap().contains(rel),
            "{rel}: {e}"
        );
        let after = if dir {
            contents(&outside)
        } else {
            (
                vec![],
                [(String::new(), std::fs::read(&outside).unwrap())].into(),
            )
        };
        assert_eq!(before, after, "{rel}: the link's target is untouched");
        if reader_refuses {
            run_err(&["actors", "graph", &r, "--json"], "SYMLINK_REFUSED", 74);
        }
        // Removing the link (and putting back what it pointed at) heals the root.
        std::fs::remove_file(root.join(rel)).unwrap();
        std::fs::rename(&outside, root.join(rel)).unwrap();
        let mut args = vec!["actors", cmd[0], &r];
        args.extend_from_slice(&cmd[1..]);
        args.push("--json");
        run_json(&args);
        let _ = std::fs::remove_dir_all(&root);
        let _ = std::fs::remove_dir_all(outside.parent().unwrap());
    }
}

/// A hard link planted where the store writes (the root's name and a file outside it are one
/// inode). The lock is refused with `HARD_LINK_REFUSED` before anything is written (not
/// truncated); a log appended to and a record patched in place are first replaced by a copy
/// of their own, so the command runs and the other name keeps its bytes.
#[test]
fn a_hard_link_where_the_store_writes_is_never_written_through() {
    let cases: [(&str, &[&str], bool); 4] = [
        (".weft-lock", &["spawn", "--id", "x"], true),
        (
            "nodes/a/chat.jsonl",
            &["message", "--node", "a", "--text", "hi"],
            false,
        ),
        ("graph.json", &["spawn", "--id", "w"], false),
        (
            "nodes/coordinator/meta.json",
            &["spawn", "--id", "v"],
            false,
        ),
    ];
    for (rel, cmd, refused) in cases {
        let root = small_root("walls-hard");
        let r = root.to_str().unwrap().to_owned();
        let outside = scratch("walls-hard-outside").join("target");
        let p = root.join(rel);
        std::fs::copy(&p, &outside).unwrap();
        std::fs::remove_file(&p).unwrap();
        std::fs::hard_link(&outside, &p).unwrap();
        let before = std::fs::read(&outside).unwrap();
        let mut args = vec!["actors", cmd[0], &r];
        args.extend_from_slice(&cmd[1..]);
        args.push("--json");
        if refused {
            let e = run_err(&args, "HARD_LINK_REFUSED", 74);
            assert!(
                e["error"]["message"].as_str().unwrap().contains(rel),
                "{rel}: {e}"
            );
            assert_eq!(std::fs::read(&outside).unwrap(), before, "{rel}: untouched");
            // One name again (a copy in place of the link): the command runs.
            std::fs::remove_file(&p).unwrap();
            std::fs::copy(&outside, &p).unwrap();
        }
        run_json(&args);
        assert_eq!(
            std::fs::read(&outside).unwrap(),
            before,
            "{rel}: the other name's bytes are untouched"
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().nlink(),
            1,
            "{rel}: a file of its own"
        );
        let _ = std::fs::remove_dir_all(&root);
        let _ = std::fs::remove_dir_all(outside.parent().unwrap());
    }
}

fn codes(v: &Value) -> Vec<String> {
    v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn graph_index_contradictions_are_diagnosed_and_the_rewrite_says_what_it_dropped() {
    let root = small_root("walls-graph");
    let r = root.to_str().unwrap().to_owned();
    let mut g: Value =
        serde_json::from_slice(&std::fs::read(root.join("graph.json")).unwrap()).unwrap();
    g["nodes"]["ghost"] = serde_json::json!({"type": "task", "spawnedBy": "coordinator"});
    g["nodes"]["a"]["spawnedBy"] = serde_json::json!("ghost");
    std::fs::write(root.join("graph.json"), serde_json::to_vec(&g).unwrap()).unwrap();
    let before = std::fs::read(root.join("graph.json")).unwrap();

    // A reader reports both, on the files as they are, and writes nothing.
    let seen = run_json(&["actors", "graph", &r, "--json"]);
    let mut c = codes(&seen);
    c.sort();
    assert_eq!(
        c,
        ["GRAPH_LINEAGE_MISMATCH", "GRAPH_NODE_MISSING"],
        "{seen}"
    );
    let msg = seen["diagnostics"].to_string();
    assert!(
        msg.contains("`ghost`") && msg.contains("nodes/a/meta.json"),
        "{msg}"
    );
    assert_eq!(std::fs::read(root.join("graph.json")).unwrap(), before);

    // A writer rewrites the index from the node records and records what it dropped.
    let rec = run_json(&["actors", "recover", &r, "--json"]);
    let repairs = rec["report"]["repairs"].to_string();
    assert!(
        repairs.contains("dropped `ghost` from graph.json"),
        "{repairs}"
    );
    let d = read_disk(&root);
    assert!(d.graph["nodes"].get("ghost").is_none());
    assert_eq!(d.graph["nodes"]["a"]["spawnedBy"], "coordinator");
    assert!(
        d.metathread
            .iter()
            .any(|m| m["kind"] == "recovery" && m.to_string().contains("dropped `ghost`")),
        "the recovery record names the drop"
    );
    assert_eq!(
        codes(&run_json(&["actors", "graph", &r, "--json"])),
        Vec::<String>::new()
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_status_contradicting_awaiting_user_is_reported_as_written() {
    let root = small_root("walls-status");
    let r = root.to_str().unwrap().to_owned();
    let p = root.join("nodes/a/meta.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    m["status"] = "awaiting_user".into();
    m["awaitingUser"] = false.into();
    std::fs::write(&p, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let seen = run_json(&["actors", "graph", &r, "--json"]);
    assert_eq!(codes(&seen), ["STATUS_CONTRADICTION"], "{seen}");
    let a = seen["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "a")
        .unwrap();
    assert_eq!(a["awaitingUser"], false, "as on disk: {a}");
    assert_eq!(a["status"], "awaiting_user");
    // Consistent writes through weft raise nothing.
    run_json(&[
        "actors",
        "status",
        &r,
        "--node",
        "a",
        "--set",
        "awaiting_user",
        "--json",
    ]);
    assert_eq!(
        codes(&run_json(&["actors", "graph", &r, "--json"])),
        Vec::<String>::new()
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A writer spawns 500 nodes (each under a random earlier node, so parents' records change
/// while children appear) while a reader opens the root over and over: every open it makes
/// sees a consistent graph — no `DANGLING_CHILD`, no torn line, no diagnostic at all.
#[test]
fn a_reader_beside_a_writer_spawning_500_nodes_sees_no_spurious_diagnostic() {
    let root = scratch("walls-concurrent");
    let mut store = FsStore::open_writer(&root, Duration::from_secs(5)).unwrap();
    let snap = store.load().unwrap();
    let now = weft_core::Wall::from_ms(1_798_568_411_000);
    let mut g =
        ActorGraph::init(HarnessConfig::default(), &store.address(), &snap, now, "t").unwrap();
    weft_host::actors::flush(&mut g, &mut store).unwrap();
    let done = AtomicBool::new(false);
    let (reads, problems) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut reads = 0u32;
            let mut problems = Vec::new();
            while !done.load(Ordering::Relaxed) || reads == 0 {
                let mut rs = FsStore::open_reader(&root).unwrap();
                let snap = rs.load().unwrap();
                let (_, report) =
                    ActorGraph::open(HarnessConfig::default(), "r", &snap, now).unwrap();
                reads += 1;
                if !report.diagnostics.is_empty() {
                    problems.push(serde_json::to_string(&report.diagnostics).unwrap());
                }
            }
            (reads, problems)
        });
        let mut x = 0x2545_f491_u64;
        let mut ids = vec!["coordinator".to_owned()];
        for i in 0..500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let parent = ids[(x % ids.len() as u64) as usize].clone();
            let mut r = SpawnRequest::new(&parent, NodeType::Task);
            r.id = Some(format!("n{i}"));
            g.spawn(now + i, r).unwrap();
            weft_host::actors::flush(&mut g, &mut store).unwrap();
            ids.push(format!("n{i}"));
        }
        done.store(true, Ordering::Relaxed);
        reader.join().unwrap()
    });
    assert!(
        reads >= 5,
        "the reader read while the writer wrote ({reads} reads)"
    );
    assert!(
        problems.is_empty(),
        "{} of {reads} reads saw diagnostics; first: {}",
        problems.len(),
        problems[0]
    );
    drop(store);
    assert_eq!(read_disk(&root).metas.len(), 501);
    let _ = std::fs::remove_dir_all(&root);
}
