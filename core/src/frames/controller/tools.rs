//! The DGP controller as agent tools, declared once for every host:
//!
//! - `dgp_surfaces` lists the server's surfaces (read-only; parallel-eligible; safe to cancel).
//! - `dgp_run_surface` drives one surface with a [`super::run::Run`] until it stops and returns
//!   its [`super::run::RunReport::to_json`]. Parallel-eligible: different surfaces are
//!   independent (the server checks freshness per surface); hosts queue two calls for the
//!   same surface instead of racing them. Safe to cancel: an abort stops the run at its next
//!   safe point, so a cancelled run returns normally with an `interrupted` stop and every
//!   commit it made listed with its receipt.

use serde_json::{Value, json};

use super::run::RunOptions;
use crate::tools::ToolDecl;

/// Name of the tool listing surfaces.
pub const SURFACES_TOOL: &str = "dgp_surfaces";
/// Name of the tool driving one surface.
pub const RUN_TOOL: &str = "dgp_run_surface";
/// The most steps one `dgp_run_surface` call may take.
pub const MAX_STEPS: u32 = 32;

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

/// The surface and options of one `dgp_run_surface` call (arguments already checked against
/// the schema): `max_steps` clamped to `1..=MAX_STEPS`, absent fields from `defaults`.
/// `None` when `surface_id` is not a string.
pub fn run_arguments(args: &Value, defaults: RunOptions) -> Option<(String, RunOptions)> {
    let sid = args["surface_id"].as_str()?.to_owned();
    let opts = RunOptions {
        steps: args["max_steps"]
            .as_u64()
            .map_or(defaults.steps, |n| n.clamp(1, MAX_STEPS as u64) as u32),
        speculative: args["speculative"]
            .as_bool()
            .unwrap_or(defaults.speculative),
    };
    Some((sid, opts))
}
