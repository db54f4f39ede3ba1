//! The DGP 0.1 engine: surfaces, immutable frames, assessments, guarded commits and receipts,
//! held in memory and expressed as write batches for the host's store (sans-IO).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::app::{App, ApplyCtx, Principal, Role, SurfaceCtx};
use super::graph::preview;
use super::time::{UnixMillis, rfc3339};
use super::types::*;
use super::validate::{self, fingerprint, parse_strict, sha256_hex, typed};
use super::{FramesError, features};

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// How long a frame may be committed against.
    pub frame_ttl_ms: u64,
    /// Logical service requests allowed per surface.
    pub service_budget: u32,
    /// Seeds the id generator on first open (the host supplies randomness; it is stored).
    pub id_seed: u64,
    /// Largest accepted message, in bytes.
    pub max_message_bytes: usize,
    /// `idempotency_retention` of the manifest.
    pub idempotency_retention: String,
    /// `auth` of the manifest.
    pub auth: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            frame_ttl_ms: 15 * 60 * 1000,
            service_budget: 3,
            id_seed: 0,
            max_message_bytes: 512 * 1024,
            idempotency_retention: "For the lifetime of the data directory; deleting it loses deduplication history."
                .into(),
            auth: "Bearer tokens, single local tenant. The principal comes from the server's token map, never from the request body."
                .into(),
        }
    }
}

/// The kinds of records the engine persists. The host stores `(kind, key) -> value` and must
/// make each batch durable atomically and in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKind {
    Meta,
    Surface,
    Snapshot,
    Frame,
    Assessment,
    Receipt,
    Idempotency,
    Entry,
    BlobMeta,
    /// Raw blob bytes. Not needed to open an engine: hosts serve them straight from the store.
    Blob,
}

impl RecordKind {
    /// Every kind.
    pub const ALL: [RecordKind; 10] = [
        RecordKind::Meta,
        RecordKind::Surface,
        RecordKind::Snapshot,
        RecordKind::Frame,
        RecordKind::Assessment,
        RecordKind::Receipt,
        RecordKind::Idempotency,
        RecordKind::Entry,
        RecordKind::BlobMeta,
        RecordKind::Blob,
    ];
    /// The stable storage name.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Meta => "meta",
            RecordKind::Surface => "surface",
            RecordKind::Snapshot => "snapshot",
            RecordKind::Frame => "frame",
            RecordKind::Assessment => "assessment",
            RecordKind::Receipt => "receipt",
            RecordKind::Idempotency => "idempotency",
            RecordKind::Entry => "entry",
            RecordKind::BlobMeta => "blob_meta",
            RecordKind::Blob => "blob",
        }
    }
    /// The kind with this storage name.
    pub fn parse(s: &str) -> Option<Self> {
        RecordKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One record to persist (insert or replace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub kind: RecordKind,
    pub key: String,
    pub value: Vec<u8>,
}

impl Write {
    fn json(kind: RecordKind, key: impl Into<String>, v: &impl Serialize) -> Self {
        Write {
            kind,
            key: key.into(),
            value: serde_json::to_vec(v).expect("records serialize"),
        }
    }
}

/// A result plus the writes the host must make durable before releasing it.
#[derive(Debug)]
pub struct Done<T> {
    pub value: T,
    pub writes: Vec<Write>,
}

/// What the engine publishes about one surface at one state/policy revision: a frame without
/// its per-read identity (frame id, times, disclosure). Frames share snapshots, so a frame
/// record stays small.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub surface_id: String,
    pub graph_id: String,
    pub graph_version: String,
    pub policy_ref: String,
    pub read_set: Vec<ReadVersion>,
    pub observations: Vec<Evidence>,
    /// Decision templates; `decision_id` is empty until a frame renders them.
    pub decisions: Vec<Decision>,
    pub service_calls_remaining: u64,
    pub required_features: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct FrameRecord {
    surface: String,
    snapshot: String,
    created: UnixMillis,
    expires: UnixMillis,
    requested: DisclosureLevel,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    horizon: Option<u32>,
}

struct FrameEntry {
    rec: FrameRecord,
    snapshot: Arc<Snapshot>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct SurfaceRecord<S> {
    revision: u64,
    service_calls: u32,
    state: S,
}

struct SurfaceEntry<S> {
    revision: u64,
    service_calls: u32,
    state: S,
    /// The snapshot of the current revision and its key, once built.
    snapshot: Option<(Arc<str>, Arc<Snapshot>)>,
    /// JSON templates of frames of the current snapshot, per disclosure variant.
    templates: Vec<(Variant, Arc<Template>)>,
}

/// A disclosure variant of a frame: the level and, for `horizon`, the bound.
type Variant = (DisclosureLevel, Option<u32>);

/// A placeholder frame id, replaced when a template is filled.
const TEMPLATE_ID: &str = "\u{1}F\u{1}";

/// A frame's JSON text with holes for its frame id and timestamps.
struct Template {
    parts: Vec<String>,
    holes: Vec<u8>,
}

impl Template {
    fn of(frame: &Frame) -> Template {
        let mut f = frame.clone();
        f.created_at = "\u{1}C\u{1}".into();
        f.expires_at = "\u{1}E\u{1}".into();
        let text = serde_json::to_string(&f).expect("frames serialize");
        let (mut parts, mut holes) = (Vec::new(), Vec::new());
        let mut rest = text.as_str();
        const MARK: &str = "\\u0001";
        while let Some(i) = rest.find(MARK) {
            let after = &rest[i + MARK.len()..];
            let kind = after.as_bytes()[0];
            parts.push(rest[..i].to_owned());
            holes.push(kind);
            rest = &after[1 + MARK.len()..];
        }
        parts.push(rest.to_owned());
        Template { parts, holes }
    }

    fn fill(&self, frame_id: &str, created: &str, expires: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            self.parts.iter().map(String::len).sum::<usize>() + 64 * self.holes.len(),
        );
        for (i, part) in self.parts.iter().enumerate() {
            out.extend_from_slice(part.as_bytes());
            if let Some(h) = self.holes.get(i) {
                out.extend_from_slice(match h {
                    b'F' => frame_id.as_bytes(),
                    b'C' => created.as_bytes(),
                    _ => expires.as_bytes(),
                });
            }
        }
        out
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct AssessmentRecord {
    principal: String,
    fingerprint: String,
    record: Assessment,
}

struct StoredAssessment {
    principal: String,
    fingerprint: String,
    record: Arc<Assessment>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct IdempotencyRecord {
    principal: String,
    key: String,
    fingerprint: String,
    receipt_id: String,
}

/// An entry of an app read view (e.g. the bulletin).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub view: String,
    pub id: String,
    pub surface: String,
    pub created_at: String,
    pub seq: u64,
    pub body: Map<String, Value>,
}

impl Entry {
    /// The entry as the read view shows it: its body plus `id`, `surface`, `created_at`.
    pub fn to_json(&self) -> Value {
        let mut o = self.body.clone();
        o.insert("id".into(), json!(self.id));
        o.insert("surface".into(), json!(self.surface));
        o.insert("created_at".into(), json!(self.created_at));
        Value::Object(o)
    }
}

/// What is known about a stored blob without reading its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobMeta {
    pub mime_type: String,
    pub byte_length: u64,
}

/// Ids are allocated in blocks; the reserved high-water mark is persisted once per block.
const ID_BLOCK: u64 = 4096;

/// The DGP engine for one application.
pub struct Engine<A: App> {
    app: A,
    config: EngineConfig,
    seed: u64,
    next_id: u64,
    reserved: u64,
    policy_revision: u64,
    surfaces: BTreeMap<String, SurfaceEntry<A::State>>,
    snapshots: HashMap<String, Arc<Snapshot>>,
    frames: HashMap<String, FrameEntry>,
    assessments: HashMap<String, StoredAssessment>,
    receipts: HashMap<String, Arc<Receipt>>,
    idempotency: HashMap<(String, String), IdempotencyRecord>,
    entries: Vec<Entry>,
    blobs: HashMap<String, BlobMeta>,
    persisted_snapshots: HashSet<String>,
}

fn corrupt(kind: RecordKind, key: &str, e: impl std::fmt::Display) -> FramesError {
    FramesError::CorruptRecord(format!("{} record `{key}`: {e}", kind.as_str()))
}

/// A stored record as its type. Records are parsed as JSON values first, then typed from the
/// value: wire messages take that same path ([`validate::typed`]), so each record type has one
/// deserializer (serde_json's `Value`) instead of one per input form (a wasm size concern).
fn record<T: serde::de::DeserializeOwned>(
    kind: RecordKind,
    key: &str,
    bytes: &[u8],
) -> Result<T, FramesError> {
    let v: Value = serde_json::from_slice(bytes).map_err(|err| corrupt(kind, key, err))?;
    serde_json::from_value(v).map_err(|err| corrupt(kind, key, err))
}

fn blob_key(surface: &str, sha: &str) -> String {
    format!("{surface}/{sha}")
}

/// Percent-encodes a path segment (RFC 3986 unreserved characters pass).
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl<A: App> Engine<A> {
    /// Opens an engine over the records of a store (empty for a new one). Returns the writes
    /// that seed a new store (its surfaces and id seed); persist them before serving.
    pub fn open(
        app: A,
        config: EngineConfig,
        records: impl IntoIterator<Item = (RecordKind, String, Vec<u8>)>,
    ) -> Result<Done<Self>, FramesError> {
        let graph = app.graph();
        validate_graph(graph)?;
        let mut e = Engine {
            seed: config.id_seed,
            app,
            config,
            next_id: 0,
            reserved: 0,
            policy_revision: 1,
            surfaces: BTreeMap::new(),
            snapshots: HashMap::new(),
            frames: HashMap::new(),
            assessments: HashMap::new(),
            receipts: HashMap::new(),
            idempotency: HashMap::new(),
            entries: Vec::new(),
            blobs: HashMap::new(),
            persisted_snapshots: HashSet::new(),
        };
        let mut frames = Vec::new();
        let mut seeded = false;
        for (kind, key, value) in records {
            let parse = |v: &[u8]| -> Result<Value, FramesError> {
                serde_json::from_slice(v).map_err(|err| corrupt(kind, &key, err))
            };
            match kind {
                RecordKind::Meta => {
                    let n = parse(&value)?
                        .as_u64()
                        .ok_or_else(|| corrupt(kind, &key, "not a number"))?;
                    match key.as_str() {
                        "seed" => {
                            e.seed = n;
                            seeded = true;
                        }
                        "reserved" => e.reserved = n,
                        "policy_revision" => e.policy_revision = n,
                        _ => return Err(corrupt(kind, &key, "unknown meta key")),
                    }
                }
                RecordKind::Surface => {
                    let r: SurfaceRecord<A::State> = record(kind, &key, &value)?;
                    e.surfaces.insert(
                        key,
                        SurfaceEntry {
                            revision: r.revision,
                            service_calls: r.service_calls,
                            state: r.state,
                            snapshot: None,
                            templates: vec![],
                        },
                    );
                }
                RecordKind::Snapshot => {
                    let s: Snapshot = record(kind, &key, &value)?;
                    e.persisted_snapshots.insert(key.clone());
                    e.snapshots.insert(key, Arc::new(s));
                }
                RecordKind::Frame => {
                    let r: FrameRecord = record(kind, &key, &value)?;
                    frames.push((key, r));
                }
                RecordKind::Assessment => {
                    let r: AssessmentRecord = record(kind, &key, &value)?;
                    e.assessments.insert(
                        key,
                        StoredAssessment {
                            principal: r.principal,
                            fingerprint: r.fingerprint,
                            record: Arc::new(r.record),
                        },
                    );
                }
                RecordKind::Receipt => {
                    let r: Receipt = record(kind, &key, &value)?;
                    e.receipts.insert(key, Arc::new(r));
                }
                RecordKind::Idempotency => {
                    let r: IdempotencyRecord = record(kind, &key, &value)?;
                    e.idempotency
                        .insert((r.principal.clone(), r.key.clone()), r);
                }
                RecordKind::Entry => {
                    let r: Entry = record(kind, &key, &value)?;
                    e.entries.push(r);
                }
                RecordKind::BlobMeta => {
                    let r: BlobMeta = record(kind, &key, &value)?;
                    e.blobs.insert(key, r);
                }
                RecordKind::Blob => {}
            }
        }
        for (key, rec) in frames {
            let snapshot = e
                .snapshots
                .get(&rec.snapshot)
                .cloned()
                .ok_or_else(|| corrupt(RecordKind::Frame, &key, "its snapshot is missing"))?;
            e.frames.insert(key, FrameEntry { rec, snapshot });
        }
        e.entries.sort_by_key(|x| x.seq);
        e.next_id = e.reserved;
        let mut writes = Vec::new();
        if !seeded {
            writes.push(Write::json(RecordKind::Meta, "seed", &e.seed));
            writes.push(Write::json(
                RecordKind::Meta,
                "policy_revision",
                &e.policy_revision,
            ));
        }
        if e.surfaces.is_empty() {
            for (id, state) in e.app.initial_surfaces() {
                let entry = SurfaceEntry {
                    revision: 1,
                    service_calls: 0,
                    state,
                    snapshot: None,
                    templates: vec![],
                };
                writes.push(surface_write(&id, &entry));
                e.surfaces.insert(id, entry);
            }
        }
        Ok(Done { value: e, writes })
    }

    /// The application.
    pub fn app(&self) -> &A {
        &self.app
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// A surface's state and revision.
    pub fn surface_state(&self, surface_id: &str) -> Option<(&A::State, u64)> {
        self.surfaces
            .get(surface_id)
            .map(|s| (&s.state, s.revision))
    }

    /// The shared policy revision.
    pub fn policy_revision(&self) -> u64 {
        self.policy_revision
    }

    fn alloc_id(&mut self, prefix: &str, writes: &mut Vec<Write>) -> String {
        if self.next_id >= self.reserved {
            self.reserved = self.next_id + ID_BLOCK;
            writes.push(Write::json(RecordKind::Meta, "reserved", &self.reserved));
        }
        let n = self.next_id;
        self.next_id += 1;
        let mut material = [0u8; 16];
        material[..8].copy_from_slice(&self.seed.to_be_bytes());
        material[8..].copy_from_slice(&n.to_be_bytes());
        format!("{prefix}-{}", &sha256_hex(&material)[..32])
    }

    /// The discovery document.
    pub fn manifest(&self) -> Manifest {
        let mut modalities = vec!["text".to_owned(), "json".to_owned()];
        if features::SUPPORTED.contains(&features::IMAGE) {
            modalities.push("image".into());
        }
        let mut kinds: Vec<String> = vec!["choice".into(), "input".into()];
        for k in ["score", "probability"] {
            if features::SUPPORTED.contains(&features::RUBRICS) {
                kinds.push(k.into());
            }
        }
        Manifest {
            dgp: Dgp,
            name: self.app.name().to_owned(),
            status: ManifestStatus::Experimental,
            features: features::SUPPORTED.iter().map(|s| s.to_string()).collect(),
            evidence_modalities: modalities,
            decision_kinds: kinds,
            input_schema_dialect: "https://json-schema.org/draft/2020-12/schema".into(),
            links: Links {
                surfaces: "/dgp/surfaces".into(),
                graphs: "/dgp/graphs".into(),
                assessments: "/dgp/assessments".into(),
                commits: "/dgp/commits".into(),
                services: "/dgp/services".into(),
                extensions: None,
            },
            auth: self.config.auth.clone(),
            idempotency_retention: self.config.idempotency_retention.clone(),
            extensions: None,
        }
    }

    /// `GET /dgp/surfaces`.
    pub fn surfaces(&self) -> Value {
        let list: Vec<Value> = self
            .surfaces
            .iter()
            .map(|(id, s)| {
                let sum = self.app.summary(&s.state);
                json!({
                    "surface_id": id,
                    "title": sum.title,
                    "state": sum.state,
                    "revision": s.revision,
                    "frame_href": format!("/dgp/surfaces/{}/frame", path_segment(id)),
                })
            })
            .collect();
        json!({"dgp": DGP_VERSION, "surfaces": list})
    }

    /// `GET /dgp/graphs`.
    pub fn graphs(&self) -> Value {
        let g = self.app.graph();
        json!({"dgp": DGP_VERSION, "graphs": [{
            "graph_id": g.graph_id,
            "graph_version": g.graph_version,
            "href": format!("/dgp/graphs/{}", path_segment(&g.graph_id)),
        }]})
    }

    /// `GET /dgp/graphs/{id}`.
    pub fn graph(&self, graph_id: &str) -> Result<&Graph, FramesError> {
        let g = self.app.graph();
        if g.graph_id == graph_id {
            Ok(g)
        } else {
            Err(FramesError::NotFound(format!("no graph `{graph_id}`")))
        }
    }

    /// `GET /dgp/services`.
    pub fn services(&self) -> Value {
        json!({"dgp": DGP_VERSION, "services": self.app.services()})
    }

    /// The entries of an app read view, oldest first.
    pub fn entries(&self, view: &str) -> Vec<&Entry> {
        self.entries.iter().filter(|e| e.view == view).collect()
    }

    /// Metadata of a stored blob of a surface; the bytes are in the store under
    /// `(RecordKind::Blob, blob_key)`.
    pub fn blob(&self, surface_id: &str, sha256: &str) -> Result<(BlobMeta, String), FramesError> {
        let key = blob_key(surface_id, sha256);
        self.blobs
            .get(&key)
            .map(|m| (m.clone(), key))
            .ok_or_else(|| {
                FramesError::NotFound(format!("no blob {sha256} on surface `{surface_id}`"))
            })
    }

    fn surface_resource(&self, surface_id: &str) -> String {
        format!("{}:{surface_id}", self.app.resource_kind())
    }

    fn policy_resource(&self) -> String {
        format!("policy:{}", self.app.policy_id())
    }

    /// Builds (or reuses) the snapshot of a surface's current revision.
    fn snapshot(&mut self, surface_id: &str) -> Result<(Arc<str>, Arc<Snapshot>), FramesError> {
        let s = self
            .surfaces
            .get(surface_id)
            .ok_or_else(|| FramesError::NotFound(format!("no surface `{surface_id}`")))?;
        if let Some(snap) = &s.snapshot {
            return Ok(snap.clone());
        }
        let ctx = SurfaceCtx {
            surface_id,
            revision: s.revision,
            service_calls: s.service_calls,
            service_budget: self.config.service_budget,
        };
        let observations = self.app.observations(&ctx, &s.state);
        let mut decisions = self.app.decisions(&ctx, &s.state, &observations);
        for d in &mut decisions {
            d.decision_id.clear();
        }
        let mut required = vec![features::CORE.to_owned()];
        if observations.iter().any(|e| e.kind == EvidenceKind::Image) {
            required.push(features::IMAGE.to_owned());
        }
        if decisions
            .iter()
            .any(|d| matches!(d.kind, DecisionKind::Score | DecisionKind::Probability))
        {
            required.push(features::RUBRICS.to_owned());
        }
        let g = self.app.graph();
        let snap = Snapshot {
            surface_id: surface_id.to_owned(),
            graph_id: g.graph_id.clone(),
            graph_version: g.graph_version.clone(),
            policy_ref: format!("{}@{}", self.app.policy_id(), self.policy_revision),
            read_set: vec![
                ReadVersion {
                    resource_id: self.surface_resource(surface_id),
                    revision: s.revision,
                    extensions: None,
                },
                ReadVersion {
                    resource_id: self.policy_resource(),
                    revision: self.policy_revision,
                    extensions: None,
                },
            ],
            observations,
            decisions,
            service_calls_remaining: ctx.service_calls_remaining() as u64,
            required_features: required,
        };
        check_snapshot(&snap, self.app.services())?;
        // Content address: identical snapshots (after a restart, or a state revisited) share it.
        let hash = sha256_hex(&serde_json::to_vec(&snap).expect("snapshot serializes"));
        let key: Arc<str> = hash.as_str().into();
        let snap = match self.snapshots.get(&hash) {
            Some(existing) => existing.clone(),
            None => {
                let a = Arc::new(snap);
                self.snapshots.insert(hash.clone(), a.clone());
                a
            }
        };
        if let Some(s) = self.surfaces.get_mut(surface_id) {
            s.snapshot = Some((key.clone(), snap.clone()));
        }
        Ok((key, snap))
    }

    /// Renders a stored frame.
    fn render(&self, frame_id: &str, entry: &FrameEntry) -> Frame {
        let snap = &entry.snapshot;
        let rec = &entry.rec;
        let decisions = snap
            .decisions
            .iter()
            .map(|d| {
                let mut d = d.clone();
                d.decision_id = format!("{frame_id}:{}", d.node_id);
                d
            })
            .collect::<Vec<_>>();
        let preview = match rec.requested {
            DisclosureLevel::Next => None,
            level => {
                let current: Vec<&str> =
                    snap.decisions.iter().map(|d| d.node_id.as_str()).collect();
                Some(preview(
                    self.app.graph(),
                    &current,
                    level,
                    rec.horizon.unwrap_or(2),
                ))
            }
        };
        Frame {
            dgp: Dgp,
            frame_id: frame_id.to_owned(),
            surface_id: snap.surface_id.clone(),
            graph_id: snap.graph_id.clone(),
            graph_version: snap.graph_version.clone(),
            policy_ref: snap.policy_ref.clone(),
            created_at: rfc3339(rec.created),
            expires_at: rfc3339(rec.expires),
            read_set: snap.read_set.clone(),
            observations: snap.observations.clone(),
            decisions,
            disclosure: Disclosure {
                requested: rec.requested,
                provided: rec.requested,
                preview,
                extensions: None,
            },
            service_calls_remaining: snap.service_calls_remaining,
            required_features: snap.required_features.clone(),
            extensions: None,
        }
    }

    /// Creates and records a new frame of `surface_id`; returns its id.
    fn new_frame(
        &mut self,
        now: UnixMillis,
        surface_id: &str,
        disclosure: Option<&str>,
        horizon: Option<&str>,
        writes: &mut Vec<Write>,
    ) -> Result<String, FramesError> {
        let requested = match disclosure.unwrap_or("next") {
            "next" => DisclosureLevel::Next,
            "horizon" => DisclosureLevel::Horizon,
            "full" => DisclosureLevel::Full,
            other => {
                return Err(FramesError::InvalidDisclosure(format!(
                    "disclosure must be next, horizon or full, not `{other}`"
                )));
            }
        };
        let h = match horizon {
            None => 2,
            Some(t) => t.parse::<u32>().ok().filter(|h| *h <= 20).ok_or_else(|| {
                FramesError::InvalidHorizon(format!(
                    "horizon must be an integer in 0..=20, not `{t}`"
                ))
            })?,
        };
        let (key, snapshot) = self.snapshot(surface_id)?;
        if self.persisted_snapshots.insert(key.to_string()) {
            writes.push(Write::json(
                RecordKind::Snapshot,
                key.to_string(),
                &*snapshot,
            ));
        }
        let frame_id = self.alloc_id("f", writes);
        let rec = FrameRecord {
            surface: surface_id.to_owned(),
            snapshot: key.to_string(),
            created: now,
            expires: now + self.config.frame_ttl_ms,
            requested,
            horizon: (requested == DisclosureLevel::Horizon).then_some(h),
        };
        writes.push(Write::json(RecordKind::Frame, frame_id.clone(), &rec));
        self.frames
            .insert(frame_id.clone(), FrameEntry { rec, snapshot });
        Ok(frame_id)
    }

    /// `GET /dgp/surfaces/{id}/frame`: a new immutable frame of the current state.
    /// `disclosure` is `next` (default), `horizon` or `full`; `horizon` is 0..=20 (default 2).
    pub fn frame(
        &mut self,
        now: UnixMillis,
        surface_id: &str,
        disclosure: Option<&str>,
        horizon: Option<&str>,
    ) -> Result<Done<Frame>, FramesError> {
        let mut writes = Vec::new();
        let id = self.new_frame(now, surface_id, disclosure, horizon, &mut writes)?;
        let frame = self.render(&id, &self.frames[&id]);
        Ok(Done {
            value: frame,
            writes,
        })
    }

    /// [`Engine::frame`] rendered straight to JSON from a per-state template: the same bytes
    /// `serde_json::to_vec(&frame)` gives, without rebuilding the frame each read.
    pub fn frame_json(
        &mut self,
        now: UnixMillis,
        surface_id: &str,
        disclosure: Option<&str>,
        horizon: Option<&str>,
    ) -> Result<Done<Vec<u8>>, FramesError> {
        let mut writes = Vec::new();
        let id = self.new_frame(now, surface_id, disclosure, horizon, &mut writes)?;
        let entry = &self.frames[&id];
        let variant = (entry.rec.requested, entry.rec.horizon);
        let cached = self.surfaces.get(surface_id).and_then(|s| {
            s.templates
                .iter()
                .find(|(v, _)| *v == variant)
                .map(|(_, t)| t.clone())
        });
        let template = match cached {
            Some(t) => t,
            None => {
                let t = Arc::new(Template::of(&self.render(TEMPLATE_ID, entry)));
                if let Some(s) = self.surfaces.get_mut(surface_id) {
                    s.templates.push((variant, t.clone()));
                }
                t
            }
        };
        let entry = &self.frames[&id];
        let bytes = template.fill(
            &id,
            &rfc3339(entry.rec.created),
            &rfc3339(entry.rec.expires),
        );
        Ok(Done {
            value: bytes,
            writes,
        })
    }

    /// `GET /dgp/frames/{id}`: the exact stored frame (also after it expired or went stale).
    pub fn stored_frame(&self, frame_id: &str) -> Result<Frame, FramesError> {
        let e = self
            .frames
            .get(frame_id)
            .ok_or_else(|| FramesError::NotFound(format!("no frame `{frame_id}`")))?;
        Ok(self.render(frame_id, e))
    }

    /// `GET /dgp/assessments/{id}`.
    pub fn assessment(&self, assessment_id: &str) -> Result<Arc<Assessment>, FramesError> {
        self.assessments
            .get(assessment_id)
            .map(|a| a.record.clone())
            .ok_or_else(|| FramesError::NotFound(format!("no assessment `{assessment_id}`")))
    }

    /// `GET /dgp/receipts/{id}`.
    pub fn receipt(&self, receipt_id: &str) -> Result<Arc<Receipt>, FramesError> {
        self.receipts
            .get(receipt_id)
            .cloned()
            .ok_or_else(|| FramesError::NotFound(format!("no receipt `{receipt_id}`")))
    }

    fn check_size(&self, body: &[u8]) -> Result<(), FramesError> {
        if body.len() > self.config.max_message_bytes {
            return Err(FramesError::PayloadTooLarge(format!(
                "messages are limited to {} bytes",
                self.config.max_message_bytes
            )));
        }
        Ok(())
    }

    /// `POST /dgp/assessments` with a raw body: strict JSON, then [`Engine::assess`].
    pub fn assess_bytes(
        &mut self,
        now: UnixMillis,
        principal: &Principal,
        body: &[u8],
    ) -> Result<Done<Arc<Assessment>>, FramesError> {
        self.check_size(body)?;
        self.assess(now, principal, parse_strict(body)?)
    }

    /// Records an assessment (§6). Recording changes audit storage, never domain state.
    /// Reusing an id with identical content by the same principal returns the original record.
    pub fn assess(
        &mut self,
        now: UnixMillis,
        principal: &Principal,
        body: Value,
    ) -> Result<Done<Arc<Assessment>>, FramesError> {
        let fp = fingerprint(&body);
        let req: AssessmentRequest = typed("assessment", body)?;
        validate::check_assessment_request(&req)?;
        features::require(req.required_features.as_deref().unwrap_or_default())?;
        if req.mode == Mode::Speculative {
            features::require(&[features::SPECULATIVE.to_owned()])?;
        }
        if let Some(old) = self.assessments.get(&req.assessment_id) {
            if old.principal == principal.id && old.fingerprint == fp {
                return Ok(Done {
                    value: old.record.clone(),
                    writes: vec![],
                });
            }
            return Err(FramesError::AssessmentIdReused(format!(
                "assessment id `{}` is already recorded with different content or by another principal",
                req.assessment_id
            )));
        }
        let frame = self
            .frames
            .get(&req.frame_id)
            .ok_or_else(|| FramesError::NotFound(format!("no frame `{}`", req.frame_id)))?;
        let decision = find_decision(&frame.snapshot, &req.frame_id, &req.decision_id)?;
        validate::check_result(&instance(decision, &req.decision_id), &req.result)?;
        let record = Assessment::record(req, &principal.id, rfc3339(now));
        let stored = AssessmentRecord {
            principal: principal.id.clone(),
            fingerprint: fp,
            record,
        };
        let writes = vec![Write::json(
            RecordKind::Assessment,
            stored.record.assessment_id.clone(),
            &stored,
        )];
        let record = Arc::new(stored.record);
        self.assessments.insert(
            record.assessment_id.clone(),
            StoredAssessment {
                principal: stored.principal,
                fingerprint: stored.fingerprint,
                record: record.clone(),
            },
        );
        Ok(Done {
            value: record,
            writes,
        })
    }

    /// `POST /dgp/commits` with a raw body: strict JSON, then [`Engine::commit`].
    pub fn commit_bytes(
        &mut self,
        now: UnixMillis,
        principal: &Principal,
        idempotency_key: Option<&str>,
        body: &[u8],
    ) -> Result<Done<Arc<Receipt>>, FramesError> {
        self.check_size(body)?;
        self.commit(now, principal, idempotency_key, parse_strict(body)?)
    }

    /// Guards and applies a committed assessment, in the order of §7.2: idempotent replay,
    /// binding and ownership, speculative/abstained rejection, expiry, read set (state and
    /// policy revisions), current availability, answer validation, human authority and
    /// budget, then the atomic apply and its receipt.
    pub fn commit(
        &mut self,
        now: UnixMillis,
        principal: &Principal,
        idempotency_key: Option<&str>,
        body: Value,
    ) -> Result<Done<Arc<Receipt>>, FramesError> {
        let fp = fingerprint(&body);
        let req: CommitRequest = typed("commit", body)?;
        validate::check_commit_request(&req)?;
        features::require(req.required_features.as_deref().unwrap_or_default())?;
        let key = match idempotency_key {
            Some(k) if !k.is_empty() && k.chars().count() <= 200 => k,
            _ => {
                return Err(FramesError::IdempotencyKeyRequired(
                    "commits need an Idempotency-Key of 1..200 characters".into(),
                ));
            }
        };
        // 2. Idempotent replay: before any freshness check, so a replay of a successful commit
        // returns its receipt even though that commit made the frame stale.
        if let Some(old) = self
            .idempotency
            .get(&(principal.id.clone(), key.to_owned()))
        {
            if old.fingerprint != fp {
                return Err(FramesError::IdempotencyKeyReused(format!(
                    "Idempotency-Key `{key}` was used for a different commit"
                )));
            }
            let r = self.receipt(&old.receipt_id)?;
            return Ok(Done {
                value: r,
                writes: vec![],
            });
        }
        // 3. The frame and assessment, their binding and ownership.
        let frame = self
            .frames
            .get(&req.frame_id)
            .ok_or_else(|| FramesError::NotFound(format!("no frame `{}`", req.frame_id)))?;
        let stored = self.assessments.get(&req.assessment_id).ok_or_else(|| {
            FramesError::NotFound(format!("no assessment `{}`", req.assessment_id))
        })?;
        let a = stored.record.clone();
        if a.frame_id != req.frame_id || a.decision_id != req.decision_id {
            return Err(FramesError::AssessmentMismatch(
                "the assessment refers to another frame or decision than the commit".into(),
            ));
        }
        if stored.principal != principal.id {
            return Err(FramesError::Forbidden(
                "an assessment can be committed only by the principal that recorded it".into(),
            ));
        }
        let offered = find_decision(&frame.snapshot, &req.frame_id, &req.decision_id)?.clone();
        // 4. Only live, answered assessments authorize a transition.
        if a.mode == Mode::Speculative {
            return Err(FramesError::SpeculativeOnly(
                "speculative assessments are never committed; reassess a live frame".into(),
            ));
        }
        let Some(answer) = a
            .result
            .answer
            .clone()
            .filter(|_| a.result.status == ResultStatus::Answered)
        else {
            return Err(FramesError::Abstained(
                "an abstention does not authorize a transition".into(),
            ));
        };
        // 5. Expiry, read set, graph version, current availability.
        if now >= frame.rec.expires {
            return Err(FramesError::FrameExpired(format!(
                "frame expired at {}; read a fresh frame and assess it again",
                rfc3339(frame.rec.expires)
            )));
        }
        let surface_id = frame.snapshot.surface_id.clone();
        let read_set = frame.snapshot.read_set.clone();
        let graph_version = frame.snapshot.graph_version.clone();
        for rv in &read_set {
            let current = self.resource_revision(&rv.resource_id);
            if current != Some(rv.revision) {
                return Err(FramesError::StaleFrame(format!(
                    "{} is at revision {}, the frame read revision {}; read a fresh frame and reassess",
                    rv.resource_id,
                    current.map_or("none".to_owned(), |c| c.to_string()),
                    rv.revision
                )));
            }
        }
        if graph_version != self.app.graph().graph_version {
            return Err(FramesError::StaleFrame("the graph version changed".into()));
        }
        let mut writes = Vec::new();
        let (_, live) = self.snapshot(&surface_id)?;
        let live_decision = live
            .decisions
            .iter()
            .find(|d| d.node_id == offered.node_id)
            .ok_or_else(|| {
                FramesError::DecisionNotAvailable(format!(
                    "`{}` is no longer available",
                    offered.node_id
                ))
            })?;
        let live_decision = instance(live_decision, &req.decision_id);
        // 6. The answer against the live contract; authority; budget (after apply, below).
        validate::check_result(&live_decision, &a.result)?;
        let effect = match (&answer, live_decision.kind) {
            (Answer::Choice(c), DecisionKind::Choice) => {
                live_decision.option(&c.choice).map(|o| o.effect.clone())
            }
            _ => live_decision.effect.clone(),
        }
        .unwrap_or(Effect {
            world_mutation: WorldMutation::None,
            recovery: Recovery::NotApplicable,
            data_egress: DataEgress::None,
            speculation: Speculation::Forbidden,
            required_actor: RequiredActor::AnyAuthorized,
            simulation: true,
            extensions: None,
        });
        if effect.required_actor == RequiredActor::Human && principal.role != Role::Human {
            return Err(FramesError::HumanApprovalRequired(
                "this effect requires an authenticated human; a human must review a current frame and commit their own assessment"
                    .into(),
            ));
        }
        // 7. Apply on a copy; nothing changes unless everything succeeds.
        let s = self
            .surfaces
            .get(&surface_id)
            .expect("frame surfaces exist");
        let mut state = s.state.clone();
        let ctx = ApplyCtx {
            surface_id: &surface_id,
            frame_id: &req.frame_id,
            assessment_id: &req.assessment_id,
            principal,
            resolver: &a.resolver,
            service_calls: s.service_calls,
            service_budget: self.config.service_budget,
        };
        let applied = self.app.apply(&ctx, &mut state, &live_decision, &answer)?;
        if applied.service_call && s.service_calls >= self.config.service_budget {
            return Err(FramesError::BudgetExhausted(format!(
                "surface `{surface_id}` has used its {} service requests",
                self.config.service_budget
            )));
        }
        let service_calls = s.service_calls + applied.service_call as u32;
        let revision = s.revision + 1;
        let receipt_id = self.alloc_id("r", &mut writes);
        let receipt = Receipt {
            dgp: Dgp,
            receipt_id: receipt_id.clone(),
            frame_id: req.frame_id.clone(),
            decision_id: req.decision_id.clone(),
            assessment_id: req.assessment_id.clone(),
            submitted_by: principal.id.clone(),
            status: ReceiptStatus::Succeeded,
            committed_at: rfc3339(now),
            state_revision: revision,
            effect,
            outcome: applied.outcome,
            next_frame_href: format!("/dgp/surfaces/{}/frame", path_segment(&surface_id)),
            extensions: None,
        };
        for (view, body) in applied.entries {
            let id = self.alloc_id("e", &mut writes);
            let entry = Entry {
                view,
                id: id.clone(),
                surface: surface_id.clone(),
                created_at: rfc3339(now),
                seq: self.entries.last().map_or(0, |e| e.seq + 1),
                body,
            };
            writes.push(Write::json(RecordKind::Entry, id, &entry));
            self.entries.push(entry);
        }
        for blob in applied.blobs {
            let key = blob_key(&surface_id, &blob.sha256);
            let meta = BlobMeta {
                mime_type: blob.mime_type.clone(),
                byte_length: blob.bytes.len() as u64,
            };
            writes.push(Write::json(RecordKind::BlobMeta, key.clone(), &meta));
            writes.push(Write {
                kind: RecordKind::Blob,
                key: key.clone(),
                value: blob.bytes,
            });
            self.blobs.insert(key, meta);
        }
        let entry = SurfaceEntry {
            revision,
            service_calls,
            state,
            snapshot: None,
            templates: vec![],
        };
        writes.push(surface_write(&surface_id, &entry));
        self.surfaces.insert(surface_id, entry);
        let idem = IdempotencyRecord {
            principal: principal.id.clone(),
            key: key.to_owned(),
            fingerprint: fp,
            receipt_id: receipt_id.clone(),
        };
        writes.push(Write::json(
            RecordKind::Receipt,
            receipt_id.clone(),
            &receipt,
        ));
        writes.push(Write::json(
            RecordKind::Idempotency,
            serde_json::to_string(&[&idem.principal, &idem.key]).expect("strings serialize"),
            &idem,
        ));
        self.idempotency
            .insert((idem.principal.clone(), idem.key.clone()), idem);
        let receipt = Arc::new(receipt);
        self.receipts.insert(receipt_id, receipt.clone());
        Ok(Done {
            value: receipt,
            writes,
        })
    }

    fn resource_revision(&self, resource_id: &str) -> Option<u64> {
        if resource_id == self.policy_resource() {
            return Some(self.policy_revision);
        }
        let prefix = format!("{}:", self.app.resource_kind());
        let sid = resource_id.strip_prefix(&prefix)?;
        self.surfaces.get(sid).map(|s| s.revision)
    }

    /// Changes the shared policy: every frame read before now becomes stale.
    pub fn bump_policy(&mut self) -> Done<u64> {
        self.policy_revision += 1;
        for s in self.surfaces.values_mut() {
            s.snapshot = None;
            s.templates.clear();
        }
        Done {
            value: self.policy_revision,
            writes: vec![Write::json(
                RecordKind::Meta,
                "policy_revision",
                &self.policy_revision,
            )],
        }
    }

    /// How many frames, assessments and receipts are held (for diagnostics and benchmarks).
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.frames.len(),
            self.assessments.len(),
            self.receipts.len(),
        )
    }
}

fn surface_write<S: Serialize + Clone>(id: &str, e: &SurfaceEntry<S>) -> Write {
    Write::json(
        RecordKind::Surface,
        id,
        &SurfaceRecord {
            revision: e.revision,
            service_calls: e.service_calls,
            state: e.state.clone(),
        },
    )
}

/// The decision template of a frame with this decision id.
fn find_decision<'a>(
    snap: &'a Snapshot,
    frame_id: &str,
    decision_id: &str,
) -> Result<&'a Decision, FramesError> {
    decision_id
        .strip_prefix(frame_id)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|node| snap.decisions.iter().find(|d| d.node_id == node))
        .ok_or_else(|| {
            FramesError::DecisionNotOffered(format!(
                "decision `{decision_id}` is not offered by frame `{frame_id}` (previews never offer decisions)"
            ))
        })
}

fn instance(template: &Decision, decision_id: &str) -> Decision {
    let mut d = template.clone();
    d.decision_id = decision_id.to_owned();
    d
}

fn validate_graph(g: &Graph) -> Result<(), FramesError> {
    let ids: HashSet<&str> = g.nodes.iter().map(|n| n.id.as_str()).collect();
    for e in &g.edges {
        if !ids.contains(e.from.as_str()) || !ids.contains(e.to.as_str()) {
            return Err(FramesError::InvalidMessage(format!(
                "graph {}: edge {} -> {} names an undeclared node",
                g.graph_id, e.from, e.to
            )));
        }
    }
    Ok(())
}

/// Checks what an app publishes: evidence rules, decision shapes, supported input schemas,
/// fulfilment services that exist. An app bug surfaces as an error, never as a bad frame.
fn check_snapshot(s: &Snapshot, services: &[Service]) -> Result<(), FramesError> {
    let bad = |m: String| {
        FramesError::InvalidMessage(format!("application published an invalid frame: {m}"))
    };
    let ids: HashSet<&str> = s
        .observations
        .iter()
        .map(|e| e.evidence_id.as_str())
        .collect();
    if ids.len() != s.observations.len() {
        return Err(bad("duplicate evidence ids".into()));
    }
    for e in &s.observations {
        validate::check_evidence(e).map_err(bad)?;
    }
    let mut nodes = HashSet::new();
    for d in &s.decisions {
        if !nodes.insert(d.node_id.as_str()) {
            return Err(bad(format!("node `{}` offered twice", d.node_id)));
        }
        for e in &d.evidence_ids {
            if !ids.contains(e.as_str()) {
                return Err(bad(format!("{} cites unknown evidence `{e}`", d.node_id)));
            }
        }
        match d.kind {
            DecisionKind::Choice if d.options.as_ref().is_none_or(Vec::is_empty) => {
                return Err(bad(format!("choice {} has no options", d.node_id)));
            }
            DecisionKind::Input if d.input_schema.is_none() || d.effect.is_none() => {
                return Err(bad(format!(
                    "input {} needs input_schema and effect",
                    d.node_id
                )));
            }
            DecisionKind::Score if d.levels.as_ref().is_none_or(|l| l.len() < 2) => {
                return Err(bad(format!("score {} needs two or more levels", d.node_id)));
            }
            _ => {}
        }
        for o in d.options.iter().flatten() {
            validate::check_schema(&o.input_schema)?;
        }
        if let Some(schema) = &d.input_schema {
            validate::check_schema(schema)?;
        }
        if let Some(f) = &d.fulfillment
            && !services.iter().any(|s| s.service_id == f.service_id)
        {
            return Err(bad(format!(
                "{} names unknown service `{}`",
                d.node_id, f.service_id
            )));
        }
    }
    Ok(())
}
