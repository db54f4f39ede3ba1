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
//! * `createNode`: build `nodes/.new,<batch>,<manifest>,<id>/` with its files (the manifest
//!   lists each file's length and a hash of its content), fsync them, the directory and
//!   `nodes/`, then rename it to `nodes/<id>` as the *next* stage begins; that stage's round
//!   fsyncs `nodes/`. A power loss can thus keep the next stage's ops without the rename: the
//!   pending directory is then whole (its stage was durable before the next one began), and
//!   opening as a writer renames it into place. A pending directory that is not whole was cut
//!   short in its own stage, which nothing durable names yet, and is removed. When the node is
//!   created by a batch's last stage (or its file names cannot be spelled in a manifest), it is
//!   renamed in its own stage, as before: the node appears whole or not at all;
//! * `truncate` / `rename`: fsync the file / the directory.
//!
//! A stage's fsyncs are issued concurrently (the file system commits them together), in at
//! most two rounds (new files and directories before their rename, then appends and the
//! directories that changed); a stage starts only when the previous one is durable. The
//! temporaries of every `put` are written and fsynced in the first stage's round — they are
//! invisible until moved into place, so this changes nothing a crash can expose. A spawn thus
//! takes three rounds: the child's files and the put temporaries; the child's rename, the
//! parent's record, `graph.json` and the routing marker; the metathread record.
//!
//! One writer at a time: a writer holds an exclusive lock on `$CHAT_ROOT/.weft-lock` (released
//! by the kernel when the process dies, so `kill -9` never leaves a stale lock). Readers hold
//! `.weft-readers` shared while they read; the writer overwrites a spare only when it can take
//! that lock for an instant (a reader may have opened the spare's inode as the record before the
//! exchange that retired it). Opening as a writer renames whole pending nodes into place and
//! removes every other temporary a crashed writer left behind; the core's recovery then
//! completes half-finished spawns.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weft_core::actors::store::{
    ActorStore, Op, Snapshot, WriteBatch, check_path, is_snapshot_path,
};
use weft_core::actors::{ActorsError, NodeId};

/// The lock file a writer holds.
pub const LOCK_FILE: &str = ".weft-lock";
/// The lock file readers hold shared while they read records; the writer overwrites a spare
/// temporary in place only when it can briefly take it exclusively (see the module documentation).
pub const READERS_FILE: &str = ".weft-readers";
const TMP_SUFFIX: &str = ".weft-tmp";
const NODE_TMP_PREFIX: &str = ".tmp-";
/// A node directory under construction whose name carries the manifest of its files (see
/// [`PendingNode`]).
const NODE_NEW_PREFIX: &str = ".new,";
/// The name under `nodes/` where the store builds node `id` of batch `batch` before renaming it
/// into place, or `None` when it builds it under a plain temporary name (see the module documentation).
/// Tests use it to lay out what a power loss can leave.
pub fn pending_node_dir(batch: u64, id: &str, files: &[(String, String)]) -> Option<String> {
    PendingNode::dir_name(batch, id, files)
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
    fn complete(&self, dir: &Path) -> bool {
        self.files.iter().all(|(name, len, hash)| {
            let Ok(f) = File::open(dir.join(name)) else {
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
    /// Rounds of concurrent fsyncs (each waits for the slowest of its fsyncs).
    pub rounds: AtomicU64,
    pub batches: AtomicU64,
    /// Nanoseconds spent in `apply` (writes, renames and the rounds).
    pub apply_ns: AtomicU64,
    /// Nanoseconds spent waiting for rounds, by the round's position within its batch (the
    /// last slot also counts every later round): where a batch's time goes.
    pub round_ns: [AtomicU64; 6],
    rounds_in_batch: AtomicU64,
}

/// Crash injection for tests: abort the process (no cleanup, like `kill -9`) at the n-th
/// durability step of this process, optionally after writing only half of an append.
#[derive(Clone, Copy, Debug)]
pub struct Failpoint {
    pub at_step: u64,
    pub tear: bool,
}

impl Failpoint {
    /// Reads `WEFT_ACTORS_CRASH_AT` (and `WEFT_ACTORS_CRASH_TEAR=1`); test use only.
    pub fn from_env() -> Option<Failpoint> {
        let at_step = std::env::var("WEFT_ACTORS_CRASH_AT").ok()?.parse().ok()?;
        let tear = std::env::var("WEFT_ACTORS_CRASH_TEAR").is_ok_and(|v| v == "1");
        Some(Failpoint { at_step, tear })
    }
}

/// A `$CHAT_ROOT` on disk.
pub struct FsStore {
    root: PathBuf,
    lock: Option<File>,
    pool: Option<SyncPool>,
    /// Fsyncs owed by prewritten temporaries, joined to the next stage's first round.
    pending_sync: Vec<SyncJob>,
    /// Node directories of the previous stage, built and durable under their pending names,
    /// to rename into place as the next stage begins.
    deferred: Vec<(PathBuf, PathBuf)>,
    /// The temporary each `put` of the batch in flight writes, by (stage, op).
    put_temps: BTreeMap<(usize, usize), PathBuf>,
    /// Spare temporaries, by the record they replace: `<record>.weft-tmp-spare`, holding the
    /// record's previous version after an exchange made durable by this process. The next
    /// `put` of that record overwrites the spare in place and exchanges it again, so a
    /// steady writer creates and frees no inodes for its records (on this project's VM an
    /// inode costs more than an fsync). Removed on drop; a crash leaves them to the next
    /// writer's open, which removes every temporary.
    spares: BTreeMap<PathBuf, PathBuf>,
    /// The writer's handle on [`READERS_FILE`].
    readers: Option<File>,
    /// Whether `renameat2(RENAME_EXCHANGE)` works here (Linux; turned off on the first
    /// refusal, after which puts create a temporary and rename it over the record).
    exchange: bool,
    pub stats: FsStats,
    failpoint: Option<Failpoint>,
    steps: u64,
}

fn io(what: impl std::fmt::Display, e: std::io::Error) -> ActorsError {
    ActorsError::StoreIo(format!("{what}: {e}"))
}

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Atomically exchanges two directory entries (`renameat2(RENAME_EXCHANGE)`): afterwards, and
/// after a crash, each name holds one of the two files, whole.
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let ca = std::ffi::CString::new(a.as_os_str().as_bytes())?;
    let cb = std::ffi::CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both pointers are NUL-terminated strings that outlive the call, which only
    // reads them.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// One fsync to perform: a file (its handle moves to the worker) or a directory (by path).
enum SyncJob {
    File(PathBuf, File),
    Dir(PathBuf),
}

impl SyncJob {
    fn run(self) -> Result<(), ActorsError> {
        match self {
            SyncJob::File(p, f) => f
                .sync_all()
                .map_err(|e| io(format!("fsync {}", p.display()), e)),
            SyncJob::Dir(d) => fsync_dir(&d).map_err(|e| io(format!("fsync {}", d.display()), e)),
        }
    }
}

type SyncReply = std::sync::mpsc::Sender<Result<(), ActorsError>>;

/// A small pool of threads that issue fsyncs concurrently, so that the file system commits a
/// stage's fsyncs together instead of one after another. Created once per store (spawning
/// threads per stage costs more than the fsyncs on a fast disk).
struct SyncPool {
    tx: Option<std::sync::mpsc::Sender<(SyncJob, SyncReply)>>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl SyncPool {
    const THREADS: usize = 7;

    fn new() -> SyncPool {
        let (tx, rx) = std::sync::mpsc::channel::<(SyncJob, SyncReply)>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let workers = (0..Self::THREADS)
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("weft-fsync-{i}"))
                    .spawn(move || {
                        loop {
                            let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                            let Ok((job, reply)) = job else { break };
                            let _ = reply.send(job.run());
                        }
                    })
                    .expect("fsync thread")
            })
            .collect();
        SyncPool {
            tx: Some(tx),
            workers,
        }
    }

    /// Runs every job, concurrently, and returns the first error.
    fn run(&self, mut jobs: Vec<SyncJob>, stats: &FsStats) -> Result<(), ActorsError> {
        stats.fsyncs.fetch_add(jobs.len() as u64, Ordering::Relaxed);
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

    fn run_round(&self, mine: SyncJob, jobs: Vec<SyncJob>) -> Result<(), ActorsError> {
        let (reply, results) = std::sync::mpsc::channel();
        let n = jobs.len();
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

impl Drop for SyncPool {
    fn drop(&mut self) {
        self.tx.take();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl FsStore {
    /// Opens `root` for reading only (no lock; what a concurrent writer is doing may show as a
    /// torn last line, which the core reports).
    pub fn open_reader(root: &Path) -> Result<FsStore, ActorsError> {
        if !root.is_dir() {
            return Err(ActorsError::NotInitialized);
        }
        Ok(FsStore {
            root: root.to_owned(),
            lock: None,
            pool: None,
            pending_sync: Vec::new(),
            deferred: Vec::new(),
            put_temps: BTreeMap::new(),
            spares: BTreeMap::new(),
            exchange: cfg!(target_os = "linux"),
            readers: None,
            stats: FsStats::default(),
            failpoint: None,
            steps: 0,
        })
    }

    /// Opens `root` as its one writer, creating the directory if needed. Waits up to `wait`
    /// for another writer to finish (`STORE_LOCKED` after that), then removes temporaries a
    /// crashed writer left.
    pub fn open_writer(root: &Path, wait: Duration) -> Result<FsStore, ActorsError> {
        fs::create_dir_all(root).map_err(|e| io(format!("create {}", root.display()), e))?;
        let path = root.join(LOCK_FILE);
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io(format!("open {}", path.display()), e))?;
        let start = Instant::now();
        loop {
            match f.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) => {
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
                Err(fs::TryLockError::Error(e)) => {
                    return Err(io(format!("lock {}", path.display()), e));
                }
            }
        }
        let me = format!(
            "pid {} ({})",
            std::process::id(),
            std::env::args().take(3).collect::<Vec<_>>().join(" ")
        );
        let _ = f.set_len(0).and_then(|_| (&f).write_all(me.as_bytes()));
        let readers = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(root.join(READERS_FILE))
            .map_err(|e| io(format!("open {}", root.join(READERS_FILE).display()), e))?;
        let mut s = FsStore {
            root: root.to_owned(),
            lock: Some(f),
            pool: Some(SyncPool::new()),
            pending_sync: Vec::new(),
            deferred: Vec::new(),
            put_temps: BTreeMap::new(),
            spares: BTreeMap::new(),
            exchange: cfg!(target_os = "linux"),
            readers: Some(readers),
            stats: FsStats::default(),
            failpoint: None,
            steps: 0,
        };
        s.clean_temporaries()?;
        Ok(s)
    }

    /// Arms a crash failpoint (tests).
    pub fn set_failpoint(&mut self, f: Option<Failpoint>) {
        self.failpoint = f;
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The address prefix recorded in node records: the root's absolute path.
    pub fn address(&self) -> String {
        let p = fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        p.to_string_lossy().into_owned()
    }

    /// Whether this store holds the writer lock.
    pub fn is_writer(&self) -> bool {
        self.lock.is_some()
    }

    fn clean_temporaries(&mut self) -> Result<(), ActorsError> {
        let nodes = self.root.join("nodes");
        let mut removed = false;
        if let Ok(rd) = fs::read_dir(&nodes) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(NODE_NEW_PREFIX) {
                    // A node built in a stage whose rename into place was deferred to the next
                    // stage: if every file is whole, the stage was durable before the next one
                    // began (which may have left records naming the node), so it is renamed
                    // into place; otherwise that stage never completed, nothing names the node,
                    // and it is removed.
                    let dest = PendingNode::parse(&name)
                        .filter(|p| p.complete(&e.path()))
                        .map(|p| nodes.join(p.id))
                        .filter(|d| !d.exists());
                    match dest {
                        Some(d) => fs::rename(e.path(), &d).map_err(|er| {
                            io(
                                format!("rename {} → {}", e.path().display(), d.display()),
                                er,
                            )
                        })?,
                        None => fs::remove_dir_all(e.path())
                            .map_err(|er| io(format!("remove {}", e.path().display()), er))?,
                    }
                    removed = true;
                } else if name.starts_with(NODE_TMP_PREFIX) {
                    fs::remove_dir_all(e.path())
                        .map_err(|er| io(format!("remove {}", e.path().display()), er))?;
                    removed = true;
                }
            }
        }
        for p in self.walk()? {
            if p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(TMP_SUFFIX))
            {
                fs::remove_file(&p).map_err(|e| io(format!("remove {}", p.display()), e))?;
                removed = true;
            }
        }
        if removed && nodes.is_dir() {
            self.sync(vec![SyncJob::Dir(nodes)])?;
        }
        Ok(())
    }

    /// Every regular file under the root (relative paths use `/`), skipping `nodes/.tmp-*`.
    fn walk(&self) -> Result<Vec<PathBuf>, ActorsError> {
        let mut out = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(d) = stack.pop() {
            let rd = match fs::read_dir(&d) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(format!("read {}", d.display()), e)),
            };
            for e in rd.flatten() {
                let ft = match e.file_type() {
                    Ok(t) => t,
                    Err(_) => continue,
                };
                if ft.is_dir() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if d.ends_with("nodes")
                        && (name.starts_with(NODE_TMP_PREFIX) || name.starts_with(NODE_NEW_PREFIX))
                    {
                        continue;
                    }
                    stack.push(e.path());
                } else if ft.is_file() {
                    out.push(e.path());
                }
            }
        }
        Ok(out)
    }

    fn rel(&self, p: &Path) -> Option<String> {
        let r = p.strip_prefix(&self.root).ok()?;
        let parts: Vec<String> = r
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        Some(parts.join("/"))
    }

    fn path(&self, rel: &str) -> Result<PathBuf, ActorsError> {
        check_path(rel).map_err(ActorsError::InvalidArgument)?;
        Ok(rel.split('/').fold(self.root.clone(), |p, c| p.join(c)))
    }

    /// Counts a durability step and crashes here when the failpoint says so.
    fn step(&mut self) {
        self.steps += 1;
        if let Some(f) = self.failpoint
            && f.at_step == self.steps
        {
            std::process::abort();
        }
    }

    fn tear_now(&self) -> bool {
        self.failpoint
            .is_some_and(|f| f.tear && f.at_step == self.steps + 1)
    }

    fn sync(&self, jobs: Vec<SyncJob>) -> Result<(), ActorsError> {
        self.pool
            .as_ref()
            .expect("writers have a pool")
            .run(jobs, &self.stats)
    }

    /// Creates the missing directories of `dir` (and notes each new one's parent for fsync).
    fn ensure_dir(&self, dir: &Path, dirty: &mut BTreeSet<PathBuf>) -> Result<(), ActorsError> {
        let mut missing = Vec::new();
        let mut d = dir.to_owned();
        while !d.is_dir() {
            missing.push(d.clone());
            match d.parent() {
                Some(p) => d = p.to_owned(),
                None => break,
            }
        }
        for m in missing.iter().rev() {
            match fs::create_dir(m) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(format!("create {}", m.display()), e)),
            }
            if let Some(p) = m.parent() {
                dirty.insert(p.to_owned());
            }
            dirty.insert(m.clone());
        }
        Ok(())
    }

    fn write_new(path: &Path, text: &str) -> Result<File, ActorsError> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| io(format!("create {}", path.display()), e))?;
        f.write_all(text.as_bytes())
            .map_err(|e| io(format!("write {}", path.display()), e))?;
        Ok(f)
    }

    /// Writes the temporary files of every `put` of the batch up front: they are invisible
    /// until renamed, so their fsyncs can join the first stage's round. A record with a spare
    /// temporary (see `FsStore::spares`) has it overwritten in place; otherwise the
    /// temporary is created, under the spare's name when no other put of the batch uses it.
    fn prewrite_puts(
        &mut self,
        batch: &WriteBatch,
        dirty: &mut BTreeSet<PathBuf>,
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
                    let dest = self.path(path)?;
                    let parent = dest.parent().expect("under root").to_owned();
                    self.ensure_dir(&parent, dirty)?;
                    let spare = Self::spare_path(&dest);
                    let tmp = if used.insert(spare.clone()) {
                        spare
                    } else {
                        PathBuf::from(format!(
                            "{}{TMP_SUFFIX}-{}-{si}-{oi}",
                            dest.display(),
                            batch.id
                        ))
                    };
                    self.step();
                    let f = match self.spares.remove(&dest) {
                        Some(s) if s == tmp && quiet => Self::overwrite(&tmp, text)?,
                        _ => Self::write_fresh(&tmp, text)?,
                    };
                    files.push(SyncJob::File(tmp.clone(), f));
                    self.put_temps.insert((si, oi), tmp);
                }
            }
        }
        self.pending_sync = files;
        Ok(())
    }

    /// The temporary a put of `dest` writes, which becomes its spare.
    fn spare_path(dest: &Path) -> PathBuf {
        PathBuf::from(format!("{}{TMP_SUFFIX}-spare", dest.display()))
    }

    /// Writes `text` to a new inode at `path` (unlinking what was there: a stale spare may be
    /// open in a reader).
    fn write_fresh(path: &Path, text: &str) -> Result<File, ActorsError> {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(format!("remove {}", path.display()), e)),
        }
        Self::write_new(path, text)
    }

    /// Rewrites an existing file in place (no new inode): the whole `text` from offset 0, then
    /// the length.
    fn overwrite(path: &Path, text: &str) -> Result<File, ActorsError> {
        let mut f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| io(format!("open {}", path.display()), e))?;
        f.write_all(text.as_bytes())
            .and_then(|_| f.set_len(text.len() as u64))
            .map_err(|e| io(format!("write {}", path.display()), e))?;
        Ok(f)
    }

    /// Moves a put's temporary into place: exchanges it with the record when the record exists
    /// (the previous version stays behind as the spare, returned), renames it otherwise.
    fn replace(&mut self, tmp: &Path, dest: &Path) -> Result<Option<PathBuf>, ActorsError> {
        let spare_name = *tmp == Self::spare_path(dest);
        if self.exchange && spare_name && dest.exists() {
            match exchange(tmp, dest) {
                Ok(()) => return Ok(Some(tmp.to_owned())),
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::Unsupported)
                        || matches!(e.raw_os_error(), Some(22 | 38 | 95)) =>
                {
                    // EINVAL, ENOSYS, EOPNOTSUPP: this file system cannot exchange.
                    self.exchange = false;
                }
                Err(e) => {
                    return Err(io(
                        format!("exchange {} ↔ {}", tmp.display(), dest.display()),
                        e,
                    ));
                }
            }
        }
        fs::rename(tmp, dest)
            .map_err(|e| io(format!("rename {} → {}", tmp.display(), dest.display()), e))?;
        Ok(None)
    }

    /// One stage: write what it creates or appends, fsync new files and directories (with the
    /// prewritten put temporaries on the first stage), rename into place, then fsync the
    /// appends and every directory that changed — all in at most two concurrent rounds.
    fn apply_stage(
        &mut self,
        batch: &WriteBatch,
        si: usize,
        dirty: &mut BTreeSet<PathBuf>,
    ) -> Result<(), ActorsError> {
        let mut first: Vec<SyncJob> = std::mem::take(&mut self.pending_sync);
        let mut second: Vec<SyncJob> = Vec::new();
        // (from, to, whether it is a put's temporary), in op order.
        let mut renames: Vec<(PathBuf, PathBuf, bool)> = Vec::new();
        // The previous stage's nodes move into place before this stage writes anything (so a
        // killed process never leaves this stage's effects without them); the rename becomes
        // durable in this stage's last round, and until then recovery completes it (see
        // `clean_temporaries`).
        for (tmp, dest) in std::mem::take(&mut self.deferred) {
            if dest.exists() {
                return Err(ActorsError::StoreIo(format!(
                    "{} already exists",
                    dest.display()
                )));
            }
            self.step();
            fs::rename(&tmp, &dest)
                .map_err(|e| io(format!("rename {} → {}", tmp.display(), dest.display()), e))?;
            dirty.insert(dest.parent().expect("under root").to_owned());
        }
        let last = si + 1 == batch.stages.len();
        for (oi, op) in batch.stages[si].iter().enumerate() {
            match op {
                Op::CreateNode { id, files: init } => {
                    NodeId::parse(id).map_err(|why| {
                        ActorsError::InvalidArgument(format!("node id {id:?} {why}"))
                    })?;
                    let nodes = self.root.join("nodes");
                    self.ensure_dir(&nodes, dirty)?;
                    let dest = nodes.join(id);
                    if dest.exists() {
                        return Err(ActorsError::StoreIo(format!(
                            "{} already exists",
                            dest.display()
                        )));
                    }
                    // Named with its manifest when possible: then its rename into place can
                    // wait for the next stage's round (one round fewer per stage that creates
                    // nodes), because recovery can tell a whole directory from a torn one.
                    let pending = PendingNode::dir_name(batch.id, id, init);
                    let defer = pending.is_some() && !last;
                    let tmp = nodes.join(
                        pending.unwrap_or_else(|| format!("{NODE_TMP_PREFIX}{id}-{}", batch.id)),
                    );
                    if tmp.exists() {
                        fs::remove_dir_all(&tmp)
                            .map_err(|e| io(format!("remove {}", tmp.display()), e))?;
                    }
                    fs::create_dir(&tmp).map_err(|e| io(format!("create {}", tmp.display()), e))?;
                    for (name, text) in init {
                        check_path(name).map_err(ActorsError::InvalidArgument)?;
                        let p = name.split('/').fold(tmp.clone(), |p, c| p.join(c));
                        if let Some(parent) = p.parent()
                            && parent != tmp
                        {
                            fs::create_dir_all(parent)
                                .map_err(|e| io(format!("create {}", parent.display()), e))?;
                            first.push(SyncJob::Dir(parent.to_owned()));
                        }
                        self.step();
                        first.push(SyncJob::File(p.clone(), Self::write_new(&p, text)?));
                    }
                    first.push(SyncJob::Dir(tmp.clone()));
                    if defer {
                        // The pending directory's entry must be durable before the next stage
                        // begins: this stage's only round covers it.
                        first.push(SyncJob::Dir(nodes));
                        self.deferred.push((tmp, dest));
                    } else {
                        renames.push((tmp, dest, false));
                        dirty.insert(nodes);
                    }
                }
                Op::Put { path, .. } => {
                    let dest = self.path(path)?;
                    let tmp = self.put_temps.remove(&(si, oi)).ok_or_else(|| {
                        ActorsError::StoreIo(format!("no temporary was written for {path}"))
                    })?;
                    dirty.insert(dest.parent().expect("under root").to_owned());
                    renames.push((tmp, dest, true));
                }
                Op::Append { path, text } => {
                    let dest = self.path(path)?;
                    let parent = dest.parent().expect("under root").to_owned();
                    self.ensure_dir(&parent, dirty)?;
                    if !dest.exists() {
                        dirty.insert(parent);
                    }
                    let mut f = OpenOptions::new()
                        .append(true)
                        .create(true)
                        .open(&dest)
                        .map_err(|e| io(format!("open {}", dest.display()), e))?;
                    let bytes = text.as_bytes();
                    if self.tear_now() {
                        let _ = f.write_all(&bytes[..bytes.len() / 2]);
                    }
                    self.step();
                    f.write_all(bytes)
                        .map_err(|e| io(format!("append {}", dest.display()), e))?;
                    second.push(SyncJob::File(dest, f));
                }
                Op::Truncate { path, len } => {
                    let dest = self.path(path)?;
                    let f = OpenOptions::new()
                        .write(true)
                        .open(&dest)
                        .map_err(|e| io(format!("open {}", dest.display()), e))?;
                    self.step();
                    f.set_len(*len)
                        .map_err(|e| io(format!("truncate {}", dest.display()), e))?;
                    second.push(SyncJob::File(dest, f));
                }
                Op::Rename { from, to } => {
                    let (a, b) = (self.path(from)?, self.path(to)?);
                    if a.exists() {
                        renames.push((a, b.clone(), false));
                        dirty.insert(b.parent().expect("under root").to_owned());
                    }
                }
            }
        }
        if !first.is_empty() {
            self.step();
            self.sync(first)?;
        }
        let mut spares = Vec::new();
        for (a, b, put) in renames {
            self.step();
            if put {
                if let Some(s) = self.replace(&a, &b)? {
                    spares.push((b, s));
                }
            } else {
                fs::rename(&a, &b)
                    .map_err(|e| io(format!("rename {} → {}", a.display(), b.display()), e))?;
            }
        }
        second.extend(std::mem::take(dirty).into_iter().map(SyncJob::Dir));
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
        for s in self.spares.values() {
            let _ = fs::remove_file(s);
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
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(self.root.join(READERS_FILE))
                .or_else(|_| File::open(self.root.join(READERS_FILE)))
                .ok()
                .filter(|f| f.lock_shared().is_ok())
        } else {
            None
        };
        let out = self.read_snapshot();
        if let Some(f) = shared {
            let _ = f.unlock();
        }
        out
    }

    fn apply(&mut self, batch: &WriteBatch) -> Result<(), ActorsError> {
        if self.lock.is_none() {
            return Err(ActorsError::InvalidArgument(
                "the store was opened read-only".into(),
            ));
        }
        let start = Instant::now();
        self.stats.rounds_in_batch.store(0, Ordering::Relaxed);
        let out = self.apply_batch(batch);
        self.stats
            .apply_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        out
    }
}

impl FsStore {
    /// Reads every snapshot file (see [`is_snapshot_path`]).
    fn read_snapshot(&mut self) -> Result<Snapshot, ActorsError> {
        let mut snap = Snapshot::default();
        let nodes = self.root.join("nodes");
        let mut pending = Vec::new();
        if let Ok(rd) = fs::read_dir(&nodes) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if !name.starts_with('.') {
                    snap.dirs.push(format!("nodes/{name}"));
                } else if let Some(p) = PendingNode::parse(&name) {
                    pending.push((e.path(), p));
                }
            }
        }
        // A reader that opens a root after a power loss, before a writer has: a whole pending
        // node is read as the node it becomes (what the writer's open will rename into place).
        for (dir, p) in pending {
            if nodes.join(&p.id).exists() || !p.complete(&dir) {
                continue;
            }
            snap.dirs.push(format!("nodes/{}", p.id));
            for (name, _, _) in &p.files {
                let rel = format!("nodes/{}/{name}", p.id);
                if is_snapshot_path(&rel)
                    && let Ok(bytes) = fs::read(dir.join(name))
                {
                    snap.files.insert(rel, bytes);
                }
            }
        }
        snap.dirs.sort();
        for p in self.walk()? {
            let Some(rel) = self.rel(&p) else { continue };
            if !is_snapshot_path(&rel) {
                continue;
            }
            let bytes = fs::read(&p).map_err(|e| io(format!("read {}", p.display()), e))?;
            snap.files.insert(rel, bytes);
        }
        Ok(snap)
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
                // A pending node stays under its manifest name; the next open renames it into
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

/// Measures the raw rate of this disk: `n` appends of `bytes` bytes, each followed by an
/// fsync (`sync_all`, the call the store makes), in a file under `dir`. Returns writes per
/// second (the physical limit benchmarks compare against).
pub fn raw_fsync_rate(dir: &Path, n: usize, bytes: usize) -> std::io::Result<f64> {
    let p = dir.join(".weft-fsync-probe");
    let mut f = OpenOptions::new().create(true).append(true).open(&p)?;
    let line = vec![b'x'; bytes];
    let start = Instant::now();
    for _ in 0..n {
        f.write_all(&line)?;
        f.sync_all()?;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    drop(f);
    fs::remove_file(&p)?;
    Ok(rate)
}

/// Measures how fast this disk makes new small files durable: `n` times create a file under
/// `dir`, write `bytes` bytes, fsync it. (A new inode costs the file system a metadata commit,
/// which an append to an existing file does not.) Returns files per second.
pub fn raw_create_rate(dir: &Path, n: usize, bytes: usize) -> std::io::Result<f64> {
    let probe = dir.join(".weft-create-probe");
    fs::create_dir_all(&probe)?;
    let data = vec![b'x'; bytes];
    let start = Instant::now();
    for i in 0..n {
        let mut f = File::create(probe.join(i.to_string()))?;
        f.write_all(&data)?;
        f.sync_all()?;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    fs::remove_dir_all(&probe)?;
    Ok(rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<(String, String)> {
        vec![
            ("meta.json".into(), "{\"id\": \"a,b+c=d\"}\n".into()),
            ("chat.jsonl".into(), "{\"role\":\"system\"}\n".into()),
        ]
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
        assert!(p.complete(&dir));
        // A later stage may append to a file: its first bytes still prove the file whole.
        let mut chat = OpenOptions::new()
            .append(true)
            .open(dir.join("chat.jsonl"))
            .unwrap();
        chat.write_all(b"{\"role\":\"user\"}\n").unwrap();
        assert!(p.complete(&dir));
        fs::write(dir.join("chat.jsonl"), &f[1].1[..5]).unwrap();
        assert!(!p.complete(&dir), "torn");
        fs::write(dir.join("chat.jsonl"), vec![0u8; f[1].1.len()]).unwrap();
        assert!(!p.complete(&dir), "zero-filled");
        fs::write(dir.join("chat.jsonl"), &f[1].1).unwrap();
        fs::remove_file(dir.join("meta.json")).unwrap();
        assert!(!p.complete(&dir), "missing");
        fs::remove_dir_all(&dir).unwrap();
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
            let mut g =
                ActorGraph::init(HarnessConfig::default(), "t:", &snap, 1_000, "t").unwrap();
            for b in g.take_batches() {
                store.apply(&b).unwrap();
                g.ack(b.id).unwrap();
            }
            let spawn = |g: &mut ActorGraph, store: &mut FsStore, id: &str| {
                let mut r = SpawnRequest::new("coordinator", NodeType::Task);
                r.id = Some(id.into());
                g.spawn(2_000, r).unwrap();
                for b in g.take_batches() {
                    store.apply(&b).unwrap();
                    g.ack(b.id).unwrap();
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
}
