//! The filesystem store of `$CHAT_ROOT`: the native side of the core's storage seam.
//!
//! Durability, per op of a [`WriteBatch`] stage:
//! * `put` (JSON records): write `<path>.weft-tmp`, fsync it, rename over `<path>`, fsync the
//!   directory;
//! * `append` (JSONL logs): one `write` of whole lines, then fsync (a new log also fsyncs its
//!   directory);
//! * `createNode`: build `nodes/.tmp-<id>-<batch>/` with its files, fsync them and the
//!   directory, rename it to `nodes/<id>`, fsync `nodes/` — the node appears whole or not at all;
//! * `truncate` / `rename`: fsync the file / the directory.
//!
//! A stage's fsyncs are issued concurrently (the file system commits them together), in at
//! most two rounds (new files and directories before their rename, then appends and the
//! directories that changed); a stage starts only when the previous one is durable. The
//! temporaries of every `put` are written and fsynced in the first stage's round — they are
//! invisible until renamed, so this changes nothing a crash can expose. One writer at a time: a writer holds an
//! exclusive lock on `$CHAT_ROOT/.weft-lock` (released by the kernel when the process dies, so
//! `kill -9` never leaves a stale lock). Opening as a writer removes temporaries a crashed
//! writer left behind; the core's recovery then completes half-finished spawns.

use std::collections::BTreeSet;
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
const TMP_SUFFIX: &str = ".weft-tmp";
const NODE_TMP_PREFIX: &str = ".tmp-";

/// Counters of what the store did (benchmarks report fsyncs per operation).
#[derive(Debug, Default)]
pub struct FsStats {
    pub fsyncs: AtomicU64,
    /// Rounds of concurrent fsyncs (each waits for the slowest of its fsyncs).
    pub rounds: AtomicU64,
    pub batches: AtomicU64,
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
        let mut s = FsStore {
            root: root.to_owned(),
            lock: Some(f),
            pool: Some(SyncPool::new()),
            pending_sync: Vec::new(),
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
                if name.starts_with(NODE_TMP_PREFIX) {
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
                    if d.ends_with("nodes")
                        && e.file_name().to_string_lossy().starts_with(NODE_TMP_PREFIX)
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
    /// until renamed, so their fsyncs can join the first stage's round.
    fn prewrite_puts(
        &mut self,
        batch: &WriteBatch,
        dirty: &mut BTreeSet<PathBuf>,
    ) -> Result<Vec<PathBuf>, ActorsError> {
        let mut temps = Vec::new();
        let mut files = Vec::new();
        for (si, ops) in batch.stages.iter().enumerate() {
            for (oi, op) in ops.iter().enumerate() {
                if let Op::Put { path, text } = op {
                    let dest = self.path(path)?;
                    let parent = dest.parent().expect("under root").to_owned();
                    self.ensure_dir(&parent, dirty)?;
                    let tmp = PathBuf::from(format!(
                        "{}{TMP_SUFFIX}-{}-{si}-{oi}",
                        dest.display(),
                        batch.id
                    ));
                    self.step();
                    files.push(SyncJob::File(tmp.clone(), Self::write_new(&tmp, text)?));
                    temps.push(tmp);
                }
            }
        }
        self.pending_sync = files;
        Ok(temps)
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
        let mut renames: Vec<(PathBuf, PathBuf)> = Vec::new();
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
                    let tmp = nodes.join(format!("{NODE_TMP_PREFIX}{id}-{}", batch.id));
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
                    renames.push((tmp, dest));
                    dirty.insert(nodes);
                }
                Op::Put { path, .. } => {
                    let dest = self.path(path)?;
                    let tmp = PathBuf::from(format!(
                        "{}{TMP_SUFFIX}-{}-{si}-{oi}",
                        dest.display(),
                        batch.id
                    ));
                    dirty.insert(dest.parent().expect("under root").to_owned());
                    renames.push((tmp, dest));
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
                        renames.push((a, b.clone()));
                        dirty.insert(b.parent().expect("under root").to_owned());
                    }
                }
            }
        }
        if !first.is_empty() {
            self.step();
            self.sync(first)?;
        }
        for (a, b) in &renames {
            self.step();
            fs::rename(a, b)
                .map_err(|e| io(format!("rename {} → {}", a.display(), b.display()), e))?;
        }
        self.step();
        second.extend(std::mem::take(dirty).into_iter().map(SyncJob::Dir));
        self.sync(second)?;
        Ok(())
    }
}

impl ActorStore for FsStore {
    type Error = ActorsError;

    fn load(&mut self) -> Result<Snapshot, ActorsError> {
        let mut snap = Snapshot::default();
        if let Ok(rd) = fs::read_dir(self.root.join("nodes")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.file_type().is_ok_and(|t| t.is_dir()) && !name.starts_with('.') {
                    snap.dirs.push(format!("nodes/{name}"));
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

    fn apply(&mut self, batch: &WriteBatch) -> Result<(), ActorsError> {
        if self.lock.is_none() {
            return Err(ActorsError::InvalidArgument(
                "the store was opened read-only".into(),
            ));
        }
        let mut dirty = BTreeSet::new();
        if let Err(e) = self.prewrite_puts(batch, &mut dirty) {
            self.pending_sync.clear();
            return Err(e);
        }
        for si in 0..batch.stages.len() {
            if let Err(e) = self.apply_stage(batch, si, &mut dirty) {
                self.pending_sync.clear();
                return Err(e);
            }
        }
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
