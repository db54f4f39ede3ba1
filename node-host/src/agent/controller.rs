//! The DGP controller as a library: connect to a server, list its surfaces, and drive one
//! surface step by step — read a frame, ask a decision adapter (or a text service for an input
//! node), record the assessment, commit it under an idempotency key — until it stops. Every
//! event goes to the caller (live, through a callback, and collected in the [`SurfaceRun`]);
//! `weft agent` prints them as JSON lines, the agent tools ([`super::tools`]) return them to a
//! model. The rules (which decision next, what evidence an adapter may see, when to stop) are
//! `weft_core::frames::controller`'s.
//!
//! # Stopping a run
//!
//! A [`StopSignal`] asks a run to stop at its next safe point. Reading a frame and waiting for
//! the decision adapter or the text service are abandoned at once (they change nothing on the
//! server); recording an assessment and committing it are never abandoned: once the commit
//! intent is logged, the commit is carried through to an answer (retried with the same key and
//! body after a transport failure), and the run stops after it. So a stopped run ends with an
//! `interrupted` event and no commit in flight: everything it committed has a receipt among its
//! events.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};
use tokio::sync::watch;
use weft_core::frames::FramesError;
use weft_core::frames::controller::{self, AfterJudgment, Step};
use weft_core::frames::types::*;

use super::adapters::{DecisionAdapter, TextService};
use super::client::{CallError, Client};

/// How one surface is driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// Steps (judgments) before the run gives up with `step_budget_reached`.
    pub steps: u32,
    /// Record judgments as speculative assessments and stop (never commits).
    pub speculative: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            steps: 8,
            speculative: false,
        }
    }
}

/// Asks a run to stop at its next safe point (see the module documentation). A signal whose
/// sender is dropped without asking never stops anything.
#[derive(Clone, Debug, Default)]
pub struct StopSignal(Option<watch::Receiver<bool>>);

impl StopSignal {
    /// A signal that never asks to stop (`weft agent`).
    pub fn never() -> StopSignal {
        StopSignal(None)
    }

    /// A signal raised when `rx` becomes `true` (e.g. an agent call's abort signal).
    pub fn new(rx: watch::Receiver<bool>) -> StopSignal {
        StopSignal(Some(rx))
    }

    /// Whether a stop was asked.
    pub fn is_set(&self) -> bool {
        self.0.as_ref().is_some_and(|rx| *rx.borrow())
    }

    /// Resolves once a stop is asked (never, if it never is).
    pub async fn raised(&mut self) {
        if let Some(rx) = &mut self.0
            && rx.wait_for(|s| *s).await.is_ok()
        {
            return;
        }
        std::future::pending::<()>().await
    }

    /// `fut`'s output, or `None` if a stop is asked first (then `fut` is dropped).
    async fn unless<T>(&mut self, fut: impl Future<Output = T>) -> Option<T> {
        if self.is_set() {
            return None;
        }
        tokio::select! {
            biased;
            _ = self.raised() => None,
            v = fut => Some(v),
        }
    }
}

/// Receives each event as it happens.
pub type OnEvent<'a> = &'a mut (dyn FnMut(&Value) + Send);

/// Why a step ended.
#[derive(Clone, Debug, PartialEq)]
pub enum StepEnd {
    /// A judgment was committed: the surface may offer another decision.
    Continue,
    /// The run is over; the value is the last event (its `event` says why).
    Stop(Value),
}

/// Everything one surface's run did.
#[derive(Clone, Debug, PartialEq)]
pub struct SurfaceRun {
    pub surface: String,
    /// Every event, in order (the last one is [`SurfaceRun::stop`]).
    pub events: Vec<Value>,
    /// Why the run ended: `quiescent`, `input_required`, `human_review_required`, `abstained`,
    /// `speculative_recorded`, `stopped` (with a `problem`), `step_budget_reached` or
    /// `interrupted`.
    pub stop: Value,
    /// Steps begun (each reads one frame).
    pub steps: u32,
}

impl SurfaceRun {
    /// The receipts of the commits the run made, in order.
    pub fn receipts(&self) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["event"] == "committed")
            .map(|e| &e["receipt"])
            .collect()
    }

    /// The commit intent whose outcome is unknown, if the run ended on one: its request got no
    /// usable answer (a transport failure, even after retries). It may or may not have been
    /// applied; retrying it with the same idempotency key and body is safe. A commit the
    /// server refused with a problem is not in doubt: it did nothing.
    pub fn commit_in_doubt(&self) -> Option<&Value> {
        if self.stop["event"] != "stopped" || self.stop["problem"]["code"] != "TRANSPORT_ERROR" {
            return None;
        }
        let last = self
            .events
            .iter()
            .rposition(|e| e["event"] == "commit_intent")?;
        let answered = self.events[last..]
            .iter()
            .any(|e| e["event"] == "committed");
        (!answered).then(|| &self.events[last])
    }

    /// `{"surface_id", "ended", "steps", "commits": [receipt...], "commit_in_doubt", "stop",
    /// "events"}` (`commit_in_doubt` is the intent of [`SurfaceRun::commit_in_doubt`] or null).
    pub fn to_json(&self) -> Value {
        json!({
            "surface_id": self.surface,
            "ended": self.stop["event"],
            "steps": self.steps,
            "commits": self.receipts(),
            "commit_in_doubt": self.commit_in_doubt(),
            "stop": self.stop,
            "events": self.events,
        })
    }
}

/// A DGP 0.1 controller bound to one server, one decision adapter and one text service.
pub struct Controller {
    client: Client,
    surfaces_link: String,
    adapter: Box<dyn DecisionAdapter>,
    text: Box<dyn TextService>,
    service_calls: AtomicU32,
    max_service_calls: u32,
}

fn random_id(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        weft_core::frames::validate::hex(&crate::serve::random_bytes::<16>())
    )
}

fn config_error(m: String) -> CallError {
    CallError::from(FramesError::InvalidMessage(m))
}

/// Reads the server's discovery document and checks that it speaks DGP 0.1.
pub async fn discover(client: &Client) -> Result<Value, CallError> {
    let manifest = client.get("/.well-known/dgp").await?;
    if manifest["dgp"] != "0.1" {
        return Err(config_error("the server does not speak DGP 0.1".into()));
    }
    Ok(manifest)
}

impl Controller {
    /// A controller over `client`, whose server described itself with `manifest` (see
    /// [`discover`]). `max_service_calls` bounds the text-service requests of this controller
    /// over its whole life, across surfaces and runs.
    pub fn new(
        client: Client,
        manifest: &Value,
        adapter: Box<dyn DecisionAdapter>,
        text: Box<dyn TextService>,
        max_service_calls: u32,
    ) -> Controller {
        Controller {
            client,
            surfaces_link: manifest["links"]["surfaces"]
                .as_str()
                .unwrap_or("/dgp/surfaces")
                .to_owned(),
            adapter,
            text,
            service_calls: AtomicU32::new(0),
            max_service_calls,
        }
    }

    /// Connects to `base_url` with a bearer token (plain HTTP to loopback only unless
    /// `allow_insecure_http`) and checks that the server speaks DGP 0.1.
    pub async fn connect(
        base_url: &str,
        token: Option<String>,
        allow_insecure_http: bool,
        adapter: Box<dyn DecisionAdapter>,
        text: Box<dyn TextService>,
        max_service_calls: u32,
    ) -> Result<Controller, CallError> {
        let client = Client::new(base_url, token, allow_insecure_http).map_err(config_error)?;
        let manifest = discover(&client).await?;
        Ok(Controller::new(
            client,
            &manifest,
            adapter,
            text,
            max_service_calls,
        ))
    }

    /// The server's surface list: `[{"surface_id", "title", "state", "revision", ...}]`.
    pub async fn surfaces(&self) -> Result<Vec<Value>, CallError> {
        let list = self.client.get(&self.surfaces_link).await?;
        Ok(list["surfaces"].as_array().cloned().unwrap_or_default())
    }

    /// Text-service requests made so far (bounded by `max_service_calls`).
    pub fn service_calls(&self) -> u32 {
        self.service_calls.load(Ordering::SeqCst)
    }

    /// Drives surface `sid` until it stops: at most `opts.steps` steps, or earlier when `stop`
    /// is raised (at a safe point, see the module documentation). A failure ends the run with
    /// a `stopped` event carrying the problem; the run itself never fails.
    pub async fn run_surface(
        &self,
        sid: &str,
        opts: RunOptions,
        mut stop: StopSignal,
        on_event: OnEvent<'_>,
    ) -> SurfaceRun {
        let mut events = Vec::new();
        let mut steps = 0;
        let stop_event = {
            let mut emit = |v: Value| {
                on_event(&v);
                events.push(v);
            };
            loop {
                if steps == opts.steps {
                    let v = json!({"surface": sid, "event": "step_budget_reached"});
                    emit(v.clone());
                    break v;
                }
                if stop.is_set() {
                    let v = interrupted(sid, "between_steps", None);
                    emit(v.clone());
                    break v;
                }
                steps += 1;
                match self.step(sid, opts, &mut stop, &mut emit).await {
                    Ok(StepEnd::Continue) => {}
                    Ok(StepEnd::Stop(v)) => break v,
                    Err(e) => {
                        let v = json!({"surface": sid, "event": "stopped", "problem": e.to_json()});
                        emit(v.clone());
                        break v;
                    }
                }
            }
        };
        SurfaceRun {
            surface: sid.to_owned(),
            events,
            stop: stop_event,
            steps,
        }
    }

    /// One step on surface `sid`: read its frame and take the next automatic decision. Events
    /// go to `emit` as they happen (a `Stop` value has been emitted too; an error has not).
    pub async fn step(
        &self,
        sid: &str,
        opts: RunOptions,
        stop: &mut StopSignal,
        emit: &mut (dyn FnMut(Value) + Send),
    ) -> Result<StepEnd, CallError> {
        let link = format!(
            "/dgp/surfaces/{}/frame",
            weft_core::frames::engine::path_segment(sid)
        );
        let Some(frame) = stop.unless(self.client.get(&link)).await else {
            return end(interrupted(sid, "reading_frame", None), emit);
        };
        let frame: Frame = serde_json::from_value(frame?)
            .map_err(|e| CallError::Transport(format!("the frame does not match DGP 0.1: {e}")))?;
        emit(
            json!({"surface": sid, "event": "frame", "frame_id": frame.frame_id,
                    "read_set": frame.read_set, "decisions": frame.decisions.iter().map(|d| &d.node_id).collect::<Vec<_>>()}),
        );
        let step = controller::next_step(&frame, controller::CLIENT_FEATURES)?;
        let (decision, result, resolver) = match step {
            Step::Quiescent => {
                return end(json!({"surface": sid, "event": "quiescent"}), emit);
            }
            Step::InputRequired(d) => {
                return end(
                    json!({"surface": sid, "event": "input_required", "decision_id": d.decision_id}),
                    emit,
                );
            }
            Step::Fulfil(d) => {
                if opts.speculative {
                    return end(
                        json!({"surface": sid, "event": "stopped",
                               "reason": "speculative mode assesses choices only; it does not buy generation"}),
                        emit,
                    );
                }
                let mods = self.text.modalities();
                let mods: Vec<&str> = mods.iter().map(String::as_str).collect();
                let pack = controller::evidence_for(&frame, d, &mods)?;
                if self.service_calls.fetch_add(1, Ordering::SeqCst) >= self.max_service_calls {
                    return Err(CallError::Problem {
                        status: 409,
                        code: "CLIENT_BUDGET_EXHAUSTED".into(),
                        detail: "this process reached its service-call limit".into(),
                    });
                }
                let Some(generated) = stop.unless(self.text.generate(&frame, d, &pack)).await
                else {
                    return end(interrupted(sid, "fulfilling", None), emit);
                };
                let (text, resolver) = generated?;
                emit(json!({"surface": sid, "event": "service_text",
                            "service_id": d.fulfillment.as_ref().map(|f| &f.service_id), "chars": text.chars().count()}));
                (d, controller::fulfilment_result(d, text)?, resolver)
            }
            Step::Assess(d) => {
                let mods = self.adapter.modalities();
                let mods: Vec<&str> = mods.iter().map(String::as_str).collect();
                let pack = controller::evidence_for(&frame, d, &mods)?;
                let Some(decided) = stop.unless(self.adapter.decide(&frame, d, &pack)).await else {
                    return end(interrupted(sid, "judging", None), emit);
                };
                let (result, resolver) = decided?;
                weft_core::frames::validate::check_result(d, &result)?;
                (d, result, resolver)
            }
        };
        if stop.is_set() {
            // The judgment is not recorded: nothing reached the server in this step.
            return end(interrupted(sid, "before_recording", None), emit);
        }
        let mode = if opts.speculative {
            Mode::Speculative
        } else {
            Mode::Live
        };
        let req = controller::assessment_request(
            &frame,
            decision,
            random_id("a"),
            mode,
            resolver,
            result,
        );
        // Recording is not abandoned half way: its outcome would be unknown.
        self.client.post("/dgp/assessments", &req, &[]).await?;
        emit(json!({"surface": sid, "event": "assessed", "assessment": req}));
        match controller::after_judgment(decision, &req.result, mode) {
            AfterJudgment::Commit => {}
            AfterJudgment::Speculative => {
                return end(
                    json!({"surface": sid, "event": "speculative_recorded", "assessment_id": req.assessment_id}),
                    emit,
                );
            }
            AfterJudgment::Abstained => {
                return end(
                    json!({"surface": sid, "event": "abstained", "assessment_id": req.assessment_id}),
                    emit,
                );
            }
            AfterJudgment::HumanRequired => {
                return end(
                    json!({"surface": sid, "event": "human_review_required",
                           "frame_id": frame.frame_id, "assessment_id": req.assessment_id}),
                    emit,
                );
            }
        }
        if stop.is_set() {
            // Recorded, never committed: a commit needs this step's intent, which is not logged.
            return end(
                interrupted(sid, "before_commit", Some(&req.assessment_id)),
                emit,
            );
        }
        let commit = controller::commit_request(&req);
        let key = random_id("k");
        // The intent is logged before the request: after an unknown outcome the same key and
        // body are retried, never a new key. From here on a stop waits for the answer.
        emit(
            json!({"surface": sid, "event": "commit_intent", "idempotency_key": key, "request": commit}),
        );
        let mut attempt = 0;
        let receipt = loop {
            attempt += 1;
            match self
                .client
                .post("/dgp/commits", &commit, &[("idempotency-key", &key)])
                .await
            {
                Err(CallError::Transport(m)) if attempt < 4 => {
                    emit(
                        json!({"surface": sid, "event": "commit_retry", "idempotency_key": key, "detail": m}),
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(200 * attempt)).await;
                }
                other => break other?,
            }
        };
        emit(json!({"surface": sid, "event": "committed", "receipt": receipt}));
        Ok(StepEnd::Continue)
    }
}

/// Emits the last event of a run.
fn end(v: Value, emit: &mut (dyn FnMut(Value) + Send)) -> Result<StepEnd, CallError> {
    emit(v.clone());
    Ok(StepEnd::Stop(v))
}

/// The event of a run stopped at a safe point: nothing of this step is in flight.
fn interrupted(sid: &str, at: &str, recorded: Option<&str>) -> Value {
    let mut v = json!({"surface": sid, "event": "interrupted", "at": at,
                       "detail": "stopped at a safe point: no commit is in flight"});
    if let Some(a) = recorded {
        v["assessment_id"] = json!(a);
        v["detail"] = json!("stopped at a safe point: the assessment is recorded, not committed");
    }
    v
}
