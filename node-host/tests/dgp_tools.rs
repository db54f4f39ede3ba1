//! The DGP controller bound as agent tools (`dgp_surfaces`, `dgp_run_surface`) on the native
//! `AgentHost`, against a real `weft serve`: a scripted model drives thread-42 and thread-73
//! in one step (the runs overlap, the results keep model order), the human-only publication is
//! reported as the stop, and an interrupt mid-run separates the call that never started, the
//! run that stopped at a safe point, and the run whose commit was in flight (uncertain; its
//! report arrives later as mail).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tokio::sync::watch;
use weft_core::frames::controller::EvidencePack;
use weft_core::frames::types::{AssessmentResult, Decision, Frame, Resolver};
use weft_core::tools::{
    CallOutcome, Evidence, InterruptStatus, MailItem, Message, ModelResponse, Output,
    ScriptedModel, SessionConfig, ToolCall, ToolDecl, TurnEnd,
};
use weft_host::agent::adapters::{BoxFuture, DecisionAdapter, FixtureAdapter, FixtureText};
use weft_host::agent::client::CallError;
use weft_host::agent::controller::{Controller, RunOptions};
use weft_host::agent::tools::DgpTools;
use weft_host::agent_host::{AgentHost, tool_fn};

/// The seed's fixture judgments, with test hooks: each surface's first judgment may wait for
/// a signal, announce that it began, or never end (a slow judge).
#[derive(Default)]
struct Hooked {
    wait_for: HashMap<String, watch::Receiver<bool>>,
    announce: HashMap<String, watch::Sender<bool>>,
    hang: Vec<String>,
}

impl DecisionAdapter for Hooked {
    fn modalities(&self) -> Vec<String> {
        FixtureAdapter.modalities()
    }

    fn decide<'a>(
        &'a self,
        frame: &'a Frame,
        d: &'a Decision,
        ev: &'a EvidencePack,
    ) -> BoxFuture<'a, Result<(AssessmentResult, Resolver), CallError>> {
        Box::pin(async move {
            let sid = frame.surface_id.as_str();
            if let Some(tx) = self.announce.get(sid) {
                tx.send_replace(true);
            }
            if let Some(rx) = self.wait_for.get(sid) {
                rx.clone().wait_for(|v| *v).await.expect("the signal stays");
            }
            if self.hang.iter().any(|h| h == sid) {
                std::future::pending::<()>().await;
            }
            FixtureAdapter.decide(frame, d, ev).await
        })
    }
}

async fn controller(server: &Server, adapter: Hooked) -> Arc<Controller> {
    let c = Controller::connect(
        &server.base,
        Some(AGENT.into()),
        false,
        Box::new(adapter),
        Box::new(FixtureText),
        3,
    )
    .await
    .expect("weft serve speaks DGP 0.1");
    Arc::new(c)
}

fn surface(d: &Dgp, sid: &str) -> Value {
    let s = d.get("/dgp/surfaces", AGENT).json();
    s["surfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["surface_id"] == sid)
        .unwrap()
        .clone()
}

/// The step's results as the model gets them: `(call id, outcome)` in transcript order.
fn results(h: &AgentHost) -> Vec<(String, CallOutcome<Value>)> {
    h.session
        .history()
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { result, .. } => {
                Some((result.call_id.clone(), result.outcome.clone()))
            }
            _ => None,
        })
        .collect()
}

fn value(o: &CallOutcome<Value>) -> &Value {
    match o {
        CallOutcome::Succeeded { value } => value,
        other => panic!("expected a value, got {other:?}"),
    }
}

/// Call ids in the order the host started them and in the order they finished.
fn start_and_finish_order(h: &AgentHost) -> (Vec<String>, Vec<String>) {
    let mut ids = HashMap::new();
    let (mut started, mut finished) = (vec![], vec![]);
    for o in &h.log {
        match o {
            Output::StartCall {
                invocation,
                call_id,
                ..
            } => {
                ids.insert(*invocation, call_id.clone());
                started.push(call_id.clone());
            }
            Output::CallFinished { invocation, .. } => {
                // Rejected calls never started: they have no id here.
                if let Some(id) = ids.get(invocation) {
                    finished.push(id.clone());
                }
            }
            _ => {}
        }
    }
    (started, finished)
}

/// Records the assessments, commit requests and receipts of a run for schema validation.
fn record_run(d: &Dgp, run: &Value) {
    for e in run["events"].as_array().unwrap() {
        match e["event"].as_str() {
            Some("assessed") => d.record("AssessmentRequest", e["assessment"].clone()),
            Some("commit_intent") => d.record("CommitRequest", e["request"].clone()),
            Some("committed") => d.record("Receipt", e["receipt"].clone()),
            _ => {}
        }
    }
}

async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within 20 s"))
}

#[tokio::test]
async fn two_surfaces_in_one_step_overlap_keep_model_order_and_report_the_human_stop() {
    let dir = TempDir::new("dgp-tools");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);

    // thread-42's first judgment waits until thread-73's run has ended: both runs are in
    // flight together, and they finish in the opposite of model order.
    let (done73, gate42) = watch::channel(false);
    let adapter = Hooked {
        wait_for: HashMap::from([("thread-42".to_owned(), gate42)]),
        ..Hooked::default()
    };
    let ctl = controller(&server, adapter).await;
    let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
    let seen2 = seen.clone();
    let tools = DgpTools::new(ctl, RunOptions::default()).with_observer(move |e| {
        seen2.lock().unwrap().push(e.clone());
        if e["surface"] == "thread-73" && e["event"] == "quiescent" {
            done73.send_replace(true);
        }
    });
    let script = ScriptedModel::new([
        ModelResponse::calls(vec![ToolCall::new("c1", "dgp_surfaces", json!({}))]),
        ModelResponse::calls(vec![
            ToolCall::new("c2", "dgp_run_surface", json!({"surface_id": "thread-42"})),
            ToolCall::new("c3", "dgp_run_surface", json!({"surface_id": "thread-73"})),
            // The published schema is enforced before any handler runs.
            ToolCall::new("c4", "dgp_run_surface", json!({"surface": "thread-42"})),
        ]),
        ModelResponse::text("thread-42 waits for a human to publish; thread-73 is investigated"),
    ]);
    let mut h = AgentHost::new(SessionConfig::new("desk-agent"), script);
    tools.register(&mut h).unwrap();
    let offered = h.session.tools();
    let run = &offered.get("dgp_run_surface").unwrap().decl;
    assert!(run.supports_parallel && run.safe_to_cancel && !run.may_start_job);
    assert_eq!(run.parameters["required"], json!(["surface_id"]));
    assert!(offered.get("dgp_surfaces").unwrap().decl.supports_parallel);

    h.submit_task(json!("Work through the CI threads."));
    bounded("the turn", h.run_until_idle()).await;

    let r = results(&h);
    let ids: Vec<&str> = r.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4"], "model order");

    let listed = value(&r[0].1)["surfaces"].as_array().unwrap().clone();
    assert!(listed.iter().any(|s| s["surface_id"] == "thread-42"));
    assert!(listed.iter().any(|s| s["surface_id"] == "thread-73"));

    // thread-42: retry, draft through the text service, then the human-only publication.
    let a = value(&r[1].1);
    assert_eq!(a["surface_id"], "thread-42");
    assert_eq!(a["ended"], "human_review_required", "{a}");
    assert!(a["stop"]["frame_id"].is_string() && a["stop"]["assessment_id"].is_string());
    let commits = a["commits"].as_array().unwrap();
    assert_eq!(
        commits.len(),
        3,
        "retry, draft_update, the drafted text; never the publication"
    );
    assert!(
        commits[0]["outcome"]
            .as_str()
            .unwrap()
            .contains("No tests were actually run")
    );
    assert!(
        a["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| { e["event"] == "service_text" && e["service_id"] == "llm.generate_text" })
    );
    assert_eq!(a["commit_in_doubt"], Value::Null);

    // thread-73: reasoning requested and stored, judged again, then quiescent.
    let b = value(&r[2].1);
    assert_eq!(b["ended"], "quiescent", "{b}");
    assert!(!b["commits"].as_array().unwrap().is_empty());

    match &r[3].1 {
        CallOutcome::Rejected { code, .. } => assert_eq!(code, "INVALID_ARGUMENTS"),
        other => panic!("c4: {other:?}"),
    }

    // Both runs were started together and really overlapped: thread-42 had read its frame
    // before thread-73 ended, and thread-73 ended first; the results are still in model order.
    let (started, finished) = start_and_finish_order(&h);
    assert_eq!(started, ["c1", "c2", "c3"]);
    assert_eq!(finished, ["c1", "c3", "c2"], "completion order");
    let seen = seen.lock().unwrap();
    let at = |s: &str, ev: &str| {
        seen.iter()
            .position(|e| e["surface"] == s && e["event"] == ev)
            .unwrap_or_else(|| panic!("no {ev} for {s}"))
    };
    assert!(at("thread-42", "frame") < at("thread-73", "quiescent"));
    assert!(at("thread-73", "quiescent") < at("thread-42", "assessed"));
    // The observer saw exactly what the results report.
    let reported: usize = [a, b]
        .iter()
        .map(|v| v["events"].as_array().unwrap().len())
        .sum();
    assert_eq!(seen.len(), reported);

    // The server agrees; nothing reached the bulletin; the model saw the results.
    assert_eq!(surface(&d, "thread-42")["state"], "review");
    assert_eq!(surface(&d, "thread-73")["state"], "investigating");
    assert_eq!(d.get("/dgp/bulletin", AGENT).json()["entries"], json!([]));
    assert_eq!(h.session.stats().model_requests, 3);
    record_run(&d, a);
    record_run(&d, b);
    d.validate();
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test]
async fn an_interrupt_mid_run_separates_never_started_safe_stops_and_an_uncertain_commit() {
    let dir = TempDir::new("dgp-tools-int");
    let server = Server::start(&dir.0, &[]);
    let pid = server.child.id();
    let d = Dgp::new(&server);
    let before42 = surface(&d, "thread-42");
    let before73 = surface(&d, "thread-73");

    // thread-73's judge never answers (a slow model); thread-42 is judged once thread-73's
    // judgment began. When thread-42 logs its commit intent the server is frozen (SIGSTOP), so
    // the commit is in flight with no answer when the interrupt comes.
    let (judging73, gate42) = watch::channel(false);
    let adapter = Hooked {
        wait_for: HashMap::from([("thread-42".to_owned(), gate42)]),
        announce: HashMap::from([("thread-73".to_owned(), judging73)]),
        hang: vec!["thread-73".into()],
    };
    let ctl = controller(&server, adapter).await;
    let in_flight = Arc::new(AtomicBool::new(false));
    let in_flight2 = in_flight.clone();
    let tools = DgpTools::new(ctl, RunOptions::default()).with_observer(move |e| {
        if e["surface"] == "thread-42"
            && e["event"] == "commit_intent"
            && !in_flight2.swap(true, Ordering::SeqCst)
        {
            signal(pid, "-STOP");
        }
    });
    let script = ScriptedModel::new([
        ModelResponse::calls(vec![
            ToolCall::new("c1", "dgp_run_surface", json!({"surface_id": "thread-42"})),
            ToolCall::new("c2", "dgp_run_surface", json!({"surface_id": "thread-73"})),
            ToolCall::new("c3", "tell_human", json!({"text": "both threads handled"})),
        ]),
        ModelResponse::text("I saw what the interrupted run did"),
    ]);
    let mut config = SessionConfig::new("desk-agent");
    config.interrupt_grace_ms = 300;
    let mut h = AgentHost::new(config, script);
    tools.register(&mut h).unwrap();
    // An exclusive tool: it runs alone, after the parallel group.
    let told = Arc::new(AtomicU32::new(0));
    let told2 = told.clone();
    h.register(
        ToolDecl::new(
            "tell_human",
            "Tell the human something",
            json!({"type": "object"}),
        ),
        tool_fn(move |_args: Value, _ctx| {
            let told = told2.clone();
            async move {
                told.fetch_add(1, Ordering::SeqCst);
                Ok(json!("told"))
            }
        }),
    )
    .unwrap();

    h.submit_task(json!("Work through the CI threads."));
    bounded("the commit in flight", async {
        while !in_flight.load(Ordering::SeqCst) {
            h.run_for(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(
        h.interrupt("the user pressed stop"),
        InterruptStatus::Stopping
    );
    bounded("the interrupt", h.run_until_idle()).await;

    let r = results(&h);
    let ids: Vec<&str> = r.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2", "c3"], "model order");
    // c1: its commit had no answer when the grace period ended: uncertain, abort was sent.
    match &r[0].1 {
        CallOutcome::Uncertain {
            evidence:
                Evidence::NoSettlement {
                    waited_ms,
                    abort_sent,
                },
            ..
        } => {
            assert!(*abort_sent);
            assert!(*waited_ms >= 300, "{waited_ms}");
        }
        other => panic!("c1: {other:?}"),
    }
    // c2: stopped at a safe point (its judge was still thinking): a certain report, no commit.
    let b = value(&r[1].1);
    assert_eq!(b["ended"], "interrupted", "{b}");
    assert_eq!(b["stop"]["at"], "judging");
    assert_eq!(b["commits"], json!([]));
    assert!(
        !b["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "assessed")
    );
    // c3: never started: safe to retry.
    assert!(
        matches!(&r[2].1, CallOutcome::NotStarted { .. }),
        "c3: {:?}",
        r[2].1
    );
    assert_eq!(
        told.load(Ordering::SeqCst),
        0,
        "the exclusive call never ran"
    );
    let ended = h.session.history().iter().rev().find_map(|m| match m {
        Message::TurnEnd { end, .. } => Some(end.clone()),
        _ => None,
    });
    assert!(matches!(ended, Some(TurnEnd::Interrupted { .. })));
    assert_eq!(h.session.stats().model_requests, 1);

    // The server wakes up: the commit gets its answer, the run stops right after it, and its
    // report arrives as late mail — no model call.
    signal(pid, "-CONT");
    bounded(
        "the late result",
        h.run_until(|h| h.session.mailbox().any(|m| m.item.kind() == "late_result")),
    )
    .await;
    let late = h
        .session
        .mailbox()
        .find_map(|m| match &m.item {
            MailItem::LateResult { result, .. } => Some(result.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(late.call_id, "c1");
    let a = value(&late.outcome).clone();
    assert_eq!(a["ended"], "interrupted", "{a}");
    assert_eq!(a["stop"]["at"], "between_steps");
    let commits = a["commits"].as_array().unwrap();
    assert_eq!(commits.len(), 1, "exactly the commit that was in flight");
    assert_eq!(a["commit_in_doubt"], Value::Null);
    assert_eq!(h.session.stats().model_requests, 1);

    let after42 = surface(&d, "thread-42");
    assert_eq!(
        after42["revision"].as_u64().unwrap(),
        before42["revision"].as_u64().unwrap() + 1,
        "one commit, applied once"
    );
    assert_ne!(after42["state"], before42["state"]);
    assert_eq!(surface(&d, "thread-73"), before73, "thread-73 unchanged");

    // The next turn admits the late report: the model is told what the run did.
    h.submit_task(json!("What happened?"));
    bounded("the next turn", h.run_until_idle()).await;
    assert!(h.session.history().iter().any(|m| matches!(
        m,
        Message::Admitted(mail) if matches!(&mail.item, MailItem::LateResult { result, .. } if result.call_id == "c1")
    )));
    record_run(&d, &a);
    d.validate();
}

#[tokio::test]
async fn two_runs_of_one_surface_in_a_step_queue_instead_of_racing() {
    let dir = TempDir::new("dgp-tools-same");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    let ctl = controller(&server, Hooked::default()).await;
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen2 = seen.clone();
    let tools = DgpTools::new(ctl, RunOptions::default()).with_observer(move |e| {
        seen2
            .lock()
            .unwrap()
            .push(e["event"].as_str().unwrap().to_owned());
    });
    let script = ScriptedModel::new([
        ModelResponse::calls(vec![
            ToolCall::new("r1", "dgp_run_surface", json!({"surface_id": "thread-73"})),
            ToolCall::new("r2", "dgp_run_surface", json!({"surface_id": "thread-73"})),
        ]),
        ModelResponse::text("done"),
    ]);
    let mut h = AgentHost::new(SessionConfig::new("desk-agent"), script);
    tools.register(&mut h).unwrap();
    h.submit_task(json!("Handle thread-73."));
    bounded("the turn", h.run_until_idle()).await;
    let r = results(&h);
    let (first, second) = (value(&r[0].1), value(&r[1].1));
    assert_eq!(first["ended"], "quiescent", "{first}");
    assert!(!first["commits"].as_array().unwrap().is_empty());
    // The second run began once the first had ended: it found nothing left to decide (no
    // stale frame, no duplicate judgment).
    assert_eq!(second["ended"], "quiescent", "{second}");
    assert_eq!(
        (second["steps"].as_u64(), &second["commits"]),
        (Some(1), &json!([]))
    );
    let seen = seen.lock().unwrap();
    let n = seen.len();
    assert_eq!(&seen[n - 2..], ["frame", "quiescent"]);
    assert_eq!(
        seen[..n - 2].iter().filter(|e| *e == "quiescent").count(),
        1
    );
    assert_eq!(seen[n - 3], "quiescent", "{seen:?}");
    assert_eq!(surface(&d, "thread-73")["state"], "investigating");
}
