//! The SQLite store behind `weft serve`: a durable `(namespace, kind, key) -> value` table
//! written by one thread with group commit.
//!
//! Capabilities hand it the write batches their core emits, in order, and wait until the batch
//! is durable before answering. Durability settings: WAL journal, `synchronous=FULL` (each
//! group-commit transaction is fsynced before any of its waiters is released), one writer
//! connection; blob reads use a second, read-only connection.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
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

type Done = tokio::sync::oneshot::Sender<Result<(), String>>;

enum Job {
    /// Persist these records, then report.
    Write(Vec<Put>, Done),
    /// Report once everything queued before is durable.
    Barrier(Done),
}

/// A claim on the durability of a submitted batch (and of every batch before it).
pub struct Ticket(Result<Option<tokio::sync::oneshot::Receiver<Result<(), String>>>, String>);

impl Ticket {
    /// Waits until the batch is durable.
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

/// The durable store.
pub struct Store {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    /// Write jobs queued and not yet committed.
    pending: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
    reader: Mutex<Connection>,
    writer: Mutex<Option<thread::JoinHandle<()>>>,
}

/// The pragmas every connection uses; reported by `weft serve` and the benchmark.
pub const DURABILITY: &str = "journal_mode=WAL, synchronous=FULL (every group commit is fsynced before its requests are answered)";

fn configure(c: &Connection) -> rusqlite::Result<()> {
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}

impl Store {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<Arc<Store>, String> {
        let w = Connection::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        configure(&w).map_err(|e| format!("{}: {e}", path.display()))?;
        w.execute_batch(
            "CREATE TABLE IF NOT EXISTS records(
                ns TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
                PRIMARY KEY(ns, kind, key));
             PRAGMA user_version = 1;",
        )
        .map_err(|e| e.to_string())?;
        let reader = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| e.to_string())?;
        reader
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel::<Job>();
        let pending = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(Mutex::new(None));
        let (p, f) = (pending.clone(), failed.clone());
        let handle = thread::Builder::new()
            .name("weft-store".into())
            .spawn(move || writer(w, rx, p, f))
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(Store {
            tx: Mutex::new(Some(tx)),
            pending,
            failed,
            reader: Mutex::new(reader),
            writer: Mutex::new(Some(handle)),
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

    /// Queues a batch. Call in the order the batches were produced (i.e. while holding the
    /// lock of the state that produced them). An empty batch yields a ticket that is durable
    /// once every earlier batch is, so an answer is never ahead of the disk.
    pub fn submit(&self, puts: Vec<Put>) -> Ticket {
        if let Some(e) = self.failure() {
            return Ticket(Err(e));
        }
        if puts.is_empty() && self.pending.load(Ordering::SeqCst) == 0 {
            return Ticket(Ok(None));
        }
        let (done, rx) = tokio::sync::oneshot::channel();
        let job = if puts.is_empty() {
            Job::Barrier(done)
        } else {
            self.pending.fetch_add(1, Ordering::SeqCst);
            Job::Write(puts, done)
        };
        match self
            .tx
            .lock()
            .expect("store lock")
            .as_ref()
            .map(|tx| tx.send(job))
        {
            Some(Ok(())) => Ticket(Ok(Some(rx))),
            _ => Ticket(Err("the store is closed".into())),
        }
    }

    /// The failure that stopped the writer, if any (the server must then refuse work).
    pub fn failure(&self) -> Option<String> {
        self.failed.lock().expect("store lock").clone()
    }

    /// Flushes every queued batch and stops the writer.
    pub fn close(&self) {
        self.tx.lock().expect("store lock").take();
        if let Some(h) = self.writer.lock().expect("store lock").take() {
            let _ = h.join();
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.close();
    }
}

fn writer(
    mut c: Connection,
    rx: mpsc::Receiver<Job>,
    pending: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < 4096 {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let writes = jobs.iter().filter(|j| matches!(j, Job::Write(..))).count() as u64;
        let result = if writes == 0 {
            Ok(())
        } else {
            (|| -> rusqlite::Result<()> {
                let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                {
                    let mut st = tx.prepare_cached(
                        "INSERT OR REPLACE INTO records(ns, kind, key, value) VALUES (?1, ?2, ?3, ?4)",
                    )?;
                    for j in &jobs {
                        if let Job::Write(puts, _) = j {
                            for p in puts {
                                st.execute(params![p.ns, p.kind, p.key, p.value])?;
                            }
                        }
                    }
                }
                tx.commit()
            })()
            .map_err(|e| format!("storage failure: {e}"))
        };
        pending.fetch_sub(writes, Ordering::SeqCst);
        if let Err(e) = &result {
            eprintln!("weft serve: {e}; refusing further work");
            *failed.lock().expect("store lock") = Some(e.clone());
        }
        for j in jobs {
            let (Job::Write(_, done) | Job::Barrier(done)) = j;
            let _ = done.send(result.clone());
        }
        if result.is_err() {
            return;
        }
    }
    let _ = c.pragma_update(None, "wal_checkpoint", "TRUNCATE");
}
