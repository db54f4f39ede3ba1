//! Decision frames: a DGP 0.1 (Decision Graph Protocol) engine.
//!
//! An application publishes what can be judged, supplied and committed in its current state.
//! The engine turns that into immutable frames (observations, decision instances, a read set of
//! resource revisions including the shared policy), records assessments, and guards commits in
//! the order the specification prescribes before the app applies a transition and a receipt is
//! issued. It is sans-IO: time and id seeds come in, write batches come out, and the host makes
//! each batch durable before releasing the result.
//!
//! # Call order
//!
//! In full in [`engine`] (the server) and [`controller::run`] (a client's run); in short:
//!
//! ```text
//! server, per request:
//!     let (persist, pending) = engine.frame_json(now, ..)? | assess | commit | ...split();
//!     store.write(persist.writes()); fsync;
//!     answer(pending.release(persist.ack()));        // only once the writes are durable
//! client (one surface's run):
//!     while let Some(out) = run.poll_output() { Http / Judge / Generate → carry it, answer
//!         with handle_http / handle_judgment / handle_text; Done(report) → finished }
//!     arm one timer at run.poll_timeout() → handle_timeout(now); a stop → handle_stop(now)
//! ```
//!
//! * [`types`] — the wire records of `dgp.schema.json`.
//! * [`engine`] — surfaces, frames, assessments, commits, receipts, idempotency, budgets.
//! * [`app`] — the seam an application implements ([`App`]).
//! * [`validate`] — strict JSON, schema constraints, input-schema validation.
//! * [`controller`] — the client side (`weft agent`, JS `dgpTools`): the rules, one surface's
//!   run as a sans-IO machine, the HTTP rules and the agent tools' declarations.
//! * [`fixtures`] — the controller's deterministic fixture judge and text service.
//! * [`model_judge`] — the model-backed judge and text service: requests, answer validation.
//! * [`scripted`] — a declarative [`App`] (used by the conformance vectors and from JS).

pub mod app;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod controller;
pub mod engine;
mod error;
pub mod features;
pub mod fixtures;
pub mod graph;
pub mod image;
pub mod model_judge;
pub mod scripted;
pub mod time;
pub mod types;
pub mod validate;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_multi;

pub use app::{App, Applied, ApplyCtx, Principal, Role, Summary, SurfaceCtx};
pub use engine::{
    BlobMeta, COMMIT_LOCK_ATTEMPTS, Committed, Done, Engine, EngineConfig, EngineStats, Entry,
    LogWindow, Pending, Persist, Persisted, Prepared, RecordKind, Refreshed, Snapshot, Write,
};
pub use error::FramesError;
pub use scripted::ScriptedApp;
