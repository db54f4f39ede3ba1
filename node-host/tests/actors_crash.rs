//! Crash consistency of the filesystem store: `weft actors spawn` killed with SIGKILL at random
//! points during 200 spawns, and aborted at every durability step of a spawn (whole and torn
//! appends); and what a power loss can leave of a resolution (any subset of a stage whose
//! fsyncs were in flight). After reopening, no acknowledged spawn is lost and no spawn is
//! half-recorded: the files themselves (read here without weft) satisfy every lineage invariant.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use weft_core::actors::store::{ActorStore, Op, WriteBatch};
use weft_core::actors::{ActorGraph, Candidate, HarnessConfig, NodeType};
use weft_host::actors::FsStore;

/// xorshift64*: a deterministic random source (seed from `WEFT_CRASH_SEED` to replay a run).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn check(root: &std::path::Path, acked: &BTreeMap<String, String>) -> usize {
    let rec = run_json(&["actors", "recover", root.to_str().unwrap(), "--json"]);
    assert_eq!(
        rec["violations"],
        serde_json::json!([]),
        "core lineage check after recovery: {rec}"
    );
    let d = read_disk(root);
    let problems = lineage_problems(&d);
    assert!(
        problems.is_empty(),
        "on-disk lineage after recovery: {problems:?}\nrecovery: {rec}"
    );
    for (child, parent) in acked {
        let m = d
            .metas
            .get(child)
            .unwrap_or_else(|| panic!("acknowledged spawn {child} was lost"));
        assert_eq!(m["spawnedBy"], parent.as_str(), "{child}");
    }
    d.metas.len()
}

#[test]
fn sigkill_at_random_points_during_200_spawns_loses_no_lineage() {
    let root = scratch("crash-kill");
    let r = root.to_str().unwrap().to_owned();
    run_json(&["actors", "init", &r, "--json"]);
    let seed = std::env::var("WEFT_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0001u64);
    let mut rng = Rng(seed);
    // How long one spawn takes end to end, so that kills land all over it.
    let t = Instant::now();
    for i in 0..3 {
        run_json(&[
            "actors",
            "spawn",
            &r,
            "--type",
            "task",
            "--id",
            &format!("warm{i}"),
            "--json",
        ]);
    }
    // Spawns slow down as the root grows and with the machine's load, so the kill window
    // follows the durations of recent completed spawns (and widens after a run of kills).
    let mut span = t.elapsed().as_micros() as u64 / 3;
    let mut kills_in_a_row = 0u32;
    let mut acked: BTreeMap<String, String> = (0..3)
        .map(|i| (format!("warm{i}"), "coordinator".to_owned()))
        .collect();
    let mut parents: Vec<String> = vec!["coordinator".into()];
    parents.extend(acked.keys().cloned());
    let (mut killed, mut completed) = (0, 0);
    for i in 0..200 {
        let parent = parents[(rng.next() % parents.len() as u64) as usize].clone();
        let kind = if rng.next().is_multiple_of(3) {
            "discussion"
        } else {
            "task"
        };
        let id = format!("n{i}");
        let mut child = weft()
            .args([
                "actors", "spawn", &r, "--parent", &parent, "--type", kind, "--id", &id, "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let delay = rng.next() % (span * 12 / 10 + 1);
        std::thread::sleep(Duration::from_micros(delay));
        let _ = child.kill(); // SIGKILL; fails harmlessly if it already exited
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            kills_in_a_row = 0;
            let took = started.elapsed().as_micros() as u64;
            span = (span * 3 + took) / 4;
            let v: Value =
                serde_json::from_slice(&out.stdout).expect("a finished spawn prints JSON");
            assert_eq!(v["id"], id.as_str());
            acked.insert(id.clone(), parent);
            parents.push(id);
            completed += 1;
        } else {
            assert!(
                out.status.code().is_none() || out.status.code() == Some(75),
                "unexpected exit {:?}",
                out.status
            );
            killed += 1;
            kills_in_a_row += 1;
            if kills_in_a_row >= 5 {
                span = span * 3 / 2;
                kills_in_a_row = 0;
            }
        }
    }
    let nodes = check(&root, &acked);
    eprintln!(
        "crash test (seed {seed:#x}): {completed} spawns acknowledged, {killed} killed, {} of the killed rolled forward, {nodes} nodes",
        nodes - 1 - acked.len()
    );
    assert!(
        killed > 20 && completed > 20,
        "kills should land both before and after completion ({killed} killed, {completed} done)"
    );
    // The root keeps working.
    run_json(&[
        "actors",
        "spawn",
        &r,
        "--parent",
        "coordinator",
        "--type",
        "task",
        "--id",
        "after",
        "--json",
    ]);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn an_abort_at_every_durability_step_of_a_spawn_is_recovered() {
    let root = scratch("crash-steps");
    let r = root.to_str().unwrap().to_owned();
    run_json(&["actors", "init", &r, "--json"]);
    run_json(&[
        "actors",
        "spawn",
        &r,
        "--type",
        "discussion",
        "--id",
        "d",
        "--json",
    ]);
    let mut acked: BTreeMap<String, String> = [("d".to_owned(), "coordinator".to_owned())].into();
    for tear in [false, true] {
        let mut step = 1;
        loop {
            let id = format!("s{}{step}", if tear { "t" } else { "w" });
            let mut cmd = weft();
            cmd.args([
                "actors", "spawn", &r, "--parent", "d", "--type", "task", "--id", &id, "--json",
            ]);
            cmd.env("WEFT_ACTORS_CRASH_AT", step.to_string());
            if tear {
                cmd.env("WEFT_ACTORS_CRASH_TEAR", "1");
            }
            let out = cmd.output().unwrap();
            if out.status.success() {
                acked.insert(id, "d".into());
                break;
            }
            assert!(
                out.status.code().is_none(),
                "step {step}: expected an abort, got {:?}",
                out.status
            );
            // A crash during recovery itself is recovered too.
            let mut again = weft();
            again
                .args(["actors", "recover", &r, "--json"])
                .env("WEFT_ACTORS_CRASH_AT", "2");
            let _ = again.output().unwrap();
            check(&root, &acked);
            step += 1;
        }
        assert!(step > 8, "a spawn has more durability steps than {step}");
        eprintln!(
            "failpoint sweep (tear={tear}): crashed and recovered at {} steps",
            step - 1
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Opens `root` as a writer and queues a resolution of `disambig-boundary` (under `n0`) into the
/// parent and a new discussion `d`; returns the store and the resolution's batch, not applied.
fn queue_resolution(root: &std::path::Path) -> (FsStore, WriteBatch) {
    let mut store = FsStore::open_writer(root, Duration::from_secs(5)).unwrap();
    let snap = store.load().unwrap();
    let now = 1_798_568_411_000;
    let (mut g, report) =
        ActorGraph::open(HarnessConfig::default(), &store.address(), &snap, now).unwrap();
    assert!(report.repairs.is_empty(), "{report:?}");
    let into = vec![
        Candidate::Continue,
        Candidate::New {
            node_type: NodeType::Discussion,
            title: "d".into(),
            topic: String::new(),
        },
    ];
    g.resolve(now, "disambig-boundary", into, "").unwrap();
    let mut batches = g.take_batches();
    assert_eq!(batches.len(), 1);
    (store, batches.remove(0))
}

/// A power loss while the store performs a batch can keep any subset of the stage in flight
/// (its fsyncs run concurrently), the earlier stages whole, none of the later ones, and tear
/// an append it was writing. For a resolution that spawns a child — whose routing marker and
/// the "boundary resolved" marker both go to the parent's chat — every such cut is written to
/// a copy of a root on disk through the filesystem store, `weft actors recover` runs on it, and
/// the files must satisfy every lineage invariant (in particular: the child's metathread spawn
/// record names the line its routing marker is on).
#[test]
fn every_power_loss_cut_of_a_resolution_recovers_with_records_naming_their_markers() {
    let base = scratch("crash-power");
    let b = base.to_str().unwrap().to_owned();
    run_json(&["actors", "init", &b, "--json"]);
    for (parent, kind, id) in [
        ("coordinator", "task", "n0"),
        ("n0", "disambiguation", "disambig-boundary"),
    ] {
        run_json(&[
            "actors", "spawn", &b, "--parent", parent, "--type", kind, "--id", id, "--json",
        ]);
    }
    let acked: BTreeMap<String, String> = [
        ("n0".to_owned(), "coordinator".to_owned()),
        ("disambig-boundary".to_owned(), "n0".to_owned()),
    ]
    .into();
    let (store, batch) = queue_resolution(&base);
    drop(store);
    let sizes: Vec<usize> = batch.stages.iter().map(Vec::len).collect();
    let mut cuts = 0;
    for cut in 0..=sizes.len() {
        let n = sizes.get(cut).copied().unwrap_or(0);
        for mask in 0u32..(1 << n) {
            for torn in [false, true] {
                let root = scratch("crash-power-cut");
                copy_dir(&base, &root);
                let (mut store, b) = queue_resolution(&root);
                assert_eq!(b.stages.len(), sizes.len(), "the same batch on every copy");
                let ops = b.stages.get(cut).cloned().unwrap_or_default();
                let mut stages = b.stages[..cut].to_vec();
                stages.push(
                    ops.iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << i) != 0)
                        .map(|(_, op)| op.clone())
                        .collect(),
                );
                let partial = WriteBatch {
                    stages,
                    ..b.clone()
                };
                store.apply(&partial).unwrap();
                let mut tore = false;
                for (i, op) in ops.iter().enumerate() {
                    if let (true, 0, Op::Append { path, text }) = (torn, mask & (1 << i), op) {
                        let mut f = std::fs::OpenOptions::new()
                            .append(true)
                            .open(root.join(path))
                            .unwrap();
                        std::io::Write::write_all(&mut f, &text.as_bytes()[..text.len() / 2])
                            .unwrap();
                        tore = true;
                    }
                }
                drop(store);
                if torn && !tore {
                    let _ = std::fs::remove_dir_all(&root);
                    continue;
                }
                cuts += 1;
                check(&root, &acked);
                // Recovery is complete: a second pass finds nothing to repair.
                let again = run_json(&["actors", "recover", root.to_str().unwrap(), "--json"]);
                assert_eq!(
                    again["report"]["repairs"],
                    serde_json::json!([]),
                    "stage {cut}, ops {mask:#b}, torn {torn}: {again}"
                );
                let _ = std::fs::remove_dir_all(&root);
            }
        }
    }
    eprintln!("power-loss sweep: {cuts} cuts of a {sizes:?} resolution batch recovered");
    assert!(cuts > 30, "{cuts} cuts");
    let _ = std::fs::remove_dir_all(&base);
}
