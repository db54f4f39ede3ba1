//! weft as WebAssembly: wasm-bindgen bindings of weft-core for browsers and Node.
//!
//! The bindings translate only: JS values in, core calls, JS values out. The hand-written JS
//! package (`wasm/js`) adds transports (DOM Worker, `worker_threads`), timers and Promises.
//!
//! One feature per WebAssembly module of the package (see `Cargo.toml`): `jobs` (the job
//! registry), `apps` (`jobs` plus agent sessions and the ops app, which borrow its registry),
//! `frames`, `actors` and `models`. Each module carries only its bindings.

// A module built with some features leaves some shared helpers unused.
#![cfg_attr(
    not(all(
        feature = "jobs",
        feature = "apps",
        feature = "frames",
        feature = "actors",
        feature = "models"
    )),
    allow(dead_code)
)]

#[cfg(feature = "actors")]
mod actors;
#[cfg(feature = "apps")]
mod agent;
#[cfg(target_arch = "wasm32")]
mod alloc;
#[cfg(feature = "frames")]
mod frames;
#[cfg(feature = "jobs")]
mod jobs;
mod js;
#[cfg(feature = "models")]
mod models;
#[cfg(feature = "apps")]
mod ops;

#[cfg(feature = "actors")]
pub use actors::{ActorGraphJs, actor_config};
#[cfg(feature = "apps")]
pub use agent::{AgentSession, validate_tool_arguments};
#[cfg(feature = "frames")]
pub use frames::{
    FramesEngine, controller_judgment, controller_next_step, evidence_for, fixture_judgment,
    fixture_text, fulfilment_result,
};
#[cfg(feature = "jobs")]
pub use jobs::JobRegistry;
#[cfg(feature = "models")]
pub use models::{
    ModelCall, builtin_answer, max_error_body, no_model_configured, resolve_model_config,
};
#[cfg(feature = "apps")]
pub use ops::OpsApp;
