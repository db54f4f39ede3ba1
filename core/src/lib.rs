//! weft-core: every rule of weft, with no I/O.
//!
//! The core is driven by explicit inputs that carry the current time and produces outputs the
//! host drains (sans-IO, in the style of quinn-proto). It never touches files, sockets,
//! threads, clocks, randomness or the environment, so one implementation runs natively under
//! Tokio and as WebAssembly in browsers and Node.
//!
//! Capabilities, one module each:
//! * [`actors`] — agent chat as a persisted graph of actor nodes: spawn lineage, metathread,
//!   wait graph, close-out policy, projections; the storage seam its hosts implement.
//! * [`jobs`] — the portable job registry and the Worker endpoint protocol.
//! * [`ops`] — published controls, the cell graph, calculations and operations.
//! * [`frames`] — decision frames: a DGP 0.1 engine (frames, assessments, guarded commits).
//! * [`model`] — model providers as codecs: OpenAI and Anthropic streaming wire formats,
//!   error classification and the retry rule.
//! * [`tools`] — agent sessions: the parallel tool scheduler, turn state and mailbox admission.
//! * [`codes`] — every error code the product exposes, listed once, and the host-boundary
//!   outcomes (`HostError`: `DISPOSED`, `WAIT_TIMED_OUT`, ...) so that no host makes one up.
//! * `conformance` (cargo feature `conformance`: test machinery, not product API) — the
//!   data-driven vectors every host runs against this core, one step driver for every suite.

/// Declares a numeric identity: a `u64` newtype, serialized as the bare number and displayed
/// with a prefix (`job-7`, `op-3`). Defined before the modules so that each can use it.
macro_rules! numeric_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
            ::serde::Serialize, ::serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub u64);
        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

pub mod actors;
pub mod agents;
mod calendar;
pub mod codes;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod fields;
pub mod frames;
pub mod jobs;
pub mod model;
pub mod ops;
pub mod time;
pub mod tools;
pub mod value;
pub mod vecmap;

pub use time::{Mono, Wall};

/// Errors with a stable, machine-readable code (`STALE_FRAME`, `INPUT_UNSUPPORTED`, ...):
/// hosts expose it as JS `Error.code` and HTTP problem `code`.
pub trait ErrorCode: std::error::Error {
    /// The stable code.
    fn code(&self) -> &'static str;
}

/// Property-test case count: `default` (small, so the suite stays fast), unless `PROPTEST_CASES`
/// asks for another count (for long local runs). proptest reads the variable itself, into its
/// default configuration: a count other than its built-in 256 is the variable's.
#[cfg(test)]
pub(crate) fn test_cases(default: u32) -> u32 {
    const PROPTEST_BUILT_IN: u32 = 256;
    match proptest::test_runner::Config::default().cases {
        PROPTEST_BUILT_IN => default,
        configured => configured,
    }
}
