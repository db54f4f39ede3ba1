//! `weft run` as a user runs it: exit statuses, `--json` journals, Ctrl-C (SIGINT).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn diffusion() -> PathBuf {
    repo().join("examples/diffusion/worker.js")
}

fn run(args: &[&str]) -> Output {
    weft().args(args).output().expect("weft runs")
}

fn journal(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("every --json line is JSON"))
        .collect()
}

#[test]
fn success_prints_the_result_and_exits_zero() {
    let d = diffusion();
    let out = run(&[
        "run",
        d.to_str().unwrap(),
        "--payload",
        r#"{"points": 60, "simTime": 0.001}"#,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("the result is JSON on stdout");
    assert_eq!(v["points"], 60);
    assert!(String::from_utf8_lossy(&out.stderr).contains("succeeded"));
}

#[test]
fn json_mode_prints_the_ordered_journal() {
    let d = diffusion();
    let out = run(&[
        "run",
        d.to_str().unwrap(),
        "--json",
        "--payload",
        r#"{"points": 60, "simTime": 0.002, "chunkMs": 0.1}"#,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let events = journal(&out.stdout);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"submitted"));
    assert_eq!(types.get(1), Some(&"started"));
    assert_eq!(types.last(), Some(&"outcome"));
    assert!(types.contains(&"progress"));
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i as u64 + 1);
    }
    assert_eq!(events.last().unwrap()["outcome"], "succeeded");
}

#[test]
fn exit_statuses_name_the_outcome() {
    let d = diffusion();
    // A payload the worker rejects: the job fails with the worker's code.
    let out = run(&["run", d.to_str().unwrap(), "--payload", r#"{"points": -5}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("INVALID_PAYLOAD"));
    // A crashing worker: lost.
    let crash = repo().join("tests/workers/crash.js");
    let out = run(&["run", crash.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("effects unknown"));
    // Bad arguments.
    let out = run(&["run", d.to_str().unwrap(), "--payload", "{not json"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid JSON"));
    let out = run(&["run", "/no/such/worker.js"]);
    assert_eq!(out.status.code(), Some(64));
    let out = run(&["run", d.to_str().unwrap(), "--node", "/no/such/node"]);
    assert_eq!(out.status.code(), Some(69));
}

fn interrupt_after(args: &[&str]) -> Output {
    let child = weft()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait_with_output().unwrap()
}

#[test]
fn ctrl_c_cancels_and_reports_the_evidence() {
    let d = diffusion();
    let out = interrupt_after(&[
        "run",
        d.to_str().unwrap(),
        "--payload",
        r#"{"points": 1000, "simTime": 10}"#,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("cancel requested (interrupted (Ctrl-C))"),
        "{err}"
    );
    assert!(err.contains("the worker acknowledged it stopped"), "{err}");
    assert!(err.contains("progress when it stopped"), "{err}");
}

#[test]
fn ctrl_c_in_json_mode_records_request_and_acknowledgement() {
    let d = diffusion();
    let out = interrupt_after(&[
        "run",
        d.to_str().unwrap(),
        "--json",
        "--payload",
        r#"{"points": 1000, "simTime": 10}"#,
    ]);
    assert_eq!(out.status.code(), Some(130));
    let events = journal(&out.stdout);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let req = types
        .iter()
        .position(|t| *t == "cancel_requested")
        .expect("request");
    let ack = types
        .iter()
        .position(|t| *t == "cancel_acknowledged")
        .expect("ack");
    assert!(req < ack);
    assert_eq!(events.last().unwrap()["evidence"], "acknowledged");
}
