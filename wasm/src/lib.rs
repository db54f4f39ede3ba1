//! weft as WebAssembly: wasm-bindgen bindings of weft-core for browsers and Node.
//!
//! The bindings translate only: JS values in, core calls, JS values out. The hand-written JS
//! package (`wasm/js`) adds transports (DOM Worker, `worker_threads`), timers and Promises.

mod actors;
mod agent;
mod frames;
mod jobs;
mod js;
mod ops;

pub use actors::{ActorGraphJs, actor_config};
pub use agent::{AgentSession, validate_tool_arguments};
pub use frames::{FramesEngine, evidence_for};
pub use jobs::JobRegistry;
pub use ops::OpsApp;
