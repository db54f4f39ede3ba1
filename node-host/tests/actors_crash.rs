//! Crash consistency of the filesystem store: `weft actors spawn` killed with SIGKILL at random
//! points during 200 spawns, and aborted at every durability step of a spawn (whole and torn
//! appends). After reopening, no acknowledged spawn is lost and no spawn is half-recorded:
//! the files themselves (read here without weft) satisfy every lineage invariant.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

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
    let span = t.elapsed().as_micros() as u64 / 3;
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
        let delay = rng.next() % (span * 12 / 10 + 1);
        std::thread::sleep(Duration::from_micros(delay));
        let _ = child.kill(); // SIGKILL; fails harmlessly if it already exited
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
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
