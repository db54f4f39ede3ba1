//! The seam between the DGP engine and an application: what the app publishes for a state and
//! how it applies an accepted transition. The engine owns every protocol rule (ids, freshness,
//! idempotency, authorization, budgets, records); the app owns only its domain.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::FramesError;
use super::types::{Answer, Decision, Evidence, Graph, Resolver, Service};

/// An authenticated principal. The role comes from the server's credential map, never from a
/// request body.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Principal {
    /// Stable id recorded as `submitted_by`.
    pub id: String,
    pub role: Role,
}

/// What a principal may do. Only a `Human` may commit human-required effects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Human,
    Agent,
}

impl Principal {
    /// A human principal.
    pub fn human(id: impl Into<String>) -> Self {
        Principal {
            id: id.into(),
            role: Role::Human,
        }
    }
    /// An agent principal.
    pub fn agent(id: impl Into<String>) -> Self {
        Principal {
            id: id.into(),
            role: Role::Agent,
        }
    }
}

/// What the app sees of a surface when it publishes a frame.
#[derive(Clone, Debug)]
pub struct SurfaceCtx<'a> {
    pub surface_id: &'a str,
    /// The surface resource's revision.
    pub revision: u64,
    /// Logical service requests committed on this surface so far.
    pub service_calls: u32,
    /// The per-surface service-request budget.
    pub service_budget: u32,
}

impl SurfaceCtx<'_> {
    /// Service requests still allowed on this surface.
    pub fn service_calls_remaining(&self) -> u32 {
        self.service_budget.saturating_sub(self.service_calls)
    }
}

/// What the app sees when it applies an accepted transition.
#[derive(Clone, Debug)]
pub struct ApplyCtx<'a> {
    pub surface_id: &'a str,
    pub frame_id: &'a str,
    pub assessment_id: &'a str,
    pub principal: &'a Principal,
    /// The resolver the assessment claims (recorded as provenance only).
    pub resolver: &'a Resolver,
    /// The service requests already used, and the budget (the engine enforces it).
    pub service_calls: u32,
    pub service_budget: u32,
}

/// The result of applying a transition to the app's state.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    /// What happened, precisely (a receipt must not claim more than was done).
    pub outcome: String,
    /// Whether the transition consumes one logical service request of the surface's budget.
    /// The engine refuses it with `BUDGET_EXHAUSTED` when none is left.
    pub service_call: bool,
    /// Entries appended to app read views (e.g. the ThreadDesk bulletin), as `(view, body)`.
    pub entries: Vec<(String, Map<String, Value>)>,
    /// Binary evidence to store, addressed by SHA-256 within the surface.
    pub blobs: Vec<super::image::ImageBlob>,
    /// Items appended to the surface's append-only logs, as `(log, evidence)`: each is stored
    /// once (never again with the state) and frames show the newest items within the frame
    /// budget, after a `<log>-log` summary with the count and a link to earlier pages. The
    /// engine assigns the evidence id `<log>-<index>`; log names are `[a-z_]+`.
    pub appended: Vec<(String, Evidence)>,
}

/// A surface's summary line in `GET /dgp/surfaces`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub title: String,
    pub state: String,
}

/// An application published through DGP.
///
/// Everything here is pure: the engine calls it with the current state and decides the rest.
/// `decisions` must be a function of the state and context alone, because the engine calls it
/// again at commit time to check that a decision is still available.
pub trait App {
    /// The per-surface domain state, persisted by the engine as JSON.
    type State: Clone + Serialize + DeserializeOwned;

    /// The application name (manifest `name`).
    fn name(&self) -> &str;
    /// The resource kind of surfaces in read sets: `thread` gives `thread:<surface id>`.
    fn resource_kind(&self) -> &str;
    /// The id of the shared policy resource: `thread-policy` gives `policy:thread-policy`.
    fn policy_id(&self) -> &str;
    /// The versioned graph template every surface of this app follows.
    fn graph(&self) -> &Graph;
    /// Services that can fulfil input nodes.
    fn services(&self) -> &[Service];
    /// The surfaces that exist when the store is empty.
    fn initial_surfaces(&self) -> Vec<(String, Self::State)>;
    /// The summary of a surface.
    fn summary(&self, state: &Self::State) -> Summary;
    /// The observations of a frame for this state.
    fn observations(&self, ctx: &SurfaceCtx, state: &Self::State) -> Vec<Evidence>;
    /// The decision instances offered in this state. `decision_id` is assigned by the engine.
    fn decisions(
        &self,
        ctx: &SurfaceCtx,
        state: &Self::State,
        evidence: &[Evidence],
    ) -> Vec<Decision>;
    /// Applies an accepted, validated answer of `decision` to `state` (a copy: on error the
    /// engine discards it, so a refused transition changes nothing).
    fn apply(
        &self,
        ctx: &ApplyCtx,
        state: &mut Self::State,
        decision: &Decision,
        answer: &Answer,
    ) -> Result<Applied, FramesError>;
}
