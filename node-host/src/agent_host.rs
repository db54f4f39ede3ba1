//! The native agent host: drives one `weft_core::tools::Session` with real async tool handlers
//! (Tokio tasks), a model (sync or async) and a [`JobsHost`] for the background jobs tools
//! start. It holds no rule: which calls overlap, what an interrupt reports, when mail becomes
//! model input — all of that is the session's. The host only starts handlers, signals aborts,
//! asks the model and carries registry notices to the session.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use weft_core::Mono;
use weft_core::jobs::{EndpointId, JobId, Output as JobsOutput, Submit};
use weft_core::tools::{
    HandlerFailure, HandlerId, InterruptStatus, InvocationId, ModelAdapter, ModelRequest,
    ModelResponse, Output, Session, SessionConfig, Settlement, StepId, TaskId, ToolDecl,
    ToolsError,
};

use crate::jobs_host::{JobsHost, sleep_until};

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A tool handler: the call's arguments and its context; resolves to the result.
pub type ToolFn = Arc<dyn Fn(Value, CallCtx) -> BoxFuture<Result<Value, ToolError>> + Send + Sync>;

/// Wraps an async closure as a [`ToolFn`].
pub fn tool_fn<F, Fut>(f: F) -> ToolFn
where
    F: Fn(Value, CallCtx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    Arc::new(move |args, ctx| Box::pin(f(args, ctx)))
}

/// Why a handler produced no value.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolError {
    /// It failed (the model is told the message and code).
    Failed {
        message: String,
        code: Option<String>,
    },
    /// It stopped because it was asked to abort (this is the acknowledgement).
    Aborted,
}

impl ToolError {
    /// A failure with a message and code.
    pub fn failed(message: impl Into<String>, code: impl Into<String>) -> Self {
        ToolError::Failed {
            message: message.into(),
            code: Some(code.into()),
        }
    }
}

/// A model the host can ask asynchronously. Every synchronous [`ModelAdapter`] is one.
pub trait AsyncModel: Send {
    /// Answers one step. The future must own what it needs from the request.
    fn respond(
        &mut self,
        request: &ModelRequest<'_, Value>,
    ) -> BoxFuture<Result<ModelResponse, String>>;
}

impl<M: ModelAdapter<Value> + Send> AsyncModel for M {
    fn respond(
        &mut self,
        request: &ModelRequest<'_, Value>,
    ) -> BoxFuture<Result<ModelResponse, String>> {
        let answer = ModelAdapter::respond(self, request);
        Box::pin(async move { answer })
    }
}

enum Event {
    Settled(InvocationId, Settlement<Value>),
    SubmitJob {
        invocation: InvocationId,
        endpoint: EndpointId,
        payload: Value,
        wake: bool,
        reply: oneshot::Sender<Result<JobId, ToolsError>>,
    },
    WaitJob {
        job: JobId,
        reply: oneshot::Sender<Value>,
    },
    Model(StepId, Result<ModelResponse, String>),
}

/// What a running handler sees: its identity, its abort signal, and the job runtime.
#[derive(Clone)]
pub struct CallCtx {
    pub invocation: InvocationId,
    pub call_id: String,
    pub tool: String,
    abort: watch::Receiver<bool>,
    tx: mpsc::UnboundedSender<Event>,
}

impl CallCtx {
    /// Whether the session asked this call to abort (only tools declared safe to cancel are).
    pub fn is_aborted(&self) -> bool {
        *self.abort.borrow()
    }

    /// Resolves once the call is asked to abort.
    pub async fn aborted(&mut self) {
        let _ = self.abort.wait_for(|a| *a).await;
    }

    /// The abort signal itself (`true` once the call is asked to abort), for code that checks
    /// it at its own safe points.
    pub fn abort_signal(&self) -> watch::Receiver<bool> {
        self.abort.clone()
    }

    /// Starts a background job on `endpoint` for this call (the tool must be declared
    /// `may_start_job`). The job belongs to the agent, names this call as its origin and
    /// outlives the call and the turn; its completion note comes to the agent's mailbox.
    pub async fn submit_job(
        &self,
        endpoint: EndpointId,
        payload: Value,
        wake: bool,
    ) -> Result<JobId, ToolsError> {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(Event::SubmitJob {
            invocation: self.invocation,
            endpoint,
            payload,
            wake,
            reply,
        });
        rx.await
            .unwrap_or_else(|_| Err(ToolsError::InvalidArgument("the agent host stopped".into())))
    }

    /// Resolves with the job's terminal outcome (`{"outcome": ..}` JSON). Dropping the future
    /// leaves the job alone.
    pub async fn wait_job(&self, job: JobId) -> Option<Value> {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(Event::WaitJob { job, reply });
        rx.await.ok()
    }
}

/// One agent session with its handlers, model and job host.
pub struct AgentHost {
    pub jobs: JobsHost,
    pub session: Session<Value>,
    model: Box<dyn AsyncModel>,
    handlers: HashMap<HandlerId, ToolFn>,
    aborts: HashMap<InvocationId, watch::Sender<bool>>,
    model_task: Option<JoinHandle<()>>,
    job_waiters: HashMap<JobId, Vec<oneshot::Sender<Value>>>,
    tx: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
    /// Every session output performed, in order (for inspection and tests).
    pub log: Vec<Output>,
}

impl AgentHost {
    /// An idle agent with no tools, answering model steps with `model`.
    pub fn new(config: SessionConfig, model: impl AsyncModel + 'static) -> Self {
        let mut jobs = JobsHost::new();
        jobs.keep_notices = true;
        let (tx, rx) = mpsc::unbounded_channel();
        AgentHost {
            jobs,
            session: Session::new(config),
            model: Box::new(model),
            handlers: HashMap::new(),
            aborts: HashMap::new(),
            model_task: None,
            job_waiters: HashMap::new(),
            tx,
            rx,
            log: Vec::new(),
        }
    }

    /// Milliseconds on the host's monotonic clock (shared with the job host).
    pub fn now(&self) -> Mono {
        self.jobs.now()
    }

    /// Declares a tool bound to `handler`.
    pub fn register(&mut self, decl: ToolDecl, handler: ToolFn) -> Result<HandlerId, ToolsError> {
        let id = self.session.register_tool(decl)?;
        self.handlers.insert(id, handler);
        self.perform();
        Ok(id)
    }

    /// Removes a tool (steps already asked keep their binding).
    pub fn unregister(&mut self, name: &str) -> Result<(), ToolsError> {
        self.session.unregister_tool(name)?;
        self.perform();
        Ok(())
    }

    /// Submits a task (FIFO; starts a turn when idle).
    pub fn submit_task(&mut self, input: Value) -> TaskId {
        let now = self.now();
        let t = self.session.submit_task(now, input);
        self.perform();
        t
    }

    /// The application's explicit choice to wake the agent.
    pub fn wake(&mut self, reason: &str) {
        let now = self.now();
        self.session.wake(now, reason);
        self.perform();
    }

    /// Interrupts the running turn.
    pub fn interrupt(&mut self, reason: &str) -> InterruptStatus {
        let now = self.now();
        let s = self.session.interrupt(now, reason);
        self.perform();
        s
    }

    /// Runs until the session is idle (every queued task and wake handled).
    pub async fn run_until_idle(&mut self) {
        self.run_until(|h| h.session.phase() == weft_core::tools::Phase::Idle)
            .await
    }

    /// Runs the event loop until `done(host)` holds (checked after every event).
    pub async fn run_until(&mut self, mut done: impl FnMut(&AgentHost) -> bool) {
        loop {
            self.perform();
            if done(self) {
                return;
            }
            let sleep = sleep_until(self.session.poll_timeout(), self.now());
            tokio::select! {
                ev = self.rx.recv() => {
                    if let Some(ev) = ev {
                        self.on_event(ev);
                    }
                }
                _ = self.jobs.step() => {}
                _ = sleep => {
                    let now = self.now();
                    self.session.handle_timeout(now);
                }
            }
        }
    }

    /// Runs the event loop for `d` (lets background jobs progress while the agent is idle).
    pub async fn run_for(&mut self, d: Duration) {
        let _ = tokio::time::timeout(d, self.run_until(|_| false)).await;
    }

    fn on_event(&mut self, ev: Event) {
        let now = self.now();
        match ev {
            Event::Settled(inv, settlement) => {
                self.aborts.remove(&inv);
                // A settlement the session refuses (e.g. a duplicate) changes nothing.
                let _ = self.session.on_call_settled(now, inv, settlement);
            }
            Event::SubmitJob {
                invocation,
                endpoint,
                payload,
                wake,
                reply,
            } => {
                let mut req = Submit::new("set by the session", endpoint, payload);
                req.wake = wake;
                let r = self
                    .session
                    .submit_job(now, invocation, &mut self.jobs.registry, req)
                    .map(|s| s.job);
                self.jobs.pump();
                let _ = reply.send(r);
            }
            Event::WaitJob { job, reply } => {
                match self.jobs.registry.job(job).and_then(|j| j.outcome()) {
                    Some(o) => {
                        let _ = reply.send(o.to_json());
                    }
                    None => self.job_waiters.entry(job).or_default().push(reply),
                }
            }
            Event::Model(step, answer) => {
                self.model_task = None;
                // A stale answer (the turn was interrupted meanwhile) is refused by the session.
                let _ = match answer {
                    Ok(r) => self.session.on_model_response(now, step, r),
                    Err(m) => self.session.on_model_error(now, step, m),
                };
            }
        }
    }

    /// Carries registry notices to the session, then performs every session output.
    fn perform(&mut self) {
        let now = self.now();
        for notice in self.jobs.take_notices() {
            if let JobsOutput::JobFinished { job, .. } = &notice
                && let Some(waiters) = self.job_waiters.remove(job)
            {
                let outcome = self
                    .jobs
                    .registry
                    .job(*job)
                    .and_then(|j| j.outcome())
                    .map(|o| o.to_json())
                    .unwrap_or(Value::Null);
                for w in waiters {
                    let _ = w.send(outcome.clone());
                }
            }
            self.session
                .on_registry_output(now, &notice, &mut self.jobs.registry);
        }
        while let Some(o) = self.session.poll_output() {
            match &o {
                Output::ModelRequest { step, .. } => {
                    let step = *step;
                    let req = self
                        .session
                        .model_request()
                        .expect("a model step is pending");
                    let answer = self.model.respond(&req);
                    let tx = self.tx.clone();
                    self.model_task = Some(tokio::spawn(async move {
                        let _ = tx.send(Event::Model(step, answer.await));
                    }));
                }
                Output::AbortModel { .. } => {
                    if let Some(t) = self.model_task.take() {
                        t.abort();
                    }
                }
                Output::StartCall {
                    invocation,
                    handler,
                    tool,
                    call_id,
                    arguments,
                    ..
                } => self.start(*invocation, *handler, tool, call_id, arguments.clone()),
                Output::AbortCall { invocation, .. } => {
                    if let Some(a) = self.aborts.get(invocation) {
                        let _ = a.send(true);
                    }
                }
                Output::HandlerReleased { handler } => {
                    self.handlers.remove(handler);
                }
                Output::TurnStarted { .. }
                | Output::TurnEnded { .. }
                | Output::CallFinished { .. }
                | Output::MailQueued { .. }
                | Output::ModelUsage { .. } => {}
            }
            self.log.push(o);
        }
    }

    fn start(
        &mut self,
        invocation: InvocationId,
        handler: HandlerId,
        tool: &str,
        call_id: &str,
        arguments: Value,
    ) {
        let tx = self.tx.clone();
        let Some(f) = self.handlers.get(&handler).cloned() else {
            let _ = tx.send(Event::Settled(
                invocation,
                Settlement::from(HandlerFailure::UnknownTool(tool.to_owned())),
            ));
            return;
        };
        let (abort_tx, abort_rx) = watch::channel(false);
        self.aborts.insert(invocation, abort_tx);
        let ctx = CallCtx {
            invocation,
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            abort: abort_rx,
            tx: tx.clone(),
        };
        tokio::spawn(async move {
            // The handler runs in its own task: a panic fails this call only.
            let result = tokio::spawn(async move { f(arguments, ctx).await }).await;
            let settlement = match result {
                Ok(Ok(v)) => Settlement::Returned(v),
                Ok(Err(ToolError::Aborted)) => Settlement::Aborted,
                Ok(Err(ToolError::Failed { message, code })) => Settlement::Threw { message, code },
                Err(e) if e.is_panic() => {
                    let p = e.into_panic();
                    let what = p
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a non-string panic".into());
                    HandlerFailure::Panicked(what).into()
                }
                Err(e) => HandlerFailure::Lost(e.to_string()).into(),
            };
            let _ = tx.send(Event::Settled(invocation, settlement));
        });
    }
}
