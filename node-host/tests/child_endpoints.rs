//! Real child processes (`node` + the weft worker shim, JSON lines on stdio) and in-process Tokio
//! jobs driven by the native host. Same scenarios as the worker_threads and Chromium tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::jobs::{
    CancelEvidence, CancelStatus, EndpointEventKind, EndpointId, EndpointSpec, EventKind, Hello,
    JobId, JobState, Origin, Outcome, OwnerId, Submit, WaitEnd,
};
use weft_host::jobs_host::{JobsHost, LocalError, LocalFn};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn worker(name: &str) -> PathBuf {
    if name == "diffusion" {
        repo().join("examples/diffusion/worker.js")
    } else {
        repo().join(format!("tests/workers/{name}.js"))
    }
}

fn open(host: &mut JobsHost, name: &str, hello: Hello, quiet_ms: u64) -> EndpointId {
    let mut spec = EndpointSpec::new("app", name);
    spec.hello = hello;
    spec.quiet_ms = quiet_ms;
    host.open_child("node", &worker(name), spec)
        .expect("node starts")
}

/// A diffusion worker endpoint that waits for the worker's hello.
fn diffusion(host: &mut JobsHost) -> EndpointId {
    open(host, "diffusion", Hello::Await { timeout_ms: 5000 }, 500)
}

/// Asks `job` to stop and performs the resulting outputs.
fn cancel(host: &mut JobsHost, job: JobId, reason: &str) -> CancelStatus {
    let now = host.now();
    let status = host.registry.cancel(now, job, reason).unwrap();
    host.pump();
    status
}

fn submit(host: &mut JobsHost, ep: EndpointId, payload: Value) -> JobId {
    let now = host.now();
    let j = host
        .registry
        .submit(now, Submit::new("agent", ep, payload))
        .unwrap()
        .job;
    host.pump();
    j
}

/// Drives the host until `cond` holds (panics after 20 s).
async fn until(host: &mut JobsHost, what: &str, mut cond: impl FnMut(&JobsHost) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond(host) {
        tokio::select! {
            _ = host.step() => {}
            _ = tokio::time::sleep_until(deadline) => panic!("timed out waiting for {what}"),
        }
    }
}

async fn finished(host: &mut JobsHost, job: JobId) -> Outcome<Value> {
    until(host, "the outcome", |h| {
        h.registry.job(job).unwrap().is_finished()
    })
    .await;
    host.registry.job(job).unwrap().outcome().unwrap().clone()
}

async fn has_event(host: &mut JobsHost, job: JobId, name: &str) {
    until(host, name, |h| {
        h.registry
            .job(job)
            .unwrap()
            .journal()
            .iter()
            .any(|e| e.kind.name() == name)
    })
    .await
}

fn types(host: &JobsHost, job: JobId) -> Vec<&'static str> {
    host.registry
        .job(job)
        .unwrap()
        .journal()
        .iter()
        .map(|e| e.kind.name())
        .collect()
}

const LONG: &str = r#"{"points": 800, "simTime": 5, "chunkMs": 4}"#;

fn long() -> Value {
    serde_json::from_str(LONG).unwrap()
}

#[tokio::test]
async fn cancel_before_start_never_reaches_the_worker() {
    let mut host = JobsHost::new();
    let ep = diffusion(&mut host);
    let job = submit(&mut host, ep, long());
    assert_eq!(
        cancel(&mut host, job, "changed my mind"),
        CancelStatus::CancelledBeforeStart
    );
    assert_eq!(
        finished(&mut host, job).await,
        Outcome::Cancelled {
            evidence: CancelEvidence::NeverStarted
        }
    );
    let probe = submit(&mut host, ep, json!({"points": 20, "simTime": 0.0001}));
    assert!(matches!(
        finished(&mut host, probe).await,
        Outcome::Succeeded { .. }
    ));
    assert_eq!(
        host.registry.job(probe).unwrap().wire_id,
        Some(1),
        "the probe is the first run the worker saw"
    );
}

#[tokio::test]
async fn cancel_while_running_is_acknowledged() {
    let mut host = JobsHost::new();
    let ep = diffusion(&mut host);
    let job = submit(&mut host, ep, long());
    has_event(&mut host, job, "progress").await;
    assert_eq!(
        cancel(&mut host, job, "stop"),
        CancelStatus::Requested { ack_expected: true }
    );
    assert_eq!(host.registry.job(job).unwrap().state, JobState::Running);
    assert_eq!(
        finished(&mut host, job).await,
        Outcome::Cancelled {
            evidence: CancelEvidence::Acknowledged
        }
    );
    let t = types(&host, job);
    assert!(
        t.iter().position(|x| *x == "cancel_requested")
            < t.iter().position(|x| *x == "cancel_acknowledged")
    );
}

#[tokio::test]
async fn cancel_without_acknowledgement_waits_for_quiet() {
    let mut host = JobsHost::new();
    let ep = open(&mut host, "aiui", Hello::Skip, 150);
    let job = submit(&mut host, ep, json!({"chunks": 400, "chunkMs": 5}));
    has_event(&mut host, job, "progress").await;
    assert_eq!(
        cancel(&mut host, job, "stop"),
        CancelStatus::Requested {
            ack_expected: false
        }
    );
    assert_eq!(
        finished(&mut host, job).await,
        Outcome::Cancelled {
            evidence: CancelEvidence::Quiet { quiet_ms: 150 }
        }
    );
    let t = types(&host, job);
    assert_eq!(&t[t.len() - 2..], ["no_acknowledgement", "outcome"]);
    assert!(!t.contains(&"cancel_acknowledged"));
}

#[tokio::test]
async fn cancelling_the_wait_leaves_the_job_running() {
    let mut host = JobsHost::new();
    let ep = diffusion(&mut host);
    let job = submit(
        &mut host,
        ep,
        json!({"points": 300, "simTime": 0.3, "chunkMs": 4}),
    );
    let short = host.wait(job, Some(20)).unwrap();
    let mut short = std::pin::pin!(short);
    let end = loop {
        tokio::select! {
            r = &mut short => break r.unwrap(),
            _ = host.step() => {}
        }
    };
    assert_eq!(end, WaitEnd::TimedOut);
    assert!(!host.registry.job(job).unwrap().is_finished());
    assert!(matches!(
        finished(&mut host, job).await,
        Outcome::Succeeded { .. }
    ));
    assert!(!types(&host, job).contains(&"cancel_requested"));
}

#[tokio::test]
async fn a_job_outlives_its_turn_and_is_cancelled_later() {
    let mut host = JobsHost::new();
    let ep = diffusion(&mut host);
    let now = host.now();
    let mut req = Submit::new("agent", ep, long());
    req.origin = Origin {
        thread: Some("th".into()),
        turn: Some("turn-1".into()),
        tool_call: Some("call-7".into()),
        ..Origin::default()
    };
    let job = host.registry.submit(now, req).unwrap().job;
    host.pump();
    has_event(&mut host, job, "progress").await;
    // The turn ends: nothing happens to the job.
    tokio::time::sleep(Duration::from_millis(30)).await;
    until(&mut host, "more progress", |h| {
        h.registry.job(job).unwrap().journal().len() > 4
    })
    .await;
    assert_eq!(host.registry.job(job).unwrap().state, JobState::Running);
    cancel(&mut host, job, "turn-2 stops it");
    assert!(matches!(
        finished(&mut host, job).await,
        Outcome::Cancelled { .. }
    ));
    let notes = host.registry.read_mailbox(&OwnerId::new("agent"));
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].origin.turn.as_deref(), Some("turn-1"));
}

#[tokio::test]
async fn two_runs_on_one_process_one_cancelled() {
    let mut host = JobsHost::new();
    let ep = diffusion(&mut host);
    let a = submit(
        &mut host,
        ep,
        json!({"points": 300, "simTime": 0.15, "chunkMs": 3}),
    );
    let b = submit(&mut host, ep, long());
    has_event(&mut host, a, "progress").await;
    has_event(&mut host, b, "progress").await;
    cancel(&mut host, b, "only b");
    assert!(matches!(
        finished(&mut host, a).await,
        Outcome::Succeeded { .. }
    ));
    assert_eq!(
        finished(&mut host, b).await,
        Outcome::Cancelled {
            evidence: CancelEvidence::Acknowledged
        }
    );
    assert!(!types(&host, a).iter().any(|t| t.starts_with("cancel")));
}

#[tokio::test]
async fn a_crashing_process_makes_its_job_lost_with_evidence() {
    let mut host = JobsHost::new();
    let ep = open(&mut host, "crash", Hello::Await { timeout_ms: 5000 }, 500);
    let job = submit(&mut host, ep, json!({}));
    let Outcome::Lost { reason, .. } = finished(&mut host, job).await else {
        panic!("expected lost")
    };
    assert!(reason.contains("exited with status 1"), "{reason}");
    assert!(
        reason.contains("simulated crash"),
        "stderr evidence in {reason}"
    );
    let t = types(&host, job);
    assert!(t.contains(&"progress") && t.contains(&"terminated"));
}

#[tokio::test]
async fn unknown_ids_and_malformed_lines_are_recorded_not_misattributed() {
    let mut host = JobsHost::new();
    let now = host.now();
    assert_eq!(
        host.registry
            .cancel(now, JobId(999), "x")
            .unwrap_err()
            .code(),
        "UNKNOWN_JOB"
    );
    let ep = open(
        &mut host,
        "misbehave",
        Hello::Await { timeout_ms: 5000 },
        500,
    );
    let a = submit(&mut host, ep, json!({"mode": "rawline"}));
    let b = submit(&mut host, ep, json!({"mode": "malformed"}));
    for j in [a, b] {
        assert_eq!(
            finished(&mut host, j).await,
            Outcome::Succeeded { value: json!("ok") }
        );
    }
    let events = host.registry.endpoint(ep).unwrap().events();
    let undecodable = events.iter().any(|e| {
        matches!(&e.kind, EndpointEventKind::ProtocolError { violation, .. }
            if matches!(violation, weft_core::jobs::wire::Violation::Undecodable { .. }))
    });
    assert!(undecodable, "the non-JSON line is a protocol error");
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EndpointEventKind::UnknownRun { id: 999999, .. }))
    );
    assert!(host.registry.endpoint(ep).unwrap().protocol_errors() >= 11);
    let a_errors = types(&host, a)
        .iter()
        .filter(|t| **t == "protocol_error")
        .count();
    assert_eq!(
        a_errors, 2,
        "only the errors naming run a are in its journal"
    );
}

#[tokio::test]
async fn a_late_done_is_late_evidence() {
    let mut host = JobsHost::new();
    let ep = open(&mut host, "stubborn", Hello::Skip, 80);
    let job = submit(&mut host, ep, json!({"ms": 400}));
    has_event(&mut host, job, "started").await;
    cancel(&mut host, job, "stop");
    assert!(matches!(
        finished(&mut host, job).await,
        Outcome::Cancelled {
            evidence: CancelEvidence::Quiet { .. }
        }
    ));
    has_event(&mut host, job, "late_evidence").await;
    let j = host.registry.job(job).unwrap();
    assert!(matches!(j.outcome(), Some(Outcome::Cancelled { .. })));
    assert_eq!(
        j.journal()
            .iter()
            .filter(|e| e.kind.name() == "outcome")
            .count(),
        1
    );
}

#[tokio::test]
async fn structured_input_is_delivered_then_applied() {
    let mut host = JobsHost::new();
    let ep = diffusion(&mut host);
    let job = submit(&mut host, ep, long());
    has_event(&mut host, job, "started").await;
    let now = host.now();
    let id = host
        .registry
        .send_input(now, job, None, json!({"snapshot": true}))
        .unwrap();
    host.pump();
    has_event(&mut host, job, "input_applied").await;
    let j = host.registry.job(job).unwrap();
    let applied = j.journal().iter().find_map(|e| match &e.kind {
        EventKind::InputApplied { input_id } => Some(input_id.clone()),
        _ => None,
    });
    assert_eq!(applied, Some(id));
    cancel(&mut host, job, "done");
    finished(&mut host, job).await;
}

#[tokio::test]
async fn in_process_jobs_report_cancel_and_panics_fail_only_their_job() {
    let mut host = JobsHost::new();
    let f: LocalFn = Arc::new(|payload: Value, mut ctx| {
        Box::pin(async move {
            let steps = payload["steps"].as_u64().unwrap_or(1);
            if payload["panic"].as_bool() == Some(true) {
                panic!("handler bug");
            }
            for i in 0..steps {
                ctx.progress(json!(i as f64 / steps as f64));
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(2)) => {}
                    _ = ctx.cancelled() => return Err(LocalError::Cancelled),
                }
            }
            Ok(json!(steps))
        })
    });
    let ep = host.open_local("app", "local", f);
    let ok = submit(&mut host, ep, json!({"steps": 3}));
    let boom = submit(&mut host, ep, json!({"panic": true}));
    let long = submit(&mut host, ep, json!({"steps": 100000}));
    assert_eq!(
        finished(&mut host, ok).await,
        Outcome::Succeeded { value: json!(3) }
    );
    let Outcome::Failed { code, .. } = finished(&mut host, boom).await else {
        panic!("expected failed")
    };
    assert_eq!(code.as_deref(), Some("PANIC"));
    has_event(&mut host, long, "progress").await;
    cancel(&mut host, long, "stop");
    assert_eq!(
        finished(&mut host, long).await,
        Outcome::Cancelled {
            evidence: CancelEvidence::Acknowledged
        }
    );
}

/// Whether `pid` is a live process (not gone, not a zombie waiting to be reaped).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        !s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

#[tokio::test]
async fn terminating_an_endpoint_kills_the_workers_whole_process_group() {
    let dir = std::env::temp_dir().join(format!("weft-group-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pids = dir.join("pids.json");
    let mut h = JobsHost::new();
    let mut spec = EndpointSpec::new("app", "grandchild");
    spec.hello = Hello::Await { timeout_ms: 5000 };
    let ep = h
        .open_child("node", &repo().join("tests/workers/grandchild.mjs"), spec)
        .expect("node starts");
    let job = submit(
        &mut h,
        ep,
        json!({"pidFile": pids, "then": "hang", "hold": true}),
    );
    // Nothing arrives once the run started: step with a short bound while polling the file.
    for _ in 0..1000 {
        if std::fs::read_to_string(&pids).is_ok_and(|s| s.ends_with('}')) {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(20), h.step()).await;
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&pids).unwrap()).unwrap();
    let (worker, grandchild) = (
        v["worker"].as_u64().unwrap(),
        v["grandchild"].as_u64().unwrap(),
    );
    assert!(alive(worker) && alive(grandchild));
    let now = h.now();
    h.registry
        .terminate_endpoint(now, ep, "terminated by the test")
        .unwrap();
    h.pump();
    assert!(matches!(
        h.registry.job(job).unwrap().outcome(),
        Some(Outcome::Lost { .. })
    ));
    // The grandchild held the worker's stdout: the transport still closes, and both are gone.
    until(&mut h, "the transport's closure", |h| {
        h.registry
            .endpoint(ep)
            .unwrap()
            .events()
            .iter()
            .any(|e| matches!(e.kind, EndpointEventKind::Closed { .. }))
    })
    .await;
    for _ in 0..500 {
        if !alive(grandchild) && !alive(worker) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !alive(grandchild),
        "the grandchild was killed with the group"
    );
    assert!(!alive(worker));
    let _ = std::fs::remove_dir_all(&dir);
}
