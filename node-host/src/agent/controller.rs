//! The DGP controller's native host: connect to a server, list its surfaces, and drive one
//! surface — an HTTP/timer loop over the core's run machine
//! ([`weft_core::frames::controller::Run`], which documents the call order, the events, the
//! retry rule and where a stop is honoured). This file only sends the machine's requests
//! (through [`Client`]), asks the decision adapter and the text service, keeps the retry
//! timer and passes a [`StopSignal`] on. Every event goes to the caller (live, through a
//! callback, and collected in the [`SurfaceRun`]); `weft agent` prints them as JSON lines, the
//! agent tools ([`super::tools`]) return them to a model.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use weft_core::frames::controller::http::{self, HttpAnswer, Problem};
use weft_core::frames::controller::{Judgment, Output, Run, RunConfig, ServiceBudget};
use weft_core::frames::types::Resolver;

use super::adapters::{DecisionAdapter, TextService};
use super::client::{CallError, Client};

pub use weft_core::frames::controller::{RunOptions, RunReport as SurfaceRun};

/// Asks a run to stop at its next safe point (see [`weft_core::frames::controller::run`]). A
/// signal whose sender is dropped without asking never stops anything.
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
}

/// Receives each event as it happens.
pub type OnEvent<'a> = &'a mut (dyn FnMut(&Value) + Send);

/// A DGP 0.1 controller bound to one server, one decision adapter and one text service.
pub struct Controller {
    client: Client,
    surfaces_link: String,
    adapter: Box<dyn DecisionAdapter>,
    text: Box<dyn TextService>,
    budget: Mutex<ServiceBudget>,
}

/// Reads the server's discovery document and checks that it speaks DGP 0.1.
pub async fn discover(client: &Client) -> Result<Value, CallError> {
    let manifest = client.get("/.well-known/dgp").await?;
    http::surfaces_link(&manifest)?;
    Ok(manifest)
}

/// What the loop waits for.
enum Input {
    Http(u64, HttpAnswer),
    Judgment(Box<Result<Judgment, Problem>>),
    Text(Result<(String, Resolver), Problem>),
}

type Pending<'a> = Pin<Box<dyn Future<Output = Input> + Send + 'a>>;

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
            surfaces_link: http::surfaces_link(manifest).unwrap_or_else(|_| "/dgp/surfaces".into()),
            adapter,
            text,
            budget: Mutex::new(ServiceBudget::new(max_service_calls)),
        }
    }

    /// Connects to `base_url` with a bearer token (https, or plain HTTP to loopback only
    /// unless `allow_insecure_http`) and checks that the server speaks DGP 0.1.
    pub async fn connect(
        base_url: &str,
        token: Option<String>,
        allow_insecure_http: bool,
        adapter: Box<dyn DecisionAdapter>,
        text: Box<dyn TextService>,
        max_service_calls: u32,
    ) -> Result<Controller, CallError> {
        let client = Client::new(base_url, token, allow_insecure_http)
            .map_err(|m| CallError::from(weft_core::frames::FramesError::InvalidMessage(m)))?;
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
        Ok(http::surface_list(
            &self.client.get(&self.surfaces_link).await?,
        ))
    }

    /// Text-service requests made so far (bounded by `max_service_calls`).
    pub fn service_calls(&self) -> u32 {
        self.budget.lock().expect("never poisoned").used()
    }

    /// Drives surface `sid` until it stops: at most `opts.steps` steps, or earlier when `stop`
    /// is raised (at a safe point). A failure ends the run with a `stopped` event carrying the
    /// problem; the run itself never fails.
    pub async fn run_surface(
        &self,
        sid: &str,
        opts: RunOptions,
        mut stop: StopSignal,
        on_event: OnEvent<'_>,
    ) -> SurfaceRun {
        let mut config = RunConfig::new(sid, crate::serve::random_bytes::<32>());
        config.options = opts;
        config.judge_modalities = self.adapter.modalities();
        config.text_modalities = self.text.modalities();
        let mut run = Run::new(config);
        let t0 = Instant::now();
        let now = || weft_core::Mono::from_ms(t0.elapsed().as_millis() as u64);
        let mut stop_fed = stop.is_set();
        if stop_fed {
            run.handle_stop(now());
        }
        let mut pending: Option<Pending<'_>> = None;
        loop {
            while let Some(out) = run.poll_output() {
                match out {
                    Output::Event(e) => on_event(&e.to_json()),
                    Output::Done(report) => return report,
                    Output::Http(req) => {
                        pending = Some(Box::pin(async move {
                            Input::Http(req.id, self.client.send(&req).await)
                        }))
                    }
                    Output::Judge(j) => {
                        pending = Some(Box::pin(async move {
                            let r = self.adapter.decide(&j.frame, j.decision(), &j.evidence);
                            Input::Judgment(Box::new(
                                r.await
                                    .map(|(result, resolver)| Judgment { result, resolver })
                                    .map_err(|e| e.problem()),
                            ))
                        }))
                    }
                    Output::Generate(j) => {
                        pending = Some(Box::pin(async move {
                            let r = self.text.generate(&j.frame, j.decision(), &j.evidence);
                            Input::Text(r.await.map_err(|e| e.problem()))
                        }))
                    }
                }
            }
            let deadline = run
                .poll_timeout()
                .map(|t| t0 + std::time::Duration::from_millis(t.as_ms()));
            let input = tokio::select! {
                biased;
                _ = stop.raised(), if !stop_fed => {
                    stop_fed = true;
                    run.handle_stop(now());
                    continue;
                }
                i = async { pending.as_mut().expect("checked").await }, if pending.is_some() => {
                    pending = None;
                    i
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or(t0)), if deadline.is_some() => {
                    run.handle_timeout(now());
                    continue;
                }
                else => unreachable!("a run that is not done waits for an answer or a timer"),
            };
            match input {
                Input::Http(id, answer) => {
                    let mut budget = self.budget.lock().expect("never poisoned");
                    run.handle_http(now(), id, answer, &mut budget);
                }
                Input::Judgment(j) => run.handle_judgment(now(), *j),
                Input::Text(t) => run.handle_text(now(), t),
            }
        }
    }
}
