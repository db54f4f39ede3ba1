//! One surface's run as a sans-IO machine: read a frame, ask the judge (or a text service for
//! an input node), record the assessment, commit it under an idempotency key, repeatedly,
//! until the run stops. The machine decides everything — the next request, the events and
//! their names, the retry rule, the stop points, the report — and the host only carries
//! requests and answers and keeps one timer.
//!
//! # Call order
//!
//! ```text
//! let mut run = Run::new(config);
//! loop {
//!     while let Some(out) = run.poll_output() {     // drain first, always
//!         match out {
//!             Output::Http(req)     => send it; its answer goes to handle_http(now, req.id, ..)
//!             Output::Judge(j)      => ask the decision adapter; handle_judgment(now, ..)
//!             Output::Generate(j)   => ask the text service; handle_text(now, ..)
//!             Output::Event(e)      => show / log it (it is also in the report)
//!             Output::Done(report)  => return report  // nothing else follows
//!         }
//!     }
//!     wait for the first of: the outstanding answer, the deadline of poll_timeout()
//!     (then handle_timeout(now)), a stop request (then handle_stop(now), once)
//! }
//! ```
//!
//! At most one request (HTTP, judge or text) is outstanding at a time; `now` is any monotonic
//! clock in milliseconds, the same for every call of one run. Answers to a request the machine
//! no longer waits for (after a stop, or for an old id) are ignored.
//!
//! # Stopping
//!
//! [`Run::handle_stop`] asks the run to stop at its next safe point. Reading a frame and waiting
//! for the judge or the text service are abandoned at once (they change nothing on the server:
//! the run ends, and the host drops what it was waiting for). Recording an assessment and
//! committing it are writes: the stop is honoured only once no write is in flight. A commit
//! whose intent is logged is carried through to an answer (retried after a transport failure
//! with the same key and body: [`COMMIT_ATTEMPTS`] attempts, [`RETRY_BACKOFF_MS`] × attempt
//! apart), and the run stops after it. So a stopped run ends with an `interrupted` event and no
//! commit in flight: everything it committed has a receipt among its events.

use std::collections::VecDeque;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::http::{self, CLIENT_BUDGET_EXHAUSTED, HttpAnswer, Problem};
use super::{AfterJudgment, EvidencePack, Judged, Step};
use crate::Mono;
use crate::frames::engine::path_segment;
use crate::frames::types::*;
use crate::frames::validate;

/// Attempts of one commit after transport failures (same key, same body).
pub const COMMIT_ATTEMPTS: u32 = 4;
/// The wait before commit attempt `n + 1` is `RETRY_BACKOFF_MS * n`.
pub const RETRY_BACKOFF_MS: u64 = 200;
/// Steps of a run unless asked otherwise.
pub const DEFAULT_STEPS: u32 = 8;
/// Evidence kinds an adapter reads unless it says otherwise.
pub const DEFAULT_MODALITIES: &[&str] = &["text", "json"];

/// How one surface is driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// Steps (each reads one frame) before the run gives up with `step_budget_reached`.
    pub steps: u32,
    /// Record judgments as speculative assessments and stop (never commits).
    pub speculative: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            steps: DEFAULT_STEPS,
            speculative: false,
        }
    }
}

/// Everything a run needs besides its inputs.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The surface to drive.
    pub surface: String,
    /// Steps and mode.
    pub options: RunOptions,
    /// Evidence kinds the decision adapter reads.
    pub judge_modalities: Vec<String>,
    /// Evidence kinds the text service reads.
    pub text_modalities: Vec<String>,
    /// Fresh random bytes from the host: the assessment ids and idempotency keys of the run
    /// are derived from them (`a-…`, `k-…`, 32 hex digits each).
    pub id_seed: [u8; 32],
}

impl RunConfig {
    /// A run of `surface` with default options and modalities.
    pub fn new(surface: impl Into<String>, id_seed: [u8; 32]) -> RunConfig {
        let defaults = || DEFAULT_MODALITIES.iter().map(|m| m.to_string()).collect();
        RunConfig {
            surface: surface.into(),
            options: RunOptions::default(),
            judge_modalities: defaults(),
            text_modalities: defaults(),
            id_seed,
        }
    }
}

/// The text-service requests a controller may make over its whole life, across surfaces and
/// runs (shared by its runs: pass it to [`Run::handle_http`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceBudget {
    used: u32,
    max: u32,
}

impl ServiceBudget {
    /// A budget of `max` requests.
    pub fn new(max: u32) -> ServiceBudget {
        ServiceBudget { used: 0, max }
    }

    /// Requests asked for so far (refused ones included).
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Takes one request, or refuses with `CLIENT_BUDGET_EXHAUSTED` (409).
    fn take(&mut self) -> Result<(), Problem> {
        let before = self.used;
        self.used = self.used.saturating_add(1);
        if before >= self.max {
            return Err(Problem::new(
                409,
                CLIENT_BUDGET_EXHAUSTED,
                "this controller reached its service-call limit",
            ));
        }
        Ok(())
    }
}

/// Where a stopped run stopped (the `at` of its `interrupted` event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopPoint {
    /// Before a step began (nothing of the run is in flight).
    BetweenSteps,
    /// While the frame was being read.
    ReadingFrame,
    /// While the decision adapter judged.
    Judging,
    /// While the text service wrote.
    Fulfilling,
    /// After the assessment was recorded, before a commit intent was logged.
    BeforeCommit,
    /// Before the run began: another run of the surface was still going (see the tools).
    WaitingForSurface,
}

impl StopPoint {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StopPoint::BetweenSteps => "between_steps",
            StopPoint::ReadingFrame => "reading_frame",
            StopPoint::Judging => "judging",
            StopPoint::Fulfilling => "fulfilling",
            StopPoint::BeforeCommit => "before_commit",
            StopPoint::WaitingForSurface => "waiting_for_surface",
        }
    }
}

/// What happened in a run (the `event` of its JSON form).
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind {
    /// `frame`: a frame was read.
    Frame {
        frame_id: String,
        read_set: Value,
        decisions: Vec<String>,
    },
    /// `service_text`: the text service wrote `chars` characters.
    ServiceText {
        service_id: Option<String>,
        chars: usize,
    },
    /// `assessed`: the assessment was recorded.
    Assessed { assessment: Box<AssessmentRequest> },
    /// `commit_intent`: logged before the commit request; a retry uses this key and body.
    CommitIntent {
        idempotency_key: String,
        request: CommitRequest,
    },
    /// `commit_retry`: the commit got no usable answer; it is sent again.
    CommitRetry {
        idempotency_key: String,
        detail: String,
    },
    /// `committed`: the server's receipt.
    Committed { receipt: Value },
    /// Stop `quiescent`: no automatic decision is left (success).
    Quiescent,
    /// Stop `input_required`: an input without fulfilment waits for a human.
    InputRequired { decision_id: String },
    /// Stop `human_review_required`: the chosen effect needs an authenticated human.
    HumanReviewRequired {
        frame_id: String,
        assessment_id: String,
    },
    /// Stop `abstained`.
    Abstained { assessment_id: String },
    /// Stop `speculative_recorded`.
    SpeculativeRecorded { assessment_id: String },
    /// Stop `stopped` with a problem.
    Stopped { problem: Problem },
    /// Stop `stopped` with a reason (speculative mode does not buy generation).
    Declined { reason: String },
    /// Stop `step_budget_reached`.
    StepBudgetReached,
    /// Stop `interrupted`: stopped at a safe point, nothing in flight.
    Interrupted {
        at: StopPoint,
        assessment_id: Option<String>,
    },
}

/// One event of a run on `surface`.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The surface driven.
    pub surface: String,
    /// What happened.
    pub kind: EventKind,
}

impl Event {
    /// The `event` name.
    pub fn name(&self) -> &'static str {
        match &self.kind {
            EventKind::Frame { .. } => "frame",
            EventKind::ServiceText { .. } => "service_text",
            EventKind::Assessed { .. } => "assessed",
            EventKind::CommitIntent { .. } => "commit_intent",
            EventKind::CommitRetry { .. } => "commit_retry",
            EventKind::Committed { .. } => "committed",
            EventKind::Quiescent => "quiescent",
            EventKind::InputRequired { .. } => "input_required",
            EventKind::HumanReviewRequired { .. } => "human_review_required",
            EventKind::Abstained { .. } => "abstained",
            EventKind::SpeculativeRecorded { .. } => "speculative_recorded",
            EventKind::Stopped { .. } | EventKind::Declined { .. } => "stopped",
            EventKind::StepBudgetReached => "step_budget_reached",
            EventKind::Interrupted { .. } => "interrupted",
        }
    }

    /// Whether the event ends a run.
    pub fn is_stop(&self) -> bool {
        !matches!(
            self.kind,
            EventKind::Frame { .. }
                | EventKind::ServiceText { .. }
                | EventKind::Assessed { .. }
                | EventKind::CommitIntent { .. }
                | EventKind::CommitRetry { .. }
                | EventKind::Committed { .. }
        )
    }

    /// `{"surface", "event", ...fields}`.
    pub fn to_json(&self) -> Value {
        let mut v = match &self.kind {
            EventKind::Frame {
                frame_id,
                read_set,
                decisions,
            } => json!({"frame_id": frame_id, "read_set": read_set, "decisions": decisions}),
            EventKind::ServiceText { service_id, chars } => {
                json!({"service_id": service_id, "chars": chars})
            }
            EventKind::Assessed { assessment } => json!({"assessment": assessment}),
            EventKind::CommitIntent {
                idempotency_key,
                request,
            } => json!({"idempotency_key": idempotency_key, "request": request}),
            EventKind::CommitRetry {
                idempotency_key,
                detail,
            } => json!({"idempotency_key": idempotency_key, "detail": detail}),
            EventKind::Committed { receipt } => json!({"receipt": receipt}),
            EventKind::Quiescent | EventKind::StepBudgetReached => json!({}),
            EventKind::InputRequired { decision_id } => json!({"decision_id": decision_id}),
            EventKind::HumanReviewRequired {
                frame_id,
                assessment_id,
            } => json!({"frame_id": frame_id, "assessment_id": assessment_id}),
            EventKind::Abstained { assessment_id }
            | EventKind::SpeculativeRecorded { assessment_id } => {
                json!({"assessment_id": assessment_id})
            }
            EventKind::Stopped { problem } => json!({"problem": problem.to_json()}),
            EventKind::Declined { reason } => json!({"reason": reason}),
            EventKind::Interrupted {
                at: StopPoint::WaitingForSurface,
                ..
            } => json!({"at": StopPoint::WaitingForSurface.as_str(),
                        "detail": "another run of this surface was still going; this one never began"}),
            EventKind::Interrupted { at, assessment_id } => match assessment_id {
                None => json!({"at": at.as_str(),
                               "detail": "stopped at a safe point: no commit is in flight"}),
                Some(a) => json!({"at": at.as_str(), "assessment_id": a,
                                  "detail": "stopped at a safe point: the assessment is recorded, not committed"}),
            },
        };
        v["surface"] = json!(self.surface);
        v["event"] = json!(self.name());
        v
    }
}

/// Everything one surface's run did.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// The surface driven.
    pub surface: String,
    /// Every event, in order (the last one is the stop).
    pub events: Vec<Event>,
    /// Steps begun (each reads one frame).
    pub steps: u32,
}

impl RunReport {
    /// The report of a run that never began: a stop came while another run of the surface
    /// was still going.
    pub fn never_began(surface: &str) -> RunReport {
        RunReport {
            surface: surface.to_owned(),
            events: vec![Event {
                surface: surface.to_owned(),
                kind: EventKind::Interrupted {
                    at: StopPoint::WaitingForSurface,
                    assessment_id: None,
                },
            }],
            steps: 0,
        }
    }

    /// The report of a run that failed before its first step (e.g. discovery).
    pub fn failed(surface: &str, problem: Problem) -> RunReport {
        RunReport {
            surface: surface.to_owned(),
            events: vec![Event {
                surface: surface.to_owned(),
                kind: EventKind::Stopped { problem },
            }],
            steps: 0,
        }
    }

    /// Why the run ended (its last event).
    pub fn stop(&self) -> &Event {
        self.events.last().expect("a report ends with its stop")
    }

    /// The receipts of the commits the run made, in order.
    pub fn receipts(&self) -> Vec<&Value> {
        self.events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Committed { receipt } => Some(receipt),
                _ => None,
            })
            .collect()
    }

    /// The commit intent whose outcome is unknown, if the run ended on one: its request got no
    /// usable answer (a transport failure, even after retries). It may or may not have been
    /// applied; retrying it with the same idempotency key and body is safe. A commit the
    /// server refused with a problem is not in doubt: it did nothing.
    pub fn commit_in_doubt(&self) -> Option<&Event> {
        match &self.stop().kind {
            EventKind::Stopped { problem } if problem.is_transport() => {}
            _ => return None,
        }
        let last = self
            .events
            .iter()
            .rposition(|e| matches!(e.kind, EventKind::CommitIntent { .. }))?;
        let answered = self.events[last..]
            .iter()
            .any(|e| matches!(e.kind, EventKind::Committed { .. }));
        (!answered).then(|| &self.events[last])
    }

    /// `{"surface_id", "ended", "steps", "commits": [receipt...], "commit_in_doubt", "stop",
    /// "events"}` (`commit_in_doubt` is the intent of [`RunReport::commit_in_doubt`] or null).
    pub fn to_json(&self) -> Value {
        let stop = self.stop();
        json!({
            "surface_id": self.surface,
            "ended": stop.name(),
            "steps": self.steps,
            "commits": self.receipts(),
            "commit_in_doubt": self.commit_in_doubt().map(Event::to_json),
            "stop": stop.to_json(),
            "events": self.events.iter().map(Event::to_json).collect::<Vec<_>>(),
        })
    }
}

/// The HTTP method of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `POST` with a JSON body.
    Post,
}

impl Method {
    /// `GET` / `POST`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// An HTTP request for the host to send (with its bearer token, `accept: application/json`
/// and, with a body, `content-type: application/json`; the link resolved by
/// [`http::BaseUrl::resolve`], the answer awaited at most [`http::REQUEST_TIMEOUT_MS`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    /// Names the answer ([`Run::handle_http`]).
    pub id: u64,
    /// The method.
    pub method: Method,
    /// A path on the server (`/dgp/...`).
    pub link: String,
    /// The JSON body (a retry carries the same bytes).
    pub body: Option<Vec<u8>>,
    /// Extra headers (`idempotency-key`).
    pub headers: Vec<(String, String)>,
    /// A write (recording, committing): never abandoned, a stop waits for its answer. A read
    /// may be abandoned once the run has stopped.
    pub write: bool,
}

/// A judgment or text to produce for one decision of a frame.
#[derive(Clone, Debug, PartialEq)]
pub struct JudgeRequest {
    /// The frame.
    pub frame: Frame,
    /// The decision of `frame` to judge or fulfil.
    pub decision_id: String,
    /// The evidence the adapter (or service) may see.
    pub evidence: EvidencePack,
}

impl JudgeRequest {
    /// The decision.
    pub fn decision(&self) -> &Decision {
        self.frame
            .decision(&self.decision_id)
            .expect("the request names a decision of its frame")
    }
}

/// What the host does next (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum Output {
    /// Send this request; answer with [`Run::handle_http`].
    Http(HttpRequest),
    /// Ask the decision adapter; answer with [`Run::handle_judgment`].
    Judge(Box<JudgeRequest>),
    /// Ask the text service; answer with [`Run::handle_text`].
    Generate(Box<JudgeRequest>),
    /// Something happened (also kept in the report).
    Event(Event),
    /// The run is over.
    Done(RunReport),
}

/// A judgment from a decision adapter: the result and the resolver to record.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgment {
    /// The result.
    pub result: AssessmentResult,
    /// Who judged.
    pub resolver: Resolver,
}

#[derive(Debug)]
enum State {
    Start,
    Reading {
        req: u64,
    },
    Judging {
        fulfil: bool,
        frame: Box<Frame>,
        decision_id: String,
    },
    Recording {
        req: u64,
        frame_id: String,
        judged: Box<Judged>,
    },
    Committing {
        req: u64,
        commit: Box<Commit>,
    },
    Backoff {
        until: Mono,
        commit: Box<Commit>,
    },
    Done,
}

#[derive(Debug)]
struct Commit {
    key: String,
    body: Vec<u8>,
    attempt: u32,
}

/// One surface's run (see the module documentation for the call order).
#[derive(Debug)]
pub struct Run {
    config: RunConfig,
    state: State,
    out: VecDeque<Output>,
    events: Vec<Event>,
    steps: u32,
    stop_asked: bool,
    next_req: u64,
    ids: u64,
}

impl Run {
    /// A run that begins on the first [`Run::poll_output`].
    pub fn new(config: RunConfig) -> Run {
        Run {
            config,
            state: State::Start,
            out: VecDeque::new(),
            events: Vec::new(),
            steps: 0,
            stop_asked: false,
            next_req: 0,
            ids: 0,
        }
    }

    /// The next thing to do, or `None` until an input arrives. Drain it after every input.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        if matches!(self.state, State::Start) {
            self.begin_step();
        }
        self.out.pop_front()
    }

    /// When [`Run::handle_timeout`] is due (a commit retry's backoff), if a timer is armed.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Mono> {
        match &self.state {
            State::Backoff { until, .. } => Some(*until),
            _ => None,
        }
    }

    /// Whether the run is over ([`Output::Done`] has been or is about to be polled).
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Whether a write (recording or committing) is in flight: a stop waits for it.
    pub fn write_in_flight(&self) -> bool {
        matches!(
            self.state,
            State::Recording { .. } | State::Committing { .. } | State::Backoff { .. }
        )
    }

    /// Asks the run to stop at its next safe point: at once while it reads or waits for a
    /// judgment or text, after the write otherwise.
    pub fn handle_stop(&mut self, _now: Mono) {
        self.stop_asked = true;
        let at = match &self.state {
            State::Reading { .. } => StopPoint::ReadingFrame,
            State::Judging { fulfil: false, .. } => StopPoint::Judging,
            State::Judging { fulfil: true, .. } => StopPoint::Fulfilling,
            _ => return,
        };
        self.interrupted(at, None);
    }

    /// The timer of [`Run::poll_timeout`] is due.
    pub fn handle_timeout(&mut self, now: Mono) {
        let State::Backoff { until, .. } = &self.state else {
            return;
        };
        if now < *until {
            return;
        }
        let State::Backoff { commit, .. } = std::mem::replace(&mut self.state, State::Done) else {
            unreachable!()
        };
        self.send_commit(commit);
    }

    /// The answer to request `id`. `budget` is the controller's text-service budget (a frame
    /// whose next decision needs the text service takes one request from it).
    pub fn handle_http(
        &mut self,
        now: Mono,
        id: u64,
        answer: HttpAnswer,
        budget: &mut ServiceBudget,
    ) {
        let waiting = match &self.state {
            State::Reading { req }
            | State::Recording { req, .. }
            | State::Committing { req, .. } => *req,
            _ => return,
        };
        if waiting != id {
            return;
        }
        match std::mem::replace(&mut self.state, State::Done) {
            State::Reading { .. } => self.on_frame(answer, budget),
            State::Recording {
                frame_id, judged, ..
            } => match http::answer_json(answer) {
                Ok(_) => self.on_recorded(frame_id, *judged),
                Err(p) => self.fail(p),
            },
            State::Committing { commit, .. } => self.on_commit_answer(now, commit, answer),
            _ => unreachable!("checked above"),
        }
    }

    /// The decision adapter's answer to [`Output::Judge`] (a failure stops the run with it).
    pub fn handle_judgment(&mut self, _now: Mono, judgment: Result<Judgment, Problem>) {
        let Some((frame, decision_id)) = self.take_judging(false) else {
            return;
        };
        match judgment {
            Ok(j) => self.record(&frame, &decision_id, j.result, j.resolver),
            Err(p) => self.fail(p),
        }
    }

    /// The text service's answer to [`Output::Generate`]: the text and the resolver to record.
    pub fn handle_text(&mut self, _now: Mono, text: Result<(String, Resolver), Problem>) {
        let Some((frame, decision_id)) = self.take_judging(true) else {
            return;
        };
        let (text, resolver) = match text {
            Ok(t) => t,
            Err(p) => return self.fail(p),
        };
        let d = frame.decision(&decision_id).expect("judged decision");
        let service_id = d.fulfillment.as_ref().map(|f| f.service_id.clone());
        self.emit(EventKind::ServiceText {
            service_id,
            chars: text.chars().count(),
        });
        match super::fulfilment_result(d, text) {
            Ok(result) => self.record(&frame, &decision_id, result, resolver),
            Err(e) => self.fail(e.into()),
        }
    }

    // ----- transitions -------------------------------------------------------------------

    fn take_judging(&mut self, want_fulfil: bool) -> Option<(Frame, String)> {
        if !matches!(&self.state, State::Judging { fulfil, .. } if *fulfil == want_fulfil) {
            return None;
        }
        match std::mem::replace(&mut self.state, State::Done) {
            State::Judging {
                frame, decision_id, ..
            } => Some((*frame, decision_id)),
            _ => unreachable!(),
        }
    }

    fn begin_step(&mut self) {
        if self.steps == self.config.options.steps {
            return self.finish(EventKind::StepBudgetReached);
        }
        if self.stop_asked {
            return self.interrupted(StopPoint::BetweenSteps, None);
        }
        self.steps += 1;
        let link = format!("/dgp/surfaces/{}/frame", path_segment(&self.config.surface));
        let req = self.send(Method::Get, link, None, vec![], false);
        self.state = State::Reading { req };
    }

    fn on_frame(&mut self, answer: HttpAnswer, budget: &mut ServiceBudget) {
        let frame = match http::answer_json(answer) {
            Ok(v) => v,
            Err(p) => return self.fail(p),
        };
        let frame: Frame = match serde_json::from_value(frame) {
            Ok(f) => f,
            Err(e) => {
                return self.fail(Problem::transport(format!(
                    "the frame does not match DGP 0.1: {e}"
                )));
            }
        };
        self.emit(EventKind::Frame {
            frame_id: frame.frame_id.clone(),
            read_set: serde_json::to_value(&frame.read_set).expect("records serialize"),
            decisions: frame.decisions.iter().map(|d| d.node_id.clone()).collect(),
        });
        let (fulfil, d) = match super::next_step(&frame, super::CLIENT_FEATURES) {
            Err(e) => return self.fail(e.into()),
            Ok(Step::Quiescent) => return self.finish(EventKind::Quiescent),
            Ok(Step::InputRequired(d)) => {
                let decision_id = d.decision_id.clone();
                return self.finish(EventKind::InputRequired { decision_id });
            }
            Ok(Step::Fulfil(d)) => (true, d),
            Ok(Step::Assess(d)) => (false, d),
        };
        if fulfil && self.config.options.speculative {
            return self.finish(EventKind::Declined {
                reason: "speculative mode assesses choices only; it does not buy generation".into(),
            });
        }
        let mods = if fulfil {
            &self.config.text_modalities
        } else {
            &self.config.judge_modalities
        };
        let mods: Vec<&str> = mods.iter().map(String::as_str).collect();
        let evidence = match super::evidence_for(&frame, d, &mods) {
            Ok(p) => p,
            Err(e) => return self.fail(e.into()),
        };
        let decision_id = d.decision_id.clone();
        if fulfil && let Err(p) = budget.take() {
            return self.fail(p);
        }
        let request = Box::new(JudgeRequest {
            frame: frame.clone(),
            decision_id: decision_id.clone(),
            evidence,
        });
        self.out.push_back(if fulfil {
            Output::Generate(request)
        } else {
            Output::Judge(request)
        });
        self.state = State::Judging {
            fulfil,
            frame: Box::new(frame),
            decision_id,
        };
    }

    fn record(
        &mut self,
        frame: &Frame,
        decision_id: &str,
        result: AssessmentResult,
        resolver: Resolver,
    ) {
        let mode = if self.config.options.speculative {
            Mode::Speculative
        } else {
            Mode::Live
        };
        let d = frame.decision(decision_id).expect("judged decision");
        let id = self.fresh_id("a");
        // Checked like the server checks it, and against the decision, before it is sent.
        let judged = match super::judge(frame, d, id, mode, resolver, result) {
            Ok(j) => j,
            Err(e) => return self.fail(e.into()),
        };
        let body = serde_json::to_vec(&judged.assessment).expect("records serialize");
        // Recording is not abandoned half way: its outcome would be unknown.
        let id = self.send(
            Method::Post,
            "/dgp/assessments".into(),
            Some(body),
            vec![],
            true,
        );
        self.state = State::Recording {
            req: id,
            frame_id: frame.frame_id.clone(),
            judged: Box::new(judged),
        };
    }

    fn on_recorded(&mut self, frame_id: String, judged: Judged) {
        let Judged {
            assessment,
            after,
            commit,
        } = judged;
        let assessment_id = assessment.assessment_id.clone();
        self.emit(EventKind::Assessed {
            assessment: Box::new(assessment),
        });
        let commit = match (after, commit) {
            (AfterJudgment::Commit, Some(c)) => c,
            (AfterJudgment::Speculative, _) => {
                return self.finish(EventKind::SpeculativeRecorded { assessment_id });
            }
            (AfterJudgment::HumanRequired, _) => {
                return self.finish(EventKind::HumanReviewRequired {
                    frame_id,
                    assessment_id,
                });
            }
            _ => return self.finish(EventKind::Abstained { assessment_id }),
        };
        if self.stop_asked {
            // Recorded, never committed: a commit needs this step's intent, which is not logged.
            return self.interrupted(StopPoint::BeforeCommit, Some(assessment_id));
        }
        let key = self.fresh_id("k");
        let body = serde_json::to_vec(&commit).expect("records serialize");
        // The intent is logged before the request: after an unknown outcome the same key and
        // body are retried, never a new key. From here on a stop waits for the answer.
        self.emit(EventKind::CommitIntent {
            idempotency_key: key.clone(),
            request: commit,
        });
        self.send_commit(Box::new(Commit {
            key,
            body,
            attempt: 0,
        }));
    }

    fn send_commit(&mut self, mut commit: Box<Commit>) {
        commit.attempt += 1;
        let headers = vec![("idempotency-key".to_owned(), commit.key.clone())];
        let req = self.send(
            Method::Post,
            "/dgp/commits".into(),
            Some(commit.body.clone()),
            headers,
            true,
        );
        self.state = State::Committing { req, commit };
    }

    fn on_commit_answer(&mut self, now: Mono, commit: Box<Commit>, answer: HttpAnswer) {
        match http::answer_json(answer) {
            Ok(receipt) => {
                self.emit(EventKind::Committed { receipt });
                self.begin_step();
            }
            Err(p) if p.is_transport() && commit.attempt < COMMIT_ATTEMPTS => {
                self.emit(EventKind::CommitRetry {
                    idempotency_key: commit.key.clone(),
                    detail: p.detail,
                });
                let until = now + RETRY_BACKOFF_MS * u64::from(commit.attempt);
                self.state = State::Backoff { until, commit };
            }
            Err(p) => self.fail(p),
        }
    }

    // ----- helpers -----------------------------------------------------------------------

    fn send(
        &mut self,
        method: Method,
        link: String,
        body: Option<Vec<u8>>,
        headers: Vec<(String, String)>,
        write: bool,
    ) -> u64 {
        self.next_req += 1;
        let id = self.next_req;
        self.out.push_back(Output::Http(HttpRequest {
            id,
            method,
            link,
            body,
            headers,
            write,
        }));
        id
    }

    fn fresh_id(&mut self, prefix: &str) -> String {
        self.ids += 1;
        let mut h = Sha256::new();
        h.update(self.config.id_seed);
        h.update(prefix.as_bytes());
        h.update(self.ids.to_le_bytes());
        format!("{prefix}-{}", validate::hex(&h.finalize()[..16]))
    }

    fn emit(&mut self, kind: EventKind) {
        let e = Event {
            surface: self.config.surface.clone(),
            kind,
        };
        self.events.push(e.clone());
        self.out.push_back(Output::Event(e));
    }

    fn fail(&mut self, problem: Problem) {
        self.finish(EventKind::Stopped { problem });
    }

    fn interrupted(&mut self, at: StopPoint, assessment_id: Option<String>) {
        self.finish(EventKind::Interrupted { at, assessment_id });
    }

    fn finish(&mut self, stop: EventKind) {
        self.emit(stop);
        self.state = State::Done;
        self.out.push_back(Output::Done(RunReport {
            surface: self.config.surface.clone(),
            events: std::mem::take(&mut self.events),
            steps: self.steps,
        }));
    }
}
