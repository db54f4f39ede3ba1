//! The filesystem store of `$CHAT_ROOT`: the native side of the core's storage seam.
//!
//! Durability, per op of a [`WriteBatch`] stage:
//! * `put` (JSON records): write a temporary beside `<path>`, fsync it, move it into place,
//!   fsync the directory. The move is an atomic exchange (`renameat2(RENAME_EXCHANGE)`) when
//!   the record exists, which leaves the previous version behind as `<path>.weft-tmp-spare`;
//!   the next put of that record overwrites the spare in place instead of creating a file, so
//!   a long-lived writer creates and frees no inode per record rewrite (on this project's VM a
//!   new inode costs more CPU than an fsync waits). Elsewhere, a plain rename over the record;
//! * `append` (JSONL logs): one `write` of whole lines, then fsync (a new log also fsyncs its
//!   directory);
//! * `createNode`: build `.weft/.new,<batch>,<manifest>,<id>/` with its files (the manifest
//!   lists each file's length and a hash of its content), fsync them, the directory and
//!   `.weft/`, then rename it to `nodes/<id>` as the *next* stage begins; that stage's round
//!   fsyncs `nodes/` (not `.weft/`: the staged entry's removal needs no round, and a power
//!   loss that keeps it leaves the node under both names on a file system without a journal,
//!   which opening recognizes by device and inode and leaves whole). Pending work never lives under `nodes/`, so `nodes/` holds
//!   only whole nodes at every crash point (other readers of `$CHAT_ROOT` list it as is). A power loss can thus keep the next stage's ops without the rename: the
//!   pending directory is then whole (its stage was durable before the next one began), and
//!   opening as a writer renames it into place. A pending directory that is not whole was cut
//!   short in its own stage, which nothing durable names yet, and is removed. When the node is
//!   created by a batch's last stage (or its file names cannot be spelled in a manifest), it is
//!   renamed in its own stage, as before: the node appears whole or not at all. A long-lived
//!   writer that keeps spare node directories ([`FsStore::keep_spare_nodes`]: `.weft/.spare,<n>/`
//!   with empty `meta.json` and `chat.jsonl`, made and fsynced ahead by a thread of their own)
//!   renames the oldest spare to the pending name and writes the files in place instead of
//!   creating three inodes; the rounds and their order are the same, minus the fsync of the
//!   child's directory, whose entries are durable already. A spare is never a node: opening as a
//!   writer removes every spare (it is renamed before anything is written into it, so one that
//!   holds a record is the directory of that node under a second name, kept by a power loss on
//!   a file system without a journal, and is left whole like a staged name). A spare someone
//!   else removed (or emptied) is skipped, and the child built as without spares; a spawn that
//!   finds `.weft/` unusable (a file or a link at its name) drops the spares handed over, so
//!   that the thread, which waits while it has `n` ready, looks again; the thread retries after
//!   a failure, with a backoff of 10 ms doubling to 2 s, printing the first of a run of
//!   failures and the recovery, and counting them ([`FsStore::spare_nodes_status`], which the
//!   desk serves at `GET /api/actors/store`);
//! * `patch` (a spawn growing `graph.json` and the parent's record by their last bytes): a
//!   positioned write at the patch offset and the new length, while holding the readers' lock
//!   exclusively for an instant (no reader that takes it sees the record half written), then
//!   fsync in the stage's round. When a reader holds the lock, the record is replaced whole
//!   instead (temporary, fsync, rename), so the writer never waits for a reader;
//! * `truncate` / `rename`: fsync the file / the directory.
//!
//! A stage's fsyncs are issued concurrently (the file system commits them together), in at
//! most two rounds (new files and directories before their rename, then appends and the
//! directories that changed); a stage starts only when the previous one is durable. The
//! temporaries of every `put` are written and fsynced in the first stage's round — they are
//! invisible until moved into place, so this changes nothing a crash can expose. A spawn thus
//! takes three rounds: the child's files (and the temporaries of any record replaced whole);
//! the child's rename, the parent's record and `graph.json` (patched in place), the routing
//! marker; the metathread record.
//!
//! Walls: every operation names one entry of a directory handle reached from the root's
//! handle one component at a time ([`super::walls`]), and no symbolic link is followed — a
//! link where the store reads or writes (the lock files included) is refused with
//! `SYMLINK_REFUSED` before anything past it is opened, so nothing outside the root is ever
//! opened for writing. Nor is a file with a second name (a hard link, perhaps from outside the
//! root) written through it: the walls refuse to open one for writing; a lock file that has
//! one is `HARD_LINK_REFUSED`, a record or log is replaced by a copy of its own first (a put
//! or a patch writes a new inode, an append copies the log), so the other name keeps its bytes.
//!
//! One writer at a time: a writer holds an exclusive lock on `$CHAT_ROOT/.weft-lock` (released
//! by the kernel when the process dies, so `kill -9` never leaves a stale lock). Readers hold
//! `.weft-readers` shared while they read; the writer overwrites a spare only when it can take
//! that lock for an instant (a reader may have opened the spare's inode as the record before the
//! exchange that retired it). Opening as a writer renames whole pending nodes into place and
//! removes every other temporary a crashed writer left behind; the core's recovery then
//! completes half-finished spawns.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weft_core::actors::store::{
    ActorStore, Durability, Op, Snapshot, WriteBatch, check_path, is_snapshot_path,
};
use weft_core::actors::{
    ActorsError, GraphEnds, GraphLookup, LazyRead, LazySnapshot, LogMark, LogTail, NodeId,
    RecordEnds, count_lines, tail_start,
};

use super::failpoint::{Failpoint, Steps};
use super::walls::{self, Dir, Kind, Mode, is_symlink_error};

/// The lock file a writer holds.
pub const LOCK_FILE: &str = ".weft-lock";
/// The lock file readers hold shared while they read records; the writer overwrites a spare
/// temporary in place only when it can briefly take it exclusively (see the module documentation).
pub const READERS_FILE: &str = ".weft-readers";
/// The staging directory at the root where nodes are built before they move into `nodes/`
/// (readers of the `$CHAT_ROOT` format ignore it).
pub const STAGING_DIR: &str = ".weft";
const GRAPH_FILE: &str = "graph.json";
const METATHREAD_FILE: &str = "orchestrator/meta.jsonl";
const INDEX_FILE: &str = "orchestrator/index.json";
const BOOKMARKS_FILE: &str = "timeline/bookmarks.jsonl";
const TMP_SUFFIX: &str = ".weft-tmp";
const NODE_TMP_PREFIX: &str = ".tmp-";
/// A node directory under construction whose name carries the manifest of its files (see
/// [`PendingNode`]).
const NODE_NEW_PREFIX: &str = ".new,";
/// An empty node directory a long-lived writer made ahead of time in `.weft/` (see
/// [`FsStore::keep_spare_nodes`]): `.spare,<n>/` with empty [`SPARE_NODE_FILES`], all fsynced.
const SPARE_NODE_PREFIX: &str = ".spare,";
/// The most files `Written` batches may leave owing an fsync before a batch is synced anyway.
const MAX_OWED_FSYNCS: usize = 64;
/// The most log append handles a writer keeps open between batches (see
/// [`FsStore::append_handle`]).
const MAX_APPEND_HANDLES: usize = 32;
/// Spare node directories the product's long-lived writers keep (the desk, `weft serve`):
/// deep enough that a spare is made long before the spawn that takes it (a shallow pool, 4,
/// made its inodes beside the spawn's own rounds and bought nothing; see the README).
pub const LONG_LIVED_SPARE_NODES: usize = 32;
/// The files of a spare node directory (a spawn whose child has exactly these files uses one).
const SPARE_NODE_FILES: [&str; 2] = ["meta.json", "chat.jsonl"];
/// The marks a lazy open returned ([`weft_core::actors::ActorGraph::lazy_marks`]), kept at the
/// root beside the lock (readers of the layout ignore it) so that the next lazy open reads
/// only what the logs gained since. A cache: written without fsync, checked before use,
/// rebuilt when wrong or missing.
pub const MARKS_FILE: &str = ".weft-marks.json";
/// The previous version of [`MARKS_FILE`], kept beside it to be overwritten by the next
/// command and exchanged into place (see `FsStore::write_marks`). Readers of the layout
/// ignore it, like the marks.
pub const MARKS_SPARE: &str = ".weft-marks.json.spare";
/// The bytes before a mark's end that must still be what they were for the mark to be used.
const MARK_CHECK_BYTES: u64 = 256;
/// A mark is rewritten once its log has grown this much past it (so a command reads at most
/// about this much of a log beyond its last lines).
const MARK_STRIDE: u64 = 16 * 1024;
/// The most logs [`MARKS_FILE`] remembers.
const MARKS_KEPT: usize = 1024;
/// The path (relative to the root, under [`STAGING_DIR`]) where the store builds node `id` of
/// batch `batch` before renaming it into `nodes/`, or `None` when it builds it under a plain
/// temporary name (see the module documentation). Tests use it to lay out what a power loss
/// can leave.
pub fn pending_node_dir(batch: u64, id: &str, files: &[(String, String)]) -> Option<String> {
    PendingNode::dir_name(batch, id, files).map(|n| format!("{STAGING_DIR}/{n}"))
}

/// A node directory built under `nodes/.new,<batch>,<manifest>,<id>`: its name lists every
/// file with its length and a hash of its content, so that after a power loss the store can
/// tell a directory whose files all became durable from one cut short. The manifest is
/// `name=len=hash` entries joined by `+` (hash: the first 8 bytes of the content's SHA-256,
/// in hex); the id comes last, so it may hold any character an id may hold.
#[derive(Debug, PartialEq, Eq)]
struct PendingNode {
    id: String,
    files: Vec<(String, u64, String)>,
}

impl PendingNode {
    /// The longest directory name file systems take.
    const MAX_NAME: usize = 255;

    fn short_hash(bytes: &[u8]) -> String {
        use sha2::Digest;
        sha2::Sha256::digest(bytes)[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The directory name for `files` of node `id` in batch `batch`, or `None` when a manifest
    /// cannot be spelled in a name (file names outside `[A-Za-z0-9_.-]`, or too long).
    fn dir_name(batch: u64, id: &str, files: &[(String, String)]) -> Option<String> {
        let mut entries = Vec::new();
        for (name, text) in files {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
            {
                return None;
            }
            entries.push(format!(
                "{name}={}={}",
                text.len(),
                Self::short_hash(text.as_bytes())
            ));
        }
        let n = format!("{NODE_NEW_PREFIX}{batch},{},{id}", entries.join("+"));
        (n.len() <= Self::MAX_NAME).then_some(n)
    }

    fn parse(name: &str) -> Option<PendingNode> {
        let mut parts = name.strip_prefix(NODE_NEW_PREFIX)?.splitn(3, ',');
        parts.next()?.parse::<u64>().ok()?;
        let manifest = parts.next()?;
        let id = parts.next()?;
        NodeId::parse(id).ok()?;
        let mut files = Vec::new();
        for e in manifest.split('+') {
            let mut f = e.split('=');
            let (Some(n), Some(len), Some(h), None) = (f.next(), f.next(), f.next(), f.next())
            else {
                return None;
            };
            check_path(n).ok()?;
            files.push((n.to_owned(), len.parse().ok()?, h.to_owned()));
        }
        Some(PendingNode {
            id: id.to_owned(),
            files,
        })
    }

    /// Whether every file of the manifest is in `dir` with (at least) its length and, over that
    /// length, its content. (Later stages of the batch may have appended to a file, so a longer
    /// file is judged by its first `len` bytes.)
    fn complete(&self, dir: &Dir) -> bool {
        self.files.iter().all(|(name, len, hash)| {
            let Ok(f) = dir.open(name, Mode::Read) else {
                return false;
            };
            let mut bytes = Vec::new();
            f.take(*len).read_to_end(&mut bytes).is_ok()
                && bytes.len() as u64 == *len
                && Self::short_hash(&bytes) == *hash
        })
    }
}

/// Counters of what the store did (benchmarks report fsyncs per operation).
#[derive(Debug, Default)]
pub struct FsStats {
    pub fsyncs: AtomicU64,
    /// Of `fsyncs`, those that were `fdatasync`s (appends to logs: see `SyncJob::append`).
    pub data_syncs: AtomicU64,
    /// Rounds of concurrent fsyncs (each waits for the slowest of its fsyncs).
    pub rounds: AtomicU64,
    /// Bytes written to records and logs (puts' temporaries, appends, patches, new nodes).
    pub bytes_written: AtomicU64,
    pub batches: AtomicU64,
    /// Nanoseconds spent in `apply` (writes, renames and the rounds).
    pub apply_ns: AtomicU64,
    /// Nanoseconds spent waiting for rounds, by the round's position within its batch (the
    /// last slot also counts every later round): where a batch's time goes.
    pub round_ns: [AtomicU64; 6],
    rounds_in_batch: AtomicU64,
}

/// A `$CHAT_ROOT` on disk.
pub struct FsStore {
    root: PathBuf,
    /// The root's handle: every operation starts here.
    dir: Dir,
    /// Directory handles of a writer, by relative path, reused within a batch (bounded).
    cache: BTreeMap<String, Dir>,
    /// Append handles of a writer's logs, by relative path, kept across batches (at most
    /// [`MAX_APPEND_HANDLES`]; see [`FsStore::append_handle`]).
    appends: BTreeMap<String, AppendHandle>,
    /// The clock of [`AppendHandle::used`].
    append_tick: u64,
    lock: Option<File>,
    pool: Option<SyncPool>,
    /// Fsyncs owed by prewritten temporaries, joined to the next stage's first round.
    pending_sync: Vec<SyncJob>,
    /// The logs `Written` batches appended to and did not fsync (one job per path), joined to
    /// the next synced batch's first round (see `Durability`).
    unsynced: Vec<SyncJob>,
    /// The batch in flight is a `Written` one: its rounds go to `unsynced` instead.
    written: bool,
    /// An fsync failed: the kernel may have dropped the dirty pages it could not write, and a
    /// second fsync would not say so, so nothing more is acknowledged on this store (reopen).
    fsync_failed: Option<String>,
    /// Node directories of the previous stage, built and durable under their pending names
    /// in `.weft/`, to rename into `nodes/<id>` as the next stage begins: (staged name, id).
    deferred: Vec<(String, String)>,
    /// The temporary each `put` of the batch in flight writes, by (stage, op).
    put_temps: BTreeMap<(usize, usize), String>,
    /// Spare temporaries, by the record they replace: `<record>.weft-tmp-spare`, holding the
    /// record's previous version after an exchange made durable by this process. The next
    /// `put` of that record overwrites the spare in place and exchanges it again, so a
    /// steady writer creates and frees no inodes for its records (on this project's VM an
    /// inode costs more than an fsync). Removed on drop; a crash leaves them to the next
    /// writer's open, which removes every temporary.
    spares: BTreeMap<String, String>,
    /// The writer's handle on [`READERS_FILE`].
    readers: Option<File>,
    /// Whether `renameat2(RENAME_EXCHANGE)` works here (Linux; turned off on the first
    /// refusal, after which puts create a temporary and rename it over the record).
    exchange: bool,
    /// Tests: the error the next exchanges of the marks fail with (an OS error number).
    #[cfg(test)]
    marks_exchange_fault: Option<i32>,
    pub stats: FsStats,
    /// Bytes read from records and logs (see [`FsStore::bytes_read`]).
    bytes_read: u64,
    /// Bytes read through a [`FsGraphLookup`] this store handed out.
    lookup_read: std::sync::Arc<AtomicU64>,
    /// [`MARKS_FILE`] as a lazy open read it, and per log read since: its length and the
    /// digest of the [`MARK_CHECK_BYTES`] before it, and whether its kept mark was refused.
    marks: BTreeMap<String, KeptMark>,
    /// The stamps of `graph.json` and `nodes/` kept in [`MARKS_FILE`] (see [`Trust`]).
    trust: Option<Trust>,
    /// The stamps of node records kept in [`MARKS_FILE`], by path: while one matches (and
    /// `trust` holds), a lazy open reads that record by its ends
    /// ([`weft_core::actors::LazySnapshot::record_ends`]).
    records: BTreeMap<String, String>,
    seen: BTreeMap<String, (u64, u64, bool)>,
    /// Durability steps counted for crash injection (inert unless armed: `set_failpoint`).
    crash: Steps,
    /// Spare node directories made ahead of time (see [`FsStore::keep_spare_nodes`]).
    spare_nodes: Option<SpareNodes>,
}

/// What a writer's spare node directories have done ([`FsStore::spare_nodes_status`]): how
/// many were made and used, how many a spawn found gone (removed by someone else: the spawn
/// then built its directory as without spares), and the errors of the thread that makes them,
/// which retries after each with a bounded backoff instead of stopping.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpareNodesStatus {
    /// How many spares the writer keeps ready.
    pub keep: usize,
    /// Spares made and not yet used or dropped (at most `keep`; one of them perhaps still
    /// waiting to be handed over): ready as far as the writer knows (one removed or moved away
    /// by someone else counts until a spawn finds it gone).
    pub ready: u64,
    /// Spares made and fsynced.
    pub made: u64,
    /// Spares a spawn built its child in.
    pub used: u64,
    /// Spares a spawn found gone or emptied (someone removed them), could not reach (`.weft/`
    /// moved away or unusable) or failed to fill (its batch failed).
    pub vanished: u64,
    /// Spares removed unused once a spawn found one gone (the thread makes them again in
    /// `.weft/` as it then is).
    pub discarded: u64,
    /// Failures to make a spare (each retried after a backoff).
    pub errors: u64,
    /// The last such failure.
    pub last_error: Option<String>,
    /// The last attempt to make a spare failed (reset by the next one made).
    pub failing: bool,
}

/// A log's append handle a writer keeps ([`FsStore::append_handle`]).
struct AppendHandle {
    file: std::sync::Arc<File>,
    /// When it was last used (a tick of the writer's), for the least-recently-used eviction.
    used: u64,
}

/// Spare node directories kept ready in `.weft/` (see [`FsStore::keep_spare_nodes`]): made by
/// a thread of their own, or (crash tests: deterministic steps) by the writer after each batch.
struct SpareNodes {
    /// Spares the thread made, fsynced with their entries, oldest first, each with the
    /// generation of the `.weft/` handle it was made in.
    rx: Option<std::sync::mpsc::Receiver<(u64, String)>>,
    /// The thread's generation of `.weft/`: bumped each time it reopens `.weft/` (the
    /// directory at the root's name is another one): spares of an older generation were made
    /// in a directory no longer at that name (moved away, perhaps out of the root) and are
    /// dropped unused, never touched.
    generation: std::sync::Arc<AtomicU64>,
    /// Set by a spawn that found a spare gone: the thread reopens `.weft/` before its next.
    recheck: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// In-line mode: spares the writer made, oldest first, and how many to keep.
    ready: std::collections::VecDeque<String>,
    keep: usize,
    next: u64,
    /// The root's handle, to reopen `.weft/` after an error (it may have been removed and made
    /// again: a handle on the old directory makes nothing that can be used).
    root: Dir,
    staging: Dir,
    status: std::sync::Arc<std::sync::Mutex<SpareNodesStatus>>,
}

impl SpareNodes {
    /// The most spares a writer keeps.
    const MAX: usize = 64;
    /// The thread's first wait after a failure to make a spare; doubled per failure in a row,
    /// up to [`BACKOFF_MAX`](Self::BACKOFF_MAX).
    const BACKOFF_MIN: Duration = Duration::from_millis(10);
    const BACKOFF_MAX: Duration = Duration::from_secs(2);

    fn start(root: Dir, staging: Dir, n: usize, in_line: bool) -> std::io::Result<SpareNodes> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let status = std::sync::Arc::new(std::sync::Mutex::new(SpareNodesStatus {
            keep: n,
            ..Default::default()
        }));
        let generation = std::sync::Arc::new(AtomicU64::new(0));
        let recheck = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut out = SpareNodes {
            rx: None,
            generation: generation.clone(),
            recheck: recheck.clone(),
            thread: None,
            stop: stop.clone(),
            ready: Default::default(),
            keep: n,
            next: 0,
            root,
            staging,
            status: status.clone(),
        };
        if in_line {
            return Ok(out);
        }
        // The thread holds one spare beyond the channel's while it waits to hand it over.
        let (tx, rx) = std::sync::mpsc::sync_channel::<(u64, String)>(n.saturating_sub(1));
        let mut own = out.staging.try_clone()?;
        let root = out.root.try_clone()?;
        out.thread = Some(
            std::thread::Builder::new()
                .name("weft-spare-nodes".into())
                .spawn(move || {
                    let mut k = 0u64;
                    let mut backoff = Self::BACKOFF_MIN;
                    while !stop.load(Ordering::Relaxed) {
                        // `.weft/` at the root's name must still be the directory this
                        // handle is on (compared by identity, no link followed): one moved
                        // away (perhaps out of the root) is never filled.
                        if recheck.swap(false, Ordering::Relaxed) || !Self::is_current(&root, &own)
                        {
                            match Self::reopen_current(&root) {
                                Some(d) => {
                                    // What was handed over before is suspect (a spawn found
                                    // one gone, or `.weft/` moved): a new generation.
                                    generation.fetch_add(1, Ordering::Relaxed);
                                    own = d;
                                }
                                None => {
                                    Self::failed(&status, &Self::unusable(&root));
                                    std::thread::park_timeout(backoff);
                                    backoff = (backoff * 2).min(Self::BACKOFF_MAX);
                                    continue;
                                }
                            }
                        }
                        let name = format!("{SPARE_NODE_PREFIX}{k}");
                        k += 1;
                        match Self::make(&own, &name) {
                            Ok(true) => {
                                backoff = Self::BACKOFF_MIN;
                                Self::made(&status);
                            }
                            Ok(false) => continue,
                            Err(e) => {
                                // Never stops for good: a spawn meanwhile builds its directory
                                // without a spare, and the next attempt may succeed (`.weft/`
                                // made again, space freed).
                                let _ = own.remove_tree(&name);
                                Self::failed(&status, &e);
                                // Reopened (by identity) at the top of the loop.
                                recheck.store(true, Ordering::Relaxed);
                                std::thread::park_timeout(backoff);
                                backoff = (backoff * 2).min(Self::BACKOFF_MAX);
                                continue;
                            }
                        }
                        let g = generation.load(Ordering::Relaxed);
                        if let Err(e) = tx.send((g, name)) {
                            let _ = own.remove_tree(&(e.0).1);
                            break;
                        }
                    }
                })?,
        );
        out.rx = Some(rx);
        Ok(out)
    }

    /// `.weft/` opened again from the root (`None`: it is not there now; the writer makes it
    /// again with the next node it builds).
    fn reopen(root: &Dir) -> Option<Dir> {
        root.dir(STAGING_DIR).ok()
    }

    /// Whether `staging` is (by device and inode, no link followed) the `.weft/` now at the
    /// root's name.
    fn is_current(root: &Dir, staging: &Dir) -> bool {
        match (root.ident(STAGING_DIR), staging.own_ident()) {
            (Ok(Some(a)), Ok(b)) => a == b,
            _ => false,
        }
    }

    /// Why `.weft/` cannot be reopened from the root (for the status after
    /// [`reopen_current`](Self::reopen_current) found none).
    fn unusable(root: &Dir) -> String {
        match root.dir(STAGING_DIR) {
            Err(e) if is_symlink_error(&e) => {
                format!("{STAGING_DIR}/ is a symbolic link (refused)")
            }
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                format!("{STAGING_DIR}/ cannot be opened ({e})")
            }
            _ => format!("{STAGING_DIR}/ was moved or removed"),
        }
    }

    /// [`reopen`](Self::reopen), checked to be the directory at the name once open (`None`
    /// also when the name changed hands in between).
    fn reopen_current(root: &Dir) -> Option<Dir> {
        Self::reopen(root).filter(|d| Self::is_current(root, d))
    }

    /// A spawn found a spare gone (or `.weft/` unusable: `staging` is `None`): asks the thread
    /// to reopen `.weft/` (by identity) before its next, and takes every spare it handed over
    /// out of the channel (letting a thread blocked on a full channel go on, to make them again
    /// where `.weft/` now is, or to say in its status that it cannot), none tried: those still
    /// in `staging` (the `.weft/` at the root's name) are removed (discarded), the others
    /// (removed, or made in a `.weft/` moved away: never touched) counted as vanished.
    fn after_vanished(&mut self, staging: Option<&Dir>) {
        self.recheck.store(true, Ordering::Relaxed);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
        let Some(rx) = &self.rx else { return };
        let (mut gone, mut discarded) = (0, 0);
        while let Ok((g, n)) = rx.try_recv() {
            if let Some(staging) = staging
                && g >= self.generation.load(Ordering::Relaxed)
                && matches!(staging.kind(&n), Ok(Some(Kind::Dir)))
                && staging.remove_tree(&n).is_ok()
            {
                discarded += 1;
            } else {
                gone += 1;
            }
        }
        self.note(|st| {
            st.vanished += gone;
            st.discarded += discarded;
        });
    }

    fn made(status: &std::sync::Mutex<SpareNodesStatus>) {
        let mut st = status.lock().unwrap_or_else(|p| p.into_inner());
        st.made += 1;
        if st.failing {
            eprintln!(
                "weft actors: spare node directories are made again ({} failures so far)",
                st.errors
            );
            st.failing = false;
        }
    }

    /// Notes a failure to make a spare; the first of a run of failures is printed (the
    /// writer goes on without spares meanwhile, so nothing else shows it).
    fn failed(status: &std::sync::Mutex<SpareNodesStatus>, e: &dyn std::fmt::Display) {
        let mut st = status.lock().unwrap_or_else(|p| p.into_inner());
        st.errors += 1;
        st.last_error = Some(format!("make a spare in {STAGING_DIR}/: {e}"));
        if !st.failing {
            eprintln!(
                "weft actors: cannot make a spare node directory in {STAGING_DIR}/ ({e}); spawns build their directories without one, retrying"
            );
            st.failing = true;
        }
    }

    fn note(&self, f: impl FnOnce(&mut SpareNodesStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Makes spare `name`: the directory and its empty files, each fsynced, then `.weft/`
    /// (false: the name is taken).
    fn make(staging: &Dir, name: &str) -> std::io::Result<bool> {
        if !staging.mkdir(name)? {
            return Ok(false);
        }
        let d = staging.dir(name)?;
        for f in SPARE_NODE_FILES {
            d.open(f, Mode::Create)?.sync_all()?;
        }
        d.into_file().sync_all()?;
        staging.try_clone()?.into_file().sync_all()?;
        Ok(true)
    }

    /// The oldest ready spare, if any (never waits). A spare of an older generation (handed
    /// over before the thread reopened `.weft/`) is used only when `staging` (the `.weft/` at
    /// the root's name) has it (names are never reused, so it was made there); otherwise it
    /// is counted as vanished and never touched (made in a `.weft/` moved away).
    fn take(&mut self, staging: &Dir) -> Option<String> {
        match &self.rx {
            Some(rx) => loop {
                let (g, name) = rx.try_recv().ok()?;
                if g >= self.generation.load(Ordering::Relaxed)
                    || matches!(staging.kind(&name), Ok(Some(Kind::Dir)))
                {
                    return Some(name);
                }
                self.note(|st| st.vanished += 1);
            },
            None => self.ready.pop_front(),
        }
    }
}

impl Drop for SpareNodes {
    /// Removes the ready spares (one the thread makes meanwhile is left to the next writer's
    /// open, which removes every spare).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = &self.thread {
            // Out of a backoff wait at once.
            t.thread().unpark();
        }
        // Where the spares are now (the thread reopens `.weft/` after an error), and only
        // while it is the directory at the root's name.
        let reopened = Self::reopen_current(&self.root);
        let staging = reopened.as_ref();
        let remove = |(g, n): (u64, String)| {
            if let Some(d) = staging
                && g >= self.generation.load(Ordering::Relaxed)
            {
                let _ = d.remove_tree(&n);
            }
        };
        if let Some(t) = self.thread.take() {
            // The receiver stays alive until the thread is gone: a spare it hands over while
            // stopping is received and removed here, not left behind after the lock is
            // released (and a thread blocked handing one over is let go).
            if let Some(rx) = &self.rx {
                while !t.is_finished() {
                    match rx.recv_timeout(Duration::from_millis(1)) {
                        Ok(x) => remove(x),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
            }
            let _ = t.join();
        }
        if let Some(rx) = self.rx.take() {
            while let Ok(x) = rx.try_recv() {
                remove(x);
            }
        }
        for n in std::mem::take(&mut self.ready) {
            if let Some(d) = staging {
                let _ = d.remove_tree(&n);
            }
        }
    }
}

/// An I/O error of the store on `rel` (a path under the root): a symbolic link met on the way
/// is `SYMLINK_REFUSED`, naming the link.
fn io(what: &str, rel: &str, e: std::io::Error) -> ActorsError {
    if walls::is_hard_link_error(&e) {
        ActorsError::HardLinkRefused(rel.into())
    } else if is_symlink_error(&e) {
        ActorsError::SymlinkRefused(if rel.is_empty() {
            ".".into()
        } else {
            rel.into()
        })
    } else {
        ActorsError::StoreIo(format!("{what} {rel}: {e}"))
    }
}

/// `rel` split into its parent directory (`""` for the root) and its last component.
fn split(rel: &str) -> (&str, &str) {
    match rel.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", rel),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// One fsync to perform: a file or a directory (its handle goes to the thread that syncs it),
/// with the relative path for errors.
struct SyncJob {
    rel: String,
    /// Shared: a log's kept append handle is synced through itself, not through a duplicate
    /// (a `dup` and a `close` per append saved).
    file: std::sync::Arc<File>,
    /// `fdatasync` instead of `fsync`: only for an append to a log (see [`SyncJob::append`]).
    data_only: bool,
}

impl SyncJob {
    /// An `fsync` (`sync_all`) of `file`: its data and all of its metadata.
    fn new(rel: String, file: File) -> SyncJob {
        SyncJob {
            rel,
            file: std::sync::Arc::new(file),
            data_only: false,
        }
    }

    /// The fsync an append to log `rel` owes: `fdatasync` (`sync_data`). What the seed
    /// requires of an acknowledged line is that it is in the log after a crash: its bytes and
    /// the file's size, which `fdatasync` makes durable (POSIX: the metadata needed to read
    /// the data back; on ext4 a size change is committed by the journal like `fsync`'s).
    /// What it may leave behind is the modification and change times only, and no reader of
    /// a log trusts those: a log's kept mark is its length and the digest of the bytes before
    /// it ([`KeptMark`]); stamps with times are taken of records and directories, which
    /// keep `fsync`. A log's name is not this job's: a log created (or replaced by its own
    /// copy) makes its directory dirty, and the directory's job in the same round is an
    /// `fsync` of the directory. (Write-ahead logs rely on the same: PostgreSQL's default
    /// `wal_sync_method` on Linux, SQLite's journal.) Truncations and patches keep `fsync`.
    fn append(rel: String, file: std::sync::Arc<File>) -> SyncJob {
        SyncJob {
            rel,
            file,
            data_only: true,
        }
    }

    fn run(self) -> Result<(), ActorsError> {
        if self.data_only {
            self.file.sync_data()
        } else {
            self.file.sync_all()
        }
        .map_err(|e| io("fsync", &self.rel, e))
    }
}

type SyncReply = std::sync::mpsc::Sender<Result<(), ActorsError>>;

/// A small pool of threads that issue fsyncs concurrently, so that the file system commits a
/// stage's fsyncs together instead of one after another. Created once per store (spawning
/// threads per stage costs more than the fsyncs on a fast disk); its threads start when a
/// round first needs them (a one-shot command's spawn needs three, a store that only reads
/// none), at most [`SyncPool::THREADS`].
struct SyncPool {
    tx: Option<std::sync::mpsc::Sender<(SyncJob, SyncReply)>>,
    rx: std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Receiver<(SyncJob, SyncReply)>>>,
    workers: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl SyncPool {
    const THREADS: usize = 7;

    fn new() -> SyncPool {
        let (tx, rx) = std::sync::mpsc::channel::<(SyncJob, SyncReply)>();
        SyncPool {
            tx: Some(tx),
            rx: std::sync::Arc::new(std::sync::Mutex::new(rx)),
            workers: Default::default(),
        }
    }

    /// Starts threads until `n` (at most [`THREADS`](Self::THREADS)) are running.
    fn grow(&self, n: usize) {
        let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        while workers.len() < n.min(Self::THREADS) {
            let rx = self.rx.clone();
            let w = std::thread::Builder::new()
                .name(format!("weft-fsync-{}", workers.len()))
                .spawn(move || {
                    loop {
                        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        let Ok((job, reply)) = job else { break };
                        let _ = reply.send(job.run());
                    }
                })
                .expect("fsync thread");
            workers.push(w);
        }
    }

    /// Runs every job, concurrently, and returns the first error.
    fn run(&self, mut jobs: Vec<SyncJob>, stats: &FsStats) -> Result<(), ActorsError> {
        stats.fsyncs.fetch_add(jobs.len() as u64, Ordering::Relaxed);
        let data = jobs.iter().filter(|j| j.data_only).count();
        stats.data_syncs.fetch_add(data as u64, Ordering::Relaxed);
        let Some(mine) = jobs.pop() else {
            return Ok(());
        };
        stats.rounds.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let out = self.run_round(mine, jobs);
        let slot = (stats.rounds_in_batch.fetch_add(1, Ordering::Relaxed) as usize)
            .min(stats.round_ns.len() - 1);
        stats.round_ns[slot].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        out
    }

    /// Runs `mine` on the calling thread and the other jobs on the pool's threads, beside it.
    /// A round of one job is that job on the calling thread alone: no channel, no pool lock,
    /// no thread started or woken (an agent turn's end syncs one file).
    fn run_round(&self, mine: SyncJob, jobs: Vec<SyncJob>) -> Result<(), ActorsError> {
        if jobs.is_empty() {
            return mine.run();
        }
        let (reply, results) = std::sync::mpsc::channel();
        let n = jobs.len();
        self.grow(n);
        for j in jobs {
            self.tx
                .as_ref()
                .expect("pool open")
                .send((j, reply.clone()))
                .expect("fsync pool alive");
        }
        let mut out = mine.run();
        for _ in 0..n {
            let r = results.recv().expect("fsync worker replies");
            if out.is_ok() {
                out = r;
            }
        }
        out
    }
}

#[cfg(test)]
impl SyncPool {
    /// The pool's threads started so far.
    fn threads(&self) -> usize {
        self.workers.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for SyncPool {
    fn drop(&mut self) {
        self.tx.take();
        let workers = self.workers.get_mut().unwrap_or_else(|p| p.into_inner());
        for w in workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A rename a stage performs once its first round is durable.
enum Move {
    /// A put's temporary over its record, in the record's directory.
    Put { tmp: String, dest: String },
    /// A node built under `.weft/<staged>` into `nodes/<id>`.
    Node { staged: String, id: String },
    /// A record moved aside (`Op::Rename`).
    Plain { from: String, to: String },
}

impl FsStore {
    fn new(root: &Path, dir: Dir, lock: Option<File>, readers: Option<File>) -> FsStore {
        FsStore {
            root: root.to_owned(),
            pool: lock.is_some().then(SyncPool::new),
            dir,
            lock,
            pending_sync: Vec::new(),
            unsynced: Vec::new(),
            written: false,
            fsync_failed: None,
            deferred: Vec::new(),
            put_temps: BTreeMap::new(),
            spares: BTreeMap::new(),
            exchange: cfg!(target_os = "linux"),
            #[cfg(test)]
            marks_exchange_fault: None,
            readers,
            cache: BTreeMap::new(),
            appends: BTreeMap::new(),
            append_tick: 0,
            stats: FsStats::default(),
            bytes_read: 0,
            lookup_read: Default::default(),
            marks: BTreeMap::new(),
            trust: None,
            records: BTreeMap::new(),
            seen: BTreeMap::new(),
            crash: Steps::default(),
            spare_nodes: None,
        }
    }

    /// Keeps up to `n` (at most 64) spare node directories ready in `.weft/`, for a long-lived
    /// writer (the benchmark; the desk, `weft serve` and agents could): a thread of their own
    /// makes each (the directory and its empty `meta.json` and `chat.jsonl`, fsynced with its
    /// entry) ahead of the spawns, and a spawn whose child has exactly those files renames the
    /// oldest one to its pending name and writes the files in place: no inode is created on the
    /// spawn's path and the child's directory needs no fsync of its own (its entries are
    /// durable), in the same rounds and order as before. `0` stops. Spares are not nodes: they
    /// live outside `nodes/`, and opening as a writer removes those a previous writer left.
    /// A spare found gone at a spawn (removed by someone else) costs that spawn nothing but the
    /// build without it; a failure to make one (`.weft/` removed, no space) is printed once,
    /// counted, and retried after a bounded backoff, in `.weft/` as it then is.
    pub fn keep_spare_nodes(&mut self, n: usize) -> Result<(), ActorsError> {
        self.start_spares(n, false)
    }

    /// [`keep_spare_nodes`](Self::keep_spare_nodes) with the spares made by the writer itself
    /// after each batch, as durability steps (for the crash tests: deterministic steps).
    #[doc(hidden)]
    pub fn keep_spare_nodes_in_line(&mut self, n: usize) -> Result<(), ActorsError> {
        self.start_spares(n, true)?;
        self.refill_spares()
    }

    fn start_spares(&mut self, n: usize, in_line: bool) -> Result<(), ActorsError> {
        self.spare_nodes = None;
        let n = n.min(SpareNodes::MAX);
        if n == 0 || self.lock.is_none() {
            return Ok(());
        }
        let mut dirty = BTreeSet::new();
        let staging = self.make_dir(STAGING_DIR, &mut dirty)?;
        if !dirty.is_empty() {
            let mut jobs = Vec::new();
            for rel in dirty {
                jobs.extend(self.sync_job(&rel)?);
            }
            self.sync(jobs)?;
        }
        let root = self.dir.try_clone().map_err(|e| io("open", ".", e))?;
        self.spare_nodes = Some(
            SpareNodes::start(root, staging, n, in_line)
                .map_err(|e| io("start", STAGING_DIR, e))?,
        );
        Ok(())
    }

    /// What the spare node directories have done (`None`: this writer keeps none; see
    /// [`keep_spare_nodes`](Self::keep_spare_nodes)).
    pub fn spare_nodes_status(&self) -> Option<SpareNodesStatus> {
        let sp = self.spare_nodes.as_ref()?;
        let mut st = sp.status.lock().unwrap_or_else(|p| p.into_inner()).clone();
        st.ready = st
            .made
            .saturating_sub(st.used + st.vanished + st.discarded)
            .min(st.keep as u64);
        Some(st)
    }

    /// In-line mode: makes spares until `keep` are ready (two durability steps each: creating,
    /// then the fsyncs).
    fn refill_spares(&mut self) -> Result<(), ActorsError> {
        loop {
            let Some(sp) = self.spare_nodes.as_mut().filter(|s| s.rx.is_none()) else {
                return Ok(());
            };
            if !SpareNodes::is_current(&sp.root, &sp.staging) {
                // `.weft/` moved away (or removed): its spares are not ours to use or touch.
                let Some(d) = SpareNodes::reopen_current(&sp.root) else {
                    return Err(ActorsError::StoreIo(format!(
                        "{STAGING_DIR}/ was moved or removed"
                    )));
                };
                sp.staging = d;
                let dropped = std::mem::take(&mut sp.ready).len() as u64;
                sp.note(|st| st.vanished += dropped);
            }
            if sp.ready.len() >= sp.keep {
                return Ok(());
            }
            let name = format!("{SPARE_NODE_PREFIX}{}", sp.next);
            sp.next += 1;
            let staging = sp
                .staging
                .try_clone()
                .map_err(|e| io("open", STAGING_DIR, e))?;
            let rel = join(STAGING_DIR, &name);
            self.step();
            if !staging.mkdir(&name).map_err(|e| io("create", &rel, e))? {
                continue;
            }
            let made = (|| {
                let d = staging.dir(&name).map_err(|e| io("open", &rel, e))?;
                let mut files = Vec::new();
                for f in SPARE_NODE_FILES {
                    files.push(d.open(f, Mode::Create).map_err(|e| io("create", &rel, e))?);
                }
                Ok::<_, ActorsError>((d, files))
            })();
            let made = made.and_then(|(d, files)| {
                self.step();
                for f in files {
                    f.sync_all().map_err(|e| io("fsync", &rel, e))?;
                }
                d.into_file().sync_all().map_err(|e| io("fsync", &rel, e))?;
                staging
                    .try_clone()
                    .and_then(|s| s.into_file().sync_all())
                    .map_err(|e| io("fsync", STAGING_DIR, e))
            });
            if let Err(e) = made {
                // Nothing half made is left behind (the next batch tries a new name).
                let _ = staging.remove_tree(&name);
                return Err(e);
            }
            if let Some(sp) = self.spare_nodes.as_mut() {
                sp.ready.push_back(name);
                SpareNodes::made(&sp.status);
            }
        }
    }

    /// Opens `root` for reading only (no lock; what a concurrent writer is doing may show as a
    /// torn last line, which the core reports).
    pub fn open_reader(root: &Path) -> Result<FsStore, ActorsError> {
        if !root.is_dir() {
            return Err(ActorsError::NotInitialized);
        }
        let dir = Dir::open_path(root).map_err(|e| io("open", ".", e))?;
        Ok(FsStore::new(root, dir, None, None))
    }

    /// Opens `root` as its one writer, creating the directory if needed. Waits up to `wait`
    /// for another writer to finish (`STORE_LOCKED` after that), then removes temporaries a
    /// crashed writer left. The lock files are opened through the root's handle, never
    /// following a link (`SYMLINK_REFUSED`).
    pub fn open_writer(root: &Path, wait: Duration) -> Result<FsStore, ActorsError> {
        let mut s = Self::open_writer_unswept(root, wait)?;
        s.sweep_temporaries()?;
        Ok(s)
    }

    /// Like [`open_writer`](Self::open_writer), but the temporaries beside records (a put's
    /// `*.weft-tmp*` files, which no reader reads and the next put of the record replaces) are
    /// left for a later full open: finding them means listing every node directory. Staged nodes
    /// in `.weft/` (and legacy `nodes/.new,…`) are still renamed into place or removed. For a
    /// command that opens lazily ([`weft_core::actors::ActorGraph::open_lazy`]); when that
    /// answers "full", call [`sweep_temporaries`](Self::sweep_temporaries) before loading.
    pub fn open_writer_unswept(root: &Path, wait: Duration) -> Result<FsStore, ActorsError> {
        std::fs::create_dir_all(root)
            .map_err(|e| ActorsError::StoreIo(format!("create {}: {e}", root.display())))?;
        let dir = Dir::open_path(root).map_err(|e| io("open", ".", e))?;
        let mut f = dir
            .open(LOCK_FILE, Mode::ReadWriteCreate)
            .map_err(|e| io("open", LOCK_FILE, e))?;
        let start = Instant::now();
        loop {
            match f.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if start.elapsed() >= wait {
                        let mut holder = String::new();
                        let _ = f.read_to_string(&mut holder);
                        let holder = holder.trim();
                        return Err(ActorsError::StoreLocked(format!(
                            "{} is held by {}",
                            root.display(),
                            if holder.is_empty() {
                                "another process"
                            } else {
                                holder
                            }
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(io("lock", LOCK_FILE, e));
                }
            }
        }
        let me = format!(
            "pid {} ({})",
            std::process::id(),
            std::env::args().take(3).collect::<Vec<_>>().join(" ")
        );
        let _ = f.set_len(0).and_then(|_| (&f).write_all(me.as_bytes()));
        let readers = dir
            .open(READERS_FILE, Mode::ReadWriteCreate)
            .map_err(|e| io("open", READERS_FILE, e))?;
        let mut s = FsStore::new(root, dir, Some(f), Some(readers));
        s.marks = s.read_marks();
        s.clean_staging()?;
        Ok(s)
    }

    /// Removes every `*.weft-tmp*` temporary a crashed writer left beside records (a walk of
    /// the whole root: one listing per directory).
    pub fn sweep_temporaries(&mut self) -> Result<(), ActorsError> {
        for rel in self.walk_files()? {
            if split(&rel).1.contains(TMP_SUFFIX) {
                let (parent, name) = split(&rel);
                if let Some(d) = self.dir_at(parent, None)? {
                    d.remove_file(name).map_err(|e| io("remove", &rel, e))?;
                }
            }
        }
        self.cache.clear();
        Ok(())
    }

    /// Arms (`None`: disarms) a crash failpoint: the process aborts at the durability step it
    /// names. For the crash tests only (the `weft-failpoints` binary of `tests/failpoints`);
    /// nothing in weft-host arms it.
    #[doc(hidden)]
    pub fn set_failpoint(&mut self, f: Option<Failpoint>) {
        self.crash.arm(f);
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The address prefix recorded in node records: the root's absolute path.
    pub fn address(&self) -> String {
        let p = std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        p.to_string_lossy().into_owned()
    }

    /// Whether this store holds the writer lock.
    pub fn is_writer(&self) -> bool {
        self.lock.is_some()
    }

    /// How many files and directories this store has opened (listings count one each): what
    /// a command costs in the number of nodes (tests and benchmarks assert it).
    pub fn opens(&self) -> u64 {
        self.dir.opens()
    }

    /// How many bytes of records and logs this store has read: what a command costs in the
    /// size of the root (tests and benchmarks assert it, beside [`opens`](Self::opens)).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read + self.lookup_read.load(Ordering::Relaxed)
    }

    /// The directory `rel` (`""`: the root), reached one component at a time from the root's
    /// handle (a link on the way is `SYMLINK_REFUSED`); `None` when it does not exist. With
    /// `create`, missing directories are created and noted (with their parents) for fsync.
    fn dir_at(
        &mut self,
        rel: &str,
        mut create: Option<&mut BTreeSet<String>>,
    ) -> Result<Option<Dir>, ActorsError> {
        if rel.is_empty() {
            return Ok(Some(self.dir.try_clone().map_err(|e| io("open", ".", e))?));
        }
        if let Some(d) = self.cache.get(rel) {
            return Ok(Some(d.try_clone().map_err(|e| io("open", rel, e))?));
        }
        let (parent, name) = split(rel);
        let Some(p) = self.dir_at(parent, create.as_deref_mut())? else {
            return Ok(None);
        };
        // Opened first, created only when missing (a writer's directories almost always exist:
        // no `mkdirat` per directory per batch).
        let d = match p.dir(name) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let Some(dirty) = create else {
                    return Ok(None);
                };
                if p.mkdir(name).map_err(|e| io("create", rel, e))? {
                    dirty.insert(parent.to_owned());
                    dirty.insert(rel.to_owned());
                }
                match p.dir(name) {
                    Ok(d) => d,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(io("open", rel, e)),
                }
            }
            Err(e) => return Err(io("open", rel, e)),
        };
        if self.lock.is_some() && self.cache.len() < 64 {
            // A writer's directories are stable while it holds the lock (within a batch).
            self.cache.insert(
                rel.to_owned(),
                d.try_clone().map_err(|e| io("open", rel, e))?,
            );
        }
        Ok(Some(d))
    }

    /// The directory `rel`, created when missing.
    fn make_dir(&mut self, rel: &str, dirty: &mut BTreeSet<String>) -> Result<Dir, ActorsError> {
        self.dir_at(rel, Some(dirty))?
            .ok_or_else(|| ActorsError::StoreIo(format!("{rel} vanished while created")))
    }

    fn sync_job(&mut self, rel: &str) -> Result<Option<SyncJob>, ActorsError> {
        Ok(self.dir_at(rel, None)?.map(|d| {
            SyncJob::new(
                if rel.is_empty() {
                    ".".into()
                } else {
                    rel.into()
                },
                d.into_file(),
            )
        }))
    }

    /// Handles what a crashed writer left: nodes built under `.weft/` (and, in roots written by
    /// earlier versions, under `nodes/.new,…` / `nodes/.tmp-…`) are renamed into place when
    /// whole and their stage may be named by durable records, removed otherwise; every other
    /// temporary in `.weft/` is removed (those beside records: [`Self::sweep_temporaries`]).
    fn clean_staging(&mut self) -> Result<(), ActorsError> {
        let mut dirty = BTreeSet::new();
        for area in [STAGING_DIR, "nodes"] {
            let Some(d) = self.dir_at(area, None)? else {
                continue;
            };
            // `nodes/` is listed for the pending directories of older versions, unless it is
            // as the last lazy writer left it (which had listed it: its stamp is kept).
            if area == "nodes"
                && let Some(t) = &self.trust
                && d.stamp().is_ok_and(|st| st == t.nodes)
            {
                continue;
            }
            let entries = d.list().map_err(|e| io("list", area, e))?;
            let mut spares = Vec::new();
            for (name, kind) in entries {
                let staged = area == STAGING_DIR;
                if staged && name.starts_with(SPARE_NODE_PREFIX) {
                    spares.push(name);
                    continue;
                }
                if !staged && !name.starts_with('.') {
                    continue;
                }
                let rel = join(area, &name);
                if kind == Kind::Dir && self.is_placed_node(&d, &name)? {
                    // The very directory now at `nodes/<id>`, still listed under its staged
                    // name: a file system without a journal can keep both entries of a rename
                    // cut by a power loss. Removing its tree would empty the node; it is left
                    // (only `fsck` can drop the extra entry of a directory).
                    continue;
                }
                if name.starts_with(NODE_NEW_PREFIX) && kind == Kind::Dir {
                    // A node built in a stage whose rename into place was deferred to the next
                    // stage: if every file is whole, the stage was durable before the next one
                    // began (which may have left records naming the node), so it is renamed
                    // into place; otherwise that stage never completed, nothing names the node,
                    // and it is removed.
                    let nodes = self.make_dir("nodes", &mut dirty)?;
                    let whole = match PendingNode::parse(&name) {
                        Some(p) => {
                            let sub = d.dir(&name).map_err(|e| io("open", &rel, e))?;
                            (p.complete(&sub) && nodes.kind(&p.id).ok().flatten().is_none())
                                .then_some(p.id)
                        }
                        None => None,
                    };
                    match whole {
                        Some(id) => {
                            // Whole in the page cache is not whole on disk: the stage may have
                            // been cut before its fsync round. Its files and directory are
                            // made durable before the node is moved into `nodes/`.
                            let sub = d.dir(&name).map_err(|e| io("open", &rel, e))?;
                            let mut round = Vec::new();
                            for (f, kind) in sub.list().map_err(|e| io("list", &rel, e))? {
                                if kind == Kind::File {
                                    let file = sub
                                        .open(&f, Mode::Read)
                                        .map_err(|e| io("open", &join(&rel, &f), e))?;
                                    round.push(SyncJob::new(join(&rel, &f), file));
                                }
                            }
                            round.push(SyncJob::new(rel.clone(), sub.into_file()));
                            self.sync(round)?;
                            d.rename(&name, &nodes, &id)
                                .map_err(|e| io("rename", &rel, e))?
                        }
                        None => d.remove_tree(&name).map_err(|e| io("remove", &rel, e))?,
                    }
                    dirty.insert("nodes".into());
                    dirty.insert(area.into());
                } else if name.starts_with(NODE_TMP_PREFIX) || (staged && name.contains(TMP_SUFFIX))
                {
                    d.remove_tree(&name).map_err(|e| io("remove", &rel, e))?;
                    dirty.insert(area.into());
                }
            }
            // Spare node directories, once every pending node is in place: never a node. One
            // that a spawn had begun to use is the very directory of a node when a power loss
            // kept its spare name beside the names the spawn gave it (found by the id its
            // `meta.json` holds, by device and inode): left whole, like a staged name above.
            // Every other one (empty, or written by a spawn that never completed) is removed.
            let mut idents = None;
            for name in spares {
                if self.is_placed_spare(&d, &name, &mut idents)? {
                    continue;
                }
                d.remove_tree(&name)
                    .map_err(|e| io("remove", &join(area, &name), e))?;
                dirty.insert(area.into());
            }
        }
        let mut jobs = Vec::new();
        for rel in dirty {
            jobs.extend(self.sync_job(&rel)?);
        }
        if !jobs.is_empty() {
            self.sync(jobs)?;
        }
        self.cache.clear();
        Ok(())
    }

    /// Whether the staged directory `name` of `area` (`.weft/` or, in older roots, `nodes/`)
    /// is the directory at `nodes/<id>` under a second name: same device and inode.
    fn is_placed_node(&mut self, area: &Dir, name: &str) -> Result<bool, ActorsError> {
        let id = if let Some(p) = PendingNode::parse(name) {
            p.id
        } else if let Some((id, batch)) = name
            .strip_prefix(NODE_TMP_PREFIX)
            .and_then(|r| r.rsplit_once('-'))
            && batch.parse::<u64>().is_ok()
            && NodeId::parse(id).is_ok()
        {
            id.to_owned()
        } else {
            return Ok(false);
        };
        let Some(nodes) = self.dir_at("nodes", None)? else {
            return Ok(false);
        };
        let placed = nodes
            .ident(&id)
            .map_err(|e| io("stat", &format!("nodes/{id}"), e))?;
        let staged = area.ident(name).map_err(|e| io("stat", name, e))?;
        Ok(placed.is_some() && placed == staged)
    }

    /// Whether spare `name` of `.weft/` must be kept: it is (or, in doubt, may be) the
    /// directory of a node — a power loss kept its spare name beside the node's. Found by the
    /// id its `meta.json` names, by device and inode, or, when that names nothing, against
    /// every node directory (`idents`, listed once per recovery: only after a crash). Any error
    /// keeps it: removing a node's tree through a second name would empty the node.
    fn is_placed_spare(
        &mut self,
        staging: &Dir,
        name: &str,
        idents: &mut Option<BTreeSet<(u64, u64)>>,
    ) -> Result<bool, ActorsError> {
        let Ok(Some(spare)) = staging.ident(name) else {
            return Ok(true);
        };
        let Ok(sub) = staging.dir(name) else {
            return Ok(true);
        };
        let id = match sub.read("meta.json") {
            Ok(Some(b)) if !b.is_empty() => serde_json::from_slice::<serde_json::Value>(&b)
                .ok()
                .and_then(|v| v.get("id")?.as_str().map(str::to_owned)),
            Ok(_) => None,
            Err(_) => return Ok(true),
        };
        let Some(nodes) = self.dir_at("nodes", None)? else {
            return Ok(false);
        };
        if let Some(id) = id.filter(|i| NodeId::parse(i).is_ok())
            && let Ok(Some(placed)) = nodes.ident(&id)
            && placed == spare
        {
            return Ok(true);
        }
        if idents.is_none() {
            let Ok(list) = nodes.list() else {
                return Ok(true);
            };
            let mut set = BTreeSet::new();
            for (n, kind) in list {
                if kind == Kind::Dir {
                    match nodes.ident(&n) {
                        Ok(Some(i)) => {
                            set.insert(i);
                        }
                        Ok(None) => {}
                        Err(_) => return Ok(true),
                    }
                }
            }
            *idents = Some(set);
        }
        Ok(idents.as_ref().is_some_and(|set| set.contains(&spare)))
    }

    /// Every regular file under the root, by relative path: links are never followed (nor
    /// listed), `.weft/` and the pending directories are skipped.
    fn walk_files(&mut self) -> Result<Vec<String>, ActorsError> {
        let mut out = Vec::new();
        let mut stack = vec![String::new()];
        while let Some(rel) = stack.pop() {
            let Some(d) = self.dir_at(&rel, None)? else {
                continue;
            };
            for (name, kind) in d.list().map_err(|e| io("list", &rel, e))? {
                let child = join(&rel, &name);
                match kind {
                    Kind::Dir => {
                        let skip = (rel.is_empty() && name == STAGING_DIR)
                            || (rel == "nodes"
                                && (name.starts_with(NODE_TMP_PREFIX)
                                    || name.starts_with(NODE_NEW_PREFIX)));
                        if !skip {
                            stack.push(child);
                        }
                    }
                    Kind::File => out.push(child),
                    _ => {}
                }
            }
        }
        Ok(out)
    }

    /// Counts a durability step (crash injection: see [`super::failpoint`]).
    fn step(&mut self) {
        self.crash.step();
    }

    fn tear_now(&self) -> bool {
        self.crash.tear_now()
    }

    /// One round of concurrent fsyncs. A `Written` batch's are owed instead (at most one per
    /// path); the first round of any other batch also pays what is owed (a path it fsyncs
    /// anyway once).
    fn sync(&mut self, mut jobs: Vec<SyncJob>) -> Result<(), ActorsError> {
        if self.written {
            for j in jobs {
                if !self.unsynced.iter().any(|u| u.rel == j.rel) {
                    self.unsynced.push(j);
                }
            }
            return Ok(());
        }
        for u in std::mem::take(&mut self.unsynced) {
            if !jobs.iter().any(|j| j.rel == u.rel) {
                jobs.push(u);
            }
        }
        let out = self
            .pool
            .as_ref()
            .expect("writers have a pool")
            .run(jobs, &self.stats);
        if let Err(e) = &out {
            self.fsync_failed = Some(e.to_string());
        }
        out
    }

    /// The log `rel` opened for appending (created when missing, its directory then noted
    /// as dirty), through the handles a writer keeps between batches: reaching a log from
    /// the root's handle (an `openat` per component, `O_NOFOLLOW`, the regular-file check)
    /// costs more than the append, and an agent appends to its node's `chat.jsonl` twice a
    /// turn. A kept handle names the inode it was opened on through the walls; the store's
    /// own ops that give a path another inode drop it ([`FsStore::forget_appends`]), and
    /// before each reuse the path is resolved again beneath the root without following a link
    /// (`Dir::ident_beneath`: one `openat2` and `fstat`) and must be the handle's inode, its
    /// only name (`nlink == 1`): a log moved aside, replaced, hard-linked, or a directory on
    /// its way moved out with a link left in its place, is reopened through the walls (which
    /// refuse the link: `SYMLINK_REFUSED`). At most [`MAX_APPEND_HANDLES`], the least
    /// recently used evicted. Returns the kept handle, shared (the fsync job holds it).
    fn append_handle(
        &mut self,
        rel: &str,
        dirty: &mut BTreeSet<String>,
    ) -> Result<std::sync::Arc<File>, ActorsError> {
        if let Some(f) = self.appends.get_mut(rel) {
            use std::os::unix::fs::MetadataExt;
            // Reused only while `rel`, resolved beneath the root without following a link,
            // is this very inode and its only name: a name alone (`nlink > 0`) may be
            // another path (`mv chat.jsonl chat.jsonl~`) or a directory moved out of the root
            // with a link left in its place.
            let same = f.file.metadata().is_ok_and(|m| {
                m.nlink() == 1
                    && self
                        .dir
                        .ident_beneath(rel)
                        .is_ok_and(|id| id == Some((m.dev(), m.ino())))
            });
            if same {
                f.used = self.append_tick;
                self.append_tick += 1;
                return Ok(f.file.clone());
            }
            self.appends.remove(rel);
        }
        let (parent, name) = split(rel);
        let d = self.make_dir(parent, dirty)?;
        if d.kind(name).map_err(|e| io("stat", rel, e))?.is_none() {
            dirty.insert(parent.to_owned());
        }
        let f = match d.open(name, Mode::Append) {
            Ok(f) => f,
            Err(e) if walls::is_hard_link_error(&e) => {
                // A log with a second name (a hard link, perhaps from outside the root) is
                // never appended to through it: a copy (fsynced) takes its place first, so the
                // root's log is a file of its own and the other name keeps its bytes.
                let text = d
                    .read(name)
                    .map_err(|e| io("read", rel, e))?
                    .unwrap_or_default();
                let tmp = format!("{rel}{TMP_SUFFIX}-unlink");
                let t = Self::write_fresh(&d, &tmp, &text)?;
                t.sync_all().map_err(|e| io("fsync", &tmp, e))?;
                self.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
                d.rename(split(&tmp).1, &d, name)
                    .map_err(|e| io("rename", rel, e))?;
                dirty.insert(parent.to_owned());
                d.open(name, Mode::Append).map_err(|e| io("open", rel, e))?
            }
            Err(e) => return Err(io("open", rel, e)),
        };
        if self.appends.len() >= MAX_APPEND_HANDLES
            && let Some(lru) = self
                .appends
                .iter()
                .min_by_key(|(_, h)| h.used)
                .map(|(p, _)| p.clone())
        {
            // The least recently used goes (a scan of at most 32: only on a miss).
            self.appends.remove(&lru);
        }
        let f = std::sync::Arc::new(f);
        let kept = AppendHandle {
            file: f.clone(),
            used: self.append_tick,
        };
        self.append_tick += 1;
        self.appends.insert(rel.to_owned(), kept);
        Ok(f)
    }

    /// Drops the append handles of paths `batch` gives another inode (a put's exchange or
    /// rename, a moved record, a node directory created), before it runs.
    fn forget_appends(&mut self, batch: &WriteBatch) {
        let under = |p: &str, d: &str| {
            p.strip_prefix(d)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        for op in batch.stages.iter().flatten() {
            if self.appends.is_empty() {
                return;
            }
            match op {
                Op::Append { .. } | Op::Truncate { .. } | Op::Patch { .. } => {}
                Op::Put { path, .. } => {
                    self.appends.remove(path);
                }
                Op::Rename { from, to } => {
                    self.appends.retain(|p, _| !under(p, from) && !under(p, to))
                }
                Op::CreateNode { id, .. } => {
                    let dir = format!("nodes/{id}");
                    self.appends.retain(|p, _| !under(p, &dir));
                }
            }
        }
    }

    fn write_new(dir: &Dir, rel: &str, bytes: &[u8]) -> Result<File, ActorsError> {
        let mut f = dir
            .open(split(rel).1, Mode::Create)
            .map_err(|e| io("create", rel, e))?;
        f.write_all(bytes).map_err(|e| io("write", rel, e))?;
        Ok(f)
    }

    /// Writes the temporary files of every `put` of the batch up front: they are invisible
    /// until renamed, so their fsyncs can join the first stage's round. A record with a spare
    /// temporary (see `FsStore::spares`) has it overwritten in place; otherwise the
    /// temporary is created, under the spare's name when no other put of the batch uses it.
    fn prewrite_puts(
        &mut self,
        batch: &WriteBatch,
        dirty: &mut BTreeSet<String>,
    ) -> Result<(), ActorsError> {
        let mut files = Vec::new();
        self.put_temps.clear();
        let mut used = BTreeSet::new();
        // A spare holds a version a reader may have opened before the exchange that retired it:
        // it is overwritten only when no reader is reading (taking the readers' lock for an
        // instant waits for no one: a reader that starts later cannot reach the spare).
        let quiet = !self.spares.is_empty()
            && self
                .readers
                .as_ref()
                .is_some_and(|f| f.try_lock().is_ok() && f.unlock().is_ok());
        for (si, ops) in batch.stages.iter().enumerate() {
            for (oi, op) in ops.iter().enumerate() {
                if let Op::Put { path, text } = op {
                    check_path(path).map_err(ActorsError::InvalidArgument)?;
                    let (parent, _) = split(path);
                    let d = self.make_dir(parent, dirty)?;
                    let spare = Self::spare_path(path);
                    let tmp = if used.insert(spare.clone()) {
                        spare
                    } else {
                        format!("{path}{TMP_SUFFIX}-{}-{si}-{oi}", batch.id)
                    };
                    self.step();
                    self.stats
                        .bytes_written
                        .fetch_add(text.len() as u64, Ordering::Relaxed);
                    let f = match self.spares.remove(path) {
                        Some(s) if s == tmp && quiet => Self::overwrite(&d, &tmp, text)?,
                        _ => Self::write_fresh(&d, &tmp, text)?,
                    };
                    files.push(SyncJob::new(tmp.clone(), f));
                    self.put_temps.insert((si, oi), tmp);
                }
            }
        }
        self.pending_sync = files;
        Ok(())
    }

    /// The temporary a put of `dest` writes, which becomes its spare.
    fn spare_path(dest: &str) -> String {
        format!("{dest}{TMP_SUFFIX}-spare")
    }

    /// Writes `text` to a new inode at `rel` (unlinking what was there: a stale spare may be
    /// open in a reader).
    fn write_fresh(dir: &Dir, rel: &str, text: impl AsRef<[u8]>) -> Result<File, ActorsError> {
        dir.remove_file(split(rel).1)
            .map_err(|e| io("remove", rel, e))?;
        Self::write_new(dir, rel, text.as_ref())
    }

    /// Rewrites an existing file in place (no new inode): the whole `text` from offset 0, then
    /// the length. A file with another name besides `rel` (a hard link, perhaps to a file
    /// outside the root) is never written: it is replaced by a new one ([`Self::write_fresh`]).
    fn overwrite(dir: &Dir, rel: &str, text: &str) -> Result<File, ActorsError> {
        let mut f = match dir.open(split(rel).1, Mode::Write) {
            Ok(f) => f,
            // The walls refuse to open it for writing: replaced by a new inode instead.
            Err(e) if walls::is_hard_link_error(&e) => return Self::write_fresh(dir, rel, text),
            Err(e) => return Err(io("open", rel, e)),
        };
        f.write_all(text.as_bytes())
            .and_then(|_| f.set_len(text.len() as u64))
            .map_err(|e| io("write", rel, e))?;
        Ok(f)
    }

    /// Moves a put's temporary into place: exchanges it with the record when the record exists
    /// (the previous version stays behind as the spare, returned), renames it otherwise. A
    /// record that is a link is refused (a rename would replace the link, an exchange would
    /// keep it as the spare).
    fn replace(&mut self, tmp: &str, dest: &str) -> Result<Option<String>, ActorsError> {
        let (parent, name) = split(dest);
        let d = self
            .dir_at(parent, None)?
            .ok_or_else(|| ActorsError::StoreIo(format!("{parent} vanished")))?;
        let kind = d.kind(name).map_err(|e| io("stat", dest, e))?;
        if kind == Some(Kind::Symlink) {
            return Err(ActorsError::SymlinkRefused(dest.to_owned()));
        }
        let tmp_name = split(tmp).1;
        let spare_name = tmp == Self::spare_path(dest);
        if self.exchange && spare_name && kind.is_some() {
            match d.exchange(tmp_name, name) {
                Ok(()) => return Ok(Some(tmp.to_owned())),
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::Unsupported)
                        || matches!(e.raw_os_error(), Some(22 | 38 | 95)) =>
                {
                    // EINVAL, ENOSYS, EOPNOTSUPP: this file system cannot exchange.
                    self.exchange = false;
                }
                Err(e) => return Err(io("exchange", dest, e)),
            }
        }
        d.rename(tmp_name, &d, name)
            .map_err(|e| io("rename", dest, e))?;
        Ok(None)
    }

    /// Builds node directory `.weft/<staged>` in spare `spare`: renames it, then writes `init`
    /// into its (empty, durable) files in place; returns the fsyncs the files owe. `NotFound`
    /// when the spare or one of its files is gone.
    fn fill_spare(
        &mut self,
        staging: &Dir,
        spare: &str,
        staged: &str,
        init: &[(String, String)],
    ) -> std::io::Result<Vec<SyncJob>> {
        let rel = join(STAGING_DIR, staged);
        self.step();
        staging.rename(spare, staging, staged)?;
        let top = staging.dir(staged)?;
        let mut jobs = Vec::new();
        for (name, text) in init {
            self.step();
            let mut f = top.open(name, Mode::Write).map_err(|e| {
                if walls::is_hard_link_error(&e) {
                    // A hard link planted in the spare (perhaps to a file outside the root):
                    // not written (the walls refuse it); the spare is not used (as one emptied).
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("{name} of a spare has another name"),
                    )
                } else {
                    e
                }
            })?;
            f.write_all(text.as_bytes())?;
            f.set_len(text.len() as u64)?;
            self.stats
                .bytes_written
                .fetch_add(text.len() as u64, Ordering::Relaxed);
            jobs.push(SyncJob::new(join(&rel, name), f));
        }
        Ok(jobs)
    }

    /// Builds node `id` under `.weft/<staged>` with its files; returns the fsyncs it owes.
    fn build_node(
        &mut self,
        staged: &str,
        init: &[(String, String)],
        dirty: &mut BTreeSet<String>,
        first: &mut Vec<SyncJob>,
    ) -> Result<(), ActorsError> {
        let staging = match self.make_dir(STAGING_DIR, dirty) {
            Ok(d) => d,
            Err(e) => {
                // `.weft/` is unusable (a file or a link at its name): the spares handed over
                // cannot be reached, and the thread, perhaps waiting to hand one over, is told
                // to look (its status then says what it finds).
                if let Some(sp) = self.spare_nodes.as_mut() {
                    sp.after_vanished(None);
                }
                return Err(e);
            }
        };
        let rel = join(STAGING_DIR, staged);
        // Whatever an earlier attempt left under the staged name goes first.
        let clear_staged = |staging: &Dir| -> Result<(), ActorsError> {
            if staging
                .kind(staged)
                .map_err(|e| io("stat", &rel, e))?
                .is_some()
            {
                staging
                    .remove_tree(staged)
                    .map_err(|e| io("remove", &rel, e))?;
            }
            Ok(())
        };
        clear_staged(&staging)?;
        let fits = init.len() == SPARE_NODE_FILES.len()
            && SPARE_NODE_FILES
                .iter()
                .all(|f| init.iter().any(|(n, _)| n == f));
        // After a spare found gone, no other spare of the thread's is tried (in-line ones
        // are: the writer checks its `.weft/` before it makes them).
        let mut checked = false;
        while let Some(spare) = self.spare_nodes.as_mut().filter(|_| fits).and_then(|sp| {
            if checked && sp.rx.is_some() {
                None
            } else {
                sp.take(&staging)
            }
        }) {
            match self.fill_spare(&staging, &spare, staged, init) {
                Ok(jobs) => {
                    // The spare's entries are durable: only its files' contents (and, for a
                    // deferred rename, its new name in `.weft/`) are owed.
                    first.extend(jobs);
                    if let Some(sp) = &self.spare_nodes {
                        sp.note(|st| st.used += 1);
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Removed (or emptied) by someone else since it was made (perhaps with the
                    // whole `.weft/`): the directory is built as without spares. What the
                    // attempt left under the staged name goes first.
                    if let Some(sp) = self.spare_nodes.as_mut() {
                        sp.note(|st| st.vanished += 1);
                        // The others may be gone with it (`.weft/` moved away): none is tried
                        // now, and the thread checks its `.weft/` before its next.
                        sp.after_vanished(Some(&staging));
                    }
                    checked = true;
                    clear_staged(&staging)?;
                }
                Err(e) => {
                    // The batch fails; the spare, half used, is not ready any more.
                    if let Some(sp) = &self.spare_nodes {
                        sp.note(|st| st.vanished += 1);
                    }
                    return Err(io("write", &rel, e));
                }
            }
        }
        staging.mkdir(staged).map_err(|e| io("create", &rel, e))?;
        let top = staging.dir(staged).map_err(|e| io("open", &rel, e))?;
        for (name, text) in init {
            check_path(name).map_err(ActorsError::InvalidArgument)?;
            let mut d = top.try_clone().map_err(|e| io("open", &rel, e))?;
            let mut at = rel.clone();
            let parts: Vec<&str> = name.split('/').collect();
            for c in &parts[..parts.len() - 1] {
                at = join(&at, c);
                d.mkdir(c).map_err(|e| io("create", &at, e))?;
                d = d.dir(c).map_err(|e| io("open", &at, e))?;
                first.push(SyncJob::new(
                    at.clone(),
                    d.try_clone().map_err(|e| io("open", &at, e))?.into_file(),
                ));
            }
            self.step();
            self.stats
                .bytes_written
                .fetch_add(text.len() as u64, Ordering::Relaxed);
            let frel = join(&rel, name);
            first.push(SyncJob::new(
                frel.clone(),
                Self::write_new(&d, &frel, text.as_bytes())?,
            ));
        }
        first.push(SyncJob::new(rel, top.into_file()));
        Ok(())
    }

    /// Grows record `rel` in place (`Op::Patch`): checks it is `size` bytes long, then writes
    /// `text` at `at` and sets the length to `at + text.len()`, while holding the readers'
    /// lock exclusively for an instant, so that no reader that takes the lock (every reader of
    /// this store does) sees the record half written. When a reader holds the lock, the record
    /// is replaced whole instead (its first `at` bytes and `text` in a temporary, fsynced,
    /// renamed over it: what readers see changes atomically), which costs the record's size
    /// but never waits for a reader. Returns the file for the stage's fsync round. A reader
    /// that ignores the lock may see the record torn for the microseconds of an in-place write.
    fn patch(
        &mut self,
        rel: &str,
        at: u64,
        size: u64,
        text: &str,
        dirty: &mut BTreeSet<String>,
    ) -> Result<File, ActorsError> {
        use std::os::unix::fs::FileExt;
        let (parent, name) = split(rel);
        let d = self
            .dir_at(parent, None)?
            .ok_or_else(|| ActorsError::StoreIo(format!("{parent} is missing")))?;
        // A record with a second name (a hard link) is never written through it: it is
        // replaced whole, as when a reader reads, which gives the root a file of its own.
        let (f, linked) = match d.open(name, Mode::ReadWrite) {
            Ok(f) => (f, false),
            Err(e) if walls::is_hard_link_error(&e) => (
                d.open(name, Mode::Read).map_err(|e| io("open", rel, e))?,
                true,
            ),
            Err(e) => return Err(io("open", rel, e)),
        };
        let len = f.metadata().map_err(|e| io("stat", rel, e))?.len();
        if len != size || at > size {
            return Err(ActorsError::StoreIo(format!(
                "{rel} is {len} bytes, not the {size} a patch at {at} expects (changed under the writer)"
            )));
        }
        let bytes = text.as_bytes();
        let quiet = !linked && self.readers.as_ref().is_some_and(|r| r.try_lock().is_ok());
        if !quiet {
            let mut whole = vec![0u8; at as usize];
            f.read_exact_at(&mut whole, 0)
                .map_err(|e| io("read", rel, e))?;
            whole.extend_from_slice(bytes);
            let whole = String::from_utf8(whole).map_err(|_| {
                ActorsError::StoreIo(format!("{rel}: a patch at {at} splits a character"))
            })?;
            let tmp = format!("{rel}{TMP_SUFFIX}-patch");
            self.step();
            let t = Self::write_fresh(&d, &tmp, &whole)?;
            self.stats
                .bytes_written
                .fetch_add(whole.len() as u64, Ordering::Relaxed);
            t.sync_all().map_err(|e| io("fsync", &tmp, e))?;
            self.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
            self.step();
            d.rename(split(&tmp).1, &d, name)
                .map_err(|e| io("rename", rel, e))?;
            dirty.insert(parent.to_owned());
            return Ok(t);
        }
        // No torn variant for crash injection: process death does not cut a positioned write
        // of a few hundred bytes within a page (a power loss can; open repairs that, see the
        // core's store contract).
        self.step();
        let out = f
            .write_all_at(bytes, at)
            .and_then(|_| f.set_len(at + bytes.len() as u64))
            .map_err(|e| io("write", rel, e));
        if let Some(r) = &self.readers {
            let _ = r.unlock();
        }
        out?;
        self.stats
            .bytes_written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(f)
    }

    /// Renames `.weft/<staged>` to `nodes/<id>`.
    fn move_node(&mut self, staged: &str, id: &str) -> Result<(), ActorsError> {
        let mut scratch = BTreeSet::new();
        let nodes = self.make_dir("nodes", &mut scratch)?;
        let staging = self.make_dir(STAGING_DIR, &mut scratch)?;
        let dest = format!("nodes/{id}");
        if nodes.kind(id).map_err(|e| io("stat", &dest, e))?.is_some() {
            return Err(ActorsError::StoreIo(format!("{dest} already exists")));
        }
        staging
            .rename(staged, &nodes, id)
            .map_err(|e| io("rename", &dest, e))
    }

    /// One stage: write what it creates or appends, fsync new files and directories (with the
    /// prewritten put temporaries on the first stage), rename into place, then fsync the
    /// appends and every directory that changed — all in at most two concurrent rounds.
    fn apply_stage(
        &mut self,
        batch: &WriteBatch,
        si: usize,
        dirty: &mut BTreeSet<String>,
    ) -> Result<(), ActorsError> {
        let mut first: Vec<SyncJob> = std::mem::take(&mut self.pending_sync);
        let mut second: Vec<SyncJob> = Vec::new();
        let mut moves: Vec<Move> = Vec::new();
        // The previous stage's nodes move into place before this stage writes anything (so a
        // killed process never leaves this stage's effects without them); the rename becomes
        // durable in this stage's last round, and until then recovery completes it (see
        // `clean_staging`).
        // Only `nodes/` is fsynced for the rename: the entry's removal from `.weft/` needs no
        // round of its own (it becomes durable with the next stage that fsyncs `.weft/`, or
        // with writeback). A power loss before then can leave the directory under its staged
        // name too, which opening recognizes as the node itself (`is_placed_node`) and leaves.
        for (staged, id) in std::mem::take(&mut self.deferred) {
            self.step();
            self.move_node(&staged, &id)?;
            dirty.insert("nodes".into());
        }
        let last = si + 1 == batch.stages.len();
        for (oi, op) in batch.stages[si].iter().enumerate() {
            match op {
                Op::CreateNode { id, files: init } => {
                    NodeId::parse(id).map_err(|why| {
                        ActorsError::InvalidArgument(format!("node id {id:?} {why}"))
                    })?;
                    let nodes = self.make_dir("nodes", dirty)?;
                    let dest = format!("nodes/{id}");
                    if nodes.kind(id).map_err(|e| io("stat", &dest, e))?.is_some() {
                        return Err(ActorsError::StoreIo(format!("{dest} already exists")));
                    }
                    // Named with its manifest when possible: then its rename into place can
                    // wait for the next stage's round (one round fewer per stage that creates
                    // nodes), because recovery can tell a whole directory from a torn one.
                    let pending = PendingNode::dir_name(batch.id, id, init);
                    let defer = pending.is_some() && !last;
                    let staged =
                        pending.unwrap_or_else(|| format!("{NODE_TMP_PREFIX}{id}-{}", batch.id));
                    self.build_node(&staged, init, dirty, &mut first)?;
                    if defer {
                        // The staged directory's entry must be durable before the next stage
                        // begins: this stage's only round covers it.
                        first.extend(self.sync_job(STAGING_DIR)?);
                        self.deferred.push((staged, id.clone()));
                    } else {
                        moves.push(Move::Node {
                            staged,
                            id: id.clone(),
                        });
                        // As for a deferred rename: `nodes/` only (see above).
                        dirty.insert("nodes".into());
                    }
                }
                Op::Put { path, .. } => {
                    check_path(path).map_err(ActorsError::InvalidArgument)?;
                    let tmp = self.put_temps.remove(&(si, oi)).ok_or_else(|| {
                        ActorsError::StoreIo(format!("no temporary was written for {path}"))
                    })?;
                    dirty.insert(split(path).0.to_owned());
                    moves.push(Move::Put {
                        tmp,
                        dest: path.clone(),
                    });
                }
                Op::Append { path, text } => {
                    check_path(path).map_err(ActorsError::InvalidArgument)?;
                    let f = self.append_handle(path, dirty)?;
                    let bytes = text.as_bytes();
                    if self.tear_now() {
                        let _ = (&*f).write_all(&bytes[..bytes.len() / 2]);
                    }
                    self.step();
                    (&*f).write_all(bytes).map_err(|e| io("append", path, e))?;
                    self.stats
                        .bytes_written
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    second.push(SyncJob::append(path.clone(), f));
                }
                Op::Truncate { path, len } => {
                    check_path(path).map_err(ActorsError::InvalidArgument)?;
                    let (parent, name) = split(path);
                    let d = self
                        .dir_at(parent, None)?
                        .ok_or_else(|| ActorsError::StoreIo(format!("{parent} is missing")))?;
                    let f = d.open(name, Mode::Write).map_err(|e| io("open", path, e))?;
                    self.step();
                    f.set_len(*len).map_err(|e| io("truncate", path, e))?;
                    second.push(SyncJob::new(path.clone(), f));
                }
                Op::Patch {
                    path,
                    at,
                    size,
                    text,
                } => {
                    check_path(path).map_err(ActorsError::InvalidArgument)?;
                    let f = self.patch(path, *at, *size, text, dirty)?;
                    second.push(SyncJob::new(path.clone(), f));
                }
                Op::Rename { from, to } => {
                    check_path(from).map_err(ActorsError::InvalidArgument)?;
                    check_path(to).map_err(ActorsError::InvalidArgument)?;
                    let (pa, na) = split(from);
                    let exists = match self.dir_at(pa, None)? {
                        Some(d) => d.kind(na).map_err(|e| io("stat", from, e))?,
                        None => None,
                    };
                    match exists {
                        Some(Kind::Symlink) => {
                            return Err(ActorsError::SymlinkRefused(from.clone()));
                        }
                        Some(_) => {
                            dirty.insert(split(to).0.to_owned());
                            moves.push(Move::Plain {
                                from: from.clone(),
                                to: to.clone(),
                            });
                        }
                        None => {}
                    }
                }
            }
        }
        if !first.is_empty() {
            self.step();
            self.sync(first)?;
        }
        let mut spares = Vec::new();
        for m in moves {
            self.step();
            match m {
                Move::Put { tmp, dest } => {
                    if let Some(s) = self.replace(&tmp, &dest)? {
                        spares.push((dest, s));
                    }
                }
                Move::Node { staged, id } => self.move_node(&staged, &id)?,
                Move::Plain { from, to } => {
                    let (pa, na) = split(&from);
                    let (pb, nb) = split(&to);
                    let a = self.dir_at(pa, None)?;
                    let b = self.make_dir(pb, dirty)?;
                    if let Some(a) = a {
                        a.rename(na, &b, nb).map_err(|e| io("rename", &from, e))?;
                    }
                }
            }
        }
        for rel in std::mem::take(dirty) {
            second.extend(self.sync_job(&rel)?);
        }
        if !second.is_empty() {
            self.step();
            self.sync(second)?;
        }
        // The exchanges are durable: each spare now durably holds a previous version only.
        self.spares.extend(spares);
        Ok(())
    }
}

impl Drop for FsStore {
    /// Removes the spare temporaries (they hold previous versions only; a crash leaves them to
    /// the next writer's open).
    fn drop(&mut self) {
        // The spare thread stops, and its spares go, while the lock is still held (fields are
        // dropped after this, `lock` before `spare_nodes`): a writer that takes the lock next
        // must not meet a thread still making or removing spares in `.weft/`.
        drop(self.spare_nodes.take());
        // Lines a `Written` batch left: fsynced on a clean close (a crash leaves them to the
        // page cache).
        for j in std::mem::take(&mut self.unsynced) {
            let _ = j.run();
        }
        let spares: Vec<String> = self.spares.values().cloned().collect();
        for s in spares {
            let (parent, name) = split(&s);
            if let Ok(Some(d)) = self.dir_at(parent, None) {
                let _ = d.remove_file(name);
            }
        }
    }
}

impl ActorStore for FsStore {
    type Error = ActorsError;

    fn load(&mut self) -> Result<Snapshot, ActorsError> {
        // A reader holds the readers' lock shared while it reads, so that the writer does not
        // overwrite a spare this read may have opened as a record (see `FsStore::spares`). On
        // a root it cannot write the lock file into, no writer can run either.
        let shared = if self.lock.is_none() {
            let f = match self.dir.open(READERS_FILE, Mode::ReadWriteCreate) {
                Ok(f) => Some(f),
                Err(e) if is_symlink_error(&e) => return Err(io("open", READERS_FILE, e)),
                Err(_) => self.dir.open(READERS_FILE, Mode::Read).ok(),
            };
            f.filter(|f| f.lock_shared().is_ok())
        } else {
            None
        };
        let out = self.read_snapshot();
        if let Some(f) = shared {
            let _ = f.unlock();
        }
        self.cache.clear();
        self.appends.clear();
        out
    }

    fn apply(&mut self, batch: &WriteBatch) -> Result<(), ActorsError> {
        if self.lock.is_none() {
            return Err(ActorsError::InvalidArgument(
                "the store was opened read-only".into(),
            ));
        }
        if let Some(e) = &self.fsync_failed {
            return Err(ActorsError::StoreIo(format!(
                "an earlier fsync failed ({e}); reopen the root"
            )));
        }
        let start = Instant::now();
        self.stats.rounds_in_batch.store(0, Ordering::Relaxed);
        // Only appends are left unsynced, to a bounded number of files (each owed fsync holds
        // an open file); any other `Written` batch is performed synced.
        self.written = batch.sync == Durability::Written
            && self.unsynced.len() < MAX_OWED_FSYNCS
            && batch
                .stages
                .iter()
                .flatten()
                .all(|op| matches!(op, Op::Append { .. }));
        // A synced batch that writes anything but appends to the files owed (a metathread ref
        // naming the owed lines, a record, a new node) pays the debt in a round of its own
        // first: its own writes must not reach the disk before the lines they may name.
        if !self.written
            && !self.unsynced.is_empty()
            && !batch.stages.iter().flatten().all(|op| {
                matches!(op, Op::Append { path, .. } if self.unsynced.iter().any(|u| u.rel == *path))
            })
            && let Err(e) = self.sync(Vec::new())
        {
            return Err(e);
        }
        self.forget_appends(batch);
        let mut out = self.apply_batch(batch);
        if out.is_err() {
            // What a failed batch left is unknown: logs are reached by their paths again.
            self.appends.clear();
        }
        if out.is_ok()
            && let Err(e) = self.refill_spares()
            && let Some(sp) = self.spare_nodes.as_mut()
        {
            // In-line spares (crash tests) are made once the batch is durable; a failure to
            // make one fails no batch: it is noted, and the next batch tries again (in
            // `.weft/` as it is then).
            SpareNodes::failed(&sp.status, &e);
            if let Some(d) = SpareNodes::reopen(&sp.root) {
                sp.staging = d;
            }
        }
        if self.written {
            self.written = false;
        } else if out.is_ok() && !self.unsynced.is_empty() {
            // A synced batch with no round of its own (a sync point): pay what is owed.
            out = self.sync(Vec::new());
        }
        self.cache.clear();
        self.stats
            .apply_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        out
    }
}

/// The directories the store reads or writes (a link there is refused, not skipped).
fn is_store_dir(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    matches!(
        parts.as_slice(),
        ["nodes"] | ["orchestrator"] | ["timeline"] | ["views"] | [STAGING_DIR] | ["nodes", _]
    ) || matches!(parts.as_slice(), ["nodes", id, "summaries"] if !id.starts_with('.'))
}

impl FsStore {
    /// Reads a log or record at `rel`, refusing links. A reader (no lock) rereads a log whose
    /// last line lacks its newline a few times: a writer's append may be in flight, and what it
    /// sees then is a line being written, not a torn one.
    fn read_file(&mut self, rel: &str) -> Result<Option<Vec<u8>>, ActorsError> {
        let (parent, name) = split(rel);
        let Some(d) = self.dir_at(parent, None)? else {
            return Ok(None);
        };
        let mut bytes = d.read(name).map_err(|e| io("read", rel, e))?;
        let mut n = bytes.as_ref().map_or(0, Vec::len);
        if self.lock.is_none() && rel.ends_with(".jsonl") {
            for _ in 0..3 {
                match &bytes {
                    Some(b) if !b.is_empty() && !b.ends_with(b"\n") => {
                        std::thread::sleep(Duration::from_millis(2));
                        bytes = d.read(name).map_err(|e| io("read", rel, e))?;
                        n += bytes.as_ref().map_or(0, Vec::len);
                    }
                    _ => break,
                }
            }
        }
        self.bytes_read += n as u64;
        Ok(bytes)
    }

    /// Reads the files of node directory `nodes/<id>` into `snap` (`dir`: where it is, which
    /// is elsewhere for a staged node). Records are opened by name, never found by listing: a
    /// listing taken while the writer replaces a record may miss it.
    fn read_node(&mut self, snap: &mut Snapshot, id: &str, dir: &str) -> Result<bool, ActorsError> {
        self.read_node_with(snap, id, dir, &["meta.json", "chat.jsonl"])
    }

    /// Reads files `names` and `summaries/*.json` of node directory `dir` into `snap`.
    fn read_node_with(
        &mut self,
        snap: &mut Snapshot,
        id: &str,
        dir: &str,
        names: &[&str],
    ) -> Result<bool, ActorsError> {
        if self.dir_at(dir, None)?.is_none() {
            return Ok(false);
        }
        snap.dirs.push(format!("nodes/{id}"));
        for name in names.iter().copied() {
            if let Some(b) = self.read_file(&join(dir, name))? {
                snap.files.insert(format!("nodes/{id}/{name}"), b);
            }
        }
        let at = join(dir, "summaries");
        let Some(s) = self.dir_at(&at, None)? else {
            return Ok(true);
        };
        let mut names: BTreeSet<String> = s
            .list()
            .map_err(|e| io("list", &at, e))?
            .into_iter()
            .filter(|(_, k)| matches!(k, Kind::File | Kind::Symlink))
            .map(|(n, _)| n)
            .collect();
        names.insert("latest.json".into());
        for f in names {
            let frel = format!("nodes/{id}/summaries/{f}");
            if is_snapshot_path(&frel)
                && let Some(b) = self.read_file(&join(&at, &f))?
            {
                snap.files.insert(frel, b);
            }
        }
        Ok(true)
    }

    /// Reads every snapshot file (see [`is_snapshot_path`]), in the reverse of the order a
    /// spawn writes them, so that a reader running beside a writer sees no record naming a
    /// node it missed: the metathread (a spawn's last stage), then `graph.json` and the
    /// node directories (the parent's records, its second stage), then whole staged nodes in
    /// `.weft/` (through their handles: the writer may move them meanwhile), then — until no
    /// record read names one more — every node a record names that the listing missed (a
    /// child, created in the first stage, before any record named it; a directory listing
    /// may miss entries added while it runs). Records are opened by name, never found by
    /// listing a directory the writer is renaming in.
    fn read_snapshot(&mut self) -> Result<Snapshot, ActorsError> {
        let mut snap = Snapshot::default();
        for rel in [METATHREAD_FILE, INDEX_FILE, BOOKMARKS_FILE] {
            if let Some(b) = self.read_file(rel)? {
                snap.files.insert(rel.into(), b);
            }
        }
        if let Some(d) = self.dir_at("views", None)? {
            for (name, kind) in d.list().map_err(|e| io("list", "views", e))? {
                let rel = join("views", &name);
                if is_snapshot_path(&rel)
                    && matches!(kind, Kind::File | Kind::Symlink)
                    && let Some(b) = self.read_file(&rel)?
                {
                    snap.files.insert(rel, b);
                }
            }
        }
        for (name, kind) in self.dir.list().map_err(|e| io("list", ".", e))? {
            if kind == Kind::Symlink && (is_snapshot_path(&name) || is_store_dir(&name)) {
                return Err(ActorsError::SymlinkRefused(name));
            }
        }
        if let Some(b) = self.read_file(GRAPH_FILE)? {
            snap.files.insert(GRAPH_FILE.into(), b);
        }
        let mut seen = BTreeSet::new();
        let mut legacy = Vec::new();
        if let Some(d) = self.dir_at("nodes", None)? {
            for (name, kind) in d.list().map_err(|e| io("list", "nodes", e))? {
                if name.starts_with('.') {
                    if kind == Kind::Dir && name.starts_with(NODE_NEW_PREFIX) {
                        legacy.push(format!("nodes/{name}"));
                    }
                    continue;
                }
                match kind {
                    Kind::Symlink => {
                        return Err(ActorsError::SymlinkRefused(format!("nodes/{name}")));
                    }
                    Kind::Dir => {
                        self.read_node(&mut snap, &name, &format!("nodes/{name}"))?;
                        seen.insert(name);
                    }
                    _ => {}
                }
            }
        }
        // A reader that opens a root after a power loss, before a writer has: a whole staged
        // node is read as the node it becomes (what the writer's open will rename into place).
        let mut staged: Vec<String> = legacy;
        if let Some(d) = self.dir_at(STAGING_DIR, None)? {
            for (name, kind) in d.list().map_err(|e| io("list", STAGING_DIR, e))? {
                if kind == Kind::Dir && name.starts_with(NODE_NEW_PREFIX) {
                    staged.push(join(STAGING_DIR, &name));
                }
            }
        }
        for rel in staged {
            let Some(p) = PendingNode::parse(split(&rel).1) else {
                continue;
            };
            if seen.contains(&p.id) {
                continue;
            }
            let Some(d) = self.dir_at(&rel, None)? else {
                continue;
            };
            // Through the directory's handle: the writer may rename it into `nodes/` meanwhile,
            // and the handle still reads the same files.
            if !p.complete(&d) {
                continue;
            }
            snap.dirs.push(format!("nodes/{}", p.id));
            for (name, _, _) in &p.files {
                let frel = format!("nodes/{}/{name}", p.id);
                if is_snapshot_path(&frel)
                    && let Some(b) = d.read(name).map_err(|e| io("read", &join(&rel, name), e))?
                {
                    self.bytes_read += b.len() as u64;
                    snap.files.insert(frel, b);
                }
            }
            seen.insert(p.id);
        }
        // Nodes the records name that the listing missed: created since, read now — until no
        // record read names one more (a node read here may have a child newer still).
        let mut fresh: Vec<String> = snap.files.keys().cloned().collect();
        let mut tried = BTreeSet::new();
        while !fresh.is_empty() {
            let mut named = BTreeSet::new();
            for p in &fresh {
                let Some(b) = snap.files.get(p) else { continue };
                if p == GRAPH_FILE {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(b)
                        && let Some(m) = v.get("nodes").and_then(|n| n.as_object())
                    {
                        named.extend(m.keys().cloned());
                    }
                } else if p.ends_with("/meta.json")
                    && let Ok(v) = serde_json::from_slice::<serde_json::Value>(b)
                {
                    if let Some(s) = v.get("spawned").and_then(|s| s.as_array()) {
                        named.extend(s.iter().filter_map(|x| x.as_str().map(str::to_owned)));
                    }
                    if let Some(s) = v.get("spawnedBy").and_then(|s| s.as_str()) {
                        named.insert(s.to_owned());
                    }
                }
            }
            fresh.clear();
            for id in named {
                if seen.contains(&id) || NodeId::parse(&id).is_err() || !tried.insert(id.clone()) {
                    continue;
                }
                if self.read_node(&mut snap, &id, &format!("nodes/{id}"))? {
                    fresh.push(format!("nodes/{id}/meta.json"));
                    seen.insert(id);
                }
            }
        }
        snap.dirs.sort();
        snap.dirs.dedup();
        Ok(snap)
    }

    /// What a lazy open reads first ([`weft_core::actors::ActorGraph::open_lazy`]): the
    /// metathread, `graph.json` and, in `dirs`, the listing of `nodes/` — no node record. A
    /// link among them is refused (`SYMLINK_REFUSED`). Writers only (a writer's open has moved
    /// whole staged nodes into place, so pending work shows in what this reads).
    pub fn load_head(&mut self) -> Result<LazySnapshot, ActorsError> {
        if self.lock.is_none() {
            return Err(ActorsError::InvalidArgument(
                "a lazy open needs the writer's lock".into(),
            ));
        }
        let mut snap = Snapshot::default();
        for (name, kind) in self.dir.list().map_err(|e| io("list", ".", e))? {
            if kind == Kind::Symlink && (is_snapshot_path(&name) || is_store_dir(&name)) {
                return Err(ActorsError::SymlinkRefused(name));
            }
        }
        self.marks = self.read_marks();
        let mark = self.marks.get(METATHREAD_FILE).copied();
        let mut meta_mark = None;
        if let Some(r) = self.read_log(METATHREAD_FILE, mark, None)? {
            meta_mark = r.mark;
            snap.files.insert(METATHREAD_FILE.into(), r.bytes);
        }
        let nodes = self.dir_at("nodes", None)?;
        let nodes_stamp = match &nodes {
            Some(d) => Some(d.stamp().map_err(|e| io("stat", "nodes", e))?),
            None => None,
        };
        let mut graph_ends = None;
        let mut trusted = false;
        match self.dir.open(GRAPH_FILE, Mode::Read) {
            Ok(mut f) => {
                let meta = f.metadata().map_err(|e| io("stat", GRAPH_FILE, e))?;
                // Both as this store's last lazy writer left them (it kept their stamps only
                // when its graph was consistent): no listing needed, and graph.json is read
                // by its ends (ids are looked up in nodes/, see `FsGraphLookup`).
                let graph_stamp = super::walls::stamp(&meta);
                trusted = matches!(
                    (&self.trust, &nodes_stamp),
                    (Some(t), Some(n)) if t.graph == graph_stamp && t.nodes == *n
                );
                let size = meta.len();
                match (&nodes, trusted && size > 2 * GRAPH_END_BYTES) {
                    (Some(nd), true) => {
                        use std::os::unix::fs::FileExt;
                        let mut head = vec![0; GRAPH_END_BYTES as usize];
                        let mut tail = vec![0; GRAPH_END_BYTES as usize];
                        f.read_exact_at(&mut head, 0)
                            .and_then(|()| f.read_exact_at(&mut tail, size - GRAPH_END_BYTES))
                            .map_err(|e| io("read", GRAPH_FILE, e))?;
                        self.bytes_read += 2 * GRAPH_END_BYTES;
                        let lookup = FsGraphLookup {
                            root: self.dir.try_clone().map_err(|e| io("open", ".", e))?,
                            nodes: nd.try_clone().map_err(|e| io("open", "nodes", e))?,
                            read: self.lookup_read.clone(),
                        };
                        graph_ends = Some(GraphEnds {
                            head,
                            tail,
                            size,
                            lookup: std::sync::Arc::new(lookup),
                        });
                    }
                    _ => {
                        let mut b = Vec::with_capacity(size as usize + 1);
                        f.read_to_end(&mut b)
                            .map_err(|e| io("read", GRAPH_FILE, e))?;
                        self.bytes_read += b.len() as u64;
                        snap.files.insert(GRAPH_FILE.into(), b);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("read", GRAPH_FILE, e)),
        }
        if !trusted {
            self.list_nodes(&mut snap)?;
        }
        Ok(LazySnapshot {
            snap,
            tails: BTreeMap::new(),
            meta_mark,
            trusted,
            graph_ends,
            record_ends: BTreeMap::new(),
        })
    }

    /// Lists `nodes/` into `snap.dirs` (sorted), refusing links.
    fn list_nodes(&mut self, snap: &mut Snapshot) -> Result<(), ActorsError> {
        if let Some(d) = self.dir_at("nodes", None)? {
            for (name, kind) in d.list().map_err(|e| io("list", "nodes", e))? {
                match kind {
                    Kind::Symlink if !name.starts_with('.') => {
                        return Err(ActorsError::SymlinkRefused(format!("nodes/{name}")));
                    }
                    Kind::Dir => snap.dirs.push(format!("nodes/{name}")),
                    _ => {}
                }
            }
        }
        snap.dirs.sort();
        Ok(())
    }

    /// Adds what a lazy open asks for to `head`: the records of nodes `ask.nodes` (`meta.json`,
    /// `summaries/*.json`) to its snapshot, and the ends of their `chat.jsonl` (holding the
    /// last `ask.tail_lines` lines) to its tails.
    pub fn read_nodes_into(
        &mut self,
        ask: &LazyRead<'_>,
        head: &mut LazySnapshot,
    ) -> Result<(), ActorsError> {
        if ask.listing {
            head.snap.dirs.clear();
            self.list_nodes(&mut head.snap)?;
        }
        if ask.metathread {
            head.meta_mark = None;
            head.snap.files.remove(METATHREAD_FILE);
            if let Some(r) = self.read_log(METATHREAD_FILE, None, None)? {
                head.snap.files.insert(METATHREAD_FILE.into(), r.bytes);
            }
        }
        for id in ask.nodes {
            if NodeId::parse(id).is_err() {
                continue;
            }
            let by_ends = match head.trusted {
                true => self.record_ends(id)?,
                false => None,
            };
            if let Some(r) = by_ends {
                match r {
                    Ok(ends) => {
                        head.record_ends.insert(id.clone(), ends);
                    }
                    Err(whole) => {
                        head.snap
                            .files
                            .insert(format!("nodes/{id}/meta.json"), whole);
                    }
                }
                if !self.read_node_with(&mut head.snap, id, &format!("nodes/{id}"), &[])? {
                    continue;
                }
            } else if !self.read_node_records(&mut head.snap, id)? {
                continue;
            }
            let chat = format!("nodes/{id}/chat.jsonl");
            let mark = self.marks.get(&chat).copied();
            if let Some(r) = self.read_log(&chat, mark, Some(ask.tail_lines))? {
                head.tails.insert(chat, r.tail);
            }
        }
        head.snap.dirs.sort();
        head.snap.dirs.dedup();
        Ok(())
    }

    /// [`read_node`](Self::read_node) without `chat.jsonl`.
    fn read_node_records(&mut self, snap: &mut Snapshot, id: &str) -> Result<bool, ActorsError> {
        self.read_node_with(snap, id, &format!("nodes/{id}"), &["meta.json"])
    }

    /// `nodes/<id>/meta.json` when a stamp of it is kept (see [`keep_marks`](Self::keep_marks)):
    /// by its ends ([`RecordEnds`]) when the stamp matches and it is larger than the two ends,
    /// else whole (`Err`); `None` when no stamp is kept or it is missing (the caller reads it).
    #[allow(clippy::type_complexity)]
    fn record_ends(
        &mut self,
        id: &str,
    ) -> Result<Option<Result<RecordEnds, Vec<u8>>>, ActorsError> {
        use std::os::unix::fs::FileExt;
        let rel = format!("nodes/{id}/meta.json");
        let Some(kept) = self.records.get(&rel).cloned() else {
            return Ok(None);
        };
        let Some(d) = self.dir_at(&format!("nodes/{id}"), None)? else {
            return Ok(None);
        };
        let f = match d.open("meta.json", Mode::Read) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("open", &rel, e)),
        };
        let meta = f.metadata().map_err(|e| io("stat", &rel, e))?;
        let size = meta.len();
        if super::walls::stamp(&meta) != kept || size <= RECORD_HEAD_BYTES + RECORD_TAIL_BYTES {
            let mut b = Vec::with_capacity(size as usize + 1);
            (&f).read_to_end(&mut b).map_err(|e| io("read", &rel, e))?;
            self.bytes_read += b.len() as u64;
            return Ok(Some(Err(b)));
        }
        let mut head = vec![0; RECORD_HEAD_BYTES as usize];
        let mut tail = vec![0; RECORD_TAIL_BYTES as usize];
        f.read_exact_at(&mut head, 0)
            .and_then(|()| f.read_exact_at(&mut tail, size - RECORD_TAIL_BYTES))
            .map_err(|e| io("read", &rel, e))?;
        self.bytes_read += RECORD_HEAD_BYTES + RECORD_TAIL_BYTES;
        Ok(Some(Ok(RecordEnds {
            head,
            tail,
            size,
            lookup: std::sync::Arc::new(self.lookup()?),
        })))
    }

    /// A [`GraphLookup`] through this store's walls, counting what it reads.
    fn lookup(&mut self) -> Result<FsGraphLookup, ActorsError> {
        let nodes = self
            .dir_at("nodes", None)?
            .ok_or_else(|| ActorsError::StoreIo("nodes/ is missing".into()))?;
        Ok(FsGraphLookup {
            root: self.dir.try_clone().map_err(|e| io("open", ".", e))?,
            nodes: nodes.try_clone().map_err(|e| io("open", "nodes", e))?,
            read: self.lookup_read.clone(),
        })
    }

    /// [`MARKS_FILE`], or nothing when it is missing or unreadable (it is a cache); also sets
    /// the kept stamps (`trust`).
    fn read_marks(&mut self) -> BTreeMap<String, KeptMark> {
        let file = match self.read_file(MARKS_FILE) {
            Ok(Some(b)) => serde_json::from_slice::<MarksFile>(&b)
                .ok()
                .filter(|m| m.v == 1),
            _ => None,
        };
        let (logs, trust, records) = file
            .map(|m| (m.logs, m.graph, m.records))
            .unwrap_or_default();
        self.trust = trust;
        self.records = records;
        logs
    }

    /// The stamp of record `rel` as it is now (`None` when it cannot be had).
    fn record_stamp(&mut self, rel: &str) -> Option<String> {
        let (parent, name) = split(rel);
        self.dir_at(parent, None).ok()??.stamp_of(name).ok()?
    }

    /// The stamps of `graph.json` and `nodes/` as they are now.
    fn stamps(&mut self) -> Option<Trust> {
        let g = self.dir.open(GRAPH_FILE, Mode::Read).ok()?;
        let graph = super::walls::stamp(&g.metadata().ok()?);
        let nodes = self.dir_at("nodes", None).ok()??.stamp().ok()?;
        Some(Trust { graph, nodes })
    }

    /// Reads log `rel` from the end of what `mark` summarises (when the bytes before it are
    /// still what they were; else from the start), and with `tail` also back to the start of
    /// its last `tail` lines: the bytes after the mark (`bytes`, with the mark used) or the
    /// log's tail (`tail`). `None` when there is no such file.
    fn read_log(
        &mut self,
        rel: &str,
        mark: Option<KeptMark>,
        tail: Option<usize>,
    ) -> Result<Option<ReadLog>, ActorsError> {
        use std::os::unix::fs::FileExt;
        let (parent, name) = split(rel);
        let Some(d) = self.dir_at(parent, None)? else {
            return Ok(None);
        };
        let f = match d.open(name, Mode::Read) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("open", rel, e)),
        };
        let size = f.metadata().map_err(|e| io("stat", rel, e))?.len();
        let read = |from: u64, to: u64, n: &mut u64| -> Result<Vec<u8>, ActorsError> {
            let mut buf = vec![0u8; (to - from) as usize];
            f.read_exact_at(&mut buf, from)
                .map_err(|e| io("read", rel, e))?;
            *n += buf.len() as u64;
            Ok(buf)
        };
        let mut n = 0;
        let mut mark = mark.filter(|m| m.mark.len <= size && m.mark.len > 0);
        let mut refused = false;
        let mut window = 4096u64;
        let out = loop {
            // What to read: from before the mark's check bytes (or the start), and at least
            // the last `window` bytes for a tail.
            let from_mark = mark.map(|m| m.mark.len - m.mark.len.min(MARK_CHECK_BYTES));
            let lo = match (from_mark, tail) {
                (None, _) => 0,
                (Some(m), None) => m,
                (Some(m), Some(_)) => m.min(size.saturating_sub(window)),
            };
            let buf = read(lo, size, &mut n)?;
            if let (Some(m), Some(c)) = (mark, from_mark) {
                let at = (c - lo) as usize;
                let end = (m.mark.len - lo) as usize;
                if check_digest(&buf[at..end]) != m.check {
                    mark = None;
                    refused = true;
                    continue;
                }
            }
            let end = |buf: &[u8]| {
                check_digest(&buf[buf.len() - buf.len().min(MARK_CHECK_BYTES as usize)..])
            };
            if buf.len() as u64 >= MARK_CHECK_BYTES.min(size) {
                self.seen.insert(rel.to_owned(), (size, end(&buf), refused));
            }
            let Some(keep) = tail else {
                let m = mark.map(|m| m.mark);
                let skip = m.map_or(0, |m| (m.len - lo) as usize);
                break ReadLog {
                    mark: m,
                    bytes: buf[skip..].to_vec(),
                    tail: LogTail::default(),
                };
            };
            let Some(at) = tail_start(&buf, keep, lo == 0) else {
                window *= 4;
                continue;
            };
            let t = lo + at as u64;
            let lines_before = match mark {
                None => count_lines(&buf[..at]),
                Some(m) if t >= m.mark.len => {
                    m.mark.lines + count_lines(&buf[(m.mark.len - lo) as usize..at])
                }
                Some(m) => m
                    .mark
                    .lines
                    .saturating_sub(count_lines(&buf[at..(m.mark.len - lo) as usize])),
            };
            break ReadLog {
                mark: mark.map(|m| m.mark),
                bytes: Vec::new(),
                tail: LogTail {
                    offset: t,
                    lines_before,
                    bytes: buf[at..].to_vec(),
                },
            };
        };
        self.bytes_read += n;
        Ok(Some(out))
    }

    /// Keeps the marks a lazy open returned in [`MARKS_FILE`] (without fsync: a cache)
    /// when one is new, was refused, or lies [`MARK_STRIDE`] past the kept one. Errors are
    /// ignored: the next open reads more, nothing else.
    ///
    /// With `trusted` (the graph said [`weft_core::actors::ActorGraph::lazy_trusted`] after
    /// this writer's last write) it also keeps the stamps `graph.json` and `nodes/` have now,
    /// so that the next lazy open that finds them unchanged skips the listing of `nodes/` and
    /// the parse of `graph.json`; otherwise it drops any stamps kept.
    ///
    /// With the stamps it also keeps stamps of node records `records` (the graph's
    /// [`weft_core::actors::ActorGraph::lazy_records`]: canonical, as this writer left them),
    /// so that the next lazy open reads them by their ends; `chain` (the open trusted the kept
    /// stamps: nothing changed behind them) keeps the stamps of other records too, which stay
    /// valid while they match.
    pub fn keep_marks(
        &mut self,
        marks: &BTreeMap<String, LogMark>,
        trusted: bool,
        records: &[String],
        chain: bool,
    ) {
        let trust = if trusted { self.stamps() } else { None };
        let mut changed = trust != self.trust;
        self.trust = trust;
        let mut kept = match (&self.trust, chain) {
            (Some(_), true) => self.records.clone(),
            _ => BTreeMap::new(),
        };
        if self.trust.is_some() {
            for rel in records {
                match self.record_stamp(rel) {
                    Some(st) => kept.insert(rel.clone(), st),
                    None => kept.remove(rel),
                };
            }
        }
        while kept.len() > MARKS_KEPT {
            kept.pop_first();
        }
        changed |= kept != self.records;
        self.records = kept;
        for (path, m) in marks {
            let Some(&(size, check, refused)) = self.seen.get(path) else {
                continue;
            };
            if m.len != size {
                continue;
            }
            let stale = match self.marks.get(path) {
                None => true,
                Some(k) => refused || m.len >= k.mark.len + MARK_STRIDE || m.len < k.mark.len,
            };
            if stale && m.len > 0 {
                self.marks
                    .insert(path.clone(), KeptMark { mark: *m, check });
                changed = true;
            }
        }
        if !changed {
            return;
        }
        while self.marks.len() > MARKS_KEPT {
            self.marks.pop_first();
        }
        let file = MarksFile {
            v: 1,
            logs: std::mem::take(&mut self.marks),
            graph: self.trust.clone(),
            records: self.records.clone(),
        };
        let text = serde_json::to_string(&file).expect("marks serialize");
        self.marks = file.logs;
        let _ = self.write_marks(&text);
    }

    /// Replaces [`MARKS_FILE`] with `text` atomically. The temporary is the previous version
    /// left behind by the last exchange (`renameat2(RENAME_EXCHANGE)`), overwritten in place:
    /// a command creates and frees no inode for its marks (on this project's VM a create that
    /// frees the inode it replaces costs 1–2 ms, an overwrite and exchange ~15 µs). Only
    /// writers read the file, under the lock, so no reader holds the version overwritten.
    fn write_marks(&mut self, text: &str) -> Result<(), ActorsError> {
        let tmp = MARKS_SPARE;
        match self.dir.kind(tmp).map_err(|e| io("stat", tmp, e))? {
            Some(Kind::File) => drop(Self::overwrite(&self.dir, tmp, text)?),
            _ => drop(Self::write_fresh(&self.dir, tmp, text)?),
        }
        let marks = self
            .dir
            .kind(MARKS_FILE)
            .map_err(|e| io("stat", MARKS_FILE, e))?;
        if self.exchange && marks == Some(Kind::File) {
            #[cfg(test)]
            let exchanged = match self.marks_exchange_fault {
                Some(code) => Err(std::io::Error::from_raw_os_error(code)),
                None => self.dir.exchange(tmp, MARKS_FILE),
            };
            #[cfg(not(test))]
            let exchanged = self.dir.exchange(tmp, MARKS_FILE);
            match exchanged {
                Ok(()) => return Ok(()),
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::Unsupported)
                        || matches!(e.raw_os_error(), Some(22 | 38 | 95)) =>
                {
                    // EINVAL, ENOSYS, EOPNOTSUPP: this file system cannot exchange.
                    self.exchange = false;
                }
                // Any other failure of the exchange (the marks are a cache): this time a
                // plain rename, the exchange tried again next time.
                Err(_) => {}
            }
        }
        self.dir
            .rename(tmp, &self.dir, MARKS_FILE)
            .map_err(|e| io("rename", MARKS_FILE, e))
    }

    fn apply_batch(&mut self, batch: &WriteBatch) -> Result<(), ActorsError> {
        let mut dirty = BTreeSet::new();
        if let Err(e) = self.prewrite_puts(batch, &mut dirty) {
            self.pending_sync.clear();
            self.spares.clear();
            return Err(e);
        }
        for si in 0..batch.stages.len() {
            if let Err(e) = self.apply_stage(batch, si, &mut dirty) {
                // A staged node stays under its manifest name; the next open renames it into
                // place or removes it, as after a crash.
                self.pending_sync.clear();
                self.deferred.clear();
                self.spares.clear();
                return Err(e);
            }
        }
        debug_assert!(self.deferred.is_empty(), "the last stage defers nothing");
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// A mark kept in [`MARKS_FILE`], with the digest of the bytes before its end.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct KeptMark {
    #[serde(flatten)]
    mark: LogMark,
    check: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct MarksFile {
    v: u32,
    logs: BTreeMap<String, KeptMark>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    graph: Option<Trust>,
    /// Stamps of node records (see [`FsStore::keep_marks`]), by path; only with `graph`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    records: BTreeMap<String, String>,
}

/// How many bytes of each end of `graph.json` a trusted lazy open reads
/// ([`weft_core::actors::GraphEnds`]); a smaller `graph.json` is read whole.
const GRAPH_END_BYTES: u64 = 4096;

/// How many of the first bytes of a node record a trusted lazy open reads
/// ([`weft_core::actors::RecordEnds`]: the fields before `spawned`); a record no larger than
/// this and [`RECORD_TAIL_BYTES`] is read whole.
const RECORD_HEAD_BYTES: u64 = 4096;
/// How many of the last bytes of a node record a trusted lazy open reads (the last child,
/// `spawned`'s close, `lastEventAt`).
const RECORD_TAIL_BYTES: u64 = 1024;

/// The host's answers about a `graph.json` handed as its ends ([`GraphLookup`]): through the
/// store's walls (no link followed).
#[derive(Debug)]
struct FsGraphLookup {
    root: Dir,
    nodes: Dir,
    /// The store's count of bytes read through lookups ([`FsStore::bytes_read`]).
    read: std::sync::Arc<AtomicU64>,
}

impl GraphLookup for FsGraphLookup {
    fn exists(&self, id: &str) -> bool {
        // The core asks about valid node ids only (one path component); any entry of that
        // name (not only a directory), or an error, counts as taken.
        NodeId::parse(id).is_ok() && !matches!(self.nodes.kind(id), Ok(None))
    }

    fn graph(&self) -> Option<Vec<u8>> {
        let b = self.root.read(GRAPH_FILE).ok()??;
        self.read.fetch_add(b.len() as u64, Ordering::Relaxed);
        Some(b)
    }

    fn record(&self, id: &str, from: u64, to: u64) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        NodeId::parse(id).ok()?;
        let f = self
            .nodes
            .dir(id)
            .ok()?
            .open("meta.json", Mode::Read)
            .ok()?;
        let mut b = vec![0; usize::try_from(to.checked_sub(from)?).ok()?];
        f.read_exact_at(&mut b, from).ok()?;
        self.read.fetch_add(b.len() as u64, Ordering::Relaxed);
        Some(b)
    }
}

/// Stamps ([`super::walls::stamp`]) of `graph.json` and of the `nodes/` directory, taken
/// right after the last write of a lazy writer whose graph was consistent: while both still
/// match, a lazy open trusts what that writer checked
/// ([`weft_core::actors::LazySnapshot::trusted`]). Any change to either (a spawn, a repair,
/// another tool adding a node or editing the index) changes a stamp, and the open checks in
/// full again.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Trust {
    graph: String,
    nodes: String,
}

/// What [`FsStore::read_log`] read.
struct ReadLog {
    /// The mark the bytes follow (`None`: they are the whole log).
    mark: Option<LogMark>,
    bytes: Vec<u8>,
    tail: LogTail,
}

/// The digest a kept mark checks the bytes before its end with (FNV-1a, 64 bits).
fn check_digest(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, OpenOptions};

    fn files() -> Vec<(String, String)> {
        vec![
            ("meta.json".into(), "{\"id\": \"a,b+c=d\"}\n".into()),
            ("chat.jsonl".into(), "{\"role\":\"system\"}\n".into()),
        ]
    }

    /// A round of one fsync (an agent turn's end appends to one log) runs on the calling
    /// thread: counted as one fsync in one round, no pool thread started. An append's fsync
    /// is an `fdatasync`; a new log's directory gets an `fsync` of its own beside it.
    #[test]
    fn a_round_of_one_append_is_one_data_sync_on_the_calling_thread() {
        use weft_core::actors::Durability;
        let root = std::env::temp_dir().join(format!("weft-one-job-round-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let batch = |id, path: &str, sync| WriteBatch {
            id,
            label: "t".into(),
            stages: vec![vec![Op::Append {
                path: path.into(),
                text: format!("{{\"n\":{id}}}\n"),
            }]],
            gates: Vec::new(),
            sync,
        };
        let counts = |s: &FsStore| {
            (
                s.stats.fsyncs.load(Ordering::Relaxed),
                s.stats.data_syncs.load(Ordering::Relaxed),
                s.stats.rounds.load(Ordering::Relaxed),
                s.pool.as_ref().unwrap().threads(),
            )
        };
        let mut first = FsStore::open_writer(&root, Duration::ZERO).unwrap();
        first.load().unwrap();
        first
            .apply(&batch(1, "timeline/a.jsonl", Durability::Synced))
            .unwrap();
        drop(first);

        let mut store = FsStore::open_writer(&root, Duration::ZERO).unwrap();
        store.load().unwrap();
        let (f0, d0, r0, t0) = counts(&store);
        assert_eq!(t0, 0);
        let delta = |s: &FsStore| {
            let (f, d, r, t) = counts(s);
            (f - f0, d - d0, r - r0, t)
        };
        // An append to an existing log: one fdatasync, one round, on this thread.
        store
            .apply(&batch(2, "timeline/a.jsonl", Durability::Synced))
            .unwrap();
        assert_eq!(delta(&store), (1, 1, 1, 0));
        // Written, then synced, the same log: the owed fsync is the synced batch's own.
        store
            .apply(&batch(3, "timeline/a.jsonl", Durability::Written))
            .unwrap();
        assert_eq!(
            delta(&store),
            (1, 1, 1, 0),
            "a written batch issues no fsync"
        );
        store
            .apply(&batch(4, "timeline/a.jsonl", Durability::Synced))
            .unwrap();
        assert_eq!(delta(&store), (2, 2, 2, 0));
        // A new log: its fdatasync and its directory's fsync in one round of two jobs, the
        // second on a pool thread.
        store
            .apply(&batch(5, "timeline/b.jsonl", Durability::Synced))
            .unwrap();
        assert_eq!(delta(&store), (4, 3, 3, 1));
        let text = fs::read_to_string(root.join("timeline/a.jsonl")).unwrap();
        assert_eq!(text.lines().count(), 4);
        drop(store);
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn a_pending_name_spells_its_manifest_and_parses_back() {
        let name = PendingNode::dir_name(7, "a,b+c=d", &files()).unwrap();
        assert!(name.starts_with(NODE_NEW_PREFIX) && name.len() <= PendingNode::MAX_NAME);
        let p = PendingNode::parse(&name).unwrap();
        assert_eq!(p.id, "a,b+c=d");
        assert_eq!(
            p.files
                .iter()
                .map(|f| (f.0.as_str(), f.1))
                .collect::<Vec<_>>(),
            [("meta.json", 18), ("chat.jsonl", 18)]
        );
        // Names a manifest cannot spell, or too long, fall back to a plain temporary name.
        let odd = vec![("sub/x.json".to_owned(), String::new())];
        assert_eq!(PendingNode::dir_name(7, "a", &odd), None);
        let many: Vec<(String, String)> = (0..20)
            .map(|i| (format!("f{i}.json"), String::new()))
            .collect();
        assert_eq!(PendingNode::dir_name(7, "a", &many), None);
        for bad in [
            ".new,x,meta.json=1=00,a",
            ".new,1,meta.json=1,a",
            ".new,1,m=1=0",
            ".tmp-a-1",
        ] {
            assert_eq!(PendingNode::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_pending_node_is_complete_only_with_every_file_whole() {
        let dir = std::env::temp_dir().join(format!("weft-pending-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let f = files();
        let p = PendingNode::parse(&PendingNode::dir_name(1, "x", &f).unwrap()).unwrap();
        for (n, t) in &f {
            fs::write(dir.join(n), t).unwrap();
        }
        let handle = Dir::open_path(&dir).unwrap();
        assert!(p.complete(&handle));
        // A later stage may append to a file: its first bytes still prove the file whole.
        let mut chat = OpenOptions::new()
            .append(true)
            .open(dir.join("chat.jsonl"))
            .unwrap();
        chat.write_all(b"{\"role\":\"user\"}\n").unwrap();
        assert!(p.complete(&handle));
        fs::write(dir.join("chat.jsonl"), &f[1].1[..5]).unwrap();
        assert!(!p.complete(&handle), "torn");
        fs::write(dir.join("chat.jsonl"), vec![0u8; f[1].1.len()]).unwrap();
        assert!(!p.complete(&handle), "zero-filled");
        fs::write(dir.join("chat.jsonl"), &f[1].1).unwrap();
        fs::remove_file(dir.join("meta.json")).unwrap();
        assert!(!p.complete(&handle), "missing");
        fs::remove_dir_all(&dir).unwrap();
    }

    fn ident(p: &std::path::Path) -> (u64, u64) {
        use std::os::unix::fs::MetadataExt;
        let m = fs::symlink_metadata(p).unwrap();
        (m.dev(), m.ino())
    }

    fn spares_in(root: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(root.join(STAGING_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(SPARE_NODE_PREFIX))
            .collect();
        // Oldest first: by number.
        v.sort_by_key(|n| n[SPARE_NODE_PREFIX.len()..].parse::<u64>().ok());
        v
    }

    /// A writer keeping spare node directories builds each child in the oldest spare (the
    /// child's directory is the spare's inode, one fsync fewer than building it), keeps them
    /// outside `nodes/`, and a root left with spares (empty, written in part, or naming a node
    /// they are not) opens with the same files in `nodes/` and the same lineage, the spares gone.
    #[test]
    fn spare_node_directories_become_children_and_leftovers_are_never_nodes() {
        use weft_core::actors::{ActorGraph, HarnessConfig, NodeType, SpawnRequest};
        let root = std::env::temp_dir().join(format!("weft-spare-nodes-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let mut store = FsStore::open_writer(&root, Duration::ZERO).unwrap();
        store.keep_spare_nodes_in_line(2).unwrap();
        let snap = store.load().unwrap();
        let t = weft_core::Wall::from_ms(1_000);
        let mut g = ActorGraph::init(HarnessConfig::default(), "t:", &snap, t, "t").unwrap();
        for b in g.take_batches() {
            let done = store.perform(&b).unwrap();
            g.ack(done).unwrap();
        }
        let mut fsyncs = Vec::new();
        for id in ["a", "b", "c"] {
            let spares = spares_in(&root);
            assert_eq!(spares.len(), 2, "kept ready: {spares:?}");
            let oldest = ident(&root.join(STAGING_DIR).join(&spares[0]));
            let f0 = store.stats.fsyncs.load(Ordering::Relaxed);
            let mut r = SpawnRequest::new("coordinator", NodeType::Task);
            r.id = Some(id.into());
            g.spawn(weft_core::Wall::from_ms(2_000), r).unwrap();
            for b in g.take_batches() {
                let done = store.perform(&b).unwrap();
                g.ack(done).unwrap();
            }
            fsyncs.push(store.stats.fsyncs.load(Ordering::Relaxed) - f0);
            assert_eq!(
                ident(&root.join("nodes").join(id)),
                oldest,
                "{id} is the spare"
            );
            assert!(!spares_in(&root).contains(&spares[0]));
        }
        drop(store);
        assert!(spares_in(&root).is_empty(), "removed on close");
        // Without spares the same spawn (at steady state: not the first) fsyncs the child's
        // directory too.
        let mut plain = FsStore::open_writer(&root, Duration::ZERO).unwrap();
        let snap = plain.load().unwrap();
        let mut g = ActorGraph::open(HarnessConfig::default(), "t:", &snap, t)
            .unwrap()
            .0;
        for b in g.take_batches() {
            let done = plain.perform(&b).unwrap();
            g.ack(done).unwrap();
        }
        let f0 = plain.stats.fsyncs.load(Ordering::Relaxed);
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some("d".into());
        g.spawn(weft_core::Wall::from_ms(3_000), r).unwrap();
        for b in g.take_batches() {
            let done = plain.perform(&b).unwrap();
            g.ack(done).unwrap();
        }
        let plain_fsyncs = plain.stats.fsyncs.load(Ordering::Relaxed) - f0;
        assert!(
            fsyncs[1..].iter().all(|f| *f + 1 == plain_fsyncs),
            "{fsyncs:?} vs {plain_fsyncs}"
        );
        drop(plain);
        // What a killed writer can leave: an empty spare, one a spawn wrote in part, one whose
        // record names a node it is not.
        let before = |root: &std::path::Path| {
            let mut m = BTreeMap::new();
            for e in fs::read_dir(root.join("nodes")).unwrap() {
                let e = e.unwrap();
                let n = e.file_name().into_string().unwrap();
                m.insert(n.clone(), fs::read(e.path().join("meta.json")).unwrap());
            }
            (m, fs::read(root.join(GRAPH_FILE)).unwrap())
        };
        let was = before(&root);
        assert_eq!(
            was.0.keys().cloned().collect::<Vec<_>>(),
            ["a", "b", "c", "coordinator", "d"]
        );
        let staging = root.join(STAGING_DIR);
        for (name, meta) in [
            (",0", &b""[..]),
            (",1", &b"{\"id\": \"zz"[..]),
            (",2", &br#"{"id": "a"}"#[..]),
        ] {
            let d = staging.join(format!("{SPARE_NODE_PREFIX}{}", &name[1..]));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("meta.json"), meta).unwrap();
            fs::write(d.join("chat.jsonl"), b"").unwrap();
        }
        let mut store = FsStore::open_writer(&root, Duration::ZERO).unwrap();
        assert!(spares_in(&root).is_empty());
        assert_eq!(before(&root), was, "nodes/ and graph.json as they were");
        let snap = store.load().unwrap();
        let (g, report) = ActorGraph::open(HarnessConfig::default(), "t:", &snap, t).unwrap();
        assert!(report.diagnostics.is_empty(), "{:?}", report.diagnostics);
        assert_eq!(g.node_ids().len(), 5);
        drop(store);
        fs::remove_dir_all(&root).unwrap();
    }

    /// Performs and acknowledges every batch the graph holds.
    fn flush_graph(g: &mut weft_core::actors::ActorGraph, store: &mut FsStore) {
        for b in g.take_batches() {
            let done = store.perform(&b).unwrap();
            g.ack(done).unwrap();
        }
    }

    /// Spawns the task `id` under the coordinator and flushes its batches.
    fn spawn_task(g: &mut weft_core::actors::ActorGraph, store: &mut FsStore, id: &str) {
        let mut r =
            weft_core::actors::SpawnRequest::new("coordinator", weft_core::actors::NodeType::Task);
        r.id = Some(id.into());
        g.spawn(weft_core::Wall::from_ms(2_000), r).unwrap();
        flush_graph(g, store);
    }

    /// A writer of `root` opened again and the graph (with its open report) read from it.
    fn reopened(
        root: &Path,
    ) -> (
        FsStore,
        weft_core::actors::ActorGraph,
        weft_core::actors::OpenReport,
    ) {
        let mut store = FsStore::open_writer(root, Duration::ZERO).unwrap();
        let snap = store.load().unwrap();
        let (g, report) = weft_core::actors::ActorGraph::open(
            weft_core::actors::HarnessConfig::default(),
            "t:",
            &snap,
            weft_core::Wall::from_ms(1_000),
        )
        .unwrap();
        (store, g, report)
    }

    /// A fresh writer of `root` keeping `spares` spare node directories (thread mode) and a
    /// graph initialised on it, its first batches performed.
    fn writer_with_spares(root: &Path, spares: usize) -> (FsStore, weft_core::actors::ActorGraph) {
        let _ = fs::remove_dir_all(root);
        let mut store = FsStore::open_writer(root, Duration::ZERO).unwrap();
        store.keep_spare_nodes(spares).unwrap();
        let snap = store.load().unwrap();
        let t = weft_core::Wall::from_ms(1_000);
        let mut g = weft_core::actors::ActorGraph::init(
            weft_core::actors::HarnessConfig::default(),
            "t:",
            &snap,
            t,
            "t",
        )
        .unwrap();
        flush_graph(&mut g, &mut store);
        (store, g)
    }

    /// Waits (up to a minute: the spare thread runs on its own) until `done` holds of the spare
    /// names in `.weft/` and the status.
    fn wait_for_spares(
        store: &FsStore,
        root: &std::path::Path,
        what: &str,
        done: impl Fn(&[String], &SpareNodesStatus) -> bool,
    ) {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let names = fs::read_dir(root.join(STAGING_DIR))
                .map(|_| spares_in(root))
                .unwrap_or_default();
            let st = store.spare_nodes_status().unwrap();
            if done(&names, &st) {
                return;
            }
            assert!(Instant::now() < until, "{what}: {names:?} {st:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Spare node directories removed by someone else while a long-lived writer runs fail no
    /// spawn: a spawn that finds its spares gone builds the directory as without spares (a
    /// whole node, the root opening clean), and the spare thread, whose next spare fails in a
    /// removed `.weft/`, says so in its status and makes them again in the `.weft/` there is
    /// now, where the next spawn uses one.
    #[test]
    fn a_spawn_whose_spares_vanished_builds_its_directory_and_the_thread_makes_them_again() {
        use weft_core::actors::ActorGraph;
        let root = std::env::temp_dir().join(format!("weft-spare-gone-{}", std::process::id()));
        let (mut store, mut g) = writer_with_spares(&root, 4);
        let spawn = |g: &mut ActorGraph, store: &mut FsStore, id: &str| {
            spawn_task(g, store, id);
            let meta: serde_json::Value = serde_json::from_slice(
                &fs::read(root.join("nodes").join(id).join("meta.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(meta["id"], id, "a whole record");
            let chat = fs::read_to_string(root.join("nodes").join(id).join("chat.jsonl")).unwrap();
            assert!(
                chat.ends_with('\n') && chat.lines().count() >= 1,
                "{chat:?}"
            );
        };
        // Four made (the thread then waits to hand one over): nothing is being made in
        // `.weft/` while the test removes.
        let full = |names: &[String], st: &SpareNodesStatus| {
            names.len() == 4 && st.made - st.used - st.vanished - st.discarded == 4
        };
        wait_for_spares(&store, &root, "four spares", full);
        // 1. The spares are removed.
        let gone = spares_in(&root);
        for n in &gone {
            fs::remove_dir_all(root.join(STAGING_DIR).join(n)).unwrap();
        }
        spawn(&mut g, &mut store, "a");
        let st = store.spare_nodes_status().unwrap();
        assert!(st.vanished >= 3, "{st:?}");
        assert_eq!(st.errors, 0, "{st:?}");
        // (One name of a removed spare may still wait in the queue: it holds four.)
        wait_for_spares(&store, &root, "made again", |names, _| {
            names.len() >= 3 && names.iter().all(|n| !gone.contains(n))
        });
        let oldest = ident(&root.join(STAGING_DIR).join(&spares_in(&root)[0]));
        let used = store.spare_nodes_status().unwrap().used;
        let before = (spares_in(&root), store.spare_nodes_status());
        spawn(&mut g, &mut store, "b");
        assert_eq!(
            ident(&root.join("nodes/b")),
            oldest,
            "b is the spare: {before:?} {:?}",
            store.spare_nodes_status()
        );
        assert_eq!(store.spare_nodes_status().unwrap().used, used + 1);
        // 2. `.weft/` itself is removed: the spawn that finds its spare gone makes `.weft/`
        // again, and the thread (told so, and seeing another directory at the name) makes
        // its spares in that one.
        wait_for_spares(&store, &root, "four spares again", full);
        fs::remove_dir_all(root.join(STAGING_DIR)).unwrap();
        spawn(&mut g, &mut store, "c");
        wait_for_spares(
            &store,
            &root,
            "made again in the new .weft/",
            |names, st| !st.failing && names.len() >= 3,
        );
        let oldest = ident(&root.join(STAGING_DIR).join(&spares_in(&root)[0]));
        spawn(&mut g, &mut store, "d");
        assert_eq!(ident(&root.join("nodes/d")), oldest, "d is the spare");
        drop(store);
        assert!(spares_in(&root).is_empty(), "removed on close");
        let (store, g, report) = reopened(&root);
        assert!(report.diagnostics.is_empty(), "{:?}", report.diagnostics);
        assert!(report.repairs.is_empty(), "{:?}", report.repairs);
        assert_eq!(g.node_ids().len(), 5);
        drop(store);
        fs::remove_dir_all(&root).unwrap();
    }

    /// `.weft/` replaced by a file while the spare thread waits, all made: the spawn that
    /// cannot open it fails (as without spares) and drops the spares handed over, so the thread
    /// looks, and its status says it is failing and why (none ready); once a directory is at
    /// the name again, the thread makes its spares there and is no longer failing.
    #[test]
    fn an_unusable_staging_directory_shows_in_the_status_until_it_is_usable_again() {
        let root = std::env::temp_dir().join(format!("weft-spare-file-{}", std::process::id()));
        let (mut store, mut g) = writer_with_spares(&root, 4);
        let full = |names: &[String], st: &SpareNodesStatus| names.len() == 4 && st.ready == 4;
        wait_for_spares(&store, &root, "four spares", full);
        let st = store.spare_nodes_status().unwrap();
        assert_eq!((st.keep, st.made, st.failing), (4, 4, false), "{st:?}");
        fs::remove_dir_all(root.join(STAGING_DIR)).unwrap();
        fs::write(root.join(STAGING_DIR), "not a directory").unwrap();
        let mut r =
            weft_core::actors::SpawnRequest::new("coordinator", weft_core::actors::NodeType::Task);
        r.id = Some("a".into());
        g.spawn(weft_core::Wall::from_ms(2_000), r).unwrap();
        let b = g.take_batches();
        assert!(
            matches!(store.perform(&b[0]), Err(ActorsError::StoreIo(_))),
            "the spawn cannot build its directory"
        );
        wait_for_spares(&store, &root, "failing, retried", |_, st| {
            st.failing && st.errors >= 2
        });
        let st = store.spare_nodes_status().unwrap();
        let last = st.last_error.clone().unwrap_or_default();
        assert!(last.contains(".weft/ cannot be opened"), "{st:?}");
        // The three handed over are dropped (never touched); the one the thread held may have
        // gone in after them.
        assert!(st.vanished >= 3 && st.ready <= 1, "{st:?}");
        assert_eq!(st.used, 0, "{st:?}");
        fs::remove_file(root.join(STAGING_DIR)).unwrap();
        fs::create_dir(root.join(STAGING_DIR)).unwrap();
        // (The one the thread held, made in the removed `.weft/`, may wait in the queue: a
        // spawn would find it gone.)
        wait_for_spares(&store, &root, "made again", |names, st| {
            !st.failing && names.len() >= 3
        });
        drop(store);
        assert!(spares_in(&root).is_empty(), "removed on close");
        fs::remove_dir_all(&root).unwrap();
    }

    /// A record's previous version stays intact for a reader that opened it, however many
    /// rewrites later, while that reader holds the readers' lock; without readers the writer
    /// reuses it (the control: this test can tell the two apart).
    #[test]
    fn a_spare_is_overwritten_only_when_no_reader_reads() {
        use weft_core::actors::{ActorGraph, HarnessConfig, NodeType, SpawnRequest};
        for reading in [true, false] {
            let root =
                std::env::temp_dir().join(format!("weft-spare-{}-{reading}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            let mut store = FsStore::open_writer(&root, Duration::ZERO).unwrap();
            let snap = store.load().unwrap();
            let mut g = ActorGraph::init(
                HarnessConfig::default(),
                "t:",
                &snap,
                weft_core::Wall::from_ms(1_000),
                "t",
            )
            .unwrap();
            for b in g.take_batches() {
                let done = store.perform(&b).unwrap();
                g.ack(done).unwrap();
            }
            let spawn = |g: &mut ActorGraph, store: &mut FsStore, id: &str| {
                let mut r = SpawnRequest::new("coordinator", NodeType::Task);
                r.id = Some(id.into());
                g.spawn(weft_core::Wall::from_ms(2_000), r).unwrap();
                for b in g.take_batches() {
                    let done = store.perform(&b).unwrap();
                    g.ack(done).unwrap();
                }
            };
            spawn(&mut g, &mut store, "a");
            // A reader opens the coordinator's record; the next spawn retires that inode to
            // the spare, the one after rewrites the spare unless a reader holds the lock.
            let meta = root.join("nodes/coordinator/meta.json");
            let mut held = File::open(&meta).unwrap();
            let before = fs::read(&meta).unwrap();
            let lock = File::open(root.join(READERS_FILE)).unwrap();
            if reading {
                lock.lock_shared().unwrap();
            }
            spawn(&mut g, &mut store, "b");
            spawn(&mut g, &mut store, "c");
            let mut seen = Vec::new();
            held.read_to_end(&mut seen).unwrap();
            assert_eq!(seen == before, reading, "reading: {reading}");
            assert!(
                String::from_utf8(fs::read(&meta).unwrap())
                    .unwrap()
                    .contains("\"c\"")
            );
            drop(lock);
            drop(store);
            let left: Vec<_> = fs::read_dir(root.join("nodes/coordinator"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(left.len(), 2, "spares are removed on drop: {left:?}");
            fs::remove_dir_all(&root).unwrap();
        }
    }

    /// `.weft/` moved out of the root while the spare thread waits to hand spares over: the
    /// thread never makes another spare in the moved directory (it compares its handle with
    /// the `.weft/` at the root's name before each), a spawn tries one spare of the moved
    /// directory at most (then builds its child without, and tells the thread to reopen), and
    /// the spares made later, in the `.weft/` the writer made again, are used.
    #[test]
    fn a_moved_staging_directory_is_never_filled_and_its_spares_not_drained() {
        let pid = std::process::id();
        let root = std::env::temp_dir().join(format!("weft-spare-moved-{pid}"));
        let outside = std::env::temp_dir().join(format!("weft-spare-moved-out-{pid}"));
        let _ = fs::remove_dir_all(&outside);
        fs::create_dir_all(&outside).unwrap();
        let (mut store, mut g) = writer_with_spares(&root, 4);
        let spawn = spawn_task;
        let full = |names: &[String], st: &SpareNodesStatus| {
            names.len() == 4 && st.made - st.used - st.vanished - st.discarded == 4
        };
        wait_for_spares(&store, &root, "four spares", full);
        let moved = outside.join("x");
        fs::rename(root.join(STAGING_DIR), &moved).unwrap();
        let in_moved = || fs::read_dir(&moved).unwrap().count();
        assert_eq!(in_moved(), 4);
        spawn(&mut g, &mut store, "a");
        // The four, and perhaps one the thread was handing over: counted, not tried.
        assert!(store.spare_nodes_status().unwrap().vanished <= 5);
        wait_for_spares(&store, &root, "made in the new .weft/", |names, _| {
            names.len() >= 3
        });
        let oldest = ident(&root.join(STAGING_DIR).join(&spares_in(&root)[0]));
        spawn(&mut g, &mut store, "b");
        assert_eq!(ident(&root.join("nodes/b")), oldest, "b is a new spare");
        spawn(&mut g, &mut store, "c");
        wait_for_spares(&store, &root, "four again", |names, _| names.len() == 4);
        assert_eq!(in_moved(), 4, "nothing more made outside the root");
        drop(store);
        assert_eq!(in_moved(), 4, "nothing outside the root touched on close");
        assert!(spares_in(&root).is_empty(), "removed on close");
        let (store, g, report) = reopened(&root);
        assert!(report.diagnostics.is_empty(), "{:?}", report.diagnostics);
        assert_eq!(g.node_ids().len(), 4);
        drop(store);
        fs::remove_dir_all(&root).unwrap();
        fs::remove_dir_all(&outside).unwrap();
    }

    /// A writer reaches a log it appends to once: later appends use the handle it kept, and
    /// one whose file was replaced behind its back appends to the file now at the path.
    #[test]
    fn a_writer_keeps_its_append_handles_and_reopens_a_replaced_log() {
        use weft_core::actors::{ActorGraph, HarnessConfig, NewLine};
        let root = std::env::temp_dir().join(format!("weft-appends-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let mut store = FsStore::open_writer(&root, Duration::ZERO).unwrap();
        let snap = store.load().unwrap();
        let at = weft_core::Wall::from_ms(1_000);
        let mut g = ActorGraph::init(HarnessConfig::default(), "t:", &snap, at, "t").unwrap();
        for b in g.take_batches() {
            let done = store.perform(&b).unwrap();
            g.ack(done).unwrap();
        }
        let say = |g: &mut ActorGraph, store: &mut FsStore, text: &str| {
            g.append(at, "coordinator", NewLine::user(text)).unwrap();
            let opens = store.opens();
            for b in g.take_batches() {
                let done = store.perform(&b).unwrap();
                g.ack(done).unwrap();
            }
            store.opens() - opens
        };
        say(&mut g, &mut store, "first");
        assert_eq!(say(&mut g, &mut store, "second"), 0, "the kept handle");
        assert_eq!(say(&mut g, &mut store, "third"), 0, "the kept handle");
        let chat = root.join("nodes/coordinator/chat.jsonl");
        let text = fs::read_to_string(&chat).unwrap();
        assert!(text.contains("second") && text.contains("third"), "{text}");
        // Replaced by a rename (as an editor saves): the old inode has no name left.
        let aside = root.join("chat.jsonl.edited");
        fs::write(&aside, &text).unwrap();
        fs::rename(&aside, &chat).unwrap();
        assert!(
            say(&mut g, &mut store, "fourth") > 0,
            "reopened by its path"
        );
        assert!(fs::read_to_string(&chat).unwrap().contains("fourth"));
        drop(store);
        fs::remove_dir_all(&root).unwrap();
    }
}

#[cfg(test)]
mod append_wall_tests {
    use super::*;
    use std::fs;
    use weft_core::actors::{ActorGraph, HarnessConfig, NewLine};

    fn writer(root: &std::path::Path) -> (FsStore, ActorGraph) {
        let _ = fs::remove_dir_all(root);
        let mut store = FsStore::open_writer(root, Duration::ZERO).unwrap();
        let snap = store.load().unwrap();
        let at = weft_core::Wall::from_ms(1_000);
        let mut g = ActorGraph::init(HarnessConfig::default(), "t:", &snap, at, "t").unwrap();
        for b in g.take_batches() {
            let done = store.perform(&b).unwrap();
            g.ack(done).unwrap();
        }
        (store, g)
    }

    fn say(g: &mut ActorGraph, store: &mut FsStore, text: &str) -> Result<(), ActorsError> {
        g.append(
            weft_core::Wall::from_ms(1_000),
            "coordinator",
            NewLine::user(text),
        )
        .unwrap();
        for b in g.take_batches() {
            let done = store.perform(&b)?;
            g.ack(done).unwrap();
        }
        Ok(())
    }

    /// A log moved aside and copied back (`mv chat.jsonl chat.jsonl~; cp chat.jsonl~
    /// chat.jsonl`) keeps a name, but not the path's: the next line goes to the file at the
    /// path, never to the one moved aside; a log given a second name (a hard link, perhaps
    /// from outside the root) is never written through it: a copy takes its place first.
    #[test]
    fn a_log_moved_aside_and_copied_back_gets_the_next_line_at_its_path() {
        let root = std::env::temp_dir().join(format!("weft-append-aside-{}", std::process::id()));
        let (mut store, mut g) = writer(&root);
        say(&mut g, &mut store, "first").unwrap();
        say(&mut g, &mut store, "second").unwrap();
        let chat = root.join("nodes/coordinator/chat.jsonl");
        let aside = root.join("nodes/coordinator/chat.jsonl~");
        fs::rename(&chat, &aside).unwrap();
        fs::copy(&aside, &chat).unwrap();
        let before = fs::read(&aside).unwrap();
        say(&mut g, &mut store, "third").unwrap();
        assert_eq!(
            fs::read(&aside).unwrap(),
            before,
            "the file moved aside is unchanged"
        );
        assert!(fs::read_to_string(&chat).unwrap().contains("third"));
        // A second name (hard link): the handle is not reused, the walls refuse to open the
        // log for writing, and a copy takes its place: the line lands at the path only.
        fs::remove_file(&aside).unwrap();
        let linked =
            std::env::temp_dir().join(format!("weft-append-linked-{}", std::process::id()));
        fs::hard_link(&chat, &linked).unwrap();
        let before = fs::read(&linked).unwrap();
        let opens = store.opens();
        say(&mut g, &mut store, "fourth").unwrap();
        assert!(store.opens() > opens, "reopened through the walls");
        assert_eq!(
            fs::read(&linked).unwrap(),
            before,
            "nothing written through it"
        );
        let now = fs::read_to_string(&chat).unwrap();
        assert!(now.starts_with(std::str::from_utf8(&before).unwrap()) && now.contains("fourth"));
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            fs::metadata(&chat).unwrap().nlink(),
            1,
            "the log has a name of its own"
        );
        drop(store);
        fs::remove_file(&linked).unwrap();
        fs::remove_dir_all(&root).unwrap();
    }

    /// A node directory moved out of the root with a link left in its place: the kept handle
    /// is not used (it would append outside the root); the append is refused like a fresh
    /// command's (`SYMLINK_REFUSED`) and the file outside is unchanged.
    #[test]
    fn a_node_moved_out_and_linked_back_is_refused_not_appended_to() {
        let root = std::env::temp_dir().join(format!("weft-append-out-{}", std::process::id()));
        let outside =
            std::env::temp_dir().join(format!("weft-append-outside-{}", std::process::id()));
        let _ = fs::remove_dir_all(&outside);
        fs::create_dir_all(&outside).unwrap();
        let (mut store, mut g) = writer(&root);
        say(&mut g, &mut store, "first").unwrap();
        say(&mut g, &mut store, "second").unwrap();
        let node = root.join("nodes/coordinator");
        let moved = outside.join("coordinator");
        fs::rename(&node, &moved).unwrap();
        std::os::unix::fs::symlink(&moved, &node).unwrap();
        let before = fs::read(moved.join("chat.jsonl")).unwrap();
        let e = say(&mut g, &mut store, "third").unwrap_err();
        assert!(matches!(e, ActorsError::SymlinkRefused(_)), "{e:?}");
        assert_eq!(fs::read(moved.join("chat.jsonl")).unwrap(), before);
        drop(store);
        fs::remove_dir_all(&root).unwrap();
        fs::remove_dir_all(&outside).unwrap();
    }
}

#[cfg(test)]
mod marks_tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    /// An exchange of the marks failing with anything but "cannot exchange here" (EBUSY) still
    /// writes the marks (a plain rename), and the next write exchanges again: the cache is not
    /// given up.
    #[test]
    fn a_failed_marks_exchange_falls_back_to_a_rename_and_is_tried_again() {
        let root = std::env::temp_dir().join(format!("weft-marks-fault-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let mut store = FsStore::open_writer(&root, Duration::ZERO).unwrap();
        store.write_marks("{\"v\":1,\"n\":1}").unwrap();
        store.write_marks("{\"v\":1,\"n\":2}").unwrap();
        let ino = |n: &str| fs::metadata(root.join(n)).unwrap().ino();
        store.marks_exchange_fault = Some(libc::EBUSY);
        store.write_marks("{\"v\":1,\"n\":3}").unwrap();
        assert_eq!(
            fs::read_to_string(root.join(MARKS_FILE)).unwrap(),
            "{\"v\":1,\"n\":3}"
        );
        assert!(store.exchange, "the exchange is not turned off");
        store.marks_exchange_fault = None;
        store.write_marks("{\"v\":1,\"n\":4}").unwrap();
        // Two files again, and the next write trades their places (an exchange).
        let (m, sp) = (ino(MARKS_FILE), ino(MARKS_SPARE));
        store.write_marks("{\"v\":1,\"n\":5}").unwrap();
        assert_eq!((ino(MARKS_FILE), ino(MARKS_SPARE)), (sp, m));
        assert_eq!(
            fs::read_to_string(root.join(MARKS_FILE)).unwrap(),
            "{\"v\":1,\"n\":5}"
        );
        drop(store);
        fs::remove_dir_all(&root).unwrap();
    }
}
