//! The DGP 0.1 wire records (`dgp.schema.json`), as Rust types.
//!
//! Every record denies unknown fields, so a message that parses here has no field the schema
//! does not know. Constraints serde cannot express (identifier lengths, ranges, the evidence
//! `content`/`blob` choice) are checked by [`super::validate`].

use std::collections::BTreeMap;

use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

/// The protocol version this engine speaks.
pub const DGP_VERSION: &str = "0.1";

/// Free-form `extensions` objects carried by every record.
pub type Extensions = Map<String, Value>;

/// The `dgp` field: always the string `"0.1"`; any other value fails to parse.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dgp;

impl Serialize for Dgp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(DGP_VERSION)
    }
}

impl<'de> Deserialize<'de> for Dgp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == DGP_VERSION {
            Ok(Dgp)
        } else {
            Err(D::Error::custom(format!(
                "dgp must be \"{DGP_VERSION}\", got \"{s}\""
            )))
        }
    }
}

/// Deserializes a present field (even `null`) as `Some`, so "absent" and "null" differ.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name { $(#[serde(rename = $text)] $variant),+ }
        impl $name {
            /// The wire string.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
    };
}

wire_enum!(
    /// Who produced an evidence item.
    SourceKind { Application = "application", User = "user", Model = "model" }
);
wire_enum!(
    /// The representation of an evidence item.
    EvidenceKind {
        Text = "text", Json = "json", Image = "image", Audio = "audio", Video = "video",
        Document = "document", Timeseries = "timeseries"
    }
);
wire_enum!(
    /// Provenance class of evidence (§4.2): application observation, user/external content, or
    /// inference.
    Trust { Observed = "observed", Untrusted = "untrusted", Derived = "derived" }
);
wire_enum!(
    /// Whether an effect changes the world.
    WorldMutation { None = "none", Internal = "internal", External = "external" }
);
wire_enum!(
    /// How an effect can be undone.
    Recovery {
        NotApplicable = "not_applicable", Exact = "exact", Compensatable = "compensatable",
        Irreversible = "irreversible", Unknown = "unknown"
    }
);
wire_enum!(
    /// Where data goes when an effect runs.
    DataEgress { None = "none", ApprovedProvider = "approved_provider", External = "external" }
);
wire_enum!(
    /// Whether an effect may run speculatively.
    Speculation {
        EvaluationOnly = "evaluation_only", SandboxOnly = "sandbox_only", Forbidden = "forbidden"
    }
);
wire_enum!(
    /// Who may commit an effect: any authorized principal, or an authenticated human only.
    RequiredActor { AnyAuthorized = "any_authorized", Human = "human" }
);
wire_enum!(
    /// The judgment shape of a decision.
    DecisionKind { Choice = "choice", Score = "score", Probability = "probability", Input = "input" }
);
wire_enum!(
    /// Whether the normal controller loop should take a decision now, or only on request.
    Dispatch { Automatic = "automatic", OnRequest = "on_request" }
);
wire_enum!(
    /// Graph disclosure level (§8).
    DisclosureLevel { Next = "next", Horizon = "horizon", Full = "full" }
);
wire_enum!(
    /// Whether a graph (or preview) discloses every declared template node.
    Completeness { CompleteTemplate = "complete_template", Partial = "partial" }
);
wire_enum!(
    /// What kind of resolver produced an assessment (a client claim, never authentication).
    ResolverKind { DecisionModel = "decision_model", Llm = "llm", Human = "human", Rule = "rule" }
);
wire_enum!(
    /// Live assessments may be committed; speculative ones never.
    Mode { Live = "live", Speculative = "speculative" }
);
wire_enum!(
    /// Whether a resolver answered or abstained.
    ResultStatus { Answered = "answered", Abstain = "abstain" }
);
wire_enum!(
    /// Kind of a static graph node.
    NodeKind { Choice = "choice", Input = "input", Terminal = "terminal" }
);
wire_enum!(
    /// What a service does.
    ServiceOperation { Reason = "reason", GenerateText = "generate_text" }
);
wire_enum!(
    /// A receipt's status: the described local transition completed.
    ReceiptStatus { Succeeded = "succeeded" }
);
wire_enum!(
    /// The only manifest status of DGP 0.1.
    ManifestStatus { Experimental = "experimental" }
);
wire_enum!(
    /// A service's output kind.
    OutputKind { Text = "text" }
);
wire_enum!(
    /// A service's declared side effects.
    SideEffects { ProviderCostAndDataEgress = "provider_cost_and_data_egress" }
);
wire_enum!(
    /// How resolver claims are held by the server: asserted by the client, not verified.
    ClaimProvenance { ClientAsserted = "client_asserted" }
);

/// One resource revision a frame was read at; a commit checks it is still current.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadVersion {
    pub resource_id: String,
    pub revision: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// Provenance of an evidence item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub kind: SourceKind,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_frame: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// An immutable, SHA-256-addressed binary reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blob {
    pub href: String,
    pub sha256: String,
    pub byte_length: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// One observation in a frame: inline content or a blob, never both.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    pub evidence_id: String,
    pub kind: EvidenceKind,
    pub mime_type: String,
    pub required: bool,
    pub trust: Trust,
    pub source: Source,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub content: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<Blob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived_from: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// The separate dimensions of an effect (§10.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Effect {
    pub world_mutation: WorldMutation,
    pub recovery: Recovery,
    pub data_egress: DataEgress,
    pub speculation: Speculation,
    pub required_actor: RequiredActor,
    pub simulation: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// One option of a choice decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionOption {
    pub id: String,
    pub label: String,
    pub meaning: String,
    pub input_schema: Map<String, Value>,
    pub effect: Effect,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// How a service can fulfil an input decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fulfillment {
    pub service_id: String,
    pub purpose: String,
    pub output_field: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// Scheduling hints of a decision: coarse conflict domains and satisfied prerequisites.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Execution {
    pub conflict_keys: Vec<String>,
    pub depends_on: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// A currently offered decision instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub decision_id: String,
    pub node_id: String,
    pub kind: DecisionKind,
    pub question: String,
    pub evidence_ids: Vec<String>,
    pub dispatch: Dispatch,
    pub execution: Execution,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<DecisionOption>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levels: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fulfillment: Option<Fulfillment>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

impl Decision {
    /// The option with this id, for choice decisions.
    pub fn option(&self, id: &str) -> Option<&DecisionOption> {
        self.options.as_deref()?.iter().find(|o| o.id == id)
    }
}

/// A static graph edge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub on: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// A bounded or full preview of the declared template, attached to a frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preview {
    pub graph_id: String,
    pub graph_version: String,
    /// Always present on the wire: `null` for full disclosure.
    pub horizon: Option<u64>,
    pub completeness: Completeness,
    pub nodes: Vec<String>,
    pub edges: Vec<Edge>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// What disclosure was asked for and what the frame provides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disclosure {
    pub requested: DisclosureLevel,
    pub provided: DisclosureLevel,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<Preview>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// An immutable observation of a surface at a state/policy revision (§3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frame {
    pub dgp: Dgp,
    pub frame_id: String,
    pub surface_id: String,
    pub graph_id: String,
    pub graph_version: String,
    pub policy_ref: String,
    pub created_at: String,
    pub expires_at: String,
    pub read_set: Vec<ReadVersion>,
    pub observations: Vec<Evidence>,
    pub decisions: Vec<Decision>,
    pub disclosure: Disclosure,
    pub service_calls_remaining: u64,
    pub required_features: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

impl Frame {
    /// The decision instance with this id.
    pub fn decision(&self, decision_id: &str) -> Option<&Decision> {
        self.decisions.iter().find(|d| d.decision_id == decision_id)
    }
}

/// Who claims to have produced an assessment (recorded, never trusted for authority).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resolver {
    pub kind: ResolverKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// Optional uncertainty data of a result (§5.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Uncertainty {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<BTreeMap<String, f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_confidence: Option<f64>,
    pub semantics: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_propensity: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// `{"choice": id, "input": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChoiceAnswer {
    pub choice: String,
    pub input: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// `{"value": any}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueAnswer {
    pub value: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// `{"probability": p}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbabilityAnswer {
    pub probability: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// `{"score": s}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreAnswer {
    pub score: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// An answer: exactly one of the four shapes of the schema's `oneOf`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Answer {
    Choice(ChoiceAnswer),
    Value(ValueAnswer),
    Probability(ProbabilityAnswer),
    Score(ScoreAnswer),
}

/// The result of an assessment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssessmentResult {
    pub status: ResultStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<Uncertainty>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// An explicit assumption of a speculative assessment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assumption {
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_decision_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_choice: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// `POST /dgp/assessments` body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssessmentRequest {
    pub dgp: Dgp,
    pub assessment_id: String,
    pub frame_id: String,
    pub decision_id: String,
    pub mode: Mode,
    pub resolver: Resolver,
    pub result: AssessmentResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assumptions: Option<Vec<Assumption>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_features: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// A recorded, immutable assessment: the request plus what the server appended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assessment {
    pub dgp: Dgp,
    pub assessment_id: String,
    pub frame_id: String,
    pub decision_id: String,
    pub mode: Mode,
    pub resolver: Resolver,
    pub result: AssessmentResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assumptions: Option<Vec<Assumption>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_features: Option<Vec<String>>,
    pub recorded_at: String,
    pub submitted_by: String,
    pub claim_provenance: ClaimProvenance,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

impl Assessment {
    /// The record of `req`, as submitted by `principal` at `recorded_at`.
    pub fn record(req: AssessmentRequest, principal: &str, recorded_at: String) -> Self {
        Assessment {
            dgp: Dgp,
            assessment_id: req.assessment_id,
            frame_id: req.frame_id,
            decision_id: req.decision_id,
            mode: req.mode,
            resolver: req.resolver,
            result: req.result,
            assumptions: req.assumptions,
            required_features: req.required_features,
            recorded_at,
            submitted_by: principal.to_owned(),
            claim_provenance: ClaimProvenance::ClientAsserted,
            extensions: req.extensions,
        }
    }
}

/// `POST /dgp/commits` body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
    pub dgp: Dgp,
    pub frame_id: String,
    pub decision_id: String,
    pub assessment_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_features: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// The immutable outcome of a successful commit (§7.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub dgp: Dgp,
    pub receipt_id: String,
    pub frame_id: String,
    pub decision_id: String,
    pub assessment_id: String,
    pub submitted_by: String,
    pub status: ReceiptStatus,
    pub committed_at: String,
    pub state_revision: u64,
    pub effect: Effect,
    pub outcome: String,
    pub next_frame_href: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// A static graph node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub id: String,
    pub kind: NodeKind,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// A versioned graph template (descriptive, never an executable guard language).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Graph {
    pub dgp: Dgp,
    pub graph_id: String,
    pub graph_version: String,
    pub completeness: Completeness,
    pub semantics: String,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// A named service that can fulfil input nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    pub service_id: String,
    pub operation: ServiceOperation,
    pub input_modalities: Vec<String>,
    pub output_kind: OutputKind,
    pub max_output_chars: u64,
    pub side_effects: SideEffects,
    pub purpose: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// Discovery links of a manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Links {
    pub surfaces: String,
    pub graphs: String,
    pub assessments: String,
    pub commits: String,
    pub services: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// The discovery document (`GET /.well-known/dgp`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub dgp: Dgp,
    pub name: String,
    pub status: ManifestStatus,
    pub features: Vec<String>,
    pub evidence_modalities: Vec<String>,
    pub decision_kinds: Vec<String>,
    pub input_schema_dialect: String,
    pub links: Links,
    pub auth: String,
    pub idempotency_retention: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// An `application/problem+json` error record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    pub code: String,
    pub dgp: Dgp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}
