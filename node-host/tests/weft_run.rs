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

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether `pid` is a live process (not gone, not a zombie waiting to be reaped).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        !s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

/// Polls `cond` every 20 ms for at most `limit`; whether it held.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// The peak resident set of a running process (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

fn interrupt(pid: u32) {
    let _ = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
}

struct Flood {
    progress: usize,
    last: Value,
    code: Option<i32>,
    peak: u64,
}

/// Runs `tests/workers/flood.mjs` through `weft run --json` (stdout streamed and counted),
/// reads weft's peak RSS once the worker wrote everything, then interrupts it.
fn flood(name: &str, payload: Value) -> Flood {
    let dir = scratch(name);
    let marker = dir.join("flooded");
    let mut payload = payload;
    payload["marker"] = marker.to_str().unwrap().into();
    let worker = repo().join("tests/workers/flood.mjs");
    let mut child = weft()
        .args(["run", worker.to_str().unwrap(), "--json", "--payload"])
        .arg(payload.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let (mut progress, mut last) = (0, Value::Null);
        for line in std::io::BufReader::new(stdout).lines() {
            let ev: Value = serde_json::from_str(&line.unwrap()).expect("JSON lines");
            if ev["type"] == "progress" {
                progress += 1;
            }
            last = ev;
        }
        (progress, last)
    });
    let flooded = eventually(Duration::from_secs(300), || marker.exists());
    let peak = peak_rss(child.id());
    interrupt(child.id());
    let code = child.wait().unwrap().code();
    let (progress, last) = reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(flooded, "the worker never finished writing");
    Flood {
        progress,
        last,
        code,
        peak,
    }
}

#[test]
fn a_progress_flood_runs_in_bounded_memory_and_every_event_is_streamed() {
    // 100,000 progress messages of 2 KB: 200 MB through the journal. Kept whole, that is
    // over 200 MB of memory; windowed and streamed, weft stays near its idle size.
    let f = flood("flood", serde_json::json!({"count": 100_000, "size": 2000}));
    assert_eq!(f.progress, 100_001, "every event reaches stdout");
    assert_eq!(f.code, Some(130));
    assert_eq!(f.last["type"], "outcome");
    assert_eq!(f.last["outcome"], "cancelled");
    assert_eq!(f.last["seq"], 2 + 100_001 + 3);
    assert!(f.peak < 64 << 20, "weft's peak RSS was {} bytes", f.peak);
}

#[test]
fn a_line_over_the_limit_is_refused_as_it_arrives() {
    // A 300 MB line: weft keeps at most the 64 MiB line limit of it, refuses it, and reads on.
    let f = flood(
        "long-line",
        serde_json::json!({"count": 10, "size": 100, "longLine": 300_000_000}),
    );
    assert_eq!(f.progress, 11, "the messages around the long line arrive");
    assert_eq!(f.code, Some(130));
    assert!(f.peak < 160 << 20, "weft's peak RSS was {} bytes", f.peak);
}

/// Runs `tests/workers/grandchild.mjs` with `then` / `hold`; returns weft's child handle and
/// the pid file to read.
fn with_grandchild(name: &str, then: &str, hold: bool) -> (std::process::Child, PathBuf) {
    let dir = scratch(name);
    let pids = dir.join("pids.json");
    let worker = repo().join("tests/workers/grandchild.mjs");
    let payload = serde_json::json!({"pidFile": pids, "then": then, "hold": hold});
    let child = weft()
        .args(["run", worker.to_str().unwrap(), "--payload"])
        .arg(payload.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, pids)
}

fn read_pids(file: &Path) -> (u64, u64) {
    assert!(
        eventually(Duration::from_secs(30), || std::fs::read_to_string(file)
            .is_ok_and(|s| s.ends_with('}'))),
        "the worker wrote its pids"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    (
        v["worker"].as_u64().unwrap(),
        v["grandchild"].as_u64().unwrap(),
    )
}

/// Waits for weft to exit, for at most `limit` (killed and `None` after that).
fn exit_within(mut child: std::process::Child, limit: Duration) -> Option<Output> {
    let done = eventually(limit, || child.try_wait().unwrap().is_some());
    if !done {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    done.then_some(out)
}

#[test]
fn no_grandchild_outlives_weft_run() {
    let (child, pids) = with_grandchild("survivor", "done", false);
    let out = exit_within(child, Duration::from_secs(50)).expect("weft exits");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (worker, grandchild) = read_pids(&pids);
    // weft killed the worker's whole process group on its way out.
    assert!(eventually(Duration::from_secs(10), || !alive(grandchild)));
    assert!(eventually(Duration::from_secs(10), || !alive(worker)));
    let _ = std::fs::remove_dir_all(pids.parent().unwrap());
}

#[test]
fn a_worker_exit_is_reported_lost_at_once_while_a_grandchild_holds_its_stdout() {
    // The grandchild sleeps 60 s with the worker's stdout open; the worker exits after 0.1 s.
    let (child, pids) = with_grandchild("holder", "crash", true);
    let out = exit_within(child, Duration::from_secs(40))
        .expect("weft exited before the grandchild would have");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("lost"), "{err}");
    assert!(err.contains("exited with status 3"), "{err}");
    let (_, grandchild) = read_pids(&pids);
    assert!(eventually(Duration::from_secs(10), || !alive(grandchild)));
    let _ = std::fs::remove_dir_all(pids.parent().unwrap());
}

#[test]
fn ctrl_c_after_a_worker_crashed_does_not_report_cancelled() {
    // The worker cannot acknowledge cancels, so a Ctrl-C that weft takes for a live run ends
    // as `cancelled` after the quiet period. Once the worker died it must stay `lost`.
    let (child, pids) = with_grandchild("crashed", "crash", true);
    let (worker, _) = read_pids(&pids);
    assert!(eventually(Duration::from_secs(30), || !alive(worker)));
    interrupt(child.id());
    let out = exit_within(child, Duration::from_secs(40))
        .expect("weft exited before the grandchild would have");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("cancelled"), "{err}");
    let _ = std::fs::remove_dir_all(pids.parent().unwrap());
}
