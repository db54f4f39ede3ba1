//! Unit and property tests of agent sessions. Scenario coverage lives in the conformance
//! vectors (`tests/vectors/tools.json`), which every host runs.

use std::collections::BTreeSet;

use crate::Mono;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::jobs::{EndpointSpec, Hello, Registry, Submit};

fn session() -> Session<Value> {
    let mut s = Session::new(SessionConfig {
        interrupt_grace_ms: 100,
        ..SessionConfig::new("agent")
    });
    s.register_tool(ToolDecl::new("p", "parallel", json!({"type": "object"})).parallel(true))
        .unwrap();
    s.register_tool(ToolDecl::new("e", "exclusive", json!({"type": "object"})))
        .unwrap();
    s.register_tool(
        ToolDecl::new("ps", "parallel, safe to cancel", json!({"type": "object"}))
            .parallel(true)
            .safe_to_cancel(true),
    )
    .unwrap();
    s.register_tool(
        ToolDecl::new("es", "exclusive, safe to cancel", json!({"type": "object"}))
            .safe_to_cancel(true),
    )
    .unwrap();
    s.register_tool(
        ToolDecl::new(
            "strict",
            "parallel, needs n",
            json!({"type": "object", "required": ["n"]}),
        )
        .parallel(true),
    )
    .unwrap();
    s.drain_outputs().for_each(drop);
    s
}

/// One call of a generated step: which tool, and whether its arguments are valid.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Parallel,
    Exclusive,
    ParallelSafe,
    ExclusiveSafe,
    Unknown,
    Invalid,
}

impl Kind {
    fn call(self, i: usize) -> ToolCall {
        let (name, args) = match self {
            Kind::Parallel => ("p", json!({})),
            Kind::Exclusive => ("e", json!({})),
            Kind::ParallelSafe => ("ps", json!({})),
            Kind::ExclusiveSafe => ("es", json!({})),
            Kind::Unknown => ("missing", json!({})),
            Kind::Invalid => ("strict", json!({})),
        };
        ToolCall::new(format!("c{i}"), name, args)
    }
    /// Parallel eligibility as the snapshot declares it.
    fn eligible(self) -> bool {
        matches!(self, Kind::Parallel | Kind::ParallelSafe | Kind::Invalid)
    }
    fn refused(self) -> bool {
        matches!(self, Kind::Unknown | Kind::Invalid)
    }
    fn safe(self) -> bool {
        matches!(self, Kind::ParallelSafe | Kind::ExclusiveSafe)
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        4 => Just(Kind::Parallel),
        3 => Just(Kind::Exclusive),
        2 => Just(Kind::ParallelSafe),
        1 => Just(Kind::ExclusiveSafe),
        1 => Just(Kind::Unknown),
        1 => Just(Kind::Invalid),
    ]
}

/// The expected groups of the calls that start (refused calls take no part): maximal runs of
/// adjacent eligible calls; every exclusive call alone.
fn expected_groups(kinds: &[Kind]) -> Vec<Vec<usize>> {
    let live: Vec<usize> = (0..kinds.len()).filter(|&i| !kinds[i].refused()).collect();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in live {
        match groups.last_mut() {
            Some(g) if kinds[i].eligible() && kinds[*g.last().unwrap()].eligible() => g.push(i),
            _ => groups.push(vec![i]),
        }
    }
    groups
}

/// Starts calls observed in one batch of outputs (indices in model order).
fn started(outs: &[Output]) -> Vec<usize> {
    outs.iter()
        .filter_map(|o| match o {
            Output::StartCall { invocation, .. } => Some(invocation.0 as usize - 1),
            _ => None,
        })
        .collect()
}

fn results(s: &Session<Value>) -> Vec<CallResult<Value>> {
    s.history()
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { result, .. } => Some(result.clone()),
            _ => None,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: crate::test_cases(256), ..ProptestConfig::default() })]

    /// For every pattern of parallel/exclusive/refused calls and every completion order: the
    /// running set is always exactly one expected group, groups start in model order only after
    /// the previous group settled, and results enter the transcript in model order with their
    /// identities and values.
    #[test]
    fn groups_and_model_order_for_every_pattern(
        kinds in proptest::collection::vec(kind(), 1..12),
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 64),
        throws in proptest::collection::vec(any::<bool>(), 64),
    ) {
        let mut s = session();
        s.submit_task(Mono::from_ms(0), json!("t"));
        s.drain_outputs().for_each(drop);
        let calls: Vec<ToolCall> = kinds.iter().enumerate().map(|(i, k)| k.call(i)).collect();
        s.on_model_response(Mono::from_ms(1), StepId(1), ModelResponse::calls(calls)).unwrap();
        let live = expected_groups(&kinds);
        let mut running: BTreeSet<usize> = BTreeSet::new();
        let mut group_seen = 0usize;
        let mut outs: Vec<Output> = s.drain_outputs().collect();
        let mut settled_value = vec![None; kinds.len()];
        let mut pick = 0usize;
        loop {
            let new = started(&outs);
            if !new.is_empty() {
                prop_assert!(running.is_empty(), "a group started while {running:?} ran");
                prop_assert_eq!(&new, &live[group_seen], "group {} of {:?}", group_seen, kinds);
                group_seen += 1;
                running.extend(new);
            }
            if outs.iter().any(|o| matches!(o, Output::ModelRequest { .. })) {
                break;
            }
            prop_assert!(!running.is_empty(), "nothing runs and the step did not finish");
            let i = *running.iter().nth(picks[pick % picks.len()].index(running.len())).unwrap();
            let settlement = if throws[pick % throws.len()] {
                Settlement::Threw { message: format!("boom {i}"), code: Some("E".into()) }
            } else {
                Settlement::Returned(json!(i))
            };
            pick += 1;
            settled_value[i] = Some(matches!(settlement, Settlement::Returned(_)));
            running.remove(&i);
            s.on_call_settled(Mono::from_ms(2 + pick as u64), InvocationId(i as u64 + 1), settlement).unwrap();
            outs = s.drain_outputs().collect();
        }
        prop_assert_eq!(group_seen, live.len());
        let rs = results(&s);
        prop_assert_eq!(rs.len(), kinds.len());
        for (i, r) in rs.iter().enumerate() {
            prop_assert_eq!(&r.call_id, &format!("c{i}"));
            prop_assert_eq!(r.invocation, InvocationId(i as u64 + 1));
            match (&r.outcome, kinds[i].refused(), settled_value[i]) {
                (CallOutcome::Rejected { .. }, true, None) => {}
                (CallOutcome::Succeeded { value }, false, Some(true)) => prop_assert_eq!(value, &json!(i)),
                (CallOutcome::Failed { message, .. }, false, Some(false)) => {
                    prop_assert_eq!(message, &format!("boom {i}"))
                }
                (o, refused, v) => prop_assert!(false, "call {i}: {o:?} (refused {refused}, settled {v:?})"),
            }
        }
    }

    /// Interrupting at any point gives every call exactly one outcome: calls that never started
    /// are `not_started` (or refused), started calls are never `not_started`; aborts go only to
    /// tools declared safe; unsettled calls are detached and their late results become mail.
    #[test]
    fn interrupt_at_any_point(
        kinds in proptest::collection::vec(kind(), 1..10),
        settle_before in 0usize..8,
        after in proptest::collection::vec(0u8..3, 10),
        timeout in any::<bool>(),
    ) {
        let mut s = session();
        s.submit_task(Mono::from_ms(0), json!("t"));
        let calls: Vec<ToolCall> = kinds.iter().enumerate().map(|(i, k)| k.call(i)).collect();
        s.on_model_response(Mono::from_ms(1), StepId(1), ModelResponse::calls(calls)).unwrap();
        let mut ever_started = BTreeSet::new();
        let mut running = BTreeSet::new();
        let absorb = |outs: Vec<Output>, running: &mut BTreeSet<usize>, ever: &mut BTreeSet<usize>| {
            for i in started(&outs) {
                running.insert(i);
                ever.insert(i);
            }
            outs
        };
        absorb(s.drain_outputs().collect(), &mut running, &mut ever_started);
        let mut n = 0;
        while n < settle_before && !running.is_empty() && s.phase() != Phase::Idle {
            let i = *running.iter().next().unwrap();
            running.remove(&i);
            s.on_call_settled(Mono::from_ms(2), InvocationId(i as u64 + 1), Settlement::Returned(json!(i))).unwrap();
            absorb(s.drain_outputs().collect(), &mut running, &mut ever_started);
            n += 1;
        }
        if !matches!(s.phase(), Phase::RunningTools { .. }) {
            // The step finished before the interrupt: nothing to check here.
            return Ok(());
        }
        let status = s.interrupt(Mono::from_ms(10), "stop");
        let outs = absorb(s.drain_outputs().collect(), &mut running, &mut ever_started);
        let aborted: BTreeSet<usize> = outs
            .iter()
            .filter_map(|o| match o {
                Output::AbortCall { invocation, .. } => Some(invocation.0 as usize - 1),
                _ => None,
            })
            .collect();
        let want_aborted: BTreeSet<usize> = running.iter().copied().filter(|&i| kinds[i].safe()).collect();
        prop_assert_eq!(&aborted, &want_aborted);
        prop_assert_eq!(status, InterruptStatus::Stopping);
        // Some running calls settle within the grace period.
        let mut settled_in_grace = BTreeSet::new();
        for (k, i) in running.clone().into_iter().enumerate() {
            let settlement = match after[k % after.len()] {
                0 => continue,
                1 => Settlement::Returned(json!(i)),
                _ => Settlement::Aborted,
            };
            s.on_call_settled(Mono::from_ms(20), InvocationId(i as u64 + 1), settlement).unwrap();
            running.remove(&i);
            settled_in_grace.insert(i);
        }
        if timeout || running.is_empty() {
            s.handle_timeout(Mono::from_ms(110));
        }
        if !running.is_empty() && !timeout {
            let interrupted = matches!(s.phase(), Phase::Interrupted { .. });
            prop_assert!(interrupted);
            s.handle_timeout(Mono::from_ms(109));
            let interrupted = matches!(s.phase(), Phase::Interrupted { .. });
            prop_assert!(interrupted, "the grace period is 100 ms");
            s.handle_timeout(Mono::from_ms(110));
        }
        prop_assert_eq!(s.phase(), Phase::Idle);
        let rs = results(&s);
        prop_assert_eq!(rs.len(), kinds.len());
        for (i, r) in rs.iter().enumerate() {
            let was_started = ever_started.contains(&i);
            match &r.outcome {
                CallOutcome::NotStarted { .. } => prop_assert!(!was_started && !kinds[i].refused()),
                CallOutcome::Rejected { .. } => prop_assert!(kinds[i].refused() && !was_started),
                CallOutcome::Uncertain { evidence: Evidence::NoSettlement { abort_sent, .. }, .. } => {
                    prop_assert!(was_started && running.contains(&i));
                    prop_assert_eq!(*abort_sent, kinds[i].safe());
                }
                CallOutcome::Uncertain { evidence: Evidence::AbortAcknowledged { .. }, .. } => {
                    prop_assert!(was_started && settled_in_grace.contains(&i) && kinds[i].safe())
                }
                CallOutcome::Failed { code, .. } => {
                    // An abort nobody asked for.
                    prop_assert!(was_started && !kinds[i].safe());
                    prop_assert_eq!(code.as_deref(), Some("ABORTED"));
                }
                CallOutcome::Succeeded { .. } => prop_assert!(was_started),
            }
            prop_assert_eq!(r.outcome.started(), was_started);
        }
        let detached: BTreeSet<usize> = s.detached().map(|i| i.0 as usize - 1).collect();
        prop_assert_eq!(&detached, &running);
        // Late results of detached calls arrive as mail, never as a second result.
        for &i in &running {
            s.on_call_settled(Mono::from_ms(500), InvocationId(i as u64 + 1), Settlement::Returned(json!("late"))).unwrap();
        }
        prop_assert_eq!(s.mailbox().filter(|m| m.item.kind() == "late_result").count(), running.len());
        prop_assert_eq!(results(&s).len(), kinds.len());
    }

    /// Whatever mix of progress, job completions, observations, standing changes, tasks and
    /// wakes arrives: only tasks and wakes start turns, tasks start in submission order, mail is
    /// model input only at a turn start, and no mail is lost.
    #[test]
    fn only_explicit_choices_start_turns(events in proptest::collection::vec(0u8..9, 1..80)) {
        let mut reg: Registry<Value> = Registry::default();
        let mut spec = EndpointSpec::new("app", "w");
        spec.hello = Hello::Skip;
        let ep = reg.open_endpoint(Mono::from_ms(0), spec);
        let mut s: Session<Value> = Session::new(SessionConfig::new("agent"));
        let mut running_jobs: Vec<u64> = Vec::new();
        let mut explicit = 0u64;
        let mut task_order = Vec::new();
        for (t, e) in events.iter().enumerate() {
            let now = t as u64;
            let before = s.stats();
            let mut was_explicit = false;
            match e {
                0 | 1 => {
                    let wake = *e == 1;
                    let mut req = Submit::new("agent", ep, json!(t));
                    req.wake = wake;
                    let j = reg.submit(Mono::from_ms(now), req).unwrap().job;
                    running_jobs.push(j.0);
                }
                2 | 3 if !running_jobs.is_empty() => {
                    let j = running_jobs[t % running_jobs.len()];
                    let wire = reg.job(crate::jobs::JobId(j)).unwrap().wire_id.unwrap();
                    let done = *e == 3;
                    if done {
                        running_jobs.retain(|x| *x != j);
                        was_explicit = reg.job(crate::jobs::JobId(j)).unwrap().wake;
                    }
                    let msg = if done {
                        json!({"id": wire, "type": "done", "value": t})
                    } else {
                        json!({"id": wire, "type": "progress", "value": t})
                    };
                    reg.on_message(Mono::from_ms(now), ep, &msg).unwrap();
                }
                4 => {
                    s.post_observation(Mono::from_ms(now), "obs", json!(t));
                }
                5 => s.set_standing("mode", json!(t)),
                6 => {
                    task_order.push(s.submit_task(Mono::from_ms(now), json!(t)));
                    was_explicit = true;
                }
                7 => {
                    s.wake(Mono::from_ms(now), "app");
                    was_explicit = true;
                }
                _ => {
                    // The model answers whatever is pending with text (ending the turn).
                    if let Some(r) = s.model_request() {
                        let step = r.step;
                        s.on_model_response(Mono::from_ms(now), step, ModelResponse::text("ok")).unwrap();
                        was_explicit = true; // ending a turn may start the next queued one
                    }
                }
            }
            let outs: Vec<_> = reg.drain_outputs().collect();
            for o in &outs {
                s.on_registry_output(Mono::from_ms(now), o, &mut reg);
            }
            let after = s.stats();
            if !was_explicit {
                prop_assert_eq!(after.turns, before.turns, "event {} started a turn", e);
                prop_assert_eq!(after.model_requests, before.model_requests, "event {} asked the model", e);
            }
            if after.turns > before.turns {
                explicit += 1;
            }
            s.drain_outputs().for_each(drop);
        }
        prop_assert!(s.stats().turns <= explicit);
        // Tasks start in submission order.
        let started_tasks: Vec<TaskId> = s
            .history()
            .iter()
            .filter_map(|m| match m {
                Message::TurnStart { cause: TurnCause::Task(t), .. } => Some(*t),
                _ => None,
            })
            .collect();
        prop_assert_eq!(&started_tasks[..], &task_order[..started_tasks.len()]);
        // Mail appears only in admission blocks (right after a turn start), and none is lost.
        let mut in_admission = false;
        let mut admitted = 0;
        for m in s.history() {
            match m {
                Message::TurnStart { .. } => in_admission = true,
                Message::Admitted(_) => {
                    prop_assert!(in_admission, "mail outside an admission block");
                    admitted += 1;
                }
                Message::Standing { .. } => prop_assert!(in_admission),
                _ => in_admission = false,
            }
        }
        prop_assert_eq!(admitted + s.mailbox().count() as u64, s.stats().mail_queued);
    }
}

#[test]
fn a_thousand_progress_events_never_call_the_model() {
    let mut reg: Registry<Value> = Registry::default();
    let mut spec = EndpointSpec::new("app", "w");
    spec.hello = Hello::Skip;
    let ep = reg.open_endpoint(Mono::from_ms(0), spec);
    let mut s: Session<Value> = Session::new(SessionConfig::new("agent"));
    let job = reg
        .submit(Mono::from_ms(0), Submit::new("agent", ep, json!(null)))
        .unwrap()
        .job;
    for i in 0..1000u64 {
        reg.on_message(
            Mono::from_ms(i),
            ep,
            &json!({"id": 1, "type": "progress", "value": i}),
        )
        .unwrap();
        for o in reg.drain_outputs().collect::<Vec<_>>() {
            s.on_registry_output(Mono::from_ms(i), &o, &mut reg);
        }
    }
    assert_eq!(
        s.stats(),
        SessionStats::default(),
        "progress reaches nothing"
    );
    reg.on_message(
        Mono::from_ms(1000),
        ep,
        &json!({"id": 1, "type": "done", "value": 1}),
    )
    .unwrap();
    for o in reg.drain_outputs().collect::<Vec<_>>() {
        s.on_registry_output(Mono::from_ms(1000), &o, &mut reg);
    }
    assert_eq!(s.stats().model_requests, 0);
    assert_eq!(s.phase(), Phase::Idle);
    let mail: Vec<_> = s.mailbox().collect();
    assert_eq!(mail.len(), 1);
    assert!(matches!(&mail[0].item, MailItem::Job(n) if n.job == job));
}

#[test]
fn submit_job_records_owner_origin_and_hand_over() {
    let mut reg: Registry<Value> = Registry::default();
    let mut spec = EndpointSpec::new("app", "w");
    spec.hello = Hello::Skip;
    let ep = reg.open_endpoint(Mono::from_ms(0), spec);
    let mut s: Session<Value> = Session::new(SessionConfig::new("agent-7"));
    s.register_tool(ToolDecl::new("run", "", json!({"type": "object"})).may_start_job(true))
        .unwrap();
    s.register_tool(ToolDecl::new("plain", "", json!({"type": "object"})).parallel(true))
        .unwrap();
    s.submit_task(Mono::from_ms(0), json!("go"));
    s.on_model_response(
        Mono::from_ms(1),
        StepId(1),
        ModelResponse::calls(vec![
            ToolCall::new("p1", "plain", json!({})),
            ToolCall::new("r1", "run", json!({})),
        ]),
    )
    .unwrap();
    let err = s
        .submit_job(
            Mono::from_ms(2),
            InvocationId(1),
            &mut reg,
            Submit::new("x", ep, json!(1)),
        )
        .unwrap_err();
    assert_eq!(err.code(), "JOB_NOT_DECLARED");
    assert_eq!(
        reg.jobs().count(),
        0,
        "a refused submission submits nothing"
    );
    let err = s
        .submit_job(
            Mono::from_ms(2),
            InvocationId(2),
            &mut reg,
            Submit::new("x", ep, json!(1)),
        )
        .unwrap_err();
    assert_eq!(
        err.code(),
        "CALL_NOT_STARTED",
        "the exclusive call waits for the group before it"
    );
    s.on_call_settled(
        Mono::from_ms(3),
        InvocationId(1),
        Settlement::Returned(json!(1)),
    )
    .unwrap();
    let sub = s
        .submit_job(
            Mono::from_ms(4),
            InvocationId(2),
            &mut reg,
            Submit::new("x", ep, json!(1)),
        )
        .unwrap();
    let j = reg.job(sub.job).unwrap();
    assert_eq!(j.owner.0, "agent-7");
    assert_eq!(j.origin.thread.as_deref(), Some("agent-7"));
    assert_eq!(j.origin.turn.as_deref(), Some("turn-1"));
    assert_eq!(j.origin.tool_call.as_deref(), Some("r1"));
    s.on_call_settled(
        Mono::from_ms(5),
        InvocationId(2),
        Settlement::Returned(json!({"job": sub.job.0})),
    )
    .unwrap();
    let r = results(&s);
    assert_eq!(r[1].jobs, vec![sub.job]);
    assert_eq!(r[1].to_json()["handedOver"], json!(true));
    assert_eq!(
        s.on_call_job(Mono::from_ms(6), InvocationId(2), sub.job)
            .unwrap_err()
            .code(),
        "ALREADY_SETTLED"
    );
}

#[test]
fn replaced_handlers_are_released_once_no_snapshot_binds_them() {
    let mut s: Session<Value> = Session::new(SessionConfig::new("a"));
    let h1 = s
        .register_tool(ToolDecl::new("t", "", json!({"type": "object"})))
        .unwrap();
    // Not bound by any snapshot: released at once.
    let h2 = s
        .register_tool(ToolDecl::new("t", "", json!({"type": "object"})))
        .unwrap();
    assert_eq!(
        s.drain_outputs().collect::<Vec<_>>(),
        [Output::HandlerReleased { handler: h1 }]
    );
    s.submit_task(Mono::from_ms(0), json!(1));
    s.drain_outputs().for_each(drop);
    s.unregister_tool("t").unwrap();
    assert_eq!(
        s.drain_outputs().count(),
        0,
        "the pending step's snapshot still binds it"
    );
    s.on_model_response(Mono::from_ms(1), StepId(1), ModelResponse::text("none"))
        .unwrap();
    let outs: Vec<_> = s.drain_outputs().collect();
    assert!(
        outs.contains(&Output::HandlerReleased { handler: h2 }),
        "{outs:?}"
    );
}

#[test]
fn json_forms_name_every_status() {
    let u: CallOutcome<Value> = CallOutcome::Uncertain {
        reason: "r".into(),
        evidence: Evidence::NoSettlement {
            waited_ms: 5,
            abort_sent: true,
        },
    };
    assert_eq!(
        u.to_json(),
        json!({"status": "uncertain", "started": true, "reason": "r", "evidence": "no_settlement",
               "waitedMs": 5, "abortSent": true, "mayStillBeRunning": true})
    );
    let n: CallOutcome<Value> = CallOutcome::NotStarted { reason: "r".into() };
    assert_eq!(
        n.to_json(),
        json!({"status": "not_started", "started": false, "reason": "r", "safeToRetry": true})
    );
}
