//! Unit and property tests of the registry. Scenario coverage lives in the conformance vectors
//! (`tests/vectors/jobs.json`), which every host runs.

use std::collections::{HashMap, VecDeque};

use crate::Mono;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn caps(input: bool, cancel_ack: bool) -> Capabilities {
    Capabilities {
        input,
        cancel_ack,
        error_code: true,
        batch: false,
    }
}

/// Submits `payload` for owner "a" on `ep` at `ms`: the job's id.
fn submit(reg: &mut Registry<Value>, ms: u64, ep: EndpointId, payload: Value) -> JobId {
    reg.submit(Mono::from_ms(ms), Submit::new("a", ep, payload))
        .unwrap()
        .job
}

fn endpoint(reg: &mut Registry<Value>, owner: &str, c: Capabilities) -> EndpointId {
    let mut spec = EndpointSpec::new(owner, "test");
    spec.hello = Hello::Declared(c);
    spec.quiet_ms = 100;
    reg.open_endpoint(Mono::from_ms(0), spec)
}

#[test]
fn late_done_after_acknowledged_cancel_is_evidence_not_completion() {
    let mut reg = Registry::default();
    let ep = endpoint(&mut reg, "app", caps(false, true));
    let job = submit(&mut reg, 0, ep, json!(1));
    assert_eq!(
        reg.cancel(Mono::from_ms(5), job, "user").unwrap(),
        CancelStatus::Requested { ack_expected: true }
    );
    reg.on_message(Mono::from_ms(6), ep, &json!({"id": 1, "type": "cancelled"}))
        .unwrap();
    reg.on_message(
        Mono::from_ms(7),
        ep,
        &json!({"id": 1, "type": "done", "value": 42}),
    )
    .unwrap();
    let j = reg.job(job).unwrap();
    assert_eq!(j.state, JobState::Finished(OutcomeKind::Cancelled));
    let names: Vec<_> = j.journal().iter().map(|e| e.kind.name()).collect();
    assert_eq!(
        names,
        [
            "submitted",
            "started",
            "cancel_requested",
            "cancel_acknowledged",
            "outcome",
            "late_evidence"
        ]
    );
    // One note, for the one outcome.
    assert_eq!(reg.read_mailbox(&OwnerId::new("a")).len(), 1);
}

#[test]
fn forget_removes_only_finished_jobs_nothing_refers_to() {
    let mut reg = Registry::default();
    let ep = endpoint(&mut reg, "app", caps(false, false));
    let a = reg
        .submit(Mono::from_ms(0), Submit::new("g", ep, json!(1)))
        .unwrap()
        .job;
    assert!(!reg.forget(a), "a running job stays");
    reg.on_message(
        Mono::from_ms(1),
        ep,
        &json!({"id": 1, "type": "done", "value": 1}),
    )
    .unwrap();
    // Observed: kept until the subscription ends.
    let sub = reg.observe(a, Some(1), 8).unwrap();
    assert!(!reg.forget(a));
    assert!(reg.unsubscribe(sub));
    assert!(reg.forget(a));
    assert!(reg.job(a).is_none());
    assert_eq!(reg.jobs_of(&OwnerId::new("g")).count(), 0);
    assert!(!reg.forget(a), "already gone");
    // A reuse key keeps its job: a resubmission must find it.
    let mut req = Submit::new("g", ep, json!(2));
    req.reuse_key = Some("k".into());
    let b = reg.submit(Mono::from_ms(2), req.clone()).unwrap().job;
    reg.on_message(
        Mono::from_ms(3),
        ep,
        &json!({"id": 2, "type": "done", "value": 2}),
    )
    .unwrap();
    assert!(!reg.forget(b));
    assert_eq!(reg.submit(Mono::from_ms(4), req).unwrap().job, b);
    assert!(!reg.forget(JobId(99)));
}

#[test]
fn closing_a_large_owner_in_slices_gives_every_job_its_outcome_and_releases_the_records() {
    let mut reg = Registry::default();
    // Another owner's endpoint, one run at a time: the closed owner's last two jobs are still
    // running and queued when it closes.
    let mut spec = EndpointSpec::new("host", "test");
    spec.hello = Hello::Declared(caps(false, true));
    spec.max_concurrent = Some(1);
    let ep = reg.open_endpoint(Mono::from_ms(0), spec);
    let other = reg
        .submit(Mono::from_ms(0), Submit::new("other", ep, json!(0)))
        .unwrap()
        .job;
    reg.on_message(
        Mono::from_ms(0),
        ep,
        &json!({"id": 1, "type": "done", "value": 0}),
    )
    .unwrap();
    const N: u64 = 1000;
    let mut ids = Vec::new();
    for i in 0..N {
        ids.push(
            reg.submit(Mono::from_ms(1), Submit::new("big", ep, json!(i)))
                .unwrap()
                .job,
        );
        if i < N - 2 {
            let msg = json!({"id": i + 2, "type": "done", "value": i});
            reg.on_message(Mono::from_ms(1), ep, &msg).unwrap();
        }
    }
    let (running, queued) = (ids[N as usize - 2], ids[N as usize - 1]);
    assert_eq!(reg.job(running).unwrap().state, JobState::Running);
    assert_eq!(reg.retained_jobs(), N as usize + 1);
    reg.drain_outputs().for_each(drop);

    let c = reg.begin_close_owner(Mono::from_ms(2), &OwnerId::new("big"));
    // Every job and the N - 2 unread notes are handed over in slices.
    assert_eq!(c.pending, 2 * N as usize - 2);
    assert!(c.report.jobs.is_empty() && c.report.unread_notes.is_empty());
    // Both unfinished jobs have their outcome now, and the running one was asked to stop.
    let finished: Vec<_> = reg
        .drain_outputs()
        .filter_map(|o| match o {
            Output::JobFinished { job, outcome } => Some((job, outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(
        finished,
        [
            (queued, OutcomeKind::Cancelled),
            (running, OutcomeKind::Lost)
        ]
    );
    // None of the owner's jobs can be found any more; the other owner's can.
    assert!(ids.iter().all(|id| reg.job(*id).is_none()));
    assert_eq!(reg.jobs().count(), 1);
    assert_eq!(
        reg.cancel(Mono::from_ms(2), ids[0], "x")
            .unwrap_err()
            .code(),
        "UNKNOWN_JOB"
    );
    assert!(
        reg.wait(Mono::from_ms(2), ids[0], None).is_err()
            && reg.observe(ids[0], Some(1), 4).is_err()
    );
    assert!(!reg.forget(ids[0]));
    // A late reply for a released run is a reply for a disposed run.
    reg.on_message(
        Mono::from_ms(3),
        ep,
        &json!({"id": N, "type": "done", "value": 1}),
    )
    .unwrap();
    let last = reg.endpoint(ep).unwrap().events().last().unwrap();
    assert!(
        matches!(last.kind, EndpointEventKind::DisposedRun { job, .. } if job == Some(running))
    );
    // The owner's name is free at once: a new job of "big" is its own.
    let fresh = reg
        .submit(Mono::from_ms(3), Submit::new("big", ep, json!(1)))
        .unwrap()
        .job;
    assert_eq!(reg.jobs_of(&OwnerId::new("big")).count(), 1);

    let mut lines = Vec::new();
    let mut notes = Vec::new();
    let mut slices = 0;
    loop {
        let before = reg.retained_jobs();
        let slice = reg.close_owner_step(c.close, 64);
        if slice.is_empty() {
            break;
        }
        slices += 1;
        assert!(slice.len() <= 64);
        assert_eq!(
            reg.retained_jobs(),
            before - slice.jobs.len(),
            "records shrink by the slice"
        );
        lines.extend(slice.jobs);
        notes.extend(slice.unread_notes);
        assert_eq!(
            reg.close_pending(c.close),
            c.pending - lines.len() - notes.len()
        );
    }
    assert_eq!(slices, (2 * N - 2).div_ceil(64));
    assert_eq!(
        notes.len(),
        N as usize - 2,
        "every unread note is handed back"
    );
    assert!(
        notes.iter().zip(&ids).all(|(n, id)| n.job == *id),
        "oldest first"
    );
    assert_eq!(
        lines.iter().map(|l| l.job).collect::<Vec<_>>(),
        ids,
        "id order"
    );
    let outcome = |id: JobId| lines.iter().find(|l| l.job == id).unwrap();
    assert_eq!(
        (outcome(running).was.as_str(), outcome(running).outcome),
        ("running", OutcomeKind::Lost)
    );
    assert_eq!(
        (outcome(queued).was.as_str(), outcome(queued).outcome),
        ("queued", OutcomeKind::Cancelled)
    );
    assert!(
        lines[..N as usize - 2]
            .iter()
            .all(|l| l.was == "succeeded" && l.outcome == OutcomeKind::Succeeded)
    );
    // What is left: the other owner's job and the fresh one.
    assert_eq!(reg.retained_jobs(), 2);
    assert!(reg.job(other).is_some() && reg.job(fresh).is_some());
    assert_eq!(reg.close_pending(c.close), 0);
}

#[test]
fn slow_observer_is_told_exactly_what_it_missed() {
    let mut reg = Registry::default();
    let ep = endpoint(&mut reg, "app", caps(false, false));
    let job = reg
        .submit(Mono::from_ms(0), Submit::new("a", ep, json!(null)))
        .unwrap()
        .job;
    let sub = reg.observe(job, Some(1), 3).unwrap();
    for i in 0..10 {
        reg.on_message(
            Mono::from_ms(i),
            ep,
            &json!({"id": 1, "type": "progress", "value": i}),
        )
        .unwrap();
    }
    let d = reg.take_deliveries(sub).unwrap();
    // submitted, started, progress 0 queued; progress 1..9 = seq 4..12 missed.
    assert_eq!(d.len(), 4);
    assert_eq!(
        d[3],
        Delivery::Missed {
            job,
            from: 4,
            to: 12
        }
    );
    assert_eq!(
        reg.job(job).unwrap().journal().len(),
        12,
        "the journal loses nothing"
    );
    reg.on_message(
        Mono::from_ms(20),
        ep,
        &json!({"id": 1, "type": "done", "value": 1}),
    )
    .unwrap();
    let d = reg.take_deliveries(sub).unwrap();
    assert!(matches!(&d[0], Delivery::Event(e) if e.seq == 13));
}

#[test]
fn wait_timeout_and_cancel_leave_the_job_running() {
    let mut reg = Registry::default();
    let ep = endpoint(&mut reg, "app", caps(false, false));
    let job = reg
        .submit(Mono::from_ms(0), Submit::new("a", ep, json!(null)))
        .unwrap()
        .job;
    let w1 = reg.wait(Mono::from_ms(0), job, Some(50)).unwrap();
    let w2 = reg.wait(Mono::from_ms(0), job, None).unwrap();
    reg.handle_timeout(Mono::from_ms(50));
    reg.cancel_wait(w2).unwrap();
    assert_eq!(reg.cancel_wait(w2), Err(JobsError::UnknownWait(w2)));
    let outs: Vec<_> = reg.drain_outputs().collect();
    assert!(outs.contains(&Output::WaitSettled {
        wait: w1,
        job,
        end: WaitEnd::TimedOut
    }));
    assert!(outs.contains(&Output::WaitSettled {
        wait: w2,
        job,
        end: WaitEnd::Cancelled
    }));
    assert_eq!(reg.job(job).unwrap().state, JobState::Running);
}

// ----- property test: random interleavings ------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Submit { owner: u8, ep: u8 },
    Cancel { job: u8 },
    Reply { ep: u8, wire: u8, kind: u8 },
    Malformed { ep: u8, shape: u8 },
    Closed { ep: u8 },
    CloseOwner { owner: u8 },
    Advance { ms: u16 },
    Wait { job: u8, timeout: Option<u16> },
    Input { job: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3, 0u8..3).prop_map(|(owner, ep)| Op::Submit { owner, ep }),
        2 => (0u8..16).prop_map(|job| Op::Cancel { job }),
        5 => (0u8..3, 0u8..10, 0u8..7).prop_map(|(ep, wire, kind)| Op::Reply { ep, wire, kind }),
        1 => (0u8..3, 0u8..5).prop_map(|(ep, shape)| Op::Malformed { ep, shape }),
        1 => (0u8..3).prop_map(|ep| Op::Closed { ep }),
        1 => (0u8..3).prop_map(|owner| Op::CloseOwner { owner }),
        2 => (0u16..300).prop_map(|ms| Op::Advance { ms }),
        1 => (0u8..16, proptest::option::of(0u16..200)).prop_map(|(job, timeout)| Op::Wait { job, timeout }),
        1 => (0u8..16).prop_map(|job| Op::Input { job }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::test_cases(400)))]
    #[test]
    fn interleavings_keep_the_registry_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        let mut reg: Registry<Value> = Registry::default();
        let owners = ["a", "b", "c"];
        let mut now = 0u64;
        // Endpoint 0 acknowledges cancels and takes input, 1 does neither, 2 awaits a hello.
        let mut eps = vec![
            endpoint(&mut reg, "a", caps(true, true)),
            endpoint(&mut reg, "app", caps(false, false)),
        ];
        let mut spec = EndpointSpec::new("b", "late hello");
        spec.hello = Hello::Await { timeout_ms: 40 };
        spec.max_concurrent = Some(2);
        eps.push(reg.open_endpoint(Mono::from_ms(0), spec));
        let mut submitted: Vec<JobId> = Vec::new();
        let mut token = 0u64;
        // token -> (endpoint, wire id) of the reply that carried it
        let mut sent: HashMap<u64, (EndpointId, u64)> = HashMap::new();
        let mut finished_outputs: HashMap<JobId, usize> = HashMap::new();
        let mut disposed: Vec<JobId> = Vec::new();
        for op in ops {
            now += 1;
            while let Some(d) = reg.poll_timeout().filter(|d| *d <= Mono::from_ms(now)) {
                reg.handle_timeout(d);
            }
            match op {
                Op::Submit { owner, ep } => {
                    if let Ok(s) = reg.submit(Mono::from_ms(now), Submit::new(owners[owner as usize], eps[ep as usize], json!(token))) {
                        submitted.push(s.job);
                    }
                }
                Op::Cancel { job } => {
                    if let Some(&j) = submitted.get(job as usize) {
                        let r = reg.cancel(Mono::from_ms(now), j, "prop");
                        prop_assert_eq!(r.is_err(), disposed.contains(&j));
                    }
                }
                Op::Reply { ep, wire, kind } => {
                    token += 1;
                    let e = eps[ep as usize];
                    let id = wire as u64 + 1;
                    sent.insert(token, (e, id));
                    let msg = match kind {
                        0 => json!({"id": id, "type": "progress", "value": token}),
                        1 => json!({"id": id, "type": "partial", "value": token}),
                        2 => json!({"id": id, "type": "done", "value": token}),
                        3 => json!({"id": id, "type": "error", "message": format!("{token}")}),
                        4 => json!({"id": id, "type": "cancelled"}),
                        5 => json!({"type": "hello", "capabilities": {"cancelAck": true}}),
                        _ => json!({"id": id, "type": "input_applied", "inputId": "input-1"}),
                    };
                    reg.on_message(Mono::from_ms(now), e, &msg).unwrap();
                }
                Op::Malformed { ep, shape } => {
                    let msg = match shape {
                        0 => json!("nonsense"),
                        1 => json!({"type": "done"}),
                        2 => json!({"id": "1", "type": "done"}),
                        3 => json!({"id": 1, "type": "warp"}),
                        _ => json!({"id": 1, "type": "error", "message": 3}),
                    };
                    let before: Vec<_> = reg.jobs().map(|j| (j.id, j.state)).collect();
                    reg.on_message(Mono::from_ms(now), eps[ep as usize], &msg).unwrap();
                    let after: Vec<_> = reg.jobs().map(|j| (j.id, j.state)).collect();
                    prop_assert_eq!(before, after, "a malformed message changes no job state");
                }
                Op::Closed { ep } => reg.on_endpoint_closed(Mono::from_ms(now), eps[ep as usize], "crash").unwrap(),
                Op::CloseOwner { owner } => {
                    let o = OwnerId::new(owners[owner as usize]);
                    let report = reg.close_owner(Mono::from_ms(now), &o);
                    for cj in report.jobs {
                        disposed.push(cj.job);
                        prop_assert!(reg.job(cj.job).is_none());
                    }
                }
                Op::Advance { ms } => {
                    now += ms as u64;
                    while let Some(d) = reg.poll_timeout().filter(|d| *d <= Mono::from_ms(now)) {
                        reg.handle_timeout(d);
                    }
                }
                Op::Wait { job, timeout } => {
                    if let Some(&j) = submitted.get(job as usize) {
                        let _ = reg.wait(Mono::from_ms(now), j, timeout.map(u64::from));
                    }
                }
                Op::Input { job } => {
                    if let Some(&j) = submitted.get(job as usize) {
                        let _ = reg.send_input(Mono::from_ms(now), j, None, json!(1));
                    }
                }
            }
            for out in reg.drain_outputs() {
                if let Output::JobFinished { job, .. } = out {
                    *finished_outputs.entry(job).or_default() += 1;
                }
            }
        }
        for (job, n) in &finished_outputs {
            prop_assert_eq!(*n, 1, "{} finished more than once", job);
        }
        for j in reg.jobs() {
            let mut finished = 0;
            let mut saw_started = false;
            for (i, e) in j.journal().iter().enumerate() {
                prop_assert_eq!(e.job, j.id, "event attributed to another job");
                prop_assert_eq!(e.seq, i as u64 + 1, "journal sequence is strict");
                if i > 0 {
                    prop_assert!(e.at >= j.journal()[i - 1].at);
                }
                if finished > 0 {
                    prop_assert!(matches!(e.kind, EventKind::LateEvidence { .. }), "only late evidence after the outcome");
                }
                match &e.kind {
                    EventKind::Started { .. } => saw_started = true,
                    EventKind::Finished { outcome } => {
                        finished += 1;
                        if let Outcome::Cancelled { evidence } = outcome {
                            let prev = &j.journal()[i - 1].kind;
                            match evidence {
                                CancelEvidence::NeverStarted => prop_assert!(!saw_started, "never started"),
                                CancelEvidence::Acknowledged => prop_assert!(matches!(prev, EventKind::CancelAcknowledged), "ack precedes"),
                                CancelEvidence::Quiet { .. } => {
                                    prop_assert!(matches!(prev, EventKind::NoAcknowledgement { .. }), "no-ack precedes");
                                    prop_assert!(j.cancel_requested_at.is_some());
                                }
                            }
                        }
                    }
                    _ => {}
                }
                let token = match &e.kind {
                    EventKind::Progress { value } | EventKind::Partial { value } => value.as_u64(),
                    EventKind::Finished { outcome: Outcome::Succeeded { value } } => value.as_u64(),
                    EventKind::LateEvidence {
                        reply: Reply::Progress { value, .. } | Reply::Partial { value, .. } | Reply::Done { value, .. },
                    } => value.as_u64(),
                    _ => None,
                };
                if let Some(t) = token {
                    prop_assert_eq!(sent.get(&t), Some(&(j.endpoint, j.wire_id.unwrap())), "reply adopted by the wrong job");
                }
            }
            prop_assert_eq!(finished, usize::from(j.is_finished()));
            prop_assert_eq!(j.is_finished(), matches!(j.state, JobState::Finished(_)));
        }
    }
}

#[test]
fn a_journal_window_keeps_milestones_and_the_latest_events_in_bounded_memory() {
    let mut reg = Registry::default();
    reg.set_journal_window(Some(8));
    let ep = endpoint(&mut reg, "app", caps(false, false));
    let job = reg
        .submit(Mono::from_ms(0), Submit::new("a", ep, json!("p")))
        .unwrap()
        .job;
    let sub = reg.observe(job, None, 100_000).unwrap();
    for i in 0..10_000u64 {
        reg.on_message(
            Mono::from_ms(i),
            ep,
            &json!({"id": 1, "type": "progress", "value": i}),
        )
        .unwrap();
        // Protocol errors and unknown runs flood the endpoint log too.
        reg.on_message(
            Mono::from_ms(i),
            ep,
            &json!({"id": 99, "type": "progress", "value": i}),
        )
        .unwrap();
        assert!(reg.job(job).unwrap().journal().len() <= 2 * 8 + 2);
        assert!(reg.endpoint(ep).unwrap().events().len() <= 2 * 8 + 2);
    }
    reg.cancel(Mono::from_ms(20_000), job, "stop").unwrap();
    for i in 0..100u64 {
        reg.on_message(
            Mono::from_ms(20_001),
            ep,
            &json!({"id": 1, "type": "progress", "value": i}),
        )
        .unwrap();
    }
    reg.handle_timeout(Mono::from_ms(30_000));
    for _ in 0..100 {
        reg.on_message(
            Mono::from_ms(30_001),
            ep,
            &json!({"id": 1, "type": "done", "value": 1}),
        )
        .unwrap();
    }
    let j = reg.job(job).unwrap();
    // Every milestone is kept, in order, with the latest other events.
    let milestones: Vec<_> = j
        .journal()
        .iter()
        .filter(|e| e.kind.is_milestone())
        .map(|e| e.kind.name())
        .collect();
    assert_eq!(
        milestones,
        [
            "submitted",
            "started",
            "cancel_requested",
            "no_acknowledgement",
            "outcome"
        ]
    );
    assert_eq!(j.payload(), &json!("p"));
    assert_eq!(j.outcome().unwrap().kind(), OutcomeKind::Cancelled);
    assert!(j.journal().len() <= 2 * 8 + 5);
    let recorded = 2 + 10_000 + 1 + 100 + 2 + 100;
    assert_eq!(j.events_recorded(), recorded);
    assert_eq!(j.dropped_events() + j.journal().len() as u64, recorded);
    assert!(j.journal().windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(j.journal().last().unwrap().kind.name(), "late_evidence");
    assert_eq!(j.to_json()["events"], recorded);
    // The observer got every event recorded after it subscribed.
    let got = reg.take_deliveries(sub).unwrap();
    assert_eq!(got.len() as u64, recorded - 2);
    assert!(got.iter().all(|d| matches!(d, Delivery::Event(_))));
    // A replay over dropped events is told exactly which it missed.
    let replay = reg.observe(job, Some(1), 100_000).unwrap();
    let got = reg.take_deliveries(replay).unwrap();
    let mut seen = 0u64;
    for d in &got {
        match d {
            Delivery::Event(e) => seen += e.seq - seen,
            Delivery::Missed { from, to, .. } => {
                assert_eq!(*from, seen + 1);
                seen = *to;
            }
        }
    }
    assert_eq!(seen, recorded);
    let e = reg.endpoint(ep).unwrap();
    assert_eq!(e.protocol_errors(), 0);
    assert_eq!(
        e.events()[0].kind,
        EndpointEventKind::Opened {
            label: "test".into()
        }
    );
    assert!(e.dropped_events() > 9_000);
}

#[test]
fn closed_endpoints_of_closed_owners_are_forgotten_beyond_a_bounded_window() {
    let mut reg: Registry<Value> = Registry::default();
    // A closed endpoint of an owner still open is kept (its owner may read it).
    let kept = endpoint(&mut reg, "keeper", caps(false, false));
    reg.on_endpoint_closed(Mono::from_ms(0), kept, "crash")
        .unwrap();
    // Another owner's finished job on a session's endpoint keeps that endpoint known.
    let mut shared = None;
    let mut other_job = None;
    for i in 0..1_000u64 {
        let owner = format!("remote:s-{i}");
        let ep = endpoint(&mut reg, &owner, caps(false, true));
        let job = reg
            .submit(Mono::from_ms(i), Submit::new(owner.as_str(), ep, json!(i)))
            .unwrap()
            .job;
        if i == 0 {
            shared = Some(ep);
            other_job = Some(
                reg.submit(Mono::from_ms(i), Submit::new("keeper", ep, json!(i)))
                    .unwrap()
                    .job,
            );
        }
        if i % 2 == 0 {
            reg.terminate_endpoint(Mono::from_ms(i), ep, "session ended")
                .unwrap();
        } else {
            reg.on_endpoint_closed(Mono::from_ms(i), ep, "worker died")
                .unwrap();
        }
        let report = reg.close_owner(Mono::from_ms(i), &OwnerId::new(owner.as_str()));
        assert_eq!(report.jobs.len(), 1);
        assert!(reg.job(job).is_none());
        assert!(
            reg.endpoints().count() <= RETIRED_ENDPOINTS + 2,
            "cycle {i}: {} endpoint records",
            reg.endpoints().count()
        );
        // The newest retired endpoint can still be read.
        assert!(matches!(
            reg.endpoint(ep).unwrap().state,
            EndpointState::Closed { .. }
        ));
    }
    assert_eq!(reg.endpoints().count(), RETIRED_ENDPOINTS + 2);
    assert!(reg.endpoint(kept).is_some(), "its owner is open");
    let (shared, other_job) = (shared.unwrap(), other_job.unwrap());
    assert!(reg.endpoint(shared).is_some(), "a job record refers to it");
    assert!(
        reg.endpoint(EndpointId(3)).is_none(),
        "an old retired one is forgotten"
    );
    // Once that job is forgotten, the shared endpoint retires too (and the oldest goes).
    assert!(reg.job(other_job).unwrap().is_finished());
    assert!(reg.forget(other_job));
    assert_eq!(reg.endpoints().count(), RETIRED_ENDPOINTS + 1);
    assert!(reg.endpoint(shared).is_some(), "the newest retired one");
    // A forgotten endpoint is unknown.
    assert!(matches!(
        reg.submit(
            Mono::from_ms(2_000),
            Submit::new("x", EndpointId(3), json!(0))
        ),
        Err(JobsError::UnknownEndpoint(_))
    ));
}

#[test]
fn watched_journals_are_reported_once_per_change_in_id_order() {
    let mut reg: Registry<Value> = Registry::new(RegistryConfig::default());
    let ep = endpoint(&mut reg, "o", caps(false, true));
    let ids: Vec<JobId> = (0..4)
        .map(|i| {
            reg.submit(Mono::from_ms(0), Submit::new("o", ep, json!(i)))
                .unwrap()
                .job
        })
        .collect();
    let _ = reg.drain_outputs().count();
    // Unwatched jobs are never reported, whatever they record.
    assert!(reg.take_changed_jobs().is_empty());
    // Watching reports the job at the next take (its history is unread).
    reg.watch_journal(ids[2]).unwrap();
    reg.watch_journal(ids[0]).unwrap();
    assert_eq!(reg.take_changed_jobs(), vec![ids[0], ids[2]]);
    assert!(!reg.has_changed_jobs());
    // Several events of one job: one report; an unwatched job's events: none.
    let wire = |reg: &Registry<Value>, j: JobId| reg.job(j).unwrap().wire_id.unwrap();
    for v in [0.1, 0.2, 0.3] {
        let w = wire(&reg, ids[2]);
        reg.on_message(
            Mono::from_ms(1),
            ep,
            &json!({"id": w, "type": "progress", "value": v}),
        )
        .unwrap();
    }
    let w = wire(&reg, ids[1]);
    reg.on_message(
        Mono::from_ms(1),
        ep,
        &json!({"id": w, "type": "progress", "value": 0.5}),
    )
    .unwrap();
    assert_eq!(reg.take_changed_jobs(), vec![ids[2]]);
    // Unwatched: no longer reported.
    assert!(reg.unwatch_journal(ids[2]));
    reg.cancel(Mono::from_ms(2), ids[2], "stop").unwrap();
    assert!(reg.take_changed_jobs().is_empty());
    // A watched job that is released is reported once more (it is gone).
    let w = wire(&reg, ids[0]);
    reg.on_message(
        Mono::from_ms(3),
        ep,
        &json!({"id": w, "type": "done", "value": 1}),
    )
    .unwrap();
    assert_eq!(reg.take_changed_jobs(), vec![ids[0]]);
    assert!(reg.forget(ids[0]));
    assert_eq!(reg.take_changed_jobs(), vec![ids[0]]);
    assert!(reg.job(ids[0]).is_none());
    assert!(reg.watch_journal(ids[0]).is_err());
    // Watching changes no output: the same outputs as an unwatched registry would give.
    let _ = reg.drain_outputs().count();
    reg.watch_journal(ids[3]).unwrap();
    assert_eq!(reg.drain_outputs().count(), 0);
}

/// An endpoint that runs many jobs, each released once done, beside one long-lived run,
/// keeps a bounded wire map (it kept one entry per run ever made): the long-lived run's
/// replies still reach its job, a late reply of a recent released run names its job, and
/// one of a run released long ago is a disposed run whose job is no longer known.
#[test]
fn an_endpoint_keeps_the_jobs_of_recent_and_held_runs_only() {
    let mut reg = Registry::default();
    let ep = endpoint(&mut reg, "app", caps(false, true));
    let long = submit(&mut reg, 0, ep, json!(0));
    let n = 5_000u64;
    let mut last = long;
    for i in 0..n {
        let job = reg
            .submit(Mono::from_ms(1), Submit::new("a", ep, json!(i)))
            .unwrap()
            .job;
        let wire = i + 2;
        reg.on_message(
            Mono::from_ms(1),
            ep,
            &json!({"id": wire, "type": "done", "value": i}),
        )
        .unwrap();
        assert!(reg.forget(job));
        last = job;
    }
    assert!(reg.job(last).is_none());
    let kept = reg.endpoints[&ep].wire.kept();
    assert!(kept <= 1024 + 1, "{kept} wire entries kept after {n} runs");
    // The long-lived run (wire id 1) is still attributed.
    reg.on_message(
        Mono::from_ms(2),
        ep,
        &json!({"id": 1, "type": "progress", "value": 0.5}),
    )
    .unwrap();
    let names: Vec<_> = reg
        .job(long)
        .unwrap()
        .journal()
        .iter()
        .map(|e| e.kind.name())
        .collect();
    assert_eq!(names.last(), Some(&"progress"));
    // A recent released run: named; an old one: disposed, job unknown; never issued: unknown.
    for (wire, want) in [
        (
            n + 1,
            json!({"type": "disposed_run", "id": n + 1, "job": last.0, "reply": "done"}),
        ),
        (
            10,
            json!({"type": "disposed_run", "id": 10, "job": null, "reply": "done"}),
        ),
        (
            n + 50,
            json!({"type": "unknown_run", "id": n + 50, "reply": "done"}),
        ),
    ] {
        reg.on_message(
            Mono::from_ms(3),
            ep,
            &json!({"id": wire, "type": "done", "value": 1}),
        )
        .unwrap();
        let ev = reg.endpoint(ep).unwrap().events().last().unwrap().to_json();
        for (k, v) in want.as_object().unwrap() {
            assert_eq!(&ev[k], v, "{k} of {ev}");
        }
    }
}

/// An endpoint whose transport offers batch frames and whose worker announced them.
fn batching_endpoint(reg: &mut Registry<Value>) -> EndpointId {
    let mut spec = EndpointSpec::new("app", "batching");
    spec.hello = Hello::Declared(Capabilities {
        batch: true,
        ..caps(true, true)
    });
    spec.batch_sends = true;
    reg.open_endpoint(Mono::from_ms(0), spec)
}

/// The number of requests in each frame the outputs put on the wire, in order.
fn frames(reg: &mut Registry<Value>) -> Vec<usize> {
    reg.drain_outputs()
        .filter_map(|o| match o {
            Output::Send { .. } => Some(1),
            Output::SendBatch { requests, .. } => {
                assert!(requests.len() >= 2, "a batch frame carries two or more");
                Some(requests.len())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_turn_of_many_runs_goes_out_in_frames_of_at_most_the_bound() {
    let mut reg = Registry::default();
    let ep = batching_endpoint(&mut reg);
    let now = Mono::from_ms(1);
    let n = 2 * wire::BATCH_MAX + 88;
    for i in 0..n {
        reg.submit(now, Submit::new("a", ep, json!(i))).unwrap();
    }
    // The first goes out at once; the bound flushes without waiting for the turn's end.
    assert_eq!(
        frames(&mut reg),
        [1, wire::BATCH_MAX, wire::BATCH_MAX],
        "held until the turn ends: the rest"
    );
    assert!(reg.holds_sends());
    reg.flush_sends();
    assert!(!reg.holds_sends());
    assert_eq!(frames(&mut reg), [87]);
    // Every run went out once, in wire id order.
    let (sent, received) = reg.endpoint(ep).unwrap().frames();
    assert_eq!((sent, received), (4, 0));
    // After the flush the wire is idle: a lone run goes out at once, a second one is held.
    reg.submit(now, Submit::new("a", ep, json!("x"))).unwrap();
    reg.submit(now, Submit::new("a", ep, json!("y"))).unwrap();
    assert_eq!(frames(&mut reg), [1]);
    // An input is never held: it takes the held run with it.
    let job = JobId(1);
    reg.send_input(now, job, Some("i1".into()), json!(5))
        .unwrap();
    let outs: Vec<Value> = reg.drain_outputs().map(|o| o.to_json()).collect();
    assert_eq!(
        outs,
        [
            json!({"output": "send", "endpoint": ep.0, "message": {"type": "batch", "messages": [
                {"id": n as u64 + 2, "type": "run", "payload": "y"},
                {"id": 1, "type": "input", "inputId": "i1", "value": 5},
            ]}})
        ]
    );
    assert!(!reg.holds_sends());
}

#[test]
fn a_batch_of_replies_records_what_the_same_replies_alone_record() {
    let replies = |ids: std::ops::Range<u64>| -> Vec<Value> {
        ids.flat_map(|id| {
            [
                json!({"id": id, "type": "progress", "value": id}),
                json!({"id": id, "type": if id % 3 == 0 { "error" } else { "done" },
                       "value": id * 2, "message": "m"}),
            ]
        })
        .collect()
    };
    let run = |batched: bool| {
        let mut reg: Registry<Value> = Registry::default();
        let ep = batching_endpoint(&mut reg);
        for i in 0..40 {
            reg.submit(Mono::from_ms(1), Submit::new("a", ep, json!(i)))
                .unwrap();
        }
        reg.flush_sends();
        let _ = reg.drain_outputs().count();
        let all = replies(1..41);
        if batched {
            for chunk in all.chunks(wire::BATCH_MAX) {
                let frame = json!({"type": "batch", "messages": chunk});
                reg.on_message(Mono::from_ms(2), ep, &frame).unwrap();
            }
        } else {
            for m in &all {
                reg.on_message(Mono::from_ms(2), ep, m).unwrap();
            }
        }
        let outputs: Vec<Value> = reg.drain_outputs().map(|o| o.to_json()).collect();
        let journals: Vec<Value> = reg
            .jobs()
            .map(|j| json!(j.journal().iter().map(|e| e.to_json()).collect::<Vec<_>>()))
            .collect();
        (outputs, journals)
    };
    assert_eq!(run(true), run(false));
}

/// A run the host could not post (the JS host's `postMessage` refusing its payload) is
/// withdrawn as if never submitted: no record, slot, reuse key, event or output is left, and
/// the ids are issued again; on a plain and on a batching endpoint.
#[test]
fn withdrawing_an_unposted_run_leaves_nothing_behind() {
    for batching in [false, true] {
        let mut reg: Registry<Value> = Registry::default();
        let ep = if batching {
            batching_endpoint(&mut reg)
        } else {
            let mut spec = EndpointSpec::new("app", "one");
            spec.hello = Hello::Declared(caps(true, true));
            spec.max_concurrent = Some(1);
            reg.open_endpoint(Mono::from_ms(0), spec)
        };
        let owner = OwnerId::new("a");
        let mut req = Submit::new("a", ep, json!({"n": 1}));
        req.reuse_key = Some("k".into());
        assert!(reg.sends_at_once(ep));
        let job = reg.submit(Mono::from_ms(1), req).unwrap().job;
        let sent = frames(&mut reg);
        assert_eq!(sent, [1], "the run left at once");
        let before = reg.endpoint(ep).unwrap().frames();
        reg.withdraw_unposted(Mono::from_ms(1), job).unwrap();
        reg.flush_sends();
        assert_eq!(reg.jobs().count(), 0);
        assert_eq!(reg.retained_jobs(), 0);
        assert_eq!(reg.events_recorded(), 0);
        assert!(!reg.holds_reuse_key(&owner, "k"));
        assert_eq!(reg.peek_mailbox(&owner).count(), 0);
        assert_eq!(reg.drain_outputs().count(), 0, "no outcome, note or send");
        assert_eq!(reg.endpoint(ep).unwrap().frames().0, before.0 - 1);
        assert!(reg.sends_at_once(ep), "the slot and the wire are free");
        // Withdrawn twice: it is gone.
        assert!(matches!(
            reg.withdraw_unposted(Mono::from_ms(1), job),
            Err(JobsError::UnknownJob(_))
        ));
        // The next submit gets the same ids and runs at once (wire id 1).
        let mut req = Submit::new("a", ep, json!({"n": 2}));
        req.reuse_key = Some("k".into());
        let next = reg.submit(Mono::from_ms(2), req).unwrap();
        assert_eq!((next.job, next.reused), (job, false));
        let run: Vec<Value> = reg.drain_outputs().map(|o| o.to_json()).collect();
        assert_eq!(run.len(), 1);
        assert_eq!(run[0]["message"]["id"], json!(1), "{run:?}");
        assert_eq!(reg.job(job).unwrap().state, JobState::Running);
    }
}

/// Withdrawing an unposted run whose send is still pending drops the send; a queued run, one
/// the worker reported on, one waited for, or one that is not its endpoint's last run is
/// refused, changing nothing.
#[test]
fn withdrawing_is_refused_once_the_run_is_not_just_sent() {
    let mut reg: Registry<Value> = Registry::default();
    let mut spec = EndpointSpec::new("app", "one");
    spec.hello = Hello::Declared(caps(true, true));
    spec.max_concurrent = Some(1);
    let ep = reg.open_endpoint(Mono::from_ms(0), spec);
    let a = submit(&mut reg, 1, ep, json!(1));
    // Not drained yet: the withdrawal takes the send back.
    reg.withdraw_unposted(Mono::from_ms(1), a).unwrap();
    assert_eq!(reg.drain_outputs().count(), 0);
    let a = submit(&mut reg, 1, ep, json!(1));
    let b = submit(&mut reg, 1, ep, json!(2));
    let _ = reg.drain_outputs().count();
    let refused = |reg: &mut Registry<Value>, job| {
        let recorded = reg.events_recorded();
        let err = reg.withdraw_unposted(Mono::from_ms(2), job).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
        assert_eq!(reg.events_recorded(), recorded);
        assert_eq!(reg.drain_outputs().count(), 0);
    };
    refused(&mut reg, b); // queued: never sent
    reg.on_message(
        Mono::from_ms(2),
        ep,
        &json!({"id": 1, "type": "progress", "value": 0}),
    )
    .unwrap();
    refused(&mut reg, a); // the worker reported on it
    assert_eq!(reg.job(a).unwrap().state, JobState::Running);
    reg.on_message(
        Mono::from_ms(3),
        ep,
        &json!({"id": 1, "type": "done", "value": 1}),
    )
    .unwrap();
    let _ = reg.drain_outputs().count();
    // b started when a finished; a wait on it refuses the withdrawal.
    assert_eq!(reg.job(b).unwrap().state, JobState::Running);
    let w = reg.wait(Mono::from_ms(3), b, None).unwrap();
    refused(&mut reg, b);
    reg.cancel_wait(w).unwrap();
    let _ = reg.drain_outputs().count();
    // A later run on another endpoint does not matter; one on the same endpoint does.
    let mut spec = EndpointSpec::new("app", "two");
    spec.hello = Hello::Declared(caps(true, true));
    let ep2 = reg.open_endpoint(Mono::from_ms(0), spec);
    let c = submit(&mut reg, 4, ep2, json!(3));
    let d = submit(&mut reg, 4, ep2, json!(4));
    let _ = reg.drain_outputs().count();
    refused(&mut reg, c);
    reg.withdraw_unposted(Mono::from_ms(4), d).unwrap();
    // b's run went out turns ago (a's outcome started it): not to be taken back, though
    // nothing is recorded for it since and its endpoint sent nothing after it.
    refused(&mut reg, b);
    let left: Vec<JobId> = reg.jobs().map(|j| j.id).collect();
    assert_eq!(left, [a, b, c]);
}

/// Withdrawals repeated behind a finished job (its record held) issue the same job and wire
/// ids again each time, and the next real run gets them.
#[test]
fn withdrawals_behind_a_held_record_reissue_the_ids() {
    let mut reg: Registry<Value> = Registry::default();
    let ep = batching_endpoint(&mut reg);
    let a = submit(&mut reg, 1, ep, json!(1));
    let _ = reg.drain_outputs().count();
    reg.on_message(
        Mono::from_ms(2),
        ep,
        &json!({"id": 1, "type": "done", "value": 1}),
    )
    .unwrap();
    reg.flush_sends();
    let _ = reg.drain_outputs().count();
    let recorded = reg.events_recorded();
    for _ in 0..3 {
        let b = submit(&mut reg, 3, ep, json!(2));
        assert_eq!(b, JobId(a.0 + 1));
        let _ = reg.drain_outputs().count();
        reg.withdraw_unposted(Mono::from_ms(3), b).unwrap();
        reg.flush_sends();
        assert_eq!(reg.events_recorded(), recorded);
    }
    let c = submit(&mut reg, 4, ep, json!(3));
    let sent: Vec<Value> = reg.drain_outputs().map(|o| o.to_json()).collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["message"]["id"], json!(2), "{sent:?}");
    let ids: Vec<JobId> = reg.jobs().map(|j| j.id).collect();
    assert_eq!(ids, [a, c]);
    assert_eq!(c, JobId(a.0 + 1));
}

/// The names of a job's journal events.
fn journal_names(reg: &Registry<Value>, job: JobId) -> Vec<&'static str> {
    reg.job(job)
        .unwrap()
        .journal()
        .iter()
        .map(|e| e.kind.name())
        .collect()
}

/// An input whose post the host could not make is withdrawn as if never sent: no event (in
/// the journal or an observer's queue), no pending send or notification, the endpoint's
/// frame count and idle wire restored, its input id issued again; the run goes on.
#[test]
fn withdrawing_an_unposted_input_leaves_the_job_as_before() {
    for batching in [false, true] {
        let mut reg: Registry<Value> = Registry::default();
        let ep = if batching {
            batching_endpoint(&mut reg)
        } else {
            endpoint(&mut reg, "app", caps(true, true))
        };
        let job = submit(&mut reg, 1, ep, json!(1));
        // Heard from: the wire is idle again, a run would leave at once.
        reg.on_message(
            Mono::from_ms(2),
            ep,
            &json!({"id": 1, "type": "progress", "value": 0}),
        )
        .unwrap();
        let _ = reg.drain_outputs().count();
        let sub = reg.observe(job, Some(1), 16).unwrap();
        assert_eq!(reg.take_deliveries(sub).unwrap().len(), 3);
        let _ = reg.drain_outputs().count();
        let (journal, recorded) = (journal_names(&reg, job), reg.events_recorded());
        let frames_before = reg.endpoint(ep).unwrap().frames();
        assert!(reg.sends_at_once(ep));
        assert!(reg.input_withdrawable(job));
        let id = reg
            .send_input(Mono::from_ms(3), job, None, json!({"v": 1}))
            .unwrap();
        assert_eq!(id, "input-1");
        // The send comes before the observer's notification (the host posts it first).
        let kinds: Vec<Value> = reg
            .outputs
            .iter()
            .map(|o| o.to_json()["output"].clone())
            .collect();
        assert_eq!(kinds, [json!("send"), json!("observed")], "{kinds:?}");
        reg.withdraw_unposted_input(job, &id).unwrap();
        assert_eq!(reg.drain_outputs().count(), 0, "no send, no notification");
        assert!(reg.take_deliveries(sub).unwrap().is_empty());
        assert_eq!(journal_names(&reg, job), journal);
        assert_eq!(reg.events_recorded(), recorded);
        assert_eq!(reg.endpoint(ep).unwrap().frames(), frames_before);
        assert!(reg.sends_at_once(ep), "the wire is idle again");
        assert_eq!(reg.job(job).unwrap().state, JobState::Running);
        // Withdrawn twice: refused.
        let err = reg.withdraw_unposted_input(job, &id).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        // The same id is issued again. Drained (as a host posting it does), it can still be
        // withdrawn in the call.
        let again = reg
            .send_input(Mono::from_ms(4), job, None, json!({"v": 2}))
            .unwrap();
        assert_eq!(again, "input-1");
        let sent: Vec<Value> = reg.drain_outputs().map(|o| o.to_json()).collect();
        assert_eq!(sent[0]["message"]["inputId"], json!("input-1"), "{sent:?}");
        assert_eq!(sent[0]["message"]["value"], json!({"v": 2}));
        reg.withdraw_unposted_input(job, "input-1").unwrap();
        assert_eq!(journal_names(&reg, job), journal);
        // Sent once more and posted: delivered once.
        let third = reg
            .send_input(Mono::from_ms(5), job, None, json!({"v": 3}))
            .unwrap();
        assert_eq!(third, "input-1");
        assert_eq!(frames(&mut reg), [1]);
        let delivered = reg.take_deliveries(sub).unwrap();
        assert_eq!(delivered.len(), 1);
        let mut expected = journal.clone();
        expected.push("input_delivered");
        assert_eq!(journal_names(&reg, job), expected);
        // Full observer queues: a missed range shrinks back, or goes.
        let longer = reg.observe(job, Some(3), 1).unwrap();
        let one = reg.observe(job, Some(4), 1).unwrap();
        let _ = reg.drain_outputs().count();
        let explicit = reg
            .send_input(Mono::from_ms(6), job, Some("x".into()), json!(3))
            .unwrap();
        reg.withdraw_unposted_input(job, &explicit).unwrap();
        let left = reg.take_deliveries(longer).unwrap();
        assert!(
            matches!(left[..], [Delivery::Event(ref e), Delivery::Missed { from: 4, to: 4, .. }] if e.seq == 3),
            "{left:?}"
        );
        let left = reg.take_deliveries(one).unwrap();
        assert!(
            matches!(left[..], [Delivery::Event(ref e)] if e.seq == 4),
            "{left:?}"
        );
        assert_eq!(reg.drain_outputs().count(), 0);
        assert_eq!(journal_names(&reg, job), expected);
        let fourth = reg
            .send_input(Mono::from_ms(7), job, None, json!(4))
            .unwrap();
        assert_eq!(
            fourth, "input-2",
            "the withdrawn explicit input's number is issued again"
        );
    }
}

/// An input is not withdrawn once anything happened after it, nor one that left with held
/// runs, was read by a journal watch or an observer, or went to another job; a run held for
/// a batch, a watch or a full journal window make `input_withdrawable` say so beforehand.
#[test]
fn withdrawing_an_input_is_refused_once_it_is_not_just_sent() {
    let mut reg: Registry<Value> = Registry::default();
    let ep = batching_endpoint(&mut reg);
    let a = submit(&mut reg, 1, ep, json!(1));
    let _ = reg.drain_outputs().count();
    let refused = |reg: &mut Registry<Value>, job, id: &str| {
        let recorded = reg.events_recorded();
        let frames = reg.endpoint(ep).unwrap().frames();
        let err = reg.withdraw_unposted_input(job, id).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
        assert_eq!(reg.events_recorded(), recorded);
        assert_eq!(reg.endpoint(ep).unwrap().frames(), frames);
    };
    // A second run is held for the batch: an input would leave with it.
    let b = submit(&mut reg, 1, ep, json!(2));
    assert!(!reg.input_withdrawable(a));
    let i = reg.send_input(Mono::from_ms(1), a, None, json!(0)).unwrap();
    assert_eq!(
        frames(&mut reg),
        [2],
        "the held run and the input, one batch frame"
    );
    refused(&mut reg, a, &i);
    // Something recorded for the job since.
    assert!(reg.input_withdrawable(a));
    let i = reg.send_input(Mono::from_ms(2), a, None, json!(0)).unwrap();
    reg.on_message(
        Mono::from_ms(2),
        ep,
        &json!({"id": 1, "type": "progress", "value": 0}),
    )
    .unwrap();
    refused(&mut reg, a, &i);
    // Something sent on its endpoint since (input to another job there).
    let i = reg.send_input(Mono::from_ms(3), a, None, json!(0)).unwrap();
    let other = reg.send_input(Mono::from_ms(3), b, None, json!(0)).unwrap();
    refused(&mut reg, a, &i);
    // Not the last input, or not its job's: refused; the last one is withdrawn.
    refused(&mut reg, a, &other);
    reg.withdraw_unposted_input(b, &other).unwrap();
    // An observer took its event.
    let sub = reg.observe(a, Some(1), 64).unwrap();
    let _ = reg.take_deliveries(sub).unwrap();
    let i = reg.send_input(Mono::from_ms(4), a, None, json!(0)).unwrap();
    let _ = reg.take_deliveries(sub).unwrap();
    refused(&mut reg, a, &i);
    assert!(reg.unsubscribe(sub));
    // A watched journal is read at once.
    reg.watch_journal(a).unwrap();
    assert!(!reg.input_withdrawable(a));
    let i = reg.send_input(Mono::from_ms(5), a, None, json!(0)).unwrap();
    refused(&mut reg, a, &i);
    assert!(reg.unwatch_journal(a));
    // An unknown job; one that takes no input is refused by the registry, nothing to withdraw.
    assert!(matches!(
        reg.withdraw_unposted_input(JobId(99), "x"),
        Err(JobsError::UnknownJob(_))
    ));
    assert!(reg.input_withdrawable(JobId(99)));
    // A journal window the event would trim.
    let mut reg: Registry<Value> = Registry::default();
    reg.set_journal_window(Some(1));
    let ep = endpoint(&mut reg, "app", caps(true, true));
    let j = submit(&mut reg, 1, ep, json!(1));
    assert!(reg.input_withdrawable(j));
    let i = reg.send_input(Mono::from_ms(1), j, None, json!(0)).unwrap();
    reg.withdraw_unposted_input(j, &i).unwrap();
    reg.send_input(Mono::from_ms(1), j, None, json!(0)).unwrap();
    reg.send_input(Mono::from_ms(1), j, None, json!(0)).unwrap();
    assert!(!reg.input_withdrawable(j), "a third would trim the window");
    let i = reg.send_input(Mono::from_ms(1), j, None, json!(0)).unwrap();
    let err = reg.withdraw_unposted_input(j, &i).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
}

/// An input posted in a call long gone is not withdrawn in a later turn, though nothing was
/// recorded for its job nor sent on its endpoint since.
#[test]
fn an_input_posted_in_an_earlier_turn_is_not_withdrawn() {
    let mut reg: Registry<Value> = Registry::default();
    let ep = endpoint(&mut reg, "app", caps(true, true));
    let job = submit(&mut reg, 1, ep, json!(1));
    let _ = reg.drain_outputs().count();
    let id = reg
        .send_input(Mono::from_ms(2), job, None, json!(1))
        .unwrap();
    // Posted fine: the host's turn ends.
    assert_eq!(frames(&mut reg), [1]);
    // Later turns: the host waits for the job, reads it, subscribes from `next`... nothing
    // recorded for the job, nothing sent on its endpoint.
    let _ = reg.wait(Mono::from_ms(50), job, None).unwrap();
    let _ = reg.drain_outputs().count();
    // A withdrawal now (a host bug, or a second runtime call path) is refused.
    let events = journal_names(&reg, job);
    let err = reg.withdraw_unposted_input(job, &id).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
    assert_eq!(journal_names(&reg, job), events);
    assert_eq!(reg.endpoint(ep).unwrap().frames_sent, 2);
}

/// The same for a submit's run: posted in an earlier turn, it is not withdrawn later though
/// the job is as it was (nothing from the worker, no wait or subscription left).
#[test]
fn a_run_posted_in_an_earlier_turn_is_not_withdrawn() {
    let mut reg: Registry<Value> = Registry::default();
    let ep = endpoint(&mut reg, "app", caps(true, true));
    let job = submit(&mut reg, 1, ep, json!(1));
    assert_eq!(frames(&mut reg), [1]);
    let w = reg.wait(Mono::from_ms(2), job, None).unwrap();
    reg.cancel_wait(w).unwrap();
    let _ = reg.drain_outputs().count();
    let err = reg.withdraw_unposted(Mono::from_ms(3), job).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
    assert_eq!(reg.job(job).unwrap().state, JobState::Running);
}

/// While the host carries out a call's outputs, a call its transport makes as it posts the
/// request (a submit on another endpoint, drained later) does not stop the withdrawal; a
/// call made before the request was drained does, and so does a drain after a later call.
#[test]
fn a_withdrawal_is_valid_only_while_the_call_s_outputs_are_carried_out() {
    let mut reg: Registry<Value> = Registry::default();
    let a = endpoint(&mut reg, "app", caps(true, true));
    let b = endpoint(&mut reg, "app", caps(true, true));
    let job = submit(&mut reg, 1, a, json!(1));
    let _ = reg.drain_outputs().count();
    // The input's post runs a's transport, which submits on b, then throws.
    let id = reg
        .send_input(Mono::from_ms(2), job, None, json!(1))
        .unwrap();
    let _ = reg.drain_outputs().count();
    let on_b = submit(&mut reg, 2, b, json!(2));
    reg.withdraw_unposted_input(job, &id).unwrap();
    assert_eq!(journal_names(&reg, job), ["submitted", "started"]);
    assert_eq!(reg.job(on_b).unwrap().state, JobState::Running);
    let _ = reg.drain_outputs().count();
    // The same for a run: its post submits on b, then throws.
    let run = submit(&mut reg, 2, a, json!(3));
    let _ = reg.drain_outputs().count();
    let on_b = submit(&mut reg, 2, b, json!(4));
    reg.withdraw_unposted(Mono::from_ms(2), run).unwrap();
    assert!(reg.job(run).is_none());
    // The nested submit's run goes out in the next drain: withdrawable while carried out,
    // not once the host drained again after another call.
    let _ = reg.drain_outputs().count();
    let _ = reg.read_mailbox(&OwnerId::new("a"));
    let _ = reg.drain_outputs().count();
    let err = reg.withdraw_unposted(Mono::from_ms(2), on_b).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
    // A call before the send was drained: refused.
    let id = reg
        .send_input(Mono::from_ms(3), job, None, json!(2))
        .unwrap();
    let _ = reg.read_mailbox(&OwnerId::new("a"));
    let _ = reg.drain_outputs().count();
    let err = reg.withdraw_unposted_input(job, &id).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
    // A drain that hands out nothing new after it keeps it (an app drains twice).
    let id = reg
        .send_input(Mono::from_ms(4), job, None, json!(3))
        .unwrap();
    let _ = reg.drain_outputs().count();
    let _ = reg.drain_outputs().count();
    reg.withdraw_unposted_input(job, &id).unwrap();
}

/// What a mailbox holds per retained job's note is small: at most 48 bytes on a 64-bit target
/// (a whole `Note`, with its origin and three strings, is 184), and the notes read back are
/// whole: correlation, owner, origin and summary, for a success and for a failure.
#[test]
fn a_mailbox_holds_a_small_entry_per_note_and_reads_back_whole_notes() {
    fn entry_size<T>(_: &VecDeque<T>) -> usize {
        std::mem::size_of::<T>()
    }
    let size = entry_size(&OwnerState::default().mailbox);
    if cfg!(target_pointer_width = "64") {
        assert!(size <= 48, "a mailbox entry is {size} bytes");
    }
    let mut reg: Registry<Value> = Registry::default();
    let ep = endpoint(&mut reg, "a", caps(false, false));
    let ok = submit(&mut reg, 1, ep, json!(1));
    let mut req = Submit::new("a", ep, json!(2));
    req.origin.turn = Some("t1".into());
    let bad = reg.submit(Mono::from_ms(1), req).unwrap().job;
    let wire = |reg: &Registry<Value>, j| reg.job(j).unwrap().wire_id.unwrap();
    let (w1, w2) = (wire(&reg, ok), wire(&reg, bad));
    reg.on_message(
        Mono::from_ms(2),
        ep,
        &json!({"id": w1, "type": "done", "value": 1}),
    )
    .unwrap();
    reg.on_message(
        Mono::from_ms(3),
        ep,
        &json!({"id": w2, "type": "error", "message": "no", "code": "E1"}),
    )
    .unwrap();
    let owner = OwnerId::new("a");
    assert_eq!(reg.mailbox_len(&owner), 2);
    let peeked: Vec<Note> = reg.peek_mailbox(&owner).collect();
    let notes = reg.read_mailbox(&owner);
    assert_eq!(peeked, notes);
    assert_eq!(reg.mailbox_len(&owner), 0);
    let want = vec![
        Note {
            correlation: format!("{ok}:succeeded"),
            job: ok,
            owner: owner.clone(),
            origin: Origin::default(),
            outcome: OutcomeKind::Succeeded,
            summary: format!("{ok} succeeded"),
            at: Mono::from_ms(2),
        },
        Note {
            correlation: format!("{bad}:failed"),
            job: bad,
            owner: owner.clone(),
            origin: Origin {
                turn: Some("t1".into()),
                ..Origin::default()
            },
            outcome: OutcomeKind::Failed,
            summary: format!("{bad} failed [E1]: no"),
            at: Mono::from_ms(3),
        },
    ];
    assert_eq!(notes, want);
}
