//! A declarative application: states, the decisions each state offers, and what each answer
//! does. It drives the engine in the conformance vectors and from JavaScript, where an app can
//! be described as data. (ThreadDesk, in `examples/threaddesk`, is a hand-written [`App`].)
//!
//! ```json
//! {"name": "Demo", "resource_kind": "item", "policy": "demo-policy", "graph": {...},
//!  "services": [...], "surfaces": [{"id": "s1", "title": "First", "status": "open"}],
//!  "states": {"open": [{"node_id": "triage", "kind": "choice", "question": "...",
//!                       "options": [{"id": "close", "label": "Close", "meaning": "..."}],
//!                       "on": {"close": {"to": "closed", "outcome": "Closed."}}}]},
//!  "always": [{"node_id": "note", "kind": "input", "dispatch": "on_request", ...,
//!              "on": {"submit": {"record": "note", "field": "text"}}}]}
//! ```
//!
//! Shorthands: a decision's `dispatch` defaults to `automatic`, `evidence_ids` to every
//! observation, `execution` to the surface resource as conflict key; an option's
//! `input_schema` defaults to the empty object schema and its `effect` to a simulated internal
//! effect (`"human": true` makes it human-only); an input's `effect` likewise.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::FramesError;
use super::app::{App, Applied, ApplyCtx, Summary, SurfaceCtx};
use super::image::decode_image;
use super::types::*;

/// What an answer does to the scripted state.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    /// The next status.
    #[serde(default)]
    pub to: Option<String>,
    /// The receipt's outcome text.
    #[serde(default)]
    pub outcome: Option<String>,
    /// Consumes one service request of the surface budget.
    #[serde(default)]
    pub service: bool,
    /// Stores the answer's `field` (or the whole value) as text evidence labelled `record`.
    #[serde(default)]
    pub record: Option<String>,
    #[serde(default)]
    pub field: Option<String>,
    /// Trust of recorded text: `untrusted` (default, a user's words) or `derived`.
    #[serde(default)]
    pub trust: Option<Trust>,
    /// The answer value is an image upload `{mime_type, data_base64}`.
    #[serde(default)]
    pub image: bool,
    /// Appends the last recorded text (or the outcome) to the `bulletin` view.
    #[serde(default)]
    pub bulletin: bool,
}

#[derive(Clone, Debug)]
struct ScriptedDecision {
    decision: Decision,
    on: BTreeMap<String, Action>,
    /// Options hidden after they were chosen this many times on a surface.
    max_uses: BTreeMap<String, u32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SurfaceSpec {
    id: String,
    title: String,
    status: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    name: String,
    #[serde(default = "default_kind")]
    resource_kind: String,
    #[serde(default = "default_policy")]
    policy: String,
    graph: Graph,
    #[serde(default)]
    services: Vec<Service>,
    surfaces: Vec<SurfaceSpec>,
    states: BTreeMap<String, Vec<Value>>,
    #[serde(default)]
    always: Vec<Value>,
}

fn default_kind() -> String {
    "item".into()
}
fn default_policy() -> String {
    "policy".into()
}

/// One recorded text of a scripted surface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub label: String,
    pub text: String,
    pub trust: Trust,
    pub actor: String,
}

/// One image of a scripted surface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageRecord {
    pub sha256: String,
    pub mime_type: String,
    pub byte_length: u64,
    pub actor: String,
}

/// The state of a scripted surface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScriptedState {
    pub title: String,
    pub status: String,
    pub records: Vec<Record>,
    pub images: Vec<ImageRecord>,
    pub uses: BTreeMap<String, u32>,
}

/// A declarative [`App`].
#[derive(Clone, Debug)]
pub struct ScriptedApp {
    name: String,
    resource_kind: String,
    policy: String,
    graph: Graph,
    services: Vec<Service>,
    surfaces: Vec<SurfaceSpec>,
    states: BTreeMap<String, Vec<ScriptedDecision>>,
    always: Vec<ScriptedDecision>,
}

/// The default effect: a simulated internal change, committable by any authorized principal.
pub fn default_effect(human: bool) -> Value {
    json!({
        "world_mutation": if human { "external" } else { "internal" },
        "recovery": if human { "irreversible" } else { "unknown" },
        "data_egress": "none",
        "speculation": "forbidden",
        "required_actor": if human { "human" } else { "any_authorized" },
        "simulation": true
    })
}

fn parse_decision(v: &Value) -> Result<ScriptedDecision, FramesError> {
    let bad = |m: String| FramesError::InvalidMessage(format!("scripted decision: {m}"));
    let mut o = v
        .as_object()
        .cloned()
        .ok_or_else(|| bad("not an object".into()))?;
    let on: BTreeMap<String, Action> = match o.remove("on") {
        Some(on) => serde_json::from_value(on).map_err(|e| bad(e.to_string()))?,
        None => BTreeMap::new(),
    };
    o.entry("decision_id").or_insert(json!(""));
    o.entry("dispatch").or_insert(json!("automatic"));
    o.entry("evidence_ids").or_insert(json!([]));
    o.entry("execution")
        .or_insert(json!({"conflict_keys": [], "depends_on": []}));
    let mut max_uses = BTreeMap::new();
    if let Some(Value::Array(opts)) = o.get_mut("options") {
        for opt in opts {
            let opt = opt
                .as_object_mut()
                .ok_or_else(|| bad("option is not an object".into()))?;
            let human = opt
                .remove("human")
                .and_then(|h| h.as_bool())
                .unwrap_or(false);
            if let Some(n) = opt.remove("max_uses").and_then(|n| n.as_u64()) {
                let id = opt
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                max_uses.insert(id, n as u32);
            }
            opt.entry("input_schema").or_insert(
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            );
            opt.entry("effect").or_insert(default_effect(human));
        }
    }
    if o.get("kind") == Some(&json!("input")) {
        o.entry("effect").or_insert(default_effect(false));
    }
    let decision: Decision =
        serde_json::from_value(Value::Object(o)).map_err(|e| bad(e.to_string()))?;
    Ok(ScriptedDecision {
        decision,
        on,
        max_uses,
    })
}

impl ScriptedApp {
    /// Builds an app from its JSON description.
    pub fn from_json(v: &Value) -> Result<Self, FramesError> {
        let spec: Spec = serde_json::from_value(v.clone())
            .map_err(|e| FramesError::InvalidMessage(format!("scripted app: {e}")))?;
        let mut states = BTreeMap::new();
        for (k, ds) in &spec.states {
            states.insert(
                k.clone(),
                ds.iter()
                    .map(parse_decision)
                    .collect::<Result<Vec<_>, _>>()?,
            );
        }
        let always = spec
            .always
            .iter()
            .map(parse_decision)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ScriptedApp {
            name: spec.name,
            resource_kind: spec.resource_kind,
            policy: spec.policy,
            graph: spec.graph,
            services: spec.services,
            surfaces: spec.surfaces,
            states,
            always,
        })
    }

    fn decisions_for(&self, status: &str) -> impl Iterator<Item = &ScriptedDecision> {
        self.states
            .get(status)
            .into_iter()
            .flatten()
            .chain(self.always.iter())
    }
}

impl App for ScriptedApp {
    type State = ScriptedState;

    fn name(&self) -> &str {
        &self.name
    }
    fn resource_kind(&self) -> &str {
        &self.resource_kind
    }
    fn policy_id(&self) -> &str {
        &self.policy
    }
    fn graph(&self) -> &Graph {
        &self.graph
    }
    fn services(&self) -> &[Service] {
        &self.services
    }

    fn initial_surfaces(&self) -> Vec<(String, ScriptedState)> {
        self.surfaces
            .iter()
            .map(|s| {
                (
                    s.id.clone(),
                    ScriptedState {
                        title: s.title.clone(),
                        status: s.status.clone(),
                        records: vec![],
                        images: vec![],
                        uses: BTreeMap::new(),
                    },
                )
            })
            .collect()
    }

    fn summary(&self, state: &ScriptedState) -> Summary {
        Summary {
            title: state.title.clone(),
            state: state.status.clone(),
        }
    }

    fn observations(&self, ctx: &SurfaceCtx, s: &ScriptedState) -> Vec<Evidence> {
        let app_source = Source {
            kind: SourceKind::Application,
            id: self.name.clone(),
            model: None,
            based_on_frame: None,
            extensions: None,
        };
        let mut out = vec![Evidence {
            evidence_id: "state".into(),
            kind: EvidenceKind::Json,
            mime_type: "application/json".into(),
            required: true,
            trust: Trust::Observed,
            source: app_source,
            content: Some(
                json!({"title": s.title, "status": s.status, "service_calls": ctx.service_calls}),
            ),
            blob: None,
            derived_from: None,
            extensions: None,
        }];
        for (i, r) in s.records.iter().enumerate() {
            out.push(Evidence {
                evidence_id: format!("{}-{i}", r.label),
                kind: EvidenceKind::Text,
                mime_type: "text/plain".into(),
                required: true,
                trust: r.trust,
                source: Source {
                    kind: if r.trust == Trust::Derived {
                        SourceKind::Model
                    } else {
                        SourceKind::User
                    },
                    id: r.actor.clone(),
                    model: None,
                    based_on_frame: None,
                    extensions: None,
                },
                content: Some(Value::String(r.text.clone())),
                blob: None,
                derived_from: (r.trust == Trust::Derived).then(|| vec!["state".to_owned()]),
                extensions: None,
            });
        }
        for (i, im) in s.images.iter().enumerate() {
            out.push(Evidence {
                evidence_id: format!("image-{i}"),
                kind: EvidenceKind::Image,
                mime_type: im.mime_type.clone(),
                required: true,
                trust: Trust::Untrusted,
                source: Source {
                    kind: SourceKind::User,
                    id: im.actor.clone(),
                    model: None,
                    based_on_frame: None,
                    extensions: None,
                },
                content: None,
                blob: Some(Blob {
                    href: format!(
                        "/dgp/blobs/{}/{}",
                        super::engine::path_segment(ctx.surface_id),
                        im.sha256
                    ),
                    sha256: im.sha256.clone(),
                    byte_length: im.byte_length,
                    extensions: None,
                }),
                derived_from: None,
                extensions: None,
            });
        }
        out
    }

    fn decisions(
        &self,
        ctx: &SurfaceCtx,
        s: &ScriptedState,
        evidence: &[Evidence],
    ) -> Vec<Decision> {
        let ids: Vec<String> = evidence.iter().map(|e| e.evidence_id.clone()).collect();
        let resource = format!("{}:{}", self.resource_kind, ctx.surface_id);
        self.decisions_for(&s.status)
            .filter_map(|sd| {
                let mut d = sd.decision.clone();
                if d.evidence_ids.is_empty() {
                    d.evidence_ids = ids.clone();
                }
                if d.execution.conflict_keys.is_empty() {
                    d.execution.conflict_keys = vec![resource.clone()];
                }
                if let Some(opts) = &mut d.options {
                    opts.retain(|o| {
                        sd.max_uses
                            .get(&o.id)
                            .is_none_or(|max| s.uses.get(&o.id).copied().unwrap_or(0) < *max)
                    });
                    if opts.is_empty() {
                        return None;
                    }
                }
                Some(d)
            })
            .collect()
    }

    fn apply(
        &self,
        ctx: &ApplyCtx,
        s: &mut ScriptedState,
        decision: &Decision,
        answer: &Answer,
    ) -> Result<Applied, FramesError> {
        let (key, value) = match answer {
            Answer::Choice(c) => (c.choice.clone(), Value::Object(c.input.clone())),
            Answer::Value(v) => ("submit".to_owned(), v.value.clone()),
            Answer::Probability(p) => ("submit".to_owned(), json!(p.probability)),
            Answer::Score(x) => ("submit".to_owned(), json!(x.score)),
        };
        let action = self
            .decisions_for(&s.status)
            .find(|sd| sd.decision.node_id == decision.node_id)
            .and_then(|sd| sd.on.get(&key))
            .cloned()
            .unwrap_or_default();
        let mut applied = Applied {
            outcome: action
                .outcome
                .clone()
                .unwrap_or_else(|| format!("Applied `{key}`.")),
            ..Applied::default()
        };
        applied.service_call = action.service;
        if let Some(label) = &action.record {
            let text = match &action.field {
                Some(f) => value.get(f).cloned().unwrap_or(Value::Null),
                None => value.clone(),
            };
            let text = match text {
                Value::String(t) => t,
                other => other.to_string(),
            };
            s.records.push(Record {
                label: label.clone(),
                text,
                trust: action.trust.unwrap_or(Trust::Untrusted),
                actor: ctx.principal.id.clone(),
            });
        }
        if action.image {
            let mime = value
                .get("mime_type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let data = value
                .get("data_base64")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let blob = decode_image(mime, data)?;
            s.images.push(ImageRecord {
                sha256: blob.sha256.clone(),
                mime_type: blob.mime_type.clone(),
                byte_length: blob.bytes.len() as u64,
                actor: ctx.principal.id.clone(),
            });
            applied.blobs.push(blob);
        }
        if action.bulletin {
            let text = s
                .records
                .last()
                .map_or_else(|| applied.outcome.clone(), |r| r.text.clone());
            let mut body = Map::new();
            body.insert("text".into(), Value::String(text));
            applied.entries.push(("bulletin".into(), body));
        }
        if let Answer::Choice(_) = answer {
            *s.uses.entry(key).or_insert(0) += 1;
        }
        if let Some(to) = action.to {
            s.status = to;
        }
        Ok(applied)
    }
}
