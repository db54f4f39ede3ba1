//! The DGP controller as agent tools on an [`AgentHost`]. The declarations (names,
//! descriptions, schemas, eligibility), [`MAX_STEPS`] and the reading of a call's arguments are
//! the core's ([`weft_core::frames::controller::tools`]); this binds them to a [`Controller`]
//! and queues two calls for the same surface behind each other instead of racing them.
//!
//! Both tools are safe to cancel: an abort stops the run at its next safe point, so a
//! cancelled run returns normally with an `interrupted` stop and every commit it made listed
//! with its receipt. A run that is still waiting for a commit's answer when the session's
//! interrupt grace period ends is the one case left: the session reports it `uncertain`, the
//! run finishes the commit, and its full report arrives in the agent's mailbox as a late
//! result. The controller never commits a judgment whose effect requires a human: such a run
//! ends with `human_review_required`, and the tool result says so.
//!
//! [`DgpTools::host_tools`] offers the same two tools to the agents of `weft serve`'s task
//! nodes ([`crate::agents::HostTools`]), bound to the server's own DGP app.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use weft_core::frames::controller::tools as decl;
use weft_core::tools::{HandlerId, Settlement, ToolDecl, ToolsError};

use super::client::CallError;
use super::controller::{Controller, RunOptions, StopSignal, SurfaceRun};
use crate::agent_host::{AgentHost, ToolError, tool_fn};
use crate::agents::{BoxFuture, CallHandler, HostTools};

pub use weft_core::frames::controller::tools::{MAX_STEPS, RUN_TOOL, SURFACES_TOOL};

/// Receives every controller event of every run, as it happens (progress display, logs).
pub type Observer = Arc<dyn Fn(&Value) + Send + Sync>;

/// The DGP tools of one controller.
#[derive(Clone)]
pub struct DgpTools {
    controller: Arc<Controller>,
    defaults: RunOptions,
    observer: Option<Observer>,
    surfaces: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl DgpTools {
    /// Tools over `controller`; runs default to `defaults` (a call may ask fewer or more steps,
    /// up to [`MAX_STEPS`], or speculative mode).
    pub fn new(controller: Arc<Controller>, defaults: RunOptions) -> DgpTools {
        DgpTools {
            controller,
            defaults,
            observer: None,
            surfaces: Arc::default(),
        }
    }

    /// Also hands every event to `observer` as it happens.
    pub fn with_observer(mut self, observer: impl Fn(&Value) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The declarations (name, description, JSON Schema, eligibility) of both tools.
    pub fn declarations() -> [ToolDecl; 2] {
        decl::declarations()
    }

    /// Declares both tools on `host`, bound to this controller. Returns their handler ids
    /// (`dgp_surfaces`, `dgp_run_surface`).
    pub fn register(self, host: &mut AgentHost) -> Result<Vec<HandlerId>, ToolsError> {
        let [list, run] = Self::declarations();
        let ctl = self.controller.clone();
        let a = host.register(
            list,
            tool_fn(move |_args: Value, mut ctx| {
                let ctl = ctl.clone();
                async move {
                    tokio::select! {
                        biased;
                        _ = ctx.aborted() => Err(ToolError::Aborted),
                        r = ctl.surfaces() => r
                            .map(|s| json!({"surfaces": s}))
                            .map_err(|e| failed(&e.to_json())),
                    }
                }
            }),
        )?;
        let tools = self;
        let b = host.register(
            run,
            tool_fn(move |args: Value, ctx| {
                let tools = tools.clone();
                async move { tools.run(args, StopSignal::new(ctx.abort_signal())).await }
            }),
        )?;
        Ok(vec![a, b])
    }

    /// Both tools as host tools of the agents runtime, over the tools `connect` gives. They
    /// connect on the first call (so a server can offer its own DGP app before it serves);
    /// a failed connection fails that call with the problem's code and is tried again by the
    /// next one. An abort raised before the connection is made settles the call `Aborted`.
    pub fn host_tools(
        connect: impl Fn() -> BoxFuture<Result<DgpTools, CallError>> + Send + Sync + 'static,
    ) -> HostTools {
        let connect = Arc::new(connect);
        let cell: Arc<tokio::sync::OnceCell<DgpTools>> = Arc::default();
        let run: CallHandler = Arc::new(move |tool: String, args: Value, abort| {
            let (cell, connect) = (cell.clone(), connect.clone());
            Box::pin(async move {
                let mut stop = StopSignal::new(abort.clone());
                let tools = tokio::select! {
                    biased;
                    _ = stop.raised() => return Settlement::Aborted,
                    t = cell.get_or_try_init(|| connect()) => t,
                };
                let tools = match tools {
                    Ok(t) => t,
                    Err(e) => return settlement(Err(failed(&e.to_json()))),
                };
                settlement(match tool.as_str() {
                    decl::SURFACES_TOOL => tokio::select! {
                        biased;
                        _ = stop.raised() => Err(ToolError::Aborted),
                        r = tools.controller.surfaces() => r
                            .map(|s| json!({"surfaces": s}))
                            .map_err(|e| failed(&e.to_json())),
                    },
                    decl::RUN_TOOL => tools.run(args, StopSignal::new(abort)).await,
                    other => {
                        let f = weft_core::tools::HandlerFailure::UnknownTool(other.to_owned());
                        Err(ToolError::failed(f.to_string(), f.code()))
                    }
                })
            }) as BoxFuture<Settlement<Value>>
        });
        HostTools {
            decls: Self::declarations().to_vec(),
            run,
            jobs: None,
        }
    }

    /// One `dgp_run_surface` call (arguments already checked against the schema).
    pub async fn run(&self, args: Value, mut stop: StopSignal) -> Result<Value, ToolError> {
        let (sid, opts) = decl::run_arguments(&args, self.defaults).ok_or_else(|| {
            ToolError::failed("`surface_id` must be a string", "INVALID_ARGUMENT")
        })?;
        // One run per surface at a time: a second call for the same surface waits its turn.
        let gate = self
            .surfaces
            .lock()
            .expect("the surface table is never poisoned")
            .entry(sid.clone())
            .or_default()
            .clone();
        let _held = tokio::select! {
            biased;
            _ = stop.raised() => {
                let run = SurfaceRun::never_began(&sid);
                if let Some(o) = &self.observer {
                    o(&run.stop().to_json());
                }
                return Ok(run.to_json());
            }
            g = gate.lock_owned() => g,
        };
        let observer = self.observer.clone();
        let mut on_event = move |e: &Value| {
            if let Some(o) = &observer {
                o(e);
            }
        };
        let run = self
            .controller
            .run_surface(&sid, opts, stop, &mut on_event)
            .await;
        Ok(run.to_json())
    }
}

/// A handler's result as the core's settlement.
fn settlement(r: Result<Value, ToolError>) -> Settlement<Value> {
    match r {
        Ok(v) => Settlement::Returned(v),
        Err(ToolError::Aborted) => Settlement::Aborted,
        Err(ToolError::Failed { message, code }) => Settlement::Threw { message, code },
    }
}

fn failed(problem: &Value) -> ToolError {
    ToolError::Failed {
        message: problem["detail"].as_str().unwrap_or("").to_owned(),
        code: problem["code"].as_str().map(str::to_owned),
    }
}
