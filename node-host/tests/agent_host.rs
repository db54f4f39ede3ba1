//! The native agent host with real async handlers (Tokio tasks), real in-process jobs and real
//! time: parallel groups really overlap, a panicking handler fails only its call, a job started
//! by a tool outlives the turn and its note arrives without a model call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::jobs::{JobId, JobState, OutcomeKind};
use weft_core::tools::{
    CallOutcome, Evidence, InterruptStatus, MailItem, Message, ModelRequest, ModelResponse, Phase,
    ScriptedModel, SessionConfig, ToolCall, ToolDecl,
};
use weft_host::agent_host::{AgentHost, AsyncModel, BoxFuture, ToolError, tool_fn};
use weft_host::jobs_host::{LocalError, LocalFn};

fn object() -> Value {
    json!({"type": "object"})
}

fn results(h: &AgentHost) -> Vec<(String, CallOutcome<Value>, Vec<JobId>)> {
    h.session
        .history()
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { result, .. } => Some((
                result.call_id.clone(),
                result.outcome.clone(),
                result.jobs.clone(),
            )),
            _ => None,
        })
        .collect()
}

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("finished within 10 s")
}

#[tokio::test]
async fn parallel_groups_overlap_and_results_keep_model_order() {
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let script = ScriptedModel::new([
        ModelResponse::calls(vec![
            ToolCall::new("a", "sleep", json!({"ms": 80})),
            ToolCall::new("b", "sleep", json!({"ms": 50})),
            ToolCall::new("c", "sleep", json!({"ms": 20})),
            ToolCall::new("d", "lock", json!({"ms": 20})),
            ToolCall::new("e", "sleep", json!({"ms": 30})),
            ToolCall::new("f", "sleep", json!({"ms": 10})),
        ]),
        ModelResponse::text("done"),
    ]);
    let mut h = AgentHost::new(SessionConfig::new("agent"), script);
    let body = |log: Arc<Mutex<Vec<String>>>| {
        tool_fn(move |args: Value, ctx| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(format!("start {}", ctx.call_id));
                tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap())).await;
                log.lock().unwrap().push(format!("end {}", ctx.call_id));
                Ok(json!(ctx.call_id))
            }
        })
    };
    h.register(
        ToolDecl::new("sleep", "", object()).parallel(true),
        body(log.clone()),
    )
    .unwrap();
    h.register(ToolDecl::new("lock", "", object()), body(log.clone()))
        .unwrap();
    h.submit_task(json!("go"));
    bounded(h.run_until_idle()).await;
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "start a", "start b", "start c", "end c", "end b", "end a", "start d", "end d",
            "start e", "start f", "end f", "end e"
        ],
        "a, b, c overlap; d runs alone; e, f overlap"
    );
    let r = results(&h);
    let ids: Vec<_> = r.iter().map(|(id, ..)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["a", "b", "c", "d", "e", "f"],
        "model order, not completion order"
    );
    for (id, outcome, _) in &r {
        assert_eq!(outcome, &CallOutcome::Succeeded { value: json!(id) });
    }
    assert_eq!(h.session.stats().model_requests, 2);
}

#[tokio::test]
async fn a_panicking_handler_fails_its_call_and_the_others_keep_their_results() {
    let script = ScriptedModel::new([
        ModelResponse::calls(vec![
            ToolCall::new("ok1", "t", json!({"n": 1})),
            ToolCall::new("boom", "t", json!({"n": 0})),
            ToolCall::new("err", "t", json!({"n": -1})),
            ToolCall::new("ok2", "t", json!({"n": 2})),
        ]),
        ModelResponse::text("done"),
    ]);
    let mut h = AgentHost::new(SessionConfig::new("agent"), script);
    h.register(
        ToolDecl::new("t", "", object()).parallel(true),
        tool_fn(|args: Value, _ctx| async move {
            let n = args["n"].as_i64().unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            if n == 0 {
                let v: Vec<u8> = vec![];
                let _ = v[n as usize]; // panics: index out of bounds
            }
            if n < 0 {
                return Err(ToolError::failed("negative input", "E_NEGATIVE"));
            }
            Ok(json!(n * 10))
        }),
    )
    .unwrap();
    h.submit_task(json!("go"));
    bounded(h.run_until_idle()).await;
    let r = results(&h);
    assert_eq!(r[0].1, CallOutcome::Succeeded { value: json!(10) });
    match &r[1].1 {
        CallOutcome::Failed { message, code } => {
            assert_eq!(code.as_deref(), Some("HANDLER_PANICKED"));
            assert!(message.contains("index out of bounds"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        r[2].1,
        CallOutcome::Failed {
            message: "negative input".into(),
            code: Some("E_NEGATIVE".into())
        }
    );
    assert_eq!(r[3].1, CallOutcome::Succeeded { value: json!(20) });
}

/// A local job body that sleeps `ms` then returns `ms`.
fn sleeper() -> LocalFn {
    Arc::new(|payload: Value, mut ctx| {
        Box::pin(async move {
            let ms = payload["ms"].as_u64().unwrap_or(100);
            for i in 0..10 {
                ctx.progress(json!(i as f64 / 10.0));
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms / 10)) => {}
                    _ = ctx.cancelled() => return Err(LocalError::Cancelled),
                }
            }
            Ok(json!(ms))
        })
    })
}

#[tokio::test]
async fn a_job_started_by_a_tool_outlives_the_turn_and_its_note_waits_for_the_next_turn() {
    let script = ScriptedModel::new([
        ModelResponse::calls(vec![ToolCall::new("s", "start_sim", json!({"ms": 200}))]),
        ModelResponse::text("started"),
        ModelResponse::text("the simulation finished"),
    ]);
    let mut h = AgentHost::new(SessionConfig::new("agent"), script);
    let ep = h.jobs.open_local("app", "sim", sleeper());
    h.register(
        ToolDecl::new("start_sim", "", object()).may_start_job(true),
        tool_fn(move |args: Value, ctx| async move {
            let job = ctx
                .submit_job(ep, args, false)
                .await
                .map_err(|e| ToolError::failed(e.to_string(), e.code()))?;
            Ok(json!({"job": job.0}))
        }),
    )
    .unwrap();
    h.submit_task(json!("simulate"));
    bounded(h.run_until_idle()).await;
    let r = results(&h);
    let job = r[0].2[0];
    assert_eq!(
        r[0].1,
        CallOutcome::Succeeded {
            value: json!({"job": job.0})
        }
    );
    let j = h.jobs.registry.job(job).unwrap();
    assert_eq!(j.state, JobState::Running, "the job outlives the turn");
    assert_eq!(j.origin.tool_call.as_deref(), Some("s"));
    assert_eq!(h.session.stats().model_requests, 2);
    // Idle: progress and completion arrive; the note queues; the model is not called.
    bounded(h.run_until(|h| h.session.mailbox().count() == 1)).await;
    assert_eq!(
        h.jobs.registry.job(job).unwrap().state,
        JobState::Finished(OutcomeKind::Succeeded)
    );
    assert!(
        h.jobs.registry.job(job).unwrap().journal().len() >= 10,
        "progress was recorded"
    );
    assert_eq!(h.session.phase(), Phase::Idle);
    assert_eq!(
        h.session.stats().model_requests,
        2,
        "no model call for progress or the note"
    );
    assert_eq!(h.session.stats().turns, 1);
    // The next task's turn admits the note.
    h.submit_task(json!("what happened?"));
    bounded(h.run_until_idle()).await;
    let admitted: Vec<_> = h
        .session
        .history()
        .iter()
        .filter_map(|m| match m {
            Message::Admitted(mail) => Some(mail.item.clone()),
            _ => None,
        })
        .collect();
    assert!(matches!(&admitted[..], [MailItem::Job(n)] if n.job == job));
}

#[tokio::test]
async fn interrupting_a_call_that_waits_on_its_job_hands_the_job_over() {
    let script = ScriptedModel::new([ModelResponse::calls(vec![ToolCall::new(
        "w",
        "simulate",
        json!({"ms": 300}),
    )])]);
    let mut h = AgentHost::new(SessionConfig::new("agent"), script);
    let ep = h.jobs.open_local("app", "sim", sleeper());
    h.register(
        ToolDecl::new("simulate", "", object())
            .may_start_job(true)
            .safe_to_cancel(true),
        tool_fn(move |args: Value, mut ctx| async move {
            let job = ctx
                .submit_job(ep, args, false)
                .await
                .map_err(|e| ToolError::failed(e.to_string(), e.code()))?;
            let waiter = ctx.clone();
            tokio::select! {
                outcome = waiter.wait_job(job) => Ok(outcome.unwrap_or(Value::Null)),
                _ = ctx.aborted() => Err(ToolError::Aborted),
            }
        }),
    )
    .unwrap();
    h.submit_task(json!("simulate and wait"));
    bounded(h.run_until(|h| h.jobs.registry.jobs().count() == 1)).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(h.interrupt("user pressed stop"), InterruptStatus::Stopping);
    bounded(h.run_until_idle()).await;
    let r = results(&h);
    assert!(
        matches!(
            &r[0].1,
            CallOutcome::Uncertain {
                evidence: Evidence::AbortAcknowledged { .. },
                ..
            }
        ),
        "{:?}",
        r[0].1
    );
    let job = r[0].2[0];
    let j = h.jobs.registry.job(job).unwrap();
    assert_eq!(
        j.state,
        JobState::Running,
        "the job continues after the interrupt"
    );
    assert!(j.cancel_requested_at.is_none(), "nobody cancelled the job");
    bounded(h.run_until(|h| h.session.mailbox().count() == 1)).await;
    assert_eq!(
        h.jobs.registry.job(job).unwrap().state,
        JobState::Finished(OutcomeKind::Succeeded)
    );
    assert_eq!(h.session.stats().model_requests, 1);
}

#[tokio::test]
async fn a_handler_that_ignores_the_interrupt_is_detached_and_reports_late() {
    let script = ScriptedModel::new([ModelResponse::calls(vec![
        ToolCall::new("slow", "slow", json!({})),
        ToolCall::new("later", "slow", json!({})),
    ])]);
    let mut cfg = SessionConfig::new("agent");
    cfg.interrupt_grace_ms = 40;
    let mut h = AgentHost::new(cfg, script);
    let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = finished.clone();
    h.register(
        ToolDecl::new("slow", "", object()),
        tool_fn(move |_args: Value, _ctx| {
            let flag = flag.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(json!("finished late"))
            }
        }),
    )
    .unwrap();
    h.submit_task(json!("go"));
    bounded(h.run_until(|h| {
        h.session.phase() != Phase::Idle
            && h.session
                .current_calls()
                .iter()
                .any(|(_, s)| *s == "running")
    }))
    .await;
    let t0 = std::time::Instant::now();
    assert_eq!(h.interrupt("stop"), InterruptStatus::Stopping);
    bounded(h.run_until_idle()).await;
    assert!(
        t0.elapsed() >= Duration::from_millis(35),
        "the grace period was given"
    );
    assert!(
        !finished.load(std::sync::atomic::Ordering::SeqCst),
        "the turn ended while the handler was still running"
    );
    let r = results(&h);
    assert!(matches!(
        &r[0].1,
        CallOutcome::Uncertain {
            evidence: Evidence::NoSettlement {
                abort_sent: false,
                ..
            },
            ..
        }
    ));
    assert!(matches!(&r[1].1, CallOutcome::NotStarted { .. }));
    bounded(h.run_until(|h| h.session.mailbox().count() == 1)).await;
    let mail: Vec<_> = h.session.mailbox().cloned().collect();
    match &mail[0].item {
        MailItem::LateResult { result, .. } => {
            assert_eq!(result.call_id, "slow");
            assert_eq!(
                result.outcome,
                CallOutcome::Succeeded {
                    value: json!("finished late")
                }
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A model that answers after a delay (a stand-in for a network model).
struct SlowModel {
    delay: Duration,
    answers: Vec<ModelResponse>,
}

impl AsyncModel for SlowModel {
    fn respond(
        &mut self,
        request: &ModelRequest<'_, Value>,
    ) -> BoxFuture<Result<ModelResponse, String>> {
        let delay = self.delay;
        let answer = if self.answers.is_empty() {
            Err(format!("no answer for {}", request.step))
        } else {
            Ok(self.answers.remove(0))
        };
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            answer
        })
    }
}

#[tokio::test]
async fn an_async_model_is_abandoned_when_the_turn_is_interrupted() {
    let model = SlowModel {
        delay: Duration::from_millis(100),
        answers: vec![
            ModelResponse::text("too late"),
            ModelResponse::text("second"),
        ],
    };
    let mut h = AgentHost::new(SessionConfig::new("agent"), model);
    h.submit_task(json!("first"));
    h.submit_task(json!("second"));
    assert!(matches!(h.session.phase(), Phase::ModelStep { .. }));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(h.interrupt("changed my mind"), InterruptStatus::Ended);
    // The second task's turn starts at once and completes with the model's (next) answer.
    bounded(h.run_until_idle()).await;
    assert_eq!(h.session.stats().turns, 2);
    let texts: Vec<_> = h
        .session
        .history()
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { text, .. } => text.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        ["second"],
        "the abandoned step's answer never entered the transcript"
    );
}
