//! The storage seam. The core never touches a store: it expresses every change as a
//! [`WriteBatch`] of [`Op`]s on paths under `$CHAT_ROOT`, the host performs the batch and
//! acknowledges it with the store's proof ([`ActorStore::perform`] → [`Applied`] →
//! [`super::ActorGraph::ack`]). Loading is the reverse: the host hands the
//! core a [`Snapshot`] of the files.
//!
//! A batch is a list of stages. A store must make every op of a stage durable before it starts
//! the next stage; within a stage, ops may be performed in any order or concurrently. After a
//! crash a store may hold any subset of a stage's ops (appends possibly torn), but never an op
//! of a later stage without the whole earlier stage. Recovery on open relies on exactly that:
//! a spawn's first stage creates the child (which names its parent), so everything the second
//! stage writes can be rebuilt from it. The guarantee is about the [`Snapshot`] a store hands
//! out: a store may finish the last step of an op while performing the next stage, provided
//! it can tell, when it opens, whether the op's own stage was durable and then finishes it
//! before loading (the filesystem store renames a node directory into place that way).
//!
//! [`Op::Patch`] is the one op a crash may leave half done inside a record: the record's
//! bytes before `at` as they were, then any prefix of the patch (or, on a power loss, stale
//! or zeroed bytes) after them — a record that may not parse. The core emits patches only in
//! a spawn's second stage, on the two records that stage rewrites and that stage 1 makes
//! rebuildable: `graph.json` (open moves an unreadable one aside and rebuilds it from the
//! node records) and the parent's `meta.json` (open cuts a torn one back to its last whole
//! child in `spawned`, reports `TORN_RECORD` and rewrites it; roll-forward then links the
//! children that name the parent). A store that cannot write in place may perform a patch as
//! a whole replace of the record (its first `at` bytes and `text`), atomically like a `put`.
//! Readers of a filesystem store see no torn patch: it is written under the readers' lock.
//! A patch is one positioned write of a few hundred bytes, which process death does not cut
//! (short of a write straddling a page boundary at the instant of a `SIGKILL`); a power loss
//! can, so after one the parent's directory under `nodes/` may hold a torn `meta.json` until
//! the next writer opens the root and repairs it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Identifies a batch. Ids increase; acknowledging one acknowledges every earlier one.
pub type BatchId = u64;

/// One storage operation. Paths are relative, `/`-separated, and built by the core from
/// validated node ids (stores re-check them with [`check_path`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Creates `nodes/{id}/` with its first files, atomically: afterwards either the whole
    /// directory exists or none of it does (file stores build it under a temporary name and
    /// rename it into place).
    CreateNode {
        id: String,
        /// (name inside the node directory, content).
        files: Vec<(String, String)>,
    },
    /// Replaces a whole record atomically (JSON files: temp file + fsync + rename).
    Put { path: String, text: String },
    /// Appends whole lines to a log (JSONL), durably.
    Append { path: String, text: String },
    /// Cuts a log back to `len` bytes (recovery of a torn last line).
    Truncate { path: String, len: u64 },
    /// Moves a record aside (recovery keeps a corrupt record instead of overwriting it).
    Rename { from: String, to: String },
    /// Grows a JSON record in place: the record is `size` bytes long, and its bytes from
    /// offset `at` to the end are replaced with `text`, durably (file stores: a positioned
    /// write at `at`, the length set to `at + text.len()`, fsync). The bytes before `at` are
    /// never written. The core emits it only for records it wrote in its canonical form (a
    /// spawn adds an entry to `graph.json`'s `nodes`, a child to the parent's `spawned`), so a
    /// spawn writes O(1) bytes however many nodes the root holds. A store whose record is not
    /// `size` bytes long refuses the op (the record changed under the writer). See the module
    /// documentation for what a crash may leave.
    Patch {
        path: String,
        at: u64,
        size: u64,
        text: String,
    },
}

impl Op {
    /// The op as JSON (for logs, conformance vectors and the JS store).
    pub fn to_json(&self) -> Value {
        match self {
            Op::CreateNode { id, files } => {
                let f: serde_json::Map<String, Value> = files
                    .iter()
                    .map(|(n, t)| (n.clone(), Value::String(t.clone())))
                    .collect();
                json!({"op": "createNode", "id": id, "path": format!("nodes/{id}"), "files": f})
            }
            Op::Put { path, text } => json!({"op": "put", "path": path, "text": text}),
            Op::Append { path, text } => json!({"op": "append", "path": path, "text": text}),
            Op::Truncate { path, len } => json!({"op": "truncate", "path": path, "len": len}),
            Op::Rename { from, to } => json!({"op": "rename", "path": from, "to": to}),
            Op::Patch {
                path,
                at,
                size,
                text,
            } => json!({"op": "patch", "path": path, "at": at, "size": size, "text": text}),
        }
    }

    /// Reads an op back from its JSON form ([`to_json`](Self::to_json)): how a store that
    /// received a batch as JSON (the JS stores) has the core apply it
    /// ([`MemoryStore::apply_op`]) instead of re-implementing the ops.
    pub fn from_json(v: &Value) -> Result<Op, String> {
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("store op: `{k}` must be a string"))
        };
        let n = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("store op: `{k}` must be a whole number"))
        };
        Ok(match v.get("op").and_then(Value::as_str) {
            Some("createNode") => Op::CreateNode {
                id: s("id")?,
                files: v
                    .get("files")
                    .and_then(Value::as_object)
                    .ok_or("store op: `files` must be an object")?
                    .iter()
                    .map(|(k, t)| {
                        t.as_str()
                            .map(|t| (k.clone(), t.to_owned()))
                            .ok_or_else(|| format!("store op: file {k} must be text"))
                    })
                    .collect::<Result<_, String>>()?,
            },
            Some("put") => Op::Put {
                path: s("path")?,
                text: s("text")?,
            },
            Some("append") => Op::Append {
                path: s("path")?,
                text: s("text")?,
            },
            Some("truncate") => Op::Truncate {
                path: s("path")?,
                len: n("len")?,
            },
            Some("rename") => Op::Rename {
                from: s("path")?,
                to: s("to")?,
            },
            Some("patch") => Op::Patch {
                path: s("path")?,
                at: n("at")?,
                size: n("size")?,
                text: s("text")?,
            },
            other => return Err(format!("unknown store op {other:?}")),
        })
    }

    /// The paths this op writes.
    pub fn paths(&self) -> Vec<String> {
        match self {
            Op::CreateNode { id, files } => files
                .iter()
                .map(|(n, _)| format!("nodes/{id}/{n}"))
                .collect(),
            Op::Put { path, .. }
            | Op::Append { path, .. }
            | Op::Truncate { path, .. }
            | Op::Patch { path, .. } => vec![path.clone()],
            Op::Rename { from, to } => vec![from.clone(), to.clone()],
        }
    }
}

/// How durable a store must make a batch before it acknowledges it: the core decides, per
/// batch, the host carries it.
///
/// * `Synced` (every batch but the ones below): on stable storage — it survives a power loss
///   (file stores: fsync). Performing a `Synced` batch also makes every earlier batch
///   durable (file stores fsync the files earlier `Written` batches left unsynced in its
///   first round), so acknowledging it says that of everything before it.
/// * `Written`: handed to the operating system — visible to the next process that opens the
///   root even if this one is killed (the page cache survives `SIGKILL`), but a power loss
///   before the next `Synced` batch may lose it. The core asks for it only for lines nobody
///   outside the writer has been told about: an agent's lines that precede a read (its
///   model request) and a person's line that is acknowledged only with the turn's end (see
///   `crate::agents`). Everything an acknowledgement or an external side effect depends on
///   is in a `Synced` batch.
///
/// A store may always do more than asked: one without the distinction (memory, the JS
/// stores) performs every batch alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Durability {
    /// Written to the operating system, not yet to stable storage.
    Written,
    /// On stable storage, with every earlier batch.
    #[default]
    Synced,
}

impl Durability {
    /// The JSON form: `"written"` or `"synced"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Written => "written",
            Durability::Synced => "synced",
        }
    }
}

/// Ordered stages of ops that one core call produced: the graph's durability output, to
/// perform on the store and acknowledge with the store's proof ([`ActorStore::perform`] →
/// [`ActorGraph::ack`](super::ActorGraph::ack)), or to hand to a store that performs it out of
/// line ([`WriteBatch::hand_off`] → [`InFlight::performed`] → `ack`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "perform it on the store and acknowledge it: `ActorStore::perform` → `ActorGraph::ack`"]
pub struct WriteBatch {
    pub id: BatchId,
    /// What the batch does (`spawn docs-sync`), for logs and errors.
    pub label: String,
    /// Every op of a stage is durable before the next stage begins.
    pub stages: Vec<Vec<Op>>,
    /// Whether lineage depends on this batch: the nodes it creates or re-links refuse new
    /// messages until it is acknowledged.
    pub gates: Vec<String>,
    /// How durable the batch must be before it is acknowledged ([`Durability`]).
    pub sync: Durability,
}

impl WriteBatch {
    /// The batch as JSON (`"sync": "written"` only on a [`Durability::Written`] batch).
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "id": self.id,
            "label": self.label,
            "gates": self.gates,
            "stages": self.stages.iter().map(|s| s.iter().map(Op::to_json).collect::<Vec<_>>()).collect::<Vec<_>>(),
        });
        if self.sync == Durability::Written {
            v["sync"] = json!(self.sync.as_str());
        }
        v
    }

    /// The number of ops.
    pub fn op_count(&self) -> usize {
        self.stages.iter().map(Vec::len).sum()
    }

    /// Hands the batch to a store that performs it out of line and reports back by id (the
    /// JS stores behind the wasm binding): its JSON ([`to_json`](Self::to_json)) to send, and
    /// the [`InFlight`] to hold until the store reports the batch performed.
    #[must_use = "send the JSON to the store and hold the `InFlight` until it reports back"]
    pub fn hand_off(self) -> (Value, InFlight) {
        (self.to_json(), InFlight(self.id))
    }
}

/// Proof that a store performed a [`WriteBatch`]: what
/// [`ActorGraph::ack`](super::ActorGraph::ack) takes. Only [`ActorStore::perform`] (the
/// store's `apply` returned `Ok`) and [`InFlight::performed`] (an out-of-line store reported
/// the batch it was handed performed) make one, so acknowledging by id, or without asking a
/// store, does not compile. It guards against mistakes, not against a host set on forging one
/// (a cloned batch handed off yields a proof too). As with the frames engine's `Persisted`,
/// the types prove that the store said yes, not that an fsync happened.
#[derive(Debug)]
#[must_use = "acknowledge it: `ActorGraph::ack`"]
pub struct Applied(BatchId);

impl Applied {
    /// The batch performed (acknowledging it acknowledges every earlier one).
    pub fn id(&self) -> BatchId {
        self.0
    }
}

/// A batch handed to a store that performs it out of line ([`WriteBatch::hand_off`]), held
/// until that store reports it performed.
#[derive(Debug)]
#[must_use = "hold it until the store reports the batch performed, then `performed` → `ActorGraph::ack`"]
pub struct InFlight(BatchId);

impl InFlight {
    /// The batch handed off.
    pub fn id(&self) -> BatchId {
        self.0
    }

    /// The store reported the batch performed: the proof `ack` takes. This is the host's word
    /// (the wasm binding's: its JS store's `ack(id)`), given only after that report.
    pub fn performed(self) -> Applied {
        Applied(self.0)
    }
}

/// Checks that a store path is relative and cannot leave the root: `/`-separated components,
/// none empty, `.`, `..`, or holding `\`, NUL or control characters.
pub fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.starts_with('/') {
        return Err(format!("store path {path:?} is not relative"));
    }
    for c in path.split('/') {
        if c.is_empty()
            || c == "."
            || c == ".."
            || c.contains('\\')
            || c.chars().any(char::is_control)
        {
            return Err(format!("store path {path:?} has a bad component {c:?}"));
        }
    }
    Ok(())
}

/// Everything the core reads from a store, keyed by relative path (`graph.json`,
/// `nodes/x/meta.json`, ...). `dirs` lists node directories (`nodes/x`) so that a directory
/// without its `meta.json` is reported rather than missed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub files: BTreeMap<String, Vec<u8>>,
    pub dirs: Vec<String>,
}

impl Snapshot {
    /// Whether the store holds no actor graph at all.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.dirs.is_empty()
    }
}

/// The end of a JSONL log, as a host reads it for a lazy open
/// ([`super::ActorGraph::open_lazy`]): the bytes from a line boundary to the end of the file,
/// and how many lines come before them. The core parses only these bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogTail {
    /// Where `bytes` start in the file.
    pub offset: u64,
    /// The lines before `bytes`, as [`count_lines`] counts them.
    pub lines_before: u64,
    /// The log from the start of a line to its end (a torn last line included).
    pub bytes: Vec<u8>,
}

fn is_blank(seg: &[u8]) -> bool {
    seg.iter().all(u8::is_ascii_whitespace)
}

/// The lines of log bytes as open numbers them: newline-terminated segments that are not
/// blank (a blank line has no number). A segment after the last newline is not counted: pass
/// bytes that end at a line boundary (hosts count the bytes before a [`LogTail`]).
pub fn count_lines(bytes: &[u8]) -> u64 {
    let mut n = 0;
    let mut start = 0;
    for i in memchr::memchr_iter(b'\n', bytes) {
        n += u64::from(!is_blank(&bytes[start..i]));
        start = i + 1;
    }
    n
}

/// Where the last `keep` lines of a log start in `bytes` (a segment after the last newline
/// counts as a line: it is the torn or unterminated line a lazy open must see). `bytes` is the
/// end of a log read by a host; the result is an offset at a line boundary, or `None` when
/// `bytes` does not reach back `keep` lines past a newline and starts mid-file (the host then
/// reads further back). `at_start`: `bytes` begins at the start of the file.
pub fn tail_start(bytes: &[u8], keep: usize, at_start: bool) -> Option<usize> {
    let keep = keep.max(1);
    let mut found = 0;
    // The end of the segment looked at (its newline, or the end of `bytes`).
    let mut end = bytes.len();
    loop {
        let nl = bytes[..end].iter().rposition(|b| *b == b'\n');
        let blank = is_blank(&bytes[nl.map_or(0, |i| i + 1)..end]);
        if !blank && found == keep {
            // The kept lines are whole and follow this segment's newline.
            return Some(end + 1);
        }
        match nl {
            Some(i) => {
                found += usize::from(!blank);
                end = i;
            }
            None if at_start => return Some(0),
            // A blank piece before the kept lines (`end` is a newline): where it started in
            // the file does not matter.
            None if found == keep => return Some(end + 1),
            // A line that may start before `bytes`.
            None => return None,
        }
    }
}

/// Which files a store must include in a [`Snapshot`]: the graph index, the metathread and its
/// index, timeline bookmarks, epoch views, and per node `meta.json`, `chat.jsonl` and
/// `summaries/*.json`. (`thread.jsonl` is an export and is never read back.)
pub fn is_snapshot_path(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["graph.json"] | ["orchestrator", "meta.jsonl"] | ["orchestrator", "index.json"] => true,
        ["timeline", "bookmarks.jsonl"] => true,
        ["views", f] => f.starts_with("epoch-") && f.ends_with(".json"),
        ["nodes", id, "meta.json" | "chat.jsonl"] => !id.starts_with('.'),
        ["nodes", id, "summaries", f] => !id.starts_with('.') && f.ends_with(".json"),
        _ => false,
    }
}

/// A synchronous store: what native hosts and the memory store implement. (Browser stores are
/// asynchronous; they drain batches from the graph and acknowledge them the same way.)
pub trait ActorStore {
    /// The store's error.
    type Error: std::fmt::Display;
    /// Reads every snapshot file (see [`is_snapshot_path`]).
    fn load(&mut self) -> Result<Snapshot, Self::Error>;
    /// Performs a batch, stage by stage, durably. Hosts call [`perform`](Self::perform);
    /// `apply` alone writes a batch without acknowledging it (crash tests, partial batches).
    fn apply(&mut self, batch: &WriteBatch) -> Result<(), Self::Error>;

    /// Performs `batch` ([`apply`](Self::apply)) and, when the store succeeded, the proof
    /// [`ActorGraph::ack`](super::ActorGraph::ack) takes. On an error the host reports the
    /// batch failed ([`ActorGraph::fail`](super::ActorGraph::fail)).
    fn perform(&mut self, batch: &WriteBatch) -> Result<Applied, Self::Error> {
        self.apply(batch)?;
        Ok(Applied(batch.id))
    }
}

/// A store in memory: a map of paths to bytes. Batches apply atomically. Used by tests, by
/// hosts that run with `ACTOR_NODE_STORE=off`, and as the model other stores must match.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    pub files: BTreeMap<String, Vec<u8>>,
    pub dirs: std::collections::BTreeSet<String>,
}

impl MemoryStore {
    /// Applies one op (no durability question arises in memory).
    pub fn apply_op(&mut self, op: &Op) -> Result<(), String> {
        for p in op.paths() {
            check_path(&p)?;
        }
        match op {
            Op::CreateNode { id, files } => {
                let dir = format!("nodes/{id}");
                if self.dirs.contains(&dir) {
                    return Err(format!("{dir} already exists"));
                }
                self.dirs.insert(dir.clone());
                for (name, text) in files {
                    self.files
                        .insert(format!("{dir}/{name}"), text.as_bytes().to_vec());
                }
            }
            Op::Put { path, text } => {
                self.files.insert(path.clone(), text.as_bytes().to_vec());
            }
            Op::Append { path, text } => {
                self.files
                    .entry(path.clone())
                    .or_default()
                    .extend_from_slice(text.as_bytes());
            }
            Op::Truncate { path, len } => {
                if let Some(f) = self.files.get_mut(path) {
                    f.truncate(*len as usize);
                }
            }
            Op::Rename { from, to } => {
                if let Some(f) = self.files.remove(from) {
                    self.files.insert(to.clone(), f);
                }
            }
            Op::Patch {
                path,
                at,
                size,
                text,
            } => {
                let f = self
                    .files
                    .get_mut(path)
                    .filter(|f| f.len() as u64 == *size && *at <= *size)
                    .ok_or_else(|| format!("{path} is not the {size} bytes a patch expects"))?;
                f.truncate(*at as usize);
                f.extend_from_slice(text.as_bytes());
            }
        }
        Ok(())
    }
}

impl ActorStore for MemoryStore {
    type Error = String;

    fn load(&mut self) -> Result<Snapshot, String> {
        Ok(Snapshot {
            files: self
                .files
                .iter()
                .filter(|(p, _)| is_snapshot_path(p))
                .map(|(p, b)| (p.clone(), b.clone()))
                .collect(),
            dirs: self.dirs.iter().cloned().collect(),
        })
    }

    fn apply(&mut self, batch: &WriteBatch) -> Result<(), String> {
        // Validate everything first so that a refused batch changes nothing.
        for op in batch.stages.iter().flatten() {
            for p in op.paths() {
                check_path(&p)?;
            }
            if let Op::CreateNode { id, .. } = op
                && self.dirs.contains(&format!("nodes/{id}"))
            {
                return Err(format!("nodes/{id} already exists"));
            }
        }
        for op in batch.stages.iter().flatten() {
            self.apply_op(op)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tail_tests {
    use super::{count_lines, tail_start};

    /// Lines a whole log holds, as open numbers them (blank lines have no number; a segment
    /// after the last newline is a line).
    fn numbered(b: &[u8]) -> u64 {
        b.split(|c| *c == b'\n')
            .filter(|s| !s.iter().all(u8::is_ascii_whitespace))
            .count() as u64
    }

    #[test]
    fn a_tail_starts_at_a_line_and_the_lines_before_it_are_counted_as_open_counts_them() {
        let logs: [&[u8]; 6] = [
            b"",
            b"{\"a\":1}\n",
            b"{\"a\":1}\n\n  \n{\"b\":2}\n{\"c\":3}\n",
            b"{\"a\":1}\n{\"b\":2}\n{\"torn\":",
            b"\n\n{\"a\":1}\n   \n",
            b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n{\"d\":4}\n",
        ];
        for log in logs {
            for keep in 1..4 {
                let at = tail_start(log, keep, true).expect("a whole log has its tail");
                assert!(at == 0 || log[at - 1] == b'\n', "{log:?} {keep}: {at}");
                let tail = &log[at..];
                assert!(numbered(tail) <= keep as u64, "{log:?} {keep}: {tail:?}");
                assert!(numbered(tail) == keep as u64 || at == 0, "{log:?} {keep}");
                assert_eq!(count_lines(&log[..at]) + numbered(tail), numbered(log));
                // From any later window of the same bytes: the same start, or "read more".
                for from in 1..log.len() {
                    match tail_start(&log[from..], keep, false) {
                        Some(a) => {
                            let t = from + a;
                            assert!(log[t - 1] == b'\n', "{log:?} {keep} from {from}: {t}");
                            assert_eq!(numbered(&log[t..]), numbered(tail));
                            assert_eq!(count_lines(&log[..t]) + numbered(&log[t..]), numbered(log));
                        }
                        None => assert!(from >= at, "{log:?} {keep} from {from}"),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod op_json_tests {
    use super::*;

    /// Every op reads back from its JSON form as itself; a bad one is refused.
    #[test]
    fn every_op_round_trips_through_its_json() {
        let ops = [
            Op::CreateNode {
                id: "kid".into(),
                files: vec![
                    ("chat.jsonl".into(), String::new()),
                    ("meta.json".into(), "{}".into()),
                ],
            },
            Op::Put {
                path: "graph.json".into(),
                text: "{}".into(),
            },
            Op::Append {
                path: "nodes/a/chat.jsonl".into(),
                text: "{}\n".into(),
            },
            Op::Truncate {
                path: "nodes/a/chat.jsonl".into(),
                len: 3,
            },
            Op::Rename {
                from: "nodes/a/meta.json".into(),
                to: "nodes/a/meta.json.corrupt".into(),
            },
            Op::Patch {
                path: "graph.json".into(),
                at: 2,
                size: 9,
                text: "x}".into(),
            },
        ];
        for op in ops {
            assert_eq!(Op::from_json(&op.to_json()), Ok(op));
        }
        assert!(Op::from_json(&json!({"op": "chmod", "path": "x"})).is_err());
        assert!(Op::from_json(&json!({"op": "put", "path": "x"})).is_err());
    }
}
