//! ThreadDesk: a small coding-thread board with two interfaces, a browser UI for people and
//! DGP 0.1 decision frames for agents, both over the same guarded commits.
//!
//! Each thread has its own revision (kept by the engine), status, log, retry count, derived
//! analysis and optional draft. Notes and image evidence are append-only engine logs (`note`,
//! `image`): each is stored once, and frames show the newest within the frame budget after a
//! `note-log` / `image-log` summary that counts them and links to earlier pages. The state
//! machine:
//!
//! ```text
//! blocked        --recovery-->   ready | needs_analysis | investigating | paused
//! needs_analysis --analysis_result (service text, trust=derived)--> blocked
//! ready          --update-->     needs_draft | done
//! needs_draft    --draft_result (service text)--> review
//! review         --review-->     published (human only, local bulletin) | held | done
//! any state      --note / attach_image (on request)--> same state, new revision
//! ```
//!
//! Nothing real happens: a retry is simulated and says so, publication appends to a local
//! bulletin read view. The app is pure (no I/O) and runs wherever the engine runs.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use weft_core::frames::image::decode_image;
use weft_core::frames::types::*;
use weft_core::frames::{App, Applied, ApplyCtx, FramesError, Summary, SurfaceCtx};

/// The bulletin read view's name.
pub const BULLETIN: &str = "bulletin";

/// The static web UI, served by `weft serve` (thin client of the same protocol operations).
pub mod web {
    /// `index.html`.
    pub const INDEX_HTML: &str = include_str!("../web/index.html");
    /// `app.js`.
    pub const APP_JS: &str = include_str!("../web/app.js");
    /// `style.css`.
    pub const STYLE_CSS: &str = include_str!("../web/style.css");
}

/// Text from a reasoning service, kept as derived evidence (never an observed fact).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub text: String,
    pub frame_id: String,
    pub actor: String,
    pub model: String,
}

/// One thread's domain state (small and bounded: notes and images are engine logs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thread {
    pub title: String,
    pub status: String,
    pub log: String,
    pub retries: u32,
    pub reason_count: u32,
    pub draft_count: u32,
    pub analysis: Vec<Analysis>,
    pub draft: Option<String>,
}

impl Thread {
    fn new(title: &str, log: &str) -> Self {
        Thread {
            title: title.into(),
            status: "blocked".into(),
            log: log.into(),
            retries: 0,
            reason_count: 0,
            draft_count: 0,
            analysis: vec![],
            draft: None,
        }
    }
}

const REASON_PURPOSE: &str = "Provide a brief diagnostic assessment with uncertainties, not hidden chain-of-thought or commands.";
const DRAFT_PURPOSE: &str = "Write a factual status-update draft. Never publish it.";

/// The ThreadDesk application.
#[derive(Clone, Debug)]
pub struct ThreadDesk {
    graph: Graph,
    services: Vec<Service>,
    extra_threads: u32,
}

impl Default for ThreadDesk {
    fn default() -> Self {
        Self::new()
    }
}

fn edge(from: &str, to: &str, on: &str, guard: Option<&str>) -> Edge {
    Edge {
        from: from.into(),
        to: to.into(),
        on: on.into(),
        guard_summary: guard.map(Into::into),
        extensions: None,
    }
}

fn node(id: &str, kind: NodeKind, summary: &str) -> Node {
    Node {
        id: id.into(),
        kind,
        summary: summary.into(),
        extensions: None,
    }
}

fn effect(human: bool) -> Effect {
    Effect {
        world_mutation: if human {
            WorldMutation::External
        } else {
            WorldMutation::Internal
        },
        recovery: if human {
            Recovery::Irreversible
        } else {
            Recovery::Unknown
        },
        data_egress: DataEgress::None,
        speculation: Speculation::Forbidden,
        required_actor: if human {
            RequiredActor::Human
        } else {
            RequiredActor::AnyAuthorized
        },
        simulation: true,
        extensions: None,
    }
}

fn empty_schema() -> Map<String, Value> {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
        .as_object()
        .cloned()
        .expect("object")
}

fn text_schema(field: &str, max: u32) -> Map<String, Value> {
    json!({
        "type": "object",
        "properties": {field: {"type": "string", "minLength": 1, "maxLength": max}},
        "required": [field],
        "additionalProperties": false
    })
    .as_object()
    .cloned()
    .expect("object")
}

fn option(id: &str, label: &str, meaning: &str, human: bool) -> DecisionOption {
    DecisionOption {
        id: id.into(),
        label: label.into(),
        meaning: meaning.into(),
        input_schema: empty_schema(),
        effect: effect(human),
        extensions: None,
    }
}

fn evidence(
    id: &str,
    kind: EvidenceKind,
    content: Value,
    trust: Trust,
    source: Source,
) -> Evidence {
    Evidence {
        evidence_id: id.into(),
        kind,
        mime_type: if kind == EvidenceKind::Text {
            "text/plain"
        } else {
            "application/json"
        }
        .into(),
        required: true,
        trust,
        source,
        content: Some(content),
        blob: None,
        derived_from: None,
        extensions: None,
    }
}

fn source(kind: SourceKind, id: &str) -> Source {
    Source {
        kind,
        id: id.into(),
        model: None,
        based_on_frame: None,
        extensions: None,
    }
}

impl ThreadDesk {
    /// The app with its graph template (`thread-recovery`, version 1) and services.
    pub fn new() -> Self {
        use NodeKind::*;
        let graph = Graph {
            dgp: Dgp,
            graph_id: "thread-recovery".into(),
            graph_version: "1".into(),
            completeness: Completeness::CompleteTemplate,
            semantics: "Descriptive template, not an executable guard language. Current frames are authoritative. \
                        Repeated visits create new decision instances."
                .into(),
            nodes: vec![
                node("recovery", Choice, "Choose a bounded next recovery action."),
                node("analysis_result", Input, "Supply derived diagnostic text."),
                node("update", Choice, "Choose whether to draft an update or finish."),
                node("draft_result", Input, "Supply draft text."),
                node("review", Choice, "Publish, discard, or hold the draft."),
                node("done", Terminal, "No autonomous work remains."),
                node("note", Input, "Optional free-text note; available in every state."),
                node("attach_image", Input, "Optional image evidence; available in every state."),
            ],
            edges: vec![
                edge("recovery", "update", "retry", Some("The simulated retry always succeeds; real test outcomes would add branches.")),
                edge("recovery", "analysis_result", "request_reasoning", None),
                edge("analysis_result", "recovery", "submit", None),
                edge("recovery", "done", "investigate", None),
                edge("recovery", "done", "pause", None),
                edge("update", "draft_result", "draft_update", None),
                edge("update", "done", "finish", None),
                edge("draft_result", "review", "submit", None),
                edge("review", "done", "publish", Some("Authenticated human only; appends to a LOCAL bulletin.")),
                edge("review", "done", "discard", None),
                edge("review", "done", "hold", None),
            ],
            extensions: None,
        };
        let service = |id: &str, op, max, purpose: &str| Service {
            service_id: id.into(),
            operation: op,
            input_modalities: vec!["text".into(), "json".into()],
            output_kind: OutputKind::Text,
            max_output_chars: max,
            side_effects: SideEffects::ProviderCostAndDataEgress,
            purpose: purpose.into(),
            extensions: None,
        };
        ThreadDesk {
            extra_threads: 0,
            graph,
            services: vec![
                service("llm.reason", ServiceOperation::Reason, 4000, REASON_PURPOSE),
                service(
                    "llm.generate_text",
                    ServiceOperation::GenerateText,
                    2000,
                    DRAFT_PURPOSE,
                ),
            ],
        }
    }

    /// Also seeds `n` synthetic threads `thread-1000`, `thread-1001`, ... (for load tests; they
    /// exist only when the store is created).
    pub fn with_extra_threads(mut self, n: u32) -> Self {
        self.extra_threads = n;
        self
    }

    fn decision(
        ctx: &SurfaceCtx,
        node: &str,
        kind: DecisionKind,
        question: &str,
        ids: &[String],
        dispatch: Dispatch,
    ) -> Decision {
        Decision {
            decision_id: String::new(),
            node_id: node.into(),
            kind,
            question: question.into(),
            evidence_ids: ids.to_vec(),
            dispatch,
            execution: Execution {
                conflict_keys: vec![format!("thread:{}", ctx.surface_id)],
                depends_on: vec![],
                exclusive_group: None,
                extensions: None,
            },
            options: None,
            levels: None,
            input_schema: None,
            effect: None,
            fulfillment: None,
            extensions: None,
        }
    }
}

impl App for ThreadDesk {
    type State = Thread;

    fn name(&self) -> &str {
        "ThreadDesk"
    }
    fn resource_kind(&self) -> &str {
        "thread"
    }
    fn policy_id(&self) -> &str {
        "thread-policy"
    }
    fn graph(&self) -> &Graph {
        &self.graph
    }
    fn services(&self) -> &[Service] {
        &self.services
    }

    fn initial_surfaces(&self) -> Vec<(String, Thread)> {
        let extra = (0..self.extra_threads).map(|i| {
            (
                format!("thread-{}", 1000 + i),
                Thread::new(
                    "Synthetic load-test thread",
                    "Synthetic failure log for load testing; nothing ran.",
                ),
            )
        });
        let mut v = vec![
            (
                "thread-42".into(),
                Thread::new(
                    "Transient CI failure",
                    "Connection timed out before any test assertions ran. Database health was temporarily unavailable.",
                ),
            ),
            (
                "thread-73".into(),
                Thread::new(
                    "Ambiguous integration failure",
                    "Runner terminated. Last log line: loading configuration. No reliable error classification is available.",
                ),
            ),
        ];
        v.extend(extra);
        v
    }

    fn summary(&self, t: &Thread) -> Summary {
        Summary {
            title: t.title.clone(),
            state: t.status.clone(),
        }
    }

    fn observations(&self, ctx: &SurfaceCtx, t: &Thread) -> Vec<Evidence> {
        let app = source(SourceKind::Application, "threaddesk");
        let mut out = vec![
            evidence(
                "state",
                EvidenceKind::Json,
                json!({
                    "title": t.title, "status": t.status, "retries": t.retries,
                    "reason_count": t.reason_count, "draft_count": t.draft_count,
                    "service_calls": ctx.service_calls,
                }),
                Trust::Observed,
                app.clone(),
            ),
            evidence(
                "failure-log",
                EvidenceKind::Text,
                json!(t.log),
                Trust::Untrusted,
                app.clone(),
            ),
        ];
        for (i, a) in t.analysis.iter().enumerate() {
            let mut e = evidence(
                &format!("analysis-{i}"),
                EvidenceKind::Text,
                json!(a.text),
                Trust::Derived,
                Source {
                    kind: SourceKind::Model,
                    id: a.actor.clone(),
                    model: Some(a.model.clone()),
                    based_on_frame: Some(a.frame_id.clone()),
                    extensions: None,
                },
            );
            e.derived_from = Some(vec!["failure-log".into()]);
            out.push(e);
        }
        if let Some(d) = &t.draft {
            out.push(evidence(
                "draft",
                EvidenceKind::Text,
                json!(d),
                Trust::Derived,
                app,
            ));
        }
        out
    }

    fn decisions(&self, ctx: &SurfaceCtx, t: &Thread, ev: &[Evidence]) -> Vec<Decision> {
        use DecisionKind::*;
        let ids: Vec<String> = ev.iter().map(|e| e.evidence_id.clone()).collect();
        let mut out = Vec::new();
        let budget_left = ctx.service_calls_remaining() > 0;
        match t.status.as_str() {
            "blocked" => {
                let mut d = Self::decision(
                    ctx,
                    "recovery",
                    Choice,
                    "Which immediate recovery route fits the reported failure?",
                    &ids,
                    Dispatch::Automatic,
                );
                let mut opts = Vec::new();
                if t.retries < 1 {
                    opts.push(option(
                        "retry",
                        "Retry tests",
                        "A transient failure prevented the tests from running. Retry once.",
                        false,
                    ));
                }
                opts.push(option("investigate", "Investigate", "A persistent or unresolved issue needs engineering investigation. Stop autonomous recovery.", false));
                if t.reason_count < 1 && budget_left {
                    opts.push(option("request_reasoning", "Request reasoning", "The evidence is too ambiguous. Obtain one brief LLM analysis before judging again.", false));
                }
                opts.push(option(
                    "pause",
                    "Pause",
                    "Do not act further; leave this thread for a human.",
                    false,
                ));
                d.options = Some(opts);
                out.push(d);
            }
            "needs_analysis" => {
                let mut d = Self::decision(
                    ctx,
                    "analysis_result",
                    Input,
                    "Provide a brief diagnostic analysis and its uncertainties.",
                    &ids,
                    Dispatch::Automatic,
                );
                d.input_schema = Some(text_schema("analysis", 4000));
                d.effect = Some(effect(false));
                d.fulfillment = Some(Fulfillment {
                    service_id: "llm.reason".into(),
                    purpose: REASON_PURPOSE.into(),
                    output_field: "analysis".into(),
                    extensions: None,
                });
                out.push(d);
            }
            "ready" => {
                let mut d = Self::decision(
                    ctx,
                    "update",
                    Choice,
                    "Should this completed recovery receive a status-update draft?",
                    &ids,
                    Dispatch::Automatic,
                );
                let mut opts = Vec::new();
                if t.draft_count < 1 && budget_left {
                    opts.push(option(
                        "draft_update",
                        "Draft an update",
                        "Prepare a short factual update for human review.",
                        false,
                    ));
                }
                opts.push(option(
                    "finish",
                    "Finish without update",
                    "No status draft is needed.",
                    false,
                ));
                d.options = Some(opts);
                out.push(d);
            }
            "needs_draft" => {
                let mut d = Self::decision(
                    ctx,
                    "draft_result",
                    Input,
                    "Write a short factual status update. Do not claim unsimulated work happened.",
                    &ids,
                    Dispatch::Automatic,
                );
                d.input_schema = Some(text_schema("text", 2000));
                d.effect = Some(effect(false));
                d.fulfillment = Some(Fulfillment {
                    service_id: "llm.generate_text".into(),
                    purpose: DRAFT_PURPOSE.into(),
                    output_field: "text".into(),
                    extensions: None,
                });
                out.push(d);
            }
            "review" => {
                let mut d = Self::decision(
                    ctx,
                    "review",
                    Choice,
                    "Is this draft suitable for publication to the local bulletin?",
                    &ids,
                    Dispatch::Automatic,
                );
                d.options = Some(vec![
                    option(
                        "publish",
                        "Publish (human only)",
                        "The draft is accurate and ready. An authenticated human must authorize publication.",
                        true,
                    ),
                    option(
                        "discard",
                        "Discard",
                        "The draft is incorrect or unnecessary.",
                        false,
                    ),
                    option(
                        "hold",
                        "Hold for later",
                        "Keep the draft without publishing.",
                        false,
                    ),
                ]);
                out.push(d);
            }
            _ => {}
        }
        let mut note = Self::decision(
            ctx,
            "note",
            Input,
            "Add a free-text note to this thread.",
            &ids,
            Dispatch::OnRequest,
        );
        note.input_schema = Some(text_schema("text", 4000));
        note.effect = Some(effect(false));
        out.push(note);
        let mut image = Self::decision(
            ctx,
            "attach_image",
            Input,
            "Attach PNG, JPEG or WebP evidence (at most 256 KiB). It will be required evidence in subsequent frames.",
            &ids,
            Dispatch::OnRequest,
        );
        image.input_schema = Some(
            json!({
                "type": "object",
                "properties": {
                    "mime_type": {"enum": ["image/png", "image/jpeg", "image/webp"]},
                    "data_base64": {"type": "string", "minLength": 1, "maxLength": 350000}
                },
                "required": ["mime_type", "data_base64"],
                "additionalProperties": false
            })
            .as_object()
            .cloned()
            .expect("object"),
        );
        image.effect = Some(effect(false));
        out.push(image);
        out
    }

    fn apply(
        &self,
        ctx: &ApplyCtx,
        t: &mut Thread,
        d: &Decision,
        answer: &Answer,
    ) -> Result<Applied, FramesError> {
        let choice = match answer {
            Answer::Choice(c) => c.choice.as_str(),
            _ => "",
        };
        let value = match answer {
            Answer::Value(v) => &v.value,
            _ => &Value::Null,
        };
        let text = |field: &str| {
            value
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let mut out = Applied::default();
        fn done(t: &mut Thread, status: &str, outcome: &str) -> String {
            t.status = status.into();
            outcome.to_owned()
        }
        out.outcome = match (d.node_id.as_str(), choice) {
            ("recovery", "retry") => {
                t.retries += 1;
                done(
                    t,
                    "ready",
                    "Simulated one CI retry; the fixture result is success. No tests were actually run.",
                )
            }
            ("recovery", "request_reasoning") => {
                out.service_call = true;
                t.reason_count += 1;
                done(
                    t,
                    "needs_analysis",
                    "Reasoning requested. This transition did not call any provider.",
                )
            }
            ("recovery", "investigate") => {
                done(t, "investigating", "Thread left for human investigation.")
            }
            ("recovery", "pause") => done(t, "paused", "Thread paused."),
            ("analysis_result", _) => {
                t.analysis.push(Analysis {
                    text: text("analysis"),
                    frame_id: ctx.frame_id.into(),
                    actor: ctx.principal.id.clone(),
                    model: ctx
                        .resolver
                        .model
                        .clone()
                        .unwrap_or_else(|| "unspecified".into()),
                });
                done(
                    t,
                    "blocked",
                    "Stored derived analysis; recovery must be assessed again.",
                )
            }
            ("update", "draft_update") => {
                out.service_call = true;
                t.draft_count += 1;
                done(
                    t,
                    "needs_draft",
                    "Draft requested. No text was generated or published by this transition.",
                )
            }
            ("update", "finish") => done(t, "done", "Recovery finished without an update."),
            ("draft_result", _) => {
                t.draft = Some(text("text"));
                done(
                    t,
                    "review",
                    "Stored draft text for a new review decision. Nothing was published.",
                )
            }
            ("review", "publish") => {
                let mut body = Map::new();
                body.insert("text".into(), json!(t.draft.clone().unwrap_or_default()));
                out.entries.push((BULLETIN.into(), body));
                done(
                    t,
                    "published",
                    "Published to the LOCAL bulletin only. No external message was sent.",
                )
            }
            ("review", "discard") => {
                t.draft = None;
                done(t, "done", "Draft discarded.")
            }
            ("review", "hold") => done(t, "held", "Draft held without publication."),
            ("note", _) => {
                out.appended.push((
                    "note".into(),
                    evidence(
                        "",
                        EvidenceKind::Text,
                        json!(text("text")),
                        Trust::Untrusted,
                        source(SourceKind::User, &ctx.principal.id),
                    ),
                ));
                "Free-text note stored.".into()
            }
            ("attach_image", _) => {
                let blob = decode_image(&text("mime_type"), &text("data_base64"))?;
                out.appended.push((
                    "image".into(),
                    Evidence {
                        evidence_id: String::new(),
                        kind: EvidenceKind::Image,
                        mime_type: blob.mime_type.clone(),
                        required: true,
                        trust: Trust::Untrusted,
                        source: source(SourceKind::User, &ctx.principal.id),
                        content: None,
                        blob: Some(Blob {
                            href: format!("/dgp/blobs/{}/{}", ctx.surface_id, blob.sha256),
                            sha256: blob.sha256.clone(),
                            byte_length: blob.bytes.len() as u64,
                            extensions: None,
                        }),
                        derived_from: None,
                        extensions: None,
                    },
                ));
                out.blobs.push(blob);
                "Stored image evidence. A text-only resolver must not silently omit it.".into()
            }
            (node, choice) => {
                return Err(FramesError::DecisionNotAvailable(format!(
                    "ThreadDesk has no transition {node}/{choice}"
                )));
            }
        };
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
