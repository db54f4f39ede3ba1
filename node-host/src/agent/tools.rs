//! The DGP controller as agent tools on an [`AgentHost`]:
//!
//! - `dgp_surfaces` lists the server's surfaces (read-only; parallel-eligible; safe to cancel).
//! - `dgp_run_surface` drives one surface with the controller until it stops and returns what
//!   happened ([`SurfaceRun::to_json`]). Parallel-eligible: different surfaces are independent
//!   (the server checks freshness per surface), and two calls for the same surface queue
//!   behind each other instead of racing. Safe to cancel: an abort stops the run at its next
//!   safe point (see [`super::controller`]), so a cancelled run returns normally with an
//!   `interrupted` stop and every commit it made listed with its receipt — nothing uncertain.
//!   A run that is still waiting for a commit's answer when the session's interrupt grace
//!   period ends is the one case left: the session reports it `uncertain`, the run finishes
//!   the commit, and its full report arrives in the agent's mailbox as a late result.
//!
//! The controller never commits a judgment whose effect requires a human: such a run ends with
//! `human_review_required`, and the tool result says so.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use weft_core::tools::{HandlerId, ToolDecl, ToolsError};

use super::controller::{Controller, RunOptions, StopSignal, SurfaceRun};
use crate::agent_host::{AgentHost, ToolError, tool_fn};

/// Name of the tool listing surfaces.
pub const SURFACES_TOOL: &str = "dgp_surfaces";
/// Name of the tool driving one surface.
pub const RUN_TOOL: &str = "dgp_run_surface";
/// The most steps one `dgp_run_surface` call may take.
pub const MAX_STEPS: u32 = 32;

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
        [
            ToolDecl::new(
                SURFACES_TOOL,
                "List the decision surfaces of the DGP server: surface_id, title, state and \
                 revision of each. Read-only.",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            )
            .parallel(true)
            .safe_to_cancel(true),
            ToolDecl::new(
                RUN_TOOL,
                "Drive one decision surface until it stops: read its frame, judge the next \
                 automatic decision, record the assessment and commit it, repeatedly. Returns \
                 why it ended (`quiescent`, `input_required`, `human_review_required` — an \
                 effect only an authenticated human may commit; the agent never commits it —, \
                 `abstained`, `speculative_recorded`, `stopped` with a problem such as \
                 STALE_FRAME, `step_budget_reached`, or `interrupted`), the receipts of the \
                 commits it made, a commit in doubt if any, and every event. Calls for \
                 different surfaces may run together.",
                json!({
                    "type": "object",
                    "properties": {
                        "surface_id": {"type": "string", "minLength": 1, "maxLength": 200,
                                       "description": "The surface to drive (see dgp_surfaces)."},
                        "max_steps": {"type": "integer", "minimum": 1, "maximum": MAX_STEPS,
                                      "description": "Judgments before giving up."},
                        "speculative": {"type": "boolean",
                                        "description": "Record judgments as speculative assessments and stop; never commit."}
                    },
                    "required": ["surface_id"],
                    "additionalProperties": false
                }),
            )
            .parallel(true)
            .safe_to_cancel(true),
        ]
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

    /// One `dgp_run_surface` call (arguments already checked against the schema).
    pub async fn run(&self, args: Value, mut stop: StopSignal) -> Result<Value, ToolError> {
        let sid = args["surface_id"]
            .as_str()
            .ok_or_else(|| ToolError::failed("`surface_id` must be a string", "INVALID_ARGUMENT"))?
            .to_owned();
        let opts = RunOptions {
            steps: args["max_steps"]
                .as_u64()
                .map_or(self.defaults.steps, |n| n.clamp(1, MAX_STEPS as u64) as u32),
            speculative: args["speculative"]
                .as_bool()
                .unwrap_or(self.defaults.speculative),
        };
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
                let v = json!({"surface": sid, "event": "interrupted", "at": "waiting_for_surface",
                               "detail": "another run of this surface was still going; this one never began"});
                if let Some(o) = &self.observer {
                    o(&v);
                }
                let run = SurfaceRun { surface: sid, events: vec![v.clone()], stop: v, steps: 0 };
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

fn failed(problem: &Value) -> ToolError {
    ToolError::Failed {
        message: problem["detail"].as_str().unwrap_or("").to_owned(),
        code: problem["code"].as_str().map(str::to_owned),
    }
}
