//! The stores behind `weft serve`: a durable `(namespace, kind, key) -> value` table.
//! [`Store`] is the seam: the embedded SQLite store ([`SqliteStore`], the default) or
//! PostgreSQL ([`super::pg::PgStore`], `--store postgres://…`, several instances on one
//! database), by enum dispatch.
//!
//! The SQLite store is written by one thread with group commit, in the order batches are
//! submitted.
//!
//! Durability contract. Settings: WAL journal, `synchronous=FULL` (each group-commit
//! transaction is fsynced), checkpoints on their own connection and thread (never inside a
//! commit). Every batch that persists something a later request may name (a frame, an
//! assessment, a commit's state change, receipt and idempotency record, a policy change) is
//! answered only once it is fsynced ([`SqliteStore::write`]); concurrent batches share one fsync
//! (group commit), in the order they were submitted. Batches of retention deletions are
//! queued in the same order and not waited for ([`SqliteStore::background`]). Reads wait for
//! every earlier answered batch ([`SqliteStore::barrier`]), so no answer is ahead of durable state.
//!
//! A put with an empty value deletes its record. The WAL stays bounded while running: a
//! passive checkpoint every 200 ms, and a truncating one whenever the WAL file passes its
//! limit (`journal_size_limit` caps what a reset leaves behind).
//!
//! Point reads, scans and blob reads use a second, read-only connection.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use rusqlite::{Connection, OpenFlags, params};

/// One write: insert or replace `(ns, kind, key)`.
#[derive(Debug, Clone)]
pub struct Put {
    pub ns: &'static str,
    pub kind: &'static str,
    pub key: String,
    pub value: Vec<u8>,
}

type Reply = tokio::sync::oneshot::Sender<Result<(), String>>;

enum Job {
    /// Persist these records (an empty value deletes); report once durable, or not at all.
    Write {
        puts: Vec<Put>,
        effect: Option<u64>,
        done: Option<Reply>,
    },
    /// Report once everything queued before is durable.
    Barrier(Reply),
}

/// A claim on durability: resolves once what it covers is fsynced.
pub struct Ticket(Result<Option<tokio::sync::oneshot::Receiver<Result<(), String>>>, String>);

impl Ticket {
    /// A ticket resolved by `rx` (`None`: already durable), or failed with `Err`.
    pub(super) fn new(
        rx: Result<Option<tokio::sync::oneshot::Receiver<Result<(), String>>>, String>,
    ) -> Ticket {
        Ticket(rx)
    }

    /// Waits until what the ticket covers is durable.
    pub async fn durable(self) -> Result<(), String> {
        match self.0 {
            Ok(None) => Ok(()),
            Ok(Some(rx)) => rx
                .await
                .unwrap_or_else(|_| Err("the store writer stopped".into())),
            Err(e) => Err(e),
        }
    }
}

/// The store of `weft serve`: SQLite (embedded, one process) or PostgreSQL (several
/// instances on one database).
pub enum Store {
    Sqlite(Arc<SqliteStore>),
    Postgres(Arc<super::pg::PgStore>),
}

impl Store {
    /// Every record of these kinds of a namespace.
    pub async fn load_kinds(
        &self,
        ns: &str,
        kinds: &[&str],
    ) -> Result<Vec<(String, String, Vec<u8>)>, String> {
        match self {
            Store::Sqlite(s) => s.load_kinds(ns, kinds),
            Store::Postgres(p) => p.load_kinds(ns, kinds).await,
        }
    }

    /// One record's value.
    pub async fn get(&self, ns: &str, kind: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        match self {
            Store::Sqlite(s) => s.get(ns, kind, key),
            Store::Postgres(p) => p.get(ns, kind, key).await,
        }
    }

    /// Up to `limit` records of `(ns, kind)` with keys after `after`, in key (byte) order.
    pub async fn scan(
        &self,
        ns: &'static str,
        kind: &'static str,
        after: String,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, String> {
        match self {
            Store::Sqlite(s) => {
                let s = s.clone();
                tokio::task::spawn_blocking(move || s.scan(ns, kind, &after, limit))
                    .await
                    .map_err(|e| e.to_string())?
            }
            Store::Postgres(p) => p.scan(ns, kind, &after, limit).await,
        }
    }

    /// Queues a batch whose answer waits until it is durable.
    pub fn write(&self, puts: Vec<Put>) -> Ticket {
        match self {
            Store::Sqlite(s) => s.write(puts),
            Store::Postgres(p) => p.write(puts),
        }
    }

    /// A ticket for "every batch queued so far is durable" (for reads).
    pub fn barrier(&self) -> Ticket {
        match self {
            Store::Sqlite(s) => s.barrier(),
            Store::Postgres(p) => p.barrier(),
        }
    }

    /// Queues a batch nobody waits for (retention deletions).
    pub fn background(&self, puts: Vec<Put>) {
        match self {
            Store::Sqlite(s) => s.background(puts),
            Store::Postgres(p) => p.background(puts),
        }
    }

    /// The failure that stopped the writer, if any (the server must then refuse work).
    pub fn failure(&self) -> Option<String> {
        match self {
            Store::Sqlite(s) => s.failure(),
            Store::Postgres(p) => p.failure(),
        }
    }

    /// Flushes every queued batch and stops the writer.
    pub async fn close(&self) {
        match self {
            Store::Sqlite(s) => s.close(),
            Store::Postgres(p) => p.close().await,
        }
    }

    /// The PostgreSQL store, if this is one.
    pub fn postgres(&self) -> Option<&Arc<super::pg::PgStore>> {
        match self {
            Store::Sqlite(_) => None,
            Store::Postgres(p) => Some(p),
        }
    }

    /// The durability line of `weft serve`'s banner.
    pub fn durability(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => DURABILITY,
            Store::Postgres(_) => super::pg::DURABILITY,
        }
    }
}

/// The SQLite store (the embedded default).
pub struct SqliteStore {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    /// Sequence numbers of effect batches: the last one queued, and the last one durable.
    effect_seq: AtomicU64,
    durable_seq: tokio::sync::watch::Receiver<u64>,
    /// Effect batches queued and not yet committed.
    pending_effects: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
    reader: Mutex<Connection>,
    writer: Mutex<Option<thread::JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
}

/// The durability settings, as `weft serve` and the benchmark report them.
pub const DURABILITY: &str = "SQLite WAL, synchronous=FULL, group commit: frames, assessments and commits are answered once fsynced; WAL checkpointed and truncated past 64 MiB";

/// The WAL size past which the checkpointer truncates it.
pub const WAL_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

fn configure(c: &Connection) -> rusqlite::Result<()> {
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}

impl SqliteStore {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<Arc<SqliteStore>, String> {
        SqliteStore::open_with_wal_limit(path, WAL_LIMIT_BYTES)
    }

    /// [`SqliteStore::open`] with another WAL limit (tests use a small one).
    pub fn open_with_wal_limit(path: &Path, wal_limit: u64) -> Result<Arc<SqliteStore>, String> {
        let err = |e: rusqlite::Error| format!("{}: {e}", path.display());
        let w = Connection::open(path).map_err(err)?;
        configure(&w).map_err(err)?;
        w.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(err)?;
        w.pragma_update(None, "journal_size_limit", wal_limit as i64)
            .map_err(err)?;
        w.execute_batch(
            "CREATE TABLE IF NOT EXISTS records(
                ns TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
                PRIMARY KEY(ns, kind, key));
             PRAGMA user_version = 1;",
        )
        .map_err(err)?;
        let reader = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        reader
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        let checkpointer = Connection::open(path).map_err(err)?;
        configure(&checkpointer).map_err(err)?;
        checkpointer
            .pragma_update(None, "journal_size_limit", wal_limit as i64)
            .map_err(err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let wal = std::path::PathBuf::from(wal);
        thread::Builder::new()
            .name("weft-checkpoint".into())
            .spawn(move || {
                while !s.load(Ordering::SeqCst) {
                    thread::sleep(std::time::Duration::from_millis(200));
                    // PASSIVE copies what it can without blocking the writer. Under steady
                    // writes it never catches up with the WAL's end, so the WAL would never
                    // restart: past the limit, TRUNCATE waits for the writer's current
                    // transaction, copies everything and empties the file.
                    let big = std::fs::metadata(&wal).is_ok_and(|m| m.len() > wal_limit);
                    let mode = if big { "TRUNCATE" } else { "PASSIVE" };
                    let _ = checkpointer.query_row(
                        &format!("PRAGMA wal_checkpoint({mode})"),
                        [],
                        |_| Ok(()),
                    );
                }
            })
            .map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel::<Job>();
        let pending_effects = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(Mutex::new(None));
        let (p, f) = (pending_effects.clone(), failed.clone());
        let (durable_tx, durable_seq) = tokio::sync::watch::channel(0u64);
        let handle = thread::Builder::new()
            .name("weft-store".into())
            .spawn(move || writer(w, rx, p, f, durable_tx))
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(SqliteStore {
            tx: Mutex::new(Some(tx)),
            effect_seq: AtomicU64::new(0),
            durable_seq,
            pending_effects,
            failed,
            reader: Mutex::new(reader),
            writer: Mutex::new(Some(handle)),
            stop,
        }))
    }

    /// Every record of a namespace, except the kinds in `skip` (e.g. large blobs).
    pub fn load(&self, ns: &str, skip: &[&str]) -> Result<Vec<(String, String, Vec<u8>)>, String> {
        let c = self.reader.lock().expect("reader lock");
        let mut st = c
            .prepare("SELECT kind, key, value FROM records WHERE ns = ?1")
            .map_err(|e| e.to_string())?;
        let rows = st
            .query_map(params![ns], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                ))
            })
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for row in rows {
            let row = row.map_err(|e| e.to_string())?;
            if !skip.contains(&row.0.as_str()) {
                out.push(row);
            }
        }
        Ok(out)
    }

    /// Every record of these kinds of a namespace (one index range per kind, so records of
    /// other kinds — e.g. a million frames — are never read).
    pub fn load_kinds(
        &self,
        ns: &str,
        kinds: &[&str],
    ) -> Result<Vec<(String, String, Vec<u8>)>, String> {
        let c = self.reader.lock().expect("reader lock");
        let mut st = c
            .prepare_cached("SELECT key, value FROM records WHERE ns = ?1 AND kind = ?2")
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for kind in kinds {
            let rows = st
                .query_map(params![ns, kind], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
                })
                .map_err(|e| e.to_string())?;
            for row in rows {
                let (key, value) = row.map_err(|e| e.to_string())?;
                out.push(((*kind).to_owned(), key, value));
            }
        }
        Ok(out)
    }

    /// Up to `limit` records of `(ns, kind)` with keys after `after`, in key order (a cursor
    /// for background compaction).
    pub fn scan(
        &self,
        ns: &str,
        kind: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, String> {
        let c = self.reader.lock().expect("reader lock");
        let mut st = c
            .prepare_cached(
                "SELECT key, value FROM records WHERE ns = ?1 AND kind = ?2 AND key > ?3 ORDER BY key LIMIT ?4",
            )
            .map_err(|e| e.to_string())?;
        let rows = st
            .query_map(params![ns, kind, after, limit as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(|e| e.to_string())?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())
    }

    /// One record's value.
    pub fn get(&self, ns: &str, kind: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        let c = self.reader.lock().expect("reader lock");
        let mut st = c
            .prepare_cached("SELECT value FROM records WHERE ns = ?1 AND kind = ?2 AND key = ?3")
            .map_err(|e| e.to_string())?;
        let mut rows = st
            .query(params![ns, kind, key])
            .map_err(|e| e.to_string())?;
        match rows.next().map_err(|e| e.to_string())? {
            Some(r) => Ok(Some(r.get(0).map_err(|e| e.to_string())?)),
            None => Ok(None),
        }
    }

    fn send(&self, job: Job) -> Result<(), String> {
        match self
            .tx
            .lock()
            .expect("store lock")
            .as_ref()
            .map(|tx| tx.send(job))
        {
            Some(Ok(())) => Ok(()),
            _ => Err("the store is closed".into()),
        }
    }

    /// A ticket for "every effect queued so far is durable".
    fn after_effects(&self) -> Ticket {
        if self.pending_effects.load(Ordering::SeqCst) == 0 {
            return Ticket(Ok(None));
        }
        let (done, rx) = tokio::sync::oneshot::channel();
        Ticket(self.send(Job::Barrier(done)).map(|()| Some(rx)))
    }

    /// Queues a batch whose answer must wait until it is durable (every batch a later request
    /// may name): [`SqliteStore::effect`] without its sequence number.
    pub fn write(&self, puts: Vec<Put>) -> Ticket {
        self.effect(puts).0
    }

    /// A ticket for "every answered batch queued so far is durable" (for reads).
    pub fn barrier(&self) -> Ticket {
        self.audit(vec![], true)
    }

    /// Queues a batch nobody waits for (retention deletions).
    pub fn background(&self, puts: Vec<Put>) {
        let _ = self.audit(puts, false);
    }

    /// Queues an effect batch; its ticket resolves once it is fsynced. Submit batches in the
    /// order they were produced (i.e. while holding the lock of the state that produced them).
    /// Returns the batch's effect sequence number (0 for an empty batch).
    pub fn effect(&self, puts: Vec<Put>) -> (Ticket, u64) {
        if let Some(e) = self.failure() {
            return (Ticket(Err(e)), 0);
        }
        if puts.is_empty() {
            return (self.after_effects(), 0);
        }
        let (done, rx) = tokio::sync::oneshot::channel();
        self.pending_effects.fetch_add(1, Ordering::SeqCst);
        let seq = self.effect_seq.fetch_add(1, Ordering::SeqCst) + 1;
        (
            Ticket(
                self.send(Job::Write {
                    puts,
                    effect: Some(seq),
                    done: Some(done),
                })
                .map(|()| Some(rx)),
            ),
            seq,
        )
    }

    /// Waits until effect batch `seq` (and every earlier one) is durable.
    pub async fn effect_durable(&self, seq: u64) -> Result<(), String> {
        if *self.durable_seq.borrow() >= seq {
            return Ok(());
        }
        let mut rx = self.durable_seq.clone();
        tokio::select! {
            r = rx.wait_for(|d| *d >= seq) => r.map(|_| ()).map_err(|_| "the store writer stopped".to_owned()),
            // A failed writer never reaches `seq`: report its failure instead of waiting.
            () = async { loop {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                if self.failure().is_some() { break; }
            } } => Err(self.failure().unwrap_or_default()),
        }
    }

    /// Queues an audit batch (not waited for). The ticket covers every earlier effect when
    /// `wait` is true; otherwise it is immediately ready.
    pub fn audit(&self, puts: Vec<Put>, wait: bool) -> Ticket {
        if let Some(e) = self.failure() {
            return Ticket(Err(e));
        }
        if !puts.is_empty()
            && let Err(e) = self.send(Job::Write {
                puts,
                effect: None,
                done: None,
            })
        {
            return Ticket(Err(e));
        }
        if wait {
            self.after_effects()
        } else {
            Ticket(Ok(None))
        }
    }

    /// The failure that stopped the writer, if any (the server must then refuse work).
    pub fn failure(&self) -> Option<String> {
        self.failed.lock().expect("store lock").clone()
    }

    /// Flushes every queued batch and stops the writer and the checkpointer.
    pub fn close(&self) {
        self.tx.lock().expect("store lock").take();
        if let Some(h) = self.writer.lock().expect("store lock").take() {
            let _ = h.join();
        }
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.close();
    }
}

fn writer(
    mut c: Connection,
    rx: mpsc::Receiver<Job>,
    pending_effects: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
    durable: tokio::sync::watch::Sender<u64>,
) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < 4096 {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let effects = jobs
            .iter()
            .filter(|j| {
                matches!(
                    j,
                    Job::Write {
                        effect: Some(_),
                        ..
                    }
                )
            })
            .count() as u64;
        let top = jobs
            .iter()
            .filter_map(|j| match j {
                Job::Write {
                    effect: Some(s), ..
                } => Some(*s),
                _ => None,
            })
            .max();
        let any_write = jobs.iter().any(|j| matches!(j, Job::Write { .. }));
        let result = if !any_write {
            Ok(())
        } else {
            (|| -> rusqlite::Result<()> {
                let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                {
                    let mut st = tx.prepare_cached(
                        "INSERT OR REPLACE INTO records(ns, kind, key, value) VALUES (?1, ?2, ?3, ?4)",
                    )?;
                    let mut del = tx.prepare_cached(
                        "DELETE FROM records WHERE ns = ?1 AND kind = ?2 AND key = ?3",
                    )?;
                    for j in &jobs {
                        if let Job::Write { puts, .. } = j {
                            for p in puts {
                                if p.value.is_empty() {
                                    del.execute(params![p.ns, p.kind, p.key])?;
                                } else {
                                    st.execute(params![p.ns, p.kind, p.key, p.value])?;
                                }
                            }
                        }
                    }
                }
                tx.commit()
            })()
            .map_err(|e| format!("storage failure: {e}"))
        };
        if let Err(e) = &result {
            eprintln!("weft serve: {e}; refusing further work");
            *failed.lock().expect("store lock") = Some(e.clone());
        }
        pending_effects.fetch_sub(effects, Ordering::SeqCst);
        if let (Ok(()), Some(top)) = (&result, top) {
            durable.send_replace(top);
        }
        for j in jobs {
            match j {
                Job::Write {
                    done: Some(done), ..
                }
                | Job::Barrier(done) => {
                    let _ = done.send(result.clone());
                }
                Job::Write { done: None, .. } => {}
            }
        }
        if result.is_err() {
            return;
        }
    }
    let _ = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(kind: &'static str, key: &str) -> Put {
        Put {
            ns: "t",
            kind,
            key: key.into(),
            value: key.as_bytes().to_vec(),
        }
    }

    #[tokio::test]
    async fn effects_are_durable_when_answered_and_audit_records_precede_them() {
        let dir = std::env::temp_dir().join(format!("weft-store-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = SqliteStore::open(&dir.join("db.sqlite3")).unwrap();
        assert!(
            store
                .audit(vec![put("frame", "f1")], false)
                .durable()
                .await
                .is_ok()
        );
        let (ticket, seq) = store.effect(vec![put("receipt", "r1")]);
        assert_eq!(seq, 1);
        ticket.durable().await.unwrap();
        // A separate connection sees both: the audit record was committed no later.
        assert_eq!(
            store.get("t", "receipt", "r1").unwrap().as_deref(),
            Some(&b"r1"[..])
        );
        assert_eq!(
            store.get("t", "frame", "f1").unwrap().as_deref(),
            Some(&b"f1"[..])
        );
        store.effect_durable(1).await.unwrap();
        let (t2, seq2) = store.effect(vec![put("receipt", "r2")]);
        store.effect_durable(seq2).await.unwrap();
        assert_eq!(
            store.get("t", "receipt", "r2").unwrap().as_deref(),
            Some(&b"r2"[..])
        );
        t2.durable().await.unwrap();
        store.close();
        let reopened = SqliteStore::open(&dir.join("db.sqlite3")).unwrap();
        assert_eq!(reopened.load("t", &[]).unwrap().len(), 3);
        reopened.close();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn deletes_apply_and_the_wal_stays_bounded_while_running() {
        let dir = std::env::temp_dir().join(format!("weft-store-wal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("db.sqlite3");
        let wal = dir.join("db.sqlite3-wal");
        let limit = 1024 * 1024;
        let store = SqliteStore::open_with_wal_limit(&db, limit).unwrap();
        let mut largest = 0;
        // 24 MiB of writes (each batch replaces the previous ones' records) in 96 fsyncs.
        for i in 0..96 {
            let puts = (0..4)
                .map(|j| Put {
                    ns: "t",
                    kind: "frame",
                    key: format!("k{j}"),
                    value: vec![b'a' + (i % 26) as u8; 64 * 1024],
                })
                .collect();
            store.write(puts).durable().await.unwrap();
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
            if i % 8 == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(60)).await;
            }
        }
        // The checkpointer truncates past the limit while writes go on.
        assert!(largest < 8 * limit, "the WAL reached {largest} bytes");
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        let now = std::fs::metadata(&wal).map_or(0, |m| m.len());
        assert!(now <= limit, "the WAL is {now} bytes after a quiet moment");
        // An empty value deletes; a background batch is ordered before later reads.
        store.background(vec![Put {
            ns: "t",
            kind: "frame",
            key: "k1".into(),
            value: vec![],
        }]);
        // Nobody waits for a background batch, but a later batch is durable only after it.
        store
            .write(vec![Put {
                ns: "t",
                kind: "meta",
                key: "after".into(),
                value: b"1".to_vec(),
            }])
            .durable()
            .await
            .unwrap();
        assert!(store.get("t", "frame", "k1").unwrap().is_none());
        let rows = store.scan("t", "frame", "", 10).unwrap();
        let keys: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["k0", "k2", "k3"]);
        assert_eq!(store.scan("t", "frame", "k2", 10).unwrap().len(), 1);
        store.close();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
