//! The DGP 0.1 engine: surfaces, immutable frames, assessments, guarded commits and receipts,
//! held in memory and expressed as write batches for the host's store (sans-IO).
//!
//! Every call that changes state returns a [`Done`]: its value is released only against the
//! acknowledgement of its writes ([`Done::split`] → [`Persist::ack`] → [`Pending::release`]),
//! so answering before the writes are durable takes a visible, named step in the host's code
//! (the types prove the host held the writes, not that an fsync happened: `ack` is the host's
//! word that they are durable). Calls that wrote nothing give
//! their value back through [`Done::into_value_if_clean`]; retention deletions may be written
//! in the background ([`Persist::hand_off`]).
//!
//! # Call order
//!
//! ```text
//! let (persist, engine) = Engine::open(app, config, stored_records)?.split();
//! store.write(persist.writes()); fsync;               // the seed (id seed, policy, surfaces)
//! let mut engine = engine.release(persist.ack());
//! per request (one at a time, under the engine's lock):
//!     for (kind, key) in Engine::named_records(body)    // frames / assessments it names
//!         if engine.needs(kind, key) && let Some(bytes) = store.get(kind, key)
//!             if let Some(dep) = engine.admit(now, kind, key, bytes)?   // evicted records
//!                 admit dep first (a frame's snapshot), then this one again
//!     let done = engine.frame_json(now, ..)? | assess(now, ..)? | commit(now, ..)?
//!              | bump_policy() | ..;
//!     let (persist, pending) = done.split();
//!     store.write(persist.writes()); fsync;            // in order, atomically, per batch
//!     answer(pending.release(persist.ack()));          // only now
//! several instances on one database (`instance: Some(..)`), a commit:
//!     let scopes = engine.scopes(frame_id);            // the read set's rows, in lock order
//!     BEGIN; SELECT .. FOR UPDATE each of scopes;
//!     engine.refresh(kind, key, row) for each row      // log items before their surface
//!     let (persist, pending) = engine.prepare_commit_locked_bytes(now, .., &scopes, attempt)?
//!         .split();
//!     write persist.writes() (a replay has none); COMMIT  // or ROLLBACK and drop both
//!     let committed = pending.release(persist.ack());    // only after COMMIT
//!     let (persist, pending) = engine.apply_commit(committed).split();
//!     let (deletions, handed) = persist.hand_off();     // retention: in the background
//!     answer(pending.release(handed));
//! on the host's timer (e.g. every second):
//!     let (persist, pending) = engine.sweep(now, limit).split();
//!     background-write persist.hand_off() (deletions only)
//! walking stored frames / assessments the engine may never have loaded:
//!     store.write(engine.compact(now, kind, rows))    // deletions past retention
//! ```
//!
//! `now` is wall-clock [`Wall`] (frames and receipts carry timestamps). A policy change
//! on a shared database is [`Engine::prepare_bump_policy`] under the policy row's lock, its
//! write COMMITted, then taken in with [`Engine::refresh`] before its value is released.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::app::{App, ApplyCtx, Principal, Role, SurfaceCtx};
use super::graph::preview;
use super::time::rfc3339;
use super::types::*;
use super::validate::{self, fingerprint, parse_strict, sha256_hex, typed};
use super::{FramesError, features};
use crate::Wall;

/// How many times a host deciding in a shared database tries a commit whose read set was
/// not locked ([`FramesError::ScopesNotLocked`]) before answering with that error.
pub const COMMIT_LOCK_ATTEMPTS: u32 = 3;

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
    /// The byte budget of one frame: log evidence (e.g. a thread's notes) is shown newest
    /// first while the rendered frame fits, the rest is counted and paged
    /// (`GET /dgp/surfaces/{id}/logs/{log}`).
    pub frame_budget_bytes: usize,
    /// How long a frame (and its assessments) stays readable after it expired. Past that, and
    /// unless a receipt names it, it leaves memory and its record is deleted.
    pub expired_retention_ms: u64,
    /// At most this many frames and assessments are held in memory; older ones are read back
    /// from the store on demand ([`Engine::needs`], [`Engine::admit`]).
    pub max_cached_records: usize,
    /// At most this many snapshots beyond the surfaces' current ones are held in memory (a
    /// snapshot of a long thread can take tens of KB): past it, the oldest frames leave memory
    /// with theirs.
    pub max_cached_snapshots: usize,
    /// This engine's instance number when several engines serve one store (e.g. PostgreSQL).
    /// It must never be used twice over a store's life (`n` starts at 0 in every process): the
    /// host draws 64 random bits per process. Set: ids are `sha256(seed ‖ instance ‖ n)`,
    /// no `reserved` id block is written, unknown `meta` keys are ignored and entries are
    /// ordered by `(created_at, seq, id)`. `None` (one engine per store, SQLite): ids come
    /// from the persisted `reserved` block, exactly as before.
    pub instance: Option<u64>,
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
            frame_budget_bytes: 64 * 1024,
            expired_retention_ms: 15 * 60 * 1000,
            max_cached_records: 65_536,
            max_cached_snapshots: 256,
            instance: None,
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
    /// One item of a surface's append-only log (e.g. a ThreadDesk note), keyed
    /// `["surface", "log", index]`.
    LogItem,
}

impl RecordKind {
    /// Every kind.
    pub const ALL: [RecordKind; 11] = [
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
        RecordKind::LogItem,
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
            RecordKind::LogItem => "log",
        }
    }
    /// The kind with this storage name.
    pub fn parse(s: &str) -> Option<Self> {
        RecordKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One record to persist (insert or replace); an empty `value` deletes the record (no record
/// is ever empty).
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

    /// Deletes `(kind, key)`.
    pub fn delete(kind: RecordKind, key: impl Into<String>) -> Self {
        Write {
            kind,
            key: key.into(),
            value: Vec::new(),
        }
    }

    /// Whether this write deletes its record.
    pub fn is_delete(&self) -> bool {
        self.value.is_empty()
    }
}

/// A result the host may release only once its writes are durable.
///
/// The fields are private: the value comes out through [`Done::split`] — a [`Persist`] holding
/// the writes and a [`Pending`] holding the value — and [`Pending::release`], which takes the
/// [`Persisted`] token that only [`Persist::ack`] (the writes are durable) and
/// [`Persist::hand_off`] (the host takes the writes to make durable under its own, documented
/// rule) make. A call that wrote nothing gives its value back at once through
/// [`Done::into_value_if_clean`].
///
/// ```text
/// let (persist, pending) = engine.frame(now, surface, None, None)?.split();
/// store.write(persist.writes())?;              // durable: fsync, COMMIT
/// let frame = pending.release(persist.ack());  // only now may it be answered
/// ```
#[derive(Debug)]
#[must_use = "persist the writes, then release the value: `split` → `ack` → `release`"]
pub struct Done<T> {
    value: T,
    writes: Vec<Write>,
}

impl<T> Done<T> {
    /// A result with no writes (e.g. a host wrapping a read-only call in a write path).
    pub fn clean(value: T) -> Self {
        Done {
            value,
            writes: Vec::new(),
        }
    }

    /// The writes to make durable, in order (the value stays held).
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// Whether the call wrote nothing.
    pub fn is_clean(&self) -> bool {
        self.writes.is_empty()
    }

    /// Separates the writes (to persist and acknowledge) from the value (released with the
    /// acknowledgement).
    pub fn split(self) -> (Persist, Pending<T>) {
        (
            Persist {
                writes: self.writes,
            },
            Pending(self.value),
        )
    }

    /// The value, when the call wrote nothing (an idempotent replay, a sweep with nothing
    /// due, a read); otherwise the `Done` back, to [`split`](Done::split) and persist.
    pub fn into_value_if_clean(self) -> Result<T, Done<T>> {
        if self.writes.is_empty() {
            Ok(self.value)
        } else {
            Err(self)
        }
    }

    /// The same writes with the value mapped (e.g. serialized for an answer).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Done<U> {
        Done {
            value: f(self.value),
            writes: self.writes,
        }
    }
}

/// The writes of a [`Done`], to make durable atomically and in order before acknowledging
/// them.
#[derive(Debug)]
#[must_use = "make the writes durable, then `ack` them to release the value"]
pub struct Persist {
    writes: Vec<Write>,
}

impl Persist {
    /// The writes, in order.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Moves the writes out (into a store's write queue) while this stays to be
    /// [`ack`](Persist::ack)ed once the queue reports them durable.
    #[must_use = "the writes must reach the store before this is acked"]
    pub fn take_writes(&mut self) -> Vec<Write> {
        std::mem::take(&mut self.writes)
    }

    /// The writes are durable: the token that releases the value. Nothing checks that they
    /// are: this is the host's word, given after its store confirmed them (an fsync, a COMMIT).
    pub fn ack(self) -> Persisted {
        Persisted(())
    }

    /// The host takes the writes and releases the value before they are durable, making them
    /// durable under its own rule. The sound rules: the writes are retention deletions (those
    /// of [`Engine::apply_commit`] and [`Engine::sweep`]: losing them only delays a deletion a
    /// later sweep or [`Engine::compact`] repeats), written in the background; the host is a
    /// binding whose own host drains them and persists them before relying on the results
    /// (wasm `takeWrites()`); or there is no store at all (an in-memory engine in a test).
    pub fn hand_off(self) -> (Vec<Write>, Persisted) {
        (self.writes, Persisted(()))
    }
}

/// Proof that a [`Persist`]'s writes are durable (or handed off): only [`Persist`] makes it.
#[derive(Debug)]
#[must_use = "pass it to `Pending::release`"]
pub struct Persisted(());

/// The value of a [`Done`], held until its writes are acknowledged.
#[derive(Debug)]
#[must_use = "release it with the `Persisted` of its writes"]
pub struct Pending<T>(T);

impl<T> Pending<T> {
    /// The value, now that its writes are durable.
    pub fn release(self, _persisted: Persisted) -> T {
        self.0
    }

    /// The value, still held: only to write it into the same durable write as its records
    /// (the PostgreSQL policy bump names the new revision in a notice inside the transaction
    /// that holds the bump), never to answer with it before [`Pending::release`].
    pub fn peek(&self) -> &T {
        &self.0
    }
}

/// A commit decided by [`Engine::prepare_commit`] and not yet applied. Its writes are private,
/// like a [`Done`]'s: [`Prepared::split`] separates them ([`Persist`]) from the decision
/// ([`Pending`]`<`[`Committed`]`>`), which comes out only against their acknowledgement and is
/// then applied:
///
/// ```text
/// let (persist, pending) = engine.prepare_commit(now, principal, key, body)?.split();
/// tx.write(persist.writes())?; COMMIT;                  // or ROLLBACK and drop both
/// let done = engine.apply_commit(pending.release(persist.ack()));
/// ```
#[must_use = "persist the writes, then apply: `split` → `ack` → `release` → `Engine::apply_commit`"]
pub struct Prepared<S> {
    /// The receipt to answer with: the new one, or the replayed one.
    pub receipt: Arc<Receipt>,
    /// An idempotent replay: the receipt of the earlier commit with this key and body; nothing
    /// to write (`writes` is empty) and nothing changes.
    pub replay: Option<Arc<Receipt>>,
    /// The surface the commit changes (empty for a replay).
    pub surface_id: String,
    /// The surface revision the commit was decided against (0 for a replay).
    pub base_revision: u64,
    /// The surface revision the commit creates (0 for a replay).
    pub revision: u64,
    /// The records to persist, in order: exactly the writes of [`Engine::commit`] before its
    /// retention deletions (receipt, entries, log items, blobs, surface, idempotency record;
    /// the id block when `instance` is `None`).
    writes: Vec<Write>,
    now: Wall,
    change: Option<Box<Change<S>>>,
}

impl<S> Prepared<S> {
    /// The records to persist, in order (empty for a replay); the decision stays held.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// Separates the writes (to persist in the deciding transaction and acknowledge after its
    /// COMMIT) from the decision, released with the acknowledgement as a [`Committed`] for
    /// [`Engine::apply_commit`].
    pub fn split(mut self) -> (Persist, Pending<Committed<S>>) {
        let writes = std::mem::take(&mut self.writes);
        (Persist { writes }, Pending(Committed(self)))
    }
}

/// A [`Prepared`] commit whose writes are acknowledged (COMMITted): what
/// [`Engine::apply_commit`] takes. Only [`Pending::release`] of a [`Prepared::split`] makes
/// one. It reads as the `Prepared` it came from (its receipt, surface and revisions).
#[must_use = "apply it with `Engine::apply_commit`"]
pub struct Committed<S>(Prepared<S>);

impl<S> std::ops::Deref for Committed<S> {
    type Target = Prepared<S>;

    fn deref(&self) -> &Prepared<S> {
        &self.0
    }
}

/// The in-memory side of a prepared commit.
struct Change<S> {
    surface: SurfaceEntry<S>,
    idem: IdempotencyRecord,
    entries: Vec<Entry>,
    /// `(log, index, item)`.
    items: Vec<(String, u64, Arc<Evidence>)>,
    blobs: Vec<(String, BlobMeta)>,
}

/// What [`Engine::refresh`] did with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refreshed {
    /// Memory took the record.
    Changed,
    /// Memory holds it already (or something newer), or it is of a kind refresh does not hold.
    Unchanged,
    /// A log item past the end of its log: refresh the items before it first.
    Gap,
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
    /// The log items shown, by reference: log items are immutable, so a range names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<LogWindow>,
}

/// The items `start..count` of a surface's log, shown in a frame after a summary evidence item
/// (`<log>-log`) that carries the count and the link to earlier pages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogWindow {
    pub log: String,
    pub start: u64,
    pub count: u64,
}

/// What the engine holds in memory and has released (see [`Engine::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Frames held in memory.
    pub frames: usize,
    /// Assessments held in memory.
    pub assessments: usize,
    /// Receipts (all are held).
    pub receipts: usize,
    /// Snapshots held in memory.
    pub snapshots: usize,
    /// Log items (all are held; each is stored once).
    pub log_items: usize,
    /// Frames and assessments released from memory past their retention (their records deleted).
    pub expired_released: u64,
    /// Frames and assessments evicted from memory while still live (read back on demand).
    pub evicted: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct FrameRecord {
    surface: String,
    snapshot: String,
    created: Wall,
    expires: Wall,
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
    /// When its frame expires (0: unknown, kept).
    #[serde(default)]
    expires: Wall,
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
    /// One past the highest `Entry.seq` held.
    next_seq: u64,
    blobs: HashMap<String, BlobMeta>,
    persisted_snapshots: HashSet<String>,
    /// Per surface, per log name: the items, oldest first (index = position).
    logs: HashMap<String, BTreeMap<String, Vec<Arc<Evidence>>>>,
    /// Frames and assessments in memory, in the order they came in: `(expires, kind, id)`.
    queue: VecDeque<(Wall, RecordKind, String)>,
    /// Frames and assessments a receipt names: kept forever.
    receipt_frames: HashSet<String>,
    receipt_assessments: HashSet<String>,
    expired_released: u64,
    evicted: u64,
}

/// How many queued records each request sweeps at most (two per new record keeps pace).
const SWEEP_PER_CALL: usize = 8;

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
            next_seq: 0,
            blobs: HashMap::new(),
            persisted_snapshots: HashSet::new(),
            logs: HashMap::new(),
            queue: VecDeque::new(),
            receipt_frames: HashSet::new(),
            receipt_assessments: HashSet::new(),
            expired_released: 0,
            evicted: 0,
        };
        let mut frames = Vec::new();
        let mut assessments = Vec::new();
        let mut items = Vec::new();
        let mut seeded = false;
        for (kind, key, value) in records {
            if value.is_empty() {
                continue; // a deleted record, in a store that keeps deletions as empty values
            }
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
                        _ if e.config.instance.is_some() => {}
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
                    assessments.push((key, r));
                }
                RecordKind::Receipt => {
                    let r: Receipt = record(kind, &key, &value)?;
                    e.receipt_frames.insert(r.frame_id.clone());
                    e.receipt_assessments.insert(r.assessment_id.clone());
                    e.receipts.insert(key, Arc::new(r));
                }
                RecordKind::LogItem => {
                    let (surface, log, index): (String, String, u64) =
                        serde_json::from_str(&key).map_err(|err| corrupt(kind, &key, err))?;
                    let ev: Evidence = record(kind, &key, &value)?;
                    items.push((surface, log, index, ev));
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
        items.sort_by_key(|(_, _, i, _)| *i);
        for (surface, log, index, ev) in items {
            let list = e.logs.entry(surface).or_default().entry(log).or_default();
            if list.len() as u64 != index {
                return Err(corrupt(
                    RecordKind::LogItem,
                    &format!("{index}"),
                    "log items are not contiguous",
                ));
            }
            list.push(Arc::new(ev));
        }
        let mut writes = Vec::new();
        // Frames and assessments handed in at open (a host may also load them on demand).
        for (key, rec) in frames {
            let snapshot = e
                .snapshots
                .get(&rec.snapshot)
                .cloned()
                .ok_or_else(|| corrupt(RecordKind::Frame, &key, "its snapshot is missing"))?;
            e.queue
                .push_back((rec.expires, RecordKind::Frame, key.clone()));
            e.frames.insert(key, FrameEntry { rec, snapshot });
        }
        for (key, r) in assessments {
            e.queue
                .push_back((r.expires, RecordKind::Assessment, key.clone()));
            e.assessments.insert(
                key,
                StoredAssessment {
                    principal: r.principal,
                    fingerprint: r.fingerprint,
                    record: Arc::new(r.record),
                },
            );
        }
        e.queue.make_contiguous().sort_by_key(|(t, _, _)| *t);
        if e.config.instance.is_some() {
            e.entries.sort_by(entry_order);
            e.next_id = 0;
        } else {
            e.entries.sort_by_key(|x| x.seq);
            e.next_id = e.reserved;
        }
        e.next_seq = e.entries.iter().map(|x| x.seq + 1).max().unwrap_or(0);
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
        if let Some(instance) = self.config.instance {
            let n = self.next_id;
            self.next_id += 1;
            let mut material = [0u8; 24];
            material[..8].copy_from_slice(&self.seed.to_be_bytes());
            material[8..16].copy_from_slice(&instance.to_be_bytes());
            material[16..].copy_from_slice(&n.to_be_bytes());
            return format!("{prefix}-{}", &sha256_hex(&material)[..32]);
        }
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
            // The declared evidence budget and retention (see `<log>-log` summaries).
            extensions: Some(
                json!({"weft": {
                    "frame_budget_bytes": self.config.frame_budget_bytes,
                    "expired_frame_retention_ms": self.config.expired_retention_ms,
                }})
                .as_object()
                .cloned()
                .expect("an object"),
            ),
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
        let app_obs = self.app.observations(&ctx, &s.state);
        let g = self.app.graph();
        let policy_ref = format!("{}@{}", self.app.policy_id(), self.policy_revision);
        let read_set = vec![
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
        ];
        let empty = BTreeMap::new();
        let logs = self.logs.get(surface_id).unwrap_or(&empty);
        // Every log shown by its summary alone, then items added newest first, one log at a
        // time in turn, while the frame stays within its budget.
        let mut windows: Vec<LogWindow> = logs
            .iter()
            .filter(|(_, items)| !items.is_empty())
            .map(|(log, items)| LogWindow {
                log: log.clone(),
                start: items.len() as u64,
                count: items.len() as u64,
            })
            .collect();
        let build = |windows: &[LogWindow]| -> (Vec<Evidence>, Vec<Decision>) {
            let obs = self.observations_with(surface_id, &app_obs, windows);
            let mut decisions = self.app.decisions(&ctx, &s.state, &obs);
            for d in &mut decisions {
                d.decision_id.clear();
            }
            (obs, decisions)
        };
        let (obs, decisions) = build(&windows);
        if !windows.is_empty() {
            let all: Vec<&str> = g.nodes.iter().map(|n| n.id.as_str()).collect();
            let preview_len = serde_json::to_vec(&preview(g, &all, DisclosureLevel::Full, 0))
                .map_or(0, |v| v.len());
            // A frame adds its id, times and disclosure to the snapshot, and its id to each
            // decision id; the summaries' numbers may grow by a few digits.
            let overhead = 512 + preview_len + decisions.len() * 40 + windows.len() * 32;
            let probe = (&read_set, &obs, &decisions, &policy_ref);
            let base = serde_json::to_vec(&probe).map_or(0, |v| v.len()) + overhead;
            let mut left = self.config.frame_budget_bytes.saturating_sub(base);
            let citing = decisions.len().max(1);
            let mut open: Vec<bool> = windows.iter().map(|_| true).collect();
            while open.iter().any(|o| *o) {
                for (w, o) in windows.iter_mut().zip(open.iter_mut()) {
                    if !*o {
                        continue;
                    }
                    let items = &logs[&w.log];
                    let Some(next) = w.start.checked_sub(1) else {
                        *o = false;
                        continue;
                    };
                    let item = &items[next as usize];
                    let cost = serde_json::to_vec(&**item).map_or(usize::MAX, |v| v.len())
                        + 1
                        + citing * (item.evidence_id.len() + 3);
                    if cost > left {
                        *o = false;
                    } else {
                        left -= cost;
                        w.start = next;
                    }
                }
            }
        }
        let (observations, decisions) = if windows.iter().any(|w| w.start < w.count) {
            build(&windows)
        } else {
            (obs, decisions)
        };
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
        let full = Snapshot {
            surface_id: surface_id.to_owned(),
            graph_id: g.graph_id.clone(),
            graph_version: g.graph_version.clone(),
            policy_ref,
            read_set,
            observations,
            decisions,
            service_calls_remaining: ctx.service_calls_remaining() as u64,
            required_features: required,
            logs: vec![],
        };
        check_snapshot(&full, self.app.services())?;
        let snap = Snapshot {
            observations: app_obs,
            logs: windows,
            ..full
        };
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

    /// The app's observations followed, per log window, by the log's summary and its items.
    fn observations_with(
        &self,
        surface_id: &str,
        app_obs: &[Evidence],
        windows: &[LogWindow],
    ) -> Vec<Evidence> {
        let mut out = app_obs.to_vec();
        let logs = self.logs.get(surface_id);
        for w in windows {
            out.push(self.log_summary(surface_id, w));
            if let Some(items) = logs.and_then(|l| l.get(&w.log)) {
                let end = (w.count as usize).min(items.len());
                let start = (w.start as usize).min(end);
                out.extend(items[start..end].iter().map(|e| (**e).clone()));
            }
        }
        out
    }

    /// The `<log>-log` evidence item: how many items the log has, which are shown, and where
    /// the earlier ones are.
    fn log_summary(&self, surface_id: &str, w: &LogWindow) -> Evidence {
        let page = (w.start > 0).then(|| self.log_href(surface_id, &w.log, w.start));
        Evidence {
            evidence_id: format!("{}-log", w.log),
            kind: EvidenceKind::Json,
            mime_type: "application/json".into(),
            required: false,
            trust: Trust::Observed,
            source: Source {
                kind: SourceKind::Application,
                id: self.app.name().to_owned(),
                model: None,
                based_on_frame: None,
                extensions: None,
            },
            content: Some(json!({
                "log": w.log,
                "count": w.count,
                "shown": w.count - w.start,
                "first_shown": w.start,
                "budget_bytes": self.config.frame_budget_bytes,
                "earlier_href": page,
            })),
            blob: None,
            derived_from: None,
            extensions: None,
        }
    }

    fn log_href(&self, surface_id: &str, log: &str, before: u64) -> String {
        format!(
            "/dgp/surfaces/{}/logs/{}?before={before}",
            path_segment(surface_id),
            path_segment(log)
        )
    }

    /// `GET /dgp/surfaces/{id}/logs/{log}?before=N&limit=M`: up to `limit` (1..=100, default
    /// 20) items before index `before` (default: the end), oldest first, within the frame byte
    /// budget (at least one item), with the link to the page before.
    pub fn log_page(
        &self,
        surface_id: &str,
        log: &str,
        before: Option<&str>,
        limit: Option<&str>,
    ) -> Result<Value, FramesError> {
        if !self.surfaces.contains_key(surface_id) {
            return Err(FramesError::NotFound(format!("no surface `{surface_id}`")));
        }
        let items = self
            .logs
            .get(surface_id)
            .and_then(|l| l.get(log))
            .map_or(&[][..], Vec::as_slice);
        let count = items.len() as u64;
        let number = |name: &str, t: Option<&str>, default: u64, max: u64| match t {
            None => Ok(default),
            Some(t) => t.parse::<u64>().ok().filter(|n| *n <= max).ok_or_else(|| {
                FramesError::InvalidMessage(format!("{name} must be an integer in 0..={max}"))
            }),
        };
        let before = number("before", before, count, count)?;
        let limit = number("limit", limit, 20, 100)?.max(1);
        let mut start = before;
        let mut size = 0usize;
        while start > 0 && before - start < limit {
            let n = serde_json::to_vec(&*items[start as usize - 1]).map_or(usize::MAX, |v| v.len());
            if start < before && size + n > self.config.frame_budget_bytes {
                break;
            }
            size = size.saturating_add(n);
            start -= 1;
        }
        let shown: Vec<&Evidence> = items[start as usize..before as usize]
            .iter()
            .map(|e| &**e)
            .collect();
        Ok(json!({
            "dgp": DGP_VERSION,
            "surface_id": surface_id,
            "log": log,
            "count": count,
            "first": start,
            "items": shown,
            "earlier_href": (start > 0).then(|| self.log_href(surface_id, log, start)),
        }))
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
            observations: self.observations_with(&snap.surface_id, &snap.observations, &snap.logs),
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
        now: Wall,
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
        // Retention first, so the new frame itself is never swept by its own read.
        self.sweep_some(now, SWEEP_PER_CALL, writes);
        self.queue
            .push_back((rec.expires, RecordKind::Frame, frame_id.clone()));
        self.frames
            .insert(frame_id.clone(), FrameEntry { rec, snapshot });
        Ok(frame_id)
    }

    /// `GET /dgp/surfaces/{id}/frame`: a new immutable frame of the current state.
    /// `disclosure` is `next` (default), `horizon` or `full`; `horizon` is 0..=20 (default 2).
    pub fn frame(
        &mut self,
        now: Wall,
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
        now: Wall,
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
        now: Wall,
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
        now: Wall,
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
        let expires = frame.rec.expires;
        let record = Assessment::record(req, &principal.id, rfc3339(now));
        let stored = AssessmentRecord {
            principal: principal.id.clone(),
            fingerprint: fp,
            expires,
            record,
        };
        let mut writes = vec![Write::json(
            RecordKind::Assessment,
            stored.record.assessment_id.clone(),
            &stored,
        )];
        let record = Arc::new(stored.record);
        self.queue.push_back((
            expires,
            RecordKind::Assessment,
            record.assessment_id.clone(),
        ));
        self.assessments.insert(
            record.assessment_id.clone(),
            StoredAssessment {
                principal: stored.principal,
                fingerprint: stored.fingerprint,
                record: record.clone(),
            },
        );
        self.sweep_some(now, SWEEP_PER_CALL, &mut writes);
        Ok(Done {
            value: record,
            writes,
        })
    }

    /// `POST /dgp/commits` with a raw body: strict JSON, then [`Engine::commit`].
    pub fn commit_bytes(
        &mut self,
        now: Wall,
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
    /// budget, then the atomic apply and its receipt: [`Engine::prepare_commit`] followed by
    /// [`Engine::apply_commit`].
    pub fn commit(
        &mut self,
        now: Wall,
        principal: &Principal,
        idempotency_key: Option<&str>,
        body: Value,
    ) -> Result<Done<Arc<Receipt>>, FramesError> {
        let mut prepared = self.prepare_commit(now, principal, idempotency_key, body)?;
        // Both parts are returned in one `Done`, acknowledged together by the host.
        let mut writes = std::mem::take(&mut prepared.writes);
        let done = self.apply_commit(Committed(prepared));
        writes.extend(done.writes);
        Ok(Done {
            value: done.value,
            writes,
        })
    }

    /// [`Engine::prepare_commit`] with a raw body: size limit and strict JSON first.
    pub fn prepare_commit_bytes(
        &mut self,
        now: Wall,
        principal: &Principal,
        idempotency_key: Option<&str>,
        body: &[u8],
    ) -> Result<Prepared<A::State>, FramesError> {
        self.check_size(body)?;
        self.prepare_commit(now, principal, idempotency_key, parse_strict(body)?)
    }

    /// [`Engine::prepare_commit_bytes`] for a host that decides in a shared database: refuses
    /// with [`FramesError::ScopesNotLocked`] (retryable) unless every row of
    /// [`Engine::scopes`] is among `locked` (the rows this transaction holds). A frame that is
    /// not in memory (evicted since the host prefetched it) is refused the same way, so the
    /// host rolls back, prefetches again and retries, at most [`COMMIT_LOCK_ATTEMPTS`] times
    /// (`attempt` counts from 0); on the last attempt a frame still absent is `NOT_FOUND` (it
    /// could not be read back, and a missing frame decides nothing). An idempotent replay
    /// needs no row lock (its record is immutable under the key's lock).
    pub fn prepare_commit_locked_bytes(
        &mut self,
        now: Wall,
        principal: &Principal,
        idempotency_key: Option<&str>,
        body: &[u8],
        locked: &[(RecordKind, String)],
        attempt: u32,
    ) -> Result<Prepared<A::State>, FramesError> {
        self.check_size(body)?;
        let value = parse_strict(body)?;
        let replay = Self::usable_idempotency_key(idempotency_key).is_some_and(|k| {
            self.idempotency
                .contains_key(&(principal.id.clone(), k.to_owned()))
        });
        if !replay {
            let frame_id = value
                .get("frame_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let held = self.frames.contains_key(frame_id);
            if held || attempt + 1 < COMMIT_LOCK_ATTEMPTS {
                let scopes = self.scopes(frame_id);
                if scopes.is_empty() || !scopes.iter().all(|s| locked.contains(s)) {
                    return Err(FramesError::ScopesNotLocked(format!(
                        "the read set of frame `{frame_id}` is not locked by this transaction; retry"
                    )));
                }
            }
        }
        self.prepare_commit(now, principal, idempotency_key, value)
    }

    /// Decides a commit without applying it: every check of [`Engine::commit`] and every
    /// computation (the new surface state, receipt, entries, log items, blobs, idempotency
    /// record and their writes) on copies. Its only mutations are burning ids and caching the
    /// current snapshot of the surface. Nothing is visible until [`Engine::apply_commit`]; a
    /// host that decides in a shared database (PostgreSQL) writes [`Prepared::writes`] in its
    /// transaction and applies after COMMIT ([`Prepared::split`] → [`Persist::ack`] →
    /// [`Pending::release`] → [`Engine::apply_commit`]), or drops the `Prepared` on failure. With
    /// `instance: None` a `Prepared` must be applied (its writes may hold the id block).
    pub fn prepare_commit(
        &mut self,
        now: Wall,
        principal: &Principal,
        idempotency_key: Option<&str>,
        body: Value,
    ) -> Result<Prepared<A::State>, FramesError> {
        let fp = fingerprint(&body);
        let req: CommitRequest = typed("commit", body)?;
        validate::check_commit_request(&req)?;
        features::require(req.required_features.as_deref().unwrap_or_default())?;
        let key = match Self::usable_idempotency_key(idempotency_key) {
            Some(k) => k,
            None => {
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
            return Ok(Prepared {
                replay: Some(r.clone()),
                receipt: r,
                surface_id: String::new(),
                base_revision: 0,
                revision: 0,
                writes: vec![],
                now,
                change: None,
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
        for (log, ev) in &applied.appended {
            if log.is_empty() || !log.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                return Err(FramesError::InvalidMessage(format!(
                    "application appended to an invalid log name `{log}`"
                )));
            }
            validate::check_evidence(ev).map_err(FramesError::InvalidMessage)?;
        }
        // Nothing below can fail: ids are burnt only for a commit that is decided.
        let service_calls = s.service_calls + applied.service_call as u32;
        let base_revision = s.revision;
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
        let mut entries = Vec::with_capacity(applied.entries.len());
        for (view, body) in applied.entries {
            let id = self.alloc_id("e", &mut writes);
            let entry = Entry {
                view,
                id: id.clone(),
                surface: surface_id.clone(),
                created_at: rfc3339(now),
                seq: self.next_seq + entries.len() as u64,
                body,
            };
            writes.push(Write::json(RecordKind::Entry, id, &entry));
            entries.push(entry);
        }
        let mut items: Vec<(String, u64, Arc<Evidence>)> = Vec::new();
        for (log, mut ev) in applied.appended {
            let index = self.log_len(&surface_id, &log)
                + items.iter().filter(|(l, _, _)| *l == log).count() as u64;
            ev.evidence_id = format!("{log}-{index}");
            writes.push(Write::json(
                RecordKind::LogItem,
                Self::log_key(&surface_id, &log, index),
                &ev,
            ));
            items.push((log, index, Arc::new(ev)));
        }
        let mut blobs = Vec::with_capacity(applied.blobs.len());
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
            blobs.push((key, meta));
        }
        let surface = SurfaceEntry {
            revision,
            service_calls,
            state,
            snapshot: None,
            templates: vec![],
        };
        writes.push(surface_write(&surface_id, &surface));
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
            Self::idempotency_key(&idem.principal, &idem.key),
            &idem,
        ));
        Ok(Prepared {
            replay: None,
            receipt: Arc::new(receipt),
            surface_id,
            base_revision,
            revision,
            writes,
            now,
            change: Some(Box::new(Change {
                surface,
                idem,
                entries,
                items,
                blobs,
            })),
        })
    }

    /// Applies a prepared commit to memory once the host made its writes durable (COMMITted
    /// them and acknowledged them: [`Committed`]). Returns the receipt and only the writes of
    /// the retention run that follows (deletions; the [`Prepared::writes`] are not repeated). Each part is taken like a
    /// [`Engine::refresh`] of its record, so applying after the memory already moved on (a
    /// later commit refreshed from another instance) never goes back: the surface is replaced
    /// only by a newer revision, log items only at the end of their log, the rest only when
    /// absent. A replay applies nothing.
    pub fn apply_commit(&mut self, committed: Committed<A::State>) -> Done<Arc<Receipt>> {
        let Prepared {
            receipt,
            surface_id,
            now,
            change,
            ..
        } = committed.0;
        let Some(change) = change else {
            return Done {
                value: receipt,
                writes: vec![],
            };
        };
        let Change {
            surface,
            idem,
            entries,
            items,
            blobs,
        } = *change;
        let local = self.config.instance.is_none();
        for entry in entries {
            self.insert_entry(entry, !local);
        }
        for (log, index, ev) in items {
            self.append_item(&surface_id, &log, index, ev);
        }
        for (key, meta) in blobs {
            self.blobs.insert(key, meta);
        }
        self.absorb_surface(&surface_id, surface);
        self.idempotency
            .entry((idem.principal.clone(), idem.key.clone()))
            .or_insert(idem);
        self.absorb_receipt(receipt.clone());
        let mut writes = Vec::new();
        self.sweep_some(now, SWEEP_PER_CALL, &mut writes);
        Done {
            value: receipt,
            writes,
        }
    }

    /// The record keys of a frame's read set, in the order a host locks them: the surface rows
    /// (`(Surface, id)`, sorted) then the policy (`(Meta, "policy_revision")`). Empty when the
    /// frame is not in memory (admit it first; a commit naming no known frame is refused).
    pub fn scopes(&self, frame_id: &str) -> Vec<(RecordKind, String)> {
        let Some(f) = self.frames.get(frame_id) else {
            return vec![];
        };
        let policy = self.policy_resource();
        let prefix = format!("{}:", self.app.resource_kind());
        let mut out: Vec<(RecordKind, String)> = f
            .snapshot
            .read_set
            .iter()
            .filter(|rv| rv.resource_id != policy)
            .filter_map(|rv| rv.resource_id.strip_prefix(&prefix))
            .map(|sid| (RecordKind::Surface, sid.to_owned()))
            .collect();
        out.sort();
        out.dedup();
        if f.snapshot
            .read_set
            .iter()
            .any(|rv| rv.resource_id == policy)
        {
            out.push((RecordKind::Meta, "policy_revision".to_owned()));
        }
        out
    }

    /// Takes a record another engine wrote to the shared store into memory ([`Engine::admit`]
    /// generalised). A surface is replaced when the stored revision is newer (its cached
    /// snapshot and templates go); the policy revision likewise (every surface's caches go);
    /// idempotency records, receipts, entries and blob metadata are added when absent; a log
    /// item is appended when its index is the log's length (the surface's caches go), so feed
    /// a log's items in index order (`Gap` otherwise). Frames and assessments come in through
    /// [`Engine::needs`]/[`Engine::admit`]; snapshots are admitted; blobs are not held.
    /// Refresh a commit's log items, entries, receipt and idempotency record before its
    /// surface row, so a frame is never built from a revision without its log.
    pub fn refresh(
        &mut self,
        kind: RecordKind,
        key: &str,
        value: &[u8],
    ) -> Result<Refreshed, FramesError> {
        use Refreshed::{Changed, Unchanged};
        if value.is_empty() {
            return Ok(Unchanged);
        }
        let changed = |b: bool| if b { Changed } else { Unchanged };
        Ok(match kind {
            RecordKind::Meta => {
                if key != "policy_revision" {
                    return Ok(Unchanged);
                }
                let n: u64 = record(kind, key, value)?;
                if n <= self.policy_revision {
                    return Ok(Unchanged);
                }
                self.policy_revision = n;
                for s in self.surfaces.values_mut() {
                    s.snapshot = None;
                    s.templates.clear();
                }
                Changed
            }
            RecordKind::Surface => {
                let r: SurfaceRecord<A::State> = record(kind, key, value)?;
                let entry = SurfaceEntry {
                    revision: r.revision,
                    service_calls: r.service_calls,
                    state: r.state,
                    snapshot: None,
                    templates: vec![],
                };
                changed(self.absorb_surface(key, entry))
            }
            RecordKind::Receipt => {
                let r: Receipt = record(kind, key, value)?;
                changed(self.absorb_receipt(Arc::new(r)))
            }
            RecordKind::Idempotency => {
                let r: IdempotencyRecord = record(kind, key, value)?;
                let k = (r.principal.clone(), r.key.clone());
                changed(match self.idempotency.entry(k) {
                    std::collections::hash_map::Entry::Occupied(_) => false,
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(r);
                        true
                    }
                })
            }
            RecordKind::Entry => {
                let r: Entry = record(kind, key, value)?;
                changed(self.insert_entry(r, true))
            }
            RecordKind::LogItem => {
                let (surface, log, index): (String, String, u64) =
                    serde_json::from_str(key).map_err(|err| corrupt(kind, key, err))?;
                let ev: Evidence = record(kind, key, value)?;
                self.append_item(&surface, &log, index, Arc::new(ev))
            }
            RecordKind::BlobMeta => {
                let r: BlobMeta = record(kind, key, value)?;
                changed(self.blobs.insert(key.to_owned(), r.clone()).as_ref() != Some(&r))
            }
            RecordKind::Snapshot => {
                let held = self.snapshots.contains_key(key);
                self.admit(Wall::ZERO, kind, key, value)?;
                changed(!held)
            }
            RecordKind::Frame | RecordKind::Assessment | RecordKind::Blob => Unchanged,
        })
    }

    /// The number of items of a surface's log held in memory (the index the next one takes).
    pub fn log_len(&self, surface_id: &str, log: &str) -> u64 {
        self.logs
            .get(surface_id)
            .and_then(|l| l.get(log))
            .map_or(0, |items| items.len() as u64)
    }

    /// The logs of a surface held in memory and their lengths, by log name.
    pub fn log_lens(&self, surface_id: &str) -> Vec<(String, u64)> {
        self.logs.get(surface_id).map_or_else(Vec::new, |l| {
            l.iter()
                .map(|(name, items)| (name.clone(), items.len() as u64))
                .collect()
        })
    }

    /// The record key of a log item (`["surface","log",index]`).
    pub fn log_key(surface_id: &str, log: &str, index: u64) -> String {
        serde_json::to_string(&(surface_id, log, index)).expect("keys serialize")
    }

    /// The half-open key range `[start, end)` (byte order) holding every log item of a surface.
    pub fn log_key_range(surface_id: &str) -> (String, String) {
        let start = format!(
            "[{},",
            serde_json::to_string(surface_id).expect("strings serialize")
        );
        let end = format!("{}-", &start[..start.len() - 1]);
        (start, end)
    }

    /// `key` when a commit may use it (1..200 characters), else `None` (the commit is refused
    /// `IDEMPOTENCY_KEY_REQUIRED`). Hosts that lock on the key first ask here.
    pub fn usable_idempotency_key(key: Option<&str>) -> Option<&str> {
        key.filter(|k| !k.is_empty() && k.chars().count() <= 200)
    }

    /// The record key of the idempotency record of `(principal, key)`.
    pub fn idempotency_key(principal_id: &str, key: &str) -> String {
        serde_json::to_string(&[principal_id, key]).expect("strings serialize")
    }

    /// The receipt id an idempotency key held in memory names (`needs(Receipt, id)` tells
    /// whether the receipt itself must be refreshed).
    pub fn idempotent_receipt(&self, principal_id: &str, key: &str) -> Option<&str> {
        self.idempotency
            .get(&(principal_id.to_owned(), key.to_owned()))
            .map(|r| r.receipt_id.as_str())
    }

    /// Replaces a surface unless memory holds the same or a newer revision.
    fn absorb_surface(&mut self, surface_id: &str, entry: SurfaceEntry<A::State>) -> bool {
        match self.surfaces.get(surface_id) {
            Some(s) if s.revision >= entry.revision => false,
            _ => {
                self.surfaces.insert(surface_id.to_owned(), entry);
                true
            }
        }
    }

    fn absorb_receipt(&mut self, receipt: Arc<Receipt>) -> bool {
        if self.receipts.contains_key(&receipt.receipt_id) {
            return false;
        }
        self.receipt_frames.insert(receipt.frame_id.clone());
        self.receipt_assessments
            .insert(receipt.assessment_id.clone());
        self.receipts.insert(receipt.receipt_id.clone(), receipt);
        true
    }

    /// Adds an entry in order (`seq` with one instance, `(created_at, seq, id)` with several);
    /// `check`: unless it is held already.
    fn insert_entry(&mut self, entry: Entry, check: bool) -> bool {
        let at = if self.config.instance.is_some() {
            match self.entries.binary_search_by(|x| entry_order(x, &entry)) {
                Ok(_) => return false,
                Err(at) => at,
            }
        } else {
            if check && self.entries.iter().rev().any(|x| x.id == entry.id) {
                return false;
            }
            self.entries.partition_point(|x| x.seq <= entry.seq)
        };
        self.next_seq = self.next_seq.max(entry.seq + 1);
        self.entries.insert(at, entry);
        true
    }

    /// Appends a log item at `index` if that is the log's length.
    fn append_item(
        &mut self,
        surface_id: &str,
        log: &str,
        index: u64,
        ev: Arc<Evidence>,
    ) -> Refreshed {
        let items = self
            .logs
            .entry(surface_id.to_owned())
            .or_default()
            .entry(log.to_owned())
            .or_default();
        let len = items.len() as u64;
        if index < len {
            return Refreshed::Unchanged;
        }
        if index > len {
            return Refreshed::Gap;
        }
        items.push(ev);
        if let Some(s) = self.surfaces.get_mut(surface_id) {
            s.snapshot = None;
            s.templates.clear();
        }
        Refreshed::Changed
    }

    fn resource_revision(&self, resource_id: &str) -> Option<u64> {
        if resource_id == self.policy_resource() {
            return Some(self.policy_revision);
        }
        let prefix = format!("{}:", self.app.resource_kind());
        let sid = resource_id.strip_prefix(&prefix)?;
        self.surfaces.get(sid).map(|s| s.revision)
    }

    /// [`Engine::bump_policy`] decided without changing memory, for a host that decides in a
    /// shared database: the next revision and its write. After COMMIT the host takes the
    /// write in with [`Engine::refresh`] (a newer policy revision drops every cache); on a
    /// failure it drops it and memory never moved.
    pub fn prepare_bump_policy(&self) -> Done<u64> {
        let next = self.policy_revision + 1;
        Done {
            value: next,
            writes: vec![Write::json(RecordKind::Meta, "policy_revision", &next)],
        }
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

    /// What is held in memory and what was released.
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            frames: self.frames.len(),
            assessments: self.assessments.len(),
            receipts: self.receipts.len(),
            snapshots: self.snapshots.len(),
            log_items: self
                .logs
                .values()
                .flat_map(|l| l.values())
                .map(Vec::len)
                .sum(),
            expired_released: self.expired_released,
            evicted: self.evicted,
        }
    }

    fn past_retention(&self, now: Wall, expires: Wall) -> bool {
        expires != Wall::ZERO && now >= expires.plus(self.config.expired_retention_ms)
    }

    /// Retention (run by every request for a few records, and by [`Engine::sweep`]): frames
    /// and assessments past `expires + expired_retention_ms` leave memory and, unless a receipt
    /// names them, their records are deleted; past `max_cached_records` the oldest live ones
    /// leave memory only (the host reads them back on demand). A snapshot no frame in memory
    /// uses leaves memory too (its record is kept: it is small and read back on demand).
    fn sweep_some(&mut self, now: Wall, limit: usize, writes: &mut Vec<Write>) -> usize {
        let mut n = 0;
        // Snapshots the surfaces hold as their current one (counted only when it matters).
        let current = if self.snapshots.len() > self.config.max_cached_snapshots {
            self.surfaces
                .values()
                .filter(|s| s.snapshot.is_some())
                .count()
        } else {
            0
        };
        while n < limit {
            let Some((expires, kind, id)) = self.queue.front() else {
                break;
            };
            let expired = self.past_retention(now, *expires);
            if !expired
                && self.frames.len() + self.assessments.len() <= self.config.max_cached_records
                && self.snapshots.len() <= self.config.max_cached_snapshots + current
            {
                break;
            }
            let (kind, id) = (*kind, id.clone());
            self.queue.pop_front();
            n += 1;
            let referenced = match kind {
                RecordKind::Frame => {
                    let Some(entry) = self.frames.remove(&id) else {
                        continue;
                    };
                    let key = entry.rec.snapshot.clone();
                    drop(entry);
                    if self
                        .snapshots
                        .get(&key)
                        .is_some_and(|a| Arc::strong_count(a) == 1)
                    {
                        self.snapshots.remove(&key);
                    }
                    self.receipt_frames.contains(&id)
                }
                _ => {
                    if self.assessments.remove(&id).is_none() {
                        continue;
                    }
                    self.receipt_assessments.contains(&id)
                }
            };
            if expired && !referenced {
                self.expired_released += 1;
                writes.push(Write::delete(kind, id));
            } else {
                self.evicted += 1;
            }
        }
        n
    }

    /// Runs retention over at most `limit` records due at `now` (hosts call it on a timer);
    /// returns how many records left memory, and the deletions to persist.
    pub fn sweep(&mut self, now: Wall, limit: usize) -> Done<usize> {
        // Snapshots no frame and no surface holds any more (e.g. built for a commit's check).
        self.snapshots.retain(|_, a| Arc::strong_count(a) > 1);
        let mut writes = Vec::new();
        let n = self.sweep_some(now, limit, &mut writes);
        Done { value: n, writes }
    }

    /// The stored records a request body names (its `frame_id` and `assessment_id`), for hosts
    /// that load frames and assessments on demand: pass each to [`Engine::needs`] and, if
    /// needed and stored, to [`Engine::admit`] before the call.
    pub fn named_records(body: &[u8]) -> Vec<(RecordKind, String)> {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return vec![];
        };
        [
            ("frame_id", RecordKind::Frame),
            ("assessment_id", RecordKind::Assessment),
        ]
        .into_iter()
        .filter_map(|(field, kind)| {
            v.get(field)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty() && s.len() <= 256)
                .map(|s| (kind, s.to_owned()))
        })
        .collect()
    }

    /// Whether a frame, assessment, snapshot or receipt is not in memory (and may be in the store).
    pub fn needs(&self, kind: RecordKind, key: &str) -> bool {
        match kind {
            RecordKind::Frame => !self.frames.contains_key(key),
            RecordKind::Assessment => !self.assessments.contains_key(key),
            RecordKind::Snapshot => !self.snapshots.contains_key(key),
            RecordKind::Receipt => !self.receipts.contains_key(key),
            _ => false,
        }
    }

    /// Takes a stored frame, assessment, snapshot or receipt (one written by another instance)
    /// back into memory. Returns a record that must
    /// be admitted first (a frame's snapshot), after which admit this one again. Records past
    /// their retention are not taken back (they are about to be deleted).
    pub fn admit(
        &mut self,
        now: Wall,
        kind: RecordKind,
        key: &str,
        value: &[u8],
    ) -> Result<Option<(RecordKind, String)>, FramesError> {
        if value.is_empty() || !self.needs(kind, key) {
            return Ok(None);
        }
        match kind {
            RecordKind::Frame => {
                let rec: FrameRecord = record(kind, key, value)?;
                if self.past_retention(now, rec.expires) && !self.receipt_frames.contains(key) {
                    return Ok(None);
                }
                let Some(snapshot) = self.snapshots.get(&rec.snapshot).cloned() else {
                    return Ok(Some((RecordKind::Snapshot, rec.snapshot)));
                };
                self.queue
                    .push_back((rec.expires, RecordKind::Frame, key.to_owned()));
                self.frames
                    .insert(key.to_owned(), FrameEntry { rec, snapshot });
            }
            RecordKind::Assessment => {
                let r: AssessmentRecord = record(kind, key, value)?;
                if self.past_retention(now, r.expires) && !self.receipt_assessments.contains(key) {
                    return Ok(None);
                }
                self.queue
                    .push_back((r.expires, RecordKind::Assessment, key.to_owned()));
                self.assessments.insert(
                    key.to_owned(),
                    StoredAssessment {
                        principal: r.principal,
                        fingerprint: r.fingerprint,
                        record: Arc::new(r.record),
                    },
                );
            }
            RecordKind::Snapshot => {
                let snap: Snapshot = record(kind, key, value)?;
                self.persisted_snapshots.insert(key.to_owned());
                self.snapshots.insert(key.to_owned(), Arc::new(snap));
            }
            RecordKind::Receipt => {
                let r: Receipt = record(kind, key, value)?;
                self.absorb_receipt(Arc::new(r));
            }
            _ => {}
        }
        Ok(None)
    }

    /// Compaction of stored records the engine may never have loaded (e.g. frames of earlier
    /// runs): the deletions for those of `rows` (frame or assessment records of `kind`) that
    /// are past their retention and named by no receipt.
    #[must_use = "the deletions must be applied to the store"]
    pub fn compact(&self, now: Wall, kind: RecordKind, rows: &[(String, Vec<u8>)]) -> Vec<Write> {
        rows.iter()
            .filter(|(key, value)| {
                let expires = match kind {
                    RecordKind::Frame if !self.receipt_frames.contains(key) => {
                        record::<FrameRecord>(kind, key, value).map(|r| r.expires)
                    }
                    RecordKind::Assessment if !self.receipt_assessments.contains(key) => {
                        record::<AssessmentRecord>(kind, key, value).map(|r| r.expires)
                    }
                    _ => return false,
                };
                expires.is_ok_and(|t| self.past_retention(now, t))
            })
            .map(|(key, _)| Write::delete(kind, key.clone()))
            .collect()
    }
}

/// The order of entries across instances: no global counter, equal `seq`s are harmless.
fn entry_order(a: &Entry, b: &Entry) -> std::cmp::Ordering {
    (&a.created_at, a.seq, &a.id).cmp(&(&b.created_at, b.seq, &b.id))
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
