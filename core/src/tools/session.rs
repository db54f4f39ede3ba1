//! The agent session: one authoritative turn state machine, its tool scheduler and mailbox.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::{Value, json};

use super::ToolsError;
use super::schema;
use super::toolbox::{Snapshot, ToolDecl, Toolbox};
use super::types::*;
use crate::Mono;
use crate::jobs::{self, JobId, Note, Origin, OwnerId, Registry, Submit, Submitted};
use crate::value::Payload;
use crate::vecmap::VecMap;

/// Session construction parameters.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The session's id: the `thread` of the origin of every job its tools start, and the
    /// owner of those jobs (so their completion notes come to this agent's mailbox).
    pub id: String,
    /// How long an interrupt waits for started calls to settle before reporting them as
    /// uncertain and ending the turn.
    pub interrupt_grace_ms: u64,
    /// Model steps per turn before the turn ends with `step_limit`.
    pub max_steps_per_turn: u32,
}

impl SessionConfig {
    /// A configuration with the defaults: 1000 ms interrupt grace, 64 steps per turn.
    pub fn new(id: impl Into<String>) -> Self {
        SessionConfig {
            id: id.into(),
            interrupt_grace_ms: 1000,
            max_steps_per_turn: 64,
        }
    }
}

/// What the model is asked in one step: the transcript so far and the step's tool snapshot.
#[derive(Debug)]
pub struct ModelRequest<'a, V> {
    /// The session's id.
    pub session: &'a str,
    pub turn: TurnId,
    pub step: StepId,
    /// The whole transcript so far (the step's new input is at its end).
    pub messages: &'a [Message<V>],
    /// The tools this step advertises; the calls it selects run against exactly these.
    pub tools: &'a Snapshot,
}

/// Counters of what the session did (for tests and diagnostics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Turns started.
    pub turns: u64,
    /// Model steps asked (the figure "progress never calls the model" is checked against).
    pub model_requests: u64,
    /// Handlers started.
    pub calls_started: u64,
    /// Calls refused before they could start (unknown tool, invalid arguments).
    pub calls_refused: u64,
    /// Mail items queued.
    pub mail_queued: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Pending,
    Running,
    Done,
}

#[derive(Debug)]
struct Slot<V> {
    state: SlotState,
    abort_sent_at: Option<Mono>,
    jobs: Vec<JobId>,
    outcome: Option<CallOutcome<V>>,
}

#[derive(Debug)]
struct Interruption {
    reason: String,
    at: Mono,
}

/// The calls of one model step, scheduled as consecutive groups.
#[derive(Debug)]
struct Batch<V> {
    step: StepId,
    snapshot: Arc<Snapshot>,
    /// Index of the assistant message holding the calls.
    message: usize,
    first: u64,
    slots: Vec<Slot<V>>,
    group_start: usize,
    group_end: usize,
    running: usize,
    interrupted: Option<Interruption>,
}

/// A call that was still running when its turn ended.
#[derive(Debug)]
struct Detached {
    turn: TurnId,
    call_id: String,
    tool: String,
    may_start_job: bool,
    abort_sent_at: Option<Mono>,
}

#[derive(Debug)]
struct Standing<V> {
    value: V,
    unseen: bool,
}

/// An agent session. `V` is the payload representation (JSON natively, `JsValue` in wasm).
///
/// Only explicit choices start turns: [`Session::submit_task`], [`Session::wake`], or a job
/// submitted with `wake`. Mail (job notes, observations, late call results) and standing
/// desires queue until the next turn starts and are admitted then; progress never reaches the
/// session at all.
#[derive(Debug)]
pub struct Session<V> {
    config: SessionConfig,
    owner: OwnerId,
    toolbox: Toolbox,
    phase: Phase,
    steps_in_turn: u32,
    /// The snapshot of the pending model step.
    step_snapshot: Option<Arc<Snapshot>>,
    batch: Option<Batch<V>>,
    history: Vec<Message<V>>,
    mailbox: VecDeque<Mail<V>>,
    tasks: VecDeque<(TaskId, V)>,
    steering: VecDeque<V>,
    standing: VecMap<String, Standing<V>>,
    wakes: VecDeque<TurnCause>,
    detached: VecMap<InvocationId, Detached>,
    /// Handlers replaced or removed while a snapshot still bound them.
    unreleased: VecMap<HandlerId, ()>,
    outputs: VecDeque<Output>,
    next_turn: u64,
    next_step: u64,
    next_invocation: u64,
    next_task: u64,
    next_mail: u64,
    stats: SessionStats,
}

impl<V: Payload> Session<V> {
    /// An idle session with no tools.
    pub fn new(mut config: SessionConfig) -> Self {
        config.max_steps_per_turn = config.max_steps_per_turn.max(1);
        Session {
            owner: OwnerId::new(config.id.clone()),
            config,
            toolbox: Toolbox::default(),
            phase: Phase::Idle,
            steps_in_turn: 0,
            step_snapshot: None,
            batch: None,
            history: Vec::new(),
            mailbox: VecDeque::new(),
            tasks: VecDeque::new(),
            steering: VecDeque::new(),
            standing: VecMap::new(),
            wakes: VecDeque::new(),
            detached: VecMap::new(),
            unreleased: VecMap::new(),
            outputs: VecDeque::new(),
            next_turn: 1,
            next_step: 1,
            next_invocation: 1,
            next_task: 1,
            next_mail: 1,
            stats: SessionStats::default(),
        }
    }

    // ----- tools ----------------------------------------------------------------------------

    /// Declares a tool (or replaces the declaration of the same name). The returned handler id
    /// is what [`Output::StartCall`] names. A step already asked keeps its own snapshot.
    pub fn register_tool(&mut self, decl: ToolDecl) -> Result<HandlerId, ToolsError> {
        let (handler, replaced) = self.toolbox.register(decl)?;
        if let Some(old) = replaced {
            self.release_if_unbound(old);
        }
        Ok(handler)
    }

    /// Removes a tool. Calls the model already selected still run with the binding of their
    /// step's snapshot.
    pub fn unregister_tool(&mut self, name: &str) -> Result<(), ToolsError> {
        let handler = self.toolbox.unregister(name)?;
        self.release_if_unbound(handler);
        Ok(())
    }

    /// The current declarations (what the next model step will be shown).
    pub fn tools(&mut self) -> Arc<Snapshot> {
        self.toolbox.snapshot()
    }

    fn snapshot_binds(&self, h: HandlerId) -> bool {
        self.step_snapshot.as_ref().is_some_and(|s| s.binds(h))
            || self.batch.as_ref().is_some_and(|b| b.snapshot.binds(h))
    }

    fn release_if_unbound(&mut self, h: HandlerId) {
        if self.toolbox.binds(h) {
            return;
        }
        if self.snapshot_binds(h) {
            self.unreleased.insert(h, ());
        } else {
            self.outputs
                .push_back(Output::HandlerReleased { handler: h });
        }
    }

    fn release_pending_handlers(&mut self) {
        if self.unreleased.is_empty() {
            return;
        }
        for (h, ()) in self.unreleased.take() {
            self.release_if_unbound(h);
        }
    }

    // ----- work admission -------------------------------------------------------------------

    /// Submits a task. Tasks run in submission order, one turn each; submitting is an explicit
    /// choice, so an idle agent starts its turn at once.
    pub fn submit_task(&mut self, now: Mono, input: V) -> TaskId {
        let id = TaskId(self.next_task);
        self.next_task += 1;
        self.tasks.push_back((id, input));
        self.maybe_start_turn(now);
        id
    }

    /// Withdraws a task that has not started.
    pub fn cancel_task(&mut self, task: TaskId) -> Result<(), ToolsError> {
        let i = self
            .tasks
            .iter()
            .position(|(t, _)| *t == task)
            .ok_or(ToolsError::UnknownTask(task))?;
        self.tasks.remove(i);
        Ok(())
    }

    /// Tasks submitted and not yet started, in order.
    pub fn queued_tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tasks.iter().map(|(t, _)| *t)
    }

    /// Queues steering input for the running turn: it becomes model input at the next safe
    /// point (before the next model step; a turn whose model answered without calls continues
    /// for one more step to take it). Idle sessions have no turn to steer: submit a task.
    pub fn steer(&mut self, now: Mono, input: V) -> Result<(), ToolsError> {
        let _ = now;
        if self.phase == Phase::Idle {
            return Err(ToolsError::NoActiveTurn);
        }
        self.steering.push_back(input);
        Ok(())
    }

    /// The application's explicit choice to wake the agent: an idle agent starts a turn that
    /// admits its mail; a busy one runs such a turn after the current one (unless a queued
    /// task's turn admits the mail first).
    pub fn wake(&mut self, now: Mono, reason: impl Into<String>) {
        self.wakes.push_back(TurnCause::AppWake(reason.into()));
        self.maybe_start_turn(now);
    }

    /// A job submitted with `wake` finished (the registry's [`jobs::Output::Wake`]).
    pub fn job_wake(&mut self, now: Mono, job: JobId) {
        self.wakes.push_back(TurnCause::JobWake(job));
        self.maybe_start_turn(now);
    }

    /// Queues a job completion note. It becomes model input at the start of the next turn;
    /// it never starts one.
    pub fn deliver_note(&mut self, now: Mono, note: Note) -> u64 {
        self.queue_mail(now, MailItem::Job(note))
    }

    /// Queues the result of an observation for the agent (admitted at the next turn start).
    pub fn post_observation(&mut self, now: Mono, source: impl Into<String>, value: V) -> u64 {
        self.queue_mail(
            now,
            MailItem::Observation {
                source: source.into(),
                value,
            },
        )
    }

    /// Sets a standing desire: the latest value per key is shown to the model at the next turn
    /// start if it changed since the model last saw it. Not a task: it never queues work and
    /// never wakes the agent; intermediate values are not retained.
    pub fn set_standing(&mut self, key: impl Into<String>, value: V) {
        self.standing.insert(
            key.into(),
            Standing {
                value,
                unseen: true,
            },
        );
    }

    /// Carries a registry output to the session: completion notes for this agent move from the
    /// registry's mailbox to the session's; a `wake` for this agent is a job wake. Every other
    /// output (progress, observations, waits) is none of the session's business.
    pub fn on_registry_output(
        &mut self,
        now: Mono,
        out: &jobs::Output<V>,
        registry: &mut Registry<V>,
    ) {
        match out {
            jobs::Output::NoteQueued { owner, .. } if *owner == self.owner => {
                for note in registry.read_mailbox(owner) {
                    self.deliver_note(now, note);
                }
            }
            jobs::Output::Wake { owner, job } if *owner == self.owner => self.job_wake(now, *job),
            _ => {}
        }
    }

    fn queue_mail(&mut self, now: Mono, item: MailItem<V>) -> u64 {
        let seq = self.next_mail;
        self.next_mail += 1;
        let kind = item.kind();
        self.mailbox.push_back(Mail { seq, at: now, item });
        self.stats.mail_queued += 1;
        self.outputs.push_back(Output::MailQueued { seq, kind });
        seq
    }

    /// Mail not yet admitted, in arrival order.
    pub fn mailbox(&self) -> impl Iterator<Item = &Mail<V>> {
        self.mailbox.iter()
    }

    fn maybe_start_turn(&mut self, now: Mono) {
        if self.phase != Phase::Idle {
            return;
        }
        let cause = if let Some((task, input)) = self.tasks.pop_front() {
            // A task's turn admits the mail a pending wake was for.
            self.wakes.clear();
            Some((TurnCause::Task(task), Some(input)))
        } else {
            let first = self.wakes.pop_front();
            self.wakes.clear();
            first.map(|c| (c, None))
        };
        let Some((cause, input)) = cause else { return };
        let turn = TurnId(self.next_turn);
        self.next_turn += 1;
        self.stats.turns += 1;
        self.steps_in_turn = 0;
        self.history.push(Message::TurnStart {
            turn,
            cause: cause.clone(),
        });
        // The admission boundary: mail, changed standing desires, leftover steering, the task.
        let admitted = self.mailbox.len();
        self.history
            .extend(self.mailbox.drain(..).map(Message::Admitted));
        for (key, s) in self.standing.iter_mut().filter(|(_, s)| s.unseen) {
            s.unseen = false;
            self.history.push(Message::Standing {
                key: key.clone(),
                value: s.value.clone(),
            });
        }
        self.history.extend(
            self.steering
                .drain(..)
                .map(|input| Message::Steer { input }),
        );
        if let (TurnCause::Task(task), Some(input)) = (&cause, input) {
            self.history.push(Message::Task { task: *task, input });
        }
        self.phase = Phase::ModelStep {
            turn,
            step: StepId(0),
        };
        self.outputs.push_back(Output::TurnStarted {
            turn,
            cause,
            admitted,
        });
        self.begin_step(now, turn);
    }

    fn begin_step(&mut self, now: Mono, turn: TurnId) {
        if self.steps_in_turn >= self.config.max_steps_per_turn {
            let steps = self.steps_in_turn;
            return self.end_turn(now, turn, TurnEnd::StepLimit { steps });
        }
        self.steps_in_turn += 1;
        let step = StepId(self.next_step);
        self.next_step += 1;
        self.step_snapshot = Some(self.toolbox.snapshot());
        self.phase = Phase::ModelStep { turn, step };
        self.stats.model_requests += 1;
        self.outputs.push_back(Output::ModelRequest { turn, step });
    }

    fn end_turn(&mut self, now: Mono, turn: TurnId, end: TurnEnd) {
        self.history.push(Message::TurnEnd {
            turn,
            end: end.clone(),
        });
        self.outputs.push_back(Output::TurnEnded { turn, end });
        self.phase = Phase::Idle;
        self.step_snapshot = None;
        self.batch = None;
        self.release_pending_handlers();
        self.maybe_start_turn(now);
    }

    // ----- model steps ----------------------------------------------------------------------

    /// The pending model request, while the session waits for the model.
    pub fn model_request(&self) -> Option<ModelRequest<'_, V>> {
        match self.phase {
            Phase::ModelStep { turn, step } => Some(ModelRequest {
                session: &self.config.id,
                turn,
                step,
                messages: &self.history,
                tools: self
                    .step_snapshot
                    .as_deref()
                    .expect("a model step has its snapshot"),
            }),
            _ => None,
        }
    }

    fn expect_step(&self, step: StepId) -> Result<TurnId, ToolsError> {
        match self.phase {
            Phase::ModelStep { turn, step: s } if s == step => Ok(turn),
            _ => Err(ToolsError::StaleStep(step)),
        }
    }

    /// The model answered `step`. Calls are resolved against the step's snapshot and run as
    /// consecutive groups; an answer without calls ends the turn (or takes queued steering).
    /// A malformed answer (duplicate call ids) is refused and changes nothing.
    pub fn on_model_response(
        &mut self,
        now: Mono,
        step: StepId,
        response: ModelResponse,
    ) -> Result<(), ToolsError> {
        let turn = self.expect_step(step)?;
        let ModelResponse {
            text,
            mut calls,
            usage,
        } = response;
        for (i, c) in calls.iter_mut().enumerate() {
            if c.id.is_empty() {
                c.id = format!("call-{}-{i}", step.0);
            }
        }
        let mut seen: Vec<&str> = Vec::with_capacity(calls.len());
        for c in &calls {
            if seen.contains(&c.id.as_str()) {
                return Err(ToolsError::InvalidResponse(format!(
                    "call id `{}` appears more than once in one step",
                    c.id
                )));
            }
            seen.push(&c.id);
        }
        if let Some(u) = usage {
            self.outputs.push_back(Output::ModelUsage {
                turn,
                step,
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
            });
        }
        let snapshot = self
            .step_snapshot
            .take()
            .expect("a model step has its snapshot");
        if calls.is_empty() {
            self.history.push(Message::Assistant { step, text, calls });
            return self.safe_point(now, turn, true);
        }
        let first = self.next_invocation;
        self.next_invocation += calls.len() as u64;
        let slots = calls
            .iter()
            .map(|_| Slot {
                state: SlotState::Pending,
                abort_sent_at: None,
                jobs: Vec::new(),
                outcome: None,
            })
            .collect();
        self.history.push(Message::Assistant { step, text, calls });
        self.batch = Some(Batch {
            step,
            snapshot,
            message: self.history.len() - 1,
            first,
            slots,
            group_start: 0,
            group_end: 0,
            running: 0,
            interrupted: None,
        });
        self.phase = Phase::RunningTools { turn, step };
        self.preflight();
        self.run_groups(now, turn);
        Ok(())
    }

    /// The model step failed (network, provider error, adapter exception): the turn ends and
    /// the transcript says why.
    pub fn on_model_error(
        &mut self,
        now: Mono,
        step: StepId,
        message: impl Into<String>,
    ) -> Result<(), ToolsError> {
        let turn = self.expect_step(step)?;
        self.end_turn(
            now,
            turn,
            TurnEnd::ModelFailed {
                message: message.into(),
            },
        );
        Ok(())
    }

    /// Between steps: delivers queued steering and asks the model again, or ends the turn when
    /// the model answered without calls and nothing is queued.
    fn safe_point(&mut self, now: Mono, turn: TurnId, model_done: bool) -> Result<(), ToolsError> {
        if model_done && self.steering.is_empty() {
            self.end_turn(now, turn, TurnEnd::Completed);
            return Ok(());
        }
        self.history.extend(
            self.steering
                .drain(..)
                .map(|input| Message::Steer { input }),
        );
        self.begin_step(now, turn);
        Ok(())
    }

    // ----- the scheduler --------------------------------------------------------------------

    /// Starts the next group of calls, or finishes the batch when every call has its result.
    fn run_groups(&mut self, now: Mono, turn: TurnId) {
        let b = self.batch.as_mut().expect("running tools");
        let mut start = b.group_end;
        // Refused calls were settled before the step ran; they take no part in scheduling.
        while start < b.slots.len() && b.slots[start].state == SlotState::Done {
            start += 1;
        }
        b.group_start = start;
        if start == b.slots.len() {
            return self.finish_batch(now, turn);
        }
        let Message::Assistant { calls, .. } = &self.history[b.message] else {
            unreachable!("the batch indexes its assistant message")
        };
        // Group boundaries: adjacent parallel-eligible calls overlap; an exclusive call
        // runs alone.
        let eligible = |i: usize| {
            b.snapshot
                .get(&calls[i].name)
                .is_some_and(|t| t.decl.supports_parallel)
        };
        let mut end = start + 1;
        if eligible(start) {
            while end < b.slots.len() && (b.slots[end].state == SlotState::Done || eligible(end)) {
                end += 1;
            }
        }
        b.group_end = end;
        for (i, call) in calls.iter().enumerate().take(end).skip(start) {
            let slot = &mut b.slots[i];
            if slot.state != SlotState::Pending {
                continue;
            }
            let entry = b.snapshot.get(&call.name).expect("refused calls are done");
            slot.state = SlotState::Running;
            b.running += 1;
            self.stats.calls_started += 1;
            self.outputs.push_back(Output::StartCall {
                invocation: InvocationId(b.first + i as u64),
                step: b.step,
                handler: entry.handler,
                tool: call.name.clone(),
                call_id: call.id.clone(),
                arguments: call.arguments.clone(),
                cancellable: entry.decl.safe_to_cancel,
            });
        }
        debug_assert!(b.running > 0, "a group has at least one call to start");
    }

    /// Refuses, before anything runs, the calls that cannot start: tools the step's snapshot
    /// does not offer, and arguments that are not JSON or fail the tool's schema.
    fn preflight(&mut self) {
        let b = self.batch.as_mut().expect("a batch");
        let Message::Assistant { calls, .. } = &self.history[b.message] else {
            unreachable!("the batch indexes its assistant message")
        };
        for (i, call) in calls.iter().enumerate() {
            let refusal = match b.snapshot.get(&call.name) {
                None => Some((
                    "UNKNOWN_TOOL",
                    format!("no tool `{}` was offered in {}", call.name, b.step),
                )),
                Some(_) if call.malformed.is_some() => Some((
                    "INVALID_ARGUMENTS",
                    call.malformed.clone().expect("checked"),
                )),
                Some(t) => {
                    let errors = schema::validate(&t.decl.parameters, &call.arguments);
                    (!errors.is_empty()).then(|| ("INVALID_ARGUMENTS", errors.join("; ")))
                }
            };
            if let Some((code, message)) = refusal {
                let slot = &mut b.slots[i];
                slot.state = SlotState::Done;
                slot.outcome = Some(CallOutcome::Rejected {
                    code: code.into(),
                    message,
                });
                self.stats.calls_refused += 1;
                self.outputs.push_back(Output::CallFinished {
                    invocation: InvocationId(b.first + i as u64),
                    status: "rejected",
                });
            }
        }
    }

    /// Every call of the step has its result: the results enter the transcript in model order,
    /// then the safe point.
    fn finish_batch(&mut self, now: Mono, turn: TurnId) {
        self.append_results();
        self.release_pending_handlers();
        let _ = self.safe_point(now, turn, false);
    }

    fn append_results(&mut self) {
        let b = self.batch.take().expect("a batch");
        let Message::Assistant { calls, .. } = &self.history[b.message] else {
            unreachable!()
        };
        let results: Vec<Message<V>> = b
            .slots
            .into_iter()
            .enumerate()
            .map(|(i, s)| Message::ToolResult {
                step: b.step,
                result: CallResult {
                    invocation: InvocationId(b.first + i as u64),
                    call_id: calls[i].id.clone(),
                    tool: calls[i].name.clone(),
                    outcome: s.outcome.expect("every call has its result"),
                    jobs: s.jobs,
                },
            })
            .collect();
        self.history.extend(results);
    }

    fn locate(&self, inv: InvocationId) -> Option<usize> {
        let b = self.batch.as_ref()?;
        let i = inv.0.checked_sub(b.first)? as usize;
        (i < b.slots.len()).then_some(i)
    }

    /// The origin to record on a job a running call submits (thread, turn, tool call).
    pub fn origin(&self, inv: InvocationId) -> Option<Origin> {
        let turn = self.phase.turn();
        if let Some(i) = self.locate(inv) {
            let b = self.batch.as_ref().expect("located");
            let Message::Assistant { calls, .. } = &self.history[b.message] else {
                unreachable!()
            };
            return Some(Origin {
                thread: Some(self.config.id.clone()),
                turn: turn.map(|t| t.to_string()),
                tool_call: Some(calls[i].id.clone()),
                ..Origin::default()
            });
        }
        self.detached.get(&inv).map(|d| Origin {
            thread: Some(self.config.id.clone()),
            turn: Some(d.turn.to_string()),
            tool_call: Some(d.call_id.clone()),
            ..Origin::default()
        })
    }

    /// Records that a running call started background job `job` (the hand-over). Only tools
    /// declared `may_start_job` may start jobs; the job's lifetime is the registry's.
    pub fn on_call_job(
        &mut self,
        now: Mono,
        inv: InvocationId,
        job: JobId,
    ) -> Result<(), ToolsError> {
        if let Some(i) = self.locate(inv) {
            let b = self.batch.as_mut().expect("located");
            let Message::Assistant { calls, .. } = &self.history[b.message] else {
                unreachable!()
            };
            let name = &calls[i].name;
            let slot = &mut b.slots[i];
            match slot.state {
                SlotState::Pending => return Err(ToolsError::CallNotStarted(inv)),
                SlotState::Done if slot.outcome.as_ref().is_some_and(|o| !o.started()) => {
                    return Err(ToolsError::CallNotStarted(inv));
                }
                _ => {}
            }
            let t = b.snapshot.get(name).expect("a started call has its tool");
            if !t.decl.may_start_job {
                return Err(ToolsError::JobNotDeclared { tool: name.clone() });
            }
            if slot.state == SlotState::Done {
                return Err(ToolsError::AlreadySettled(inv));
            }
            slot.jobs.push(job);
            return Ok(());
        }
        if let Some(d) = self.detached.get(&inv) {
            if !d.may_start_job {
                return Err(ToolsError::JobNotDeclared {
                    tool: d.tool.clone(),
                });
            }
            let (turn, call_id) = (d.turn, d.call_id.clone());
            self.queue_mail(
                now,
                MailItem::LateJob {
                    turn,
                    invocation: inv,
                    call_id,
                    job,
                },
            );
            return Ok(());
        }
        Err(self.unknown_or_settled(inv))
    }

    /// Submits a job on behalf of a running call of a tool declared `may_start_job`: the
    /// session's id becomes the job's owner (its note comes to this mailbox), the origin names
    /// the call, and the call hands the job over.
    pub fn submit_job(
        &mut self,
        now: Mono,
        inv: InvocationId,
        registry: &mut Registry<V>,
        mut req: Submit<V>,
    ) -> Result<Submitted, ToolsError> {
        let origin = self
            .origin(inv)
            .ok_or_else(|| self.unknown_or_settled(inv))?;
        // Check the declaration before anything is submitted.
        if let Some(i) = self.locate(inv) {
            let b = self.batch.as_ref().expect("located");
            let Message::Assistant { calls, .. } = &self.history[b.message] else {
                unreachable!()
            };
            let slot = &b.slots[i];
            if slot.state == SlotState::Pending
                || slot.outcome.as_ref().is_some_and(|o| !o.started())
            {
                return Err(ToolsError::CallNotStarted(inv));
            }
            if slot.state == SlotState::Done {
                return Err(ToolsError::AlreadySettled(inv));
            }
            if !b
                .snapshot
                .get(&calls[i].name)
                .is_some_and(|t| t.decl.may_start_job)
            {
                return Err(ToolsError::JobNotDeclared {
                    tool: calls[i].name.clone(),
                });
            }
        } else if let Some(d) = self.detached.get(&inv)
            && !d.may_start_job
        {
            return Err(ToolsError::JobNotDeclared {
                tool: d.tool.clone(),
            });
        }
        req.owner = self.owner.clone();
        req.origin = origin;
        let submitted = registry.submit(now, req).map_err(ToolsError::Jobs)?;
        self.on_call_job(now, inv, submitted.job)?;
        Ok(submitted)
    }

    fn unknown_or_settled(&self, inv: InvocationId) -> ToolsError {
        if inv.0 >= 1 && inv.0 < self.next_invocation {
            ToolsError::AlreadySettled(inv)
        } else {
            ToolsError::UnknownInvocation(inv)
        }
    }

    /// A handler settled. The result is kept with its call's identity; when the group is
    /// complete the next group starts. A settlement for a call whose turn already ended is late
    /// evidence: it goes to the mailbox, never into the finished step.
    pub fn on_call_settled(
        &mut self,
        now: Mono,
        inv: InvocationId,
        settlement: Settlement<V>,
    ) -> Result<(), ToolsError> {
        let Some(i) = self.locate(inv) else {
            return self.late_settlement(now, inv, settlement);
        };
        let b = self.batch.as_mut().expect("located");
        let slot = &mut b.slots[i];
        match slot.state {
            SlotState::Running => {}
            SlotState::Pending => return Err(ToolsError::CallNotStarted(inv)),
            SlotState::Done if slot.outcome.as_ref().is_some_and(|o| !o.started()) => {
                return Err(ToolsError::CallNotStarted(inv));
            }
            SlotState::Done => return Err(ToolsError::AlreadySettled(inv)),
        }
        let reason = b.interrupted.as_ref().map(|x| x.reason.as_str());
        let outcome = settle(settlement, slot.abort_sent_at, reason, now);
        self.outputs.push_back(Output::CallFinished {
            invocation: inv,
            status: outcome.status(),
        });
        slot.outcome = Some(outcome);
        slot.state = SlotState::Done;
        b.running -= 1;
        if b.running == 0 {
            let turn = self.phase.turn().expect("a batch runs in a turn");
            if b.interrupted.is_some() {
                self.finish_interrupt(now, turn);
            } else {
                self.run_groups(now, turn);
            }
        }
        Ok(())
    }

    fn late_settlement(
        &mut self,
        now: Mono,
        inv: InvocationId,
        settlement: Settlement<V>,
    ) -> Result<(), ToolsError> {
        let Some(d) = self.detached.remove(&inv) else {
            return Err(self.unknown_or_settled(inv));
        };
        let outcome = settle(settlement, d.abort_sent_at, Some("interrupted"), now);
        self.queue_mail(
            now,
            MailItem::LateResult {
                turn: d.turn,
                result: CallResult {
                    invocation: inv,
                    call_id: d.call_id,
                    tool: d.tool,
                    outcome,
                    jobs: vec![],
                },
            },
        );
        Ok(())
    }

    // ----- interruption ---------------------------------------------------------------------

    /// Interrupts the running turn. A pending model request is abandoned. Calls that never
    /// started are reported `not_started` (safe to retry); running calls of tools declared safe
    /// to cancel are asked to abort; every started call has the grace period to settle, after
    /// which it is reported `uncertain` and left running (a later settlement arrives as late
    /// mail). Jobs the calls started are handed over and continue.
    pub fn interrupt(&mut self, now: Mono, reason: impl Into<String>) -> InterruptStatus {
        let reason = reason.into();
        match self.phase {
            Phase::Idle => InterruptStatus::NotRunning,
            Phase::Interrupted { .. } => InterruptStatus::AlreadyInterrupting,
            Phase::ModelStep { turn, step } => {
                self.outputs.push_back(Output::AbortModel { step });
                self.end_turn(now, turn, TurnEnd::Interrupted { reason });
                InterruptStatus::Ended
            }
            Phase::RunningTools { turn, .. } => {
                let b = self.batch.as_mut().expect("running tools");
                for (i, slot) in b.slots.iter_mut().enumerate() {
                    let invocation = InvocationId(b.first + i as u64);
                    match slot.state {
                        SlotState::Pending => {
                            slot.state = SlotState::Done;
                            slot.outcome = Some(CallOutcome::NotStarted {
                                reason: format!("interrupted before it started: {reason}"),
                            });
                            self.outputs.push_back(Output::CallFinished {
                                invocation,
                                status: "not_started",
                            });
                        }
                        SlotState::Running => {
                            let Message::Assistant { calls, .. } = &self.history[b.message] else {
                                unreachable!()
                            };
                            let t = b.snapshot.get(&calls[i].name).expect("started");
                            if t.decl.safe_to_cancel {
                                slot.abort_sent_at = Some(now);
                                self.outputs.push_back(Output::AbortCall {
                                    invocation,
                                    handler: t.handler,
                                });
                            }
                        }
                        SlotState::Done => {}
                    }
                }
                b.interrupted = Some(Interruption { reason, at: now });
                if b.running == 0 {
                    self.finish_interrupt(now, turn);
                    return InterruptStatus::Ended;
                }
                self.phase = Phase::Interrupted {
                    turn,
                    deadline: now.plus(self.config.interrupt_grace_ms),
                };
                InterruptStatus::Stopping
            }
        }
    }

    /// Every call has its outcome (or the grace period ended): results enter the transcript in
    /// model order and the turn ends as interrupted.
    fn finish_interrupt(&mut self, now: Mono, turn: TurnId) {
        let b = self.batch.as_mut().expect("interrupting a batch");
        let x = b.interrupted.take().expect("interrupted");
        let Message::Assistant { calls, .. } = &self.history[b.message] else {
            unreachable!()
        };
        for (i, slot) in b.slots.iter_mut().enumerate() {
            if let SlotState::Running = slot.state {
                let invocation = InvocationId(b.first + i as u64);
                let t = b.snapshot.get(&calls[i].name).expect("started");
                slot.state = SlotState::Done;
                slot.outcome = Some(CallOutcome::Uncertain {
                    reason: format!("interrupted while running: {}", x.reason),
                    evidence: Evidence::NoSettlement {
                        waited_ms: now.since(x.at),
                        abort_sent: slot.abort_sent_at.is_some(),
                    },
                });
                self.detached.insert(
                    invocation,
                    Detached {
                        turn,
                        call_id: calls[i].id.clone(),
                        tool: calls[i].name.clone(),
                        may_start_job: t.decl.may_start_job,
                        abort_sent_at: slot.abort_sent_at,
                    },
                );
                self.outputs.push_back(Output::CallFinished {
                    invocation,
                    status: "uncertain",
                });
            }
        }
        b.running = 0;
        self.append_results();
        self.end_turn(now, turn, TurnEnd::Interrupted { reason: x.reason });
    }

    // ----- time and outputs -----------------------------------------------------------------

    /// The earliest time at which [`Session::handle_timeout`] has something to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Mono> {
        match self.phase {
            Phase::Interrupted { deadline, .. } => Some(deadline),
            _ => None,
        }
    }

    /// Ends an interrupt's grace period when it is due.
    pub fn handle_timeout(&mut self, now: Mono) {
        if let Phase::Interrupted { turn, deadline } = self.phase
            && deadline <= now
        {
            self.finish_interrupt(now, turn);
        }
    }

    /// The next output for the host.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// All pending outputs, in order.
    #[must_use]
    pub fn drain_outputs(&mut self) -> std::collections::vec_deque::Drain<'_, Output> {
        self.outputs.drain(..)
    }

    // ----- inspection -----------------------------------------------------------------------

    /// The session's id (the thread and job owner).
    pub fn id(&self) -> &str {
        &self.config.id
    }

    /// The owner id of the jobs this agent's tools start.
    pub fn owner(&self) -> &OwnerId {
        &self.owner
    }

    /// The turn state.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The transcript.
    pub fn history(&self) -> &[Message<V>] {
        &self.history
    }

    /// Drops the transcript entries the running step no longer refers to, keeping the
    /// assistant message whose calls are running (and what follows it). Returns how many
    /// entries were dropped from the front. A host whose transcript is durable elsewhere (an
    /// agent on an actor node, `crate::agents`) calls this after persisting the entries so
    /// that memory does not grow with the conversation.
    pub fn compact_history(&mut self) -> usize {
        let keep_from = self
            .batch
            .as_ref()
            .map_or(self.history.len(), |b| b.message);
        self.history.drain(..keep_from);
        if let Some(b) = self.batch.as_mut() {
            b.message -= keep_from;
        }
        keep_from
    }

    /// Continues the id sequences of a session restored from a durable transcript: the next
    /// turn, step, invocation and mail ids are at least the given ones. Only while idle.
    pub fn resume_ids(&mut self, turn: u64, step: u64, invocation: u64, mail: u64) {
        debug_assert_eq!(self.phase, Phase::Idle);
        self.next_turn = self.next_turn.max(turn);
        self.next_step = self.next_step.max(step);
        self.next_invocation = self.next_invocation.max(invocation);
        self.next_mail = self.next_mail.max(mail);
    }

    /// The handler a declared tool is bound to now.
    pub fn handler_of(&mut self, name: &str) -> Option<HandlerId> {
        self.toolbox
            .snapshot()
            .tools()
            .iter()
            .find(|t| t.decl.name == name)
            .map(|t| t.handler)
    }

    /// Counters.
    pub fn stats(&self) -> SessionStats {
        self.stats
    }

    /// Invocations still running after their turn ended.
    pub fn detached(&self) -> impl Iterator<Item = InvocationId> + '_ {
        self.detached.keys().copied()
    }

    /// The running step's calls and their state (`pending`, `running` or the outcome status).
    pub fn current_calls(&self) -> Vec<(InvocationId, &'static str)> {
        let Some(b) = &self.batch else { return vec![] };
        b.slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let st = match (&s.state, &s.outcome) {
                    (SlotState::Pending, _) => "pending",
                    (SlotState::Running, _) => "running",
                    (SlotState::Done, Some(o)) => o.status(),
                    (SlotState::Done, None) => "done",
                };
                (InvocationId(b.first + i as u64), st)
            })
            .collect()
    }

    /// A JSON summary: phase, queue lengths, mailbox, counters.
    pub fn to_json(&self) -> Value {
        let mut o = json!({
            "id": self.config.id,
            "phase": self.phase.as_str(),
            "turn": self.phase.turn().map(|t| t.0),
            "queuedTasks": self.tasks.iter().map(|(t, _)| t.0).collect::<Vec<_>>(),
            "steering": self.steering.len(),
            "mailbox": self.mailbox.iter().map(Mail::to_json).collect::<Vec<_>>(),
            "detached": self.detached.keys().map(|i| i.0).collect::<Vec<_>>(),
            "calls": self.current_calls().iter().map(|(i, s)| json!({"invocation": i.0, "state": s})).collect::<Vec<_>>(),
            "toolsVersion": self.toolbox.version(),
            "stats": {
                "turns": self.stats.turns, "modelRequests": self.stats.model_requests,
                "callsStarted": self.stats.calls_started, "callsRefused": self.stats.calls_refused,
                "mailQueued": self.stats.mail_queued,
            },
        });
        if let Phase::ModelStep { step, .. } | Phase::RunningTools { step, .. } = self.phase {
            o["step"] = json!(step.0);
        }
        o
    }
}

fn settle<V: Payload>(
    s: Settlement<V>,
    abort_sent_at: Option<Mono>,
    reason: Option<&str>,
    now: Mono,
) -> CallOutcome<V> {
    match s {
        Settlement::Returned(value) => CallOutcome::Succeeded { value },
        Settlement::Threw { message, code } => CallOutcome::Failed { message, code },
        Settlement::Aborted => match abort_sent_at {
            Some(at) => CallOutcome::Uncertain {
                reason: format!(
                    "interrupted while running: {}",
                    reason.unwrap_or("interrupted")
                ),
                evidence: Evidence::AbortAcknowledged {
                    after_ms: now.since(at),
                },
            },
            None => CallOutcome::Failed {
                message: "the handler reported an abort nobody requested".into(),
                code: Some("ABORTED".into()),
            },
        },
    }
}
